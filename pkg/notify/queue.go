package notify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/persist"
)

// StateDocumentPrefix starts the name of every integration's state
// document: "notify-<integration>".
const StateDocumentPrefix = "notify-"

var validIntegrationName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// Queue is the delivery worker of one integration: it attempts what its
// outbox says is due, in order per incident, with retries and Retry-After
// holds, and saves the outbox through an asynchronous writer, so that
// neither Enqueue nor an attempt waits for the store. One worker; Run
// starts it.
type Queue struct {
	name     string
	notifier Notifier
	opts     QueueOptions
	store    *persist.Writer // nil: nothing persisted
	doc      string
	log      *zap.Logger
	m        *Metrics
	now      func() time.Time
	rand     func() float64
	onFailed func(ev Event, err error)
	// onDelivered is told of every event the provider accepted: the
	// integration works (again).
	onDelivered func(ev Event, now time.Time)
	// onAttempt is told of every delivery attempt's outcome.
	onAttempt func(Attempt)
	group     atomic.Pointer[drainGroup] // set by the dispatcher for the duration of Run

	wake chan struct{}

	mu        sync.Mutex
	box       *outbox
	lastErr   map[string]string // per fingerprint, to log a repeated failure once
	lastSaveE string
	// standby: a follower's queue. It delivers nothing, accepts nothing and
	// writes nothing; box is what was last loaded, for OpenIncidents.
	standby bool
	// gen changes whenever box is replaced or standby toggled, so that an
	// attempt that was in flight across the change does not apply its
	// result to state it no longer belongs to.
	gen uint64
}

// newQueue builds the queue of one integration, optionally in standby (see
// Dispatcher.SetActive), and loads its persisted outbox and incident
// records from store (nil: nothing persisted). An unreadable document is
// reported and the queue starts empty. It starts no goroutine.
func newQueue(name string, n Notifier, opts QueueOptions, store *persist.Writer, logger *zap.Logger, m *Metrics, now time.Time, standby bool) (*Queue, error) {
	if !validIntegrationName.MatchString(name) {
		return nil, fmt.Errorf("integration name %q: want lower-case letters, digits, _ or -", name)
	}
	if n == nil {
		return nil, fmt.Errorf("integration %s: no notifier", name)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("integration %s: %w", name, err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	q := &Queue{
		name:     name,
		notifier: n,
		opts:     opts.withDefaults(),
		store:    store,
		doc:      StateDocumentPrefix + name,
		log:      logger.With(zap.String("integration", name)),
		m:        m,
		now:      time.Now,
		rand:     rand.Float64,
		wake:     make(chan struct{}, 1),
		lastErr:  map[string]string{},
		standby:  standby,
	}
	var err error
	q.box, err = q.load(now)
	if err != nil {
		q.log.Error("notification state unreadable; starting with an empty outbox", zap.Error(err))
	}
	if q.box.len() > 0 && !standby {
		q.log.Info("undelivered notifications restored", zap.Int("pending", q.box.len()))
	}
	m.initFor(name, q.oldestAge)
	m.queueLen.WithLabelValues(name).Set(float64(q.Len()))
	return q, nil
}

// load reads the persisted outbox and incident records; on error (already
// reported by the store as moved aside, or the store is unreachable) it
// returns an empty outbox with the error.
func (q *Queue) load(now time.Time) (*outbox, error) {
	b := newOutbox(q.opts)
	if q.store == nil {
		return b, nil
	}
	var d queueDoc
	if err := q.store.Load(q.doc, &d, now); err != nil {
		return b, err
	}
	if asked := b.restore(d, now); !asked.IsZero() {
		q.log.Warn("restored Retry-After hold exceeds max_retry_after; capped",
			zap.Time("hold_until", asked), zap.Duration("max_retry_after", q.opts.MaxRetryAfter))
	}
	return b, nil
}

// activate reloads the persisted state (the previous leader's outbox,
// incident records and Retry-After hold) and starts delivering. When the
// state cannot be read the queue starts empty, as at start-up, and the
// error is returned.
func (q *Queue) activate(now time.Time) error {
	b, err := q.load(now) // no lock: the worker is idle in standby
	q.mu.Lock()
	q.box = b
	q.gen++
	clear(q.lastErr)
	q.lastSaveE = ""
	q.standby = false
	n := b.len()
	q.m.queueLen.WithLabelValues(q.name).Set(float64(n))
	q.mu.Unlock()
	if n > 0 {
		q.log.Info("taking over undelivered notifications", zap.Int("pending", n))
	}
	if g := q.group.Load(); g != nil {
		g.setBusy(q)
	}
	q.poke()
	return err
}

// deactivate stops delivering and persisting. An attempt in flight runs to
// its end, but its result is not applied or saved: the new leader owns the
// shared state.
func (q *Queue) deactivate() {
	q.mu.Lock()
	q.standby = true
	q.gen++
	q.m.queueLen.WithLabelValues(q.name).Set(0)
	q.mu.Unlock()
	q.poke()
}

func (q *Queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Name is the integration's name.
func (q *Queue) Name() string { return q.name }

// Len is the number of undelivered events; 0 in standby, where the
// outbox is the leader's.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.standby {
		return 0
	}
	return q.box.len()
}

func (q *Queue) oldestAge() float64 {
	q.mu.Lock()
	oldest, ok := q.box.oldest()
	standby := q.standby
	q.mu.Unlock()
	if !ok || standby {
		return 0
	}
	return max(0, q.now().Sub(oldest).Seconds())
}

// Tracks reports whether the integration has fingerprint open or pending,
// so that later events of the incident (its resolve above all) reach it even
// when the route would no longer select it.
func (q *Queue) Tracks(fingerprint string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.box.tracks(fingerprint)
}

// Enqueue adds ev to the outbox (see outbox.enqueue) and saves it; the
// save returns without waiting for the store. enqueuedAt is ev.At, or the
// current time when ev.At is zero. In standby ev is dropped: the leader
// delivers it (see Dispatcher.SetActive).
func (q *Queue) Enqueue(ev Event) {
	at := ev.At
	if at.IsZero() {
		at = q.now()
	}
	q.mu.Lock()
	if q.standby {
		q.mu.Unlock()
		return
	}
	a := q.box.enqueue(ev, at)
	q.m.total.WithLabelValues(q.name, ResultSkipped).Add(float64(a.superseded))
	if a.beyondBound {
		q.log.Warn("notification outbox full of resolves; keeping this resolve beyond max_pending",
			zap.String("fingerprint", ev.Fingerprint), zap.Int("pending", q.box.len()-1), zap.Int("max_pending", q.opts.MaxPending))
	}
	var full error
	if len(a.dropped) > 0 {
		full = WithReason(fmt.Errorf("%w: %d undelivered notifications waiting (max_pending %d)",
			ErrOutboxFull, q.box.len(), q.opts.MaxPending), ReasonQueueFull)
		for _, d := range a.dropped {
			q.m.failures.WithLabelValues(q.name, string(ReasonQueueFull)).Inc()
			q.lostLocked(d, full, 0)
		}
	}
	q.saveLocked(at)
	q.m.queueLen.WithLabelValues(q.name).Set(float64(q.box.len()))
	onFailed := q.onFailed
	q.mu.Unlock()
	if g := q.group.Load(); g != nil {
		g.setBusy(q)
	}
	q.poke()
	if onFailed != nil {
		for _, d := range a.dropped {
			onFailed(d, full)
		}
	}
	for _, d := range a.dropped {
		q.reportAttempt(Attempt{Event: d, At: at, Reason: ReasonQueueFull, GaveUp: true})
	}
}

// lostLocked counts and loudly logs an event that will never be delivered.
func (q *Queue) lostLocked(ev Event, err error, attempts int) {
	q.m.total.WithLabelValues(q.name, ResultFailed).Inc()
	q.log.Error("NOTIFICATION LOST: "+lostWhy(err),
		zap.String("fingerprint", ev.Fingerprint), zap.String("kind", string(ev.Kind)),
		zap.String("class", ev.Class), zap.Stringer("severity", ev.Severity), zap.String("replica", ev.Replica),
		zap.String("reason", string(ReasonOf(err))), zap.Int("attempts", attempts), zap.Error(err))
}

func lostWhy(err error) string {
	if errors.Is(err, ErrOutboxFull) {
		return "dropped from a full outbox"
	}
	return "delivery failed permanently"
}

// drainGroup lets the queues of one dispatcher finish their drains
// together: a queue that ran empty stays ready for failure notices from the
// others until every queue is idle (or the drain deadline passes).
type drainGroup struct {
	mu     sync.Mutex
	active int
	idle   map[*Queue]bool
	done   chan struct{}
}

func newDrainGroup(n int) *drainGroup {
	return &drainGroup{active: n, idle: map[*Queue]bool{}, done: make(chan struct{})}
}

func (g *drainGroup) setIdle(q *Queue) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idle[q] || g.active == 0 {
		return
	}
	g.idle[q] = true
	g.active--
	if g.active == 0 {
		close(g.done)
	}
}

func (g *drainGroup) setBusy(q *Queue) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idle[q] && g.active > 0 {
		g.idle[q] = false
		g.active++
	}
}

// Run delivers events until ctx is cancelled, then drains for at most the
// drain timeout on a fresh context; what is still undelivered stays in the
// persisted outbox. It returns when its worker has stopped.
func (q *Queue) Run(ctx context.Context) error {
	q.loop(ctx, false)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.opts.DrainTimeout)
	defer cancel()
	q.loop(dctx, true)
	if n := q.Len(); n > 0 {
		q.log.Warn("shutting down with undelivered notifications; they are kept for the next start", zap.Int("pending", n))
	}
	return nil
}

func (q *Queue) loop(ctx context.Context, drain bool) {
	// An attempt in flight when ctx is cancelled runs to its end (bounded by
	// the attempt timeout) rather than being cut off mid-request, which
	// could leave the provider with the event and us without the answer.
	// While draining, the drain deadline bounds it.
	attemptCtx := ctx
	if !drain {
		attemptCtx = context.WithoutCancel(ctx)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	timer.Stop()
	// A Refresher's open incidents are re-sent at once (they may have
	// expired at the provider while the daemon was down) and then every
	// interval; not while draining, which only finishes what is queued.
	var refresh time.Duration
	var nextRefresh time.Time
	if r, ok := q.notifier.(Refresher); ok && !drain && r.RefreshInterval() > 0 {
		refresh, nextRefresh = r.RefreshInterval(), q.now()
	}
	for ctx.Err() == nil {
		q.mu.Lock()
		now := q.now()
		if refresh > 0 && !now.Before(nextRefresh) {
			q.refreshLocked(now)
			nextRefresh = now.Add(refresh)
		}
		var p *pending
		var wait time.Duration
		empty := true
		if !q.standby {
			p, wait, empty = q.box.next(now, drain)
		}
		var ev Event
		if p != nil {
			ev = p.Event
		}
		gen := q.gen
		q.mu.Unlock()
		if p != nil {
			q.attempt(attemptCtx, p.ID, ev, gen)
			continue
		}
		if empty && drain {
			g := q.group.Load()
			if g == nil {
				return
			}
			// Idle, but another integration still draining may report a
			// failure through this one: wait for that or for all to be idle.
			g.setIdle(q)
			select {
			case <-ctx.Done():
				return
			case <-g.done:
				return
			case <-q.wake:
				continue
			}
		}
		var tc <-chan time.Time
		timed := !empty
		if refresh > 0 {
			if untilRefresh := nextRefresh.Sub(now); !timed || untilRefresh < wait {
				wait, timed = untilRefresh, true
			}
		}
		if timed {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-ctx.Done():
		case <-q.wake:
		case <-tc:
		}
		timer.Stop()
	}
}

func (q *Queue) attempt(ctx context.Context, id uint64, ev Event, gen uint64) {
	q.mu.Lock()
	if q.gen != gen {
		q.mu.Unlock()
		return
	}
	send, ok, inc := q.box.prepare(ev)
	q.mu.Unlock()

	var err error
	if ok {
		actx, cancel := context.WithTimeout(ctx, q.opts.AttemptTimeout)
		if in, isInc := q.notifier.(IncidentNotifier); isInc {
			err = in.NotifyIncident(actx, send, &inc)
		} else {
			err = q.notifier.Notify(actx, send)
		}
		cancel()
	} else {
		err = ErrNothingToSend
	}
	now := q.now()

	q.mu.Lock()
	if q.gen != gen {
		// Leadership changed during the attempt: the shared state is no
		// longer ours to write. The event stays in the store's outbox and
		// the leader delivers it again (at least once across failover).
		q.mu.Unlock()
		q.log.Warn("leadership changed during a delivery attempt; its result is not recorded",
			zap.String("fingerprint", ev.Fingerprint), zap.String("kind", string(send.Kind)), zap.Error(err))
		return
	}
	s, found := q.box.settle(id, send, inc, err, now, ctx.Err() != nil, q.rand())
	if !found {
		q.mu.Unlock()
		return
	}
	q.recordLocked(send, err, s, now)
	q.saveLocked(now)
	q.m.queueLen.WithLabelValues(q.name).Set(float64(q.box.len()))
	onFailed, onDelivered := q.onFailed, q.onDelivered
	q.mu.Unlock()
	switch {
	case err == nil:
		q.reportAttempt(Attempt{Event: send, Number: s.attempts + 1, At: now, Delivered: true})
	case !errors.Is(err, ErrNothingToSend) && ctx.Err() == nil:
		q.reportAttempt(Attempt{Event: send, Number: s.attempts, At: now, Reason: ReasonOf(err), GaveUp: s.gaveUp != nil})
	}
	if s.gaveUp != nil && onFailed != nil {
		onFailed(send, s.gaveUp)
	}
	if err == nil && onDelivered != nil {
		onDelivered(send, now)
	}
}

// recordLocked counts and logs the outcome err of an attempt to deliver
// send, as the outbox settled it.
func (q *Queue) recordLocked(send Event, err error, s settlement, now time.Time) {
	fp := send.Fingerprint
	switch {
	case err == nil:
		q.m.total.WithLabelValues(q.name, ResultDelivered).Inc()
		q.m.latency.WithLabelValues(q.name).Observe(max(0, now.Sub(s.enqueuedAt).Seconds()))
		if _, had := q.lastErr[fp]; had {
			q.log.Info("notification delivered after retries", zap.String("fingerprint", fp),
				zap.String("kind", string(send.Kind)), zap.Int("attempts", s.attempts+1))
		}
		delete(q.lastErr, fp)
		return
	case errors.Is(err, ErrNothingToSend):
		q.m.total.WithLabelValues(q.name, ResultSkipped).Inc()
		delete(q.lastErr, fp)
		return
	}
	reason := ReasonOf(err)
	q.m.failures.WithLabelValues(q.name, string(reason)).Inc()
	if s.gaveUp != nil {
		delete(q.lastErr, fp)
		q.lostLocked(send, s.gaveUp, s.attempts)
		return
	}
	if s.retryAt.IsZero() {
		return // shutting down: kept for the drain or the next start
	}
	q.m.retries.WithLabelValues(q.name).Inc()
	if s.retryAfterAsked > 0 {
		q.log.Warn("provider asked to wait longer than max_retry_after; waiting the cap",
			zap.Duration("retry_after", s.retryAfterAsked), zap.Duration("max_retry_after", q.opts.MaxRetryAfter))
	}
	if q.lastErr[fp] != err.Error() {
		q.lastErr[fp] = err.Error()
		q.log.Warn("notification delivery failed; will retry",
			zap.String("fingerprint", fp), zap.String("kind", string(send.Kind)),
			zap.String("reason", string(reason)), zap.Int("attempt", s.attempts),
			zap.Time("next_attempt", s.retryAt), zap.Error(err))
	}
}

// refreshLocked re-sends the integration's open incidents (outbox.refresh).
func (q *Queue) refreshLocked(now time.Time) {
	if q.standby {
		return
	}
	n := q.box.refresh(now)
	if n == 0 {
		return
	}
	q.log.Debug("refreshing open incidents", zap.Int("incidents", n))
	q.saveLocked(now)
	q.m.queueLen.WithLabelValues(q.name).Set(float64(q.box.len()))
}

// saveLocked prunes the incident records and hands the document to the
// writer, which encodes it at once and writes it later: no I/O here.
func (q *Queue) saveLocked(now time.Time) {
	if evicted, open := q.box.prune(now); evicted > 0 {
		q.m.recordsEvicted.WithLabelValues(q.name).Add(float64(evicted))
		if open > 0 {
			q.log.Warn("incident records beyond max_records: forgot the oldest open ones; their next event opens a new page",
				zap.Int("evicted", evicted), zap.Int("open_evicted", open), zap.Int("max_records", q.opts.MaxRecords))
		}
	}
	if q.store == nil || q.standby {
		return
	}
	if err := q.store.Save(q.doc, &q.box.doc); err != nil {
		q.m.saveFails.WithLabelValues(q.name).Inc()
		if err.Error() != q.lastSaveE {
			q.lastSaveE = err.Error()
			q.log.Error("cannot persist the notification outbox; undelivered events would be lost on restart", zap.Error(err))
		}
		return
	}
	q.lastSaveE = ""
}

// incidents folds the records and the outbox into the newest event per
// fingerprint, as the integration will know it once the outbox is delivered.
func (q *Queue) incidents() map[string]Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.box.incidents()
}
