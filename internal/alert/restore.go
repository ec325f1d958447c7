package alert

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Retire resolves every firing incident of the replicas for which gone
// returns true (a target that was removed), saying reason, and drops
// pending ones.
func (t *Tracker) Retire(gone func(replica string) bool, reason string, now time.Time) []Transition {
	round := assess.Round{At: now}
	for _, fp := range slices.Sorted(maps.Keys(t.alerts)) {
		a := t.alerts[fp]
		if !gone(a.Replica) {
			continue
		}
		switch a.State {
		case StatePending:
			delete(t.alerts, fp)
			t.note(Dropped, a, now, nil)
		case StateFiring:
			t.resolve(a, round, reason)
		}
	}
	return t.flush()
}

// Renotify pages the firing incident fp again with its state as of round
// (the next sequence number), for a caller that held back its earlier
// pages and must now send where it stands: kind is what is owed (a
// trigger when nothing was sent). false when fp is not firing.
func (t *Tracker) Renotify(fp string, kind notify.Kind, round assess.Round) (Transition, bool) {
	a, ok := t.alerts[fp]
	if !ok || a.State != StateFiring {
		return Transition{}, false
	}
	t.page(t.note(Repeated, a, round.At, nil), a, kind, round)
	return t.flush()[0], true
}

// Incidents returns copies of every incident, firing first, then pending,
// then resolved, each by replica and class.
func (t *Tracker) Incidents() []Incident {
	out := make([]Incident, 0, len(t.alerts))
	for _, a := range t.alerts {
		out = append(out, a.clone())
	}
	rank := map[State]int{StateFiring: 0, StatePending: 1, StateResolved: 2}
	sort.Slice(out, func(i, j int) bool {
		if rank[out[i].State] != rank[out[j].State] {
			return rank[out[i].State] < rank[out[j].State]
		}
		if out[i].Replica != out[j].Replica {
			return out[i].Replica < out[j].Replica
		}
		return out[i].Class < out[j].Class
	})
	return out
}

// Snapshot returns the incidents worth persisting: the firing ones.
func (t *Tracker) Snapshot() []Incident {
	var out []Incident
	for _, a := range t.Incidents() {
		if a.State == StateFiring {
			out = append(out, a)
		}
	}
	return out
}

// Restore reinstates firing incidents saved before a restart. They keep
// their fingerprint and sequence, so the next page continues the same
// incident, and they are held for RestoreGrace so that empty windows do
// not resolve them before detectors could see the condition again.
func (t *Tracker) Restore(saved []Incident, now time.Time) {
	for _, a := range saved {
		if a.State != StateFiring || a.Fingerprint == "" {
			continue
		}
		a := a
		if len(a.Members) == 0 {
			a.Members = []detect.Class{a.Class}
		}
		if a.ID == "" {
			a.ID = IncidentID(a.Fingerprint, a.ActiveAt)
		}
		a.HoldUntil, a.Restored = now.Add(t.cfg.RestoreGrace), true
		t.alerts[a.Fingerprint] = &a
	}
}

// RestoreIncidents reinstates incidents the notifiers still hold open
// (their last event) that the saved alert state does not know, e.g.
// because that document was lost. They follow the same rules as Restore:
// seen again, they continue; not seen within the grace, they resolve, so
// an incident that ended while the daemon was down still gets its
// resolve.
func (t *Tracker) RestoreIncidents(open []notify.Event, now time.Time) int {
	n := 0
	for _, ev := range open {
		if ev.Fingerprint == "" || ev.Status != notify.StatusFiring {
			continue
		}
		if _, known := t.alerts[ev.Fingerprint]; known {
			continue
		}
		f := detect.Finding{
			Class: detect.Class(ev.Class), Severity: ev.Severity, Replica: ev.Replica, Model: ev.Model,
			Layer: detect.Layer(ev.Layer), Summary: ev.Summary, Diagnosis: ev.Diagnosis,
			Emergency: ev.Emergency, RootCause: ev.RootCause, Runbook: detect.RunbookPath(detect.Class(ev.Class)),
		}
		for _, e := range ev.Evidence {
			f.Evidence = append(f.Evidence, detect.Evidence{Name: e.Name, Value: e.Value, Baseline: e.Baseline, HasBaseline: e.HasBase, Unit: e.Unit, Threshold: e.Threshold})
		}
		members := []detect.Class{f.Class}
		for _, c := range ev.Explains {
			members = union(members, []detect.Class{detect.Class(c)})
		}
		id := ev.Incident
		if id == "" {
			id = IncidentID(ev.Fingerprint, ev.StartsAt)
		}
		t.alerts[ev.Fingerprint] = &Incident{
			Fingerprint: ev.Fingerprint, ID: id, Class: f.Class, Replica: ev.Replica, Model: ev.Model, Fleet: ev.Fleet, Labels: ev.Labels,
			State: StateFiring, Severity: ev.Severity,
			ActiveAt: ev.StartsAt, FiredAt: ev.StartsAt, LastSeen: now, LastNotified: ev.At, HoldUntil: now.Add(t.cfg.RestoreGrace),
			Seq: ev.Seq, Finding: f, Members: members, Restored: true,
			Paged: Paged{Members: members},
		}
		n++
	}
	return n
}
