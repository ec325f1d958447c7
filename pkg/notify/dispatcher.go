package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
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
	Store        Store // nil: nothing survives a restart
	Logger       *zap.Logger
	Registerer   prometheus.Registerer // nil: metrics are not registered
	LogWriter    io.Writer             // the built-in log integration's output; nil: structured log line only
	// Standby starts the dispatcher as a follower of a highly available
	// pair: it loads the persisted state (for OpenIncidents) but delivers
	// and writes nothing until SetActive(true).
	Standby bool
}

// Dispatcher routes events to the integrations' queues and runs them.
type Dispatcher struct {
	routes atomic.Pointer[RouteConfig] // swapped by SetRoutes (hot reload)
	log    *zap.Logger
	queues []*Queue
	byName map[string]*Queue
	sm     standbyMetrics

	// mu is held for reading by Send for its whole routing and enqueueing,
	// and for writing by SetActive, so that no event is half sent across a
	// leadership change.
	mu     sync.RWMutex
	active bool

	missedMu sync.Mutex
	missed   map[string]Event // standby: the newest event per fingerprint not delivered
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
		active: !cfg.Standby, missed: map[string]Event{}}
	routes := cfg.Routes
	d.routes.Store(&routes)
	var errs []error
	for _, in := range integrations {
		if _, dup := d.byName[in.Name]; dup {
			errs = append(errs, fmt.Errorf("integration %q configured twice", in.Name))
			continue
		}
		q, err := newQueue(in.Name, in.Notifier, in.Options, cfg.Store, logger, m, now, cfg.Standby)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		q.onFailed = d.reportFailure(in.Name)
		d.queues = append(d.queues, q)
		d.byName[in.Name] = q
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if d.active {
		d.sm.active.Set(1)
	}
	for i, r := range cfg.Routes.Routes {
		for _, n := range r.Integrations {
			if d.byName[n] == nil {
				logger.Warn("route names an integration that is not configured; it is skipped",
					zap.Int("route", i), zap.String("integration", n))
			}
		}
	}
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
	names := d.routes.Load().Match(ev.Severity, ev.Class)
	var out []*Queue
	for _, q := range d.queues {
		if q.name == IntegrationLog || slices.Contains(names, q.name) || q.Tracks(ev.Fingerprint) {
			out = append(out, q)
		}
	}
	return out
}

// Send routes ev and persists it in the outbox of every target. It does not
// wait for delivery. In standby (a follower) ev is neither delivered nor
// persisted: the leader, fed the same findings, sends the same incident,
// and SetActive(true) catches up on what the leader never sent.
func (d *Dispatcher) Send(ev Event) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.active {
		d.remember(ev)
		return
	}
	if ev.Fingerprint == "" {
		d.log.Error("notification without fingerprint; sent to the log only", zap.String("class", ev.Class), zap.String("replica", ev.Replica))
		d.byName[IntegrationLog].Enqueue(ev)
		return
	}
	for _, q := range d.Targets(ev) {
		q.Enqueue(ev)
	}
}

// Run runs every queue until ctx is cancelled and each has drained; it
// returns when all workers have exited.
func (d *Dispatcher) Run(ctx context.Context) error {
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
	newest := map[string]Event{}
	for _, q := range d.queues {
		for fp, ev := range q.incidents() {
			cur, ok := newest[fp]
			if !ok || ev.Seq > cur.Seq || (ev.Seq == cur.Seq && ev.At.After(cur.At)) {
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
// a permanently failed event: a warning notice goes to every other
// integration, so a page that cannot reach PagerDuty shows up in Slack and
// the other way round. Notices about notices are not sent.
func (d *Dispatcher) reportFailure(integration string) func(Event, error) {
	return func(ev Event, err error) {
		if ev.Class == ClassDeliveryFailure {
			return
		}
		notice := DeliveryFailureNotice(integration, ev, err)
		for _, q := range d.queues {
			if q.name != integration {
				q.Enqueue(notice)
			}
		}
	}
}

// DeliveryFailureNotice is the warning event reporting that integration
// could not deliver ev. It carries the incident's own summary and first
// steps, so the humans who get the notice can act on the incident.
func DeliveryFailureNotice(integration string, ev Event, err error) Event {
	reason := ReasonOf(err)
	if IsPermanent(err) && reason == ReasonUnknown {
		reason = ReasonClientError
	}
	what := fmt.Sprintf("%s %s", ev.Severity, ev.Kind)
	msg := err.Error()
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:300]) + "…(truncated)"
	}
	return Event{
		Fingerprint: "delivery-failure-" + integration + "-" + ev.Fingerprint,
		Seq:         ev.Seq,
		Kind:        KindTrigger,
		Status:      StatusFiring,
		Class:       ClassDeliveryFailure,
		Severity:    "warning",
		Replica:     ev.Replica,
		Model:       ev.Model,
		Layer:       ev.Layer,
		Summary:     fmt.Sprintf("%s could not deliver the %s of %s on %s: %s", integration, what, ev.Class, ev.Replica, ev.Summary),
		Diagnosis: fmt.Sprintf("Delivery to %s failed permanently (reason %s): %s. The incident below may not have reached on-call through %s; treat this message as the page.",
			integration, reason, msg, integration),
		Evidence:   ev.Evidence,
		Emergency:  append([]string{fmt.Sprintf("Handle the %s incident on %s as if paged.", ev.Class, ev.Replica)}, ev.Emergency...),
		RootCause:  []string{fmt.Sprintf("Check the %s integration's credentials and the watchdog log lines with integration=%s.", integration, integration)},
		RunbookURL: ev.RunbookURL,
		AlertURL:   ev.AlertURL,
		StartsAt:   ev.At,
		At:         ev.At,
	}
}
