package scrape

import (
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// engineUnderscorePrefix is how the gateway's /engine_metrics re-renders the
// engine prefix "sglang:" (it replaces every ':' in metric names with '_').
const (
	enginePrefix           = "sglang:"
	engineUnderscorePrefix = "sglang_"
)

// Label names the normalizer consumes rather than passes on.
const (
	labelWorkerAddr = "worker_addr" // gateway /engine_metrics: which engine
	labelModelName  = "model_name"  // served model (PR #1981 onwards)
	labelLegacyName = "name"        // served model in the first 2024 release
	labelEngineType = "engine_type"
	labelDPRank     = "dp_rank"
	// priority is "" on the totals and "<int>" on the per-priority parts
	// of a queue count under --enable-priority-scheduling.
	labelPriority = "priority"
	// The legacy gateway labelled its router counters "route"; their
	// successors say "endpoint".
	labelLegacyRoute = "route"
	labelEndpoint    = "endpoint"
	// Process/rank identities whose series are copies of one another:
	// prometheus_client's multiprocess "all" mode adds pid; with
	// --enable-metrics-for-all-schedulers every TP/PP/EP rank of a DP group
	// reports the same scheduler state.
	labelPID       = "pid"
	labelTPRank    = "tp_rank"
	labelPPRank    = "pp_rank"
	labelMoEEPRank = "moe_ep_rank"
)

// funcLatency is the one family whose "name" label is not the model but the
// timed function (e.g. generate_request).
const funcLatency = "sglang:func_latency_seconds"

// legacyAliases maps retired family names to their canonical successors
// (reference/sglang-metrics.md §3.4 and §7). Keys and values are family
// names; histogram suffixes are handled by the resolver. It is a function,
// not a package variable, so nothing can mutate the table at run time.
func legacyAliases() map[string]string {
	return map[string]string{
		// Engine, 2024 prototype (PR #1461/#1853 era, label "name").
		"sglang:num_requests_running": series.NumRunningReqs,
		"sglang:num_requests_waiting": series.NumQueueReqs,
		"sglang:queue_req":            series.NumQueueReqs,
		// Engine, renamed later.
		"sglang:time_per_output_token_seconds":              series.InterTokenLatency,
		"sglang:num_prefill_prealloc_queue_reqs":            "sglang:num_prefill_bootstrap_queue_reqs",
		"sglang:gpu_execution_seconds_total":                "sglang:forward_execution_seconds_total",
		"sglang:dp_cooperation_gpu_execution_seconds_total": "sglang:dp_cooperation_forward_execution_seconds_total",
		"sglang:total_retracted_reqs":                       series.RetractedRequestsTotal,

		// Gateway, legacy sgl_router_* names (≤ 2025-12-13). The client-facing
		// pair is sgl_router_http_requests_total (bumped on arrival, no
		// labels) and sgl_router_http_responses_total (status_code,
		// error_code); sgl_router_requests_total{route} counts requests the
		// router finished handling (since 2025-08: successful ones only), the
		// predecessor of smg_router_requests_total, not arrivals.
		"sgl_router_http_requests_total":            series.GatewayHTTPRequestsTotal,
		"sgl_router_http_responses_total":           series.GatewayHTTPResponsesTotal,
		"sgl_router_requests_total":                 "smg_router_requests_total",
		"sgl_router_request_duration_seconds":       "smg_http_request_duration_seconds",
		"sgl_router_request_errors_total":           "smg_router_request_errors_total",
		"sgl_router_attempt_http_responses_total":   series.GatewayUpstreamResponses,
		"sgl_router_upstream_http_responses_total":  series.GatewayUpstreamResponses,
		"sgl_router_retries_total":                  series.GatewayRetriesTotal,
		"sgl_router_retries_exhausted_total":        series.GatewayRetriesExhaustedTotal,
		"sgl_router_retry_backoff_duration_seconds": "smg_worker_retry_backoff_seconds",
		"sgl_router_cb_state":                       series.GatewayCircuitBreakerState,
		"sgl_router_cb_state_transitions_total":     "smg_worker_cb_transitions_total",
		"sgl_router_cb_outcomes_total":              series.GatewayBreakerOutcomesTotal,
		"sgl_router_cb_consecutive_failures":        "smg_worker_cb_consecutive_failures",
		"sgl_router_cb_consecutive_successes":       "smg_worker_cb_consecutive_successes",
		"sgl_router_running_requests":               "smg_worker_requests_active",
		"sgl_router_worker_health":                  series.GatewayWorkerHealth,

		// dcgm-exporter: the clock-event bitmask's older name.
		series.DCGMClockThrottleReasons: series.DCGMClockEventReasons,
	}
}

// nameInfo is everything normalization needs to know about one exposed
// sample name; it is computed once per name and cached.
type nameInfo struct {
	canonical string
	// maxOverDP: combine DP ranks with max instead of sum (ratios, means,
	// latencies and per-rank constants must never be summed).
	maxOverDP bool
	// legacy: the name came through legacyAliases; if the canonical name is
	// exposed too (transition releases emit both), the legacy copy is
	// dropped so nothing is counted twice.
	legacy bool
	// percentHitRate: the prototype exposed cache_hit_rate in percent.
	percentHitRate bool
	// nameIsModel: the "name" label carries the served model.
	nameIsModel bool
	// queueCount: a scheduler queue count that priority scheduling splits
	// into a total and per-priority parts.
	queueCount bool
}

var histogramSuffixes = [...]string{"_bucket", "_sum", "_count"}

// resolveName maps an exposed sample name to its canonical form.
func resolveName(raw string, aliases map[string]string) nameInfo {
	name := raw
	if strings.HasPrefix(name, engineUnderscorePrefix) {
		name = enginePrefix + name[len(engineUnderscorePrefix):]
	}
	info := nameInfo{canonical: name}
	if to, ok := aliases[name]; ok {
		info.canonical, info.legacy = to, true
	} else {
		// A flattened histogram/summary part: alias the family, keep the
		// suffix.
		for _, suf := range histogramSuffixes {
			if base, ok := strings.CutSuffix(name, suf); ok {
				if to, ok := aliases[base]; ok {
					info.canonical, info.legacy = to+suf, true
				}
				break
			}
		}
	}
	info.maxOverDP = combineByMax(info.canonical)
	info.percentHitRate = info.canonical == series.CacheHitRateGauge
	info.nameIsModel = strings.HasPrefix(info.canonical, enginePrefix) &&
		!strings.HasPrefix(info.canonical, funcLatency)
	switch info.canonical {
	case series.NumRunningReqs, series.NumQueueReqs, "sglang:num_prefill_bootstrap_queue_reqs",
		"sglang:num_prefill_inflight_queue_reqs", "sglang:num_decode_prealloc_queue_reqs",
		"sglang:num_decode_transfer_queue_reqs":
		info.queueCount = true
	}
	return info
}

// combineByMax reports whether DP ranks of this series combine by max.
// Counters and histogram parts are additive across ranks; so are gauges of
// counts and capacities (running requests, used tokens, pool sizes). Ratios,
// means, latencies and per-rank constants are not: two ranks at 0.9 token
// usage are a replica at 0.9, not 1.8.
func combineByMax(name string) bool {
	for _, suf := range [...]string{"_total", "_bucket", "_sum", "_count"} {
		if strings.HasSuffix(name, suf) {
			return false
		}
	}
	for _, suf := range [...]string{
		"_usage",        // token_usage, full/swa/pending_prealloc_token_usage, mamba_usage
		"_rate",         // cache_hit_rate, spec_accept_rate
		"_ratio",        // new_token_ratio
		"utilization",   // utilization, lora_pool_utilization
		"_occupancy",    // fwd_occupancy (percent)
		"_length",       // spec_accept_length, spec_cap_length, spec_block_accept_length
		"_seconds",      // gauge durations: startup_time_seconds, weight_load_duration_seconds
		"_ms",           // kv_transfer_*_ms gauges of C1/C2
		"_gb_s",         // kv_transfer_speed_gb_s gauge
		"_latency",      // avg_request_queue_latency
		"_balancedness", // eplb_balancedness
		"_avg", "_max", "_min",
	} {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	switch name {
	case series.ContextLen, series.PageSize, "sglang:is_cuda_graph",
		"sglang:spec_num_steps", "sglang:spec_num_draft_tokens",
		"sglang:cache_config_info", series.CacheHitRateGauge:
		return true
	}
	return false
}
