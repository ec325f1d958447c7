package golden_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	slackapi "github.com/slack-go/slack"

	"github.com/sglang-watchdog/sglang-watchdog/internal/runbook"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagelint"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagerduty"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/slack"
)

var update = flag.Bool("update", false, "rewrite the golden pages in testdata/pages")

// pageEvents is one class's file in testdata/events.
type pageEvents struct {
	Trigger notify.Event `json:"trigger"`
	Resolve notify.Event `json:"resolve"`
}

// page is one event rendered by every integration, plus the human text of
// each rendering (what a person reads) for the checks.
type page struct {
	ev notify.Event
	// files: golden file suffix -> content.
	files map[string][]byte
	// read: integration -> the text a person reads there.
	read map[string]string
	// title: integration -> the page's title line there.
	title map[string]string
}

func render(t *testing.T, ev notify.Event) page {
	t.Helper()
	p := page{ev: ev, files: map[string][]byte{}, read: map[string]string{}, title: map[string]string{}}

	logText := notify.FormatText(ev)
	p.files["log.txt"] = []byte(logText)
	p.read["log"] = logText
	p.title["log"] = strings.SplitN(logText, "\n", 2)[0]

	blocks := slack.Blocks(ev)
	fallback := slack.FallbackText(ev)
	p.files["slack.json"] = indentJSON(t, map[string]any{"text": fallback, "blocks": blocks})
	var texts []string
	for _, b := range blocks {
		texts = append(texts, blockTexts(b)...)
	}
	p.read["slack"] = strings.Join(texts, "\n")
	if len(blocks) > 1 {
		if h, ok := blocks[0].(*slackapi.HeaderBlock); ok {
			p.title["slack"] = h.Text.Text
		}
		// A title longer than the header allows follows in full, first
		// thing in the body.
		if s, ok := blocks[1].(*slackapi.SectionBlock); ok && strings.HasSuffix(p.title["slack"], "…(truncated)") {
			p.title["slack"] = strings.Trim(strings.SplitN(s.Text.Text, "\n", 2)[0], "*")
		}
	}

	pd := pagerduty.BuildEvent(ev, "<routing_key>")
	p.files["pagerduty.json"] = indentJSON(t, pd)
	var details any
	if err := json.Unmarshal(indentJSON(t, pd.Payload.Details), &details); err != nil {
		t.Fatal(err)
	}
	var links []string
	for _, l := range pd.Links {
		if m, ok := l.(map[string]string); ok {
			links = append(links, m["href"])
		}
	}
	p.read["pagerduty"] = pd.Payload.Summary + "\n" + strings.Join(stringsIn(details), "\n") + "\n" + strings.Join(links, "\n")
	p.title["pagerduty"] = pd.Payload.Summary
	return p
}

func indentJSON(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func blockTexts(b slackapi.Block) []string {
	var out []string
	switch b := b.(type) {
	case *slackapi.HeaderBlock:
		out = append(out, b.Text.Text)
	case *slackapi.SectionBlock:
		if b.Text != nil {
			out = append(out, b.Text.Text)
		}
		for _, f := range b.Fields {
			out = append(out, f.Text)
		}
	case *slackapi.ContextBlock:
		for _, e := range b.ContextElements.Elements {
			if t, ok := e.(*slackapi.TextBlockObject); ok {
				out = append(out, t.Text)
			}
		}
	}
	return out
}

// stringsIn lists every string in a decoded JSON value, in key order.
func stringsIn(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, stringsIn(x)...)
		}
		return out
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []string
		for _, k := range keys {
			out = append(out, stringsIn(v[k])...)
		}
		return out
	}
	return nil
}

func TestGoldenPages(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "events", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no page events in testdata/events (%v): run go test ./pkg/detect -run TestGoldenPageEvents -update-pages", err)
	}
	for _, path := range files {
		class := strings.TrimSuffix(filepath.Base(path), ".json")
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var evs pageEvents
		if err := json.Unmarshal(raw, &evs); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, p := range pagelint.CheckIncident([]notify.Event{evs.Trigger, evs.Resolve}, pagelint.Options{Flag: runbook.KnownFlag}) {
			t.Errorf("%s: %s", class, p)
		}
		for _, step := range []struct {
			kind string
			ev   notify.Event
		}{{"trigger", evs.Trigger}, {"resolve", evs.Resolve}} {
			t.Run(class+"/"+step.kind, func(t *testing.T) {
				p := render(t, step.ev)
				for suffix, got := range p.files {
					golden(t, filepath.Join("testdata", "pages", class+"."+step.kind+"."+suffix), got)
				}
				for _, problem := range checkPage(p) {
					t.Error(problem)
				}
			})
		}
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/notify/golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test ./pkg/notify/golden -update and review the diff):\n%s", path, got)
	}
}

var (
	notAvailable = regexp.MustCompile(`(?i)\bn/a\b`)
	// A usage or hit rate written as a fraction ("KV usage 0.545",
	// "collapsed to 0.34") where pages write percent.
	fractionOfPercent = regexp.MustCompile(`(?i)(usage|hit rate|collapsed to|share)[^.;:%\n(]{0,24}?\b(0\.\d+|1\.0+)\b([^\d%x]|$)`)
	// Seconds glued to a decimal number ("3.98s"), where pages write "3.98 s".
	gluedSeconds = regexp.MustCompile(`\b\d+\.\d+s\b`)
	// A fraction with no percent sign: "0.9", ">= 0.95".
	bareFraction = regexp.MustCompile(`\b0\.\d+\b([^%\dx]|$)`)
	// A decimal number, to count its significant digits.
	decimal     = regexp.MustCompile(`\b\d+\.\d+`)
	sentenceEnd = regexp.MustCompile(`[.!?](\s+|$)|\n`)
)

// checkPage lists what a page gets wrong, per integration.
func checkPage(p page) []string {
	var problems []string
	bad := func(where, format string, args ...any) {
		problems = append(problems, where+": "+fmt.Sprintf(format, args...))
	}
	ev := p.ev
	resolved := notify.Resolved(ev)
	headline := notify.Headline(ev)
	if strings.TrimSpace(ev.Headline) == "" {
		bad("event", "no headline")
	}
	seen := map[string]bool{}
	for _, n := range decimal.FindAllString(headline, -1) {
		if seen[n] {
			bad("event", "headline gives %s twice: %q", n, headline)
		}
		seen[n] = true
	}
	if strings.Count(headline, ev.Class) > 0 || strings.Contains(headline, ev.Class+" on ") {
		bad("event", "headline names the class id %s instead of saying what happens: %q", ev.Class, headline)
	}
	for _, where := range []string{"log", "slack", "pagerduty"} {
		text, title := p.read[where], p.title[where]
		// The title: the headline (the header may be cut at Slack's limit).
		prefix := headline
		if len([]rune(prefix)) > 60 {
			prefix = string([]rune(prefix)[:60])
		}
		if !strings.Contains(title, slack.Escape(prefix)) && !strings.Contains(title, prefix) {
			bad(where, "title %q does not carry the headline %q", title, headline)
		}
		if strings.Count(title, ev.Class) > 0 {
			bad(where, "title repeats the class id: %q", title)
		}
		if m := notAvailable.FindString(text); m != "" {
			bad(where, "prints %q", m)
		}
		for _, loc := range fractionOfPercent.FindAllStringIndex(text, -1) {
			if loc[0] > 0 && text[loc[0]-1] == '_' {
				continue // a raw metric quoted by name: token_usage=0.5
			}
			bad(where, "a ratio written as a fraction, not percent: %q", strings.TrimSpace(text[loc[0]:loc[1]]))
		}
		for _, m := range gluedSeconds.FindAllString(text, -1) {
			bad(where, "seconds written %q, not \"<n> s\"", m)
		}
		for _, m := range decimal.FindAllString(text, -1) {
			if digits := strings.TrimLeft(strings.Replace(m, ".", "", 1), "0"); len(digits) > 3 {
				bad(where, "%q has more than three significant digits", m)
			}
		}
		for s, n := range sentences(text) {
			if n > 1 {
				bad(where, "says %d times: %q", n, s)
			}
		}
		for _, u := range []string{ev.RunbookURL, ev.AlertURL} {
			if u == "" {
				bad("event", "lacks a runbook or alert link")
				continue
			}
			if !strings.Contains(text, strings.ReplaceAll(u, "&", "&amp;")) && !strings.Contains(text, u) {
				bad(where, "lacks the link %s", u)
			}
		}
		if tr := strings.TrimSpace(ev.Triage); tr != "" && !resolved {
			key := string([]rune(tr)[:min(len([]rune(tr)), 50)])
			n := strings.Count(text, key)
			if esc := slack.Escape(key); esc != key {
				n += strings.Count(text, esc)
			}
			if n != 1 {
				bad(where, "the triage appears %d times, want once", n)
			}
		}
		if resolved {
			if !strings.Contains(title, "RESOLVED") || !(strings.Contains(title, " over") || strings.Contains(title, "recovered")) {
				bad(where, "resolve title does not read as recovered: %q", title)
			}
			for _, r := range notify.Recoveries(ev) {
				if r.Summary && r.Peak != nil && !strings.Contains(title, FormatPeak(r)) {
					bad(where, "resolve title lacks the peak of %s (%s): %q", r.Name, FormatPeak(r), title)
				}
			}
			for _, r := range notify.Recoveries(ev) {
				if r.Now != nil && r.Peak != nil && !strings.Contains(text, r.Value()) {
					bad(where, "resolve does not show %s recovered beside its peak (%q)", r.Name, r.Value())
				}
			}
			if len(notify.Shown(ev.Recovered)) == 0 {
				bad("event", "resolve carries no recovered values")
			}
			if len(ev.Emergency) > 0 && strings.Contains(text, ev.Emergency[0]) {
				bad(where, "resolve still tells on-call what to do now")
			}
		}
	}
	for _, f := range notify.Shown(ev.Evidence) {
		if r := notify.Rule(f); f.Unit == "ratio" && bareFraction.MatchString(r) {
			bad("event", "%s is shown in percent but its rule %q is a fraction", f.Name, r)
		}
	}
	if !resolved {
		problems = append(problems, triageAgrees(ev)...)
	}
	return problems
}

// FormatPeak is a peak value as a title shows it.
func FormatPeak(r notify.Recovery) string { return notify.FormatValue(r.Peak.Value, r.Peak.Unit) }

// sentences counts the sentences of text worth comparing (long enough to
// be a statement, not a label or a number).
func sentences(text string) map[string]int {
	out := map[string]int{}
	for _, s := range sentenceEnd.Split(text, -1) {
		s = strings.Trim(strings.TrimSpace(s), "*_`")
		if len([]rune(s)) < 40 {
			continue
		}
		out[s]++
	}
	return out
}

// triageAgrees checks that the triage line does not contradict the
// evidence: a KV pool the evidence shows full is not "room left unused".
func triageAgrees(ev notify.Event) []string {
	kvFull := false
	for _, f := range ev.Evidence {
		name := strings.ToLower(f.Name)
		if strings.Contains(name, "kv cache usage") && f.Unit == "ratio" && f.Value >= 0.9 {
			kvFull = true
		}
	}
	if kvFull && strings.Contains(ev.Triage, "leaves room unused") {
		return []string{fmt.Sprintf("event: the evidence shows the KV pool full, the triage says room is left unused: %q", ev.Triage)}
	}
	return nil
}

// The README quotes a headline and shows a page in its log form. Both are
// the storm's golden page, the page shortened only where a line ends in
// "..." or an evidence line is left out, so the user's guide cannot show
// wording the code no longer sends.
func TestREADMEPageIsTheGoldenPage(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "A page, in its log form:\n\n```\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the README has no page in its log form")
	}
	page, err := os.ReadFile(filepath.Join("testdata", "pages", "preempt_storm.trigger.log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	golden := strings.Split(string(page), "\n")
	// Its opening quotes the same page's headline.
	_, felt, _ := strings.Cut(string(readme), "**what users feel**: \"")
	felt, _, _ = strings.Cut(felt, "\";")
	if headline := strings.TrimSuffix(strings.TrimPrefix(golden[0], "=== [CRITICAL] "), " ==="); strings.Join(strings.Fields(felt), " ") != headline {
		t.Errorf("the README quotes the headline %q; the page sends %q", felt, headline)
	}
	next := 0 // README lines follow the page's order
	for _, line := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		if strings.TrimSpace(line) == "..." {
			continue
		}
		want, cut := strings.CutSuffix(line, " ...")
		at := slices.IndexFunc(golden[next:], func(g string) bool { return g == want || (cut && strings.HasPrefix(g, want)) })
		if at < 0 {
			t.Errorf("the README's page line is not in the golden page (in order):\n%s", line)
			continue
		}
		next += at + 1
	}
}
