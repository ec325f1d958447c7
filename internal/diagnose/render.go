package diagnose

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// WriteJSON writes the report as one indented JSON document.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // thresholds read ">= 0.9", not "\u003e= 0.9"
	return enc.Encode(r)
}

// textWidth is where prose is wrapped; terminals are at least 80 wide.
const textWidth = 100

// WriteText writes the report for a human at a terminal: aligned columns,
// no colours.
func WriteText(w io.Writer, r *Report) error {
	p := &printer{w: w}
	p.f("watchdog diagnose: %d scrape(s) per target, %s apart (span %s), evaluated at %s\n",
		r.Samples, secs(r.Interval), secs(r.Span), r.At.UTC().Format(time.RFC3339))
	for _, t := range r.Targets {
		p.f("\n")
		writeTarget(p, t)
	}
	var blind []DetectorNote
	for _, n := range r.Detectors {
		if !n.Judged {
			blind = append(blind, n)
		}
	}
	if len(blind) > 0 {
		p.f("\nnot judged by a one-shot (no history, so no baselines):\n")
		for _, n := range blind {
			p.wrap("  ", fmt.Sprintf("%-16s ", n.Class), n.Note)
		}
	}
	verdict := "OK"
	switch {
	case r.Incident:
		verdict = "INCIDENT"
	case len(r.UnderPressure) > 0:
		verdict = "UNDER PRESSURE"
	}
	p.f("\n%s: %s\n", verdict, r.Summary)
	return p.err
}

func writeTarget(p *printer, t TargetReport) {
	head := t.Name
	if t.Name != t.Target {
		head += " (via " + t.Target + ")"
	}
	meta := []string{t.URL, t.Kind}
	if t.Model != "" {
		meta = append(meta, "model "+t.Model)
	}
	if t.EngineType != "" {
		meta = append(meta, t.EngineType)
	}
	p.f("== %s  %s\n", head, strings.Join(meta, "  "))

	if t.Failed > 0 || len(t.Errors) > 0 {
		p.f("  scrapes: %d of %d failed\n", t.Failed, t.Scrapes)
		for _, e := range t.Errors {
			p.wrap("    ", fmt.Sprintf("%s %s: ", e.At.UTC().Format("15:04:05"), e.Reason), e.Error)
			if e.Hint != "" {
				p.wrap("      ", "-> ", e.Hint)
			}
		}
	}

	if t.Failed < t.Scrapes {
		writeState(p, t)
	} else if t.Health != nil {
		p.wrap("  ", "/health_generate: ", healthText(t.Health))
	}

	l := t.Layer
	p.wrap("  ", "layer: ", l.Label+" — "+l.Reason)
	p.wrap("    ", "next: ", l.NextStep+" ("+l.Runbook+")")

	if len(t.Findings) == 0 {
		p.f("  findings: none\n")
		return
	}
	p.f("  findings\n")
	for _, f := range t.Findings {
		p.f("    %s %s  (layer %s)\n", strings.ToUpper(f.Severity), f.Class, f.Layer)
		p.wrap("      ", "", f.Summary)
		if len(f.ExplainedBy) > 0 {
			names := make([]string, len(f.ExplainedBy))
			for i, c := range f.ExplainedBy {
				names[i] = string(c)
			}
			p.wrap("      ", "explained by: ", strings.Join(names, ", ")+" on this replica")
		}
		p.wrap("      ", "diagnosis: ", f.Diagnosis)
		if len(f.Evidence) > 0 {
			p.f("      evidence\n")
			etw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
			for _, e := range f.Evidence {
				v := numUnit(e.Value, e.Unit)
				if e.Baseline != nil {
					v += "  baseline " + numUnit(e.Baseline, e.Unit)
				}
				fmt.Fprintf(etw, "        %s\t%s\t%s\n", e.Name, v, e.Threshold)
			}
			if err := etw.Flush(); err != nil && p.err == nil {
				p.err = err
			}
		}
		if len(f.Emergency) > 0 {
			p.f("      do now\n")
			for i, step := range f.Emergency {
				p.wrap("        ", fmt.Sprintf("%d. ", i+1), step)
			}
		}
		p.f("      runbook: %s\n", f.Runbook)
	}
}

// writeState prints the global state table: what the runbook reads first.
func writeState(p *printer, t TargetReport) {
	s := t.State
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	row := func(name, value string) { fmt.Fprintf(tw, "    %s\t%s\n", name, value) }
	p.f("  state\n")
	row("running requests", count(s.RunningRequests))
	row("queued requests", count(s.QueuedRequests))
	row("KV cache usage", ratio(s.KVUsage))
	hit := ratio(s.PrefixHitRate)
	if s.PrefixHitRate != nil {
		hit += fmt.Sprintf("  (%s prompt tokens, %s)", count(s.PromptTokens), s.PrefixHitRateSource)
	} else if s.PromptTokens != nil {
		hit = "n/a  (no prompt tokens in the span)"
	}
	row("prefix hit rate", hit)
	thr := perSec(s.GenThroughput, "tok/s")
	if s.GenThroughputSource != "" {
		thr += "  (" + s.GenThroughputSource + ")"
	}
	row("generation throughput", thr)
	row("finished requests", perSec(s.FinishedPerSecond, "/s"))
	if s.RetractionsPerSecond != nil {
		row("retractions", perSec(s.RetractionsPerSecond, "/s"))
	}
	if s.AbortsPerSecond != nil {
		row("aborts", perSec(s.AbortsPerSecond, "/s"))
	}
	row("TTFT p50 / p99", pair(s.TTFTP50, s.TTFTP99))
	if s.QueueTimeMean != nil || s.QueueTimeP99 != nil {
		row("queue wait mean / p99", pair(s.QueueTimeMean, s.QueueTimeP99))
	}
	row("inter-token p99", seconds(s.ITLP99))
	if s.E2EP99 != nil {
		row("end-to-end p99", seconds(s.E2EP99))
	}
	row("HTTP in-flight", count(s.HTTPInFlight))
	if h := t.Health; h != nil {
		row("/health_generate", healthText(h))
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

func healthText(h *HealthResult) string {
	switch {
	case !h.Supported:
		return "not available here (" + h.Error + ")"
	case h.Up:
		return fmt.Sprintf("OK (HTTP 200 in %s)", secs(h.Duration))
	default:
		return fmt.Sprintf("FAILED after %s: %s — the engine is not generating (starting, shutting down or stuck)", secs(h.Duration), h.Error)
	}
}

// printer writes and remembers the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	p.err = err
	return n, err
}

func (p *printer) f(format string, args ...any) { fmt.Fprintf(p, format, args...) }

// wrap prints lead+text wrapped at textWidth, continuation lines indented
// under the text.
func (p *printer) wrap(indent, lead, text string) {
	width := max(textWidth-len(indent)-len(lead), 30)
	pad := strings.Repeat(" ", len(lead))
	line, first := "", true
	flush := func() {
		if first {
			p.f("%s%s%s\n", indent, lead, line)
			first = false
		} else {
			p.f("%s%s%s\n", indent, pad, line)
		}
		line = ""
	}
	for word := range strings.FieldsSeq(text) {
		if line != "" && len(line)+1+len(word) > width {
			flush()
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" || first {
		flush()
	}
}

// Number formatting.

func finitePtr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// num formats for humans: 3 significant digits, no exponent for everyday
// magnitudes.
func num(v float64) string { return detect.FormatNumber(v) }

// secs formats seconds: "850ms", "2.3s", "1m30s".
func secs(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	case v < 1 && v > -1:
		return num(v*1000) + "ms"
	case v >= 60:
		return time.Duration(v * float64(time.Second)).Round(time.Second).String()
	default:
		return num(v) + "s"
	}
}

func count(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return num(*p)
}

func ratio(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *p)
}

func perSec(p *float64, unit string) string {
	if p == nil {
		return "n/a"
	}
	return num(*p) + " " + unit
}

func seconds(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return secs(*p)
}

func pair(a, b *float64) string {
	if a == nil && b == nil {
		return "n/a  (no observations in the span)"
	}
	return seconds(a) + " / " + seconds(b)
}

func numUnit(p *float64, unit string) string {
	if p == nil {
		return "n/a"
	}
	switch unit {
	case "s":
		return secs(*p)
	case "ratio", "":
		return num(*p)
	default:
		return num(*p) + unit
	}
}
