package detect_test

import (
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// rampAt is before until at, then moves linearly to after over ramp, and
// stays there.
func rampAt(at, ramp time.Duration, before, after float64) fn {
	return func(el time.Duration) float64 {
		switch {
		case el < at:
			return before
		case el >= at+ramp:
			return after
		}
		return before + (after-before)*float64(el-at)/float64(ramp)
	}
}

// gpuSlowdown is a replica whose GPU becomes 4x slower at onset (a
// throttled or degraded card). The inter-token latency jumps 4x at an
// unchanged batch; then, as each request takes four times longer, the
// running batch fills to the cap, the queue grows, clients time out and
// retry (more arrivals, more prompts to prefill), and the latency climbs to
// 11x its baseline with the batch it now carries. Nothing about the GPU
// recovered.
func gpuSlowdown(onset time.Duration) *scenario {
	backlog := onset + 2*minute
	return fullEngine().with(
		hist(series.InterTokenLatency, itlBounds, constant(300), func(el time.Duration) float64 {
			switch {
			case el < onset:
				return 0.028
			case el < backlog:
				return 0.112
			}
			return rampAt(backlog, 3*minute, 0.112, 0.31)(el)
		}),
		gauge(series.NumRunningReqs, rampAt(backlog, 2*minute, 40, 64)),
		gauge(series.DecodeSumSeqLens, rampAt(backlog, 2*minute, 60000, 96000)),
		gauge(series.NumQueueReqs, rampAt(backlog, 5*minute, 2, 300)),
		counter(series.HTTPRequestsTotal, rampAt(backlog+minute, 2*minute, 10, 18), "endpoint", chat, "method", "POST"),
		counter(series.RealtimeTokensTotal, rampAt(backlog+minute, 2*minute, 3000, 5400), "mode", "prefill_compute"),
		counter(series.PrefillEffectiveTokens, rampAt(backlog+minute, 2*minute, 3000, 5400), "mode", "input"),
	)
}

// A detector's condition changing shape is not a recovery: once the
// slowdown is established at an unchanged batch, decode_slowdown holds
// while the inter-token latency stays far above the baseline it had before
// the slowdown, whatever the batch, the arrivals or the prefill work do
// since.
func TestDecodeSlowdownHoldsWhileTheBacklogItBuiltGrows(t *testing.T) {
	const end = 65 * time.Minute
	onset := end - 12*minute
	for _, after := range []time.Duration{time.Minute, 3 * minute, 5 * minute, 8 * minute, 12 * minute} {
		s := gpuSlowdown(onset)
		s.length = onset + after
		fs := run(t, s, detect.DecodeSlowdown)
		if len(fs) != 1 {
			t.Fatalf("%s into a 4x GPU slowdown: %d decode_slowdown findings, want 1 (a false resolve)", after, len(fs))
		}
		f := fs[0]
		t.Logf("%s in: %s | %s", after, f.Summary, f.Diagnosis)
		checkCommon(t, f, detect.DecodeSlowdown)
		if f.Layer != detect.LayerDecode {
			t.Errorf("%s in: layer %s", after, f.Layer)
		}
		if after >= 5*minute {
			// Latency far above 4x the pre-slowdown baseline.
			if f.Severity != detect.Critical {
				t.Errorf("%s in: severity %s, want critical", after, f.Severity)
			}
			contains(t, "diagnosis", f.Diagnosis, "GPU side", "established")
			if e := evidenceNamed(t, f, "inter-token latency p99"); !e.HasBaseline || e.Baseline > 0.04 {
				t.Errorf("%s in: the held finding must compare with the baseline before the slowdown: %+v", after, e)
			}
		}
	}
}

// The hold ends when the latency comes back, even while the backlog the
// slowdown built is still being served (a bigger batch at normal speed).
func TestDecodeSlowdownHoldEndsWhenLatencyRecovers(t *testing.T) {
	const end = 65 * time.Minute
	onset := end - 12*minute
	fixed := end - 2*minute - 30*time.Second
	s := gpuSlowdown(onset).with(hist(series.InterTokenLatency, itlBounds, constant(300), func(el time.Duration) float64 {
		switch {
		case el < onset:
			return 0.028
		case el < fixed:
			return 0.2
		}
		return 0.03
	}))
	none(t, run(t, s, detect.DecodeSlowdown))
}

// Holding is not a back door for load: latency that rose together with
// the batch and the arrivals never had an onset at an unchanged batch, so
// there is nothing to hold, however long the load lasts.
func TestDecodeSlowdownHoldNeedsAnOnset(t *testing.T) {
	const end = 65 * time.Minute
	surge := end - 12*minute
	tests := []struct {
		name string
		s    *scenario
	}{
		{"load grew in one step", fullEngine().with(
			hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(surge, 0.028, 0.09)),
			gauge(series.NumRunningReqs, stepAt(surge, 40, 120)),
			gauge(series.DecodeSumSeqLens, stepAt(surge, 60000, 180000)),
			counter(series.HTTPRequestsTotal, stepAt(surge, 10, 30), "endpoint", chat, "method", "POST"))},
		{"load grew gradually", fullEngine().with(
			hist(series.InterTokenLatency, itlBounds, constant(300), rampAt(surge, 8*minute, 0.028, 0.09)),
			gauge(series.NumRunningReqs, rampAt(surge, 8*minute, 40, 120)),
			gauge(series.DecodeSumSeqLens, rampAt(surge, 8*minute, 60000, 180000)),
			counter(series.HTTPRequestsTotal, rampAt(surge, 8*minute, 10, 30), "endpoint", chat, "method", "POST"))},
		// A preemption storm is preempt_storm's, held or not.
		{"retractions", gpuSlowdown(surge).with(counter(series.RetractedRequestsTotal, stepAt(surge, 0.001, 2)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, after := range []time.Duration{3 * minute, 8 * minute, 12 * minute} {
				tt.s.length = surge + after
				none(t, run(t, tt.s, detect.DecodeSlowdown))
			}
		})
	}
}
