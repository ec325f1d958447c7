package incident

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Document is the state document holding the journal.
const Document = "incidents"

// Store keeps the journal across restarts (the state directory).
type Store interface {
	Save(name string, v any) error
	Load(name string, v any, now time.Time) error
}

// Bounds of one record's lists besides its signals: the first half and
// the newest entries are kept, so the start and the end of a long
// incident both stay readable.
const (
	maxTimeline   = 200
	maxDeliveries = 200
	maxUnseen     = 20
	// saveEvery spaces the saves of a journal whose open incidents only
	// gained points; state changes are saved at once.
	saveEvery = time.Minute
)

// Options of a Journal.
type Options struct {
	// Retention keeps a resolved incident this long after it resolved.
	Retention time.Duration
	// MaxIncidents bounds the records; beyond it the oldest resolved one
	// (or, when all are open, the oldest) is dropped.
	MaxIncidents int
	// MaxPoints bounds each signal's points; a full signal is thinned to
	// every other point, keeping its onset, peak, fire and resolve.
	MaxPoints int
	Store     Store // nil: kept in memory only
	Logger    *zap.Logger
}

// Journal records every incident the tracker opens: it is fed each
// evaluation round and each delivery attempt, and read by the API, the
// workspace pages and the postmortem drafts. It is safe for concurrent
// use.
type Journal struct {
	opts    Options
	metrics journalMetrics

	mu      sync.RWMutex
	records map[string]*Record
	// prev is the previous round: an incident's impact starts with its
	// replicas' numbers just before it opened.
	prev     assess.Round
	changed  bool // a state change not yet saved
	grown    bool // points added since the last save
	lastSave time.Time
}

type journalMetrics struct {
	records     *prometheus.GaugeVec
	saveFailure prometheus.Counter
	dropped     *prometheus.CounterVec
}

// New builds a journal and loads the saved one from opts.Store.
func New(opts Options, reg prometheus.Registerer, now time.Time) *Journal {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	f := promauto.With(reg)
	j := &Journal{opts: opts, records: map[string]*Record{}, lastSave: now,
		metrics: journalMetrics{
			records: f.NewGaugeVec(prometheus.GaugeOpts{Name: "watchdog_incident_journal_records",
				Help: "Incidents held by the journal, open or resolved."}, []string{"state"}),
			saveFailure: f.NewCounter(prometheus.CounterOpts{Name: "watchdog_incident_journal_save_failures_total",
				Help: "Failed saves of the incident journal document."}),
			dropped: f.NewCounterVec(prometheus.CounterOpts{Name: "watchdog_incident_journal_dropped_total",
				Help: "Incidents dropped from the journal, by why: retention or max_incidents."}, []string{"reason"}),
		}}
	for _, r := range []string{"retention", "max_incidents"} {
		j.metrics.dropped.WithLabelValues(r)
	}
	if opts.Store != nil {
		var saved []Record
		if err := opts.Store.Load(Document, &saved, now); err != nil {
			opts.Logger.Error("incident journal unreadable; starting without it", zap.Error(err))
		}
		for _, r := range saved {
			if r.ID != "" {
				j.records[r.ID] = &r
			}
		}
		j.prune(now)
	}
	j.count()
	return j
}

// Incidents returns every record, newest first.
func (j *Journal) Incidents() []Record {
	j.mu.RLock()
	defer j.mu.RUnlock()
	out := make([]Record, 0, len(j.records))
	for _, r := range j.records {
		out = append(out, r.clone())
	}
	slices.SortFunc(out, func(a, b Record) int {
		if c := b.OpenedAt.Compare(a.OpenedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Incident returns one record by ID.
func (j *Journal) Incident(id string) (Record, bool) {
	j.mu.RLock()
	defer j.mu.RUnlock()
	r, ok := j.records[id]
	if !ok {
		return Record{}, false
	}
	return r.clone(), true
}

// Observe records one evaluation round: the round, the tracker's
// incidents after it, what changed in it (the tracker's transitions) and
// the events it produced. It matches nothing itself: incidents are found
// by their ID, and which group an incident continued is the tracker's
// Seen transition.
func (j *Journal) Observe(round assess.Round, incidents []alert.Incident, changes []alert.Transition, events []notify.Event, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	page := map[string]notify.Event{}
	for _, ev := range events {
		if ev.Incident != "" {
			page[ev.Incident] = ev
		}
	}
	changed := map[string][]alert.Transition{}
	for _, tr := range changes {
		changed[tr.Incident.ID] = append(changed[tr.Incident.ID], tr)
	}
	present := map[string]bool{}
	for _, a := range incidents {
		if a.ID == "" {
			continue
		}
		present[a.ID] = true
		r := j.records[a.ID]
		if r == nil {
			if a.State == alert.StateResolved {
				continue // ended before the journal knew it (restart without its document)
			}
			r = j.begin(a)
		}
		ev, paged := page[a.ID]
		j.update(r, a, changed[a.ID], round, ev, paged, now)
	}
	for id, r := range j.records {
		if present[id] || !r.Open() {
			continue
		}
		if r.FiredAt.IsZero() {
			// It cleared while pending: it never paged, so it is no incident.
			delete(j.records, id)
			j.changed = true
			continue
		}
		r.State, r.ResolvedAt = alert.StateResolved, now
		j.event(r, Event{At: now, Kind: EventResolved, Text: "no longer tracked by the alert state; closed by the journal"})
		j.changed = true
	}
	j.prev = round
	j.prune(now)
	j.count()
	j.save(now)
}

// begin opens the record of an incident seen for the first time.
func (j *Journal) begin(a alert.Incident) *Record {
	r := &Record{Summary: Summary{
		ID: a.ID, Fingerprint: a.Fingerprint, Class: a.Class, Replica: a.Replica, Model: a.Model, Fleet: a.Fleet,
		State: a.State, Severity: a.Severity, OpenedAt: a.ActiveAt, Chain: []detect.Class{a.Class},
	}}
	r.Timeline = append(r.Timeline, Event{At: a.ActiveAt, Kind: EventFirstFinding,
		Text: fmt.Sprintf("%s found on %s (pending, %s): %s", a.Class, a.Replica, a.Severity, a.Finding.Summary)})
	j.records[r.ID] = r
	j.changed = true
	return r
}

// update applies incident a as the round left it, and its changes in the
// round, to its record r.
func (j *Journal) update(r *Record, a alert.Incident, changes []alert.Transition, round assess.Round, ev notify.Event, paged bool, now time.Time) {
	if !r.Open() {
		return
	}
	prevState, prevSeverity, prevSilenced := r.State, r.Severity, r.SilencedBy
	r.State, r.Model = a.State, a.Model
	if a.ActiveAt.Before(r.OpenedAt) {
		r.OpenedAt = a.ActiveAt // it absorbed an earlier symptom
	}
	var seen *correlate.Group
	var absorbed []alert.Incident
	for _, tr := range changes {
		switch tr.Change {
		case alert.Renamed:
			j.event(r, Event{At: now, Kind: EventJoined,
				Text: fmt.Sprintf("%s identified as the cause; the incident is named after it", a.Class)})
			r.Chain = append([]detect.Class{a.Class}, slices.DeleteFunc(r.Chain, func(c detect.Class) bool { return c == a.Class })...)
		case alert.Absorbed:
			absorbed = append(absorbed, tr.Other)
		case alert.Seen:
			seen = &tr.Group
		}
	}
	r.Class, r.Replica = a.Class, a.Replica
	joined := slices.Clone(a.Members)
	for _, b := range absorbed {
		joined = append(joined, b.Class)
		joined = append(joined, b.Members...)
	}
	for _, c := range joined {
		if !slices.Contains(r.Chain, c) {
			r.Chain = append(r.Chain, c)
			j.event(r, Event{At: now, Kind: EventJoined, Text: fmt.Sprintf("%s joined as a consequence of %s", c, r.Class)})
		}
	}
	if fleet := correlate.FleetReplica(r.Model); !a.Fleet && a.Replica != fleet {
		// A burn's incident that moved to its cause's replica covers
		// that replica, not the model as a whole.
		r.Replicas = slices.DeleteFunc(r.Replicas, func(rep string) bool { return rep == fleet })
	}
	for _, rep := range replicasOf(a, seen, absorbed) {
		if !slices.Contains(r.Replicas, rep) {
			r.Replicas = append(r.Replicas, rep)
		}
	}
	r.Severity = a.Severity
	for _, tr := range changes {
		switch tr.Change {
		case alert.Fired:
			r.FiredAt = a.FiredAt
			j.event(r, Event{At: a.FiredAt, Kind: EventFired, Text: fmt.Sprintf("fired (%s) after %s pending",
				a.Severity, notify.FormatDuration(a.FiredAt.Sub(r.OpenedAt)))})
		case alert.Escalated:
			j.event(r, Event{At: now, Kind: EventEscalated, Text: fmt.Sprintf("escalated from %s to %s", tr.FromSeverity, a.Severity)})
		}
	}
	for _, id := range a.SilencedBy {
		if !slices.Contains(prevSilenced, id) {
			j.event(r, Event{At: now, Kind: EventSilenced, Text: "silenced by " + id})
		}
	}
	for _, id := range prevSilenced {
		if !slices.Contains(a.SilencedBy, id) {
			j.event(r, Event{At: now, Kind: EventUnsilenced, Text: "silence " + id + " no longer mutes it"})
		}
	}
	r.SilencedBy = slices.Clone(a.SilencedBy)
	switch {
	case paged && ev.Kind == notify.KindResolve:
		r.Headline = ev.Headline // the diagnosis and steps stay those of the incident while it fired
	case paged:
		r.Headline, r.Diagnosis, r.Triage = ev.Headline, ev.Diagnosis, ev.Triage
		r.Emergency, r.RootCause, r.Runbook = slices.Clone(ev.Emergency), slices.Clone(ev.RootCause), ev.RunbookURL
	case r.Headline == "":
		f := a.Finding
		r.Headline, r.Diagnosis, r.Triage = a.Replica+": "+f.Summary, f.Diagnosis, f.Triage
		r.Emergency, r.RootCause, r.Runbook = slices.Clone(f.Emergency), slices.Clone(f.RootCause), f.Runbook
	}
	if a.State != alert.StateResolved {
		if seen != nil {
			for _, e := range seen.Finding.Evidence {
				r.addPoint(e, round.At, j.opts.MaxPoints)
			}
		}
		// The tracker keeps the incident's evidence in the order its
		// pages list it (the cause's first); the plots follow it.
		r.Signals = causeFirst(r.Signals, a.Peak)
		if len(r.Impact) == 0 && j.prev.At.Before(round.At) {
			j.noteImpact(r, j.prev)
		}
		j.noteImpact(r, round)
		noteBudgets(r, round)
		j.noteUnseen(r, round)
		j.grown = true
	}
	for _, tr := range changes {
		if tr.Change != alert.Resolved {
			continue
		}
		r.ResolvedAt = a.ResolvedAt
		text := "resolved"
		if !r.FiredAt.IsZero() {
			text += " after " + notify.FormatDuration(a.ResolvedAt.Sub(r.FiredAt)) + " firing"
		}
		j.event(r, Event{At: a.ResolvedAt, Kind: EventResolved, Text: text})
	}
	if r.State != prevState || r.Severity != prevSeverity {
		j.changed = true
	}
}

// noteBudgets adds the round's bad events of the model's objectives on
// the incident's replicas to what it spent, against each objective's
// budget (the model's) as the round assessed it. Another replica's
// incident at the same time spends its own events, not this one's, even
// where this one carries the model's burn on its page; an SLO burning on
// its own is the model's incident and spends the model's events.
func noteBudgets(r *Record, round assess.Round) {
	samples := round.SLI
	if r.Class != correlate.SLOBurn {
		samples = nil
		for _, rep := range round.Replicas {
			if slices.Contains(r.Replicas, rep.Replica.Name) {
				samples = append(samples, rep.SLI...)
			}
		}
	}
	for _, s := range samples {
		if s.Model != r.Model {
			continue
		}
		i := slices.IndexFunc(r.Budgets, func(b BudgetSpent) bool { return b.Objective == s.Objective })
		if i < 0 {
			r.Budgets = append(r.Budgets, BudgetSpent{Objective: s.Objective})
			i = len(r.Budgets) - 1
		}
		b := &r.Budgets[i]
		b.Bad += s.Events.Bad()
		b.Total += s.Events.Total
		for _, st := range round.SLOs {
			if st.Objective == s.Objective && st.Model == s.Model {
				b.Title, b.Period, b.Held = st.Title, st.Period, min(st.Held, st.Period)
				b.Allowed = (1 - st.Target) * st.PeriodEvents.Total
			}
		}
	}
}

// replicasOf are the replicas an incident covers this round: its own, or
// the members of the fleet group it continued (seen), and those of the
// incidents it took in.
func replicasOf(a alert.Incident, seen *correlate.Group, absorbed []alert.Incident) []string {
	var out []string
	if !a.Fleet {
		out = append(out, a.Replica)
	} else if seen != nil {
		out = append(out, seen.Finding.AffectedReplicas...)
		for _, m := range seen.Members {
			out = append(out, m.Replica)
		}
	}
	for _, b := range absorbed {
		out = append(out, b.Replica)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Impact signal names: what users felt, from the replicas' snapshots.
const (
	ImpactQueued  = "queued requests"
	ImpactRunning = "running requests"
	ImpactAborts  = "aborted requests"
	ImpactTTFT    = "time to first token p99"
	ImpactITL     = "inter-token latency p99"
)

// noteImpact adds this round's user-facing numbers of the incident's
// replicas: queues and aborts summed, latencies at the worst replica.
func (j *Journal) noteImpact(r *Record, round assess.Round) {
	type agg struct {
		v   float64
		any bool
	}
	sums := map[string]*agg{}
	add := func(name string, p *float64, sum bool) {
		if p == nil {
			return
		}
		a := sums[name]
		if a == nil {
			a = &agg{}
			sums[name] = a
		}
		switch {
		case !a.any:
			a.v = *p
		case sum:
			a.v += *p
		default:
			a.v = max(a.v, *p)
		}
		a.any = true
	}
	for _, name := range r.Replicas {
		rep, ok := round.Replica(name)
		if !ok || !rep.Scrape.Up {
			continue
		}
		s := rep.Snapshot
		add(ImpactQueued, s.QueuedRequests, true)
		add(ImpactRunning, s.RunningRequests, true)
		add(ImpactAborts, s.AbortsPerSecond, true)
		add(ImpactTTFT, s.TTFTP99, false)
		add(ImpactITL, s.ITLP99, false)
	}
	units := map[string]string{ImpactAborts: "/s", ImpactTTFT: "s", ImpactITL: "s"}
	for _, name := range []string{ImpactQueued, ImpactRunning, ImpactAborts, ImpactTTFT, ImpactITL} {
		if a := sums[name]; a != nil {
			r.Impact = appendPoint(r.Impact, detect.Evidence{Name: name, Value: a.v, Unit: units[name]}, round.At, j.opts.MaxPoints, r)
		}
	}
}

// noteUnseen records what the watchdog could not see on the incident's
// replicas: failed scrapes and metrics_blind findings.
func (j *Journal) noteUnseen(r *Record, round assess.Round) {
	for _, name := range r.Replicas {
		rep, ok := round.Replica(name)
		if !ok {
			continue
		}
		if !rep.Scrape.Up && !rep.Scrape.LastAttempt.IsZero() {
			line := fmt.Sprintf("%s: scrapes failed (%s)", name, rep.Scrape.Reason)
			if rep.Scrape.Status != 0 {
				line = fmt.Sprintf("%s: scrapes failed (%s %d)", name, rep.Scrape.Reason, rep.Scrape.Status)
			}
			r.addUnseen(line)
		}
		for _, f := range rep.Findings {
			if f.Class == detect.MetricsBlind {
				r.addUnseen(name + ": " + f.Summary)
			}
		}
	}
}

func (r *Record) addUnseen(line string) {
	if !slices.Contains(r.Unseen, line) && len(r.Unseen) < maxUnseen {
		r.Unseen = append(r.Unseen, line)
	}
}

func (j *Journal) event(r *Record, e Event) {
	r.Timeline = append(r.Timeline, e)
	// Integrations deliver concurrently and report when done: events are
	// kept in time order, those of one instant by integration, so the
	// timeline does not depend on which worker reported first.
	for i := len(r.Timeline) - 1; i > 0; i-- {
		a, b := r.Timeline[i-1], r.Timeline[i]
		if !a.At.After(b.At) && (!a.At.Equal(b.At) || a.Integration == "" || b.Integration == "" || a.Integration <= b.Integration) {
			break
		}
		r.Timeline[i-1], r.Timeline[i] = b, a
	}
	r.Timeline = bounded(r.Timeline, maxTimeline)
	j.changed = true
}

// bounded drops the entry after the first half of a list over limit, so
// its start and its newest entries stay.
func bounded[T any](s []T, limit int) []T {
	if len(s) <= limit {
		return s
	}
	return slices.Delete(s, limit/2, limit/2+1)
}

func (r *Record) addPoint(e detect.Evidence, at time.Time, maxPoints int) {
	r.Signals = appendPoint(r.Signals, e, at, maxPoints, r)
}

// causeFirst orders signals as the incident's evidence lists them
// (alert.Incident.Peak: the cause's own first), the others after in their
// order: a cause found after its consequence paged leads the root-cause
// table and the incident page's plots, as it leads the chain.
func causeFirst(signals []Signal, evidence []detect.Evidence) []Signal {
	rank := func(s Signal) int {
		if i := slices.IndexFunc(evidence, func(e detect.Evidence) bool { return e.Name == s.Name }); i >= 0 {
			return i
		}
		return len(evidence)
	}
	slices.SortStableFunc(signals, func(a, b Signal) int { return rank(a) - rank(b) })
	return signals
}

// appendPoint adds e's value at at to its signal in signals.
func appendPoint(signals []Signal, e detect.Evidence, at time.Time, maxPoints int, r *Record) []Signal {
	i := slices.IndexFunc(signals, func(s Signal) bool { return s.Name == e.Name })
	if i < 0 {
		signals = append(signals, Signal{Name: e.Name, Unit: e.Unit})
		i = len(signals) - 1
	}
	s := &signals[i]
	if n := len(s.Points); n > 0 && !s.Points[n-1].At.Before(at) {
		// One point per round: the first evidence of a name wins, and a
		// correlated finding lists its cause's before its consequences'.
		return signals
	}
	// A consequence's evidence of the same name (or the cause's while it
	// drains) may carry no rule: the signal keeps the last rule it had.
	if e.Threshold != "" || s.Threshold == "" {
		s.Unit, s.Threshold = e.Unit, e.Threshold
	}
	if e.HasLimit {
		s.Limit, s.HasLimit = e.Limit, true
	}
	s.LowerIsWorse = s.LowerIsWorse || e.LowerIsWorse()
	s.SampleSize = s.SampleSize || e.SampleSize
	s.Points = append(s.Points, Point{At: at, Value: e.Value, Baseline: e.Baseline, HasBaseline: e.HasBaseline, Limit: e.Limit, HasLimit: e.HasLimit})
	if maxPoints > 0 && len(s.Points) > maxPoints {
		s.Points = thin(s.Points, r.FiredAt, r.ResolvedAt)
	}
	return signals
}

// thin halves points evenly, keeping the first (onset), the last, the
// peak and the points at the fire and resolve instants.
func thin(points []Point, fired, resolved time.Time) []Point {
	peak := 0
	for i, p := range points {
		if p.Value > points[peak].Value {
			peak = i
		}
	}
	out := make([]Point, 0, len(points)/2+4)
	n := 0
	for i, p := range points {
		keep := i == 0 || i == len(points)-1 || i == peak || p.At.Equal(fired) || p.At.Equal(resolved)
		if !keep {
			keep = n%2 == 0
			n++
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}

// RecordAttempt records one delivery attempt (the dispatcher's OnAttempt).
func (j *Journal) RecordAttempt(a notify.Attempt) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.records[a.Event.Incident]
	if r == nil {
		return // not an incident's page (a delivery-failure notice) or no longer kept
	}
	d := Delivery{At: a.At, Integration: a.Integration, Kind: string(a.Event.Kind), Attempt: a.Number, OK: a.Delivered}
	if !a.Delivered {
		d.Error = string(a.Reason)
		if a.GaveUp {
			d.Error += ", gave up"
		}
	}
	r.Deliveries = append(r.Deliveries, d)
	for i := len(r.Deliveries) - 1; i > 0; i-- {
		a, b := r.Deliveries[i-1], r.Deliveries[i]
		if !a.At.After(b.At) && (!a.At.Equal(b.At) || a.Integration <= b.Integration) {
			break
		}
		r.Deliveries[i-1], r.Deliveries[i] = b, a
	}
	r.Deliveries = bounded(r.Deliveries, maxDeliveries)
	switch {
	case a.Delivered && a.Integration != notify.IntegrationLog:
		text := fmt.Sprintf("%s delivered to %s", a.Event.Kind, a.Integration)
		if a.Number > 1 {
			text += fmt.Sprintf(" (attempt %d)", a.Number)
		}
		j.event(r, Event{At: a.At, Kind: EventNotified, Text: text, Integration: a.Integration})
	case a.GaveUp:
		j.event(r, Event{At: a.At, Kind: EventDeliveryFail, Integration: a.Integration,
			Text: fmt.Sprintf("%s not delivered to %s: %s after %d attempts", a.Event.Kind, a.Integration, a.Reason, a.Number)})
	}
	j.changed = true
}

// prune drops resolved records past retention, then the oldest beyond
// MaxIncidents (resolved ones first).
func (j *Journal) prune(now time.Time) {
	for id, r := range j.records {
		if !r.Open() && j.opts.Retention > 0 && now.Sub(r.ResolvedAt) >= j.opts.Retention {
			delete(j.records, id)
			j.metrics.dropped.WithLabelValues("retention").Inc()
			j.changed = true
		}
	}
	if j.opts.MaxIncidents <= 0 || len(j.records) <= j.opts.MaxIncidents {
		return
	}
	ids := slices.Collect(maps.Keys(j.records))
	slices.SortFunc(ids, func(a, b string) int {
		ra, rb := j.records[a], j.records[b]
		if ra.Open() != rb.Open() {
			if ra.Open() {
				return 1
			}
			return -1
		}
		if c := ra.OpenedAt.Compare(rb.OpenedAt); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, id := range ids[:len(ids)-j.opts.MaxIncidents] {
		delete(j.records, id)
		j.metrics.dropped.WithLabelValues("max_incidents").Inc()
	}
	j.changed = true
}

func (j *Journal) count() {
	open, resolved := 0, 0
	for _, r := range j.records {
		if r.Open() {
			open++
		} else {
			resolved++
		}
	}
	j.metrics.records.WithLabelValues("open").Set(float64(open))
	j.metrics.records.WithLabelValues("resolved").Set(float64(resolved))
}

// save writes the journal when a state changed, or when points were added
// and saveEvery has passed.
func (j *Journal) save(now time.Time) {
	if j.opts.Store == nil || !(j.changed || j.grown && now.Sub(j.lastSave) >= saveEvery) {
		return
	}
	out := make([]Record, 0, len(j.records))
	for _, id := range slices.Sorted(maps.Keys(j.records)) {
		out = append(out, *j.records[id])
	}
	if err := j.opts.Store.Save(Document, out); err != nil {
		j.metrics.saveFailure.Inc()
		j.opts.Logger.Error("saving the incident journal failed; a restart may lose incident history", zap.Error(err))
		return
	}
	j.changed, j.grown, j.lastSave = false, false, now
}

func (r *Record) clone() Record {
	c := *r
	c.Replicas = slices.Clone(r.Replicas)
	c.Emergency, c.RootCause = slices.Clone(r.Emergency), slices.Clone(r.RootCause)
	c.Chain, c.SilencedBy = slices.Clone(r.Chain), slices.Clone(r.SilencedBy)
	c.Signals, c.Impact = cloneSignals(r.Signals), cloneSignals(r.Impact)
	c.Timeline, c.Deliveries, c.Unseen = slices.Clone(r.Timeline), slices.Clone(r.Deliveries), slices.Clone(r.Unseen)
	c.Budgets = slices.Clone(r.Budgets)
	return c
}

func cloneSignals(s []Signal) []Signal {
	out := slices.Clone(s)
	for i := range out {
		out[i].Points = slices.Clone(out[i].Points)
	}
	return out
}
