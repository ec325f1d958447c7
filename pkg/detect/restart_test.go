package detect_test

import (
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// ReplicaRestarted's golden page (checkPage): a restart while the replica
// kept answering.
func TestGoldenPageEventsReplicaRestarted(t *testing.T) {
	s := healthyEngine()
	s.restarts = []time.Duration{incident}
	checkPage(t, pageCase{class: detect.ReplicaRestarted, scenario: s, noSingleLimit: "a restart within the look-back"})
}
