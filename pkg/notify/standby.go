package notify

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
)

// Standby: in a highly available deployment every copy scrapes, evaluates
// and sends its events to its dispatcher, but only the leader's dispatcher
// delivers. The others are on standby: they deliver nothing and write
// nothing to the shared store (the leader's), and remember only the newest
// event of each incident, to catch up on takeover with what the old leader
// never sent. The trade-off: the leader and its followers are fed the same
// findings, so a follower's events are the leader's, give or take an
// evaluation interval, and dropping them costs nothing while the leader
// lives; what the old leader queued but never delivered is in the shared
// outbox and the new leader delivers it after reloading; what happened
// while no copy led is caught up from memory. An attempt in flight when
// leadership is lost may be repeated by the new leader (at least once).

// maxMissed bounds what a standby dispatcher remembers; beyond it the
// oldest events are forgotten, resolves first.
const maxMissed = 5000

type standbyMetrics struct {
	active  prometheus.Gauge
	standby prometheus.Counter
}

func newStandbyMetrics(reg prometheus.Registerer) standbyMetrics {
	f := promauto.With(reg)
	return standbyMetrics{
		active: f.NewGauge(prometheus.GaugeOpts{
			Name: "watchdog_notification_active",
			Help: "1 when this copy delivers notifications; 0 on a standby copy (not the leader).",
		}),
		standby: f.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_notification_standby_events_total",
			Help: "Alert events a standby copy did not deliver because the leader delivers them.",
		}),
	}
}

// Active reports whether the dispatcher delivers (false in standby).
func (d *Dispatcher) Active() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.active
}

// SetActive switches between delivering (the leader) and standby (a
// follower) at now.
//
// Becoming active, every queue reloads its persisted state from the store,
// which in a highly available deployment is the ConfigMap the previous
// leader wrote: its undelivered outbox, its incident records (PagerDuty
// dedup keys, Slack channel and ts, what was last delivered) and a
// provider's Retry-After hold. Delivery then resumes where the old leader
// stopped, and this copy's events for incidents the old leader opened
// continue them: a trigger for an open incident becomes an update, so
// Slack edits the same message and PagerDuty gets no second trigger. Then
// it catches up on what it did not deliver in standby, for the incidents
// where that matters: an incident that started or ended while no leader
// was delivering (the old leader died before it sent it), or that changed
// severity or cause since the old leader's last word. The events the old
// leader had already sent are not sent again. When the state cannot be read
// a queue starts empty (the error is returned and logged): duplicate pages
// are better than none. Call it after the store has become writable, and
// let the tracker restore OpenIncidents after it.
//
// Becoming inactive, queues stop after the attempt in flight, whose result
// is not recorded, and write nothing more: the new leader owns the store.
// An event that attempt was delivering stays in the shared outbox and the
// new leader delivers it again (at least once across a failover).
//
// The dispatcher's own writer (DispatcherConfig.Store) is switched with
// it: made writable before the takeover reads the store, and made to drop
// this copy's unwritten outboxes after the queues stop, outside the lock
// Send takes, since it waits for a write under way.
func (d *Dispatcher) SetActive(active bool, now time.Time) error {
	if active && d.ownWriter {
		d.writer.SetWritable(true)
	}
	err := d.setActive(active, now)
	if !active && d.ownWriter {
		d.writer.SetWritable(false)
	}
	return err
}

func (d *Dispatcher) setActive(active bool, now time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if active == d.active {
		return nil
	}
	if !active {
		d.active = false
		for _, q := range d.queues {
			q.deactivate()
		}
		d.sm.active.Set(0)
		d.log.Warn("notification delivery on standby: another copy leads")
		return nil
	}
	var errs []error
	for _, q := range d.queues {
		if err := q.activate(now); err != nil {
			q.log.Error("notification state unreadable at takeover; starting with an empty outbox and no incident records", zap.Error(err))
			errs = append(errs, fmt.Errorf("integration %s: %w", q.name, err))
		}
	}
	d.loadNotices()
	d.missedMu.Lock()
	missed := d.missed
	d.missed = map[string]Event{}
	d.missedMu.Unlock()
	caught := d.catchUp(missed)
	d.active = true
	d.sm.active.Set(1)
	pending := 0
	for _, q := range d.queues {
		pending += q.Len()
	}
	d.log.Info("notification delivery active: took over the shared outbox and incident records",
		zap.Int("pending", pending), zap.Int("open_incidents", len(d.openIncidents())), zap.Int("caught_up", caught))
	return errors.Join(errs...)
}

// remember keeps ev as the newest undelivered event of its incident.
// Callers hold d.mu for reading.
func (d *Dispatcher) remember(ev Event) {
	d.sm.standby.Inc()
	if ev.Fingerprint == "" {
		return
	}
	d.missedMu.Lock()
	defer d.missedMu.Unlock()
	if cur, ok := d.missed[ev.Fingerprint]; ok && cur.At.After(ev.At) {
		return
	}
	d.missed[ev.Fingerprint] = ev
	if len(d.missed) <= maxMissed {
		return
	}
	var victim string
	var vev Event
	for fp, e := range d.missed {
		better := victim == "" ||
			(isResolved(e) && !isResolved(vev)) ||
			(isResolved(e) == isResolved(vev) && e.At.Before(vev.At))
		if better {
			victim, vev = fp, e
		}
	}
	delete(d.missed, victim)
}

func isResolved(ev Event) bool { return ev.Kind == KindResolve || ev.Status == StatusResolved }

// catchUp enqueues the missed events the integrations need, judged against
// what each will know once its outbox is delivered, and returns how many
// it enqueued. Callers hold d.mu for writing.
func (d *Dispatcher) catchUp(missed map[string]Event) int {
	if len(missed) == 0 {
		return 0
	}
	evs := slices.Collect(maps.Values(missed))
	slices.SortFunc(evs, func(a, b Event) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return cmp.Compare(a.Fingerprint, b.Fingerprint)
	})
	known := map[*Queue]map[string]Event{}
	for _, q := range d.queues {
		known[q] = q.incidents()
	}
	n := 0
	for _, ev := range evs {
		for _, q := range d.Targets(ev) {
			last, ok := known[q][ev.Fingerprint]
			if needsCatchUp(ev, last, ok) {
				q.Enqueue(ev)
				n++
			}
		}
	}
	return n
}

// needsCatchUp decides whether an integration whose newest event of the
// incident is last (ok false: it knows none) must still get ev, an event a
// standby copy did not deliver.
func needsCatchUp(ev, last Event, ok bool) bool {
	switch {
	case isResolved(ev):
		// It ended while nobody delivered: resolve what is still open.
		return ok && !isResolved(last)
	case !ok:
		// It started while nobody delivered: page.
		return true
	case isResolved(last):
		// A new episode after the resolve the integration knows.
		return ev.At.After(last.At)
	default:
		// Open on both sides: only a change worth telling (escalation, a
		// new cause); re-sending the same state would just edit the page.
		return ev.At.After(last.At) && (ev.Severity != last.Severity || !slices.Equal(ev.ExplainedBy, last.ExplainedBy))
	}
}
