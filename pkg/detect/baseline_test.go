package detect_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Baselines that only saw a warm-up. The window holds `length` of history
// (the watchdog or the replica started then); the first minutes are light
// traffic, then the replica runs the heavy, healthy load it was built for.
// Compared with the warm-up that load looks like an incident; no ratio to
// such a baseline may count.

// loadChange is what a busy period does to fullEngine from at on, as each
// class sees it: first tokens and queue waits slower (queue_latency), the
// inter-token gap longer at the same batch (decode_slowdown), prompts
// sharing less of the cache (cache_collapse).
func loadChange(class detect.Class, at time.Duration, rate fn) []metric {
	switch class {
	case detect.QueueLatency:
		return []metric{
			hist(series.TTFTSeconds, ttftBounds, rate, stepAt(at, 0.3, 1.5)),
			hist(series.QueueTimeSeconds, queueBounds, rate, stepAt(at, 0.05, 1.1)),
		}
	case detect.DecodeSlowdown:
		return []metric{hist(series.InterTokenLatency, itlBounds, func(el time.Duration) float64 { return 30 * rate(el) }, stepAt(at, 0.028, 0.07))}
	case detect.CacheCollapse:
		return hitRateChange(at, 0.3)
	}
	panic("loadChange: no case for " + string(class))
}

// warmedUp is fullEngine under light warm-up traffic until busyAt, then the
// heavy load it was built for, with the window holding length of history.
func warmedUp(class detect.Class, length, busyAt time.Duration) *scenario {
	rate := stepAt(busyAt, 2, 10)
	s := fullEngine().with(
		counter(series.HTTPRequestsTotal, rate, "endpoint", chat, "method", "POST"),
		counter(series.NumRequestsTotal, rate),
	).with(loadChange(class, busyAt, rate)...)
	s.length = length
	return s
}

var baselineClasses = []struct {
	class detect.Class
	rng   time.Duration // the detector's range: the load starts as it begins
}{
	{detect.QueueLatency, 5 * minute},
	{detect.DecodeSlowdown, 2 * minute},
	{detect.CacheCollapse, 5 * minute},
}

func TestWarmUpBaselineDoesNotPage(t *testing.T) {
	for _, tt := range baselineClasses {
		t.Run(string(tt.class), func(t *testing.T) {
			length := tt.rng + 4*minute // four minutes of warm-up in the baseline
			none(t, run(t, warmedUp(tt.class, length, length-tt.rng+time.Second), tt.class))
		})
	}
}

// A baseline that spans the hour but rests on a trickle of traffic (a
// night) is no reference for a busy morning either.
func TestQuietBaselineDoesNotPage(t *testing.T) {
	s := fullEngine().with(
		counter(series.HTTPRequestsTotal, stepAt(incidentLong, 0.05, 10), "endpoint", chat, "method", "POST"),
		counter(series.NumRequestsTotal, stepAt(incidentLong, 0.05, 10)),
	).with(loadChange(detect.QueueLatency, incidentLong, stepAt(incidentLong, 0.05, 10))...)
	none(t, run(t, s, detect.QueueLatency))
}

// The minimum is what holds: the same change against a baseline that
// reaches back over more than half its span at steady traffic pages, and
// stops paging when more than the window holds is required.
func TestBaselineCoverageIsWhatHolds(t *testing.T) {
	for _, tt := range baselineClasses {
		t.Run(string(tt.class), func(t *testing.T) {
			length := tt.rng + 35*minute
			at := length - tt.rng + time.Second
			s := fullEngine().with(loadChange(tt.class, at, constant(10))...)
			s.length = length
			one(t, run(t, s, tt.class))
			cfg := detect.DefaultConfig()
			setCoverage(&cfg, tt.class, detect.BaselineCoverage{MinSpanShare: 0.9, MinDensityShare: 0.5, MinRequests: 100})
			none(t, detectWith(t, s, cfg, tt.class))
		})
	}
}

// preempt_storm's ratio to its baseline waits for a covered baseline; its
// absolute floor does not (a young replica in a storm still pages).
func TestPreemptStormYoungReplicaAbsoluteFloorDecides(t *testing.T) {
	at := 5*minute + time.Second
	s := healthyEngine().with(
		counter(series.RetractedRequestsTotal, stepAt(at, 0.3, 0.6)),
		gauge(series.TokenUsage, constant(0.97)),
		gauge(series.FullTokenUsage, constant(0.97)),
	)
	s.length = 7 * minute
	// Against the 5-minute warm-up (0.3/s) the ratio is 2, below 5: only
	// the floor can decide, and 0.6/s is above it.
	f := one(t, run(t, s, detect.PreemptStorm))
	checkCommon(t, f, detect.PreemptStorm)
}

// setCoverage sets the baseline coverage of one class's detector.
func setCoverage(cfg *detect.Config, class detect.Class, cov detect.BaselineCoverage) {
	switch class {
	case detect.QueueLatency:
		detect.Edit(cfg, func(s *detect.QueueLatencyConfig) { s.BaselineCoverage = cov })
	case detect.DecodeSlowdown:
		detect.Edit(cfg, func(s *detect.DecodeSlowdownConfig) { s.BaselineCoverage = cov })
	case detect.CacheCollapse:
		detect.Edit(cfg, func(s *detect.CacheCollapseConfig) { s.BaselineCoverage = cov })
	default:
		panic("setCoverage: no case for " + string(class))
	}
}

// The other baseline-based detectors: a short history is no baseline for
// them either, and their absolute floors still decide where they have one.
func TestWarmUpBaselineOtherDetectors(t *testing.T) {
	const length = 9 * minute
	at := length - 5*minute + time.Second // kv_saturation's 5-minute range
	t.Run("kv_saturation", func(t *testing.T) {
		// The pool fills from half to 97% as the load arrives.
		none(t, run(t, withLength(fullEngine().with(kvUsageTo(at, 0.97)...), length), detect.KVSaturation))
	})
	loraAt := length - 2*minute + time.Second
	lora := loraEngine().with(
		gauge(series.LoraPoolUtilization, stepAt(loraAt, 5.0/8, 1)),
		gauge(loraUsed, stepAt(loraAt, 5, 8)),
		counter(graphs, stepAt(loraAt, 30, 15), "mode", "decode_cuda_graph"),
		counter(graphs, stepAt(loraAt, 0, 15), "mode", "decode_none"),
		hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(loraAt, 0.028, 0.055)),
	)
	t.Run("lora_thrash", func(t *testing.T) {
		none(t, run(t, withLength(lora, length), detect.LoraThrash))
	})
	t.Run("lora_thrash with a covered baseline pages", func(t *testing.T) {
		full := loraEngine().with(
			gauge(series.LoraPoolUtilization, stepAt(incident, 5.0/8, 1)),
			gauge(loraUsed, stepAt(incident, 5, 8)),
			counter(graphs, stepAt(incident, 30, 15), "mode", "decode_cuda_graph"),
			counter(graphs, stepAt(incident, 0, 15), "mode", "decode_none"),
			hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(incident, 0.028, 0.055)),
		)
		one(t, run(t, full, detect.LoraThrash))
	})
	t.Run("pd_transfer_failure young replica: the floor decides", func(t *testing.T) {
		// 0.1/s during the warm-up, 0.2/s now: a ratio of 2, below 3, to a
		// baseline that is no reference; 0.2/s is far above the floor.
		s := pdDecode().with(counter(series.TransferFailedTotal, stepAt(loraAt, 0.1, 0.2)))
		f := one(t, run(t, withLength(s, length), detect.PDTransferFailure))
		if strings.Contains(f.Summary, "n/a") || !strings.Contains(f.Summary, "no baseline yet") {
			t.Errorf("summary without a baseline: %q", f.Summary)
		}
	})
}

func withLength(s *scenario, length time.Duration) *scenario {
	s.length = length
	return s
}
