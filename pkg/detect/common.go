package detect

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// periods are the two windows a relative detector compares: the recent
// range (now-Range, now] and the baseline just before it
// (now-Range-Baseline, now-Range]. The baseline ends where the range starts
// so an incident in progress does not raise its own baseline.
type periods struct {
	now, rangeStart, baseStart time.Time
}

func newPeriods(now time.Time, rng, baseline time.Duration) periods {
	return periods{now: now, rangeStart: now.Add(-rng), baseStart: now.Add(-rng - baseline)}
}

// measure is one quantity now and in the baseline.
type measure struct {
	now, base     float64
	nowOK, baseOK bool
}

func (p periods) rate(w Window, sel Selector) measure {
	var m measure
	m.now, m.nowOK = w.Rate(sel, p.rangeStart, p.now)
	m.base, m.baseOK = w.Rate(sel, p.baseStart, p.rangeStart)
	return m
}

func (p periods) increase(w Window, sel Selector) measure {
	var m measure
	m.now, m.nowOK = w.Increase(sel, p.rangeStart, p.now)
	m.base, m.baseOK = w.Increase(sel, p.baseStart, p.rangeStart)
	return m
}

func (p periods) avg(w Window, sel Selector) measure {
	var m measure
	m.now, m.nowOK = w.Avg(sel, p.rangeStart, p.now)
	m.base, m.baseOK = w.Avg(sel, p.baseStart, p.rangeStart)
	return m
}

func (p periods) quantile(w Window, q float64, family string) measure {
	var m measure
	m.now, m.nowOK = w.Quantile(q, family, nil, p.rangeStart, p.now)
	m.base, m.baseOK = w.Quantile(q, family, nil, p.baseStart, p.rangeStart)
	return m
}

// sum adds measures of quantities that add up (e.g. aborts + error
// responses); a side is ok when any part is.
func sum(ms ...measure) measure {
	var out measure
	for _, m := range ms {
		if m.nowOK {
			out.now += m.now
			out.nowOK = true
		}
		if m.baseOK {
			out.base += m.base
			out.baseOK = true
		}
	}
	return out
}

// evidence renders a measure; the baseline is attached when known.
func (m measure) evidence(name, unit, threshold string) Evidence {
	e := Evidence{Name: name, Value: m.now, Unit: unit, Threshold: threshold}
	if m.baseOK {
		e.Baseline, e.HasBaseline = m.base, true
	}
	return e
}

// kvUsage is the replica's KV cache usage (0-1) aggregated over the range
// by agg (Window.Avg or Window.Max). Usage ratios are combined across
// data-parallel ranks by max, never summed. Sources, newest first:
// full_token_usage (hybrid models), token_usage, then num_used_tokens /
// max_total_num_tokens (sums over ranks cancel in the ratio).
func kvUsage(w Window, agg func(Selector, time.Time, time.Time) (float64, bool), from, to time.Time) (float64, bool) {
	for _, name := range []string{series.FullTokenUsage, series.TokenUsage} {
		if v, ok := agg(Selector{Name: name, Combine: CombineMax}, from, to); ok {
			return v, true
		}
	}
	used, okUsed := agg(Sel(series.NumUsedTokens), from, to)
	total, okTotal := w.Last(Sel(series.MaxTotalNumTokens))
	if okUsed && okTotal && total > 0 {
		return used / total, true
	}
	return 0, false
}

func (p periods) kvUsageAvg(w Window) measure {
	var m measure
	m.now, m.nowOK = kvUsage(w, w.Avg, p.rangeStart, p.now)
	m.base, m.baseOK = kvUsage(w, w.Avg, p.baseStart, p.rangeStart)
	return m
}

// ratio is a/b, or ok=false when b is not positive.
func ratio(a, b float64) (float64, bool) {
	if b <= 0 || math.IsNaN(a) || math.IsInf(a, 0) || math.IsNaN(b) || math.IsInf(b, 0) {
		return 0, false
	}
	return a / b, true
}

// atLeastTimes reports whether now >= k × base; a zero baseline is
// exceeded by any positive value.
func atLeastTimes(now, base, k float64) bool {
	return now > 0 && now >= k*base
}

// num formats a number for humans: 3 significant digits, no exponent for
// everyday magnitudes.
func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// vsBaseline renders "X (baseline Y)" or "X (no baseline)".
func vsBaseline(m measure, unit string) string {
	if !m.baseOK {
		return num(m.now) + unit + " (no baseline)"
	}
	return fmt.Sprintf("%s%s (baseline %s%s)", num(m.now), unit, num(m.base), unit)
}

// finding fills the fields every finding of a detector shares.
func finding(c Class, w Window, sev Severity, layer Layer) Finding {
	r := w.Replica()
	return Finding{
		Class:    c,
		Severity: sev,
		Replica:  r.Name,
		Model:    r.Model,
		Layer:    layer,
		Runbook:  RunbookPath(c),
	}
}
