package notify_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

func TestLogNotifierWritesReadableBlockAndStructuredLine(t *testing.T) {
	var out bytes.Buffer
	core, logs := observer.New(zapcore.InfoLevel)
	n := notify.NewLogNotifier(&out, zap.New(core))
	ev := notifytest.PreemptStorm(notifytest.T0)
	ev.Headline = "llama-70b-0: requests retracted 4.2/s, KV cache 97% full; queue 148"
	ev.Model = "evil\nmodel: forged line"
	ev.Triage = "admission bottleneck (running low, waiting high): 12 running, 148 queued, KV usage 97%. Next step: find what holds the KV"
	if err := n.Notify(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"=== [CRITICAL] llama-70b-0: requests retracted 4.2/s, KV cache 97% full; queue 148 ===",
		"diagnosis:", "evidence:",
		"retractions: 4.2/s (baseline 0.05/s; rule > 1/s and > 10x baseline)",
		"KV cache usage: 97% (baseline 71%; rule > 95%)",
		"do now:         Shift traffic away",
		"explained by:   cache_collapse", "model:          evil model: forged line",
		"runbook:        " + notifytest.BaseURL + "/runbooks/preempt_storm",
		"alert:          " + notifytest.BaseURL + "/incidents/" + ev.Incident,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("block lacks %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "admission bottleneck") != 1 {
		t.Errorf("the triage must appear exactly once:\n%s", text)
	}
	if logs.Len() != 1 || logs.All()[0].ContextMap()["fingerprint"] != ev.Fingerprint {
		t.Errorf("structured line: %v", logs.All())
	}

	out.Reset()
	res := notifytest.Resolve(ev, notifytest.T0.Add(12*time.Minute+30*time.Second))
	res.Headline = "llama-70b-0: preempt storm over after 12 min; now queue 3"
	res.Recovered = []notify.Field{{Name: "queued requests", Value: 3}, {Name: "KV cache usage", Value: 0.6, Unit: "ratio"}}
	_ = n.Notify(context.Background(), res)
	text = out.String()
	for _, want := range []string{
		"=== [RESOLVED] llama-70b-0: preempt storm over after 12 min; now queue 3 (peak queue 148) ===",
		"recovered (now, peak):", "  - KV cache usage: 60% (peak 97%)", "  - retractions: peak 4.2/s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("resolve block lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "do now:") || strings.Contains(text, "triage:") || !strings.Contains(text, "while it fired: ") {
		t.Errorf("a resolve must not read as still burning (emergency step or triage shown, diagnosis not in the past):\n%s", text)
	}
}
