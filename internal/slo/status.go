package slo

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// BurnRate is how fast events over a window spend the error budget: the
// bad share over the budget's share, 1 - target. At 1 the budget lasts
// exactly the period; at 14.4 a 30-day budget loses 2% an hour. ok is
// false without events.
func BurnRate(ev Events, target float64) (float64, bool) {
	if !(ev.Total > 0) || !(target < 1) {
		return 0, false
	}
	return ev.Bad() / ev.Total / (1 - target), true
}

// BudgetLeft is the share of the error budget the events leave: 1 - bad /
// ((1 - target) x total). Below zero the objective is missed. ok is false
// without events.
func BudgetLeft(ev Events, target float64) (float64, bool) {
	if !(ev.Total > 0) || !(target < 1) {
		return 0, false
	}
	return 1 - ev.Bad()/((1-target)*ev.Total), true
}

// Burn is the burn rate over one window.
type Burn struct {
	Window time.Duration `json:"window"`
	Events Events        `json:"events"`
	Rate   float64       `json:"burn_rate"`
	OK     bool          `json:"ok"` // events to rate
}

// RuleStatus is one policy rule at an instant.
type RuleStatus struct {
	Rule     Window          `json:"rule"`
	Severity detect.Severity `json:"-"`
	Long     Burn            `json:"long"`
	Short    Burn            `json:"short"`
	// Judged: the memory spans the long window and the short one holds
	// at least min_events.
	Judged bool `json:"judged"`
	Firing bool `json:"firing"`
	// Trend is the rule's burn rates at TrendPoints instants up to now
	// (the last is Long and Short), whole minutes apart, spanning at most
	// TrendSpan.
	Trend []TrendPoint `json:"trend,omitempty"`
}

// TrendPoints is how many instants a rule's trend holds.
const TrendPoints = 96

// TrendPoint is a rule's burn rates at an instant: over its long window
// and over its short one (ok false: no events in that window).
type TrendPoint struct {
	At      time.Time `json:"at"`
	Long    float64   `json:"long"`
	LongOK  bool      `json:"long_ok"`
	Short   float64   `json:"short"`
	ShortOK bool      `json:"short_ok"`
}

// TrendSpan is how far back a rule's trend may reach: four of its long
// windows, so the plot shows the rise and the stretch before it, within
// the per-minute memory (the policy's longest window).
func TrendSpan(w Window, longest time.Duration) time.Duration {
	return min(4*w.Long, longest)
}

// trendStep is the time between a trend's instants: whole minutes, the
// memory's resolution, rounded down so the trend stays within span.
func trendStep(span time.Duration) time.Duration {
	return max((span / (TrendPoints - 1)).Truncate(Resolution), Resolution)
}

// Status is one objective on one model at an instant.
type Status struct {
	Objective string        `json:"objective"`
	Title     string        `json:"title"`
	Kind      Kind          `json:"kind"`
	Model     string        `json:"model"`
	Target    float64       `json:"target"`
	Period    time.Duration `json:"period"`
	Threshold time.Duration `json:"threshold,omitempty"`
	// Boundary is the bucket boundary a latency objective is read at,
	// seconds; Rounded says it is below the threshold (the threshold is
	// not a boundary of the replicas' histogram).
	Boundary float64 `json:"boundary_seconds,omitempty"`
	Rounded  bool    `json:"rounded,omitempty"`
	// Held is how far back the memory reaches.
	Held time.Duration `json:"held"`
	// SLI is the good share over the shortest window of the policy.
	SLI       float64       `json:"sli"`
	SLIWindow time.Duration `json:"sli_window"`
	HasSLI    bool          `json:"has_sli"`
	Rules     []RuleStatus  `json:"rules"`
	// Budget is the share of the period's error budget left over what
	// the memory holds of the period (BudgetSpan).
	Budget float64 `json:"budget_left"`
	// PeriodEvents are the events the budget is taken over.
	PeriodEvents Events          `json:"period_events"`
	HasBudget    bool            `json:"has_budget"`
	BudgetSpan   time.Duration   `json:"budget_span"`
	Severity     detect.Severity `json:"-"`
}

// Burning reports whether a rule fires.
func (s Status) Burning() bool { return s.Severity > detect.Info }

// Status is every objective on every model it has events of, at now,
// with pending (the round's samples, not yet recorded) counted as the
// events of the span ending at now. Sorted by objective, then model.
func (b *Book) Status(now time.Time, pending []Sample) []Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := b.last
	if start.IsZero() {
		start = now
	}
	type mk = memKey
	extra := map[mk]Sample{}
	for _, s := range pending {
		if s.Events.valid() {
			k := mk{s.Objective, s.Model}
			e := extra[k]
			e.Objective, e.Model, e.Events = s.Objective, s.Model, e.Events.Add(s.Events)
			e.Boundary = max(e.Boundary, s.Boundary)
			extra[k] = e
		}
	}
	var out []Status
	for _, o := range b.cfg.Objectives {
		var models []string
		for k := range b.mem {
			if k.objective == o.Name {
				models = append(models, k.model)
			}
		}
		for k := range extra {
			if k.objective == o.Name && !slices.Contains(models, k.model) {
				models = append(models, k.model)
			}
		}
		slices.Sort(models)
		for _, model := range models {
			k := mk{o.Name, model}
			out = append(out, b.status(o, model, b.mem[k], extra[k], start, now))
		}
	}
	return out
}

func (b *Book) status(o Objective, model string, m *memory, extra Sample, start, now time.Time) Status {
	st := Status{Objective: o.Name, Kind: o.Kind, Model: model, Target: o.Target, Period: o.Period, Threshold: o.Threshold}
	since := start
	sum := func(r func(*memory) *ring, d time.Duration) Events {
		var ev Events
		if m != nil {
			ev = r(m).sum(now, d)
		}
		return ev.Add(extra.Events) // the round's span ends at now: inside every window
	}
	if m != nil {
		since = m.since
		st.Boundary = m.boundary
	}
	st.Boundary = max(st.Boundary, extra.Boundary)
	st.Rounded = o.Kind != Availability && st.Boundary > 0 && st.Boundary < o.Threshold.Seconds()*(1-1e-9)
	st.Title = o.Title(st.Boundary)
	st.Held = max(now.Sub(since), 0)
	minutes := func(mm *memory) *ring { return mm.minutes }
	hours := func(mm *memory) *ring { return mm.hours }
	var past func(time.Time, time.Duration) Events
	if m != nil {
		past = m.minutes.prefix(now)
	}

	p := b.cfg.Policy
	shortest := time.Duration(math.MaxInt64)
	for _, set := range []struct {
		rules []Window
		sev   detect.Severity
	}{{p.Page, detect.Critical}, {p.Warning, detect.Warning}} {
		for _, w := range set.rules {
			rs := RuleStatus{Rule: w, Severity: set.sev}
			rs.Long = burn(sum(minutes, w.Long), w.Long, o.Target)
			rs.Short = burn(sum(minutes, w.Short), w.Short, o.Target)
			rs.Judged = st.Held >= w.Long-Resolution && rs.Long.OK && rs.Short.OK && rs.Short.Events.Total >= p.MinEvents
			// Strictly above, as the workbook's rules: a service exactly at its
			// objective (burn 1) spends its budget over the period and is fine.
			rs.Firing = rs.Judged && rs.Long.Rate > w.BurnRate && rs.Short.Rate > w.BurnRate
			if m != nil {
				rs.Trend = trend(rs, past, now, trendStep(TrendSpan(w, p.Longest())), o.Target)
			}
			if rs.Firing {
				st.Severity = max(st.Severity, set.sev)
			}
			st.Rules = append(st.Rules, rs)
			if w.Short < shortest {
				shortest = w.Short
				ev := sum(minutes, w.Short)
				st.SLIWindow = w.Short
				if ev.Total > 0 {
					st.SLI, st.HasSLI = ev.Good/ev.Total, true
				} else {
					st.SLI, st.HasSLI = 0, false
				}
			}
		}
	}
	st.BudgetSpan = min(st.Held, o.Period)
	st.PeriodEvents = sum(hours, o.Period)
	st.Budget, st.HasBudget = BudgetLeft(st.PeriodEvents, o.Target)
	return st
}

// trend is rs's burn rates at TrendPoints instants step apart ending at
// now: before now from the memory (sum), at now the status's own rates,
// which count the round's pending events too.
func trend(rs RuleStatus, sum func(time.Time, time.Duration) Events, now time.Time, step time.Duration, target float64) []TrendPoint {
	out := make([]TrendPoint, TrendPoints)
	for i := range out {
		at := now.Add(-time.Duration(TrendPoints-1-i) * step)
		p := TrendPoint{At: at}
		if i == TrendPoints-1 {
			p.Long, p.LongOK, p.Short, p.ShortOK = rs.Long.Rate, rs.Long.OK, rs.Short.Rate, rs.Short.OK
		} else {
			p.Long, p.LongOK = BurnRate(sum(at, rs.Rule.Long), target)
			p.Short, p.ShortOK = BurnRate(sum(at, rs.Rule.Short), target)
		}
		out[i] = p
	}
	return out
}

func burn(ev Events, d time.Duration, target float64) Burn {
	r, ok := BurnRate(ev, target)
	return Burn{Window: d, Events: ev, Rate: r, OK: ok}
}

// Layer is the layer an SLO burn is filed under: what users were
// promised, whichever layer fails.
const Layer detect.Layer = "slo"

// firing is the rule the finding leads with: the most severe firing rule,
// the first of the policy among equals.
func (s Status) firing() (RuleStatus, bool) {
	var best RuleStatus
	found := false
	for _, r := range s.Rules {
		if r.Firing && (!found || r.Severity > best.Severity) {
			best, found = r, true
		}
	}
	return best, found
}

// Headline is the burn in a few words: "burning the TTFT ≤ 1s for 99.5%
// SLO "chat" at 20x over 1h and 5m".
func (s Status) Headline() string {
	r, ok := s.firing()
	if !ok {
		return ""
	}
	return fmt.Sprintf("burning the %s SLO %q at %s", s.Title, s.Objective, r.rates())
}

// rates is the burn over the rule's two windows: "20x over 1h and 32x
// over 5m".
func (r RuleStatus) rates() string {
	return fmt.Sprintf("%sx over %s and %sx over %s",
		detect.FormatNumber(r.Long.Rate), formatSpan(r.Rule.Long), detect.FormatNumber(r.Short.Rate), formatSpan(r.Rule.Short))
}

// budgetPhrase is "62% of the 28d error budget left", or "the 28d error
// budget is spent: 140% used"; while the memory holds less than the
// period, the budget is that of what it holds, said in parentheses:
// "62% of the error budget left (2h of the 28d period on record)".
func (s Status) budgetPhrase() string {
	if !s.HasBudget {
		return ""
	}
	budget, record := fmt.Sprintf("the %s error budget", formatSpan(s.Period)), ""
	if s.BudgetSpan < s.Period {
		budget = "the error budget"
		record = " (" + s.onRecord() + ")"
	}
	if s.Budget <= 0 {
		return fmt.Sprintf("%s is spent: %s used%s", budget, formatPercent(1-s.Budget), record)
	}
	return fmt.Sprintf("%s of %s left%s", formatPercent(s.Budget), budget, record)
}

// onRecord is how much of the period the memory holds: "2h of the 28d
// period on record".
func (s Status) onRecord() string {
	return fmt.Sprintf("%s of the %s period on record", formatSpan(s.BudgetSpan.Truncate(Resolution)), formatSpan(s.Period))
}

// Evidence are the numbers of the burn: the SLI now, the objective, the
// burn rate of every window of the rules judged, the budget left and,
// when the threshold was rounded, the bucket read. prefix qualifies each
// name (on another incident's page).
func (s Status) Evidence(prefix string) []detect.Evidence {
	var out []detect.Evidence
	if s.HasSLI {
		out = append(out, detect.Evidence{Name: prefix + fmt.Sprintf("good share over %s", formatSpan(s.SLIWindow)), Value: s.SLI, Unit: "ratio",
			Threshold: "objective " + formatPercent(s.Target)}.WithLimit(s.Target))
	}
	out = append(out, detect.Evidence{Name: prefix + "objective", Value: s.Target, Unit: "ratio"})
	seen := map[time.Duration]bool{}
	for _, r := range s.Rules {
		if !r.Judged {
			continue
		}
		for _, b := range []Burn{r.Long, r.Short} {
			if seen[b.Window] {
				continue
			}
			seen[b.Window] = true
			out = append(out, detect.Evidence{Name: prefix + "burn rate over " + formatSpan(b.Window), Value: b.Rate, Unit: "x",
				Threshold: fmt.Sprintf("> %sx with %s (%s)", detect.FormatNumber(r.Rule.BurnRate), formatSpan(other(r, b.Window)), r.Severity)}.WithLimit(r.Rule.BurnRate))
		}
	}
	if s.HasBudget {
		name := fmt.Sprintf("error budget left (%s period)", formatSpan(s.Period))
		if s.BudgetSpan < s.Period {
			name = "error budget left (" + s.onRecord() + ")"
		}
		out = append(out, detect.Evidence{Name: prefix + name, Value: s.Budget, Unit: "ratio"})
	}
	if s.Rounded {
		out = append(out, detect.Evidence{Name: prefix + fmt.Sprintf("bucket boundary read (threshold %s is not one)", formatSeconds(s.Threshold.Seconds())),
			Value: s.Boundary, Unit: "s"})
	}
	return out
}

func other(r RuleStatus, d time.Duration) time.Duration {
	if d == r.Rule.Long {
		return r.Rule.Short
	}
	return r.Rule.Long
}

// Finding is the page of a burning objective standing on its own; ok is
// false when no rule fires.
func (s Status) Finding(class detect.Class, replica string) (detect.Finding, bool) {
	r, ok := s.firing()
	if !ok {
		return detect.Finding{}, false
	}
	f := detect.Finding{Class: class, Severity: r.Severity, Replica: replica, Model: s.Model, Layer: Layer,
		Runbook: detect.RunbookPath(class), Evidence: s.Evidence("")}
	// What users get leads, when it is known; the burn says how fast the
	// promise is being broken.
	f.Summary = fmt.Sprintf("%s SLO %q burning at %s", s.Title, s.Objective, r.rates())
	if s.HasSLI {
		f.Summary = fmt.Sprintf("%s of %s over %s (objective %s): SLO %q burning at %s",
			formatPercent(s.SLI), s.eventWords(), formatSpan(s.SLIWindow), formatPercent(s.Target), s.Objective, r.rates())
	}
	if bp := s.budgetPhrase(); bp != "" {
		f.Summary += "; " + bp
	}
	var diag []string
	if s.HasSLI {
		diag = append(diag, fmt.Sprintf("Users get less than they were promised: over the last %s, %s of %s, against an objective of %s.",
			formatSpan(s.SLIWindow), formatPercent(s.SLI), s.eventWords(), formatPercent(s.Target)))
	}
	diag = append(diag, fmt.Sprintf("The error budget burns at %sx the rate that would spend it exactly over %s (over the last %s; %sx over %s).",
		detect.FormatNumber(r.Long.Rate), formatSpan(s.Period), formatSpan(r.Rule.Long), detect.FormatNumber(r.Short.Rate), formatSpan(r.Rule.Short)))
	if s.HasBudget && s.Budget > 0 && r.Long.Rate > 0 {
		left := time.Duration(s.Budget * float64(s.Period) / r.Long.Rate)
		diag = append(diag, fmt.Sprintf("At that pace the budget left (%s) is gone in %s.", formatPercent(s.Budget), formatSpan(left.Truncate(time.Minute))))
	}
	if s.Rounded {
		diag = append(diag, fmt.Sprintf("The replicas' histogram has no bucket at %s: it is read at the boundary below, %s, so the SLI is the share within %s.",
			formatSeconds(s.Threshold.Seconds()), formatSeconds(s.Boundary), formatSeconds(s.Boundary)))
	}
	diag = append(diag, "No detector incident on this model explains it: a slow drift (a GPU degrading step by step, traffic or prompt lengths growing) that detectors comparing with the hour before take into their baselines, or a fault spread too thin for any one replica's detector.")
	f.Diagnosis = strings.Join(diag, " ")
	f.Emergency = []string{
		"Compare the model's replicas in the workspace: one replica slower or failing more than the others is where to look; take it out of rotation if the others can carry its traffic.",
		"On the slow replicas, check the GPUs (clocks, temperature, power cap, XID errors): a degrading GPU slows its replica step by step.",
		"If traffic or prompt lengths grew, add replicas; if a release or a routing change came before the drift, roll it back.",
	}
	f.RootCause = []string{
		"Size the fleet against the SLO with headroom, and track the budget in capacity planning.",
		"Replace hardware whose speed drifts; alert on GPU health beside the SLO.",
	}
	return f, true
}

// eventWords say what the SLI counts: "requests had their first token
// within 1s".
func (s Status) eventWords() string {
	lim := formatSeconds(s.Threshold.Seconds())
	if s.Boundary > 0 {
		lim = formatSeconds(s.Boundary)
	}
	switch s.Kind {
	case TTFT:
		return "requests had their first token within " + lim
	case ITL:
		return "inter-token intervals were within " + lim
	case E2E:
		return "requests completed within " + lim
	}
	return "requests were answered without a 5xx, a shed or an abort"
}

func formatPercent(v float64) string { return detect.FormatNumber(100*v) + "%" }

func formatSeconds(v float64) string { return detect.FormatNumber(v) + "s" }

// formatSpan writes a span in its largest whole unit: 28d, 6h, 90m.
func formatSpan(d time.Duration) string {
	switch {
	case d <= 0:
		return "0m"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd %dh", d/(24*time.Hour), (d%(24*time.Hour))/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh %dm", d/time.Hour, (d%time.Hour)/time.Minute)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
