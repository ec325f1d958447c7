package pagelint_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagelint"
)

var at = time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)

// page is a sound trigger: every rule holds.
func page() notify.Event {
	queued, ttft := 60.0, 0.4
	ev := notify.Event{
		Fingerprint: "f1", Incident: "f1-1", Seq: 1, Kind: notify.KindTrigger, Status: notify.StatusFiring,
		Class: "preempt_storm", Title: "Preemption storm", Severity: detect.Critical, Replica: "sglang-0",
		Summary:   "Preemption storm: 2 retracted requests/s (baseline 0.001/s), KV cache 97% full",
		Diagnosis: "KV cache layer: the pool is full.",
		Triage:    "saturated but working (running high, waiting high): 40 running (capacity 40), 60 queued",
		Evidence: []notify.Field{
			{Name: "retracted requests/s", Value: 2, Baseline: 0.001, HasBase: true, Unit: "/s", Threshold: ">= 0.1/s"},
			{Name: "KV cache usage (max in range)", Value: 0.97, Unit: "ratio", Threshold: ">= 90%"},
			{Name: "queued requests", Value: 60},
		},
		Emergency:  []string{"Lower --max-running-requests on this replica."},
		Impact:     &notify.Impact{Queued: &queued, TTFTP99: &ttft},
		RunbookURL: "https://wd/runbooks/preempt_storm", AlertURL: "https://wd/incidents/f1-1",
		StartsAt: at, At: at,
	}
	return notify.Compose(ev)
}

// resolve is the sound resolve of page.
func resolve() notify.Event {
	ev := page()
	ev.Seq, ev.Kind, ev.Status = 2, notify.KindResolve, notify.StatusResolved
	ev.At, ev.EndsAt = at.Add(10*time.Minute), at.Add(10*time.Minute)
	ev.Evidence = []notify.Field{
		{Name: "retracted requests/s", Value: 3, Baseline: 0.001, HasBase: true, Unit: "/s", Threshold: ">= 0.1/s"},
		{Name: "KV cache usage (max in range)", Value: 0.98, Unit: "ratio", Threshold: ">= 90%"},
	}
	ev.Recovered = []notify.Field{{Name: "KV cache usage", Value: 0.5, Unit: "ratio"}, {Name: "retracted requests", Value: 0, Unit: "/s"}}
	ev.Impact = nil
	return notify.Compose(ev)
}

var allowed = func(f string) bool {
	return slices.Contains([]string{"--max-running-requests", "--schedule-conservativeness"}, f)
}

func rules(ps []pagelint.Problem) []pagelint.Rule {
	var out []pagelint.Rule
	for _, p := range ps {
		out = append(out, p.Rule)
	}
	return out
}

func TestSoundPagesPass(t *testing.T) {
	if ps := pagelint.CheckIncident([]notify.Event{page(), resolve()}, pagelint.Options{Flag: allowed}); len(ps) > 0 {
		t.Fatalf("a sound incident breaks %v", ps)
	}
}

// Each rule fails the page that breaks it, and only that rule.
func TestEachRuleCatchesItsBreak(t *testing.T) {
	for _, tc := range []struct {
		rule   pagelint.Rule
		break_ func() []notify.Event
	}{
		{pagelint.RuleHeadline, func() []notify.Event {
			ev := page()
			ev.Headline += "; p99 TTFT 3.98 s" // a second TTFT, another number
			return []notify.Event{ev}
		}},
		{pagelint.RuleHeadline, func() []notify.Event {
			ev := page()
			ev.Evidence[2].Value = 47 // the evidence's queue disagrees with the headline's 60
			return []notify.Event{ev}
		}},
		{pagelint.RuleHeadline, func() []notify.Event {
			// A failing lead's abort rate over another range than the
			// evidence's.
			ev := page()
			ev.Evidence = append(ev.Evidence, notify.Field{Name: "aborted requests/s", Value: 5.11, Unit: "/s"})
			ev.Headline = "sglang-0: 27.6% of requests failing over 30s (3.62/s aborted) — " + ev.Headline[len("sglang-0: "):]
			return []notify.Event{ev}
		}},
		{pagelint.RulePeak, func() []notify.Event {
			res := resolve()
			res.Evidence[0].Value = 1 // a peak below the 2/s the trigger said
			return []notify.Event{page(), res}
		}},
		{pagelint.RulePeak, func() []notify.Event {
			// An update said the pool was 99.9% full; the resolve's peak
			// of KV usage is another measure's 91%.
			update := page()
			update.Seq, update.Kind = 2, notify.KindUpdate
			update.Evidence[1].Value = 0.999
			res := resolve()
			res.Seq = 3
			res.Evidence[1] = notify.Field{Name: "KV cache usage (avg)", Value: 0.91, Baseline: 0.1, HasBase: true, Unit: "ratio"}
			return []notify.Event{page(), update, res}
		}},
		{pagelint.RulePeak, func() []notify.Event {
			res := resolve()
			res.Evidence = append(res.Evidence, notify.Field{Name: "queued requests", Value: 60})
			res.Recovered = append(res.Recovered, notify.Field{Name: "queued requests", Value: 2})
			return []notify.Event{res} // a context number shown at a peak
		}},
		{pagelint.RuleResolve, func() []notify.Event {
			res := resolve()
			res.Diagnosis += " The cause has cleared; what it caused is still draining, so the incident stays open."
			return []notify.Event{res}
		}},
		{pagelint.RuleTriage, func() []notify.Event {
			ev := page()
			ev.Triage = "admission bottleneck (running low, waiting high): 128 running (capacity 128), 29 queued"
			return []notify.Event{ev}
		}},
		{pagelint.RulePercent, func() []notify.Event {
			ev := page()
			ev.Diagnosis += " LoRA utilization 1 across the pool."
			return []notify.Event{ev}
		}},
		{pagelint.RulePercent, func() []notify.Event {
			ev := page()
			ev.Diagnosis += " Prefill layer: KV usage is normal (0.38 (baseline 0.117))."
			return []notify.Event{ev}
		}},
		{pagelint.RuleDuplicate, func() []notify.Event {
			ev := page()
			ev.Evidence = append(ev.Evidence, notify.Field{Name: "retracted requests/s (last range)", Value: 2, Unit: "/s"})
			return []notify.Event{ev}
		}},
		{pagelint.RuleUnits, func() []notify.Event {
			ev := page()
			ev.Diagnosis += " TTFT reached 3.98s."
			return []notify.Event{ev}
		}},
		{pagelint.RuleFlags, func() []notify.Event {
			ev := page()
			ev.Emergency = append(ev.Emergency, "Restart with --disable-lora.")
			return []notify.Event{ev}
		}},
	} {
		t.Run(string(tc.rule), func(t *testing.T) {
			got := rules(pagelint.CheckIncident(tc.break_(), pagelint.Options{Flag: allowed}))
			if len(got) == 0 || slices.ContainsFunc(got, func(r pagelint.Rule) bool { return r != tc.rule }) {
				t.Errorf("broke %s, the linter reports %v", tc.rule, got)
			}
		})
	}
}

func TestProblemsNameTheirRule(t *testing.T) {
	ev := page()
	ev.Diagnosis += " TTFT reached 3.98s."
	ps := pagelint.Check(ev, pagelint.Options{})
	if len(ps) != 1 || !strings.HasPrefix(ps[0].String(), "units: ") {
		t.Errorf("problems %v", ps)
	}
}
