package slack

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// The thread reply of an update says what grew: the consequence that
// joined, users failing, the cause cleared while its backlog stays.
func TestChangeTextSaysWhatGrew(t *testing.T) {
	last := notifytest.PreemptStorm(time.Unix(100, 0))
	last.Explains, last.Severity = nil, detect.Warning
	ev := notifytest.Update(last, time.Unix(200, 0), detect.Critical)
	ev.Explains = []string{"error_rate"}
	ev.Failing = "100% of requests failing over 2m (14/s aborted)"
	ev.Draining = true
	ev.Summary = "TTFT p99 3.98 s (baseline 0.398 s)"
	text := ChangeText(last, ev)
	for _, want := range []string{"Escalated", "warning → critical", "Users failing:* 100% of requests failing", "Cause cleared", "TTFT p99 3.98 s", "Now also:* error_rate"} {
		if !strings.Contains(text, want) {
			t.Errorf("thread reply lacks %q:\n%s", want, text)
		}
	}
	if same := ChangeText(ev, ev); same != "" && strings.Contains(same, "Now also") {
		t.Errorf("nothing grew, yet: %s", same)
	}
}

// The cause found after its consequence paged renames the incident: the
// reply names the cause, not the consequence as something new.
func TestChangeTextSaysTheCauseWasIdentified(t *testing.T) {
	last := notifytest.CacheCollapse(time.Unix(100, 0))
	ev := notifytest.Update(notifytest.PreemptStorm(time.Unix(100, 0)), time.Unix(104, 0), detect.Critical)
	ev.Fingerprint = last.Fingerprint
	ev.Explains, ev.ExplainedBy = []string{"cache_collapse", "error_rate"}, nil
	text := ChangeText(last, ev)
	for _, want := range []string{"Cause identified:* preempt_storm; the incident is named after it", "Now also:* error_rate"} {
		if !strings.Contains(text, want) {
			t.Errorf("thread reply lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "cache_collapse") {
		t.Errorf("the former class reads as new:\n%s", text)
	}
}
