package ui

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// maxBurnedBy is how many incidents an objective lists as having spent
// its budget: the journal's newest first.
const maxBurnedBy = 20

// sloPage is the round's objectives laid out.
type sloPage struct {
	At   time.Time
	SLOs []sloRow
}

// sloRow is one objective on one model as the round's status holds it.
type sloRow struct {
	ID, Name, Title, Model, Kind string
	// State is the badge: the severity of the firing rule, "ok", or
	// "no data" before the memory has events.
	State              string
	SLI, SLIWindow     string
	Objective, Period  string
	Budget, BudgetSpan string
	BudgetSpent        bool
	// PartialPeriod: the memory holds less than the period, so the
	// budget is over what it holds.
	PartialPeriod bool
	Held          string
	Rounded       string
	Rules         []ruleRow
	// Trends plot each rule's burn rates over time, in the rules' order.
	Trends     []renderedPlot
	BurnedBy   []burnedRow
	MoreBurned int
}

// ruleRow is one window pair of the policy.
type ruleRow struct {
	Severity             string
	Long, Short          string
	LongRate, ShortRate  string
	LongEvents, ShortEvt string
	Threshold            string
	Verdict              string
}

// burnedRow is an incident that spent an objective's budget.
type burnedRow struct {
	Link, Class, Replica, State, Headline string
	Consumed, Bad, Total                  string
	OpenedAt                              time.Time
}

// sloAnchor is an objective's element id on the SLO page, the fragment
// the incident page links to.
func sloAnchor(objective, model string) string {
	return "slo-" + url.PathEscape(objective) + "-" + url.PathEscape(model)
}

func (h *Handler) sloLink(objective, model string) string {
	return h.path("/slos") + "#" + sloAnchor(objective, model)
}

func (h *Handler) slos(w http.ResponseWriter, _ *http.Request) {
	round := h.opts.Alerts.Round()
	p := sloPage{At: round.At}
	var records []incident.Record
	if h.opts.Incidents != nil {
		records = h.opts.Incidents.Incidents()
	}
	for _, st := range round.SLOs {
		row := sloRow{ID: sloAnchor(st.Objective, st.Model), Name: st.Objective, Title: st.Title, Model: st.Model, Kind: string(st.Kind),
			Objective: formatValue(st.Target, "ratio"), Period: notify.FormatDuration(st.Period), Held: notify.FormatDuration(st.Held),
			SLIWindow: notify.FormatDuration(st.SLIWindow), SLI: "–", Budget: "–", BudgetSpan: notify.FormatDuration(st.BudgetSpan),
			PartialPeriod: st.BudgetSpan < st.Period}
		switch {
		case st.Burning():
			row.State = st.Severity.String()
		case st.HasSLI || st.HasBudget:
			row.State = "ok"
		default:
			row.State = "no data"
		}
		if st.HasSLI {
			row.SLI = formatValue(st.SLI, "ratio")
		}
		if st.HasBudget {
			row.Budget, row.BudgetSpent = formatValue(st.Budget, "ratio"), st.Budget <= 0
		}
		if st.Rounded {
			row.Rounded = "read at the bucket boundary " + formatValue(st.Boundary, "s") + ", the largest at or below the threshold " +
				formatValue(st.Threshold.Seconds(), "s")
		}
		for _, r := range st.Rules {
			row.Rules = append(row.Rules, ruleRow{Severity: r.Severity.String(),
				Long: notify.FormatDuration(r.Rule.Long), Short: notify.FormatDuration(r.Rule.Short),
				LongRate: burnRate(r.Long), ShortRate: burnRate(r.Short),
				LongEvents: detect.FormatNumber(r.Long.Events.Total), ShortEvt: detect.FormatNumber(r.Short.Events.Total),
				Threshold: "> " + detect.FormatNumber(r.Rule.BurnRate) + "x on both", Verdict: ruleVerdict(r)})
			if slices.ContainsFunc(r.Trend, func(p slo.TrendPoint) bool { return p.LongOK || p.ShortOK }) {
				row.Trends = append(row.Trends, trendPlot(r))
			}
		}
		for _, rec := range records {
			if rec.Model != st.Model {
				continue
			}
			for _, bs := range rec.Budgets {
				if bs.Objective != st.Objective || !(bs.Bad > 0) {
					continue
				}
				if len(row.BurnedBy) == maxBurnedBy {
					row.MoreBurned++
					continue
				}
				row.BurnedBy = append(row.BurnedBy, burnedRow{Link: h.path(alert.IncidentPath(rec.ID)), Class: string(rec.Class),
					Replica: rec.Replica, State: string(rec.State), Headline: rec.Headline, OpenedAt: rec.OpenedAt,
					Consumed: consumed(bs), Bad: detect.FormatNumber(bs.Bad), Total: detect.FormatNumber(bs.Total)})
			}
		}
		p.SLOs = append(p.SLOs, row)
	}
	h.render(w, http.StatusOK, "slos", p)
}

// trendPlot is a rule's burn rates over time: its long and its short
// window against the rate both must exceed.
func trendPlot(r slo.RuleStatus) renderedPlot {
	long := line{Name: "over " + notify.FormatDuration(r.Rule.Long), Class: "series"}
	short := line{Name: "over " + notify.FormatDuration(r.Rule.Short), Class: "secondary"}
	for _, p := range r.Trend {
		long.Points = append(long.Points, point{At: p.At, Value: p.Long, OK: p.LongOK})
		short.Points = append(short.Points, point{At: p.At, Value: p.Short, OK: p.ShortOK})
	}
	return plotSpec{Title: r.Severity.String() + " rule: burn rate over " + notify.FormatDuration(r.Rule.Long) + " and " + notify.FormatDuration(r.Rule.Short),
		Unit: "x", From: r.Trend[0].At, To: r.Trend[len(r.Trend)-1].At, Lines: []line{long, short},
		Limit: r.Rule.BurnRate, HasLimit: true, Rule: "> " + detect.FormatNumber(r.Rule.BurnRate) + "x on both", Size: compactPlot}.layout()
}

// burnRate is a window's burn rate as the status computed it, a dash
// without events.
func burnRate(b slo.Burn) string {
	if !b.OK {
		return "–"
	}
	return detect.FormatNumber(b.Rate) + "x"
}

func ruleVerdict(r slo.RuleStatus) string {
	switch {
	case r.Firing:
		return "firing"
	case r.Judged:
		return "ok"
	}
	return "not judged"
}

// consumed is the share of the period's budget an incident spent, a dash
// without a budget to compare with.
func consumed(bs incident.BudgetSpent) string {
	if c, ok := bs.Consumed(); ok {
		return formatValue(c, "ratio")
	}
	return "–"
}

// budgetRow is one objective an incident spent budget of, on its page.
type budgetRow struct {
	Objective, Title, Link string
	Consumed, Bad, Total   string
	Period, Held           string
	PartialPeriod          bool
}

// incidentBudgets are the objectives the incident spent budget of, and
// the names of those whose events it covered without spending any.
func (h *Handler) incidentBudgets(rec incident.Record) (spent []budgetRow, unspent []string) {
	for _, bs := range rec.Budgets {
		if !(bs.Bad > 0) {
			unspent = append(unspent, bs.Objective)
			continue
		}
		spent = append(spent, budgetRow{Objective: bs.Objective, Title: bs.Title, Link: h.sloLink(bs.Objective, rec.Model),
			Consumed: consumed(bs), Bad: detect.FormatNumber(bs.Bad), Total: detect.FormatNumber(bs.Total),
			Period: notify.FormatDuration(bs.Period), Held: notify.FormatDuration(bs.Held), PartialPeriod: bs.Held < bs.Period})
	}
	return spent, unspent
}
