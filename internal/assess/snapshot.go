package assess

import (
	"math"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Snapshot is the global state the runbook reads first, for one replica:
// gauges as of the last scrape (running and queued requests: their
// averages over the span, as the triage reads them), rates and latency
// quantiles over a recent span. A nil field was not exposed (or, for a rate, needs a
// second scrape).
type Snapshot struct {
	// ObservedSeconds is the span the rates and quantiles cover: first to
	// last successful scrape.
	ObservedSeconds float64  `json:"observed_seconds"`
	RunningRequests *float64 `json:"running_requests,omitempty"`
	QueuedRequests  *float64 `json:"queued_requests,omitempty"`
	// MaxRunningRequests is the batch cap, exposed by 2024 releases only.
	MaxRunningRequests *float64 `json:"max_running_requests,omitempty"`
	KVUsage            *float64 `json:"kv_usage,omitempty"` // 0-1, fullest DP rank
	// PrefixHitRate is hit tokens / prompt tokens from counters over the
	// span (never the sglang:cache_hit_rate gauge: that is the last prefill
	// batch only). PromptTokens is the prompt tokens it rests on.
	PrefixHitRate       *float64 `json:"prefix_hit_rate,omitempty"`
	PrefixHitRateSource string   `json:"prefix_hit_rate_source,omitempty"`
	PromptTokens        *float64 `json:"prompt_tokens,omitempty"`
	// GenThroughput is generated tokens per second: the decode counter
	// over the span when exposed (it moves every decode step), else
	// finished requests' tokens, else the engine's own gauge.
	GenThroughput       *float64 `json:"gen_throughput_tokens_per_second,omitempty"`
	GenThroughputSource string   `json:"gen_throughput_source,omitempty"`
	// DecodeProgress is the increase of the decode token counter over the
	// span (liveness: flat with running requests means no progress).
	DecodeProgress       *float64 `json:"decode_tokens_in_span,omitempty"`
	FinishedPerSecond    *float64 `json:"finished_requests_per_second,omitempty"`
	RetractionsPerSecond *float64 `json:"retractions_per_second,omitempty"`
	AbortsPerSecond      *float64 `json:"aborts_per_second,omitempty"`
	TTFTP50              *float64 `json:"ttft_p50_seconds,omitempty"`
	TTFTP99              *float64 `json:"ttft_p99_seconds,omitempty"`
	TTFTMean             *float64 `json:"ttft_mean_seconds,omitempty"`
	// FirstTokens is how many requests got their first token over the
	// span (the TTFT histogram's observations): 0 with requests queued is
	// a replica that starts nothing, which no TTFT quantile can show.
	FirstTokens   *float64 `json:"first_tokens_in_span,omitempty"`
	ITLP99        *float64 `json:"itl_p99_seconds,omitempty"`
	QueueTimeP99  *float64 `json:"queue_time_p99_seconds,omitempty"`
	QueueTimeMean *float64 `json:"queue_time_mean_seconds,omitempty"`
	E2EP99        *float64 `json:"e2e_p99_seconds,omitempty"`
	// HTTPInFlight is in-flight inference requests at the HTTP layer
	// (including ones not yet in the scheduler); on a gateway, in-flight
	// requests to its workers.
	HTTPInFlight *float64 `json:"http_in_flight,omitempty"`
	// GPUUtilMin is, for a GPU replica (dcgm-exporter), its lowest
	// utilization over the span in percent: a GPU under a hung engine that
	// stays busy is the collective-hang fingerprint (correlate).
	GPUUtilMin *float64 `json:"gpu_util_min_percent,omitempty"`
}

func ptr(v float64, ok bool) *float64 {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// hitRateSources are the counter pairs a windowed hit rate can come from,
// in the order pkg/detect's cache-collapse detector prefers them
// (reference §8).
var hitRateSources = []struct {
	family, describes string
	hit, all          detect.Selector
}{
	{series.PrefillEffectiveTokens, "prefill_effective_tokens_total",
		detect.Selector{Name: series.PrefillEffectiveTokens, Match: []detect.Match{{Label: "mode", Value: "_hit", Suffix: true}}},
		detect.Sel(series.PrefillEffectiveTokens)},
	{series.RealtimeTokensTotal, "realtime_tokens_total",
		detect.Sel(series.RealtimeTokensTotal, "mode", "prefill_cache"),
		detect.Sel(series.RealtimeTokensTotal, "mode", "prefill_cache|prefill_compute")},
	{series.CachedTokensTotal, "cached_tokens_total / prompt_tokens_total",
		detect.Sel(series.CachedTokensTotal), detect.Sel(series.PromptTokensTotal)},
}

// maxRunningRequests is the 2024 releases' batch cap gauge.
const maxRunningRequests = "sglang:max_running_requests"

// GatewayInFlight is the gateway's in-flight requests per worker.
const GatewayInFlight = "smg_worker_requests_active"

// snapshotReads are the families ReadSnapshot reads (canonical names, a
// histogram by its base name).
func snapshotReads() []string {
	return []string{series.NumRunningReqs, series.NumQueueReqs, maxRunningRequests,
		series.FullTokenUsage, series.TokenUsage, series.NumUsedTokens, series.MaxTotalNumTokens,
		series.PrefillEffectiveTokens, series.RealtimeTokensTotal, series.CachedTokensTotal, series.PromptTokensTotal,
		series.GenerationTokensTotal, series.GenThroughput, series.NumRequestsTotal, series.RetractedRequestsTotal,
		series.NumAbortedRequestsTotal, series.TTFTSeconds, series.InterTokenLatency, series.QueueTimeSeconds,
		series.E2ERequestLatency, GatewayInFlight, series.HTTPRequestsActive, series.DCGMGPUUtil}
}

// ReadSnapshot reads w over (from, to]. arrivalEndpoints selects the
// inference endpoints of sglang:http_requests_active ("|"-separated), so
// the watchdog's own /metrics request is not counted.
func ReadSnapshot(w detect.Window, from, to time.Time, arrivalEndpoints string) Snapshot {
	s := ReadRecent(w, from, to)
	s.MaxRunningRequests = ptr(w.Last(detect.Selector{Name: maxRunningRequests, Combine: detect.CombineMax}))

	decode := detect.Sel(series.RealtimeTokensTotal, "mode", "decode")
	switch {
	case w.Has(series.RealtimeTokensTotal):
		s.GenThroughput = ptr(w.Rate(decode, from, to))
		s.DecodeProgress = ptr(w.Increase(decode, from, to))
		if s.GenThroughput != nil {
			s.GenThroughputSource = "decode tokens counter"
		}
	case w.Has(series.GenerationTokensTotal):
		s.GenThroughput = ptr(w.Rate(detect.Sel(series.GenerationTokensTotal), from, to))
		if s.GenThroughput != nil {
			s.GenThroughputSource = "tokens of finished requests"
		}
	}
	if s.GenThroughput == nil {
		if v, ok := w.Last(detect.Selector{Name: series.GenThroughput, Combine: detect.CombineSum}); ok {
			s.GenThroughput, s.GenThroughputSource = &v, "sglang:gen_throughput gauge"
		}
	}

	s.FinishedPerSecond = ptr(w.Rate(detect.Sel(series.NumRequestsTotal), from, to))
	s.TTFTP50 = ptr(w.Quantile(0.5, series.TTFTSeconds, nil, from, to))
	s.TTFTMean = histogramMean(w, series.TTFTSeconds, from, to)
	// A disaggregated request starts on a prefill server and streams from
	// a decode server: neither one's TTFT count says whether it started.
	if role := w.Replica().EngineType; role != "prefill" && role != "decode" {
		s.FirstTokens = ptr(w.Increase(detect.Sel(series.TTFTSeconds+"_count"), from, to))
	}
	s.QueueTimeP99 = ptr(w.Quantile(0.99, series.QueueTimeSeconds, nil, from, to))
	s.QueueTimeMean = histogramMean(w, series.QueueTimeSeconds, from, to)
	s.E2EP99 = ptr(w.Quantile(0.99, series.E2ERequestLatency, nil, from, to))

	if w.Replica().Kind == detect.KindGPU {
		s.GPUUtilMin = ptr(w.Min(detect.Sel(series.DCGMGPUUtil), from, to))
	}
	if w.Has(GatewayInFlight) {
		s.HTTPInFlight = ptr(w.Last(detect.Sel(GatewayInFlight)))
	} else {
		s.HTTPInFlight = ptr(w.Last(detect.Selector{Name: series.HTTPRequestsActive,
			Match: []detect.Match{{Label: "endpoint", Value: arrivalEndpoints}}}))
	}
	return s
}

// ReadRecent reads over (from, to] the part of a snapshot a resolve shows
// as the replica's values now: running and queued requests, KV usage, the
// hit rate, retractions, aborts and the TTFT and inter-token p99.
func ReadRecent(w detect.Window, from, to time.Time) Snapshot {
	var s Snapshot
	start := from
	if fs := w.Scrape().FirstSeen; fs.After(start) {
		start = fs
	}
	s.ObservedSeconds = max(0, to.Sub(start).Seconds())
	// Running and queued requests are the averages over the span, the
	// triage's own numbers: the page, the triage line and the workspace
	// give one value for each.
	s.RunningRequests = ptr(w.Avg(detect.Sel(series.NumRunningReqs), from, to))
	s.QueuedRequests = ptr(w.Avg(detect.Sel(series.NumQueueReqs), from, to))

	for _, name := range []string{series.FullTokenUsage, series.TokenUsage} {
		if v, ok := w.Last(detect.Selector{Name: name, Combine: detect.CombineMax}); ok {
			s.KVUsage = &v
			break
		}
	}
	if s.KVUsage == nil {
		used, okU := w.Last(detect.Sel(series.NumUsedTokens))
		total, okT := w.Last(detect.Sel(series.MaxTotalNumTokens))
		if okU && okT && total > 0 {
			s.KVUsage = ptr(used/total, true)
		}
	}

	for _, src := range hitRateSources {
		if !w.Has(src.family) {
			continue
		}
		all, okAll := w.Increase(src.all, from, to)
		hit, okHit := w.Increase(src.hit, from, to)
		if okAll && okHit {
			s.PromptTokens = ptr(all, true)
			s.PrefixHitRateSource = src.describes
			if all > 0 {
				s.PrefixHitRate = ptr(min(hit/all, 1), true)
			}
		}
		break
	}

	s.RetractionsPerSecond = ptr(w.Rate(detect.Sel(series.RetractedRequestsTotal), from, to))
	s.AbortsPerSecond = ptr(w.Rate(detect.Sel(series.NumAbortedRequestsTotal), from, to))
	s.TTFTP99 = ptr(w.Quantile(0.99, series.TTFTSeconds, nil, from, to))
	s.ITLP99 = ptr(w.Quantile(0.99, series.InterTokenLatency, nil, from, to))
	return s
}

// minStallSpan is the least span over which no first token, with requests
// queued, says a replica starts nothing: a healthy replica's long prefill
// can take seconds.
const minStallSpan = 10 * time.Second

// NoFirstTokenFor is the span over which requests were queued and none got
// its first token; ok is false when they did, when nothing was queued, or
// when the replica does not report both.
func (s Snapshot) NoFirstTokenFor() (time.Duration, bool) {
	span := time.Duration(s.ObservedSeconds * float64(time.Second))
	if s.FirstTokens == nil || *s.FirstTokens > 0 || s.QueuedRequests == nil || *s.QueuedRequests < 1 || span < minStallSpan {
		return 0, false
	}
	return span, true
}

// histogramMean is the mean observation over the range: increase of _sum
// over increase of _count; nil without observations.
func histogramMean(w detect.Window, family string, from, to time.Time) *float64 {
	n, okN := w.Increase(detect.Sel(family+"_count"), from, to)
	sum, okS := w.Increase(detect.Sel(family+"_sum"), from, to)
	if !okN || !okS || n <= 0 {
		return nil
	}
	return ptr(sum/n, true)
}
