package detect

import (
	"fmt"
	"math"
	"strconv"
	"strings"
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

// A baseline is what a relative detector calls normal. One that saw only a
// few minutes (the watchdog or the replica just started) or a trickle of
// traffic (a warm-up, a night) is not normal life: a busy hour compared
// with it looks like an incident. So a ratio to a baseline counts only when
// the baseline's samples spread over at least BaselineCoverage.MinSpanShare
// of its configured span and the traffic it rests on reached a minimum.
// Until then a detector treats the baseline as unknown: relative verdicts
// wait, absolute floors still decide.

// BaselineCoverage is the least a baseline must hold before any ratio to it
// counts.
type BaselineCoverage struct {
	// MinSpanShare is the least share (0-1] of the configured baseline span
	// its samples must reach back over, from the baseline's end.
	MinSpanShare float64 `yaml:"min_span_share" doc:"reaches back over at least half its span,"`
	// MinDensityShare is the least traffic the baseline must rest on,
	// relative to the detector's own minimum for its range: the baseline
	// must hold at least this share of that minimum's rate over its span
	// (the range minimum scaled by baseline/range). 0.5 with a 5-minute
	// range of at least 60 requests and a 1-hour baseline: at least 360
	// requests.
	MinDensityShare float64 `yaml:"min_density_share" doc:"holds half the traffic density the range needs,"`
	// MinRequests is the fewest finished requests a baseline must hold for
	// the detectors without a range minimum of their own (preempt_storm's
	// and pd_transfer_failure's ratio floors).
	MinRequests float64 `yaml:"min_requests" doc:"and (detectors without a range minimum) 100 finished requests"`
}

// DefaultBaselineCoverage: half the span, half the range minimum's density,
// 100 finished requests.
func DefaultBaselineCoverage() BaselineCoverage {
	return BaselineCoverage{MinSpanShare: 0.5, MinDensityShare: 0.5, MinRequests: 100}
}

func (b BaselineCoverage) validate(e *configErrors) {
	e.check(b.MinSpanShare > 0 && b.MinSpanShare <= 1, "baseline_coverage.min_span_share", "must be in (0,1], got %v", b.MinSpanShare)
	e.check(b.MinDensityShare >= 0 && b.MinDensityShare <= 1, "baseline_coverage.min_density_share", "must be in [0,1], got %v", b.MinDensityShare)
	e.check(b.MinRequests >= 0, "baseline_coverage.min_requests", "must not be negative, got %v", b.MinRequests)
}

// baselineReady reports whether the baseline period of p covers enough of
// normal life for a ratio to it to count: sel (a counter that moves with
// the traffic the detector compares, e.g. the TTFT histogram's _count) has
// samples reaching back at least MinSpanShare of the baseline span from its
// end, and samples in that latest stretch too, and it grew by at least
// minTraffic over the baseline (0: no traffic minimum).
func (p periods) baselineReady(w Window, cov BaselineCoverage, sel Selector, minTraffic float64) bool {
	span := p.rangeStart.Sub(p.baseStart)
	if span <= 0 {
		return false
	}
	mid := p.rangeStart.Add(-time.Duration(cov.MinSpanShare * float64(span)))
	if !hasPoints(w, sel, p.baseStart, mid) {
		return false // the window does not reach back that far: a warm-up
	}
	if !hasPoints(w, sel, mid, p.rangeStart) {
		return false
	}
	if minTraffic <= 0 {
		return true
	}
	inc, ok := w.Increase(sel, p.baseStart, p.rangeStart)
	return ok && inc >= minTraffic
}

// requestBaselineReady is baselineReady for the detectors without a range
// minimum of their own: sel must reach back over the baseline, and when the
// replica counts finished requests, at least MinRequests of them must lie
// in it.
func (p periods) requestBaselineReady(w Window, cov BaselineCoverage, sel Selector) bool {
	if !p.baselineReady(w, cov, sel, 0) {
		return false
	}
	if !w.Has(series.NumRequestsTotal) {
		return true
	}
	return p.baselineReady(w, cov, Sel(series.NumRequestsTotal), cov.MinRequests)
}

// baselineTraffic is the least traffic a baseline must rest on for a
// detector whose range needs at least rangeMin of it: the same density,
// scaled by MinDensityShare, over the whole baseline span.
func (p periods) baselineTraffic(cov BaselineCoverage, rangeMin float64) float64 {
	rng, base := p.now.Sub(p.rangeStart), p.rangeStart.Sub(p.baseStart)
	if rng <= 0 || rangeMin <= 0 {
		return 0
	}
	return rangeMin * cov.MinDensityShare * float64(base) / float64(rng)
}

// forgetBaseline marks the measures' baselines unknown: a ratio to a
// baseline that is not ready must not count.
func forgetBaseline(ms ...*measure) {
	for _, m := range ms {
		m.base, m.baseOK = 0, false
	}
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

// avgOver names an average over the range by its span, "queued requests
// (avg over 2m)": the triage averages the same gauges over its own range,
// and a page gives both.
func (p periods) avgOver(name string) string { return avgOver(name, p.now.Sub(p.rangeStart)) }

func avgOver(name string, span time.Duration) string {
	return name + " (avg over " + ShortDuration(span) + ")"
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

// floorOrTimesBase is the limit of a "now >= floor and >= k x baseline"
// rule: the larger of the two, the baseline's only when it is known.
func floorOrTimesBase(m measure, floor, k float64) float64 {
	if m.baseOK {
		return max(floor, k*m.base)
	}
	return floor
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

func num(v float64) string { return FormatNumber(v) }

// FormatNumber formats a number for humans: 3 significant digits, no
// exponent for everyday magnitudes. Pages and the diagnose report share it,
// so the same value reads the same everywhere.
func FormatNumber(v float64) string {
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
	if unit == "s" {
		unit = " s" // seconds read "0.4 s" on every page
	}
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

// Series the detectors read that pkg/series does not name (yet). The health
// probe's names are the scraper's synthetic series: 1/0 per probe of
// /health_generate, and how long the probe took.
const (
	// HealthProbeUp is 1 when GET /health_generate answered 200 within the
	// probe timeout, 0 on 503 or timeout. It is carried by one scrape per
	// probe, so it is read over ranges, never with Last.
	HealthProbeUp = "watchdog:health_generate_up"
	// HealthProbeDuration is how long the probe took, in seconds.
	HealthProbeDuration = "watchdog:health_generate_duration_seconds"

	maxRunningRequests     = "sglang:max_running_requests" // 2024 prototype constant; newer releases do not expose the cap
	startupCUDAGraphTime   = "sglang:startup_cuda_graph_time_seconds"
	specAcceptLength       = "sglang:spec_accept_length"
	cudaGraphPassesTotal   = "sglang:cuda_graph_passes_total" // mode: decode_cuda_graph, decode_none, prefill_cuda_graph, prefill_none
	loraPoolSlotsUsed      = "sglang:lora_pool_slots_used"
	loraPoolSlotsTotal     = "sglang:lora_pool_slots_total"
	perStageLatency        = "sglang:per_stage_req_latency_seconds"
	gatewayPDBootstrapFail = "smg_pd_bootstrap_failures_total"
	gatewayPDTransferFail  = "smg_pd_kv_transfer_failures_total"
	prefillBootstrapQueue  = "sglang:num_prefill_bootstrap_queue_reqs"
	decodeTransferQueue    = "sglang:num_decode_transfer_queue_reqs"
)

// DefaultInferenceEndpoints are the endpoint label values that carry
// inference traffic. Health checks, /metrics and /v1/loads are left out on
// purpose: the watchdog's own polling is not traffic.
const DefaultInferenceEndpoints = "/generate|/v1/chat/completions|/v1/completions|/v1/responses|" +
	"/v1/embeddings|/v1/rerank|/v1/score|/v1/messages|/encode|/classify"

// histMean is the mean observation of a histogram over the range, from the
// increases of its _sum and _count (exact, unlike a bucket quantile).
func histMean(w Window, family string, match []Match, from, to time.Time) (float64, bool) {
	sum, count := histSeries(family)
	s, okS := w.Increase(Selector{Name: sum, Match: match}, from, to)
	c, okC := w.Increase(Selector{Name: count, Match: match}, from, to)
	if !okS || !okC {
		return 0, false
	}
	return ratio(s, c)
}

// histSeries are the names of a histogram family's _sum and _count
// series. A round asks for about a hundred means a replica (decode_slowdown's
// look-back alone dozens), and names built for each question were half of
// the round's garbage: the families the detectors and the triage average
// are spelled out as constants.
func histSeries(family string) (sum, count string) {
	switch family {
	case series.InterTokenLatency:
		return series.InterTokenLatency + "_sum", series.InterTokenLatency + "_count"
	case series.TTFTSeconds:
		return series.TTFTSeconds + "_sum", series.TTFTSeconds + "_count"
	case series.E2ERequestLatency:
		return series.E2ERequestLatency + "_sum", series.E2ERequestLatency + "_count"
	case series.QueueTimeSeconds:
		return series.QueueTimeSeconds + "_sum", series.QueueTimeSeconds + "_count"
	case series.GenerationTokensHist:
		return series.GenerationTokensHist + "_sum", series.GenerationTokensHist + "_count"
	}
	return family + "_sum", family + "_count"
}

func (p periods) histMean(w Window, family string) measure {
	var m measure
	m.now, m.nowOK = histMean(w, family, nil, p.rangeStart, p.now)
	m.base, m.baseOK = histMean(w, family, nil, p.baseStart, p.rangeStart)
	return m
}

// perUnit is increase(num)/increase(den) in the range and in the baseline,
// e.g. generated tokens per finished request.
func (p periods) perUnit(w Window, num, den Selector) measure {
	var m measure
	perUnit := func(from, to time.Time) (float64, bool) {
		n, okN := w.Increase(num, from, to)
		d, okD := w.Increase(den, from, to)
		if !okN || !okD {
			return 0, false
		}
		return ratio(n, d)
	}
	m.now, m.nowOK = perUnit(p.rangeStart, p.now)
	m.base, m.baseOK = perUnit(p.baseStart, p.rangeStart)
	return m
}

// gaugeRatio is avg(num)/avg(den) in the range and in the baseline, e.g.
// the summed sequence length per running request.
func (p periods) gaugeRatio(w Window, num, den Selector) measure {
	n, d := p.avg(w, num), p.avg(w, den)
	var m measure
	if n.nowOK && d.nowOK {
		m.now, m.nowOK = ratio(n.now, d.now)
	}
	if n.baseOK && d.baseOK {
		m.base, m.baseOK = ratio(n.base, d.base)
	}
	return m
}

// growth is now/base, ok when both are known and the baseline is positive.
func (m measure) growth() (float64, bool) {
	if !m.nowOK || !m.baseOK {
		return 0, false
	}
	return ratio(m.now, m.base)
}

// covers reports whether the selected series has data at both ends of
// (from, to] (its first and last quarter): a verdict "flat over the range"
// needs the range to be observed, not just its last two scrapes.
func covers(w Window, sel Selector, from, to time.Time) bool {
	q := to.Sub(from) / 4
	return hasPoints(w, sel, from, from.Add(q)) && hasPoints(w, sel, to.Add(-q), to)
}

// present reports whether any series of the family had a finite value in
// (from, to].
func present(w Window, family string, from, to time.Time) bool {
	return hasPoints(w, Sel(family), from, to)
}

// hasPoints reports whether any selected series had a finite value in
// (from, to]: the window's PointFinder, or Max's ok.
func hasPoints(w Window, sel Selector, from, to time.Time) bool {
	if pf, ok := w.(PointFinder); ok {
		return pf.Present(sel, from, to)
	}
	_, ok := w.Max(sel, from, to)
	return ok
}

// inference selects the series of a family whose endpoint label is one of
// the "|"-separated endpoints.
func inference(family, endpoints string) Selector {
	return Selector{Name: family, Match: []Match{{Label: "endpoint", Value: endpoints}}}
}

// progressSource is a counter that moves when the engine does work.
type progressSource struct {
	sel  Selector
	name string
}

// progressSources, most direct first: realtime_tokens_total moves on every
// decode iteration and prefill batch (C1 onwards); the tokenizer counters
// only when requests finish, so long generations can hide a stall.
var progressSources = []progressSource{
	{Sel(series.RealtimeTokensTotal), "tokens processed (realtime_tokens_total, all modes)"},
	{Sel(series.GenerationTokensTotal), "generated tokens of finished requests (generation_tokens_total)"},
	{Sel(series.NumRequestsTotal), "finished requests (num_requests_total)"},
}

// startOf is when the replica's current process started as far as the
// window knows: its last restart, else when the watchdog first tried it.
func startOf(w Window) time.Time {
	start := w.Scrape().FirstSeen
	if lr := w.LastRestart(); lr.After(start) {
		start = lr
	}
	return start
}

// neverServed reports whether the replica's current process has done no
// work since it started: no progress counter moved since startOf, and the
// process is known to be fresh — a restart was seen, or its finished-request
// counter never exceeded freshRequests (a long-running process the watchdog
// only just met has served before, whatever it does now). cold_start owns
// such a replica; engine_hang owns one that served and then stopped.
func neverServed(w Window, now time.Time, freshRequests float64) (start time.Time, never bool) {
	start = startOf(w)
	if start.IsZero() || start.After(now) {
		return start, false
	}
	from := start.Add(-time.Nanosecond) // ranges are (from, to]: keep the first scrape
	for _, src := range progressSources {
		if inc, ok := w.Increase(src.sel, from, now); ok && inc > 0 {
			return start, false
		}
	}
	if lr := w.LastRestart(); !lr.IsZero() && lr.Equal(start) {
		return start, true
	}
	done, ok := w.Max(Sel(series.NumRequestsTotal), from, now)
	return start, ok && done <= freshRequests
}

// probeState summarises the active /health_generate probe over a range.
type probeState struct {
	present   bool    // probe results exist in the range
	allFailed bool    // every probe in the range failed (and there were at least minProbes when countable)
	allOK     bool    // every probe in the range succeeded
	probes    int     // probes in the range (0 when the window cannot count)
	failed    int     // failed probes in the range
	slowest   float64 // longest probe duration, seconds
	slowestOK bool
}

func readProbe(w Window, from, to time.Time, minProbes int) probeState {
	var ps probeState
	sel := Sel(HealthProbeUp)
	hi, ok := w.Max(sel, from, to)
	if !ok {
		return ps
	}
	lo, _ := w.Min(sel, from, to)
	ps.present = true
	ps.allOK = lo >= 0.5
	ps.allFailed = hi < 0.5
	if sc, ok := w.(ScrapeCounter); ok {
		up, n := sc.CountAbove(sel, 0.5, from, to)
		ps.probes, ps.failed = n, n-up
		if n < minProbes {
			ps.allFailed = false
		}
	}
	ps.slowest, ps.slowestOK = w.Max(Sel(HealthProbeDuration), from, to)
	return ps
}

// sentence joins parts into one paragraph.
func sentence(parts ...string) string {
	var out []string
	for _, s := range parts {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, " ")
}

// pct renders a 0-1 ratio as a percentage.
func pct(v float64) string { return FormatNumber(100*v) + "%" }

// pctPoints is a difference of two shares, in percentage points.
func pctPoints(v float64) string { return FormatNumber(100*v) + " points" }

// baselinePct renders " (baseline X%)" of a share, or nothing.
func baselinePct(m measure) string {
	if !m.baseOK {
		return ""
	}
	return " (baseline " + pct(m.base) + ")"
}

// pctVsBaseline renders a share measure in percent next to its baseline.
func pctVsBaseline(m measure) string {
	if !m.baseOK {
		return pct(m.now)
	}
	return fmt.Sprintf("%s (baseline %s)", pct(m.now), pct(m.base))
}

// ShortDuration renders a duration for humans: "5m", "1h", "2m30s".
// Runbooks name windows in the words pages use.
func ShortDuration(d time.Duration) string {
	if d >= time.Second {
		// A span measured between scrapes (diagnose's) reads 12.5s, not
		// 12.503623485s; a configured one is whole tenths anyway.
		d = d.Round(100 * time.Millisecond)
	}
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// Families the shared readers above read, for the detectors' reads.

// kvUsageFamilies are what kvUsage reads.
func kvUsageFamilies() []string {
	return []string{series.FullTokenUsage, series.TokenUsage, series.NumUsedTokens, series.MaxTotalNumTokens}
}

// progressReads are the counters of progressSources.
func progressReads() []string {
	return []string{series.RealtimeTokensTotal, series.GenerationTokensTotal, series.NumRequestsTotal}
}

// probeFamilies are what readProbe reads: the scraper's synthetic probe
// series (never in an exposition, so never filtered, but declared so the
// declaration is the whole truth).
func probeFamilies() []string { return []string{HealthProbeUp, HealthProbeDuration} }

// hitRateFamilies are the counters and the gauge a prefix-hit rate comes
// from (hitRateSources and the gauge fallback).
func hitRateFamilies() []string {
	return []string{series.PrefillEffectiveTokens, series.RealtimeTokensTotal, series.CachedTokensTotal,
		series.PromptTokensTotal, series.CacheHitRateGauge}
}

// ProcessStartTime is prometheus_client's process start timestamp: the
// window counts a change of it as a restart, whatever the counters do.
const ProcessStartTime = "process_start_time_seconds"

// restartFamilies are what the window's restart accounting (Restarts,
// LastRestart) reads beyond the kept counters, whose drops it also counts.
func restartFamilies() []string { return []string{ProcessStartTime} }

// clientTrafficFamilies are what trafficOf's selectors read, on an engine
// and on a gateway.
func clientTrafficFamilies() []string {
	return []string{series.HTTPRequestsTotal, series.HTTPResponsesTotal, series.NumRequestsTotal,
		series.NumAbortedRequestsTotal, series.HTTPRequestsActive, series.GatewayHTTPRequestsTotal,
		series.GatewayHTTPResponsesTotal, series.GatewayRetriesTotal, series.GatewayUpstreamResponses,
		gatewayWorkerRequestsActive, series.GatewayCircuitBreakerState, series.GatewayBreakerOutcomesTotal,
		series.GatewayWorkerHealth}
}
