package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

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

// queueDoc is an integration's persisted document: its outbox's state.
type queueDoc struct {
	Version   int                  `json:"version"`
	NextID    uint64               `json:"next_id"`
	HoldUntil time.Time            `json:"hold_until,omitzero"` // provider's Retry-After, for every event
	Outbox    []*pending           `json:"outbox"`
	Incidents map[string]*Incident `json:"incidents"`
}

func emptyDoc() queueDoc {
	return queueDoc{Version: 1, NextID: 1, Incidents: map[string]*Incident{}}
}

// outbox decides what one integration is sent and when: the events waiting
// in order per incident, superseded updates, priorities in a full outbox,
// retries and giving up, and the incident records. It is plain data: no
// lock, no goroutine, no I/O, and the time is passed in. The delivery
// worker (Queue) owns one, guards it, attempts what it says is due and
// persists doc.
type outbox struct {
	opts QueueOptions // with defaults
	doc  queueDoc
	// inflight is the ID of the event being attempted, 0 when none: it is
	// neither superseded nor dropped while the provider may have it.
	inflight uint64
}

func newOutbox(opts QueueOptions) *outbox {
	return &outbox{opts: opts, doc: emptyDoc()}
}

// restore takes d, a persisted document (Version 0: none), as the state at
// now, repairing what a damaged or older document may hold. It returns the
// Retry-After hold d asked for when it exceeded max_retry_after and was
// capped (zero otherwise).
func (b *outbox) restore(d queueDoc, now time.Time) (cappedHold time.Time) {
	b.inflight = 0
	if d.Version == 0 {
		b.doc = emptyDoc()
		return time.Time{}
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
	if limit := now.Add(b.opts.MaxRetryAfter); d.HoldUntil.After(limit) {
		cappedHold, d.HoldUntil = d.HoldUntil, limit
	}
	latest := now.Add(max(b.opts.MaxRetryAfter, b.opts.MaxBackoff))
	for _, p := range d.Outbox {
		if p.NotBefore.After(latest) {
			p.NotBefore = latest
		}
	}
	b.doc = d
	return cappedHold
}

func (b *outbox) len() int { return len(b.doc.Outbox) }

// oldest is the enqueue time of the oldest waiting event.
func (b *outbox) oldest() (time.Time, bool) {
	if len(b.doc.Outbox) == 0 {
		return time.Time{}, false
	}
	oldest := b.doc.Outbox[0].EnqueuedAt
	for _, p := range b.doc.Outbox[1:] {
		if p.EnqueuedAt.Before(oldest) {
			oldest = p.EnqueuedAt
		}
	}
	return oldest, true
}

// tracks reports whether the incident is open at the integration or has
// an event waiting.
func (b *outbox) tracks(fingerprint string) bool {
	if inc := b.doc.Incidents[fingerprint]; inc != nil && inc.Open {
		return true
	}
	return slices.ContainsFunc(b.doc.Outbox, func(p *pending) bool { return p.Event.Fingerprint == fingerprint })
}

// incidents folds the records and the outbox into the newest event per
// fingerprint, as the integration will know it once the outbox is delivered.
func (b *outbox) incidents() map[string]Event {
	out := map[string]Event{}
	for fp, inc := range b.doc.Incidents {
		if inc.Last.Fingerprint != "" {
			out[fp] = inc.Last
		}
	}
	for _, p := range b.doc.Outbox {
		out[p.Event.Fingerprint] = p.Event
	}
	return out
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

// admission is what enqueueing one event did besides adding it.
type admission struct {
	// dropped are the events a full outbox dropped for it (the event
	// itself when everything waiting matters more): never delivered.
	dropped []Event
	// superseded counts the waiting updates a resolve made unnecessary.
	superseded int
	// beyondBound says a resolve was kept beyond max_pending, the outbox
	// holding nothing it could drop.
	beyondBound bool
}

// enqueue adds ev, enqueued at at. Updates still waiting are superseded by
// a newer update of the same incident and dropped by its resolve; triggers
// and resolves are never merged away, so the order trigger → resolve
// always reaches the integration. A full outbox drops the oldest update
// or repeat first, then the oldest trigger, and never a resolve.
func (b *outbox) enqueue(ev Event, at time.Time) (a admission) {
	box := b.doc.Outbox
	switch {
	case isFiringUpdate(ev):
		// Supersede the newest pending update of the incident, unless
		// something else of the incident follows it or it is in flight.
		for i := len(box) - 1; i >= 0; i-- {
			p := box[i]
			if p.Event.Fingerprint != ev.Fingerprint {
				continue
			}
			if p.ID != b.inflight && isFiringUpdate(p.Event) {
				if p.Event.Kind == KindUpdate {
					ev.Kind = KindUpdate
				}
				p.Event = ev
				return a
			}
			break
		}
	case ev.Kind == KindResolve:
		kept := box[:0]
		for _, p := range box {
			if p.Event.Fingerprint == ev.Fingerprint && p.ID != b.inflight && isFiringUpdate(p.Event) {
				a.superseded++
				continue
			}
			kept = append(kept, p)
		}
		clear(box[len(kept):])
		box = kept
	}
	if len(box) >= b.opts.MaxPending {
		victim := b.victim(box)
		switch {
		case victim >= 0 && priority(box[victim].Event) <= priority(ev) && priority(box[victim].Event) < priorityResolve:
			a.dropped = append(a.dropped, box[victim].Event)
			box = slices.Delete(box, victim, victim+1)
		case priority(ev) == priorityResolve:
			// Resolves are never dropped for space: the outbox holds only
			// resolves (and the event in flight), so it grows past the bound.
			a.beyondBound = true
		default:
			b.doc.Outbox = box
			a.dropped = []Event{ev}
			return a
		}
	}
	b.doc.Outbox = append(box, &pending{ID: b.doc.NextID, Event: ev, EnqueuedAt: at})
	b.doc.NextID++
	return a
}

// victim is the index of the oldest pending event of the lowest priority
// that is not in flight, -1 when there is none.
func (b *outbox) victim(box []*pending) int {
	victim := -1
	for i, p := range box {
		if p.ID == b.inflight {
			continue
		}
		if victim < 0 || priority(p.Event) < priority(box[victim].Event) {
			victim = i
		}
	}
	return victim
}

// next selects the event to attempt at now and marks it in flight: the
// oldest head of an incident whose backoff has passed (resolves first when
// draining). Otherwise it returns the delay until something may become due,
// or empty.
func (b *outbox) next(now time.Time, resolvesFirst bool) (p *pending, wait time.Duration, empty bool) {
	box := b.doc.Outbox
	if len(box) == 0 {
		return nil, 0, true
	}
	if b.doc.HoldUntil.After(now) {
		return nil, b.doc.HoldUntil.Sub(now), false
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
		b.inflight = due.ID
		return due, 0, false
	}
	return nil, next.Sub(now), false
}

// prepare returns what the integration is sent for ev (plan) and a copy
// of its record of the incident, for the notifier to read and change.
func (b *outbox) prepare(ev Event) (send Event, ok bool, inc Incident) {
	rec := b.doc.Incidents[ev.Fingerprint]
	send, ok = plan(ev, rec)
	if rec != nil {
		return send, ok, rec.clone()
	}
	return send, ok, Incident{Fingerprint: ev.Fingerprint, Ref: map[string]string{}}
}

// settlement is what an attempt's outcome did to its event.
type settlement struct {
	// attempts counts the failed attempts of the event so far.
	attempts   int
	enqueuedAt time.Time
	// gaveUp, when set, is why the event was dropped: it will never be
	// delivered.
	gaveUp error
	// retryAt is when a retryable failure is attempted again (zero when
	// it is not retried).
	retryAt time.Time
	// retryAfterAsked is the provider's Retry-After when it exceeded
	// max_retry_after and was capped.
	retryAfterAsked time.Duration
}

// settle applies the outcome err of the attempt of event id, sent as
// send, at now: inc is the record as the notifier left it. stopping says
// the attempt was cut short by shutdown: a failure is kept for the next
// start rather than counted. u in [0,1) draws the backoff's jitter. found
// is false when the event is no longer waiting.
func (b *outbox) settle(id uint64, send Event, inc Incident, err error, now time.Time, stopping bool, u float64) (s settlement, found bool) {
	b.inflight = 0
	idx := slices.IndexFunc(b.doc.Outbox, func(p *pending) bool { return p.ID == id })
	if idx < 0 { // cannot happen: the event in flight is never removed by others
		return s, false
	}
	p := b.doc.Outbox[idx]
	s.enqueuedAt = p.EnqueuedAt
	fp := send.Fingerprint
	rec := b.doc.Incidents[fp] // pruning may have run during the attempt
	done := err == nil || errors.Is(err, ErrNothingToSend)
	if rec == nil && (done || len(inc.Ref) > 0) {
		rec = &Incident{Fingerprint: fp, UpdatedAt: now}
		b.doc.Incidents[fp] = rec
	}
	if rec != nil {
		rec.Ref = inc.Ref
	}
	if done {
		rec.Open = !isResolved(send)
		rec.Last = send
		if !rec.Open {
			rec.Last = slim(send)
		}
		rec.UpdatedAt = now
		s.attempts = p.Attempts
		b.remove(idx)
		return s, true
	}
	if p.FirstAttempt.IsZero() {
		p.FirstAttempt = now
	}
	p.Attempts++
	s.attempts = p.Attempts
	switch {
	case IsPermanent(err):
		s.gaveUp = err
	case stopping:
		// Shutting down: keep the event for the drain or the next start.
	case now.Sub(p.FirstAttempt) >= b.opts.MaxRetryDuration:
		s.gaveUp = fmt.Errorf("gave up after %d attempts in %s: %w", p.Attempts, now.Sub(p.FirstAttempt).Round(time.Second), err)
	default:
		backoff := Backoff(p.Attempts, b.opts.InitialBackoff, b.opts.MaxBackoff, u)
		if d, isRA := RetryAfterOf(err); isRA {
			if d > b.opts.MaxRetryAfter {
				s.retryAfterAsked, d = d, b.opts.MaxRetryAfter
			}
			b.doc.HoldUntil = now.Add(d)
			p.NotBefore = b.doc.HoldUntil
		} else if IsThrottled(err) {
			// A rate limit holds the integration, not just this event.
			b.doc.HoldUntil = now.Add(backoff)
			p.NotBefore = b.doc.HoldUntil
		} else {
			p.NotBefore = now.Add(backoff)
		}
		s.retryAt = p.NotBefore
	}
	if s.gaveUp != nil {
		b.remove(idx)
	}
	return s, true
}

// refresh enqueues, for every incident open at the integration with
// nothing of it waiting, its last delivered event again as a repeat at now,
// and returns how many. Nothing is refreshed into a full outbox: the
// backlog is delivered first, and a refresh must never push out a page.
func (b *outbox) refresh(now time.Time) int {
	if len(b.doc.Outbox) >= b.opts.MaxPending {
		return 0
	}
	waiting := make(map[string]bool, len(b.doc.Outbox))
	for _, p := range b.doc.Outbox {
		waiting[p.Event.Fingerprint] = true
	}
	n := 0
	for _, fp := range slices.Sorted(maps.Keys(b.doc.Incidents)) {
		inc := b.doc.Incidents[fp]
		if !inc.Open || waiting[fp] || inc.Last.Fingerprint == "" || len(b.doc.Outbox) >= b.opts.MaxPending {
			continue
		}
		ev := inc.Last
		ev.Kind, ev.At = KindRepeat, now
		b.doc.Outbox = append(b.doc.Outbox, &pending{ID: b.doc.NextID, Event: ev, EnqueuedAt: now})
		b.doc.NextID++
		n++
	}
	return n
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

// prune bounds the incident records: resolved ones after the resolved
// retention, delivery-failure notices once resolved (nothing repeats their
// resolve) or after the notice retention, and then any beyond MaxRecords,
// least useful first. It returns how many records beyond MaxRecords it
// forgot, and how many of those were open.
func (b *outbox) prune(now time.Time) (evicted, openEvicted int) {
	for fp, inc := range b.doc.Incidents {
		notice := inc.Last.Class == ClassDeliveryFailure
		switch {
		case notice && (!inc.Open || now.Sub(inc.UpdatedAt) > b.opts.NoticeRetention):
			delete(b.doc.Incidents, fp)
		case !inc.Open && now.Sub(inc.UpdatedAt) > b.opts.ResolvedRetention:
			delete(b.doc.Incidents, fp)
		}
	}
	over := len(b.doc.Incidents) - b.opts.MaxRecords
	if over <= 0 {
		return 0, 0
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
	recs := slices.Collect(maps.Values(b.doc.Incidents))
	slices.SortFunc(recs, func(a, b *Incident) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), a.UpdatedAt.Compare(b.UpdatedAt), cmp.Compare(a.Fingerprint, b.Fingerprint))
	})
	for _, inc := range recs[:over] {
		delete(b.doc.Incidents, inc.Fingerprint)
		if inc.Open {
			openEvicted++
		}
	}
	return over, openEvicted
}

func (b *outbox) remove(i int) {
	box := b.doc.Outbox
	copy(box[i:], box[i+1:])
	box[len(box)-1] = nil
	b.doc.Outbox = box[:len(box)-1]
}
