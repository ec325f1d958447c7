package ui

import (
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// stepSnapshot is the replica's snapshot over one step of a plot.
type stepSnapshot struct {
	At       time.Time
	Snapshot assess.Snapshot
}

// asOf is a replica's window seen as it stood over (from, to]: the latest
// value of a gauge becomes its peak within the step, so a step's snapshot
// reads the gauges of that step instead of the newest scrape. Rates,
// increases and quantiles already take their range.
type asOf struct {
	detect.Window
	from, to time.Time
}

func (a asOf) Last(sel detect.Selector) (float64, bool) { return a.Max(sel, a.from, a.to) }

// history is the replica's snapshot at every step ending at end and
// covering span: assess.ReadSnapshot, the code of the round's snapshot,
// run once per step. Steps before the window's first scrape are left out.
func history(w detect.Window, end time.Time, span, step time.Duration, arrivalEndpoints string) []stepSnapshot {
	if step <= 0 || span <= 0 {
		return nil
	}
	first := w.Scrape().FirstSeen
	n := int(span / step)
	out := make([]stepSnapshot, 0, n)
	for i := n - 1; i >= 0; i-- {
		to := end.Add(-time.Duration(i) * step)
		from := to.Add(-step)
		if !first.IsZero() && from.Before(first) {
			continue
		}
		out = append(out, stepSnapshot{At: to, Snapshot: assess.ReadSnapshot(asOf{Window: w, from: from, to: to}, from, to, arrivalEndpoints)})
	}
	return out
}

// keySeries are the snapshot fields the replica page plots, in order.
var keySeries = []struct {
	Title, Unit string
	Value       func(assess.Snapshot) *float64
}{
	{"Running requests", "", func(s assess.Snapshot) *float64 { return s.RunningRequests }},
	{"Queued requests", "", func(s assess.Snapshot) *float64 { return s.QueuedRequests }},
	{"KV cache usage", "ratio", func(s assess.Snapshot) *float64 { return s.KVUsage }},
	{"Prefix cache hit rate", "ratio", func(s assess.Snapshot) *float64 { return s.PrefixHitRate }},
	{"Generation throughput", "tok/s", func(s assess.Snapshot) *float64 { return s.GenThroughput }},
	{"TTFT p99", "s", func(s assess.Snapshot) *float64 { return s.TTFTP99 }},
	{"Retractions", "/s", func(s assess.Snapshot) *float64 { return s.RetractionsPerSecond }},
}

// points reads one field of every step.
func points(h []stepSnapshot, field func(assess.Snapshot) *float64) []point {
	ps := make([]point, len(h))
	for i, s := range h {
		ps[i].At = s.At
		if v := field(s.Snapshot); v != nil {
			ps[i].Value, ps[i].OK = *v, true
		}
	}
	return ps
}
