package assess

import (
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func TestNoFirstTokenForNeedsQueuedRequestsAndASpan(t *testing.T) {
	v := func(f float64) *float64 { return &f }
	for _, tc := range []struct {
		name   string
		s      Snapshot
		want   time.Duration
		wantOK bool
	}{
		{"queued, none started", Snapshot{ObservedSeconds: 20, FirstTokens: v(0), QueuedRequests: v(179)}, 20 * time.Second, true},
		{"some started", Snapshot{ObservedSeconds: 20, FirstTokens: v(3), QueuedRequests: v(179)}, 0, false},
		{"nothing queued: an idle replica", Snapshot{ObservedSeconds: 20, FirstTokens: v(0), QueuedRequests: v(0.4)}, 0, false},
		{"a span one long prefill can fill", Snapshot{ObservedSeconds: 5, FirstTokens: v(0), QueuedRequests: v(179)}, 0, false},
		{"no TTFT histogram", Snapshot{ObservedSeconds: 20, QueuedRequests: v(179)}, 0, false},
		{"no queue gauge", Snapshot{ObservedSeconds: 20, FirstTokens: v(0)}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.s.NoFirstTokenFor()
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("NoFirstTokenFor() = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// A disaggregated engine's TTFT count does not say whether its requests
// started, so only a unified engine's snapshot counts first tokens.
func TestFirstTokensAreCountedOnUnifiedEnginesOnly(t *testing.T) {
	s, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= 3; i++ {
		at := t0.Add(time.Duration(i-3) * 10 * time.Second)
		for _, role := range []string{"unified", "prefill", "decode"} {
			if err := s.Append(series.Scrape{Target: role, Kind: "engine", At: at, Groups: []series.Group{{Model: "m", EngineType: role,
				Samples: []series.Sample{{Name: series.NumQueueReqs, Value: 12}, {Name: series.TTFTSeconds + "_count", Value: 40}}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(s.Replicas()); n != 3 {
		t.Fatalf("%d replicas; want 3", n)
	}
	for _, r := range s.Replicas() {
		s.View(r.Name, func(w detect.Window) {
			snap := ReadSnapshot(w, t0.Add(-30*time.Second), t0, detect.DefaultInferenceEndpoints)
			span, stalled := snap.NoFirstTokenFor()
			if want := r.EngineType == "unified"; stalled != want {
				t.Errorf("%s engine: NoFirstTokenFor() = %v, %v; want stalled %v", r.EngineType, span, stalled, want)
			}
		})
	}
}
