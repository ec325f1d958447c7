// Package incident keeps the journal of incidents: what the pager decided
// about each one over its whole life (timeline, evidence per round,
// deliveries, silences), kept after it resolves for a retention so that
// the workspace pages and postmortem drafts render it. It only records
// what the evaluation loop and the notifier decided; it decides nothing.
package incident

import (
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Summary is what identifies an incident and says where it stands: the
// incident list serves it alone, a Record holds it and the history.
type Summary struct {
	ID          string       `json:"id"`
	Fingerprint string       `json:"fingerprint"`
	Class       detect.Class `json:"class"` // the cause it is named after
	Replica     string       `json:"replica"`
	Model       string       `json:"model,omitempty"`
	Fleet       bool         `json:"fleet,omitempty"`
	// Replicas are every replica the incident covered during its life
	// (one, or a fleet incident's members).
	Replicas []string        `json:"replicas"`
	State    alert.State     `json:"state"`
	Severity detect.Severity `json:"severity"`
	OpenedAt time.Time       `json:"opened_at"`
	FiredAt  time.Time       `json:"fired_at,omitzero"`
	// ResolvedAt is zero while the incident is open.
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	// Headline is the last page's.
	Headline string `json:"headline"`
	// Chain is the causal chain: the cause first, then every consequence
	// it explained during the incident.
	Chain []detect.Class `json:"chain"`
	// SilencedBy are the silences muting it in the last round.
	SilencedBy []string `json:"silenced_by,omitempty"`
	// Postmortem is the draft's path, set in the incident list once the
	// incident resolved.
	Postmortem string `json:"postmortem,omitempty"`
}

// Record is one incident as the journal holds it.
type Record struct {
	Summary

	// The last page's content besides its headline.
	Diagnosis string   `json:"diagnosis"`
	Triage    string   `json:"triage,omitempty"`
	Emergency []string `json:"emergency_steps,omitempty"`
	RootCause []string `json:"root_cause_steps,omitempty"`
	Runbook   string   `json:"runbook"`

	// Signals are the evidence of the incident's findings, one per
	// evidence name, over the incident's span: in the order of the last
	// round its cause led, then the others as first seen.
	Signals []Signal `json:"signals"`
	// Impact is what users felt over the incident's span, from its
	// replicas' snapshots (queued, running and aborted requests summed;
	// TTFT and inter-token latency p99 at the worst replica): the
	// postmortem's impact numbers.
	Impact []Signal `json:"impact,omitempty"`
	// Budgets are the error budgets of the model's service level
	// objectives the incident's rounds spent (internal/slo).
	Budgets []BudgetSpent `json:"slo_budgets,omitempty"`
	// Timeline is every event in time order.
	Timeline []Event `json:"timeline"`
	// Deliveries are every notification attempt, in time order.
	Deliveries []Delivery `json:"deliveries"`
	// Unseen lists what the watchdog could not see while the incident was
	// open (families missing, scrape failures), one line each.
	Unseen []string `json:"unseen,omitempty"`
}

// Open reports whether the incident has not resolved.
func (r Record) Open() bool { return r.ResolvedAt.IsZero() }

// Signal is one evidence series: its value each round, with its baseline
// and the numeric threshold the detector compared it with, when it has
// one.
type Signal struct {
	Name      string  `json:"name"`
	Unit      string  `json:"unit,omitempty"`
	Threshold string  `json:"threshold,omitempty"` // the rule, as the page words it
	Limit     float64 `json:"limit,omitempty"`     // the rule's number, the last round it had one
	HasLimit  bool    `json:"has_limit,omitempty"`
	// LowerIsWorse and SampleSize are the evidence's
	// (detect.Evidence.LowerIsWorse, detect.Evidence.SampleSize): the
	// worst point is the lowest, or there is no worst of a count the
	// rule rests on.
	LowerIsWorse bool    `json:"lower_is_worse,omitempty"`
	SampleSize   bool    `json:"sample_size,omitempty"`
	Points       []Point `json:"points"`
}

// Constant reports whether the signal's value never moved over the
// incident (every point holds the same value, or it has none): a capacity
// or a page size, a count that stayed at zero. A constant is a fact about
// the incident, never evidence of a change.
func (s Signal) Constant() bool {
	for _, p := range s.Points {
		if p.Value != s.Points[0].Value {
			return false
		}
	}
	return true
}

// Point is one round's value of a signal.
type Point struct {
	At          time.Time `json:"at"`
	Value       float64   `json:"value"`
	Baseline    float64   `json:"baseline,omitempty"`
	HasBaseline bool      `json:"has_baseline,omitempty"`
	// Limit is the number the detector compared the value with this
	// round, when HasLimit (it moves with the baseline for a
	// factor-times-baseline rule).
	Limit    float64 `json:"limit,omitempty"`
	HasLimit bool    `json:"has_limit,omitempty"`
}

// EventKind says what happened.
type EventKind string

// Timeline event kinds.
const (
	EventFirstFinding EventKind = "first_finding" // the condition was first seen (pending)
	EventFired        EventKind = "fired"
	EventJoined       EventKind = "consequence_joined" // a consequence was folded into it
	EventEscalated    EventKind = "escalated"          // severity went up
	EventNotified     EventKind = "notified"           // a notification was delivered
	EventDeliveryFail EventKind = "delivery_failed"
	EventSilenced     EventKind = "silenced"
	EventUnsilenced   EventKind = "unsilenced"
	EventResolved     EventKind = "resolved"
)

// Event is one line of the timeline.
type Event struct {
	At   time.Time `json:"at"`
	Kind EventKind `json:"kind"`
	Text string    `json:"text"`
	// Integration is set for notification events.
	Integration string `json:"integration,omitempty"`
}

// Delivery is one notification attempt.
type Delivery struct {
	At          time.Time `json:"at"`
	Integration string    `json:"integration"`
	Kind        string    `json:"kind"` // trigger, update, resolve
	Attempt     int       `json:"attempt"`
	OK          bool      `json:"ok"`
	// Error is the failure's classification and status, never secrets.
	Error string `json:"error,omitempty"`
}

// Reader is what the workspace pages read: the journal's records, newest
// first, and one by ID.
type Reader interface {
	Incidents() []Record
	Incident(id string) (Record, bool)
}

// BudgetSpent is what an incident cost one service level objective of
// its model: the bad events of its rounds against the budget of the
// period (the bad events the objective allows for the period's events,
// over what the SLO memory held of the period).
type BudgetSpent struct {
	Objective string        `json:"objective"`
	Title     string        `json:"title"`
	Bad       float64       `json:"bad_events"`
	Total     float64       `json:"events"`
	Allowed   float64       `json:"budget_events"`
	Period    time.Duration `json:"period"`
	Held      time.Duration `json:"held"`
}

// Consumed is the share of the period's budget the incident spent; ok is
// false without a budget to compare with.
func (b BudgetSpent) Consumed() (float64, bool) {
	if !(b.Allowed > 0) {
		return 0, false
	}
	return b.Bad / b.Allowed, true
}
