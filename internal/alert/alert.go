// Package alert turns detector findings into alerts with a lifecycle, the
// way Prometheus' rules/alerting.go does, without PromQL: a pure state
// machine driven by the evaluation time.
//
//	(finding appears) -> pending --for--> firing --(gone for keep_firing_for)--> resolved
//
// A pending alert whose finding disappears is dropped silently: it never
// paged. A firing alert emits a trigger, then updates when its severity or
// causal explanation changes, repeats every repeat_interval, and a resolve
// when it ends. Resolved alerts are kept for resolved_retention so the API
// can show what just ended.
package alert

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Timing of one class's alerts.
type Timing struct {
	// For is how long a finding must persist before the alert fires; it
	// filters one-scrape blips.
	For time.Duration `yaml:"for"`
	// KeepFiringFor is the hysteresis: a firing alert resolves only after its
	// finding has been absent this long, so a condition hovering at its
	// threshold does not flap.
	KeepFiringFor time.Duration `yaml:"keep_firing_for"`
}

// Config of the tracker.
type Config struct {
	Timing `yaml:",inline"`
	// RepeatInterval re-notifies a still-firing alert (0 disables).
	RepeatInterval time.Duration `yaml:"repeat_interval"`
	// ResolvedRetention keeps resolved alerts visible in the API.
	ResolvedRetention time.Duration `yaml:"resolved_retention"`
	// RestoreGrace is how long an alert restored after a restart stays firing
	// without being seen again: the windows start empty, and detectors need
	// this long to confirm the condition before it may resolve.
	RestoreGrace time.Duration `yaml:"restore_grace"`
	// Aftermath: a consequence found on a replica within this long after
	// an incident that explains it resolved is that incident's drain (a
	// latency tail still inside a detector's range, a backlog emptying),
	// not a new incident: it pages only if it is still there when the
	// aftermath has passed.
	Aftermath time.Duration `yaml:"aftermath"`
	// Classes overrides the timing per incident class.
	Classes map[string]Timing `yaml:"classes"`
}

// DefaultConfig holds production values.
func DefaultConfig() Config {
	return Config{
		Timing:            Timing{For: 2 * time.Minute, KeepFiringFor: 5 * time.Minute},
		RepeatInterval:    4 * time.Hour,
		ResolvedRetention: time.Hour,
		RestoreGrace:      10 * time.Minute,
		Aftermath:         10 * time.Minute,
	}
}

// Validate reports every problem, each prefixed with its YAML path under
// prefix (e.g. "alerts").
func (c Config) Validate(prefix string) error {
	var errs []error
	neg := func(path string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s.%s: must not be negative, got %s", prefix, path, d))
		}
	}
	neg("for", c.For)
	neg("keep_firing_for", c.KeepFiringFor)
	neg("repeat_interval", c.RepeatInterval)
	neg("resolved_retention", c.ResolvedRetention)
	neg("restore_grace", c.RestoreGrace)
	neg("aftermath", c.Aftermath)
	for _, name := range slices.Sorted(maps.Keys(c.Classes)) {
		t := c.Classes[name]
		neg("classes."+name+".for", t.For)
		neg("classes."+name+".keep_firing_for", t.KeepFiringFor)
	}
	return errors.Join(errs...)
}

func (c Config) timing(class detect.Class) Timing {
	if t, ok := c.Classes[string(class)]; ok {
		return t
	}
	return c.Timing
}

// State of an alert.
type State string

// Alert states.
const (
	StatePending  State = "pending"
	StateFiring   State = "firing"
	StateResolved State = "resolved"
)

// Alert is one incident: a cause on one replica (or across a model's fleet)
// and the consequences it explains, over its whole life. Its identity, the
// fingerprint, is fixed when it opens, so a consequence paged before its
// cause is re-titled in place when the cause appears, and consequences that
// outlive their cause stay in the incident until they clear.
type Alert struct {
	Fingerprint string `json:"fingerprint"`
	// Incident names this incident of the fingerprint (IncidentID): fixed
	// when it opens, so the journal and the pages' links follow one
	// incident even when its start moves back to an absorbed symptom.
	Incident   string       `json:"incident,omitempty"`
	Class      detect.Class `json:"class"` // the cause the incident is named after
	Replica    string       `json:"replica"`
	Model      string       `json:"model,omitempty"`
	Fleet      bool         `json:"fleet,omitempty"`
	State      State        `json:"state"`
	Severity   string       `json:"severity"`
	ActiveAt   time.Time    `json:"active_at"`
	FiredAt    time.Time    `json:"fired_at,omitzero"`
	ResolvedAt time.Time    `json:"resolved_at,omitzero"`
	LastSeen   time.Time    `json:"last_seen"`
	HoldUntil  time.Time    `json:"hold_until,omitzero"` // restored alerts do not resolve before this
	// LastNotified is the time of the last event sent for the alert.
	LastNotified time.Time      `json:"last_notified,omitzero"`
	Seq          uint64         `json:"seq"`
	Finding      detect.Finding `json:"finding"`
	// Members are every class seen as part of the incident during its life.
	Members []detect.Class `json:"members,omitempty"`
	// Explains are the consequences the cause explains in the last round.
	Explains []detect.Class `json:"explains,omitempty"`
	// ExplainedBy is set while the alert is absorbed: the cause explaining it.
	ExplainedBy []detect.Class `json:"explained_by,omitempty"`
	// AbsorbedBy is the fingerprint of the incident that explains this alert
	// (its cause, or the fleet incident it joined). An absorbed alert sends
	// nothing until it ends: with that incident, or when its own condition
	// clears.
	AbsorbedBy string `json:"absorbed_by,omitempty"`
	// Draining says the cause has cleared while consequences it explains
	// are still seen (a backlog draining): the incident stays open.
	Draining bool `json:"draining,omitempty"`
	// QuietUntil holds a pending alert that is the aftermath of an incident
	// just resolved (After): it fires only if still seen then.
	QuietUntil time.Time `json:"quiet_until,omitzero"`
	After      string    `json:"after,omitempty"`
	// Peak is the evidence at the incident's worst round, shown beside the
	// recovered values when it resolves.
	Peak      []detect.Evidence `json:"peak,omitempty"`
	PeakAt    time.Time         `json:"peak_at,omitzero"`
	PeakScore float64           `json:"peak_score,omitempty"`
	// Labels are the replica's target labels last seen (namespace, team,
	// ...), kept so that the incident's events carry them even when the
	// replica is gone from the round, as when it resolves.
	Labels map[string]string `json:"labels,omitempty"`
	// SilencedBy are the IDs of the silences muting the alert in the last
	// round, set by the evaluation loop (the tracker itself never mutes):
	// a silenced alert is tracked and shown as usual, but nothing is sent.
	SilencedBy []string `json:"silenced_by,omitempty"`
}

// open reports whether the alert is pending or firing.
func (a *Alert) open() bool { return a.State == StatePending || a.State == StateFiring }

// Fingerprint is the stable identity of a (replica, class) alert. It is the
// PagerDuty dedup_key and the Slack thread key, so it must not change across
// versions or restarts.
func Fingerprint(replica string, class detect.Class) string {
	h := sha256.Sum256([]byte(replica + "\x00" + string(class)))
	return hex.EncodeToString(h[:8])
}

// IncidentID names one incident: the alert's fingerprint (stable per
// replica and class, so reused by later incidents of the same kind) and the
// second it opened. It is the path segment of /incidents/<id>.
func IncidentID(fingerprint string, openedAt time.Time) string {
	return fingerprint + "-" + strconv.FormatInt(openedAt.Unix(), 10)
}

// Links builds the URLs put in events.
type Links struct {
	// ExternalURL is the daemon's externally reachable base URL.
	ExternalURL string
	// Runbooks overrides the runbook link per class (a team's own wiki).
	Runbooks map[string]string
}

func (l Links) runbook(c detect.Class) string {
	if u, ok := l.Runbooks[string(c)]; ok {
		return u
	}
	return l.ExternalURL + detect.RunbookPath(c)
}

func (l Links) alert(fp string) string {
	return l.ExternalURL + "/api/v1/watchdog/alerts?fingerprint=" + fp
}

// IncidentPath is the workspace page of incident id, which every
// notification links; PostmortemPath is its draft postmortem. The API, the
// pages and the notifications all build their links here.
func IncidentPath(id string) string { return "/incidents/" + url.PathEscape(id) }

// PostmortemPath is the draft postmortem of incident id.
func PostmortemPath(id string) string { return IncidentPath(id) + "/postmortem" }

// incident is the incident's page in the workspace.
func (l Links) incident(id string) string { return l.ExternalURL + IncidentPath(id) }

// postmortem is the draft postmortem of a resolved incident.
func (l Links) postmortem(id string) string { return l.ExternalURL + PostmortemPath(id) }

// incidentURL links the incident alert fp belongs to: its page, or the
// alert API when the tracker no longer holds it.
func (t *Tracker) incidentURL(fp string) string {
	if a, ok := t.alerts[fp]; ok && a.Incident != "" {
		return t.links.incident(a.Incident)
	}
	return t.links.alert(fp)
}

// Tracker holds every alert. It is not safe for concurrent use: the
// evaluation loop owns it and publishes copies.
type Tracker struct {
	cfg    Config
	links  Links
	alerts map[string]*Alert
}

// NewTracker returns an empty tracker.
func NewTracker(cfg Config, links Links) *Tracker {
	return &Tracker{cfg: cfg, links: links, alerts: map[string]*Alert{}}
}

// SetConfig changes timing and links (hot reload) keeping every alert.
func (t *Tracker) SetConfig(cfg Config, links Links) { t.cfg, t.links = cfg, links }

type seenKey struct {
	replica string
	class   detect.Class
}

// Update applies one assessment round and returns the events to deliver,
// ordered by fingerprint then sequence.
func (t *Tracker) Update(round assess.Round) []notify.Event {
	now := round.At
	incidents := slices.Clone(round.Incidents)
	// Fleet incidents first, so the replica incidents of a model they cover
	// join them; then by replica and cause for determinism.
	sort.SliceStable(incidents, func(i, j int) bool {
		a, b := incidents[i], incidents[j]
		if a.Fleet != b.Fleet {
			return a.Fleet
		}
		if a.Finding.Replica != b.Finding.Replica {
			return a.Finding.Replica < b.Finding.Replica
		}
		return a.Finding.Class < b.Finding.Class
	})
	seen := map[seenKey]bool{}
	for _, inc := range incidents {
		for _, m := range inc.Members {
			seen[seenKey{m.Replica, m.Class}] = true
		}
	}

	var events []notify.Event
	touched := map[string]bool{}
	for _, inc := range incidents {
		a := t.match(inc)
		if a != nil && a.Fleet && !inc.Fleet {
			// A replica of a model with an open fleet incident of this cause:
			// the fleet incident goes on while any replica shows it.
			a.LastSeen = now
			touched[a.Fingerprint] = true
			t.absorb(a, inc, now)
			continue
		}
		if a == nil {
			fp := Fingerprint(inc.Finding.Replica, inc.Cause())
			a = &Alert{Fingerprint: fp, Incident: IncidentID(fp, now), Class: inc.Cause(), Replica: inc.Finding.Replica, Model: inc.Finding.Model,
				Fleet: inc.Fleet, State: StatePending, ActiveAt: now, Finding: inc.Finding, Severity: inc.Finding.Severity.String()}
			if prev := t.aftermathOf(inc, now); prev != nil {
				a.After, a.QuietUntil = prev.Fingerprint, prev.ResolvedAt.Add(t.cfg.Aftermath)
			}
			t.alerts[fp] = a
		}
		touched[a.Fingerprint] = true
		t.absorb(a, inc, now)
		if ev, ok := t.continueWith(a, inc, round); ok {
			events = append(events, ev)
		}
	}
	for fp, a := range t.alerts {
		if touched[fp] {
			continue
		}
		switch {
		case a.AbsorbedBy != "" && a.open():
			if seen[seenKey{a.Replica, a.Class}] {
				a.LastSeen = now
			}
			parent, ok := t.alerts[a.AbsorbedBy]
			parentEnded := !ok || !parent.open()
			if parentEnded || now.Sub(a.LastSeen) >= t.cfg.timing(a.Class).KeepFiringFor {
				a.State, a.ResolvedAt = StateResolved, now
				events = append(events, t.event(a, notify.KindResolve, round))
			}
		case a.State == StatePending:
			delete(t.alerts, fp)
		case a.State == StateFiring:
			if now.Sub(a.LastSeen) >= t.cfg.timing(a.Class).KeepFiringFor && !now.Before(a.HoldUntil) && !t.backlogRemains(a, round) {
				a.State, a.ResolvedAt = StateResolved, now
				events = append(events, t.event(a, notify.KindResolve, round))
			}
		case a.State == StateResolved:
			if now.Sub(a.ResolvedAt) >= t.cfg.ResolvedRetention {
				delete(t.alerts, fp)
			}
		}
	}
	sort.SliceStable(events, func(i, j int) bool {
		if events[i].Fingerprint != events[j].Fingerprint {
			return events[i].Fingerprint < events[j].Fingerprint
		}
		return events[i].Seq < events[j].Seq
	})
	return events
}

// backlogRemains holds the resolve of a replica incident while the queue it
// built is still there: detectors read rates and tails over ranges that
// can clear before users stop waiting. The hold lasts at most the
// aftermath window after the incident was last seen, so a replica that
// always queues a little cannot keep an incident open.
func (t *Tracker) backlogRemains(a *Alert, round assess.Round) bool {
	if a.Fleet || round.At.Sub(a.LastSeen) >= t.cfg.Aftermath {
		return false
	}
	r, ok := round.Replica(a.Replica)
	return ok && r.Scrape.Up && r.Triage.WaitingHigh
}

// aftermathOf returns the incident resolved on inc's replica within the
// aftermath that explains inc, if any.
func (t *Tracker) aftermathOf(inc correlate.Incident, now time.Time) *Alert {
	if inc.Fleet || t.cfg.Aftermath <= 0 {
		return nil
	}
	var best *Alert
	for _, a := range t.alerts {
		if a.State != StateResolved || a.Replica != inc.Finding.Replica || now.Sub(a.ResolvedAt) >= t.cfg.Aftermath {
			continue
		}
		// The cause itself coming back is a new incident, paged as usual.
		if inc.Cause() == a.Class || (!slices.Contains(a.Members, inc.Cause()) && !detect.Explains(a.Finding, inc.Finding)) {
			continue
		}
		if best == nil || a.ResolvedAt.After(best.ResolvedAt) {
			best = a
		}
	}
	return best
}

// match finds the open incident inc continues: the same fleet incident; an
// open fleet incident of the replica's model and cause; or, on the same
// replica, an incident sharing a class with inc or related to it as cause
// and effect. The oldest candidate wins (firing before pending).
func (t *Tracker) match(inc correlate.Incident) *Alert {
	var best *Alert
	better := func(a *Alert) bool {
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
	classes := inc.Classes()
	for _, a := range t.alerts {
		if !a.open() || a.AbsorbedBy != "" {
			continue
		}
		var ok bool
		switch {
		case inc.Fleet:
			ok = a.Fleet && a.Model == inc.Finding.Model && (a.Class == inc.Cause() || slices.Contains(a.Members, inc.Cause()))
		case a.Fleet:
			ok = a.Model == inc.Finding.Model && (a.Class == inc.Cause() || slices.Contains(a.Members, inc.Cause()))
		default:
			ok = a.Replica == inc.Finding.Replica && (overlaps(a.Members, classes) || a.Class == inc.Cause() ||
				detect.Explains(a.Finding, inc.Finding) || detect.Explains(inc.Finding, a.Finding))
		}
		if !ok {
			continue
		}
		if inc.Fleet || !a.Fleet {
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

// absorb links into a the other open alerts inc's findings belong to: a
// replica's alerts joined by a fleet incident, or a cause and a consequence
// paged separately. Pending ones never paged and are dropped; firing ones
// stay firing, silent, until they end.
func (t *Tracker) absorb(a *Alert, inc correlate.Incident, now time.Time) {
	for fp, b := range t.alerts {
		if b == a || !b.open() || b.AbsorbedBy != "" || b.Fleet {
			continue
		}
		joined := false
		for _, m := range inc.Members {
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
			continue
		}
		b.AbsorbedBy, b.ExplainedBy, b.LastSeen = a.Fingerprint, []detect.Class{a.Class}, now
		if b.ActiveAt.Before(a.ActiveAt) {
			a.ActiveAt = b.ActiveAt // the incident began with its first symptom
		}
	}
}

// continueWith applies this round's incident to alert a and returns the
// event it calls for, if any.
func (t *Tracker) continueWith(a *Alert, inc correlate.Incident, round assess.Round) (notify.Event, bool) {
	now := round.At
	prevClass, prevSeverity := a.Class, a.Severity
	a.LastSeen = now
	a.Members = union(a.Members, inc.Classes())
	a.Explains = slices.Clone(inc.Finding.Consequences)
	// While the cause has cleared and only what it explains remains, the
	// incident keeps its cause's name: the backlog draining is this
	// incident, not a new one.
	a.Draining = a.State == StateFiring && inc.Cause() != a.Class && detect.Explains(a.Finding, inc.Finding)
	if !a.Draining {
		a.Finding, a.Class = inc.Finding, inc.Cause()
		// A firing incident is as severe as it has been: the page that went
		// out, its repeats and its resolve carry that severity.
		if a.State != StateFiring || severityRank(inc.Finding.Severity.String()) > severityRank(a.Severity) {
			a.Severity = inc.Finding.Severity.String()
		}
	}
	t.notePeak(a, inc.Finding, now)
	switch a.State {
	case StatePending:
		if now.Sub(a.ActiveAt) >= t.cfg.timing(a.Class).For && !now.Before(a.QuietUntil) {
			a.State, a.FiredAt = StateFiring, now
			return t.event(a, notify.KindTrigger, round), true
		}
	case StateFiring:
		switch {
		case a.Class != prevClass || severityRank(a.Severity) > severityRank(prevSeverity):
			return t.event(a, notify.KindUpdate, round), true
		case t.cfg.RepeatInterval > 0 && now.Sub(a.LastNotified) >= t.cfg.RepeatInterval:
			return t.event(a, notify.KindRepeat, round), true
		}
	}
	return notify.Event{}, false
}

// notePeak keeps the evidence of the incident's worst round: the highest
// severity, then the largest departure of its first number from baseline.
func (t *Tracker) notePeak(a *Alert, f detect.Finding, now time.Time) {
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
	if a.Peak == nil || score > a.PeakScore {
		a.Peak, a.PeakAt, a.PeakScore = slices.Clone(f.Evidence), now, score
	}
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

// Retire resolves every firing alert of the replicas for which gone returns
// true (a target that was removed) with reason, and forgets pending ones.
func (t *Tracker) Retire(gone func(replica string) bool, reason string, now time.Time) []notify.Event {
	var events []notify.Event
	round := assess.Round{At: now}
	for fp, a := range t.alerts {
		if !gone(a.Replica) {
			continue
		}
		switch a.State {
		case StatePending:
			delete(t.alerts, fp)
		case StateFiring:
			a.State, a.ResolvedAt = StateResolved, now
			ev := t.event(a, notify.KindResolve, round)
			ev.Headline = reason + ": " + ev.Headline
			ev.Summary = reason + ": " + ev.Summary
			events = append(events, ev)
		}
	}
	sort.Slice(events, func(i, j int) bool { return events[i].Fingerprint < events[j].Fingerprint })
	return events
}

// Alerts returns copies of every alert, firing first, then pending, then
// resolved, each by replica and class.
func (t *Tracker) Alerts() []Alert {
	out := make([]Alert, 0, len(t.alerts))
	for _, a := range t.alerts {
		out = append(out, *a)
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

// Snapshot returns the alerts worth persisting: the firing ones.
func (t *Tracker) Snapshot() []Alert {
	var out []Alert
	for _, a := range t.Alerts() {
		if a.State == StateFiring {
			out = append(out, a)
		}
	}
	return out
}

// Restore reinstates firing alerts saved before a restart. They keep their
// fingerprint and sequence, so the next event continues the same incident,
// and they are held for RestoreGrace so that empty windows do not resolve
// them before detectors could see the condition again.
func (t *Tracker) Restore(saved []Alert, now time.Time) {
	for _, a := range saved {
		if a.State != StateFiring || a.Fingerprint == "" {
			continue
		}
		a := a
		if len(a.Members) == 0 {
			a.Members = []detect.Class{a.Class}
		}
		if a.Incident == "" {
			a.Incident = IncidentID(a.Fingerprint, a.ActiveAt)
		}
		a.HoldUntil = now.Add(t.cfg.RestoreGrace)
		t.alerts[a.Fingerprint] = &a
	}
}

// RestoreIncidents reinstates incidents the notifiers still hold open (their
// last event) that the saved alert state does not know, e.g. because that
// document was lost. They follow the same rules as Restore: re-seen, they
// continue; not re-seen within the grace, they resolve, so an incident that
// ended while the daemon was down still gets its resolve.
func (t *Tracker) RestoreIncidents(open []notify.Event, now time.Time) int {
	n := 0
	for _, ev := range open {
		if ev.Fingerprint == "" || ev.Status != notify.StatusFiring {
			continue
		}
		if _, known := t.alerts[ev.Fingerprint]; known {
			continue
		}
		sev, _ := detect.ParseSeverity(ev.Severity)
		f := detect.Finding{
			Class: detect.Class(ev.Class), Severity: sev, Replica: ev.Replica, Model: ev.Model,
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
		t.alerts[ev.Fingerprint] = &Alert{
			Fingerprint: ev.Fingerprint, Incident: id, Class: f.Class, Replica: ev.Replica, Model: ev.Model, Fleet: ev.Fleet, Labels: ev.Labels,
			State: StateFiring, Severity: ev.Severity,
			ActiveAt: ev.StartsAt, FiredAt: ev.StartsAt, LastSeen: now, LastNotified: ev.At, HoldUntil: now.Add(t.cfg.RestoreGrace),
			Seq: ev.Seq, Finding: f, Members: members,
		}
		n++
	}
	return n
}

// runbookClass picks the runbook: a fleet-wide incident links the fleet
// page, whose first step is finding the shared change.
func runbookClass(a *Alert) detect.Class {
	if a.Fleet {
		return "fleet"
	}
	return a.Class
}

func severityRank(s string) int {
	sev, _ := detect.ParseSeverity(s)
	return int(sev)
}

func (t *Tracker) event(a *Alert, kind notify.Kind, round assess.Round) notify.Event {
	now := round.At
	a.Seq++
	a.LastNotified = now
	f := a.Finding
	ev := notify.Event{
		Fingerprint: a.Fingerprint,
		Incident:    a.Incident,
		Seq:         a.Seq,
		Kind:        kind,
		Status:      notify.StatusFiring,
		Class:       string(a.Class),
		Severity:    a.Severity,
		Replica:     a.Replica,
		Model:       f.Model,
		Fleet:       a.Fleet,
		Layer:       string(f.Layer),
		Summary:     f.Summary,
		Diagnosis:   f.Diagnosis,
		Triage:      f.Triage,
		Emergency:   f.Emergency,
		RootCause:   f.RootCause,
		RunbookURL:  t.links.runbook(runbookClass(a)),
		AlertURL:    t.incidentURL(a.Fingerprint),
		StartsAt:    a.FiredAt,
		At:          now,
	}
	snap, haveSnap := round.Replica(a.Replica)
	if haveSnap && len(snap.Replica.Labels) > 0 && !a.Fleet {
		a.Labels = maps.Clone(snap.Replica.Labels)
	}
	ev.Labels = maps.Clone(a.Labels)
	// Values of a replica that cannot be scraped are from its last good
	// scrape: stale, so not shown as what users feel now.
	ev.Headline = headline(a, snap.Snapshot, haveSnap && snap.Scrape.Up, kind == notify.KindResolve, now)
	evidence := f.Evidence
	if kind == notify.KindResolve && a.Peak != nil {
		evidence = a.Peak
	}
	for _, e := range evidence {
		ev.Evidence = append(ev.Evidence, field(e))
	}
	if a.Draining {
		ev.Diagnosis = strings.TrimSpace(ev.Diagnosis + " The cause has cleared; what it caused is still draining, so the incident stays open.")
	}
	for _, c := range a.ExplainedBy {
		ev.ExplainedBy = append(ev.ExplainedBy, string(c))
	}
	for _, c := range a.Explains {
		ev.Explains = append(ev.Explains, string(c))
	}
	if a.After != "" {
		ev.Diagnosis = strings.TrimSpace(ev.Diagnosis + " It began as an incident on this replica ended (" + t.incidentURL(a.After) +
			") and is still there after the aftermath window: it is not that incident's drain.")
	}
	if a.AbsorbedBy != "" {
		ev.Diagnosis = strings.TrimSpace(ev.Diagnosis + " This alert became part of another incident (" +
			t.incidentURL(a.AbsorbedBy) + "), which explains it; it ends with that incident or when its own condition clears.")
	}
	if kind == notify.KindResolve {
		ev.Status = notify.StatusResolved
		ev.EndsAt = now
		ev.PostmortemURL = t.links.postmortem(a.Incident)
		if haveSnap {
			ev.Recovered = recovered(snap.Snapshot)
		}
	}
	return ev
}

func field(e detect.Evidence) notify.Field {
	return notify.Field{Name: e.Name, Value: e.Value, Baseline: e.Baseline, HasBase: e.HasBaseline, Unit: e.Unit, Threshold: e.Threshold}
}

// headline is the page's one line: where, what is happening (the cause),
// and what users feel now (queue and time to first token) when known.
//
// A resolve's headline says what ended and how long it lasted, with the
// values now: the numbers of the firing summary would read as still
// burning.
func headline(a *Alert, s assess.Snapshot, withImpact, resolved bool, now time.Time) string {
	where := a.Replica
	if a.Fleet {
		where = "fleet " + a.Model
	}
	h := where + ": " + a.Finding.Summary
	if resolved {
		h = where + ": " + strings.ReplaceAll(string(a.Class), "_", " ") + " over"
		if !a.FiredAt.IsZero() {
			h += " after " + notify.FormatDuration(now.Sub(a.FiredAt))
		}
	}
	if !withImpact {
		return h
	}
	// An impact number the summary already states is not repeated.
	var impact []string
	add := func(label string, v *float64, unit string, onlyPositive bool) {
		if v == nil || (onlyPositive && *v <= 0) {
			return
		}
		n := detect.FormatNumber(*v)
		if !resolved && (strings.Contains(a.Finding.Summary, n) || strings.Contains(strings.ToLower(a.Finding.Summary), label)) {
			return
		}
		impact = append(impact, label+" "+n+unit)
	}
	add("queue", s.QueuedRequests, "", false)
	add("p99 TTFT", s.TTFTP99, " s", false)
	add("aborted", s.AbortsPerSecond, "/s", true)
	switch {
	case len(impact) == 0:
	case resolved:
		h += "; now " + strings.Join(impact, ", ")
	default:
		h += "; " + strings.Join(impact, ", ")
	}
	return h
}

// recovered are the replica's values as the incident resolves, shown next
// to the peak evidence.
func recovered(s assess.Snapshot) []notify.Field {
	var out []notify.Field
	add := func(name string, p *float64, unit string) {
		if p != nil {
			out = append(out, notify.Field{Name: name, Value: *p, Unit: unit})
		}
	}
	add("queued requests", s.QueuedRequests, "")
	add("running requests", s.RunningRequests, "")
	add("KV cache usage", s.KVUsage, "ratio")
	add("prefix hit rate", s.PrefixHitRate, "ratio")
	add("retracted requests", s.RetractionsPerSecond, "/s")
	add("aborted requests", s.AbortsPerSecond, "/s")
	add("time to first token p99", s.TTFTP99, "s")
	add("inter-token latency p99", s.ITLP99, "s")
	return out
}
