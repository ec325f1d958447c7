package ui

import (
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// maxDecisive is how many signals an incident page leads with: on-call
// reads the few that decided the finding first, the rest are a click away.
const maxDecisive = 3

// fact is a signal whose value never moved over the incident, printed as
// one line instead of a flat plot: a capacity, a page size, a count that
// stayed at zero.
type fact struct {
	Name, Value string
	// Rounds is how many rounds the value held, From and To the first and
	// last.
	Rounds   int
	From, To time.Time
}

// factList is facts with the id of the list that shows them.
type factList struct {
	ID    string
	Facts []fact
}

func newFactList(id string, facts []fact) factList { return factList{ID: id, Facts: facts} }

// evidence is an incident's signals laid out: the decisive ones large,
// the other moving ones compact (the page folds them), the constant ones
// as facts.
type evidence struct {
	Decisive, Other []renderedPlot
	Facts           []fact
}

// layoutEvidence sorts signals for the page. A signal decided the finding
// when the detector stated a rule for it (Signal.Threshold: the journal
// keeps the last rule any round's evidence gave it) — the number the
// finding's firing, severity or layer was decided against — and its value
// moved over the incident. The first maxDecisive of those, in the
// journal's order (the cause's evidence first, as the last round it led
// listed it, its trigger first; then the rest), lead. A signal
// whose every point holds the same value is a fact, never a plot: a flat
// line says no more than the number, and a constant (a page size, a pool
// size) is not evidence of change. decisive false lays every moving signal
// out as Other (the impact, which no rule decided).
func layoutEvidence(signals []incident.Signal, decisive bool, from, to time.Time, markers []marker) evidence {
	var ev evidence
	for _, s := range signals {
		if f, ok := constant(s); ok {
			ev.Facts = append(ev.Facts, f)
			continue
		}
		size := compactPlot
		lead := decisive && s.Threshold != "" && len(ev.Decisive) < maxDecisive
		if lead {
			size = largePlot
		}
		p := signalPlot(s, from, to, markers, size)
		if lead {
			ev.Decisive = append(ev.Decisive, p)
		} else {
			ev.Other = append(ev.Other, p)
		}
	}
	return ev
}

// constant is the signal as a fact when its value never moved (or it has
// no value at all): its value with the last round's baseline and its rule,
// worded as on the pages.
func constant(s incident.Signal) (fact, bool) {
	if !s.Constant() {
		return fact{}, false
	}
	if len(s.Points) == 0 {
		return fact{Name: s.Name, Value: "no value recorded"}, true
	}
	first := s.Points[0]
	f := notify.Field{Name: s.Name, Value: first.Value, Unit: s.Unit, Threshold: s.Threshold}
	for _, p := range s.Points {
		if p.HasBaseline {
			f.Baseline, f.HasBase = p.Baseline, true
		}
	}
	last := s.Points[len(s.Points)-1]
	return fact{Name: s.Name, Value: notify.FieldValue(f), Rounds: len(s.Points), From: first.At, To: last.At}, true
}

// signalPlot lays out one signal: its value, its baseline when it has
// one, its limit when it has a number, and the incident's marks.
func signalPlot(s incident.Signal, from, to time.Time, markers []marker, size geometry) renderedPlot {
	value := line{Name: s.Name, Class: "series"}
	base := line{Name: "baseline", Class: "baseline"}
	var limits []point
	hasBase := false
	for _, pt := range s.Points {
		value.Points = append(value.Points, point{At: pt.At, Value: pt.Value, OK: true})
		base.Points = append(base.Points, point{At: pt.At, Value: pt.Baseline, OK: pt.HasBaseline})
		limits = append(limits, point{At: pt.At, Value: pt.Limit, OK: pt.HasLimit})
		hasBase = hasBase || pt.HasBaseline
	}
	lines := []line{value}
	if hasBase {
		lines = append(lines, base)
	}
	return plotSpec{Title: s.Name, Unit: s.Unit, Rule: s.Threshold, From: from, To: to, Lines: lines,
		Limit: s.Limit, HasLimit: s.HasLimit, LimitPoints: limits, Markers: markers, Size: size}.layout()
}
