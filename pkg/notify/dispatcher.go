package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/persist"
)

// ClassDeliveryFailure is the class of the notice sent through the other
// integrations when one integration permanently fails to deliver an event.
const ClassDeliveryFailure = "notification_delivery_failure"

// Integration is one configured destination.
type Integration struct {
	Name     string // "slack", "pagerduty", "log", ... used in routes, metrics and the state document name
	Notifier Notifier
	Options  QueueOptions
}

// DispatcherConfig is what NewDispatcher needs.
type DispatcherConfig struct {
	// Integrations to deliver to. A "log" integration is added (a
	// LogNotifier writing to LogWriter) unless one is given.
	Integrations []Integration
	Routes       RouteConfig
	// Store keeps the outboxes and incident records across restarts (nil:
	// nothing survives one). Nothing waits for it: a *persist.Writer is
	// used as it is, its owner runs it and switches it with leadership
	// (SetWritable); any other store gets a Writer of the dispatcher's
	// own, which Run runs and flushes after the drain, and SetActive
	// switches.
	Store      Store
	Logger     *zap.Logger
	Registerer prometheus.Registerer // nil: metrics are not registered
	LogWriter  io.Writer             // the built-in log integration's output; nil: structured log line only
	// Standby starts the dispatcher as a follower of a highly available
	// pair: it loads the persisted state (for OpenIncidents) but delivers
	// and writes nothing until SetActive(true).
	Standby bool
	// OnAttempt, when set, is told of every delivery attempt's outcome (the
	// incident journal); it is called from the integrations' workers.
	OnAttempt func(Attempt)
	// Queue holds the queue options of every integration, the built-in
	// log one included, for each field its own Options leave zero (zero
	// here as well: DefaultQueueOptions).
	Queue QueueOptions
}

// Dispatcher routes events to the integrations' queues and runs them.
type Dispatcher struct {
	routes atomic.Pointer[RouteConfig] // swapped by SetRoutes (hot reload)
	log    *zap.Logger
	queues []*Queue
	byName map[string]*Queue
	sm     standbyMetrics
	// writer saves the queues' documents; ownWriter says the dispatcher
	// made it (over a plain Store) and so runs and switches it.
	writer    *persist.Writer
	ownWriter bool

	// mu is held for reading by Send for its whole routing and enqueueing,
	// and for writing by SetActive, so that no event is half sent across a
	// leadership change.
	mu     sync.RWMutex
	active bool

	missedMu sync.Mutex
	missed   map[string]Event // standby: the newest event per fingerprint not delivered

	// notices are the open delivery-failure notices by the integration
	// that failed, then by notice fingerprint: resolved when that
	// integration delivers again, or when they expire.
	noticesMu sync.Mutex
	notices   map[string]map[string]Event
}

// NewDispatcher builds the queues of every integration and loads their
// persisted state. It starts nothing.
func NewDispatcher(cfg DispatcherConfig, now time.Time) (*Dispatcher, error) {
	if err := cfg.Routes.Validate(); err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	integrations := cfg.Integrations
	if !slices.ContainsFunc(integrations, func(i Integration) bool { return i.Name == IntegrationLog }) {
		integrations = append([]Integration{{Name: IntegrationLog, Notifier: NewLogNotifier(cfg.LogWriter, logger.Named("log"))}}, integrations...)
	}
	m := NewMetrics(cfg.Registerer)
	d := &Dispatcher{log: logger, byName: map[string]*Queue{}, sm: newStandbyMetrics(cfg.Registerer),
		active: !cfg.Standby, missed: map[string]Event{}, notices: map[string]map[string]Event{}}
	switch s := cfg.Store.(type) {
	case nil:
	case *persist.Writer:
		d.writer = s
	default:
		d.writer = persist.New(s, persist.Options{Logger: logger.Named("state"), Metrics: persist.NewMetrics(cfg.Registerer)})
		d.ownWriter = true
		if cfg.Standby {
			d.writer.SetWritable(false)
		}
	}
	routes := cfg.Routes
	d.routes.Store(&routes)
	var errs []error
	for _, in := range integrations {
		if _, dup := d.byName[in.Name]; dup {
			errs = append(errs, fmt.Errorf("integration %q configured twice", in.Name))
			continue
		}
		q, err := newQueue(in.Name, in.Notifier, in.Options.or(cfg.Queue), d.writer, logger, m, now, cfg.Standby)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		q.onFailed = d.reportFailure(in.Name)
		q.onDelivered = d.delivered(in.Name)
		q.onAttempt = cfg.OnAttempt
		d.queues = append(d.queues, q)
		d.byName[in.Name] = q
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if d.active {
		d.sm.active.Set(1)
	}
	d.loadNotices()
	cfg.Routes.walk(func(path, name string) {
		if d.byName[name] == nil {
			logger.Warn("route names a receiver that is not configured; it is skipped",
				zap.String("route", path), zap.String("integration", name))
		}
	})
	return d, nil
}

// SetRoutes replaces the routing table (hot reload); events already queued
// keep their integrations.
func (d *Dispatcher) SetRoutes(routes RouteConfig) error {
	if err := routes.Validate(); err != nil {
		return fmt.Errorf("routes: %w", err)
	}
	d.routes.Store(&routes)
	return nil
}

// Integrations returns the configured integration names, "log" first.
func (d *Dispatcher) Integrations() []string {
	out := make([]string, len(d.queues))
	for i, q := range d.queues {
		out[i] = q.name
	}
	return out
}

// Queue returns the queue of one integration, nil when not configured.
func (d *Dispatcher) Queue(name string) *Queue { return d.byName[name] }

// Targets are the integrations ev goes to: the log, those its route selects,
// and those that already know the incident (so a resolve or de-escalation
// reaches PagerDuty even when the route no longer selects it).
func (d *Dispatcher) Targets(ev Event) []*Queue {
	names := d.routes.Load().Match(ev)
	var out []*Queue
	for _, q := range d.queues {
		if q.name == IntegrationLog || slices.Contains(names, q.name) || q.Tracks(ev.Fingerprint) {
			out = append(out, q)
		}
	}
	return out
}

// Send routes ev and adds it to the outbox of every target, which is saved
// without waiting for the store. It does not wait for delivery. In standby (a follower) ev is neither delivered nor
// persisted: the leader, fed the same findings, sends the same incident,
// and SetActive(true) catches up on what the leader never sent.
func (d *Dispatcher) Send(ev Event) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.active {
		d.remember(ev)
		return
	}
	at := ev.At
	if at.IsZero() {
		at = time.Now()
	}
	d.expireNotices(at)
	if ev.Fingerprint == "" {
		d.log.Error("notification without fingerprint; sent to the log only", zap.String("class", ev.Class), zap.String("replica", ev.Replica))
		d.byName[IntegrationLog].Enqueue(ev)
		return
	}
	for _, q := range d.Targets(ev) {
		q.Enqueue(ev)
	}
}

// Run runs every queue until ctx is cancelled and each has drained, and
// then writes what its own writer holds (bounded by the writer's flush
// timeout); it returns when all workers have exited.
func (d *Dispatcher) Run(ctx context.Context) error {
	if d.ownWriter {
		wctx, stopWriter := context.WithCancel(context.WithoutCancel(ctx))
		written := make(chan struct{})
		go func() { _ = d.writer.Run(wctx); close(written) }()
		defer func() { stopWriter(); <-written }()
	}
	group := newDrainGroup(len(d.queues))
	for _, q := range d.queues {
		q.group.Store(group)
	}
	var wg sync.WaitGroup
	for _, q := range d.queues {
		wg.Go(func() {
			_ = q.Run(ctx)
			group.setIdle(q) // a queue that stopped at the drain deadline no longer counts
		})
	}
	wg.Wait()
	for _, q := range d.queues {
		q.group.Store(nil)
	}
	return nil
}

// OpenIncidents returns the newest event of every incident some integration
// has triggered (or still has to deliver) and not resolved, from the
// persisted records. The alert tracker restores its state from it at start
// and resolves those that ended while the daemon was down. Delivery-failure
// notices are not alert incidents and are left out.
func (d *Dispatcher) OpenIncidents() []Event {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.openIncidents()
}

func (d *Dispatcher) openIncidents() []Event {
	// Newest by time: a fingerprint's next incident starts its sequence
	// at 1 again, and an integration it was not routed to still holds the
	// previous incident's resolve at a higher one.
	newest := map[string]Event{}
	for _, q := range d.queues {
		for fp, ev := range q.incidents() {
			cur, ok := newest[fp]
			if !ok || ev.At.After(cur.At) || (ev.At.Equal(cur.At) && ev.Seq > cur.Seq) {
				newest[fp] = ev
			}
		}
	}
	var out []Event
	for _, ev := range newest {
		if ev.Kind == KindResolve || ev.Status == StatusResolved || ev.Class == ClassDeliveryFailure {
			continue
		}
		out = append(out, ev)
	}
	slices.SortFunc(out, func(a, b Event) int { return cmp.Compare(a.Fingerprint, b.Fingerprint) })
	return out
}

// reportFailure returns the callback with which integration's queue reports
// an event it will never deliver (failed permanently, retries exhausted,
// dropped from a full outbox): a warning notice goes to every other
// integration, so a page that cannot reach PagerDuty shows up in Slack and
// the other way round. Notices about notices are not sent.
func (d *Dispatcher) reportFailure(integration string) func(Event, error) {
	return func(ev Event, err error) {
		if ev.Class == ClassDeliveryFailure {
			return
		}
		notice := DeliveryFailureNotice(integration, ev, err)
		d.noticesMu.Lock()
		if d.notices[integration] == nil {
			d.notices[integration] = map[string]Event{}
		}
		d.notices[integration][notice.Fingerprint] = notice
		d.noticesMu.Unlock()
		for _, q := range d.queues {
			if q.name != integration {
				q.Enqueue(notice)
			}
		}
	}
}

// delivered returns the callback with which integration's queue reports a
// delivery the provider accepted: the integration works again, so the
// notices about its failures are resolved.
func (d *Dispatcher) delivered(integration string) func(Event, time.Time) {
	return func(ev Event, now time.Time) {
		d.noticesMu.Lock()
		open := d.notices[integration]
		delete(d.notices, integration)
		d.noticesMu.Unlock()
		if len(open) == 0 {
			return
		}
		why := fmt.Sprintf("%s delivers again (it accepted the %s of %s on %s at %s).",
			integration, ev.Kind, ev.Class, ev.Replica, now.UTC().Format(time.RFC3339))
		d.resolveNotices(integration, open, why, now)
	}
}

// expireNotices resolves the notices that stayed open longer than the
// failing integration's notice retention.
func (d *Dispatcher) expireNotices(now time.Time) {
	type expired struct {
		integration string
		notices     map[string]Event
		retention   time.Duration
	}
	var due []expired
	d.noticesMu.Lock()
	for integration, open := range d.notices {
		q := d.byName[integration]
		if q == nil {
			continue
		}
		e := expired{integration: integration, notices: map[string]Event{}, retention: q.opts.NoticeRetention}
		for fp, n := range open {
			if now.Sub(n.At) >= e.retention {
				e.notices[fp] = n
				delete(open, fp)
			}
		}
		if len(open) == 0 {
			delete(d.notices, integration)
		}
		if len(e.notices) > 0 {
			due = append(due, e)
		}
	}
	d.noticesMu.Unlock()
	for _, e := range due {
		why := fmt.Sprintf("Notice expired: %s has delivered nothing for %s since this failure and may still be broken; check its credentials and the watchdog log lines with integration=%s.",
			e.integration, e.retention, e.integration)
		d.resolveNotices(e.integration, e.notices, why, now)
	}
}

// resolveNotices sends the resolve of each notice to the integrations that
// have it open or pending.
func (d *Dispatcher) resolveNotices(integration string, notices map[string]Event, why string, now time.Time) {
	for _, fp := range slices.Sorted(maps.Keys(notices)) {
		r := resolveNotice(notices[fp], why, now)
		for _, q := range d.queues {
			if q.name != integration && q.Tracks(fp) {
				q.Enqueue(r)
			}
		}
	}
}

// loadNotices rebuilds the open notices from the queues' records and
// outboxes (at start and on takeover).
func (d *Dispatcher) loadNotices() {
	open := map[string]map[string]Event{}
	for _, q := range d.queues {
		for fp, ev := range q.incidents() {
			if ev.Class != ClassDeliveryFailure || isResolved(ev) || ev.Integration == "" {
				continue
			}
			if open[ev.Integration] == nil {
				open[ev.Integration] = map[string]Event{}
			}
			if cur, ok := open[ev.Integration][fp]; !ok || ev.At.After(cur.At) {
				open[ev.Integration][fp] = ev
			}
		}
	}
	d.noticesMu.Lock()
	d.notices = open
	d.noticesMu.Unlock()
}

// DeliveryFailureNotice is the warning event reporting that integration
// will not deliver ev. It names the incident and carries its summary and
// first steps, so the humans who get the notice can act on it; for a lost
// resolve it says the incident ended and must be closed by hand.
func DeliveryFailureNotice(integration string, ev Event, err error) Event {
	reason := ReasonOf(err)
	if IsPermanent(err) && reason == ReasonUnknown {
		reason = ReasonClientError
	}
	msg := err.Error()
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:300]) + "…(truncated)"
	}
	n := Event{
		Fingerprint: "delivery-failure-" + integration + "-" + ev.Fingerprint,
		Seq:         ev.Seq,
		Kind:        KindTrigger,
		Status:      StatusFiring,
		Class:       ClassDeliveryFailure,
		Severity:    detect.Warning,
		Replica:     ev.Replica,
		Model:       ev.Model,
		Layer:       ev.Layer,
		Evidence:    ev.Evidence,
		RootCause:   []string{fmt.Sprintf("Check the %s integration's credentials and the watchdog log lines with integration=%s.", integration, integration)},
		RunbookURL:  ev.RunbookURL,
		AlertURL:    ev.AlertURL,
		Integration: integration,
		StartsAt:    ev.At,
		At:          ev.At,
	}
	if isResolved(ev) {
		n.Summary = fmt.Sprintf("%s could not deliver the RESOLVE of %s on %s (incident %s): it ended, but %s may still show it open. %s",
			integration, ev.Class, ev.Replica, ev.Fingerprint, integration, ev.Summary)
		n.Diagnosis = fmt.Sprintf("Delivery to %s failed (reason %s): %s. The %s incident on %s is over according to the watchdog, but %s was not told.",
			integration, reason, msg, ev.Class, ev.Replica, integration)
		n.Emergency = []string{fmt.Sprintf("Resolve the %s incident on %s by hand in %s (dedup key %s).", ev.Class, ev.Replica, integration, ev.Fingerprint)}
		return n
	}
	n.Summary = fmt.Sprintf("%s could not deliver the %s %s of %s on %s (incident %s): %s",
		integration, ev.Severity, ev.Kind, ev.Class, ev.Replica, ev.Fingerprint, ev.Summary)
	n.Diagnosis = fmt.Sprintf("Delivery to %s failed (reason %s): %s. The incident below may not have reached on-call through %s; treat this message as the page.",
		integration, reason, msg, integration)
	n.Emergency = append([]string{fmt.Sprintf("Handle the %s incident on %s as if paged.", ev.Class, ev.Replica)}, ev.Emergency...)
	return n
}

// resolveNotice closes notice n at at, saying why; the incident the notice
// was about is not resolved by it, and the text says so.
func resolveNotice(n Event, why string, at time.Time) Event {
	r := n
	r.Seq++
	r.Kind, r.Status = KindResolve, StatusResolved
	r.EndsAt, r.At = at, at
	r.Summary = fmt.Sprintf("Delivery-failure notice closed: %s This says nothing about the incident itself. The notice was: %s", why, n.Summary)
	r.Diagnosis = fmt.Sprintf("%s The event %s lost was not re-sent; the incident's current state is in the watchdog's /api/v1/watchdog/alerts, and its next update or resolve goes to %s again.",
		why, n.Integration, n.Integration)
	r.Emergency, r.Evidence = nil, nil
	return r
}
