package scrape

import (
	"errors"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// normalizeText runs the parser seam and the normalizer over text.
func normalizeText(t *testing.T, text string, maxSeries int) ([]series.Group, error) {
	t.Helper()
	raw, err := NewParser().Parse(nil, []byte(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return newNormalizer().normalize(raw, maxSeries)
}

// DP=2 x TP=2 with --enable-metrics-for-all-schedulers: every TP rank of a
// DP group repeats the group's numbers.
const dp2tp2 = `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 5.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 5.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 7.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 7.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.0
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 3.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 4.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 4.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.5
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 0.5
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.8
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 0.8
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.25
sglang:cache_hit_rate{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.75
# TYPE sglang:context_len gauge
sglang:context_len{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 40960.0
sglang:context_len{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 40960.0
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 10.0
sglang:num_retracted_requests_total{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 10.0
sglang:num_retracted_requests_total{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0
sglang:num_retracted_requests_total{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 3.0
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{dp_rank="0",engine_type="unified",mode="decode",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 100.0
sglang:realtime_tokens_total{dp_rank="0",engine_type="unified",mode="decode",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 100.0
sglang:realtime_tokens_total{dp_rank="1",engine_type="unified",mode="decode",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 50.0
sglang:realtime_tokens_total{dp_rank="1",engine_type="unified",mode="decode",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 50.0
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{dp_rank="0",engine_type="unified",le="1.0",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0
sglang:queue_time_seconds_bucket{dp_rank="0",engine_type="unified",le="+Inf",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 4.0
sglang:queue_time_seconds_sum{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.5
sglang:queue_time_seconds_count{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 4.0
sglang:queue_time_seconds_bucket{dp_rank="1",engine_type="unified",le="1.0",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1.0
sglang:queue_time_seconds_bucket{dp_rank="1",engine_type="unified",le="+Inf",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 6.0
sglang:queue_time_seconds_sum{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 9.5
sglang:queue_time_seconds_count{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 6.0
`

// Two scheduler processes, gauges in prometheus_client's "all" mode.
const pidGauges = `# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pid="11593",pp_rank="0",tp_rank="0"} 0.0
sglang:num_retracted_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pid="11594",pp_rank="0",tp_rank="1"} 3.0
# TYPE sglang:num_paused_reqs gauge
sglang:num_paused_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pid="11593",pp_rank="0",tp_rank="0"} 1.0
sglang:num_paused_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pid="11594",pp_rank="0",tp_rank="1"} 1.0
`

// The gateway's /engine_metrics: ':' rendered as '_', worker_addr added,
// missing labels padded with "".
const gatewayEngineMetrics = `# HELP sglang_num_running_reqs The number of running requests.
# TYPE sglang_num_running_reqs gauge
sglang_num_running_reqs{dp_rank="",engine_type="unified",model_name="llama",moe_ep_rank="0",pp_rank="0",tp_rank="0",worker_addr="http://10.0.0.2:30000"} 9
sglang_num_running_reqs{dp_rank="",engine_type="unified",model_name="llama",moe_ep_rank="0",pp_rank="0",tp_rank="0",worker_addr="http://10.0.0.1:30000"} 4

# HELP sglang_token_usage The token usage.
# TYPE sglang_token_usage gauge
sglang_token_usage{dp_rank="",engine_type="unified",model_name="llama",moe_ep_rank="0",pp_rank="0",tp_rank="0",worker_addr="http://10.0.0.1:30000"} 0.25
sglang_token_usage{dp_rank="",engine_type="unified",model_name="llama",moe_ep_rank="0",pp_rank="0",tp_rank="0",worker_addr="http://10.0.0.2:30000"} 0.75

# HELP sglang_realtime_tokens_total Total number of tokens processed (updated on each log interval). mode_ prefill_compute, prefill_cache, decode.
# TYPE sglang_realtime_tokens_total counter
sglang_realtime_tokens_total{engine_type="unified",mode="decode",model_name="llama",moe_ep_rank="0",pp_rank="0",tp_rank="0",worker_addr="http://10.0.0.1:30000"} 311
sglang_realtime_tokens_total{engine_type="unified",mode="decode",model_name="llama",moe_ep_rank="0",pp_rank="0",tp_rank="0",worker_addr="http://10.0.0.2:30000"} 55

# HELP sglang_time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang_time_to_first_token_seconds histogram
sglang_time_to_first_token_seconds_bucket{le="0.1",model_name="llama",worker_addr="http://10.0.0.1:30000"} 2
sglang_time_to_first_token_seconds_bucket{le="+Inf",model_name="llama",worker_addr="http://10.0.0.1:30000"} 3
sglang_time_to_first_token_seconds_sum{model_name="llama",worker_addr="http://10.0.0.1:30000"} 0.9
sglang_time_to_first_token_seconds_count{model_name="llama",worker_addr="http://10.0.0.1:30000"} 3
sglang_time_to_first_token_seconds_bucket{le="0.1",model_name="llama",worker_addr="http://10.0.0.2:30000"} 0
sglang_time_to_first_token_seconds_bucket{le="+Inf",model_name="llama",worker_addr="http://10.0.0.2:30000"} 1
sglang_time_to_first_token_seconds_sum{model_name="llama",worker_addr="http://10.0.0.2:30000"} 4.2
sglang_time_to_first_token_seconds_count{model_name="llama",worker_addr="http://10.0.0.2:30000"} 1
`

// A gateway from before the smg_* rename (≤ 2025-12).
const legacyRouter = `# TYPE sgl_router_retries_total counter
sgl_router_retries_total{route="/generate"} 12
# TYPE sgl_router_retries_exhausted_total counter
sgl_router_retries_exhausted_total{route="/generate"} 2
# TYPE sgl_router_cb_state gauge
sgl_router_cb_state{worker="http://w1:8000"} 1
# TYPE sgl_router_requests_total counter
sgl_router_requests_total{route="/generate"} 1000
# TYPE sgl_router_retry_backoff_duration_seconds histogram
sgl_router_retry_backoff_duration_seconds_bucket{attempt="1",le="0.05"} 4
sgl_router_retry_backoff_duration_seconds_bucket{attempt="1",le="+Inf"} 5
sgl_router_retry_backoff_duration_seconds_sum{attempt="1"} 0.4
sgl_router_retry_backoff_duration_seconds_count{attempt="1"} 5
`

// A transition release emitting both the legacy and the current name.
const transitionRouter = `# TYPE sgl_router_retries_total counter
sgl_router_retries_total{route="/generate"} 12
# TYPE smg_worker_retries_total counter
smg_worker_retries_total{endpoint="/generate",worker_type="regular"} 12
`

// The 2024 prototype (PR #1461): percent hit rate, "name" label, old names.
const prototype = `# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{name="google/gemma-2-9b-it"} 87.58777633289988
# TYPE sglang:queue_req gauge
sglang:queue_req{name="google/gemma-2-9b-it"} 6.0
# TYPE sglang:num_requests_running gauge
sglang:num_requests_running{name="google/gemma-2-9b-it"} 11.0
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_bucket{le="0.005",name="google/gemma-2-9b-it"} 1.0
sglang:time_per_output_token_seconds_bucket{le="+Inf",name="google/gemma-2-9b-it"} 9.0
sglang:time_per_output_token_seconds_sum{name="google/gemma-2-9b-it"} 0.3
sglang:time_per_output_token_seconds_count{name="google/gemma-2-9b-it"} 9.0
`

// Renamed families of later releases.
const renamed = `# TYPE sglang:num_prefill_prealloc_queue_reqs gauge
sglang:num_prefill_prealloc_queue_reqs{engine_type="prefill",model_name="m"} 4.0
# TYPE sglang:gpu_execution_seconds_total counter
sglang:gpu_execution_seconds_total{category="forward",model_name="m"} 12.5
# TYPE sglang:total_retracted_reqs counter
sglang:total_retracted_reqs{model_name="m"} 8.0
# TYPE sglang:num_requests_waiting gauge
sglang:num_requests_waiting{model_name="m"} 3.0
`

const nonFinite = `# TYPE sglang:fwd_occupancy gauge
sglang:fwd_occupancy{model_name="m"} NaN
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="m"} +Inf
# TYPE sglang:new_token_ratio gauge
sglang:new_token_ratio{model_name="m"} -Inf
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",model_name="m",tp_rank="0"} NaN
sglang:token_usage{dp_rank="0",model_name="m",tp_rank="1"} 0.5
`

// --enable-priority-scheduling with DP=2: each rank writes its total under
// priority="" and its breakdown under priority="<int>" in the same family.
// The PD queue has a breakdown on one rank only, with no total: the parts
// are all there is. Counters carry the priority of each request.
const priorityScheduling = `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",priority="",tp_rank="0"} 10.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",priority="0",tp_rank="0"} 6.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",priority="1",tp_rank="0"} 4.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",priority="",tp_rank="0"} 8.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",priority="0",tp_rank="0"} 8.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",priority="1",tp_rank="0"} 0.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="m",priority="",tp_rank="0"} 5.0
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="m",priority="None",tp_rank="0"} 5.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="m",priority="",tp_rank="0"} 2.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="m",priority="None",tp_rank="0"} 2.0
# TYPE sglang:num_decode_prealloc_queue_reqs gauge
sglang:num_decode_prealloc_queue_reqs{engine_type="decode",model_name="m",priority="0"} 3.0
sglang:num_decode_prealloc_queue_reqs{engine_type="decode",model_name="m",priority="1"} 2.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",priority="",tp_rank="0"} 0.5
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="m",priority="",tp_rank="0"} 0.7
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{engine_type="unified",is_streaming="true",model_name="m",priority="0"} 70.0
sglang:num_requests_total{engine_type="unified",is_streaming="true",model_name="m",priority="1"} 30.0
`

// Several models: the most frequent one names the group.
const twoModels = `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="big"} 1.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="big"} 1.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="small"} 0.1
`

func TestNormalize(t *testing.T) {
	type wantGroup struct {
		worker, model, engineType string
		samples                   int // -1: do not check
		checks                    []check
	}
	tests := []struct {
		name   string
		text   string
		groups []wantGroup
	}{
		{"dp2 x tp2 sums over dp, never over tp; ratios take max", dp2tp2, []wantGroup{{
			model: "m", engineType: "unified", samples: 11, checks: []check{
				{name: series.NumRunningReqs, want: 12},                                // 5 + 7
				{name: series.NumQueueReqs, want: 7},                                   // max(2,3) + 4
				{name: series.TokenUsage, want: 0.8},                                   // max, not 1.3
				{name: series.CacheHitRateGauge, want: 0.75},                           // max, not 1.0
				{name: series.ContextLen, want: 40960},                                 // a constant, not doubled
				{name: series.RetractedRequestsTotal, want: 13},                        // 10 + 3
				{name: series.RealtimeTokensTotal, labels: `mode="decode"`, want: 150}, // 100 + 50
				{name: series.QueueTimeSeconds + "_bucket", labels: `le="1.0"`, want: 4},
				{name: series.QueueTimeSeconds + "_bucket", labels: `le="+Inf"`, want: 10},
				{name: series.QueueTimeSeconds + "_sum", want: 12},
				{name: series.QueueTimeSeconds + "_count", want: 10},
			}}}},
		{"pid-labelled gauges from two processes collapse by max", pidGauges, []wantGroup{{
			model: "m", engineType: "unified", samples: 2, checks: []check{
				{name: series.NumRetractedReqsGauge, want: 3},
				{name: "sglang:num_paused_reqs", want: 1},
			}}}},
		{"gateway engine_metrics: one group per worker_addr, names mapped back", gatewayEngineMetrics, []wantGroup{
			{worker: "10.0.0.1:30000", model: "llama", engineType: "unified", samples: 7, checks: []check{
				{name: series.NumRunningReqs, want: 4},
				{name: series.TokenUsage, want: 0.25},
				{name: series.RealtimeTokensTotal, labels: `mode="decode"`, want: 311},
				{name: series.TTFTSeconds + "_bucket", labels: `le="0.1"`, want: 2},
				{name: series.TTFTSeconds + "_count", want: 3},
			}},
			{worker: "10.0.0.2:30000", model: "llama", engineType: "unified", samples: 7, checks: []check{
				{name: series.NumRunningReqs, want: 9},
				{name: series.TokenUsage, want: 0.75},
				{name: series.RealtimeTokensTotal, labels: `mode="decode"`, want: 55},
				{name: series.TTFTSeconds + "_sum", want: 4.2},
			}},
		}},
		{"legacy sgl_router names map to smg, route becomes endpoint", legacyRouter, []wantGroup{{
			samples: 8, checks: []check{
				{name: series.GatewayRetriesTotal, labels: `endpoint="/generate"`, want: 12},
				{name: series.GatewayRetriesExhaustedTotal, labels: `endpoint="/generate"`, want: 2},
				{name: series.GatewayCircuitBreakerState, labels: `worker="http://w1:8000"`, want: 1},
				// Requests the router finished handling, not arrivals.
				{name: "smg_router_requests_total", labels: `endpoint="/generate"`, want: 1000},
				{name: series.GatewayHTTPRequestsTotal, labels: `endpoint="/generate"`, absent: true},
				{name: "smg_worker_retry_backoff_seconds_bucket", labels: `attempt="1",le="0.05"`, want: 4},
				{name: "smg_worker_retry_backoff_seconds_count", labels: `attempt="1"`, want: 5},
				{name: "sgl_router_retries_total", labels: `route="/generate"`, absent: true},
			}}}},
		{"current name shadows its legacy twin", transitionRouter, []wantGroup{{
			samples: 1, checks: []check{
				{name: series.GatewayRetriesTotal, labels: `endpoint="/generate",worker_type="regular"`, want: 12},
				{name: series.GatewayRetriesTotal, labels: `endpoint="/generate"`, absent: true},
			}}}},
		{"prototype: percent hit rate, name label, old names", prototype, []wantGroup{{
			model: "google/gemma-2-9b-it", samples: 7, checks: []check{
				{name: series.CacheHitRateGauge, want: 0.8758777633289988},
				{name: series.NumQueueReqs, want: 6},
				{name: series.NumRunningReqs, want: 11},
				{name: series.InterTokenLatency + "_bucket", labels: `le="0.005"`, want: 1},
				{name: series.InterTokenLatency + "_count", want: 9},
			}}}},
		{"renamed families", renamed, []wantGroup{{
			model: "m", engineType: "prefill", samples: 4, checks: []check{
				{name: "sglang:num_prefill_bootstrap_queue_reqs", want: 4},
				{name: "sglang:forward_execution_seconds_total", labels: `category="forward"`, want: 12.5},
				{name: series.RetractedRequestsTotal, want: 8},
				{name: series.NumQueueReqs, want: 3},
			}}}},
		{"NaN and Inf pass through; a NaN copy does not hide a number", nonFinite, []wantGroup{{
			model: "m", samples: 4, checks: []check{
				{name: "sglang:fwd_occupancy", want: math.NaN()},
				{name: series.GenThroughput, want: math.Inf(1)},
				{name: series.NewTokenRatio, want: math.Inf(-1)},
				{name: series.TokenUsage, want: 0.5},
			}}}},
		{"priority scheduling: queue counts are totals, not totals plus parts", priorityScheduling, []wantGroup{{
			model: "m", engineType: "unified", samples: 7, checks: []check{
				{name: series.NumRunningReqs, want: 18}, // 10 + 8, not 36
				{name: series.NumRunningReqs, labels: `priority="0"`, absent: true},
				{name: series.NumQueueReqs, want: 7},
				{name: series.NumQueueReqs, labels: `priority="None"`, absent: true},
				// No total exposed: the parts stay and add up to it.
				{name: "sglang:num_decode_prealloc_queue_reqs", labels: `priority="0"`, want: 3},
				{name: "sglang:num_decode_prealloc_queue_reqs", labels: `priority="1"`, want: 2},
				{name: series.TokenUsage, want: 0.7},
				// A counter per request priority is a partition, kept whole.
				{name: series.NumRequestsTotal, labels: `is_streaming="true",priority="0"`, want: 70},
				{name: series.NumRequestsTotal, labels: `is_streaming="true",priority="1"`, want: 30},
			}}}},
		{"most frequent model names the group", twoModels, []wantGroup{{model: "big", samples: -1}}},
		{"empty exposition", "# nothing here\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			groups, err := normalizeText(t, tt.text, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(groups) != len(tt.groups) {
				t.Fatalf("groups = %d, want %d", len(groups), len(tt.groups))
			}
			for i, want := range tt.groups {
				g := groups[i]
				if g.Worker != want.worker || g.Model != want.model || g.EngineType != want.engineType {
					t.Errorf("group %d = worker %q model %q engine %q, want %q %q %q",
						i, g.Worker, g.Model, g.EngineType, want.worker, want.model, want.engineType)
				}
				if want.samples >= 0 && len(g.Samples) != want.samples {
					t.Errorf("group %d: %d samples, want %d: %v", i, len(g.Samples), want.samples, g.Samples)
				}
				assertChecks(t, g, want.checks)
				assertWellFormed(t, g, tt.text)
			}
		})
	}
}

func TestNormalizeMaxSeries(t *testing.T) {
	// dp2tp2 normalizes to 11 series from 34 raw samples: the limit is on
	// what the window would store.
	if _, err := normalizeText(t, dp2tp2, 11); err != nil {
		t.Errorf("limit 11: %v", err)
	}
	groups, err := normalizeText(t, dp2tp2, 10)
	if !errors.Is(err, errTooManySeries) || groups != nil {
		t.Errorf("limit 10: groups %v, err %v; want errTooManySeries", groups, err)
	}
}

// The normalizer is reused across scrapes of a target: state from one
// scrape must not leak into the next.
func TestNormalizerReuse(t *testing.T) {
	n := newNormalizer()
	p := NewParser()
	var raw []RawSample
	for i, text := range []string{dp2tp2, gatewayEngineMetrics, dp2tp2} {
		var err error
		raw, err = p.Parse(raw[:0], []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		groups, err := n.normalize(raw, 0)
		if err != nil {
			t.Fatal(err)
		}
		wantGroups := map[int]int{0: 1, 1: 2, 2: 1}[i]
		if len(groups) != wantGroups {
			t.Fatalf("scrape %d: %d groups, want %d", i, len(groups), wantGroups)
		}
		if text == dp2tp2 {
			assertChecks(t, groups[0], []check{{name: series.NumRunningReqs, want: 12}})
		}
	}
}

func TestFormatBound(t *testing.T) {
	// Python prometheus_client's spelling of each value, as seen in captures.
	for f, want := range map[float64]string{
		1: "1.0", 0: "0.0", 0.1: "0.1", 2.5: "2.5", 100000: "100000.0",
		1e6: "1e+06", 1.1e6: "1.1e+06", 0.0016200000000000001: "0.0016200000000000001",
		0.0001: "0.0001", math.Inf(1): "+Inf", math.Inf(-1): "-Inf",
	} {
		if got := formatBound(f); got != want {
			t.Errorf("formatBound(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestCombineByMax(t *testing.T) {
	for name, want := range map[string]bool{
		series.TokenUsage: true, series.FullTokenUsage: true, "sglang:mamba_usage": true,
		series.CacheHitRateGauge: true, series.NewTokenRatio: true, "sglang:utilization": true,
		series.LoraPoolUtilization: true, "sglang:spec_accept_rate": true, "sglang:spec_accept_length": true,
		series.ContextLen: true, series.PageSize: true, "sglang:startup_time_seconds": true,
		series.NumRunningReqs: false, series.NumQueueReqs: false, series.NumUsedTokens: false,
		series.MaxTotalNumTokens: false, series.GenThroughput: false, series.RetractedRequestsTotal: false,
		series.TTFTSeconds + "_bucket": false, series.TTFTSeconds + "_sum": false, series.TTFTSeconds + "_count": false,
		"sglang:process_cpu_seconds_total": false,
	} {
		if got := combineByMax(name); got != want {
			t.Errorf("combineByMax(%s) = %v, want %v", name, got, want)
		}
	}
}

// A gateway's /engine_metrics worker that is also scraped as an engine
// target is that target's replica: the gateway's copy of it is dropped, the
// other workers keep readable names. Driven through the real Manager.
func TestGatewayWorkerScrapedAsEngineIsOneReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 5 * time.Second
		rec := newRecorder(t)
		targets := []Target{
			{Name: "gw", URL: "http://router:30000/engine_metrics", Kind: KindGateway},
			{Name: "sgl-a", URL: "http://10.0.0.1:30000/metrics", Kind: KindEngine},
		}
		m, err := New(targets, Options{Interval: interval}, rec, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = fakeFetch([]byte(gatewayEngineMetrics))
		stop := startManager(t, m)
		defer stop()

		workers := func(sc series.Scrape) []string {
			var ws []string
			for _, g := range sc.Groups {
				ws = append(ws, g.Worker)
			}
			return ws
		}
		others := map[string][]series.Scrape{}
		if got := workers(next(t, rec, "gw", others)); !slices.Equal(got, []string{"10.0.0.2:30000"}) {
			t.Errorf("gateway groups = %q, want only the worker no engine target scrapes", got)
		}
		// The engine target goes away: the gateway's copy is all there is.
		if err := m.SetTargets(targets[:1]); err != nil {
			t.Fatal(err)
		}
		if got := workers(next(t, rec, "gw", others)); !slices.Equal(got, []string{"10.0.0.1:30000", "10.0.0.2:30000"}) {
			t.Errorf("gateway groups = %q, want both workers", got)
		}
	})
}
