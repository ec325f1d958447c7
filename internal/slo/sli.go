package slo

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Events are an objective's good and total events over a span.
type Events struct {
	Good  float64 `json:"good"`
	Total float64 `json:"total"`
}

// Bad are the events that spent budget.
func (e Events) Bad() float64 { return max(e.Total-e.Good, 0) }

// Add sums two counts.
func (e Events) Add(o Events) Events { return Events{Good: e.Good + o.Good, Total: e.Total + o.Total} }

// valid reports whether e can be counted: finite, non-negative, good
// within total.
func (e Events) valid() bool {
	return finite(e.Good) && finite(e.Total) && e.Good >= 0 && e.Total >= 0 && e.Good <= e.Total*(1+1e-9)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Family is the histogram a latency kind reads ("" for availability).
func (k Kind) Family() string {
	switch k {
	case TTFT:
		return series.TTFTSeconds
	case ITL:
		return series.InterTokenLatency
	case E2E:
		return series.E2ERequestLatency
	}
	return ""
}

// Families are the metric families the objectives read (a histogram by
// its base name), for the scraper to keep.
func (c Config) Families() []string {
	var out []string
	for _, o := range c.Objectives {
		if f := o.Kind.Family(); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// Read counts o's events on one replica's window over (from, to]. A
// window range holds only the samples inside it, so an increase over
// (from, to] alone would lose the step from the last sample at or before
// from to the first after it; Read reads from lead earlier and takes away
// what lay before from, so consecutive spans count every step once. lead
// must exceed the scrape interval. Counters are read reset-aware: a
// restart is not a burst of events. boundary is the histogram bucket
// boundary a latency objective is read at (the largest at or below its
// threshold); ok is false when the replica has no events to count there.
func (o Objective) Read(w detect.Window, endpoints string, from, to time.Time, lead time.Duration) (ev Events, boundary float64, ok bool) {
	read := spanIncrease(w, lead)
	if o.Kind == Availability {
		answered, failed, ok := detect.AnsweredRequests(w, endpoints, read, from, to)
		if !ok {
			return Events{}, 0, false
		}
		ev = Events{Good: answered - failed, Total: answered}
		return ev, 0, ev.valid()
	}
	family := o.Kind.Family()
	le, boundary, found := bucketAtOrBelow(w.LabelValues(family+"_bucket", "le"), o.Threshold.Seconds())
	if !found {
		return Events{}, 0, false
	}
	total, okT := read(detect.Sel(family+"_count"), from, to)
	good, okG := read(detect.Sel(family+"_bucket", "le", le), from, to)
	if !okT || !okG {
		return Events{}, boundary, false
	}
	ev = Events{Good: min(good, total), Total: total}
	return ev, boundary, ev.valid()
}

// bucketAtOrBelow picks, among a histogram's "le" values, the largest
// finite boundary at or below limit (seconds).
func bucketAtOrBelow(les []string, limit float64) (le string, bound float64, ok bool) {
	for _, s := range les {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) || v > limit*(1+1e-9) {
			continue
		}
		if !ok || v > bound {
			le, bound, ok = s, v, true
		}
	}
	return le, bound, ok
}

// spanIncrease reads a counter's increase over (from, to] as the steps
// whose later sample lies in it (see Read).
func spanIncrease(w detect.Window, lead time.Duration) func(detect.Selector, time.Time, time.Time) (float64, bool) {
	return func(sel detect.Selector, from, to time.Time) (float64, bool) {
		start := from.Add(-lead)
		all, ok := w.Increase(sel, start, to)
		if !ok || !finite(all) {
			return 0, false
		}
		before, ok := w.Increase(sel, start, from)
		if !ok || !finite(before) {
			before = 0 // at most one sample before from: no step lay there
		}
		return max(all-before, 0), true
	}
}
