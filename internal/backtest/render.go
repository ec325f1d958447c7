package backtest

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Routes says which integrations an event would reach
// (notify.RouteConfig.Match); nil reports none.
type Routes func(ev notify.Event) []string

// Report is a replay's result as printed: JSON field names are stable.
type Report struct {
	First   time.Time     `json:"first_round"`
	Last    time.Time     `json:"last_round"`
	Rounds  int           `json:"rounds"`
	Scrapes int           `json:"scrapes"`
	Pages   int           `json:"pages"` // triggers that would reach PagerDuty
	Events  []ReportEvent `json:"events"`
}

// ReportEvent is one event of the timeline.
type ReportEvent struct {
	At          time.Time       `json:"at"`
	Kind        string          `json:"kind"`
	Severity    detect.Severity `json:"severity"`
	Class       string          `json:"class"`
	Replica     string          `json:"replica"`
	Fingerprint string          `json:"fingerprint"`
	Seq         uint64          `json:"seq"`
	Headline    string          `json:"headline"`
	// Evidence are the numbers as a page shows them: "name: value
	// (baseline b; rule r)".
	Evidence []string `json:"evidence,omitempty"`
	// To are the integrations the routes would send it to (the log always
	// gets it).
	To []string `json:"to"`
}

// NewReport renders res; routes may be nil.
func NewReport(res Result, routes Routes) Report {
	r := Report{First: res.First, Last: res.Last, Rounds: res.Rounds, Scrapes: res.Scrapes, Events: []ReportEvent{}}
	for _, ev := range res.Events {
		re := ReportEvent{At: ev.At, Kind: string(ev.Kind), Severity: ev.Severity, Class: ev.Class, Replica: ev.Replica,
			Fingerprint: ev.Fingerprint, Seq: ev.Seq, Headline: notify.Headline(ev), To: []string{}}
		for _, f := range notify.Shown(ev.Evidence) {
			re.Evidence = append(re.Evidence, notify.FormatField(f))
		}
		if routes != nil {
			if to := routes(ev); to != nil {
				re.To = to
			}
		}
		if ev.Kind == notify.KindTrigger && slices.Contains(re.To, notify.IntegrationPagerDuty) {
			r.Pages++
		}
		r.Events = append(r.Events, re)
	}
	return r
}

// WriteJSON writes r as one indented JSON document.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // rules read "<= 0.5x baseline"
	return enc.Encode(r)
}

// WriteText writes r as a plain-text timeline, one event per line with
// its evidence indented below.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "backtest: %d rounds from %s to %s, %d scrapes: %d events, %d pages\n",
		r.Rounds, stamp(r.First), stamp(r.Last), r.Scrapes, len(r.Events), r.Pages)
	for _, e := range r.Events {
		fmt.Fprintf(&b, "%s %-7s %-8s %-18s %s  %s%s\n", stamp(e.At), e.Kind, e.Severity, e.Class, e.Replica, e.Headline, to(e.To))
		for _, f := range e.Evidence {
			fmt.Fprintf(&b, "      %s\n", f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes r as a Markdown table (for a bug report or a
// review of a threshold change).
func (r Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Backtest: %s to %s\n\n%d rounds, %d scrapes: %d events, %d pages.\n\n",
		stamp(r.First), stamp(r.Last), r.Rounds, r.Scrapes, len(r.Events), r.Pages)
	if len(r.Events) == 0 {
		b.WriteString("Nothing would have been sent.\n")
	} else {
		b.WriteString("| time | event | severity | class | replica | headline | evidence | to |\n|---|---|---|---|---|---|---|---|\n")
		for _, e := range r.Events {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", stamp(e.At), e.Kind, e.Severity, cell(e.Class), cell(e.Replica),
				cell(e.Headline), cell(strings.Join(e.Evidence, "; ")), cell(strings.Join(e.To, ", ")))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func to(names []string) string {
	if len(names) == 0 {
		return "  → log only"
	}
	return "  → " + strings.Join(names, ", ")
}

// cell escapes text from replicas (untrusted) for a Markdown table cell.
func cell(s string) string {
	r := strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ", "<", "&lt;", ">", "&gt;")
	return r.Replace(s)
}
