package webhook

import (
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// SchemaVersion is Payload.Version. It changes only when a field is
// removed or changes meaning; fields may be added within a version.
const SchemaVersion = "1"

// Payload is the JSON body of every request (docs/webhook.md; the JSON
// schema is testdata/payload.schema.json). Optional fields are left out
// when empty.
type Payload struct {
	Version string `json:"version"`
	// Kind: trigger (the incident started paging), update (still firing;
	// severity, cause, evidence or impact changed), repeat (still firing,
	// the repeat interval elapsed), resolve.
	Kind   string `json:"kind"`
	Status string `json:"status"` // firing, resolved
	// Fingerprint is stable per replica and incident class, and reused by
	// later incidents of the same kind; IncidentID names this incident.
	Fingerprint string `json:"fingerprint"`
	IncidentID  string `json:"incident_id,omitempty"`
	// Seq orders the events of one fingerprint.
	Seq   uint64 `json:"seq"`
	Class string `json:"class"`
	// Title names the incident's kind ("Preemption storm").
	Title     string `json:"title,omitempty"`
	Severity  string `json:"severity"` // critical, warning, info
	Replica   string `json:"replica"`
	Model     string `json:"model,omitempty"`
	Fleet     bool   `json:"fleet,omitempty"`
	Layer     string `json:"layer,omitempty"`
	Headline  string `json:"headline"`
	Summary   string `json:"summary"`
	Diagnosis string `json:"diagnosis,omitempty"`
	Triage    string `json:"triage,omitempty"`
	// Labels are the labels routes match on: the replica's target labels
	// (as Prometheus label names), class, severity, replica, model, fleet.
	Labels map[string]string `json:"labels"`
	// Impact is what users feel on the replica as the event is made;
	// absent when the replica could not be read.
	Impact         *notify.Impact `json:"impact,omitempty"`
	Evidence       []Evidence     `json:"evidence,omitempty"`
	EmergencySteps []string       `json:"emergency_steps,omitempty"`
	RootCauseSteps []string       `json:"root_cause_steps,omitempty"`
	ExplainedBy    []string       `json:"explained_by,omitempty"`
	Explains       []string       `json:"explains,omitempty"`
	Links          Links          `json:"links"`
	FailedReceiver string         `json:"failed_receiver,omitempty"`
	StartsAt       time.Time      `json:"starts_at"`
	EndsAt         *time.Time     `json:"ends_at,omitempty"`
	At             time.Time      `json:"at"`
}

// Evidence is one number the diagnosis rests on: Value in Unit ("ratio"
// is a fraction 0–1) and Text, the line a page shows ("KV cache usage:
// 97% (baseline 71%; > 95%)"). On a resolve the values are the
// incident's worst.
type Evidence struct {
	Name      string   `json:"name"`
	Value     float64  `json:"value"`
	Baseline  *float64 `json:"baseline,omitempty"`
	Unit      string   `json:"unit,omitempty"`
	Threshold string   `json:"threshold,omitempty"`
	Text      string   `json:"text"`
}

// Links are absolute URLs when the watchdog knows its external URL.
type Links struct {
	Incident   string `json:"incident,omitempty"`
	Runbook    string `json:"runbook,omitempty"`
	Postmortem string `json:"postmortem,omitempty"`
}

// NewPayload is the document sent for ev.
func NewPayload(ev notify.Event) Payload {
	p := Payload{
		Version:        SchemaVersion,
		Kind:           string(ev.Kind),
		Status:         string(ev.Status),
		Fingerprint:    ev.Fingerprint,
		IncidentID:     ev.Incident,
		Seq:            ev.Seq,
		Class:          ev.Class,
		Title:          ev.Title,
		Severity:       ev.Severity.String(),
		Replica:        ev.Replica,
		Model:          ev.Model,
		Fleet:          ev.Fleet,
		Layer:          ev.Layer,
		Headline:       notify.Headline(ev),
		Summary:        ev.Summary,
		Diagnosis:      ev.Diagnosis,
		Triage:         notify.Triage(ev),
		Labels:         notify.EventLabels(ev),
		EmergencySteps: ev.Emergency,
		RootCauseSteps: ev.RootCause,
		ExplainedBy:    ev.ExplainedBy,
		Explains:       ev.Explains,
		Links:          Links{Incident: ev.AlertURL, Runbook: ev.RunbookURL, Postmortem: ev.PostmortemURL},
		FailedReceiver: ev.Integration,
		StartsAt:       ev.StartsAt,
		At:             ev.At,
	}
	if notify.Resolved(ev) {
		p.Status = string(notify.StatusResolved)
		if !ev.EndsAt.IsZero() {
			end := ev.EndsAt
			p.EndsAt = &end
		}
	}
	if ev.Impact != nil {
		finite := func(v *float64) *float64 {
			if v == nil || !notify.Finite(*v) {
				return nil
			}
			return v
		}
		im := notify.Impact{Queued: finite(ev.Impact.Queued), TTFTP99: finite(ev.Impact.TTFTP99), AbortsPerSecond: finite(ev.Impact.AbortsPerSecond)}
		if im != (notify.Impact{}) {
			p.Impact = &im
		}
	}
	for _, f := range notify.Shown(ev.Evidence) {
		e := Evidence{Name: f.Name, Value: f.Value, Unit: f.Unit, Threshold: notify.Rule(f), Text: notify.FormatField(f)}
		if f.HasBase && notify.Finite(f.Baseline) {
			b := f.Baseline
			e.Baseline = &b
		}
		p.Evidence = append(p.Evidence, e)
	}
	return p
}
