package incident

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// RunbookChecks returns a class's runbook as Markdown (runbook.Book's
// Markdown); the postmortem quotes its "What to look at next" section.
type RunbookChecks func(class string) (markdown string, ok bool)

// Postmortem writes the draft postmortem of a resolved incident as
// Markdown, following the runbooks' postmortem template: summary, impact,
// timeline, root-cause chain with its evidence, the runbook's next checks,
// action items and what the watchdog could not see. Every number comes
// from the journal's record.
func Postmortem(r Record, runbooks RunbookChecks) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	where := strings.Join(r.Replicas, ", ")
	if where == "" {
		where = r.Replica
	}
	p("# Incident: %s on %s\n\n", words(r.Class), md(where))
	p("_Draft written by sglang-watchdog from its incident journal (incident `%s`). Check every line before publishing; add what people did and decided._\n\n", r.ID)

	p("## Summary\n\n")
	p("%s\n\n", md(r.Headline))
	p("A %s **%s** incident", r.Severity, r.Class)
	if r.Fleet {
		p(" across the %s fleet", md(r.Model))
	} else if r.Model != "" {
		p(" (model %s)", md(r.Model))
	}
	p(": first found %s, fired %s, resolved %s.\n\n", stamp(r.OpenedAt), stamp(r.FiredAt), stamp(r.ResolvedAt))
	if r.Diagnosis != "" {
		p("%s\n\n", md(r.Diagnosis))
	}

	p("## Impact\n\n")
	p("- Duration: %s from the first finding to the resolve", notify.FormatDuration(r.ResolvedAt.Sub(r.OpenedAt)))
	if !r.FiredAt.IsZero() {
		p(", %s of it paging", notify.FormatDuration(r.ResolvedAt.Sub(r.FiredAt)))
	}
	p(".\n")
	p("- Replicas affected: %d (%s).\n", len(r.Replicas), md(where))
	impactLine(&b, r, ImpactQueued, "Queued requests")
	impactLine(&b, r, ImpactRunning, "Running requests")
	if s, ok := r.impact(ImpactAborts); ok {
		// A peak of zero at some moment reads as an event; none is none.
		if pk := peak(s.Points); pk.Value > 0 {
			p("- Aborted requests: peak %s/s at %s; about %s aborted during the incident (the per-round rate integrated over time).\n",
				num(pk.Value), clock(pk.At), num(integral(s.Points)))
		} else {
			p("- Aborted requests: none seen during the incident.\n")
		}
	} else {
		p("- Aborted requests: not exposed by the replicas.\n")
	}
	impactLine(&b, r, ImpactTTFT, "Time to first token p99")
	impactLine(&b, r, ImpactITL, "Inter-token latency p99")
	// A page's peak (the detector's evidence, over the detector's range)
	// can differ from these: the reader is told which is which.
	p("- These are the replicas' snapshots, round by round. Where a detector's evidence reads the same quantity, the pages and the root-cause table give its number, read over its own range, which can differ.\n")
	for _, bs := range r.Budgets {
		consumed, ok := bs.Consumed()
		if !ok || bs.Bad <= 0 {
			continue
		}
		whose := "on its replicas"
		if r.Class == correlate.SLOBurn {
			whose = "of the model"
		}
		// A memory younger than the period (a restart without history)
		// has the budget of what it holds: the share says so up front,
		// in the words of the burn pages.
		budget, record := "the "+notify.FormatDuration(bs.Period)+" error budget", ""
		if bs.Held < bs.Period {
			budget, record = "the error budget", "; "+notify.FormatDuration(bs.Held)+" of its "+notify.FormatDuration(bs.Period)+" period on record"
		}
		p("- Error budget consumed: %s of %s of the SLO %s (%s%s): %s of %s events %s outside it during the incident.\n",
			pct(consumed), budget, md(strconv.Quote(bs.Objective)), md(bs.Title), record, num(bs.Bad), num(bs.Total), whose)
	}
	p("\n")

	p("## Timeline (UTC)\n\n| Time | Event |\n|---|---|\n")
	for _, e := range r.Timeline {
		p("| %s | %s |\n", e.At.UTC().Format("2006-01-02 15:04:05"), cell(e.Text))
	}
	p("\n")

	p("## Root cause\n\n")
	p("Causal chain: %s.\n\n", chain(r.Chain))
	if len(r.Signals) > 0 {
		p("| Evidence | At first finding | Worst | Baseline then | Limit then | Rule |\n|---|---|---|---|---|---|\n")
		for _, s := range r.Signals {
			if len(s.Points) == 0 {
				continue
			}
			first, pk := s.Points[0], worst(s)
			base := "—"
			if pk.HasBaseline {
				base = value(pk.Baseline, s.Unit)
			}
			limit := "—"
			if pk.HasLimit {
				limit = value(pk.Limit, s.Unit)
			}
			worstAt := value(pk.Value, s.Unit) + " at " + clock(pk.At)
			if s.SampleSize {
				worstAt = "— (the sample the rule rests on)"
			}
			p("| %s | %s | %s | %s | %s | %s |\n", cell(s.Name), value(first.Value, s.Unit),
				worstAt, base, limit, cell(s.Threshold))
		}
		p("\n")
	}
	if r.Triage != "" {
		p("Layer triage: %s\n\n", md(r.Triage))
	}

	p("## What the runbook says to check next\n\n")
	if section := nextChecks(r, runbooks); section != "" {
		p("%s\n\n", strings.TrimSpace(section))
	} else {
		p("The runbook has no such section for %s.\n\n", r.Class)
	}
	if r.Runbook != "" {
		p("Runbook: %s\n\n", r.Runbook)
	}

	p("## Action items\n\n")
	p("- [ ] Confirm the root cause above from the engine logs and the deploy history; correct this draft where it is wrong.\n")
	for _, step := range r.RootCause {
		p("- [ ] %s\n", md(step))
	}
	p("- [ ] Give every item an owner and a due date.\n\n")

	p("## What the watchdog could not see\n\n")
	for _, u := range r.Unseen {
		p("- %s\n", md(u))
	}
	if len(r.Unseen) == 0 {
		p("- Every replica of the incident was scraped in every round, and no metrics_blind finding was raised on them.\n")
	}
	p("- Client-side errors and retries, router and gateway logs, and the engines' own logs are outside the watchdog's view.\n")
	return b.String()
}

func (r Record) impact(name string) (Signal, bool) {
	for _, s := range r.Impact {
		if s.Name == name && len(s.Points) > 0 {
			return s, true
		}
	}
	return Signal{}, false
}

func impactLine(b *strings.Builder, r Record, name, label string) {
	s, ok := r.impact(name)
	if !ok {
		fmt.Fprintf(b, "- %s: not exposed by the replicas.\n", label)
		return
	}
	// The first point is the reference: the round before the incident,
	// else the first finding's, else (a replica that could not be read
	// then, down) the first read. A peak "at" a moment before the
	// incident began would read as its worst, and a value that never
	// rose above the reference has no peak.
	first, rest := s.Points[0], s.Points[1:]
	before := first.At.Before(r.OpenedAt)
	ref := "just before the incident"
	switch {
	case first.At.After(r.OpenedAt):
		ref = "when first read"
	case !before:
		ref = "at the first finding"
	}
	ref += " (" + clock(first.At) + ")"
	if before && len(rest) == 0 {
		fmt.Fprintf(b, "- %s: %s %s; not read during it.\n", label, value(first.Value, s.Unit), ref)
		return
	}
	if pk := peak(s.Points); pk.Value > first.Value {
		fmt.Fprintf(b, "- %s: peak %s at %s, against %s %s.\n", label, value(pk.Value, s.Unit), clock(pk.At), value(first.Value, s.Unit), ref)
		return
	}
	most := ""
	if before { // rest holds a point: the single-point case returned above
		if pk := peak(rest); pk.Value < first.Value {
			most = " (at most " + value(pk.Value, s.Unit) + ")"
		}
	}
	fmt.Fprintf(b, "- %s: %s %s, no higher during it%s.\n", label, value(first.Value, s.Unit), ref, most)
}

// worst is the signal's point furthest on the bad side: the lowest where
// lower is worse (detect.Evidence.LowerIsWorse), else the highest (the
// first of equals).
func worst(s Signal) Point {
	// A record saved before signals carried LowerIsWorse: from the rule.
	if !s.LowerIsWorse && !(detect.Evidence{Name: s.Name, Threshold: s.Threshold}).LowerIsWorse() {
		return peak(s.Points)
	}
	best := s.Points[0]
	for _, p := range s.Points[1:] {
		if p.Value < best.Value {
			best = p
		}
	}
	return best
}

// peak is the point with the highest value (the first of equals).
func peak(ps []Point) Point {
	best := ps[0]
	for _, p := range ps[1:] {
		if p.Value > best.Value {
			best = p
		}
	}
	return best
}

// integral is the area under a per-second rate (trapezoids between
// points).
func integral(ps []Point) float64 {
	var sum float64
	for i := 1; i < len(ps); i++ {
		sum += (ps[i].Value + ps[i-1].Value) / 2 * ps[i].At.Sub(ps[i-1].At).Seconds()
	}
	return sum
}

// nextChecks is the "What to look at next" section of the class's
// runbook (the fleet runbook for a fleet incident).
func nextChecks(r Record, runbooks RunbookChecks) string {
	if runbooks == nil {
		return ""
	}
	name := string(r.Class)
	if r.Fleet {
		name = "fleet"
	}
	page, ok := runbooks(name)
	if !ok {
		return ""
	}
	const heading = "\n## What to look at next\n"
	i := strings.Index(page, heading)
	if i < 0 {
		return ""
	}
	section := page[i+len(heading):]
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	return section
}

func words(c detect.Class) string { return strings.ReplaceAll(string(c), "_", " ") }

func chain(cs []detect.Class) string {
	if len(cs) == 0 {
		return "unknown"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = "`" + string(c) + "`"
	}
	if len(parts) == 1 {
		return parts[0] + " (no consequence joined)"
	}
	return parts[0] + " (cause) → " + strings.Join(parts[1:], " → ")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05") }

func num(v float64) string { return detect.FormatNumber(v) }

func pct(v float64) string { return detect.FormatNumber(100*v) + "%" }

// value is v in unit as every page prints it: shares in percent.
func value(v float64, unit string) string {
	if !notify.Finite(v) {
		return "—"
	}
	return notify.FormatValue(v, unit)
}

// md escapes text from replicas and detectors (model names, summaries)
// so it cannot open Markdown or HTML markup in the draft.
func md(s string) string {
	r := strings.NewReplacer("\\", "\\\\", "<", "&lt;", ">", "&gt;", "[", "\\[", "]", "\\]", "`", "\\`", "*", "\\*", "_", "\\_")
	return r.Replace(s)
}

// cell is md for a table cell.
func cell(s string) string { return strings.ReplaceAll(md(s), "|", "\\|") }

var postmortemMarkdown = goldmark.New(goldmark.WithExtensions(extension.Table, extension.TaskList))

var postmortemPage = template.Must(template.New("postmortem").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Postmortem draft: {{.ID}} — sglang-watchdog</title>
<style>body{font-family:system-ui,sans-serif;max-width:56rem;margin:2rem auto;padding:0 1rem;line-height:1.5}table{border-collapse:collapse}td,th{border:1px solid #999;padding:.2em .5em;text-align:left}code{background:rgba(127,127,127,.15);padding:0 .2em}@media (prefers-color-scheme:dark){body{background:#111;color:#eee}a{color:#8cf}}</style>
</head><body><p><a href="../{{.ID}}">Incident page</a> · <a href="postmortem.md">Markdown</a></p>
{{.Body}}</body></html>
`))

func (h *handler) resolved(w http.ResponseWriter, id string) (Record, bool) {
	rec, ok := h.rd.Incident(id)
	if !ok {
		notFound(w, id)
		return Record{}, false
	}
	if rec.Open() {
		http.Error(w, fmt.Sprintf("incident %q is still %s: its postmortem draft is written once it resolves", id, rec.State), http.StatusConflict)
		return Record{}, false
	}
	return rec, true
}

func (h *handler) postmortemMarkdown(w http.ResponseWriter, r *http.Request) {
	rec, ok := h.resolved(w, r.PathValue("id"))
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	w.Write([]byte(Postmortem(rec, h.runbooks)))
}

func (h *handler) postmortemHTML(w http.ResponseWriter, r *http.Request) {
	rec, ok := h.resolved(w, r.PathValue("id"))
	if !ok {
		return
	}
	var body bytes.Buffer
	// goldmark without html.WithUnsafe drops raw HTML, so nothing a
	// replica reported can become markup.
	if err := postmortemMarkdown.Convert([]byte(Postmortem(rec, h.runbooks)), &body); err != nil {
		http.Error(w, "rendering the postmortem failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	postmortemPage.Execute(w, struct {
		ID   string
		Body template.HTML
	}{rec.ID, template.HTML(body.String())})
}
