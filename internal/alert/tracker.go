package alert

import (
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Tracker holds every incident. It is not safe for concurrent use: the
// evaluation loop owns it and publishes copies.
type Tracker struct {
	cfg    Config
	alerts map[string]*Incident
	// changes are the transitions of the round being applied; their
	// incidents are copied when the round is done.
	changes []change
}

// change is a transition whose incidents are still live.
type change struct {
	Transition
	inc, other *Incident
}

// NewTracker returns an empty tracker.
func NewTracker(cfg Config) *Tracker {
	return &Tracker{cfg: cfg, alerts: map[string]*Incident{}}
}

// SetConfig changes timing (hot reload) keeping every incident.
func (t *Tracker) SetConfig(cfg Config) { t.cfg = cfg }

// note records a transition of a in the round at now and returns its
// index among the round's changes.
func (t *Tracker) note(c Change, a *Incident, now time.Time, fill func(*Transition)) int {
	ch := change{Transition: Transition{Change: c, At: now}, inc: a}
	if fill != nil {
		fill(&ch.Transition)
	}
	t.changes = append(t.changes, ch)
	return len(t.changes) - 1
}

// page makes change i, a transition of a, a notification of kind, and
// notes the impact it told of.
func (t *Tracker) page(i int, a *Incident, kind notify.Kind, round assess.Round) {
	a.Seq++
	a.LastNotified = round.At
	a.Paged = Paged{Members: slices.Clone(a.Members), AbortsPerSecond: abortsOf(a, round)}
	if snap, ok := round.Replica(a.Replica); ok && len(snap.Replica.Labels) > 0 && !a.Fleet {
		a.Labels = maps.Clone(snap.Replica.Labels)
	}
	t.changes[i].Page = kind
}

// flush returns the round's transitions with their incidents as the round
// left them, each incident's in the order they happened, incidents by
// fingerprint.
func (t *Tracker) flush() []Transition {
	out := make([]Transition, len(t.changes))
	for i, ch := range t.changes {
		out[i] = ch.Transition
		out[i].Incident = ch.inc.clone()
		if ch.other != nil {
			out[i].Other = ch.other.clone()
		}
	}
	t.changes = t.changes[:0]
	slices.SortStableFunc(out, func(a, b Transition) int {
		switch {
		case a.Incident.Fingerprint < b.Incident.Fingerprint:
			return -1
		case a.Incident.Fingerprint > b.Incident.Fingerprint:
			return 1
		}
		return 0
	})
	return out
}

type seenKey struct {
	replica string
	class   detect.Class
}

// Update applies one assessment round and returns what changed, ordered by
// incident fingerprint.
func (t *Tracker) Update(round assess.Round) []Transition {
	now := round.At
	groups := slices.Clone(round.Groups)
	// Fleet groups first, so the replica incidents of a model they cover
	// join them; then by replica and cause for determinism.
	sort.SliceStable(groups, func(i, j int) bool {
		a, b := groups[i], groups[j]
		if a.Fleet != b.Fleet {
			return a.Fleet
		}
		if a.Finding.Replica != b.Finding.Replica {
			return a.Finding.Replica < b.Finding.Replica
		}
		return a.Finding.Class < b.Finding.Class
	})
	seen := map[seenKey]bool{}
	for _, g := range groups {
		for _, m := range g.Members {
			seen[seenKey{m.Replica, m.Class}] = true
		}
	}

	touched := map[string]bool{}
	for _, g := range groups {
		a := t.match(g)
		if a != nil && a.Fleet && !g.Fleet {
			// A replica of a model with an open fleet incident of this cause:
			// the fleet incident goes on while any replica shows it.
			a.LastSeen, a.Restored = now, false
			touched[a.Fingerprint] = true
			t.absorb(a, g, now)
			continue
		}
		opened := a == nil
		if opened {
			fp := Fingerprint(g.Finding.Replica, g.Cause())
			a = &Incident{Fingerprint: fp, ID: IncidentID(fp, now), Class: g.Cause(), Replica: g.Finding.Replica, Model: g.Finding.Model,
				Fleet: g.Fleet, State: StatePending, ActiveAt: now, Finding: g.Finding, Severity: g.Finding.Severity}
			if prev := t.aftermathOf(g, now); prev != nil {
				a.After, a.AfterID, a.QuietUntil = prev.Fingerprint, prev.ID, prev.ResolvedAt.Add(t.cfg.Aftermath)
			}
			t.alerts[fp] = a
			t.note(Opened, a, now, nil)
		}
		touched[a.Fingerprint] = true
		t.absorb(a, g, now)
		t.continueWith(a, g, round, opened)
	}
	for _, fp := range slices.Sorted(maps.Keys(t.alerts)) {
		a := t.alerts[fp]
		if touched[fp] {
			continue
		}
		switch {
		case a.AbsorbedBy != "" && a.Open():
			if seen[seenKey{a.Replica, a.Class}] {
				a.LastSeen = now
			}
			parent, ok := t.alerts[a.AbsorbedBy]
			parentEnded := !ok || !parent.Open()
			if parentEnded || now.Sub(a.LastSeen) >= t.cfg.timing(a.Class).KeepFiringFor {
				t.resolve(a, round, "")
			}
		case a.State == StatePending:
			delete(t.alerts, fp)
			t.note(Dropped, a, now, nil)
		case a.State == StateFiring:
			if now.Sub(a.LastSeen) >= t.cfg.timing(a.Class).KeepFiringFor && !now.Before(a.HoldUntil) && !t.backlogRemains(a, round) {
				t.resolve(a, round, "")
			}
		case a.State == StateResolved:
			if now.Sub(a.ResolvedAt) >= t.cfg.ResolvedRetention {
				delete(t.alerts, fp)
			}
		}
	}
	return t.flush()
}

// resolve ends a at the round's instant and pages it.
func (t *Tracker) resolve(a *Incident, round assess.Round, reason string) {
	a.State, a.ResolvedAt = StateResolved, round.At
	i := t.note(Resolved, a, round.At, func(tr *Transition) { tr.Reason = reason })
	t.page(i, a, notify.KindResolve, round)
}

// backlogRemains holds the resolve of a replica incident while the queue it
// built is still there: detectors read rates and tails over ranges that
// can clear before users stop waiting. The hold lasts at most the
// aftermath window after the incident was last seen, so a replica that
// always queues a little cannot keep an incident open.
func (t *Tracker) backlogRemains(a *Incident, round assess.Round) bool {
	if a.Fleet || round.At.Sub(a.LastSeen) >= t.cfg.Aftermath {
		return false
	}
	r, ok := round.Replica(a.Replica)
	return ok && r.Scrape.Up && r.Triage.WaitingHigh
}

// aftermathOf returns the incident resolved on g's replica within the
// aftermath that explains g, if any.
func (t *Tracker) aftermathOf(g correlate.Group, now time.Time) *Incident {
	if g.Fleet || t.cfg.Aftermath <= 0 {
		return nil
	}
	var best *Incident
	for _, a := range t.alerts {
		if a.State != StateResolved || a.Replica != g.Finding.Replica || now.Sub(a.ResolvedAt) >= t.cfg.Aftermath {
			continue
		}
		// The cause itself coming back is a new incident, paged as usual.
		if g.Cause() == a.Class || (!slices.Contains(a.Members, g.Cause()) && !detect.Explains(a.Finding, g.Finding)) {
			continue
		}
		if best == nil || a.ResolvedAt.After(best.ResolvedAt) {
			best = a
		}
	}
	return best
}

// match finds the open incident g continues: the same fleet incident; an
// open fleet incident of the replica's model and cause; or, on the same
// replica, an incident sharing a class with g or related to it as cause
// and effect. The oldest candidate wins (firing before pending).
func (t *Tracker) match(g correlate.Group) *Incident {
	var best *Incident
	better := func(a *Incident) bool {
		if best == nil {
			return true
		}
		if (a.State == StateFiring) != (best.State == StateFiring) {
			return a.State == StateFiring
		}
		if !a.ActiveAt.Equal(best.ActiveAt) {
			return a.ActiveAt.Before(best.ActiveAt)
		}
		return a.Fingerprint < best.Fingerprint
	}
	classes := g.Classes()
	for _, a := range t.alerts {
		if !a.Open() || a.AbsorbedBy != "" {
			continue
		}
		// Restored after a restart and not seen since, an incident may have
		// ended while the daemon was down: only its own class continues it,
		// never what a cause of its kind would explain.
		if a.Restored && !slices.Contains(classes, a.Class) {
			continue
		}
		var ok bool
		switch {
		case g.Fleet:
			ok = a.Fleet && a.Model == g.Finding.Model && (a.Class == g.Cause() || slices.Contains(a.Members, g.Cause()))
		case a.Fleet:
			ok = a.Model == g.Finding.Model && (a.Class == g.Cause() || slices.Contains(a.Members, g.Cause()))
		default:
			ok = a.Replica == g.Finding.Replica && (overlaps(a.Members, classes) || a.Class == g.Cause() ||
				detect.Explains(a.Finding, g.Finding) || detect.Explains(g.Finding, a.Finding)) ||
				burnContinues(a, g)
		}
		if !ok {
			continue
		}
		if g.Fleet || !a.Fleet {
			if better(a) {
				best = a
			}
			continue
		}
		// A fleet incident covering this replica's cause takes precedence
		// over the replica's own incidents.
		return a
	}
	return best
}

// absorb links into a the other open incidents g's findings belong to: a
// replica's incidents joined by a fleet incident, or a cause and a
// consequence paged separately. Pending ones never paged and are dropped;
// firing ones stay firing, silent, until they end.
func (t *Tracker) absorb(a *Incident, g correlate.Group, now time.Time) {
	for _, fp := range slices.Sorted(maps.Keys(t.alerts)) {
		b := t.alerts[fp]
		if b == a || !b.Open() || b.AbsorbedBy != "" || b.Fleet || b.Restored {
			continue
		}
		joined := false
		for _, m := range g.Members {
			if m.Replica == b.Replica && (m.Class == b.Class || slices.Contains(b.Members, m.Class)) {
				joined = true
				break
			}
		}
		if !joined {
			continue
		}
		if b.State == StatePending {
			delete(t.alerts, fp)
			t.note(Dropped, b, now, nil)
			continue
		}
		b.AbsorbedBy, b.AbsorbedByID, b.ExplainedBy, b.LastSeen = a.Fingerprint, a.ID, []detect.Class{a.Class}, now
		if b.ActiveAt.Before(a.ActiveAt) {
			a.ActiveAt = b.ActiveAt // the incident began with its first symptom
		}
		t.changes[t.note(Absorbed, a, now, nil)].other = b
	}
}

// continueWith applies this round's group g to incident a (opened this
// round when opened) and notes what changed.
func (t *Tracker) continueWith(a *Incident, g correlate.Group, round assess.Round, opened bool) {
	now := round.At
	prevClass, prevSeverity := a.Class, a.Severity
	a.LastSeen = now
	var joined []detect.Class
	for _, c := range g.Classes() {
		if !slices.Contains(a.Members, c) {
			joined = append(joined, c)
		}
	}
	a.Members = union(a.Members, g.Classes())
	a.Explains = slices.Clone(g.Finding.Consequences)
	a.Restored = false
	a.Failing = ""
	for _, m := range g.Members[1:] {
		switch {
		case m.Class != detect.ErrorRate:
		case m.Replica != g.Finding.Replica:
			// What users see in front of the worker: the gateway's.
			a.Failing = "at " + m.Replica + ", " + m.Summary
		default:
			a.Failing = m.Summary
		}
	}
	// While the cause has cleared and only what it explains remains, the
	// incident keeps its cause's name: the backlog draining is this
	// incident, not a new one. Its finding is then what remains, under the
	// cause's name (drained), so the page says what users feel now.
	a.Draining = a.State == StateFiring && g.Cause() != a.Class && (detect.Explains(a.Finding, g.Finding) || g.Cause() == correlate.SLOBurn)
	switch {
	case !a.Draining:
		a.Finding, a.Class, a.Cleared = g.Finding, g.Cause(), nil
		if a.Replica == correlate.FleetReplica(a.Model) && !a.Fleet && !g.Fleet && g.Finding.Replica != a.Replica {
			// The incident a burn opened alone moves to the replica its
			// cause was found on: the page names where to act, and from
			// now on that replica's rounds continue it.
			a.Replica = g.Finding.Replica
		}
	case a.Cleared == nil:
		cause := a.Finding
		a.Cleared = &cause
		fallthrough
	default:
		a.Finding = drained(*a.Cleared, g.Finding)
	}
	// An incident is as severe as its worst member now, and a firing one
	// as severe as it has been: the page that went out, its repeats and its
	// resolve carry that severity. A consequence with users failing
	// escalates the incident it belongs to, draining or not.
	switch {
	case a.State != StateFiring:
		a.Severity = g.Finding.Severity
	case g.Finding.Severity > a.Severity:
		a.Severity = g.Finding.Severity
	}
	grew := t.grew(a, round)
	t.notePeak(a, g.Finding)
	// Values of a replica that cannot be scraped are its last good
	// scrape's, which the rounds before already took.
	if snap, ok := round.Replica(a.Replica); ok && snap.Scrape.Up {
		a.Felt.add(snap.Snapshot)
	}
	freeze(a, g, now)
	renamed := -1
	if a.Class != prevClass {
		renamed = t.note(Renamed, a, now, func(tr *Transition) { tr.FromClass = prevClass })
	}
	joined = slices.DeleteFunc(joined, func(c detect.Class) bool { return c == a.Class })
	if len(joined) > 0 && !opened {
		t.note(Joined, a, now, func(tr *Transition) { tr.Classes = joined })
	}
	switch a.State {
	case StatePending:
		if now.Sub(a.ActiveAt) >= t.cfg.timing(a.Class).For && !now.Before(a.QuietUntil) {
			a.State, a.FiredAt = StateFiring, now
			t.page(t.note(Fired, a, now, nil), a, notify.KindTrigger, round)
		}
	case StateFiring:
		switch {
		case a.Severity > prevSeverity:
			a.UpdatedAt = now // the impact that escalated it grew
			i := t.note(Escalated, a, now, func(tr *Transition) { tr.FromSeverity = prevSeverity })
			t.page(i, a, notify.KindUpdate, round)
		case renamed >= 0:
			t.page(renamed, a, notify.KindUpdate, round)
		case grew:
			a.UpdatedAt = now
			t.page(t.note(Grew, a, now, nil), a, notify.KindUpdate, round)
		case t.cfg.RepeatInterval > 0 && now.Sub(a.LastNotified) >= t.cfg.RepeatInterval:
			t.page(t.note(Repeated, a, now, nil), a, notify.KindRepeat, round)
		}
	}
	t.note(Seen, a, now, func(tr *Transition) { tr.Group = g })
}

// drained is the incident's finding once its cause has cleared and g,
// what the cause brought about, remains: g's summary, evidence and steps,
// under the cause's class, layer and runbook (what explains what is still
// decided by the cause), the cause's root-cause steps after g's.
func drained(cause, g detect.Finding) detect.Finding {
	f := g
	f.Class, f.Layer, f.Runbook = cause.Class, cause.Layer, cause.Runbook
	f.Consequences = union([]detect.Class{g.Class}, g.Consequences)
	f.RootCause = slices.Clone(g.RootCause)
	for _, s := range cause.RootCause {
		if !slices.Contains(f.RootCause, s) {
			f.RootCause = append(f.RootCause, s)
		}
	}
	f.Baselines = cause.Baselines
	return f
}

// grew reports whether a firing incident's impact grew materially since
// its last page: a class joined it, or its replica's aborted requests
// doubled and rose by at least one a second. A fall of impact pages
// nothing. The first growth after the trigger pages at once, later ones
// at most once per update_interval after the last growth update or
// escalation (escalations page at once: the impact grew past a severity).
// Renames page at once and take nothing from that budget: a cause found a
// moment after the trigger must not hold back the failures its drain
// brings minutes later. A consequence that feeds on itself, new since the
// last page, changes what the page leads with (its name in the headline,
// its steps first): like a rename, it pages at once. So do users failing,
// new since the last page: the headline then leads with them, and an
// update a moment earlier for more aborts must not hold that back.
func (t *Tracker) grew(a *Incident, round assess.Round) bool {
	if a.State != StateFiring {
		return false
	}
	if a.Failing != "" && !slices.Contains(a.Paged.Members, detect.ErrorRate) {
		return true
	}
	for _, c := range a.Explains {
		if !slices.Contains(a.Paged.Members, c) && detect.SelfSustaining(detect.Finding{Class: c, Replica: a.Replica}) {
			return true
		}
	}
	if t.cfg.UpdateInterval <= 0 || (!a.UpdatedAt.IsZero() && round.At.Sub(a.UpdatedAt) < t.cfg.UpdateInterval) {
		return false
	}
	for _, c := range a.Members {
		if !slices.Contains(a.Paged.Members, c) {
			return true
		}
	}
	aborts := abortsOf(a, round)
	return aborts >= 2*a.Paged.AbortsPerSecond && aborts >= a.Paged.AbortsPerSecond+1
}

// abortsOf is the aborted requests a second of a's replica this round, 0
// for a fleet incident or a replica that could not be read.
func abortsOf(a *Incident, round assess.Round) float64 {
	if a.Fleet {
		return 0
	}
	if r, ok := round.Replica(a.Replica); ok && r.Scrape.Up && r.Snapshot.AbortsPerSecond != nil {
		return *r.Snapshot.AbortsPerSecond
	}
	return 0
}

// freeze keeps the baselines of g's member findings that the incident has
// none of yet: the levels before each member's onset.
func freeze(a *Incident, g correlate.Group, now time.Time) {
	for _, m := range g.Members {
		if len(m.Baselines) == 0 || slices.ContainsFunc(a.Frozen, func(f Frozen) bool { return f.Replica == m.Replica && f.Class == m.Class }) {
			continue
		}
		a.Frozen = append(a.Frozen, Frozen{Replica: m.Replica, Class: m.Class, At: now, Values: maps.Clone(m.Baselines)})
	}
}

// References are the frozen baselines of the open incidents, by replica
// and class, for the next round's detectors; where two incidents froze
// one (an absorbed incident and the one that took it in), the earlier.
func (t *Tracker) References() map[string]detect.References {
	var out map[string]detect.References
	for _, a := range t.alerts {
		if !a.Open() {
			continue
		}
		for _, f := range a.Frozen {
			if out == nil {
				out = map[string]detect.References{}
			}
			refs := out[f.Replica]
			if refs == nil {
				refs = detect.References{}
				out[f.Replica] = refs
			}
			if cur, ok := refs[f.Class]; ok && !f.At.Before(cur.Since) {
				continue
			}
			refs[f.Class] = detect.Reference{Source: detect.Frozen, Since: f.At, Values: f.Values}
		}
	}
	return out
}

// notePeak takes finding f's evidence into the incident's peak, and keeps
// the cause's own finding at its worst round (the highest severity, then
// the largest departure of its first number from baseline).
func (t *Tracker) notePeak(a *Incident, f detect.Finding) {
	// Only the cause's own findings: a renamed incident starts over, a
	// backlog draining under the cause's name is not the cause, and a
	// finding that says how the condition ended (Resolving) is no worst.
	own := f.Class == a.Class && !a.Draining && !f.Resolving
	a.Peak = mergePeak(a.Peak, f.Evidence, own)
	score := float64(f.Severity) * 1e6
	if len(f.Evidence) > 0 {
		e := f.Evidence[0]
		d := math.Abs(e.Value)
		if e.HasBaseline && e.Baseline != 0 && e.Value > 0 {
			d = math.Abs(math.Log(e.Value / e.Baseline))
		}
		if !math.IsNaN(d) && !math.IsInf(d, 0) {
			score += min(d, 1e5)
		}
	}
	if w := a.CauseAtWorst; own && (w.Class != a.Class || score > w.Score) {
		a.CauseAtWorst = WorstSummary{Class: a.Class, Summary: f.Summary, Score: score}
	}
	for _, e := range f.Evidence {
		if !finite(e.Value) {
			continue
		}
		if a.Worst == nil {
			a.Worst = map[string]float64{}
		}
		w, seen := a.Worst[e.Name]
		if !seen || (e.LowerIsWorse() && e.Value < w) || (!e.LowerIsWorse() && e.Value > w) {
			a.Worst[e.Name] = e.Value
		}
	}
}

// mergePeak is peak with evidence es taken in: each name once, as last
// seen. The evidence of the cause's own finding (own) leads, in its
// order, so that a resolve lists the cause's signals first; other
// evidence keeps its place or is added after.
func mergePeak(peak, es []detect.Evidence, own bool) []detect.Evidence {
	var lead, rest []detect.Evidence
	if own {
		lead = slices.Clone(es)
	}
	for _, p := range peak {
		i := slices.IndexFunc(es, func(e detect.Evidence) bool { return e.Name == p.Name })
		switch {
		case i < 0:
			rest = append(rest, p)
		case !own:
			rest = append(rest, es[i])
		}
	}
	if !own {
		for _, e := range es {
			if !slices.ContainsFunc(rest, func(p detect.Evidence) bool { return p.Name == e.Name }) {
				rest = append(rest, e)
			}
		}
	}
	return append(lead, rest...)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// burnContinues reports whether group g and open incident a are one
// incident through an SLO burn of their model (correlate.FileBurns):
//
//   - a burn standing alone continues its own incident, or a firing
//     incident of its model (the one it was filed under, or one
//     correlation would file it under): the cause has cleared, the burn
//     remains, and the incident drains;
//   - a group carrying the burn (its cause found on a replica of the
//     model) continues the incident the burn opened alone, which is
//     renamed after the cause.
func burnContinues(a *Incident, g correlate.Group) bool {
	if a.Model != g.Finding.Model {
		return false
	}
	switch {
	case g.Cause() == correlate.SLOBurn:
		return a.Replica == g.Finding.Replica || (a.Class != correlate.SLOBurn && a.State == StateFiring)
	case a.Replica == correlate.FleetReplica(a.Model) && !a.Fleet && slices.Contains(a.Members, correlate.SLOBurn):
		// The incident the burn opened alone (its identity is the
		// model's), renamed after its cause or not yet.
		return slices.ContainsFunc(g.Members, func(m detect.Finding) bool { return m.Class == correlate.SLOBurn })
	}
	return false
}

func overlaps(a, b []detect.Class) bool {
	for _, c := range a {
		if slices.Contains(b, c) {
			return true
		}
	}
	return false
}

func union(a, b []detect.Class) []detect.Class {
	out := slices.Clone(a)
	for _, c := range b {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}
