package eval

import (
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Silences says which alerts are muted (internal/silence).
type Silences interface {
	// Mutes returns the IDs of the silences active at now that match
	// labels; none: the alert is not muted.
	Mutes(labels map[string]string, now time.Time) []string
	// Load reads the stored silences again: at an HA takeover the previous
	// leader's are the current ones.
	Load(now time.Time) error
}

// HeldDocument is the state document of the pages held back by silences,
// so that a restart or a new leader still sends them when the silence
// ends, and still drops the resolve of an incident nobody was paged for.
const HeldDocument = "silenced_pages"

// loader reads a state document; the state stores (internal/state,
// internal/kubestore) implement it beside Save.
type loader interface {
	Load(name string, v any, now time.Time) error
}

// muting is the loop's silence bookkeeping; the loop's lock guards it.
type muting struct {
	// silencedBy is this round's one decision per alert: the silences
	// muting it. Events, the published alerts and the held pages all read
	// it.
	silencedBy map[string][]string
	// held maps the fingerprint of a firing alert whose events were muted
	// to what is owed when its silence ends: a trigger when nothing of the
	// incident was delivered, an update when it had been paged before.
	held       map[string]notify.Kind
	heldLoaded bool
	heldSaved  bool // held is what the store holds

	silenced *prometheus.CounterVec
}

// AlertLabels are the labels silences match an alert on: its target labels
// (namespace, team, ...) and replica, model, class (the incident's cause),
// alertname (the class again, the label amtool and Alertmanager users
// silence by), severity and incident (its ID), which win over target
// labels of those names. The incident ID is the one label that stays fixed while the
// incident escalates or is renamed after a newly identified cause, and
// that the next incident of the same replica and class does not share:
// silencing "this incident" from its page matches on it.
func AlertLabels(a alert.Incident) map[string]string {
	out := maps.Clone(a.Labels)
	if out == nil {
		out = map[string]string{}
	}
	out["incident"] = a.ID
	out["replica"] = a.Replica
	out["model"] = a.Model
	out["class"] = string(a.Class)
	out["alertname"] = string(a.Class)
	out["severity"] = a.Severity.String()
	return out
}

// decideSilences computes, once per round, which alerts are muted.
func (l *Loop) decideSilences(now time.Time) {
	if l.opts.Silences == nil {
		return
	}
	l.loadHeld(now)
	decided := map[string][]string{}
	for _, a := range l.opts.Tracker.Incidents() {
		if ids := l.opts.Silences.Mutes(AlertLabels(a), now); len(ids) > 0 {
			decided[a.Fingerprint] = ids
		}
	}
	l.mute.silencedBy = decided
}

// mutePages returns the paging transitions among changes whose pages go
// out, holding back those of muted incidents. A resolve goes out exactly
// when something of its incident was delivered, silenced or not, so no
// page stays open at PagerDuty or Slack and no resolve arrives for an
// incident nobody heard of. A page of an incident whose trigger was held,
// arriving once the silence has ended, goes out as that trigger.
func (l *Loop) mutePages(changes []alert.Transition) []alert.Transition {
	var out []alert.Transition
	for _, tr := range changes {
		if tr.Page == "" {
			continue
		}
		if l.opts.Silences == nil {
			out = append(out, tr)
			continue
		}
		fp := tr.Incident.Fingerprint
		owed, held := l.mute.held[fp]
		if tr.Page == notify.KindResolve {
			if held {
				l.setHeld(fp, "")
			}
			if owed == notify.KindTrigger {
				l.mute.silenced.WithLabelValues(string(tr.Page)).Inc()
				continue
			}
			out = append(out, tr)
			continue
		}
		if len(l.mute.silencedBy[fp]) > 0 {
			l.mute.silenced.WithLabelValues(string(tr.Page)).Inc()
			switch {
			case tr.Page == notify.KindTrigger:
				l.setHeld(fp, notify.KindTrigger)
			case !held:
				l.setHeld(fp, notify.KindUpdate)
			}
			continue
		}
		if held {
			l.setHeld(fp, "")
			if owed == notify.KindTrigger {
				tr.Page = notify.KindTrigger
			}
		}
		out = append(out, tr)
	}
	return out
}

// releaseHeld pages what is owed for the firing incidents whose silences
// have all ended, with their state as of round. An incident that another
// absorbed stays held: it pages nothing until it ends.
func (l *Loop) releaseHeld(round assess.Round) []alert.Transition {
	if l.opts.Silences == nil || len(l.mute.held) == 0 {
		return nil
	}
	open := map[string]alert.Incident{}
	for _, a := range l.opts.Tracker.Incidents() {
		open[a.Fingerprint] = a
	}
	var out []alert.Transition
	for _, fp := range slices.Sorted(maps.Keys(l.mute.held)) {
		a, ok := open[fp]
		if !ok || a.State == alert.StateResolved {
			l.setHeld(fp, "") // ended while held; its resolve was handled
			continue
		}
		if len(l.mute.silencedBy[fp]) > 0 || a.AbsorbedBy != "" {
			continue
		}
		if tr, ok := l.opts.Tracker.Renotify(fp, l.mute.held[fp], round); ok {
			out = append(out, tr)
		}
		l.setHeld(fp, "")
	}
	return out
}

// setHeld records kind as owed for fp ("" forgets it).
func (l *Loop) setHeld(fp string, kind notify.Kind) {
	if l.mute.held[fp] == kind {
		return
	}
	if kind == "" {
		delete(l.mute.held, fp)
	} else {
		l.mute.held[fp] = kind
	}
	l.mute.heldSaved = false
}

// loadHeld reads the held pages once, before the first round uses them.
func (l *Loop) loadHeld(now time.Time) {
	if l.mute.heldLoaded {
		return
	}
	l.mute.heldLoaded = true
	l.readHeld(now)
}

func (l *Loop) readHeld(now time.Time) {
	ld, ok := l.opts.Persister.(loader)
	if !ok {
		return
	}
	stored := map[string]notify.Kind{}
	if err := ld.Load(HeldDocument, &stored, now); err != nil {
		l.opts.Logger.Error("held pages unreadable; a silence ending may not page, a resolve may go out for an incident never paged", zap.Error(err))
		return
	}
	if stored == nil { // a document holding null
		stored = map[string]notify.Kind{}
	}
	l.mute.held, l.mute.heldSaved = stored, true
}

// saveHeld persists the held pages when they changed.
func (l *Loop) saveHeld() {
	if l.opts.Persister == nil || l.opts.Silences == nil || l.mute.heldSaved {
		return
	}
	if err := l.opts.Persister.Save(HeldDocument, l.mute.held); err != nil {
		l.metrics.persistFail.Inc()
		l.opts.Logger.Error("saving held pages failed; a restart may forget a page owed when a silence ends", zap.Error(err))
		return
	}
	l.mute.heldSaved = true
}

// takeoverSilences reads the previous leader's silences and held pages.
func (l *Loop) takeoverSilences(now time.Time) {
	if l.opts.Silences == nil {
		return
	}
	if err := l.opts.Silences.Load(now); err != nil {
		l.opts.Logger.Error("silences unreadable at takeover; keeping this copy's", zap.Error(err))
	}
	l.mute.heldLoaded = true
	l.readHeld(now)
	l.decideSilences(now)
}
