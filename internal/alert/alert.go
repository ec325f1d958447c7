// Package alert owns the incident lifecycle: it turns each round's
// correlated groups into incidents that live across rounds, the way
// Prometheus' rules/alerting.go turns rule results into alerts, without
// PromQL: a pure state machine driven by the evaluation time.
//
//	(group appears) -> pending --for--> firing --(gone for keep_firing_for)--> resolved
//
// It is the one place that decides what an incident is: which round's
// group continues which incident, when a consequence paged before its
// cause is renamed after it, when one incident absorbs another or joins
// a fleet incident, when it drains and when it ends. Every such decision
// comes out of Update as a typed Transition; the notifier, the incident
// journal, the workspace, metrics and backtests consume those transitions
// and never match groups to incidents themselves.
//
// A pending incident whose group disappears is dropped: it never paged. A
// firing incident pages when it fires, again (an update) when its cause or
// severity changes, repeats every repeat_interval, and pages its resolve.
// Resolved incidents are kept for resolved_retention so the API can show
// what just ended. The words of a page are not written here: an event
// carries facts, and pkg/notify composes them.
package alert

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// WorstSummary is a finding's summary at the round that scored worst for
// its class (severity first, then how far its first number is from its
// baseline).
type WorstSummary struct {
	Class   detect.Class `json:"class"`
	Summary string       `json:"summary"`
	Score   float64      `json:"score"`
}

// Timing of one class's incidents.
type Timing struct {
	// For is how long a finding must persist before the incident fires; it
	// filters one-scrape blips.
	For time.Duration `yaml:"for"`
	// KeepFiringFor is the hysteresis: a firing incident resolves only after
	// its finding has been absent this long, so a condition hovering at its
	// threshold does not flap.
	KeepFiringFor time.Duration `yaml:"keep_firing_for"`
}

// Config of the tracker.
type Config struct {
	Timing `yaml:",inline"`
	// RepeatInterval re-notifies a still-firing incident (0 disables).
	RepeatInterval time.Duration `yaml:"repeat_interval"`
	// ResolvedRetention keeps resolved incidents visible in the API.
	ResolvedRetention time.Duration `yaml:"resolved_retention"`
	// RestoreGrace is how long an incident restored after a restart stays
	// firing without being seen again: the windows start empty, and
	// detectors need this long to confirm the condition before it may
	// resolve.
	RestoreGrace time.Duration `yaml:"restore_grace"`
	// UpdateInterval is the least time between two updates of a firing
	// incident paged for its impact growing (a class joined, failures
	// rose); the first growth after the trigger, escalations, renames and a
	// consequence that feeds on itself joining page at once; an escalation
	// counts as a growth update, a rename does not. 0: growth pages nothing
	// but such a consequence.
	UpdateInterval time.Duration `yaml:"update_interval"`
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
		UpdateInterval:    5 * time.Minute,
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
	neg("update_interval", c.UpdateInterval)
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

// State of an incident.
type State string

// Incident states.
const (
	StatePending  State = "pending"
	StateFiring   State = "firing"
	StateResolved State = "resolved"
)

// Incident is one cause on one replica (or across a model's fleet) and
// the consequences it explains, over its whole life. Its identity, the
// fingerprint, is fixed when it opens, so a consequence paged before its
// cause is renamed in place when the cause appears, and consequences that
// outlive their cause stay in the incident until they clear. It is also
// the persisted alert state: its JSON names are stable across versions.
type Incident struct {
	Fingerprint string `json:"fingerprint"`
	// ID names this incident of the fingerprint (IncidentID): fixed when it
	// opens, so the journal and the pages' links follow one incident even
	// when its start moves back to an absorbed symptom.
	ID         string          `json:"incident,omitempty"`
	Class      detect.Class    `json:"class"` // the cause the incident is named after
	Replica    string          `json:"replica"`
	Model      string          `json:"model,omitempty"`
	Fleet      bool            `json:"fleet,omitempty"`
	State      State           `json:"state"`
	Severity   detect.Severity `json:"severity"`
	ActiveAt   time.Time       `json:"active_at"`
	FiredAt    time.Time       `json:"fired_at,omitzero"`
	ResolvedAt time.Time       `json:"resolved_at,omitzero"`
	LastSeen   time.Time       `json:"last_seen"`
	HoldUntil  time.Time       `json:"hold_until,omitzero"` // restored incidents do not resolve before this
	// LastNotified is the time of the last page of the incident,
	// UpdatedAt of the last update paged for its impact growing (growth or
	// escalation).
	LastNotified time.Time      `json:"last_notified,omitzero"`
	UpdatedAt    time.Time      `json:"updated_at,omitzero"`
	Seq          uint64         `json:"seq"`
	Finding      detect.Finding `json:"finding"`
	// Members are every class seen as part of the incident during its life.
	Members []detect.Class `json:"members,omitempty"`
	// Explains are the consequences the cause explains in the last round.
	Explains []detect.Class `json:"explains,omitempty"`
	// ExplainedBy is set while the incident is absorbed: the cause
	// explaining it.
	ExplainedBy []detect.Class `json:"explained_by,omitempty"`
	// AbsorbedBy is the fingerprint of the incident that explains this one
	// (its cause, or the fleet incident it joined), AbsorbedByID that
	// incident's ID. An absorbed incident pages nothing until it ends:
	// with that incident, or when its own condition clears.
	AbsorbedBy   string `json:"absorbed_by,omitempty"`
	AbsorbedByID string `json:"absorbed_by_incident,omitempty"`
	// Draining says the cause has cleared while consequences it explains
	// are still seen (a backlog draining): the incident stays open. Cleared
	// is then the cause's last finding; Finding is what remains, under the
	// cause's name.
	Draining bool            `json:"draining,omitempty"`
	Cleared  *detect.Finding `json:"cleared,omitempty"`
	// Failing is what failing users see this round (the summary of the
	// error_rate finding the incident holds), when requests fail and the
	// failures are not the incident's cause.
	Failing string `json:"failing,omitempty"`
	// Restored says the incident was reinstated after a restart and its
	// own class has not been seen since: until it is, nothing else
	// continues it, and it takes in no other incident.
	Restored bool `json:"restored,omitempty"`
	// Paged is the impact the last page told of, against which growth is
	// judged.
	Paged Paged `json:"paged,omitzero"`
	// QuietUntil holds a pending incident that is the aftermath of an
	// incident just resolved (After, its ID AfterID): it fires only if
	// still seen then.
	QuietUntil time.Time `json:"quiet_until,omitzero"`
	After      string    `json:"after,omitempty"`
	AfterID    string    `json:"after_incident,omitempty"`
	// Peak is every evidence the incident's findings carried, one entry a
	// name as last seen, the cause's own evidence first; Worst is each
	// one's worst value over the incident's life (its maximum, or its
	// minimum where lower is worse): the resolve shows the signals that
	// decided the incident at their worst beside the recovered values.
	// One round's evidence would drop what other rounds' members carried:
	// a preemption storm renamed from the prefix-cache collapse it
	// explains would resolve with the collapse's average KV usage as its
	// peak, under a headline of a pool 100% full.
	Peak  []detect.Evidence  `json:"peak,omitempty"`
	Worst map[string]float64 `json:"worst,omitempty"`
	// Felt is the worst users felt on the incident's replica while it
	// lasted, for a resolve to give beside the values now where no
	// evidence did.
	Felt Felt `json:"felt,omitzero"`
	// CauseAtWorst is the summary of the cause's own finding at its worst
	// round, which a resolve gives as what the incident was: the last
	// round before a cause clears is often its mildest.
	CauseAtWorst WorstSummary `json:"cause_at_worst,omitzero"`
	// Frozen are the baselines each member finding compared against when
	// it joined the incident (detect.Finding.Baselines), given back to its
	// detector as a detect.Reference while the incident is open, so that
	// a baseline cannot absorb the incident it measures.
	Frozen []Frozen `json:"frozen,omitempty"`
	// Labels are the replica's target labels last seen (namespace, team,
	// ...), kept so that the incident's events carry them even when the
	// replica is gone from the round, as when it resolves.
	Labels map[string]string `json:"labels,omitempty"`
	// SilencedBy are the IDs of the silences muting the incident in the
	// last round, set by the evaluation loop (the tracker itself never
	// mutes): a silenced incident is tracked and shown as usual, but
	// nothing is sent.
	SilencedBy []string `json:"silenced_by,omitempty"`
}

// Felt is the highest of each round's queue, TTFT p99 and abort rate on a
// replica (its snapshot over the triage range: the values a trigger's
// headline gives); zero is none seen.
type Felt struct {
	Queued  float64 `json:"queued,omitempty"`
	TTFTP99 float64 `json:"ttft_p99_seconds,omitempty"`
	Aborts  float64 `json:"aborts_per_second,omitempty"`
}

// add takes a round's snapshot of the replica into f.
func (f *Felt) add(s assess.Snapshot) {
	higher := func(to *float64, v *float64) {
		if v != nil && finite(*v) && *v > *to {
			*to = *v
		}
	}
	higher(&f.Queued, s.QueuedRequests)
	higher(&f.TTFTP99, s.TTFTP99)
	higher(&f.Aborts, s.AbortsPerSecond)
}

// impact is f as a page's impact, without the values never seen.
func (f Felt) impact() *notify.Impact {
	if f == (Felt{}) {
		return nil
	}
	seen := func(v float64) *float64 {
		if v <= 0 {
			return nil
		}
		return &v
	}
	return &notify.Impact{Queued: seen(f.Queued), TTFTP99: seen(f.TTFTP99), AbortsPerSecond: seen(f.Aborts)}
}

// Open reports whether the incident is pending or firing.
func (a *Incident) Open() bool { return a.State == StatePending || a.State == StateFiring }

// clone is a copy sharing nothing mutable with a.
func (a *Incident) clone() Incident {
	c := *a
	c.Members, c.Explains, c.ExplainedBy = slices.Clone(a.Members), slices.Clone(a.Explains), slices.Clone(a.ExplainedBy)
	c.Peak, c.Labels, c.SilencedBy = slices.Clone(a.Peak), maps.Clone(a.Labels), slices.Clone(a.SilencedBy)
	c.Frozen, c.Worst = slices.Clone(a.Frozen), maps.Clone(a.Worst)
	c.Paged.Members = slices.Clone(a.Paged.Members)
	if a.Cleared != nil {
		cleared := *a.Cleared
		c.Cleared = &cleared
	}
	return c
}

// Paged is the impact a page told of.
type Paged struct {
	Members         []detect.Class `json:"members,omitempty"`
	AbortsPerSecond float64        `json:"aborts_per_second,omitempty"`
}

// Frozen is one member finding's baseline as the incident began for it.
type Frozen struct {
	Replica string             `json:"replica"`
	Class   detect.Class       `json:"class"`
	At      time.Time          `json:"at"`
	Values  map[string]float64 `json:"values"`
}

// Fingerprint is the stable identity of a (replica, class) incident. It is
// the PagerDuty dedup_key and the Slack thread key, so it must not change
// across versions or restarts.
func Fingerprint(replica string, class detect.Class) string {
	h := sha256.Sum256([]byte(replica + "\x00" + string(class)))
	return hex.EncodeToString(h[:8])
}

// IncidentID names one incident: its fingerprint (stable per replica and
// class, so reused by later incidents of the same kind) and the second it
// opened. It is the path segment of /incidents/<id>.
func IncidentID(fingerprint string, openedAt time.Time) string {
	return fingerprint + "-" + strconv.FormatInt(openedAt.Unix(), 10)
}
