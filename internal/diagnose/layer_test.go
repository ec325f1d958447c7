package diagnose

import (
	"strings"
	"testing"
)

func p(v float64) *float64 { return &v }

// TestTriage walks the runbook's table: running versus queued versus
// latency.
func TestTriage(t *testing.T) {
	th := DefaultThresholds()
	for _, tc := range []struct {
		name   string
		s      State
		layer  string
		reason string
	}{
		{"seeds' example: few running, many waiting, KV full",
			State{RunningRequests: p(8), QueuedRequests: p(47), KVUsage: p(0.91)}, LayerAdmission, "KV pool is full"},
		{"batch at its cap, queue forming, KV room",
			State{RunningRequests: p(64), QueuedRequests: p(92), KVUsage: p(0.17)}, LayerSaturated, "at its cap"},
		{"exposed cap, batch well below it, KV room",
			State{RunningRequests: p(20), QueuedRequests: p(30), KVUsage: p(0.3), MaxRunningRequests: p(64)}, LayerAdmission, "not forming batches"},
		{"exposed cap reached",
			State{RunningRequests: p(62), QueuedRequests: p(30), KVUsage: p(0.95), MaxRunningRequests: p(64)}, LayerSaturated, "at its cap"},
		{"seeds' scenario: TTFT 2.8s, 2.3s of it queue wait",
			State{RunningRequests: p(3), QueuedRequests: p(2), TTFTP99: p(2.9), TTFTMean: p(2.8), QueueTimeMean: p(2.3)}, LayerAdmission, "queue wait is 2.3s of 2.8s"},
		{"TTFT high, prefill itself slow",
			State{RunningRequests: p(3), QueuedRequests: p(0), TTFTP99: p(4), TTFTMean: p(3.5), QueueTimeMean: p(0.1)}, LayerExecution, "queue wait 100ms of 3.5s"},
		{"decode slow at a small batch",
			State{RunningRequests: p(4), QueuedRequests: p(0), ITLP99: p(0.6)}, LayerExecution, "inter-token p99 600ms"},
		{"no progress over 30s",
			State{ObservedSeconds: 30, RunningRequests: p(12), QueuedRequests: p(40), DecodeProgress: p(0)}, LayerStuck, "did not move"},
		{"flat decode counter, span too short for slow decode",
			State{ObservedSeconds: 12, RunningRequests: p(12), QueuedRequests: p(0), DecodeProgress: p(0), ITLP99: p(0.5)}, LayerExecution, ""},
		{"idle", State{RunningRequests: p(0), QueuedRequests: p(0), DecodeProgress: p(0), ObservedSeconds: 60}, LayerIdle, ""},
		{"healthy", State{RunningRequests: p(40), QueuedRequests: p(2), KVUsage: p(0.5), TTFTP99: p(0.4), ITLP99: p(0.04)}, LayerHealthy, ""},
		{"gateway: no scheduler gauges", State{HTTPInFlight: p(300)}, LayerUnknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Triage(tc.s, th)
			if v.Layer != tc.layer || !strings.Contains(v.Reason, tc.reason) || v.Next == "" || v.Label == "" {
				t.Errorf("Triage = %+v, want layer %q with reason containing %q", v, tc.layer, tc.reason)
			}
		})
	}
}
