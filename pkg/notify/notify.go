// Package notify delivers alert events to people. An integration (log,
// Slack, PagerDuty) implements Notifier: it makes exactly one attempt and
// classifies its failure. Retrying, ordering and persistence are shared code
// in this package, with one queue and worker per integration so that one
// integration's outage never delays another.
package notify

import (
	"context"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Status of an alert event.
type Status string

// Event statuses.
const (
	StatusFiring   Status = "firing"
	StatusResolved Status = "resolved"
)

// Kind says why an event was emitted.
type Kind string

// Event kinds.
const (
	KindTrigger Kind = "trigger" // the alert started firing
	KindUpdate  Kind = "update"  // still firing; severity, evidence or explanation changed
	KindRepeat  Kind = "repeat"  // still firing; repeat interval elapsed
	KindResolve Kind = "resolve" // the alert resolved
)

// Field is one evidence number as shown to a human.
type Field struct {
	Name      string  `json:"name"`
	Value     float64 `json:"value"`
	Baseline  float64 `json:"baseline,omitempty"`
	HasBase   bool    `json:"has_baseline,omitempty"`
	Unit      string  `json:"unit,omitempty"`
	Threshold string  `json:"threshold,omitempty"`
	// LowerIsWorse says a lower value is the worse one (a hit rate): a
	// resolve's peak of it is its minimum.
	LowerIsWorse bool `json:"lower_is_worse,omitempty"`
	// Replica is the replica the field measures when it is not the
	// event's own (a gateway in front of it); Name starts with it too.
	Replica string `json:"replica,omitempty"`
}

// Event is one notification about one alert. It is plain data: integrations
// render it, the queue persists it. Strings that come from replicas (model
// names, label values, error texts) are untrusted and must be escaped by
// each integration for its own markup.
type Event struct {
	Fingerprint string `json:"fingerprint"` // stable per (replica, class); PagerDuty dedup_key, Slack thread key
	// Incident names this incident of the fingerprint (a fingerprint is
	// reused by later incidents of the same replica and class); its
	// journal page is /incidents/<Incident>.
	Incident string          `json:"incident,omitempty"`
	Seq      uint64          `json:"seq"` // increases per fingerprint; orders events of one incident
	Kind     Kind            `json:"kind"`
	Status   Status          `json:"status"`
	Class    string          `json:"class"`
	Severity detect.Severity `json:"severity"` // critical, warning, info
	Replica  string          `json:"replica"`
	Model    string          `json:"model,omitempty"`
	Fleet    bool            `json:"fleet,omitempty"` // the incident spans most replicas of Model; Replica is "fleet/<model>"
	// Labels are the replica's target labels from configuration or
	// discovery (namespace, team, role, ...): routes match on them and
	// Alertmanager receives them. Nil for fleet incidents.
	Labels map[string]string `json:"labels,omitempty"`
	Layer  string            `json:"layer,omitempty"`
	// Headline is the page's title: where, what is happening, and what
	// users feel (queue, time to first token) when known. Compose writes
	// it from the facts below.
	Headline  string `json:"headline,omitempty"`
	Summary   string `json:"summary"`
	Diagnosis string `json:"diagnosis"`
	Triage    string `json:"triage,omitempty"` // layer triage: verdict, numbers and the next step
	// Evidence are the numbers the verdict rests on; on a resolve, their
	// values at the incident's worst round (the peak).
	Evidence []Field `json:"evidence,omitempty"`
	// Recovered are the replica's values as the incident resolves, over
	// its last RecoveredSeconds, shown beside the peak.
	Recovered []Field `json:"recovered,omitempty"`
	// Felt is, on a resolve, the worst users felt on the replica while the
	// incident lasted (the highest of each round's queue, TTFT p99 and
	// abort rate): the peak of a recovered value the evidence gives none of.
	Felt             *Impact  `json:"felt,omitempty"`
	RecoveredSeconds float64  `json:"recovered_seconds,omitempty"`
	Emergency        []string `json:"emergency_steps,omitempty"`
	RootCause        []string `json:"root_cause_steps,omitempty"`
	ExplainedBy      []string `json:"explained_by,omitempty"` // classes on the same replica that cause this one
	Explains         []string `json:"explains,omitempty"`     // classes this one causes
	RunbookURL       string   `json:"runbook_url,omitempty"`
	AlertURL         string   `json:"alert_url,omitempty"` // the incident's page in the watchdog
	// Impact is what users feel on the replica as the event is made (its
	// queue, time to first token and aborts); nil when the replica could
	// not be read, as its last values would be stale.
	Impact *Impact `json:"impact,omitempty"`
	// Title is the incident's name on a page ("Preemption storm").
	Title string `json:"title,omitempty"`
	// Sustaining are the titles of the consequences that feed on
	// themselves (a retry loop): the headline names them after the cause.
	Sustaining []string `json:"sustaining,omitempty"`
	// Failing is what failing users see, when requests fail as part of
	// the incident and the failures are not its cause: the headline leads
	// with it.
	Failing string `json:"failing,omitempty"`
	// Draining says the cause has cleared while what it caused is still
	// seen: the incident stays open.
	Draining bool `json:"draining,omitempty"`
	// After links the incident that ended on this replica just before this
	// one began: this one outlasted that incident's aftermath.
	After string `json:"after,omitempty"`
	// AbsorbedInto links the incident that took this one in (its cause,
	// or the fleet incident it joined).
	AbsorbedInto string `json:"absorbed_into,omitempty"`
	// Reason says why the incident ended other than by its signals
	// ("target removed").
	Reason string `json:"reason,omitempty"`
	// PostmortemURL is set on a resolve: the incident's draft postmortem,
	// posted into the Slack thread.
	PostmortemURL string    `json:"postmortem_url,omitempty"`
	Integration   string    `json:"integration,omitempty"` // a delivery-failure notice: the integration that failed
	StartsAt      time.Time `json:"starts_at"`
	EndsAt        time.Time `json:"ends_at,omitempty"`
	At            time.Time `json:"at"` // when the event was produced
}

// Notifier sends one event to one integration. It makes exactly one attempt
// and classifies a failure with Permanent or RetryAfter; any other error is
// retryable with backoff.
type Notifier interface {
	Notify(ctx context.Context, ev Event) error
}

// Refresher is a Notifier whose provider forgets a firing alert unless it is
// sent again (Alertmanager ends an alert at its endsAt). While the
// integration has an incident open and nothing of it waiting, its queue
// re-sends the last delivered event as a repeat every RefreshInterval.
type Refresher interface {
	Notifier
	RefreshInterval() time.Duration
}
