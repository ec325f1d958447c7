package slo

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// HistoryStep is the step the memory is backfilled at: 5 minutes keeps a
// 28-day period at 8064 points a series, within Prometheus' 11000.
const HistoryStep = 5 * time.Minute

// HistoryQuery is the PromQL that reads o's events per model from a
// Prometheus that scraped the replicas: the increase of every bucket of
// its histogram per step, by model and bucket (FromHistory picks the
// boundary and the total). selector is history.selector; dur renders the
// step. ok is false for what history cannot answer the way a round counts
// it: availability (the answered and failed requests come from several
// counters with fallbacks, counted per replica) and objectives narrowed
// by target labels, which Prometheus does not hold as the watchdog does.
func (o Objective) HistoryQuery(selector, dur string) (q string, ok bool) {
	if o.Kind == Availability || len(o.Match) > 0 {
		return "", false
	}
	// Both renderings of SGLang's prefix (sglang: and sglang_).
	name := strings.Replace(o.Kind.Family(), "sglang:", "sglang[:_]", 1) + "_bucket"
	sel := fmt.Sprintf("__name__=~%q", name)
	if o.Model != "" {
		sel += fmt.Sprintf(",model_name=%q", o.Model)
	}
	if s := strings.TrimSpace(selector); s != "" {
		sel += "," + s
	}
	return fmt.Sprintf("sum by (model_name, le) (increase({%s}[%s]))", sel, dur), true
}

// HistoryPoint is one value of HistoryQuery's answer.
type HistoryPoint struct {
	Labels map[string]string
	At     time.Time
	Value  float64
}

// FromHistory turns HistoryQuery's answer into the events of each step,
// by the instant the step ends: per model, good is the increase of the
// bucket at the largest boundary at or below the threshold, total that
// of +Inf.
func (o Objective) FromHistory(points []HistoryPoint) map[time.Time][]Sample {
	type key struct {
		model string
		at    time.Time
	}
	buckets := map[key]map[string]float64{}
	for _, p := range points {
		k := key{p.Labels["model_name"], p.At}
		if buckets[k] == nil {
			buckets[k] = map[string]float64{}
		}
		buckets[k][p.Labels["le"]] += p.Value
	}
	out := map[time.Time][]Sample{}
	for _, k := range slices.SortedFunc(maps.Keys(buckets), func(a, b key) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.model, b.model)
	}) {
		les := buckets[k]
		le, bound, ok := bucketAtOrBelow(slices.Collect(maps.Keys(les)), o.Threshold.Seconds())
		total, hasTotal := infBucket(les)
		if !ok || !hasTotal {
			continue
		}
		ev := Events{Good: min(les[le], total), Total: total}
		if ev.valid() {
			out[k.at] = append(out[k.at], Sample{Objective: o.Name, Model: k.model, Events: ev, Boundary: bound})
		}
	}
	return out
}

// infBucket is the +Inf bucket's value, however it is written.
func infBucket(les map[string]float64) (float64, bool) {
	for le, v := range les {
		if f, err := strconv.ParseFloat(le, 64); err == nil && math.IsInf(f, 1) {
			return v, true
		}
	}
	return 0, false
}
