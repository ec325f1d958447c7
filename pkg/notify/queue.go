package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// QueueOptions tune one integration's queue. Zero fields take the defaults
// of DefaultQueueOptions.
type QueueOptions struct {
	// InitialBackoff is the delay before the first retry of a retryable failure.
	InitialBackoff time.Duration `yaml:"initial_backoff"`
	// MaxBackoff caps the exponential backoff.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// MaxRetryDuration bounds how long one event is retried after its first
	// attempt; then it counts as permanently failed and is reported.
	MaxRetryDuration time.Duration `yaml:"max_retry_duration"`
	// AttemptTimeout bounds one delivery attempt.
	AttemptTimeout time.Duration `yaml:"attempt_timeout"`
	// DrainTimeout bounds the delivery of what is pending at shutdown; what
	// is left stays in the persisted outbox for the next start.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// MaxPending bounds the outbox. A full outbox drops the oldest firing
	// update or repeat first, then the oldest trigger, and never a resolve:
	// resolves are admitted beyond the bound. Every drop is counted, logged
	// and reported through the other integrations. At the default a full
	// outbox is about 1.8 MB of JSON, 140 KB as the HA ConfigMap store
	// compresses it: a share of the ConfigMap's 1 MiB.
	MaxPending int `yaml:"max_pending"`
	// ResolvedRetention is how long a resolved incident record is kept to
	// recognise a duplicate resolve.
	ResolvedRetention time.Duration `yaml:"resolved_retention"`
	// MaxRecords caps the incident records kept (they are persisted with the
	// outbox, in HA in a ConfigMap of at most 1 MiB). Beyond it the oldest
	// resolved records go first, then the oldest open delivery-failure
	// notices, then the oldest open incidents (counted and logged).
	MaxRecords int `yaml:"max_records"`
	// NoticeRetention bounds how long a delivery-failure notice stays open
	// when the failing integration delivers nothing again: then it is
	// resolved as expired and its records pruned.
	NoticeRetention time.Duration `yaml:"notice_retention"`
	// MaxRetryAfter caps the wait a provider may ask for with Retry-After
	// (and a wait restored from the persisted state), so that one bad or
	// hostile header cannot silence an integration for hours.
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
}

// Defaults that callers outside this package (configuration) name.
const (
	DefaultMaxRetryAfter = 5 * time.Minute
	DefaultMaxRecords    = 1000
)

// DefaultQueueOptions are the defaults for every integration.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{
		InitialBackoff:    time.Second,
		MaxBackoff:        2 * time.Minute,
		MaxRetryDuration:  30 * time.Minute,
		AttemptTimeout:    15 * time.Second,
		DrainTimeout:      10 * time.Second,
		MaxPending:        1000,
		ResolvedRetention: 7 * 24 * time.Hour,
		MaxRecords:        DefaultMaxRecords,
		NoticeRetention:   24 * time.Hour,
		MaxRetryAfter:     DefaultMaxRetryAfter,
	}
}

// or fills the zero fields of o from d.
func (o QueueOptions) or(d QueueOptions) QueueOptions {
	return QueueOptions{
		InitialBackoff:    cmp.Or(o.InitialBackoff, d.InitialBackoff),
		MaxBackoff:        cmp.Or(o.MaxBackoff, d.MaxBackoff),
		MaxRetryDuration:  cmp.Or(o.MaxRetryDuration, d.MaxRetryDuration),
		AttemptTimeout:    cmp.Or(o.AttemptTimeout, d.AttemptTimeout),
		DrainTimeout:      cmp.Or(o.DrainTimeout, d.DrainTimeout),
		MaxPending:        cmp.Or(o.MaxPending, d.MaxPending),
		ResolvedRetention: cmp.Or(o.ResolvedRetention, d.ResolvedRetention),
		MaxRecords:        cmp.Or(o.MaxRecords, d.MaxRecords),
		NoticeRetention:   cmp.Or(o.NoticeRetention, d.NoticeRetention),
		MaxRetryAfter:     cmp.Or(o.MaxRetryAfter, d.MaxRetryAfter),
	}
}

func (o QueueOptions) withDefaults() QueueOptions {
	d := DefaultQueueOptions()
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = d.InitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = d.MaxBackoff
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = o.InitialBackoff
	}
	if o.MaxRetryDuration <= 0 {
		o.MaxRetryDuration = d.MaxRetryDuration
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = d.AttemptTimeout
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = d.DrainTimeout
	}
	if o.MaxPending <= 0 {
		o.MaxPending = d.MaxPending
	}
	if o.ResolvedRetention <= 0 {
		o.ResolvedRetention = d.ResolvedRetention
	}
	if o.MaxRecords <= 0 {
		o.MaxRecords = d.MaxRecords
	}
	if o.NoticeRetention <= 0 {
		o.NoticeRetention = d.NoticeRetention
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = d.MaxRetryAfter
	}
	return o
}

// Validate reports options that cannot work; zero values mean "default".
func (o QueueOptions) Validate() error {
	var errs []error
	neg := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", name, d))
		}
	}
	neg("initial_backoff", o.InitialBackoff)
	neg("max_backoff", o.MaxBackoff)
	neg("max_retry_duration", o.MaxRetryDuration)
	neg("attempt_timeout", o.AttemptTimeout)
	neg("drain_timeout", o.DrainTimeout)
	neg("resolved_retention", o.ResolvedRetention)
	neg("notice_retention", o.NoticeRetention)
	neg("max_retry_after", o.MaxRetryAfter)
	if o.MaxPending < 0 {
		errs = append(errs, fmt.Errorf("max_pending: must not be negative, got %d", o.MaxPending))
	}
	if o.MaxRecords < 0 {
		errs = append(errs, fmt.Errorf("max_records: must not be negative, got %d", o.MaxRecords))
	}
	if o.MaxBackoff > 0 && o.InitialBackoff > o.MaxBackoff {
		errs = append(errs, fmt.Errorf("max_backoff: %s is below initial_backoff %s", o.MaxBackoff, o.InitialBackoff))
	}
	return errors.Join(errs...)
}

// jitterFraction is the share of a backoff delay that is randomised.
const jitterFraction = 0.2

// Backoff is the delay before retry number retry (1 = the first retry):
// initial·2^(retry-1), capped at max, with the top 20% randomised by u in
// [0,1) so that many queues recovering together do not retry in lockstep.
// The result is never above max.
func Backoff(retry int, initial, max time.Duration, u float64) time.Duration {
	if retry < 1 {
		retry = 1
	}
	d := float64(initial) * math.Pow(2, float64(retry-1))
	if d > float64(max) || math.IsInf(d, 0) {
		d = float64(max)
	}
	return time.Duration(d*(1-jitterFraction) + d*jitterFraction*u)
}

// Incident is what one integration remembers about one incident across
// restarts: whether it is open there, the last event delivered, and
// integration-specific references (Slack channel and ts).
type Incident struct {
	Fingerprint string            `json:"fingerprint"`
	Open        bool              `json:"open"`
	Last        Event             `json:"last"`
	Ref         map[string]string `json:"ref,omitempty"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

func (inc *Incident) clone() Incident {
	c := *inc
	c.Ref = make(map[string]string, len(inc.Ref))
	for k, v := range inc.Ref {
		c.Ref[k] = v
	}
	return c
}

// IncidentNotifier is a Notifier that needs the incident record: what was
// delivered last (to describe what changed) and its own references, which it
// may change in inc.Ref. The queue persists inc.Ref after every attempt,
// successful or not, so that a posted Slack parent is never posted twice.
type IncidentNotifier interface {
	Notifier
	NotifyIncident(ctx context.Context, ev Event, inc *Incident) error
}

// plan decides what an integration is sent for ev, given its record of the
// incident (nil when it has none). It makes deliveries idempotent across
// restarts: a trigger for an incident that is already open is an update; an
// update for an incident the integration never opened (its trigger failed, or
// the route escalated to it) is a trigger; a resolve already delivered is
// skipped.
func plan(ev Event, inc *Incident) (Event, bool) {
	switch ev.Kind {
	case KindResolve:
		if inc != nil && !inc.Open && inc.Last.Kind == KindResolve && inc.Last.StartsAt.Equal(ev.StartsAt) {
			return ev, false
		}
	case KindTrigger:
		if inc != nil && inc.Open {
			ev.Kind = KindUpdate
		}
	case KindUpdate, KindRepeat:
		if inc == nil || !inc.Open {
			ev.Kind = KindTrigger
		}
	}
	return ev, true
}

type pending struct {
	ID           uint64    `json:"id"`
	Event        Event     `json:"event"`
	EnqueuedAt   time.Time `json:"enqueued_at"`
	Attempts     int       `json:"attempts,omitempty"`
	FirstAttempt time.Time `json:"first_attempt,omitzero"`
	NotBefore    time.Time `json:"not_before,omitzero"`
}

type queueDoc struct {
	Version   int                  `json:"version"`
	NextID    uint64               `json:"next_id"`
	HoldUntil time.Time            `json:"hold_until,omitzero"` // provider's Retry-After, for every event
	Outbox    []*pending           `json:"outbox"`
	Incidents map[string]*Incident `json:"incidents"`
}

var validIntegrationName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// Queue delivers the events of one integration in order per incident, with
// retries, and persists its outbox and incident records. One worker; Run
// starts it.
type Queue struct {
	name     string
	notifier Notifier
	opts     QueueOptions
	store    Store
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
	state     queueDoc
	inflight  uint64
	lastErr   map[string]string // per fingerprint, to log a repeated failure once
	lastSaveE string
	// standby: a follower's queue. It delivers nothing, accepts nothing and
	// writes nothing; state is what was last loaded, for OpenIncidents.
	standby bool
	// gen changes whenever state is replaced or standby toggled, so that
	// an attempt that was in flight across the change does not apply its
	// result to state it no longer belongs to.
	gen uint64
}

// NewQueue builds the queue of one integration and loads its persisted
// outbox and incident records from store (nil: nothing persisted). An
// unreadable document is reported and the queue starts empty. It starts no
// goroutine.
func NewQueue(name string, n Notifier, opts QueueOptions, store Store, logger *zap.Logger, m *Metrics, now time.Time) (*Queue, error) {
	return newQueue(name, n, opts, store, logger, m, now, false)
}

// newQueue is NewQueue, optionally in standby (see Dispatcher.SetActive).
func newQueue(name string, n Notifier, opts QueueOptions, store Store, logger *zap.Logger, m *Metrics, now time.Time, standby bool) (*Queue, error) {
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
		doc:      "notify-" + name,
		log:      logger.With(zap.String("integration", name)),
		m:        m,
		now:      time.Now,
		rand:     rand.Float64,
		wake:     make(chan struct{}, 1),
		lastErr:  map[string]string{},
		standby:  standby,
	}
	var err error
	q.state, err = q.load(now)
	if err != nil {
		q.log.Error("notification state unreadable; starting with an empty outbox", zap.Error(err))
	}
	if len(q.state.Outbox) > 0 && !standby {
		q.log.Info("undelivered notifications restored", zap.Int("pending", len(q.state.Outbox)))
	}
	m.initFor(name, q.oldestAge)
	m.queueLen.WithLabelValues(name).Set(float64(q.Len()))
	return q, nil
}

// load reads the persisted outbox and incident records; on error (already
// reported by the store as moved aside, or the store is unreachable) it
// returns empty state with the error.
func (q *Queue) load(now time.Time) (queueDoc, error) {
	empty := queueDoc{Version: 1, NextID: 1, Incidents: map[string]*Incident{}}
	if q.store == nil {
		return empty, nil
	}
	var d queueDoc
	if err := q.store.Load(q.doc, &d, now); err != nil {
		return empty, err
	}
	if d.Version == 0 {
		return empty, nil
	}
	if d.Incidents == nil {
		d.Incidents = map[string]*Incident{}
	}
	// A damaged or hand-edited document may hold null entries; they carry
	// nothing to deliver or to remember, and would be dereferenced below.
	d.Outbox = slices.DeleteFunc(d.Outbox, func(p *pending) bool { return p == nil })
	maps.DeleteFunc(d.Incidents, func(_ string, inc *Incident) bool { return inc == nil })
	if d.NextID == 0 {
		d.NextID = 1
	}
	for _, p := range d.Outbox {
		if p.ID >= d.NextID {
			d.NextID = p.ID + 1
		}
	}
	// A wait restored from disk is capped like a fresh one: the document
	// may come from a build without the cap, or the clock may have jumped.
	if limit := now.Add(q.opts.MaxRetryAfter); d.HoldUntil.After(limit) {
		q.log.Warn("restored Retry-After hold exceeds max_retry_after; capped",
			zap.Time("hold_until", d.HoldUntil), zap.Duration("max_retry_after", q.opts.MaxRetryAfter))
		d.HoldUntil = limit
	}
	latest := now.Add(max(q.opts.MaxRetryAfter, q.opts.MaxBackoff))
	for _, p := range d.Outbox {
		if p.NotBefore.After(latest) {
			p.NotBefore = latest
		}
	}
	return d, nil
}

// activate reloads the persisted state (the previous leader's outbox,
// incident records and Retry-After hold) and starts delivering. When the
// state cannot be read the queue starts empty, as at start-up, and the
// error is returned.
func (q *Queue) activate(now time.Time) error {
	d, err := q.load(now) // no lock: the worker is idle in standby
	q.mu.Lock()
	q.state = d
	q.gen++
	q.inflight = 0
	clear(q.lastErr)
	q.lastSaveE = ""
	q.standby = false
	n := len(q.state.Outbox)
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
	return len(q.state.Outbox)
}

func (q *Queue) oldestAge() float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.state.Outbox) == 0 || q.standby {
		return 0
	}
	oldest := q.state.Outbox[0].EnqueuedAt
	for _, p := range q.state.Outbox[1:] {
		if p.EnqueuedAt.Before(oldest) {
			oldest = p.EnqueuedAt
		}
	}
	age := q.now().Sub(oldest).Seconds()
	if age < 0 {
		return 0
	}
	return age
}

// Tracks reports whether the integration has fingerprint open or pending,
// so that later events of the incident (its resolve above all) reach it even
// when the route would no longer select it.
func (q *Queue) Tracks(fingerprint string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if inc := q.state.Incidents[fingerprint]; inc != nil && inc.Open {
		return true
	}
	for _, p := range q.state.Outbox {
		if p.Event.Fingerprint == fingerprint {
			return true
		}
	}
	return false
}

// Enqueue adds ev to the outbox and persists it. Updates still waiting are
// superseded by a newer update of the same incident and dropped by its
// resolve; triggers and resolves are never merged away, so the order
// trigger → resolve always reaches the integration. enqueuedAt is ev.At, or
// the current time when ev.At is zero. In standby ev is dropped: the
// leader delivers it (see Dispatcher.SetActive).
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
	dropped := q.enqueueLocked(ev, at)
	var full error
	if len(dropped) > 0 {
		full = WithReason(fmt.Errorf("%w: %d undelivered notifications waiting (max_pending %d)",
			ErrOutboxFull, len(q.state.Outbox), q.opts.MaxPending), ReasonQueueFull)
		for _, d := range dropped {
			q.m.failures.WithLabelValues(q.name, string(ReasonQueueFull)).Inc()
			q.lostLocked(d, full, 0)
		}
	}
	q.saveLocked(at)
	q.m.queueLen.WithLabelValues(q.name).Set(float64(len(q.state.Outbox)))
	onFailed := q.onFailed
	q.mu.Unlock()
	if g := q.group.Load(); g != nil {
		g.setBusy(q)
	}
	q.poke()
	if onFailed != nil {
		for _, d := range dropped {
			onFailed(d, full)
		}
	}
	for _, d := range dropped {
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

func isFiringUpdate(ev Event) bool {
	return (ev.Kind == KindUpdate || ev.Kind == KindRepeat) && ev.Status != StatusResolved
}

// Priorities of events in a full outbox: the lowest goes first. A resolve
// closes a page someone may be working on, a trigger opens one, an update
// or repeat only refreshes what the integration already shows.
const (
	priorityUpdate = iota
	priorityTrigger
	priorityResolve
)

func priority(ev Event) int {
	switch {
	case isResolved(ev):
		return priorityResolve
	case ev.Kind == KindTrigger:
		return priorityTrigger
	}
	return priorityUpdate
}

// enqueueLocked adds ev to the outbox and returns what a full outbox
// dropped for it (ev itself when everything waiting matters more).
func (q *Queue) enqueueLocked(ev Event, at time.Time) (dropped []Event) {
	box := q.state.Outbox
	switch {
	case isFiringUpdate(ev):
		// Supersede the newest pending update of the incident, unless
		// something else of the incident follows it or it is in flight.
		for i := len(box) - 1; i >= 0; i-- {
			p := box[i]
			if p.Event.Fingerprint != ev.Fingerprint {
				continue
			}
			if p.ID != q.inflight && isFiringUpdate(p.Event) {
				if p.Event.Kind == KindUpdate {
					ev.Kind = KindUpdate
				}
				p.Event = ev
				return nil
			}
			break
		}
	case ev.Kind == KindResolve:
		kept := box[:0]
		for _, p := range box {
			if p.Event.Fingerprint == ev.Fingerprint && p.ID != q.inflight && isFiringUpdate(p.Event) {
				q.m.total.WithLabelValues(q.name, ResultSkipped).Inc()
				continue
			}
			kept = append(kept, p)
		}
		clear(box[len(kept):])
		box = kept
	}
	if len(box) >= q.opts.MaxPending {
		victim := q.victimLocked(box)
		switch {
		case victim >= 0 && priority(box[victim].Event) <= priority(ev) && priority(box[victim].Event) < priorityResolve:
			dropped = append(dropped, box[victim].Event)
			box = slices.Delete(box, victim, victim+1)
		case priority(ev) == priorityResolve:
			// Resolves are never dropped for space: the outbox holds only
			// resolves (and the event in flight), so it grows past the bound.
			q.log.Warn("notification outbox full of resolves; keeping this resolve beyond max_pending",
				zap.String("fingerprint", ev.Fingerprint), zap.Int("pending", len(box)), zap.Int("max_pending", q.opts.MaxPending))
		default:
			q.state.Outbox = box
			return []Event{ev}
		}
	}
	q.state.Outbox = append(box, &pending{ID: q.state.NextID, Event: ev, EnqueuedAt: at})
	q.state.NextID++
	return dropped
}

// victimLocked is the index of the oldest pending event of the lowest
// priority that is not in flight, -1 when there is none.
func (q *Queue) victimLocked(box []*pending) int {
	victim := -1
	for i, p := range box {
		if p.ID == q.inflight {
			continue
		}
		if victim < 0 || priority(p.Event) < priority(box[victim].Event) {
			victim = i
		}
	}
	return victim
}

// pickLocked selects the next event to attempt at now: the oldest head of an
// incident whose backoff has passed (resolves first when draining). It
// returns the delay until something may become due, or empty.
func (q *Queue) pickLocked(now time.Time, resolvesFirst bool) (p *pending, wait time.Duration, empty bool) {
	box := q.state.Outbox
	if len(box) == 0 || q.standby {
		return nil, 0, true
	}
	if q.state.HoldUntil.After(now) {
		return nil, q.state.HoldUntil.Sub(now), false
	}
	seen := make(map[string]bool, len(box))
	var due *pending
	var next time.Time
	for _, c := range box {
		if seen[c.Event.Fingerprint] {
			continue // order per incident: only its oldest event may go
		}
		seen[c.Event.Fingerprint] = true
		if c.NotBefore.After(now) {
			if next.IsZero() || c.NotBefore.Before(next) {
				next = c.NotBefore
			}
			continue
		}
		if due == nil || (resolvesFirst && c.Event.Kind == KindResolve && due.Event.Kind != KindResolve) {
			due = c
			if !resolvesFirst {
				break
			}
		}
	}
	if due != nil {
		q.inflight = due.ID
		return due, 0, false
	}
	return nil, next.Sub(now), false
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
		p, wait, empty := q.pickLocked(now, drain)
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
	rec := q.state.Incidents[ev.Fingerprint]
	send, ok := plan(ev, rec)
	var inc Incident
	if rec != nil {
		inc = rec.clone()
	} else {
		inc = Incident{Fingerprint: ev.Fingerprint, Ref: map[string]string{}}
	}
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
	q.inflight = 0
	if q.gen != gen {
		// Leadership changed during the attempt: the shared state is no
		// longer ours to write. The event stays in the store's outbox and
		// the leader delivers it again (at least once across failover).
		q.mu.Unlock()
		q.log.Warn("leadership changed during a delivery attempt; its result is not recorded",
			zap.String("fingerprint", ev.Fingerprint), zap.String("kind", string(send.Kind)), zap.Error(err))
		return
	}
	idx := -1
	for i, p := range q.state.Outbox {
		if p.ID == id {
			idx = i
			break
		}
	}
	if idx < 0 { // cannot happen: the in-flight event is never removed by others
		q.mu.Unlock()
		return
	}
	p := q.state.Outbox[idx]
	rec = q.state.Incidents[ev.Fingerprint] // re-read: pruning may have run meanwhile
	if rec == nil && (err == nil || errors.Is(err, ErrNothingToSend) || len(inc.Ref) > 0) {
		rec = &Incident{Fingerprint: ev.Fingerprint, UpdatedAt: now}
		q.state.Incidents[ev.Fingerprint] = rec
	}
	if rec != nil {
		rec.Ref = inc.Ref
	}
	var failed error
	switch {
	case err == nil || errors.Is(err, ErrNothingToSend):
		rec.Open = !isResolved(send)
		rec.Last = send
		if !rec.Open {
			rec.Last = slim(send)
		}
		rec.UpdatedAt = now
		q.removeLocked(idx)
		if err == nil {
			q.m.total.WithLabelValues(q.name, ResultDelivered).Inc()
			q.m.latency.WithLabelValues(q.name).Observe(max(0, now.Sub(p.EnqueuedAt).Seconds()))
			if _, had := q.lastErr[ev.Fingerprint]; had {
				q.log.Info("notification delivered after retries", zap.String("fingerprint", ev.Fingerprint),
					zap.String("kind", string(send.Kind)), zap.Int("attempts", p.Attempts+1))
			}
		} else {
			q.m.total.WithLabelValues(q.name, ResultSkipped).Inc()
		}
		delete(q.lastErr, ev.Fingerprint)
	default:
		reason := ReasonOf(err)
		q.m.failures.WithLabelValues(q.name, string(reason)).Inc()
		if p.FirstAttempt.IsZero() {
			p.FirstAttempt = now
		}
		p.Attempts++
		switch {
		case IsPermanent(err):
			failed = err
		case ctx.Err() != nil:
			// Shutting down: keep the event for the drain or the next start.
		case now.Sub(p.FirstAttempt) >= q.opts.MaxRetryDuration:
			failed = fmt.Errorf("gave up after %d attempts in %s: %w", p.Attempts, now.Sub(p.FirstAttempt).Round(time.Second), err)
		default:
			q.m.retries.WithLabelValues(q.name).Inc()
			if d, isRA := RetryAfterOf(err); isRA {
				if d > q.opts.MaxRetryAfter {
					q.log.Warn("provider asked to wait longer than max_retry_after; waiting the cap",
						zap.Duration("retry_after", d), zap.Duration("max_retry_after", q.opts.MaxRetryAfter))
					d = q.opts.MaxRetryAfter
				}
				q.state.HoldUntil = now.Add(d)
				p.NotBefore = q.state.HoldUntil
			} else {
				p.NotBefore = now.Add(Backoff(p.Attempts, q.opts.InitialBackoff, q.opts.MaxBackoff, q.rand()))
			}
			if q.lastErr[ev.Fingerprint] != err.Error() {
				q.lastErr[ev.Fingerprint] = err.Error()
				q.log.Warn("notification delivery failed; will retry",
					zap.String("fingerprint", ev.Fingerprint), zap.String("kind", string(send.Kind)),
					zap.String("reason", string(reason)), zap.Int("attempt", p.Attempts),
					zap.Time("next_attempt", p.NotBefore), zap.Error(err))
			}
		}
		if failed != nil {
			q.removeLocked(idx)
			delete(q.lastErr, ev.Fingerprint)
			q.lostLocked(send, failed, p.Attempts)
		}
	}
	q.saveLocked(now)
	q.m.queueLen.WithLabelValues(q.name).Set(float64(len(q.state.Outbox)))
	onFailed, onDelivered := q.onFailed, q.onDelivered
	attempts := p.Attempts
	q.mu.Unlock()
	switch {
	case err == nil:
		q.reportAttempt(Attempt{Event: send, Number: attempts + 1, At: now, Delivered: true})
	case !errors.Is(err, ErrNothingToSend) && ctx.Err() == nil:
		q.reportAttempt(Attempt{Event: send, Number: attempts, At: now, Reason: ReasonOf(err), GaveUp: failed != nil})
	}
	if failed != nil && onFailed != nil {
		onFailed(send, failed)
	}
	if err == nil && onDelivered != nil {
		onDelivered(send, now)
	}
}

// refreshLocked enqueues, for every incident open at the integration with
// nothing of it waiting, its last delivered event again as a repeat at now.
// Nothing is refreshed into a full outbox: the backlog is delivered first,
// and a refresh must never push out a page.
func (q *Queue) refreshLocked(now time.Time) {
	if q.standby || len(q.state.Outbox) >= q.opts.MaxPending {
		return
	}
	waiting := make(map[string]bool, len(q.state.Outbox))
	for _, p := range q.state.Outbox {
		waiting[p.Event.Fingerprint] = true
	}
	n := 0
	for _, fp := range slices.Sorted(maps.Keys(q.state.Incidents)) {
		inc := q.state.Incidents[fp]
		if !inc.Open || waiting[fp] || inc.Last.Fingerprint == "" || len(q.state.Outbox) >= q.opts.MaxPending {
			continue
		}
		ev := inc.Last
		ev.Kind, ev.At = KindRepeat, now
		q.state.Outbox = append(q.state.Outbox, &pending{ID: q.state.NextID, Event: ev, EnqueuedAt: now})
		q.state.NextID++
		n++
	}
	if n == 0 {
		return
	}
	q.log.Debug("refreshing open incidents", zap.Int("incidents", n))
	q.saveLocked(now)
	q.m.queueLen.WithLabelValues(q.name).Set(float64(len(q.state.Outbox)))
}

// slim is what a resolved record keeps of its last event: enough to
// recognise a duplicate resolve and a new episode, without the texts that
// make up most of a record's size.
func slim(ev Event) Event {
	return Event{
		Fingerprint: ev.Fingerprint, Seq: ev.Seq, Kind: ev.Kind, Status: ev.Status,
		Class: ev.Class, Severity: ev.Severity, Replica: ev.Replica, Integration: ev.Integration,
		StartsAt: ev.StartsAt, EndsAt: ev.EndsAt, At: ev.At,
	}
}

// pruneLocked bounds the incident records: resolved ones after the
// resolved retention, delivery-failure notices once resolved (nothing
// repeats their resolve) or after the notice retention, and then any
// beyond MaxRecords, least useful first.
func (q *Queue) pruneLocked(now time.Time) {
	for fp, inc := range q.state.Incidents {
		notice := inc.Last.Class == ClassDeliveryFailure
		switch {
		case notice && (!inc.Open || now.Sub(inc.UpdatedAt) > q.opts.NoticeRetention):
			delete(q.state.Incidents, fp)
		case !inc.Open && now.Sub(inc.UpdatedAt) > q.opts.ResolvedRetention:
			delete(q.state.Incidents, fp)
		}
	}
	over := len(q.state.Incidents) - q.opts.MaxRecords
	if over <= 0 {
		return
	}
	rank := func(inc *Incident) int {
		switch {
		case !inc.Open:
			return 0
		case inc.Last.Class == ClassDeliveryFailure:
			return 1
		}
		return 2
	}
	recs := slices.Collect(maps.Values(q.state.Incidents))
	slices.SortFunc(recs, func(a, b *Incident) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), a.UpdatedAt.Compare(b.UpdatedAt), cmp.Compare(a.Fingerprint, b.Fingerprint))
	})
	open := 0
	for _, inc := range recs[:over] {
		delete(q.state.Incidents, inc.Fingerprint)
		if inc.Open {
			open++
		}
	}
	q.m.recordsEvicted.WithLabelValues(q.name).Add(float64(over))
	if open > 0 {
		q.log.Warn("incident records beyond max_records: forgot the oldest open ones; their next event opens a new page",
			zap.Int("evicted", over), zap.Int("open_evicted", open), zap.Int("max_records", q.opts.MaxRecords))
	}
}

func (q *Queue) removeLocked(i int) {
	box := q.state.Outbox
	copy(box[i:], box[i+1:])
	box[len(box)-1] = nil
	q.state.Outbox = box[:len(box)-1]
}

func (q *Queue) saveLocked(now time.Time) {
	q.pruneLocked(now)
	if q.store == nil || q.standby {
		return
	}
	if err := q.store.Save(q.doc, &q.state); err != nil {
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
	out := map[string]Event{}
	for fp, inc := range q.state.Incidents {
		if inc.Last.Fingerprint != "" {
			out[fp] = inc.Last
		}
	}
	for _, p := range q.state.Outbox {
		out[p.Event.Fingerprint] = p.Event
	}
	return out
}
