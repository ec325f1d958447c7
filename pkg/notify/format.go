package notify

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// This file is the one place that turns an event's numbers and state into
// words. The log, Slack and PagerDuty renderers all call it, so a value
// reads the same on every page: ratios as percent, seconds and counts with
// three significant digits (detect.FormatNumber, which the diagnose report
// shares), rates with "/s".

// Finite reports whether v can be shown: NaN and ±Inf are never printed;
// the field carrying them is left out instead.
func Finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// FormatValue renders v in unit: "ratio" (a fraction 0-1) as percent, "%"
// as percent, "/s" and other "/x" units glued to the number, any other unit
// after a space. v must be finite (see Finite).
func FormatValue(v float64, unit string) string {
	switch unit {
	case "ratio":
		return detect.FormatNumber(v*100) + "%"
	case "%":
		return detect.FormatNumber(v) + "%"
	case "x": // a multiple, as a burn rate: "14.4x"
		return detect.FormatNumber(v) + "x"
	case "":
		return detect.FormatNumber(v)
	}
	if strings.HasPrefix(unit, "/") {
		return detect.FormatNumber(v) + unit
	}
	return detect.FormatNumber(v) + " " + unit
}

// Shown returns the fields whose value can be printed, in order.
func Shown(fields []Field) []Field {
	var out []Field
	for _, f := range fields {
		if Finite(f.Value) {
			out = append(out, f)
		}
	}
	return out
}

// hasBaseline reports whether the field carries a printable baseline.
func hasBaseline(f Field) bool { return f.HasBase && Finite(f.Baseline) }

// Rule is the field's threshold as it should be printed: a rule relative
// to a baseline ("≥ 5x baseline") says nothing when there is no baseline,
// so it is dropped then.
func Rule(f Field) string {
	if f.Threshold == "" {
		return ""
	}
	if !hasBaseline(f) && strings.Contains(strings.ToLower(f.Threshold), "baseline") {
		return ""
	}
	return f.Threshold
}

// FieldValue is the value with its baseline and rule: "8.1 s (baseline
// 0.42 s; rule >= 3x baseline)". Without a baseline, only the value and
// an absolute rule.
func FieldValue(f Field) string {
	s := FormatValue(f.Value, f.Unit)
	var extra []string
	if hasBaseline(f) {
		extra = append(extra, "baseline "+FormatValue(f.Baseline, f.Unit))
	}
	if r := Rule(f); r != "" {
		extra = append(extra, "rule "+r)
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, "; ") + ")"
	}
	return s
}

// FormatField is "name: value (baseline b; rule r)".
func FormatField(f Field) string { return f.Name + ": " + FieldValue(f) }

// Recovery is one signal of a resolve: its value as the incident ends
// beside its value at the incident's worst round.
type Recovery struct {
	Name    string
	Now     *Field // nil when the replica no longer reports it
	Peak    *Field // nil when neither the evidence nor what users felt gives one
	Summary bool   // a user-facing signal (queue, time to first token, aborts) shown in the title
	Felt    bool   // Peak is the worst users felt (Event.Felt), not evidence
}

// Text is "name: 3 (peak 294)", "name: 3" or "name: peak 294".
func (r Recovery) Text() string { return r.Name + ": " + r.Value() }

// Value is "3 (peak 294)", "3" or "peak 294"; a signal where lower is
// worse (a hit rate) gives its lowest: "82% (lowest 29%)".
func (r Recovery) Value() string {
	switch {
	case r.Now != nil && r.Peak != nil:
		return FormatValue(r.Now.Value, r.Now.Unit) + " (" + r.peak() + ")"
	case r.Now != nil:
		return FormatValue(r.Now.Value, r.Now.Unit)
	case r.Peak != nil:
		return r.peak()
	}
	return ""
}

func (r Recovery) peak() string {
	word := "peak "
	if r.Peak.LowerIsWorse {
		word = "lowest "
	}
	return word + FormatValue(r.Peak.Value, r.Peak.Unit)
}

// signal identifies what a field measures, so a recovered value finds the
// peak evidence of the same quantity although detectors and the snapshot
// name it differently ("KV cache usage (max in range)" vs "KV cache
// usage"); short is its name in a title.
type signal struct {
	key, short string
	user       bool // what users feel: shown in the resolve's title
}

// signals are matched in order; the first whose every word occurs in the
// field's name (and whose unit agrees) wins.
var signals = []struct {
	words []string
	units []string
	sig   signal
}{
	{[]string{"queued requests"}, []string{""}, signal{"queue", "queue", true}},
	{[]string{"time to first token", "p99"}, []string{"s"}, signal{"ttft_p99", "p99 TTFT", true}},
	{[]string{"ttft p99"}, []string{"s"}, signal{"ttft_p99", "p99 TTFT", true}},
	{[]string{"aborted requests"}, []string{"/s"}, signal{"aborts", "aborted", true}},
	{[]string{"running requests"}, []string{""}, signal{"running", "running", false}},
	{[]string{"kv cache usage"}, []string{"ratio"}, signal{"kv", "KV usage", false}},
	{[]string{"hit rate"}, []string{"ratio"}, signal{"hit_rate", "hit rate", false}},
	{[]string{"retracted requests"}, []string{"/s"}, signal{"retractions", "retracted", false}},
	{[]string{"inter-token latency p99"}, []string{"s"}, signal{"itl_p99", "p99 ITL", false}},
}

func signalOf(f Field) (signal, bool) {
	name := strings.ToLower(f.Name)
	for _, s := range signals {
		unitOK := false
		for _, u := range s.units {
			unitOK = unitOK || u == f.Unit
		}
		if !unitOK {
			continue
		}
		all := true
		for _, w := range s.words {
			all = all && strings.Contains(name, w)
		}
		if all && !strings.HasPrefix(name, "triage:") {
			return s.sig, true
		}
	}
	return signal{}, false
}

// Recoveries pairs a resolve's recovered values with its peak evidence,
// signal by signal: first every recovered value, with its peak, then the
// peak evidence no recovered value measures. A signal's peak is the worst
// of every evidence that measures it and of what users felt ("KV cache
// usage (max in range)" and "KV cache usage (avg)" are one line, at the
// higher), so no page of the incident gave a worse number than its
// resolve calls the peak. Non-finite values are left out.
func Recoveries(ev Event) []Recovery {
	peaks := Shown(ev.Evidence)
	used := make([]bool, len(peaks))
	// worstOf takes in every peak not yet taken that measures key and
	// gives the worst of them.
	worstOf := func(key string) *Field {
		var w *Field
		for i := range peaks {
			if used[i] || peakKey(peaks[i]) != key {
				continue
			}
			used[i] = true
			if w == nil || worse(peaks[i], w.Value) {
				w = &peaks[i]
			}
		}
		return w
	}
	var out []Recovery
	for _, now := range Shown(ev.Recovered) {
		r := Recovery{Name: now.Name, Now: &now}
		if sig, ok := signalOf(now); ok {
			r.Summary = sig.user
			peak := worstOf(sig.key)
			if v := felt(ev.Felt, sig.key); v != nil && (peak == nil || *v > peak.Value) {
				peak, r.Felt = &Field{Name: now.Name, Value: *v, Unit: now.Unit}, true
			}
			// A peak that is not worse than now is no peak: the
			// incident was never worse than the replica is.
			if peak != nil && worse(*peak, now.Value) {
				r.Peak = peak
			} else {
				r.Felt = false
			}
		}
		out = append(out, r)
	}
	for i := range peaks {
		if used[i] {
			continue
		}
		p := worstOf(peakKey(peaks[i]))
		out = append(out, Recovery{Name: p.Name, Peak: p})
	}
	return out
}

// peakKey is what a peak measures: its signal, else its Quantity in its
// unit.
func peakKey(f Field) string {
	if sig, ok := signalOf(f); ok {
		return sig.key
	}
	return "quantity:" + Quantity(f.Name) + "/" + f.Unit
}

// Quantity is what an evidence name measures, without the parenthesized
// qualifier detectors add when they read one quantity over different
// spans or for a reason ("aborted requests/s (clients gave up)" and
// "aborted requests/s" are one quantity).
func Quantity(name string) string {
	name, _, _ = strings.Cut(name, " (")
	return strings.ToLower(strings.TrimSpace(name))
}

// felt is the value of what users felt that measures the signal key, nil
// when there is none.
func felt(im *Impact, key string) *float64 {
	if im == nil {
		return nil
	}
	switch key {
	case "queue":
		return im.Queued
	case "ttft_p99":
		return im.TTFTP99
	case "aborts":
		return im.AbortsPerSecond
	}
	return nil
}

// worse reports whether f's value is worse than v: higher, or lower for a
// field where lower is worse.
func worse(f Field, v float64) bool {
	if f.LowerIsWorse {
		return f.Value < v
	}
	return f.Value > v
}

// Resolved reports whether ev ends its incident.
func Resolved(ev Event) bool { return ev.Kind == KindResolve || ev.Status == StatusResolved }

// StateWord is the page's state in one word: RESOLVED, CRITICAL, WARNING,
// INFO.
func StateWord(ev Event) string {
	if Resolved(ev) {
		return "RESOLVED"
	}
	return strings.ToUpper(ev.Severity.String())
}

// Headline is the event's one line: where, what is happening and what
// users feel. Events built without one fall back to the replica and the
// finding's summary.
func Headline(ev Event) string {
	if h := strings.TrimSpace(ev.Headline); h != "" {
		return h
	}
	switch {
	case ev.Replica != "" && ev.Summary != "":
		return ev.Replica + ": " + ev.Summary
	case ev.Summary != "":
		return ev.Summary
	case ev.Replica != "":
		return ev.Replica + ": " + ev.Class
	}
	return ev.Class
}

// Title is the page's title on every integration: "[CRITICAL] headline".
// A resolve's headline says what ended and the values now; the title adds
// the user-facing values at the peak: "[RESOLVED] sgl-b: preempt storm
// over after 12 min; now queue 3, p99 TTFT 0.4 s (peak queue 294, p99 TTFT
// 8.1 s)". An event without a headline gets "replica: summary — recovered
// after 12 min; queue 3 (peak 294), p99 TTFT 0.4 s (peak 8.1 s)".
func Title(ev Event) string {
	s := "[" + StateWord(ev) + "] " + Headline(ev)
	if !Resolved(ev) {
		return s
	}
	var now, peaks []string
	for _, r := range Recoveries(ev) {
		if !r.Summary {
			continue
		}
		sig, _ := signalOf(*r.Now)
		now = append(now, sig.short+" "+r.Value())
		if r.Peak != nil {
			peaks = append(peaks, sig.short+" "+FormatValue(r.Peak.Value, r.Peak.Unit))
		}
	}
	if strings.TrimSpace(ev.Headline) != "" {
		if len(peaks) > 0 {
			s += " (peak " + strings.Join(peaks, ", ") + ")"
		}
		return s
	}
	s += " — recovered"
	if d := Lasted(ev); d > 0 {
		s += " after " + FormatDuration(d)
	}
	if len(now) > 0 {
		s += "; " + strings.Join(now, ", ")
	}
	return s
}

// Lasted is how long the incident has been (or was) firing; 0 when unknown.
func Lasted(ev Event) time.Duration {
	if ev.StartsAt.IsZero() {
		return 0
	}
	end := ev.EndsAt
	if end.IsZero() {
		end = ev.At
	}
	if end.Before(ev.StartsAt) {
		return 0
	}
	return end.Sub(ev.StartsAt)
}

// NowLabel names what a resolve's values now cover: "last 15 s", or "now"
// when the span is not known.
func NowLabel(ev Event) string {
	if !(ev.RecoveredSeconds > 0) {
		return "now"
	}
	return "last " + FormatDuration(time.Duration(ev.RecoveredSeconds*float64(time.Second)))
}

// FormatDuration renders a duration for people: "45 s", "1 min 53 s",
// "12 min", "1 h 5 min", "2 d 3 h".
func FormatDuration(d time.Duration) string {
	// Each unit is rounded to, not cut at, and a short span keeps its
	// seconds: 1 min 53 s does not read "1 min" beside the two times it
	// lies between.
	if d = d.Round(time.Second); d < time.Minute {
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	if d < 10*time.Minute {
		m, sec := int(d.Minutes()), int(d.Seconds())%60
		if sec == 0 {
			return fmt.Sprintf("%d min", m)
		}
		return fmt.Sprintf("%d min %d s", m, sec)
	}
	if d = d.Round(time.Minute); d < time.Hour {
		return fmt.Sprintf("%d min", int(d.Minutes()))
	}
	if d < 24*time.Hour {
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%d h", h)
		}
		return fmt.Sprintf("%d h %d min", h, m)
	}
	d = d.Round(time.Hour)
	days, h := int(d.Hours())/24, int(d.Hours())%24
	if h == 0 {
		return fmt.Sprintf("%d d", days)
	}
	return fmt.Sprintf("%d d %d h", days, h)
}

// Triage is the triage line to show, "" when there is none, when the
// diagnosis already carries it, or on a resolve: its next step is for a
// replica in trouble, not for one that recovered.
func Triage(ev Event) string {
	t := strings.TrimSpace(ev.Triage)
	if t == "" || Resolved(ev) || strings.Contains(ev.Diagnosis, t) {
		return ""
	}
	return t
}

// DiagnosisLabel names the diagnosis: on a resolve it describes the
// incident while it fired, not the replica now.
func DiagnosisLabel(ev Event) string {
	if Resolved(ev) {
		return "While it fired"
	}
	return "Diagnosis"
}
