package detect_test

import (
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// doNothing are first steps that tell on-call to do nothing.
var doNothing = []string{"nothing needs to be done", "no action", "do nothing", "nothing to do", "before acting"}

// A critical page never opens with "do nothing": whatever the diagnosis,
// its first emergency step is an action.
func TestKVSaturationCriticalFirstStepIsAnAction(t *testing.T) {
	full := func() *scenario { return fullEngine().with(kvUsageTo(incidentLong, 0.995)...) }
	tests := []struct {
		name string
		s    *scenario
	}{
		{"capacity", full()},
		{"runaway outputs", full().with(
			counter(series.NumRequestsTotal, stepAt(incidentLong, 10, 4)),
			counter(series.GenerationTokensTotal, stepAt(incidentLong, 3000, 4*4096)),
			hist(series.GenerationTokensHist, genTokBounds, stepAt(incidentLong, 10, 4), stepAt(incidentLong, 300, 4096)))},
		{"runaway sequences", full().with(gauge(series.DecodeSumSeqLens, stepAt(incidentLong, 60000, 160000)))},
		{"high prefix hit rate", full().with(hitRateChange(incidentLong, 0.9)...)},
		{"high prefix hit rate all along", full().with(hitRateChange(0, 0.9)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.s, detect.KVSaturation))
			if f.Severity != detect.Critical {
				t.Fatalf("severity %s, want critical (no free slot in a hundred for the whole range)", f.Severity)
			}
			first := strings.ToLower(f.Emergency[0])
			for _, p := range doNothing {
				if strings.Contains(first, p) {
					t.Errorf("critical page opens with a do-nothing step: %q", f.Emergency[0])
				}
			}
		})
	}
}

// token_usage (and every other usage source the detector reads) counts the
// radix cache's evictable prefixes as free: a pool full by that measure is
// held by running requests, never by prefixes kept "on purpose". A high hit
// rate is reported, not taken for the cause.
func TestKVSaturationHighHitRateIsNotRetention(t *testing.T) {
	s := fullEngine().with(kvUsageTo(incidentLong, 0.97)...).with(hitRateChange(incidentLong, 0.9)...)
	f := one(t, run(t, s, detect.KVSaturation))
	if strings.Contains(f.Diagnosis, "Deliberate retention") || strings.Contains(f.Diagnosis, "not a leak and not a bug") {
		t.Errorf("a full pool by token_usage diagnosed as deliberate retention: %s", f.Diagnosis)
	}
	contains(t, "diagnosis", f.Diagnosis, "evictable", "running requests")
	evidenceNamed(t, f, "prefix cache hit rate")
}
