package detect_test

import (
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// replicaOfSize is healthyEngine finishing perSecond requests/s, its KV
// pool full from the incident on, retracting base/s before it and rate/s
// from then on.
func replicaOfSize(perSecond, base, rate float64) *scenario {
	return healthyEngine().with(
		counter(series.NumRequestsTotal, constant(perSecond)),
		counter(series.HTTPRequestsTotal, constant(perSecond), "endpoint", chat, "method", "POST"),
		counter(series.RetractedRequestsTotal, stepAt(incident, base, rate)),
		gauge(series.TokenUsage, stepAt(incident, 0.6, 0.97)),
		gauge(series.FullTokenUsage, stepAt(incident, 0.6, 0.97)),
	)
}

// The retraction floor scales with the requests a replica completes: half
// a retraction per second is routine for a replica finishing a hundred
// requests per second, a storm for one finishing a few per minute.
func TestPreemptStormFloorScalesWithThroughput(t *testing.T) {
	t.Run("big replica, routine retractions", func(t *testing.T) {
		// 0.5% of the requests, ten times a quiet baseline: not a storm.
		none(t, run(t, replicaOfSize(100, 0.05, 0.5), detect.PreemptStorm))
	})
	t.Run("big replica, storm", func(t *testing.T) {
		// 3% of the requests: a storm, but a warning — the replica still
		// completes 97 of 100.
		f := one(t, run(t, replicaOfSize(100, 0.05, 3), detect.PreemptStorm))
		if f.Severity != detect.Warning {
			t.Errorf("3%% of a big replica's requests retracted: %s, want warning", f.Severity)
		}
		contains(t, "evidence", evidenceNamed(t, f, "retracted requests/s").Threshold, "finished")
	})
	t.Run("small replica, storm", func(t *testing.T) {
		// 2 requests/s, one in 25 retracted.
		f := one(t, run(t, replicaOfSize(2, 0, 0.08), detect.PreemptStorm))
		checkCommon(t, f, detect.PreemptStorm)
		if f.Severity != detect.Warning {
			t.Errorf("severity %s, want warning", f.Severity)
		}
	})
	t.Run("small replica, most requests retracted", func(t *testing.T) {
		f := one(t, run(t, replicaOfSize(0.4, 0, 0.3), detect.PreemptStorm))
		if f.Severity != detect.Critical {
			t.Errorf("75%% of the requests retracted: %s, want critical", f.Severity)
		}
	})
	t.Run("small replica, a few retractions", func(t *testing.T) {
		// Three in two minutes: below the absolute floor whatever the share.
		none(t, run(t, replicaOfSize(0.4, 0, 0.025), detect.PreemptStorm))
	})
}

// Without a completion counter the absolute floors decide, as before.
func TestPreemptStormFloorWithoutCompletions(t *testing.T) {
	s := replicaOfSize(100, 0.05, 2).without(series.NumRequestsTotal)
	f := one(t, run(t, s, detect.PreemptStorm))
	if f.Severity != detect.Critical {
		t.Errorf("2/s without a completion rate: %s, want critical (absolute floor)", f.Severity)
	}
}
