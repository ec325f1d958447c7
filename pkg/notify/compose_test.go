package notify_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// stormUpdate is an update of a preemption storm whose replica's users
// feel impact.
func stormUpdate(impact notify.Impact) notify.Event {
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	return notify.Event{Class: "preempt_storm", Severity: detect.Critical, Replica: "sim-0", Kind: notify.KindUpdate,
		Status: notify.StatusFiring, StartsAt: at, At: at,
		Summary: "Preemption storm: 0.158 retracted requests/s (baseline 0/s), KV cache 100% full",
		Impact:  &impact}
}

func ptr(f float64) *float64 { return &f }

// The headline adds what users feel unless its line already gives that
// number: a number stated as part of another ("1" in "100% full") is not.
func TestHeadlineImpactNotHiddenByADigitOfAnotherNumber(t *testing.T) {
	storm := stormUpdate(notify.Impact{Queued: ptr(179), AbortsPerSecond: ptr(1)})
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

// A replica that starts no request has no TTFT to give: the headline says
// that none got a first token, not nothing.
func TestHeadlineSaysNoFirstTokenWhenNoneStarted(t *testing.T) {
	ev := stormUpdate(notify.Impact{Queued: ptr(179), AbortsPerSecond: ptr(1), NoFirstTokenSeconds: ptr(20)})
	if h, want := notify.Compose(ev).Headline, "; queue 179, no first token in 20s, aborted 1/s"; !strings.HasSuffix(h, want) {
		t.Errorf("headline %q; want it to end %q", h, want)
	}
	hang := ev
	hang.Summary = "Engine hang: 42 requests in flight but no token processed for 2m"
	if h := notify.Compose(hang).Headline; strings.Contains(h, "first token") {
		t.Errorf("headline %q says it twice", h)
	}
	res := ev
	res.Kind, res.Status = notify.KindResolve, notify.StatusResolved
	if h := notify.Compose(res).Headline; strings.Contains(h, "first token") {
		t.Errorf("a resolve's headline %q says none started", h)
	}
}
