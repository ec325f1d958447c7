// Package eval is the evaluation loop: every interval it assesses every
// replica's window (internal/assess: snapshot, triage, findings, groups),
// feeds the round to the alert tracker, holds back the pages of incidents
// a silence mutes (mute.go), turns the rest into events for the notifier,
// hands the round's transitions to the incident journal, persists firing
// incidents, and publishes the round and the incidents for the API.
package eval

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/tick"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Sender takes events for delivery (the notify dispatcher).
type Sender interface {
	Send(ev notify.Event)
}

// Persister saves the firing alerts so a restart continues incidents.
type Persister interface {
	Save(name string, v any) error
}

// AlertsDocument is the state document holding firing alerts.
const AlertsDocument = "alerts"

// Options of the loop.
type Options struct {
	Interval  time.Duration
	Assessor  *assess.Assessor
	Tracker   *alert.Tracker
	Windows   assess.Windows
	Sender    Sender
	Persister Persister // nil: nothing persisted
	// Silences mute alerts (mute.go); nil: nothing is muted.
	Silences Silences
	// Links are the URLs pages carry.
	Links  alert.Links
	Logger *zap.Logger
	// Observer, when set, is told of every round before it reads the
	// windows and again when it is done (watchdog record writes the instant
	// and keeps appends out of the round).
	Observer RoundObserver
	// Journal, when set, records every round's incidents (internal/incident).
	Journal Journal
}

// Journal records each round: the round, the incidents after it, what
// changed (the tracker's transitions) and the events it produced, before
// they are handed to the notifier.
type Journal interface {
	Observe(round assess.Round, incidents []alert.Incident, changes []alert.Transition, events []notify.Event, now time.Time)
}

// RoundObserver sees the rounds: BeginRound is called before a round at
// now reads the windows, the end it returns after the round.
type RoundObserver interface {
	BeginRound(now time.Time) (end func())
}

// Loop is the evaluation loop.
type Loop struct {
	opts    Options
	metrics *metrics

	mu     sync.RWMutex // guards everything below and opts.Assessor/Tracker/Links swaps
	alerts []alert.Incident
	// alertGauges are watchdog_alerts' children; alertCounts is scratch
	// for the counts of a round.
	alertGauges map[alertKey]prometheus.Gauge
	alertCounts map[alertKey]int
	round       assess.Round
	rounds      uint64
	persisted   []string // fingerprint:seq of the last saved snapshot
	// stale says the stored document may differ from persisted (another
	// copy wrote it while this one followed): the next persist saves.
	stale bool

	// lastEval is the time of the last completed round, read without the
	// lock so a probe answers while a round is stuck holding it.
	lastEval atomic.Pointer[time.Time]

	mute muting

	ready     chan struct{}
	readyOnce sync.Once
}

type metrics struct {
	evaluations  prometheus.Counter
	duration     prometheus.Histogram
	detectorRuns *prometheus.CounterVec
	findings     *prometheus.CounterVec
	alerts       *prometheus.GaugeVec
	events       *prometheus.CounterVec
	persistFail  prometheus.Counter
}

// New builds the loop; it starts nothing.
func New(opts Options, reg prometheus.Registerer) *Loop {
	f := promauto.With(reg)
	m := &metrics{
		evaluations: f.NewCounter(prometheus.CounterOpts{Name: "watchdog_evaluations_total", Help: "Evaluation rounds over every replica."}),
		duration: f.NewHistogram(prometheus.HistogramOpts{Name: "watchdog_evaluation_duration_seconds", Help: "Time one evaluation round took.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}),
		detectorRuns: f.NewCounterVec(prometheus.CounterOpts{Name: "watchdog_detector_runs_total", Help: "Detector runs, per replica window."}, []string{"class"}),
		findings:     f.NewCounterVec(prometheus.CounterOpts{Name: "watchdog_findings_total", Help: "Findings returned by detectors."}, []string{"class", "severity"}),
		alerts:       f.NewGaugeVec(prometheus.GaugeOpts{Name: "watchdog_alerts", Help: "Alerts by class and state."}, []string{"class", "state"}),
		events:       f.NewCounterVec(prometheus.CounterOpts{Name: "watchdog_alert_events_total", Help: "Alert events handed to notification, by kind."}, []string{"class", "kind"}),
		persistFail:  f.NewCounter(prometheus.CounterOpts{Name: "watchdog_state_save_failures_total", Help: "Failed saves of the alert state document."}),
	}
	l := &Loop{opts: opts, metrics: m, ready: make(chan struct{}),
		alertGauges: map[alertKey]prometheus.Gauge{}, alertCounts: map[alertKey]int{},
		mute: muting{
			held: map[string]notify.Kind{},
			silenced: f.NewCounterVec(prometheus.CounterOpts{Name: "watchdog_notifications_silenced_total",
				Help: "Alert events not sent because a silence muted their alert, by kind."}, []string{"kind"}),
		}}
	l.initMetrics()
	return l
}

func (l *Loop) initMetrics() {
	for _, d := range l.opts.Assessor.Detectors() {
		c := string(d.Class())
		l.metrics.detectorRuns.WithLabelValues(c)
		for _, st := range []alert.State{alert.StatePending, alert.StateFiring, alert.StateResolved} {
			l.metrics.alerts.WithLabelValues(c, string(st))
		}
	}
}

// Reconfigure swaps the assessment (detectors, triage, correlation),
// alert timing and page links (hot reload); windows and incidents are
// kept.
func (l *Loop) Reconfigure(a *assess.Assessor, alerts alert.Config, links alert.Links) {
	l.mu.Lock()
	l.opts.Assessor = a
	l.opts.Tracker.SetConfig(alerts)
	l.opts.Links = links
	l.mu.Unlock()
	l.initMetrics()
}

// SetLinks changes the URLs pages carry (known once the daemon listens).
func (l *Loop) SetLinks(links alert.Links) {
	l.mu.Lock()
	l.opts.Links = links
	l.mu.Unlock()
}

// Evaluate runs one round at now and returns the events it sent (the
// pages of incidents a silence mutes are held back, mute.go).
func (l *Loop) Evaluate(now time.Time) []notify.Event {
	if l.opts.Observer != nil {
		defer l.opts.Observer.BeginRound(now)()
	}
	l.mu.Lock()
	defer l.mu.Unlock()

	round := l.opts.Assessor.Assess(l.opts.Windows, now, l.opts.Tracker.References())
	if book := l.opts.Assessor.SLOs(); book != nil {
		book.Record(round.At, round.SLI)
	}
	for _, d := range l.opts.Assessor.Detectors() {
		l.metrics.detectorRuns.WithLabelValues(string(d.Class())).Add(float64(len(round.Replicas)))
	}
	for _, f := range round.Findings() {
		l.metrics.findings.WithLabelValues(string(f.Class), f.Severity.String()).Inc()
	}
	changes := l.opts.Tracker.Update(round)
	l.decideSilences(now)
	pages := l.mutePages(changes)
	released := l.releaseHeld(round)
	pages = append(pages, released...)
	l.publish(round)
	return l.deliver(round, append(changes, released...), pages, now)
}

// Retire resolves the incidents of replicas that no longer exist.
func (l *Loop) Retire(gone func(replica string) bool, reason string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	changes := l.opts.Tracker.Retire(gone, reason, now)
	l.publishAlerts()
	l.deliver(assess.Round{At: now}, changes, l.mutePages(changes), now)
}

// deliver turns the pages into events, records the round in the journal
// before the events are sent (so that each delivery attempt finds its
// incident's record), sends them and persists the incidents.
func (l *Loop) deliver(round assess.Round, changes, pages []alert.Transition, now time.Time) []notify.Event {
	events := l.opts.Links.Events(pages, round)
	if l.opts.Journal != nil {
		l.opts.Journal.Observe(round, l.alerts, changes, events, now)
	}
	for _, ev := range events {
		l.metrics.events.WithLabelValues(ev.Class, string(ev.Kind)).Inc()
		l.opts.Sender.Send(ev)
	}
	l.persist()
	return events
}

func (l *Loop) publish(round assess.Round) {
	l.round = round
	at := round.At
	l.lastEval.Store(&at)
	l.rounds++
	l.publishAlerts()
}

func (l *Loop) publishAlerts() {
	l.alerts = l.opts.Tracker.Incidents()
	for i := range l.alerts {
		l.alerts[i].SilencedBy = l.mute.silencedBy[l.alerts[i].Fingerprint]
	}
	clear(l.alertCounts)
	for _, a := range l.alerts {
		l.alertCounts[alertKey{a.Class, a.State}]++
	}
	l.initMetricsLocked()
	// Every gauge is set each round rather than the vector reset and
	// rebuilt: a round then allocates no metric, and a class whose alerts
	// ended reads 0 instead of vanishing.
	for k := range l.alertCounts {
		l.alertGauge(k)
	}
	for k, g := range l.alertGauges {
		g.Set(float64(l.alertCounts[k]))
	}
}

// alertKey is one series of watchdog_alerts.
type alertKey struct {
	class detect.Class
	state alert.State
}

// alertGauge returns the watchdog_alerts child of k, created once.
func (l *Loop) alertGauge(k alertKey) prometheus.Gauge {
	g, ok := l.alertGauges[k]
	if !ok {
		g = l.metrics.alerts.WithLabelValues(string(k.class), string(k.state))
		l.alertGauges[k] = g
	}
	return g
}

func (l *Loop) initMetricsLocked() {
	for _, d := range l.opts.Assessor.Detectors() {
		for _, st := range [...]alert.State{alert.StatePending, alert.StateFiring, alert.StateResolved} {
			l.alertGauge(alertKey{d.Class(), st})
		}
	}
}

// persist saves the firing alerts when they changed since the last save.
func (l *Loop) persist() {
	if l.opts.Persister == nil {
		return
	}
	l.saveHeld()
	snap := l.opts.Tracker.Snapshot()
	keys := make([]string, 0, len(snap))
	for _, a := range snap {
		keys = append(keys, fmt.Sprintf("%s:%s:%d", a.Fingerprint, a.State, a.Seq))
	}
	if !l.stale && slices.Equal(keys, l.persisted) {
		return
	}
	if err := l.opts.Persister.Save(AlertsDocument, snap); err != nil {
		l.metrics.persistFail.Inc()
		l.opts.Logger.Error("saving alert state failed; a restart may re-page open incidents", zap.Error(err))
		return
	}
	l.persisted, l.stale = keys, false
}

// Takeover runs when this copy becomes the leader (HA): it restores the
// incidents the previous leader left open, reads its silences and held
// pages, and saves the alert state again, because a follower's saves were
// skipped by the read-only store.
func (l *Loop) Takeover(open []notify.Event, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opts.Tracker.RestoreIncidents(open, now)
	l.takeoverSilences(now)
	l.stale = true
	l.persist()
	l.publishAlerts()
}

// Alerts returns the incidents as of the last round.
func (l *Loop) Alerts() []alert.Incident {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Clone(l.alerts)
}

// Round returns the last assessment round (zero before the first). Its
// slices are shared: callers must not modify them.
func (l *Loop) Round() assess.Round {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.round
}

// LastEvaluation is the time of the last round, zero before the first.
func (l *Loop) LastEvaluation() time.Time {
	if at := l.lastEval.Load(); at != nil {
		return *at
	}
	return time.Time{}
}

// Ready is closed after the first evaluation round.
func (l *Loop) Ready() <-chan struct{} { return l.ready }

// Run evaluates every interval until ctx is done. The first round runs one
// interval after start, when every target has had a chance to be scraped.
func (l *Loop) Run(ctx context.Context) error {
	tick.Every(ctx, l.opts.Interval, func(now time.Time) {
		start := time.Now()
		l.Evaluate(now)
		l.metrics.evaluations.Inc()
		l.metrics.duration.Observe(time.Since(start).Seconds())
		l.readyOnce.Do(func() { close(l.ready) })
	})
	return nil
}
