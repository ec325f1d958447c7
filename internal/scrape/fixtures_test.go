package scrape

import (
	"math"
	"strings"
	"testing"

	captures "github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// fixtureWant is what a detector must be able to read from one capture.
type fixtureWant struct {
	model, engineType string
	checks            []check
}

const (
	qwen     = "Qwen/Qwen3-8B"
	llama31  = "meta-llama/Llama-3.1-8B-Instruct"
	llama32  = "/shared/public/elr-models/meta-llama/Llama-3.2-3B/5cc0ffe09ee49f7be6ca7c794ee6bd7245e84e60/"
	llama3   = "/shared/public/models/Meta-Llama-3-8B-Instruct"
	deepseek = "/home/moyun.zty/models/deepseek-ai__DeepSeek-R1"
)

var fixtureWants = map[string]fixtureWant{
	"sglang-current-full.prom": {model: qwen, engineType: "unified", checks: []check{
		{name: series.NumRunningReqs, want: 24},
		{name: series.NumQueueReqs, want: 3},
		{name: series.TokenUsage, want: 0.41},
		{name: series.RetractedRequestsTotal, want: 37},
		{name: series.NumRetractedReqsGauge, want: 0}, // pid dropped
		{name: series.RealtimeTokensTotal, labels: `mode="decode"`, want: 3.301876e+06},
		{name: series.CachedTokensTotal, labels: `cache_source="device"`, want: 4.087012e+06},
		{name: series.PromptTokensTotal, labels: `is_streaming="false"`, want: 2.604118e+06},
		{name: series.PromptTokensTotal, labels: `is_streaming="true"`, want: 7.712903e+06},
		{name: series.TTFTSeconds + "_count", labels: `is_streaming="true"`, want: 5200},
		{name: series.TTFTSeconds + "_bucket", labels: `is_streaming="true",le="+Inf"`, want: 5200},
		{name: series.QueueTimeSeconds + "_count", want: 7010},
		{name: series.HTTPRequestsActive, labels: `endpoint="/v1/chat/completions",method="POST"`, want: 27},
		{name: series.KVAvailableTokens, want: 96113},
		{name: series.MaxTotalNumTokens, want: 438720},
		{name: "sglang:fwd_occupancy", want: math.NaN()},
		// "name" on func_latency is the function, not the model.
		{name: "sglang:func_latency_seconds_count", labels: `name="generate_request"`, want: 7031},
		// gt/le gauge-histograms pass through with their own le strings.
		{name: "sglang:routing_key_running_req_count", labels: `gt="200",le="+Inf"`, want: 0},
	}},
	"docs-production-metrics-example.prom": {model: llama31, checks: []check{
		{name: series.NumRunningReqs, want: 162},
		{name: series.NumQueueReqs, want: 2826},
		{name: series.TokenUsage, want: 0.28},
		{name: series.CacheHitRateGauge, want: 0.007507552643049313},
		{name: series.InterTokenLatency + "_count", want: 7.400757e+06},
		{name: series.InterTokenLatency + "_bucket", labels: `le="+Inf"`, want: 7.400757e+06},
		{name: "sglang:time_per_output_token_seconds_count", absent: true},
		{name: series.TTFTSeconds + "_bucket", labels: `le="1.0"`, want: 27},
		{name: series.PromptTokensTotal, want: 8.128902e+06},
	}},
	"pr1853-2024-11-first-release-name-label.prom": {model: llama32, checks: []check{
		{name: series.MaxTotalNumTokens, want: 570979},
		{name: series.ContextLen, want: 131072},
		{name: series.PromptTokensTotal, want: 230794},
		// Fragment without a TYPE line: untyped, still the flattened shape.
		{name: series.TTFTSeconds + "_bucket", labels: `le="+Inf"`, want: 1029},
		{name: series.E2ERequestLatency + "_sum", want: 12786.840049982071},
		{name: series.E2ERequestLatency + "_bucket", labels: `le="20.0"`, want: 870},
		// The capture was cut before _count: nothing may be invented.
		{name: series.E2ERequestLatency + "_count", absent: true},
	}},
	"pr4412-pr4444-2025-03-engine-type.prom": {model: llama3, engineType: "unified", checks: []check{
		{name: series.NumRunningReqs, want: 0},
		{name: series.TokenUsage, want: 0},
		{name: series.GenThroughput, want: 0},
		{name: series.E2ERequestLatency + "_bucket", labels: `le="350.0"`, want: 1},
	}},
	// Priority scheduling: the totals (priority "") alone, not totals plus
	// the per-priority breakdown.
	"sglang-priority-scheduling.prom": {model: qwen, engineType: "unified", checks: []check{
		{name: series.NumRunningReqs, want: 24},
		{name: series.NumQueueReqs, want: 10},
		{name: series.NumQueueReqs, labels: `priority="10"`, absent: true},
		{name: "sglang:num_decode_transfer_queue_reqs", want: 0},
		{name: series.TokenUsage, want: 0.41},
		{name: series.RetractedRequestsTotal, want: 37},
	}},
	"smg-gateway-current.prom": {checks: []check{
		{name: series.GatewayHTTPRequestsTotal, labels: `method="POST",path="/v1/chat/completions"`, want: 20000},
		{name: series.GatewayUpstreamResponses, labels: `error_code="service_unavailable",router_type="http",status_code="503"`, want: 83500},
		{name: series.GatewayRetriesTotal, labels: `endpoint="chat",worker_type="regular"`, want: 80000},
	}},
	// The legacy gateway: arrivals are sgl_router_http_requests_total (no
	// labels); the route-labelled counters keep their route as endpoint.
	"sgl-router-legacy-2025-12.prom": {checks: []check{
		{name: series.GatewayHTTPRequestsTotal, want: 20310},
		{name: series.GatewayHTTPResponsesTotal, labels: `error_code="service_unavailable",status_code="503"`, want: 3400},
		{name: "smg_router_requests_total", labels: `endpoint="/v1/chat/completions"`, want: 16500},
		{name: series.GatewayUpstreamResponses, labels: `endpoint="/v1/chat/completions",error_code="service_unavailable",status_code="503"`, want: 83500},
		{name: series.GatewayRetriesTotal, labels: `endpoint="/v1/chat/completions"`, want: 80000},
		{name: series.GatewayRetriesExhaustedTotal, labels: `endpoint="/v1/chat/completions"`, want: 3400},
		{name: series.GatewayCircuitBreakerState, labels: `worker="http://127.0.0.1:46571"`, want: 1},
		{name: "smg_worker_requests_active", labels: `worker="http://127.0.0.1:46572"`, want: 64},
	}},
	"pr7944-2025-07-pd-kv-transfer.prom": {model: deepseek, engineType: "unified", checks: []check{
		{name: series.NumRequestsTotal, want: 217},
		{name: series.CachedTokensTotal, want: 2688},
		{name: series.NumAbortedRequestsTotal, want: 157},
		{name: series.NumRunningReqs, want: 0},
		{name: series.NumUsedTokens, want: 0},
	}},
}

// droppedLabels may never survive normalization.
var droppedLabels = []string{"pid", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank", "model_name", "engine_type", "worker_addr"}

// TestFixtures scrapes every capture of the shared fixture package through
// a real HTTP server and the real fetch, and checks what detectors read.
func TestFixtures(t *testing.T) {
	files := captures.Names()
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			want, ok := fixtureWants[file]
			if !ok {
				t.Fatalf("fixture %s has no expectations; add them to fixtureWants", file)
			}
			body, err := captures.SGLang(file)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, body)
			target := Target{Name: "r1", URL: srv.URL + "/metrics", Kind: KindEngine}
			sc := ScrapeOnce(t.Context(), client(t), target, Options{})

			if sc.Reason != "" {
				t.Fatalf("scrape failed: %s: %s", sc.Reason, sc.Error)
			}
			if sc.Target != "r1" || sc.Kind != KindEngine || sc.At.IsZero() {
				t.Errorf("scrape header = %q %q %v", sc.Target, sc.Kind, sc.At)
			}
			if len(sc.Groups) != 1 {
				t.Fatalf("groups = %d, want 1", len(sc.Groups))
			}
			g := sc.Groups[0]
			if g.Worker != "" || g.Model != want.model || g.EngineType != want.engineType {
				t.Errorf("group = worker %q model %q engine %q, want \"\" %q %q", g.Worker, g.Model, g.EngineType, want.model, want.engineType)
			}
			assertChecks(t, g, want.checks)
			assertWellFormed(t, g, string(body))
		})
	}
}

// assertWellFormed checks invariants every normalized group keeps.
func assertWellFormed(t *testing.T, g series.Group, exposition string) {
	t.Helper()
	seen := make(map[string]bool, len(g.Samples))
	for _, s := range g.Samples {
		if strings.HasPrefix(s.Name, "sglang_") {
			t.Errorf("%s: gateway rendering not mapped back", s.Name)
		}
		for i, l := range s.Labels {
			if i > 0 && s.Labels[i-1].Name >= l.Name {
				t.Errorf("%s: labels not sorted", s.Key())
			}
			for _, d := range droppedLabels {
				if l.Name == d {
					t.Errorf("%s: label %s survived", s.Key(), d)
				}
			}
			if l.Name == "name" && !strings.HasPrefix(s.Name, "sglang:func_latency_seconds") {
				t.Errorf("%s: legacy model label survived", s.Key())
			}
			// Bucket bounds keep the exposition's spelling.
			if l.Name == "le" && !strings.Contains(exposition, `le="`+l.Value+`"`) {
				t.Errorf("%s: le %q not spelled as in the exposition", s.Key(), l.Value)
			}
		}
		if seen[s.Key()] {
			t.Errorf("%s: duplicate series", s.Key())
		}
		seen[s.Key()] = true
	}
}
