package slo

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// The burn-rate and budget arithmetic, against values worked out by hand.
func TestBurnRateAndBudgetByHand(t *testing.T) {
	cases := []struct {
		name       string
		ev         Events
		target     float64
		burn, left float64
		ok         bool
	}{
		// 10 bad in 1000 is 1%: exactly a 99% objective's budget share.
		{"at the objective", Events{Good: 990, Total: 1000}, 0.99, 1, 0, true},
		// 144 bad in 1000 = 14.4%, over 1% allowed: 14.4x.
		{"workbook page rate", Events{Good: 856, Total: 1000}, 0.99, 14.4, -13.4, true},
		// 1 bad in 200 = 0.5% of a 1% budget: half of it spent.
		{"half the budget", Events{Good: 199, Total: 200}, 0.99, 0.5, 0.5, true},
		// 100 bad in 1000 = 10% against 0.5% allowed: 20x, budget 1-20.
		{"99.5% at 20x", Events{Good: 900, Total: 1000}, 0.995, 20, -19, true},
		{"all good", Events{Good: 500, Total: 500}, 0.999, 0, 1, true},
		{"no events", Events{}, 0.99, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			burn, ok := BurnRate(c.ev, c.target)
			if ok != c.ok || math.Abs(burn-c.burn) > 1e-9 {
				t.Errorf("BurnRate = %v, %v; want %v, %v", burn, ok, c.burn, c.ok)
			}
			left, ok := BudgetLeft(c.ev, c.target)
			if ok != c.ok || math.Abs(left-c.left) > 1e-9 {
				t.Errorf("BudgetLeft = %v, %v; want %v, %v", left, ok, c.left, c.ok)
			}
		})
	}
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// testPolicy is the workbook's page rules scaled down by 12 (1h -> 5m),
// so a window test spans minutes.
func testPolicy() Policy {
	return Policy{
		Page:      []Window{{Long: 60 * time.Minute, Short: 5 * time.Minute, BurnRate: 14.4}},
		Warning:   []Window{{Long: 120 * time.Minute, Short: 10 * time.Minute, BurnRate: 3}},
		MinEvents: 20,
	}
}

func ttftObjective() Objective {
	return Objective{Name: "chat-ttft", Model: "m", Kind: TTFT, Threshold: time.Second, Target: 0.99, Period: 24 * time.Hour}
}

// record adds, for each minute k = 1..n after from, perMinute(k).
func record(b *Book, from time.Time, n int, perMinute func(k int) Events) {
	for k := 1; k <= n; k++ {
		b.Record(from.Add(time.Duration(k)*time.Minute), []Sample{{Objective: "chat-ttft", Model: "m", Events: perMinute(k), Boundary: 1}})
	}
}

// The windows of the policy over the book's per-minute memory, by hand:
// 120 minutes of 100 events a minute, all good but the last 10 minutes,
// with 40 bad a minute.
//
//	5m:   500 events, 200 bad: 40% / 1% = 40x
//	60m:  6000 events, 400 bad: 6.67% / 1% = 6.67x  (< 14.4: no page)
//	10m:  1000 events, 400 bad: 40x;  120m: 12000, 400 bad: 3.33x > 3: warning
//	budget over the 2h held: 1 - 400 / (1% x 12000) = -2.33
func TestBookWindowsByHand(t *testing.T) {
	b := NewBook(Config{Policy: testPolicy(), Objectives: []Objective{ttftObjective()}})
	record(b, t0, 120, func(k int) Events {
		if k > 110 {
			return Events{Good: 60, Total: 100}
		}
		return Events{Good: 100, Total: 100}
	})
	sts := b.Status(t0.Add(120*time.Minute), nil)
	if len(sts) != 1 {
		t.Fatalf("statuses: %+v", sts)
	}
	st := sts[0]
	page, warn := st.Rules[0], st.Rules[1]
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("page short (5m)", page.Short.Rate, 40)
	near("page long (60m)", page.Long.Rate, 400.0/6000/0.01)
	near("warning short (10m)", warn.Short.Rate, 40)
	near("warning long (120m)", warn.Long.Rate, 400.0/12000/0.01)
	near("budget left", st.Budget, 1-400/(0.01*12000))
	near("SLI over 5m", st.SLI, 0.6)
	if page.Firing || !warn.Firing || st.Severity != detect.Warning {
		t.Errorf("page firing %v, warning firing %v, severity %v; want a warning only", page.Firing, warn.Firing, st.Severity)
	}
	if st.Held != 119*time.Minute || st.BudgetSpan != 119*time.Minute {
		t.Errorf("held %s, budget span %s", st.Held, st.BudgetSpan)
	}

	// Ten more bad minutes: 60m holds 20 bad minutes, 800 of 6000 bad:
	// 13.3x, still under 14.4; at 40 bad minutes... one more step of
	// 15 minutes: 60m holds 25 bad minutes = 1000/6000 = 16.7x: a page.
	record(b, t0.Add(120*time.Minute), 15, func(int) Events { return Events{Good: 60, Total: 100} })
	st = b.Status(t0.Add(135*time.Minute), nil)[0]
	near("page long after 25 bad minutes", st.Rules[0].Long.Rate, 1000.0/6000/0.01)
	if !st.Rules[0].Firing || st.Severity != detect.Critical {
		t.Errorf("page rule %+v; severity %v", st.Rules[0], st.Severity)
	}
	f, ok := st.Finding("slo_burn", "fleet/m")
	if !ok || f.Severity != detect.Critical || f.Model != "m" {
		t.Fatalf("finding %+v, %v", f, ok)
	}
	for _, want := range []string{`60% of requests had their first token within 1s over 5m (objective 99%): SLO "chat-ttft" burning at 16.7x over 1h and 40x over 5m`,
		"the error budget is spent: 741% used (2h 14m of the 1d period on record)"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary %q lacks %q", f.Summary, want)
		}
	}
}

// A rule's trend, by hand, on the same two hours (120 minutes of 100
// events, 40 bad a minute in the last 10). The page rule (60m, 5m) reaches
// back min(4 x 60m, 120m) = 120m, at round(120m / 95) = 1m steps, so its
// instants are now-95m .. now, one a minute:
//
//	now-95m (minute 25):  60m holds minutes 1..25, all good: 0x; 5m: 0x
//	now-10m (minute 110): 60m holds 51..110, all good: 0x
//	now-5m  (minute 115): 60m: 200 bad of 6000 = 3.33x; 5m: 200 of 500 = 40x
//	now     (minute 120): as the status: 6.67x and 40x
//
// The warning rule (120m, 10m) reaches back 120m too, its first instant at
// minute 25: 120m holds 25 minutes, all good: 0x. Before the first
// minute there are no events: not ok.
func TestBookTrendByHand(t *testing.T) {
	b := NewBook(Config{Policy: testPolicy(), Objectives: []Objective{ttftObjective()}})
	record(b, t0, 120, func(k int) Events {
		if k > 110 {
			return Events{Good: 60, Total: 100}
		}
		return Events{Good: 100, Total: 100}
	})
	now := t0.Add(120 * time.Minute)
	st := b.Status(now, nil)[0]
	page, warn := st.Rules[0], st.Rules[1]
	if len(page.Trend) != TrendPoints || len(warn.Trend) != TrendPoints {
		t.Fatalf("trends of %d and %d points, want %d", len(page.Trend), len(warn.Trend), TrendPoints)
	}
	at := func(tr []TrendPoint, before time.Duration) TrendPoint {
		t.Helper()
		p := tr[TrendPoints-1-int(before/time.Minute)]
		if !p.At.Equal(now.Add(-before)) {
			t.Fatalf("point %s before now is at %s", before, p.At)
		}
		return p
	}
	near := func(name string, got, want float64, ok bool) {
		t.Helper()
		if !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v (ok %v), want %v", name, got, ok, want)
		}
	}
	p := at(page.Trend, 95*time.Minute)
	near("page long at minute 25", p.Long, 0, p.LongOK)
	near("page short at minute 25", p.Short, 0, p.ShortOK)
	p = at(page.Trend, 10*time.Minute)
	near("page long at minute 110", p.Long, 0, p.LongOK)
	p = at(page.Trend, 5*time.Minute)
	near("page long at minute 115", p.Long, 200.0/6000/0.01, p.LongOK)
	near("page short at minute 115", p.Short, 40, p.ShortOK)
	p = at(page.Trend, 0)
	near("page long now", p.Long, page.Long.Rate, p.LongOK)
	near("page short now", p.Short, page.Short.Rate, p.ShortOK)
	p = at(warn.Trend, 95*time.Minute)
	near("warning long at minute 25", p.Long, 0, p.LongOK)

	// A book younger than the span: the instants before its first
	// minute have no events.
	young := NewBook(Config{Policy: testPolicy(), Objectives: []Objective{ttftObjective()}})
	record(young, t0, 30, func(int) Events { return Events{Good: 100, Total: 100} })
	tr := young.Status(t0.Add(30*time.Minute), nil)[0].Rules[0].Trend
	if p := tr[0]; p.LongOK || p.ShortOK {
		t.Errorf("an instant an hour before the first event has rates: %+v", p)
	}
	if p := tr[TrendPoints-1]; !p.LongOK || p.Long != 0 {
		t.Errorf("now: %+v, want 0x", p)
	}

	// With the workbook's policy every rule's trend stays within its span
	// (four long windows, at most the 3 days the memory holds), its
	// instants whole minutes apart.
	def := NewBook(Config{Policy: DefaultPolicy(), Objectives: []Objective{ttftObjective()}})
	record(def, t0, 10, func(int) Events { return Events{Good: 100, Total: 100} })
	now = t0.Add(10 * time.Minute)
	for _, r := range def.Status(now, nil)[0].Rules {
		span := TrendSpan(r.Rule, DefaultPolicy().Longest())
		step := r.Trend[1].At.Sub(r.Trend[0].At)
		if r.Trend[0].At.Before(now.Add(-span)) || step%Resolution != 0 {
			t.Errorf("rule %+v: trend from %s before now, %s apart; want within %s, whole minutes", r.Rule, now.Sub(r.Trend[0].At), step, span)
		}
	}
}

// A book that holds less than a rule's long window does not judge the
// rule, however bad the few minutes it holds; a quiet model (fewer
// events than min_events in the short window, or none) is not judged.
func TestBookDoesNotJudgeWithoutHistoryOrTraffic(t *testing.T) {
	b := NewBook(Config{Policy: testPolicy(), Objectives: []Objective{ttftObjective()}})
	record(b, t0, 30, func(int) Events { return Events{Good: 0, Total: 100} })
	if st := b.Status(t0.Add(30*time.Minute), nil)[0]; st.Burning() || st.Rules[0].Judged {
		t.Errorf("30 minutes held judged a 60m rule: %+v", st.Rules[0])
	}

	quiet := NewBook(Config{Policy: testPolicy(), Objectives: []Objective{ttftObjective()}})
	record(quiet, t0, 180, func(int) Events { return Events{Good: 0, Total: 1} }) // 5 in 5m, 10 in 10m: < 20
	if st := quiet.Status(t0.Add(180*time.Minute), nil)[0]; st.Burning() {
		t.Errorf("a model with 1 event a minute paged: %+v", st.Rules)
	}
	idle := NewBook(Config{Policy: testPolicy(), Objectives: []Objective{ttftObjective()}})
	record(idle, t0, 180, func(int) Events { return Events{} })
	if st := idle.Status(t0.Add(180*time.Minute), nil)[0]; st.Burning() || st.HasSLI || st.HasBudget {
		t.Errorf("a model without events has a verdict: %+v", st)
	}
}

// NaN, Inf and impossible counts are not recorded.
func TestBookIgnoresInvalidEvents(t *testing.T) {
	b := NewBook(Config{Policy: testPolicy(), Objectives: []Objective{ttftObjective()}})
	record(b, t0, 120, func(k int) Events {
		switch k % 4 {
		case 0:
			return Events{Good: math.NaN(), Total: 100}
		case 1:
			return Events{Good: 0, Total: math.Inf(1)}
		case 2:
			return Events{Good: 200, Total: 100}
		}
		return Events{Good: 100, Total: 100}
	})
	st := b.Status(t0.Add(120*time.Minute), []Sample{{Objective: "chat-ttft", Model: "m", Events: Events{Good: -5, Total: 10}}})[0]
	if st.Burning() || st.Budget != 1 || st.Rules[1].Long.Events.Total != 3000 {
		t.Errorf("invalid events counted: %+v", st)
	}
}

// A pending sample (the round not yet recorded) counts in every window,
// and a reload keeps the memory of an objective counted the same way.
func TestBookPendingAndReload(t *testing.T) {
	cfg := Config{Policy: testPolicy(), Objectives: []Objective{ttftObjective()}}
	b := NewBook(cfg)
	record(b, t0, 120, func(int) Events { return Events{Good: 100, Total: 100} })
	st := b.Status(t0.Add(121*time.Minute), []Sample{{Objective: "chat-ttft", Model: "m", Events: Events{Good: 0, Total: 100}}})[0]
	if st.Rules[0].Short.Events.Total != 500 || st.Rules[0].Short.Events.Bad() != 100 {
		t.Errorf("pending sample not in the 5m window: %+v", st.Rules[0].Short)
	}
	renamed := cfg
	renamed.Objectives = []Objective{ttftObjective()}
	renamed.Objectives[0].Target = 0.999
	b.Configure(renamed)
	if st := b.Status(t0.Add(120*time.Minute), nil)[0]; st.Rules[1].Long.Events.Total != 12000 {
		t.Errorf("reload with a new target lost the memory: %+v", st.Rules[1].Long)
	}
	moved := renamed
	moved.Objectives = []Objective{ttftObjective()}
	moved.Objectives[0].Threshold = 2 * time.Second
	b.Configure(moved)
	if sts := b.Status(t0.Add(120*time.Minute), nil); len(sts) != 0 {
		t.Errorf("a new threshold kept the old events: %+v", sts)
	}
}

func TestValidateNamesEveryPath(t *testing.T) {
	cfg := Config{Policy: Policy{Page: []Window{{Long: time.Minute, Short: 5 * time.Minute, BurnRate: 0}}, MinEvents: -1},
		Objectives: []Objective{
			{Name: "a", Kind: "ttfb", Target: 1, Period: 90 * time.Minute},
			{Name: "a", Kind: TTFT, Target: 0.99, Period: 24 * time.Hour},
			{Name: "b", Kind: Availability, Threshold: time.Second, Target: 0.99, Period: 24 * time.Hour},
		}}
	err := cfg.Validate("slos")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"slos.policy.page[0].long", "slos.policy.page[0].burn_rate", "slos.policy.min_events",
		"slos.objectives[0].kind", "slos.objectives[0].objective", "slos.objectives[0].period",
		"slos.objectives[1].name", "slos.objectives[1].threshold", "slos.objectives[2].threshold"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
	if err := (Config{Policy: DefaultPolicy(), Objectives: []Objective{ttftObjective()}}).Validate("slos"); err != nil {
		t.Errorf("a good objective rejected: %v", err)
	}
}
