package backtest

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// A replay pages an SLO burn as the daemon does: time to first token
// drifts from 0.3 s to 0.5 s (1.7x, which no detector calls an incident)
// against a 400 ms objective for 99% of requests, with a 30m/5m page
// rule. From the drift every request is bad (a burn rate of 100x); the
// 30m window passes 14.4x about 4.3 minutes later, so one critical
// slo_burn page for the model comes between 40 and 46 minutes. Replayed
// without objectives, the same history pages nothing. (The synthetic
// engine exposes only what these decisions read: metrics_blind is off.)
func TestReplayPagesAnSLOBurn(t *testing.T) {
	const drift, d = 40 * time.Minute, 50 * time.Minute
	ttft := func(el time.Duration) float64 {
		if el >= drift {
			return 0.5
		}
		return 0.3
	}
	scrapes := engineScrapes("engine-0", d, ttft)
	s := demoSettings(t)
	detect.Edit(&s.Detectors, func(c *detect.MetricsBlindConfig) { c.Enabled = false })
	s.SLOs = slo.Config{
		Policy: slo.Policy{Page: []slo.Window{{Long: 30 * time.Minute, Short: 5 * time.Minute, BurnRate: 14.4}}, MinEvents: 20},
		Objectives: []slo.Objective{{Name: "chat-ttft", Model: "Qwen/Qwen3-8B", Kind: slo.TTFT, Threshold: 400 * time.Millisecond,
			Target: 0.99, Period: 24 * time.Hour}},
	}
	if err := s.SLOs.Validate("slos"); err != nil {
		t.Fatal(err)
	}
	res, err := Run(Scrapes(scrapes, start, start.Add(d), 15*time.Second), s)
	if err != nil {
		t.Fatal(err)
	}
	var triggers []notify.Event
	for _, ev := range res.Events {
		if ev.Kind == notify.KindTrigger {
			triggers = append(triggers, ev)
		}
	}
	if len(triggers) != 1 {
		t.Fatalf("%d pages, want one slo_burn:\n%s", len(triggers), timeline(res.Events))
	}
	page := triggers[0]
	if page.Class != "slo_burn" || page.Severity != detect.Critical || page.Replica != "fleet/Qwen/Qwen3-8B" {
		t.Errorf("page %s %s on %s, want a critical slo_burn on fleet/Qwen/Qwen3-8B", page.Class, page.Severity, page.Replica)
	}
	if at := page.At.Sub(start); at < drift || at > drift+6*time.Minute {
		t.Errorf("paged at t+%s, want within 6 minutes of the drift at t+%s", at, drift)
	}
	if want := `of requests had their first token within 0.4s over 5m (objective 99%): SLO "chat-ttft" burning at`; !strings.Contains(page.Summary, want) {
		t.Errorf("summary %q lacks %q", page.Summary, want)
	}

	s.SLOs = slo.Config{}
	res, err = Run(Scrapes(scrapes, start, start.Add(d), 15*time.Second), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 0 {
		t.Errorf("without objectives the drift paged:\n%s", timeline(res.Events))
	}
}
