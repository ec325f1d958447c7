package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

const (
	loraUsed  = "sglang:lora_pool_slots_used"
	loraTotal = "sglang:lora_pool_slots_total"
	graphs    = "sglang:cuda_graph_passes_total"
)

// loraEngine serves LoRA adapters: 8 slots, 5 used, every decode pass on
// a CUDA graph.
func loraEngine() *scenario {
	return fullEngine().with(
		gauge(series.LoraPoolUtilization, constant(5.0/8)),
		gauge(loraUsed, constant(5)),
		gauge(loraTotal, constant(8)),
		counter(graphs, constant(30), "mode", "decode_cuda_graph"),
		counter(graphs, constant(0), "mode", "decode_none"),
	)
}

// loraThrash: from the incident every slot is taken, half of the decode
// passes fall back to eager mode and the inter-token latency doubles.
func loraThrash() *scenario {
	return loraEngine().with(
		gauge(series.LoraPoolUtilization, stepAt(incident, 5.0/8, 1)),
		gauge(loraUsed, stepAt(incident, 5, 8)),
		counter(graphs, stepAt(incident, 30, 15), "mode", "decode_cuda_graph"),
		counter(graphs, stepAt(incident, 0, 15), "mode", "decode_none"),
		hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(incident, 0.028, 0.055)),
	)
}

func TestLoraThrashPages(t *testing.T) {
	f := one(t, run(t, loraThrash(), detect.LoraThrash))
	checkCommon(t, f, detect.LoraThrash)
	if f.Layer != detect.LayerDecode || f.Severity != detect.Warning {
		t.Errorf("layer %s severity %s", f.Layer, f.Severity)
	}
	if e := evidenceNamed(t, f, "LoRA adapter pool utilization"); e.Value != 1 {
		t.Errorf("pool evidence = %+v", e)
	}
	if e := evidenceNamed(t, f, "decode passes without CUDA graph"); !approx(e.Value, 0.5, 1e-6) || e.Baseline != 0 {
		t.Errorf("graph fallback evidence = %+v", e)
	}
	// Shares in percent, the p99/p50 spread as the multiple it is.
	contains(t, "diagnosis", f.Diagnosis, "every LoRA adapter slot", "break graph replay", "lowest utilization 100%",
		"rose to 50% (baseline 0%)", "spread p99/p50 1.2")
	if e := evidenceNamed(t, f, "inter-token latency spread"); e.Unit == "ratio" {
		t.Errorf("the p99/p50 spread is printed as a share: %+v", e)
	}
	contains(t, "steps", strings.Join(f.Emergency, " "), "route requests by adapter", "--max-loras-per-batch", "without --enable-lora and --lora-paths")
	contains(t, "root cause", f.RootCause[0], "Pin the hot adapters")
	if f.Triage == "" {
		t.Error("no layer triage")
	}
}

func TestLoraThrashVariants(t *testing.T) {
	t.Run("slots used/total without the utilization gauge", func(t *testing.T) {
		one(t, run(t, loraThrash().without(series.LoraPoolUtilization), detect.LoraThrash))
	})
	t.Run("no cuda_graph_passes_total", func(t *testing.T) {
		f := one(t, run(t, loraThrash().without(graphs), detect.LoraThrash))
		contains(t, "diagnosis", f.Diagnosis, "cannot be confirmed")
	})
}

func TestLoraThrashDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"no LoRA", fullEngine()},
		{"healthy LoRA replica", loraEngine()},
		// Every slot taken, decode as fast as before: a busy pool, no thrash.
		{"healthy heavy load: pool full, latency steady", loraEngine().with(
			gauge(series.LoraPoolUtilization, constant(1)), gauge(loraUsed, constant(8)))},
		// Slower decode, graphs replay as before: not the adapters.
		{"pool full, graphs fine", loraThrash().with(
			counter(graphs, constant(30), "mode", "decode_cuda_graph"),
			counter(graphs, constant(0), "mode", "decode_none"))},
		{"pool not full", loraThrash().with(
			gauge(series.LoraPoolUtilization, constant(0.75)), gauge(loraUsed, constant(6)))},
		{"low traffic", loraThrash().with(hist(series.InterTokenLatency, itlBounds, constant(5), stepAt(incident, 0.028, 0.055)))},
		{"counter reset after restart", func() *scenario {
			s := loraEngine().with(gauge(series.LoraPoolUtilization, constant(1)))
			s.restarts = []time.Duration{64 * minute}
			return s
		}()},
		{"missing series", newScenario(gauge(series.LoraPoolUtilization, constant(1)))},
		{"NaN/Inf samples", loraEngine().with(
			gauge(series.LoraPoolUtilization, constant(1)).corrupted(every(2, math.NaN())),
			hist(series.InterTokenLatency, itlBounds, constant(300), constant(0.028)).corrupted(every(3, math.Inf(1))),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.LoraThrash))
		})
	}
}

// LoraThrash's golden page (checkPage).
func TestGoldenPageEventsLoraThrash(t *testing.T) {
	checkPage(t, pageCase{class: detect.LoraThrash, scenario: loraThrash()})
}
