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
	"slices"
	"sort"
	"strings"
	"time"

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

// Alert is one (replica, class) incident.
type Alert struct {
	Fingerprint  string         `json:"fingerprint"`
	Class        detect.Class   `json:"class"`
	Replica      string         `json:"replica"`
	State        State          `json:"state"`
	Severity     string         `json:"severity"`
	ActiveAt     time.Time      `json:"active_at"`
	FiredAt      time.Time      `json:"fired_at,omitzero"`
	ResolvedAt   time.Time      `json:"resolved_at,omitzero"`
	LastSeen     time.Time      `json:"last_seen"`
	HoldUntil    time.Time      `json:"hold_until,omitzero"` // restored alerts do not resolve before this
	LastNotified time.Time      `json:"last_notified,omitzero"`
	Seq          uint64         `json:"seq"`
	Finding      detect.Finding `json:"finding"`
	ExplainedBy  []detect.Class `json:"explained_by,omitempty"`
	Explains     []detect.Class `json:"explains,omitempty"`
}

// Fingerprint is the stable identity of a (replica, class) alert. It is the
// PagerDuty dedup_key and the Slack thread key, so it must not change across
// versions or restarts.
func Fingerprint(replica string, class detect.Class) string {
	h := sha256.Sum256([]byte(replica + "\x00" + string(class)))
	return hex.EncodeToString(h[:8])
}

// Links builds the URLs put in events.
type Links struct {
	// ExternalURL is the daemon's externally reachable base URL ("" gives
	// daemon-relative links).
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
	return l.ExternalURL + "/api/v1/alerts?fingerprint=" + fp
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

// Update applies one evaluation round's findings at now and returns the
// events to deliver, ordered by fingerprint then sequence.
func (t *Tracker) Update(findings []detect.Finding, now time.Time) []notify.Event {
	current := strongest(findings)
	explain(current)

	var events []notify.Event
	for fp, f := range current {
		a, ok := t.alerts[fp]
		if !ok || a.State == StateResolved {
			a = &Alert{Fingerprint: fp, Class: f.Finding.Class, Replica: f.Finding.Replica, State: StatePending, ActiveAt: now}
			t.alerts[fp] = a
		}
		prevSeverity, prevExplained := a.Severity, a.ExplainedBy
		a.Finding, a.LastSeen = f.Finding, now
		a.Severity = f.Finding.Severity.String()
		a.ExplainedBy, a.Explains = f.explainedBy, f.explains
		switch a.State {
		case StatePending:
			if now.Sub(a.ActiveAt) >= t.cfg.timing(a.Class).For {
				a.State, a.FiredAt = StateFiring, now
				events = append(events, t.event(a, notify.KindTrigger, now))
			}
		case StateFiring:
			switch {
			case severityRank(a.Severity) > severityRank(prevSeverity) || !slices.Equal(prevExplained, a.ExplainedBy):
				events = append(events, t.event(a, notify.KindUpdate, now))
			case t.cfg.RepeatInterval > 0 && now.Sub(a.LastNotified) >= t.cfg.RepeatInterval:
				events = append(events, t.event(a, notify.KindRepeat, now))
			}
		}
	}
	for fp, a := range t.alerts {
		if _, seen := current[fp]; seen {
			continue
		}
		switch a.State {
		case StatePending:
			delete(t.alerts, fp)
		case StateFiring:
			if now.Sub(a.LastSeen) >= t.cfg.timing(a.Class).KeepFiringFor && !now.Before(a.HoldUntil) {
				a.State, a.ResolvedAt = StateResolved, now
				events = append(events, t.event(a, notify.KindResolve, now))
			}
		case StateResolved:
			if now.Sub(a.ResolvedAt) >= t.cfg.ResolvedRetention {
				delete(t.alerts, fp)
			}
		}
	}
	sort.Slice(events, func(i, j int) bool { return events[i].Fingerprint < events[j].Fingerprint })
	return events
}

// Retire resolves every firing alert of the replicas for which gone returns
// true (a target that was removed) with reason, and forgets pending ones.
func (t *Tracker) Retire(gone func(replica string) bool, reason string, now time.Time) []notify.Event {
	var events []notify.Event
	for fp, a := range t.alerts {
		if !gone(a.Replica) {
			continue
		}
		switch a.State {
		case StatePending:
			delete(t.alerts, fp)
		case StateFiring:
			a.State, a.ResolvedAt = StateResolved, now
			ev := t.event(a, notify.KindResolve, now)
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
		t.alerts[ev.Fingerprint] = &Alert{
			Fingerprint: ev.Fingerprint, Class: f.Class, Replica: ev.Replica, State: StateFiring, Severity: ev.Severity,
			ActiveAt: ev.StartsAt, FiredAt: ev.StartsAt, LastSeen: now, LastNotified: ev.At, HoldUntil: now.Add(t.cfg.RestoreGrace),
			Seq: ev.Seq, Finding: f,
		}
		n++
	}
	return n
}

// runbookClass picks the runbook: a fleet-wide incident links the fleet
// page, whose first step is finding the shared change.
func runbookClass(a *Alert) detect.Class {
	if strings.HasPrefix(a.Replica, "fleet/") {
		return "fleet"
	}
	return a.Class
}

func severityRank(s string) int {
	sev, _ := detect.ParseSeverity(s)
	return int(sev)
}

func (t *Tracker) event(a *Alert, kind notify.Kind, now time.Time) notify.Event {
	a.Seq++
	a.LastNotified = now
	f := a.Finding
	ev := notify.Event{
		Fingerprint: a.Fingerprint,
		Seq:         a.Seq,
		Kind:        kind,
		Status:      notify.StatusFiring,
		Class:       string(a.Class),
		Severity:    a.Severity,
		Replica:     a.Replica,
		Model:       f.Model,
		Layer:       string(f.Layer),
		Summary:     f.Summary,
		Diagnosis:   f.Diagnosis,
		Triage:      f.Triage,
		Emergency:   f.Emergency,
		RootCause:   f.RootCause,
		RunbookURL:  t.links.runbook(runbookClass(a)),
		AlertURL:    t.links.alert(a.Fingerprint),
		StartsAt:    a.FiredAt,
		At:          now,
	}
	for _, e := range f.Evidence {
		ev.Evidence = append(ev.Evidence, notify.Field{Name: e.Name, Value: e.Value, Baseline: e.Baseline, HasBase: e.HasBaseline, Unit: e.Unit, Threshold: e.Threshold})
	}
	for _, c := range a.ExplainedBy {
		ev.ExplainedBy = append(ev.ExplainedBy, string(c))
	}
	for _, c := range a.Explains {
		ev.Explains = append(ev.Explains, string(c))
	}
	for _, c := range f.Consequences {
		if !slices.Contains(a.Explains, c) {
			ev.Explains = append(ev.Explains, string(c))
		}
	}
	if kind == notify.KindResolve {
		ev.Status = notify.StatusResolved
		ev.EndsAt = now
	}
	return ev
}

type annotated struct {
	Finding     detect.Finding
	explainedBy []detect.Class
	explains    []detect.Class
}

// strongest keeps, per fingerprint, the most severe finding (a detector may
// report a replica twice, e.g. down and restarted).
func strongest(findings []detect.Finding) map[string]*annotated {
	out := make(map[string]*annotated, len(findings))
	for _, f := range findings {
		fp := Fingerprint(f.Replica, f.Class)
		if prev, ok := out[fp]; ok && prev.Finding.Severity >= f.Severity {
			continue
		}
		out[fp] = &annotated{Finding: f}
	}
	return out
}

// explain links findings on the same replica that are cause and effect
// (detect.Explains), so a preempt storm driven by a cache collapse says so.
func explain(current map[string]*annotated) {
	byReplica := map[string][]*annotated{}
	for _, a := range current {
		byReplica[a.Finding.Replica] = append(byReplica[a.Finding.Replica], a)
	}
	for _, group := range byReplica {
		for _, effect := range group {
			for _, cause := range group {
				if detect.Explains(cause.Finding, effect.Finding) {
					effect.explainedBy = append(effect.explainedBy, cause.Finding.Class)
					cause.explains = append(cause.explains, effect.Finding.Class)
				}
			}
		}
	}
	for _, a := range current {
		slices.Sort(a.explainedBy)
		slices.Sort(a.explains)
	}
}
