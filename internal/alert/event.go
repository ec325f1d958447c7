package alert

import (
	"maps"
	"net/url"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

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

// incident links incident id's page; an incident saved without an ID (by
// an older version) links the alert API by its fingerprint.
func (l Links) incident(id, fingerprint string) string {
	if id == "" {
		return l.ExternalURL + "/api/v1/watchdog/alerts?fingerprint=" + fingerprint
	}
	return l.ExternalURL + IncidentPath(id)
}

// IncidentPath is the workspace page of incident id, which every
// notification links; PostmortemPath is its draft postmortem. The API, the
// pages and the notifications all build their links here.
func IncidentPath(id string) string { return "/incidents/" + url.PathEscape(id) }

// PostmortemPath is the draft postmortem of incident id.
func PostmortemPath(id string) string { return IncidentPath(id) + "/postmortem" }

// runbookClass picks the runbook: a fleet-wide incident links the fleet
// page, whose first step is finding the shared change.
func runbookClass(a Incident) detect.Class {
	if a.Fleet {
		return "fleet"
	}
	return a.Class
}

// Event is the notification a paging transition calls for: the
// incident's facts as of round, with the links a page carries. Its words
// (headline, notes on the diagnosis) are composed by notify.Compose from
// those facts.
func (l Links) Event(tr Transition, round assess.Round) notify.Event {
	a := tr.Incident
	f := a.Finding
	if tr.Page == notify.KindResolve && a.Cleared != nil {
		// A resolve describes the incident while it fired: its cause.
		f = *a.Cleared
	}
	ev := notify.Event{
		Fingerprint: a.Fingerprint,
		Incident:    a.ID,
		Seq:         a.Seq,
		Kind:        tr.Page,
		Status:      notify.StatusFiring,
		Class:       string(a.Class),
		Severity:    a.Severity,
		Replica:     a.Replica,
		Model:       f.Model,
		Fleet:       a.Fleet,
		Labels:      maps.Clone(a.Labels),
		Layer:       string(f.Layer),
		Summary:     f.Summary,
		Diagnosis:   f.Diagnosis,
		Triage:      f.Triage,
		Emergency:   f.Emergency,
		RootCause:   f.RootCause,
		Draining:    a.Draining,
		Title:       title(a.Class),
		Failing:     a.Failing,
		Reason:      tr.Reason,
		RunbookURL:  l.runbook(runbookClass(a)),
		AlertURL:    l.incident(a.ID, a.Fingerprint),
		StartsAt:    a.FiredAt,
		At:          tr.At,
	}
	// Values of a replica that cannot be scraped are from its last good
	// scrape: stale, so not shown as what users feel now.
	snap, haveSnap := round.Replica(a.Replica)
	// A resolve says how the replica is now: its recent snapshot, as the
	// minute of the snapshot still holds the incident's tail.
	now := snap.Snapshot
	if tr.Page == notify.KindResolve {
		now = snap.Recent
	}
	if haveSnap && snap.Scrape.Up {
		ev.Impact = &notify.Impact{Queued: now.QueuedRequests, TTFTP99: now.TTFTP99, AbortsPerSecond: now.AbortsPerSecond}
		if span, ok := now.NoFirstTokenFor(); ok && tr.Page != notify.KindResolve {
			secs := span.Round(time.Second).Seconds()
			ev.Impact.NoFirstTokenSeconds = &secs
		}
	}
	if tr.Page == notify.KindResolve && a.Peak != nil {
		ev.Evidence = peaks(a)
	} else {
		for _, e := range f.Evidence {
			ev.Evidence = append(ev.Evidence, field(e))
		}
	}
	for _, c := range a.ExplainedBy {
		ev.ExplainedBy = append(ev.ExplainedBy, string(c))
	}
	for _, c := range a.Explains {
		ev.Explains = append(ev.Explains, string(c))
		if detect.SelfSustaining(detect.Finding{Class: c, Replica: a.Replica}) {
			ev.Sustaining = append(ev.Sustaining, detect.Title(c))
		}
	}
	if a.After != "" {
		ev.After = l.incident(a.AfterID, a.After)
	}
	if a.AbsorbedBy != "" {
		ev.AbsorbedInto = l.incident(a.AbsorbedByID, a.AbsorbedBy)
	}
	if tr.Page == notify.KindResolve {
		// What it was, in the words of its summary at its worst: the
		// diagnosis was written for a replica in trouble, in the present
		// tense, and the last summary is often the mildest. A detector
		// that said how the condition ended (a replica serving again after
		// an outage, and whether it restarted) is heard after it, as such.
		ev.Diagnosis = f.Summary
		if w := a.CauseAtWorst; w.Class == a.Class && w.Summary != "" {
			ev.Diagnosis = w.Summary
		}
		if f.Resolving {
			ended := "How it ended: " + f.Summary + "."
			if ev.Diagnosis != f.Summary {
				ended = ev.Diagnosis + ". " + ended
			}
			ev.Diagnosis = ended
		}
		ev.Status = notify.StatusResolved
		ev.EndsAt = tr.At
		ev.PostmortemURL = l.ExternalURL + PostmortemPath(a.ID)
		if haveSnap {
			ev.Recovered = recovered(now)
			ev.RecoveredSeconds = now.ObservedSeconds
		}
		ev.Felt = a.Felt.impact()
	}
	return notify.Compose(ev)
}

// Events are the notifications of the paging transitions among ts.
func (l Links) Events(ts []Transition, round assess.Round) []notify.Event {
	var out []notify.Event
	for _, tr := range ts {
		if tr.Page != "" {
			out = append(out, l.Event(tr, round))
		}
	}
	return out
}

func field(e detect.Evidence) notify.Field {
	return notify.Field{Name: e.Name, Value: e.Value, Baseline: e.Baseline, HasBase: e.HasBaseline, Unit: e.Unit, Threshold: e.Threshold,
		LowerIsWorse: e.LowerIsWorse(), Replica: e.Replica}
}

// peaks are the signals that decided a resolved incident, each at its
// worst over the incident's life: the evidence with a rule or a baseline
// (a number given for context, such as a page size, a request rate or
// the sample a rule rests on, is no peak).
func peaks(a Incident) []notify.Field {
	var out []notify.Field
	for _, e := range a.Peak {
		if e.SampleSize || (e.Threshold == "" && !e.HasBaseline) {
			continue
		}
		if w, ok := a.Worst[e.Name]; ok {
			e.Value = w
		}
		out = append(out, field(e))
	}
	return out
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

// title is a class's name on a page: the detector's, or for an SLO burn
// (made from a model's events, no detector's) "SLO burn".
func title(c detect.Class) string {
	if c == correlate.SLOBurn {
		return "SLO burn"
	}
	return detect.Title(c)
}
