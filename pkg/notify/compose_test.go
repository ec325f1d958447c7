package notify_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// The headline adds what users feel unless its line already gives that
// number: a number stated as part of another ("1" in "100% full") is not.
func TestHeadlineImpactNotHiddenByADigitOfAnotherNumber(t *testing.T) {
	v := func(f float64) *float64 { return &f }
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	storm := notify.Event{Class: "preempt_storm", Severity: detect.Critical, Replica: "sim-0", Kind: notify.KindUpdate,
		Status: notify.StatusFiring, StartsAt: at, At: at,
		Summary: "Preemption storm: 0.158 retracted requests/s (baseline 0/s), KV cache 100% full",
		Impact:  &notify.Impact{Queued: v(179), AbortsPerSecond: v(1)}}
	for _, tc := range []struct {
		name, summary string
		want, not     []string
	}{
		{"digits of other numbers", storm.Summary, []string{"; queue 179, aborted 1/s"}, nil},
		{"the queue already given", "Requests wait: 179 requests queued behind a full pool", []string{"aborted 1/s"}, []string{"queue 179"}},
		{"the aborts already given", "Clients give up (1/s aborted)", []string{"queue 179"}, []string{"aborted 1/s"}},
		{"a number of another unit", "No token processed for 179m, 179% of", []string{"queue 179, aborted 1/s"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := storm
			ev.Summary = tc.summary
			h := notify.Compose(ev).Headline
			for _, w := range tc.want {
				if !strings.Contains(h, w) {
					t.Errorf("headline %q lacks %q", h, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(h, w) {
					t.Errorf("headline %q gives %q again", h, w)
				}
			}
		})
	}
}
