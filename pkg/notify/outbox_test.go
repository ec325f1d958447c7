package notify

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// The outbox's decisions, driven directly: no worker, no store, no clock.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func boxWith(mod func(*QueueOptions)) *outbox {
	o := QueueOptions{InitialBackoff: time.Second, MaxBackoff: time.Minute, MaxRetryDuration: 10 * time.Minute}
	if mod != nil {
		mod(&o)
	}
	return newOutbox(o.withDefaults())
}

// ev is an event of incident fp: kind, and severity "critical" (resolve:
// status resolved).
func ev(fp string, kind Kind, seq int) Event {
	e := Event{Fingerprint: fp, Seq: uint64(seq), Kind: kind, Status: StatusFiring, Severity: detect.Critical, Class: "preempt_storm",
		StartsAt: t0, At: t0.Add(time.Duration(seq) * time.Second)}
	if kind == KindResolve {
		e.Status = StatusResolved
	}
	return e
}

// waiting lists the outbox as "fp/kind#seq" in order.
func waiting(b *outbox) string {
	var s []string
	for _, p := range b.doc.Outbox {
		s = append(s, fmt.Sprintf("%s/%s#%d", p.Event.Fingerprint, p.Event.Kind, p.Event.Seq))
	}
	return strings.Join(s, " ")
}

func fill(b *outbox, evs ...Event) {
	for _, e := range evs {
		b.enqueue(e, e.At)
	}
}

func TestOutboxSupersedesWaitingUpdates(t *testing.T) {
	tests := []struct {
		name string
		evs  []Event
		want string
	}{
		{"updates collapse into the newest, behind the trigger",
			[]Event{ev("a", KindTrigger, 1), ev("a", KindUpdate, 2), ev("a", KindUpdate, 3)}, "a/trigger#1 a/update#3"},
		{"a repeat replacing an update stays an update (it says something changed)",
			[]Event{ev("a", KindTrigger, 1), ev("a", KindUpdate, 2), ev("a", KindRepeat, 3)}, "a/trigger#1 a/update#3"},
		{"a repeat replaces a repeat",
			[]Event{ev("a", KindTrigger, 1), ev("a", KindRepeat, 2), ev("a", KindRepeat, 3)}, "a/trigger#1 a/repeat#3"},
		{"an update never jumps over the incident's resolve",
			[]Event{ev("a", KindUpdate, 1), ev("a", KindResolve, 2), ev("a", KindTrigger, 3), ev("a", KindUpdate, 4)},
			"a/resolve#2 a/trigger#3 a/update#4"},
		{"other incidents are left alone",
			[]Event{ev("a", KindUpdate, 1), ev("b", KindUpdate, 2), ev("a", KindUpdate, 3)}, "a/update#3 b/update#2"},
		{"triggers are never merged",
			[]Event{ev("a", KindTrigger, 1), ev("a", KindTrigger, 2)}, "a/trigger#1 a/trigger#2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := boxWith(nil)
			fill(b, tc.evs...)
			if got := waiting(b); got != tc.want {
				t.Errorf("waiting %q, want %q", got, tc.want)
			}
		})
	}
}

// The event in flight may already be at the provider: a newer update is
// queued behind it rather than replacing it, and a resolve does not drop it.
func TestOutboxLeavesTheEventInFlight(t *testing.T) {
	b := boxWith(nil)
	fill(b, ev("a", KindUpdate, 1))
	if p, _, _ := b.next(t0, false); p == nil || p.Event.Seq != 1 {
		t.Fatalf("next = %v, want the update", p)
	}
	b.enqueue(ev("a", KindUpdate, 2), t0)
	if got := waiting(b); got != "a/update#1 a/update#2" {
		t.Errorf("waiting %q, want the in-flight update kept and the new one behind it", got)
	}
	a := b.enqueue(ev("a", KindResolve, 3), t0)
	if got := waiting(b); got != "a/update#1 a/resolve#3" || a.superseded != 1 {
		t.Errorf("waiting %q (superseded %d), want the in-flight update kept, the waiting one dropped", got, a.superseded)
	}
}

func TestOutboxResolveDropsWaitingUpdatesOnly(t *testing.T) {
	b := boxWith(nil)
	fill(b, ev("a", KindTrigger, 1), ev("a", KindUpdate, 2), ev("b", KindUpdate, 3))
	a := b.enqueue(ev("a", KindResolve, 4), t0)
	if got := waiting(b); got != "a/trigger#1 b/update#3 a/resolve#4" {
		t.Errorf("waiting %q", got)
	}
	if a.superseded != 1 || len(a.dropped) != 0 {
		t.Errorf("admission %+v, want one superseded update and nothing lost", a)
	}
}

// A full outbox drops the oldest update or repeat first, then the oldest
// trigger, never the event in flight; an event that matters less than
// everything waiting is itself dropped.
func TestOutboxFullDropsTheLeastImportant(t *testing.T) {
	b := boxWith(func(o *QueueOptions) { o.MaxPending = 3 })
	fill(b, ev("t1", KindTrigger, 1), ev("u1", KindUpdate, 2), ev("t2", KindTrigger, 3))
	steps := []struct {
		add         Event
		wantDropped string
		want        string
	}{
		{ev("t3", KindTrigger, 4), "u1", "t1/trigger#1 t2/trigger#3 t3/trigger#4"},
		{ev("u2", KindUpdate, 5), "u2", "t1/trigger#1 t2/trigger#3 t3/trigger#4"},
		{ev("t4", KindTrigger, 6), "t1", "t2/trigger#3 t3/trigger#4 t4/trigger#6"},
		{ev("r1", KindResolve, 7), "t2", "t3/trigger#4 t4/trigger#6 r1/resolve#7"},
	}
	for i, s := range steps {
		a := b.enqueue(s.add, s.add.At)
		if len(a.dropped) != 1 || a.dropped[0].Fingerprint != s.wantDropped {
			t.Errorf("step %d: dropped %+v, want %s", i, a.dropped, s.wantDropped)
		}
		if got := waiting(b); got != s.want {
			t.Errorf("step %d: waiting %q, want %q", i, got, s.want)
		}
	}
	// The oldest trigger is in flight: the next one goes instead.
	if p, _, _ := b.next(t0.Add(time.Hour), false); p.Event.Fingerprint != "t3" {
		t.Fatalf("next = %s", p.Event.Fingerprint)
	}
	a := b.enqueue(ev("t5", KindTrigger, 8), t0)
	if len(a.dropped) != 1 || a.dropped[0].Fingerprint != "t4" {
		t.Errorf("dropped %+v, want t4: t3 is in flight", a.dropped)
	}
}

// Resolves are admitted past the bound; anything else finding only
// resolves is dropped.
func TestOutboxAdmitsResolvesPastTheBound(t *testing.T) {
	b := boxWith(func(o *QueueOptions) { o.MaxPending = 2 })
	fill(b, ev("a", KindResolve, 1), ev("b", KindResolve, 2))
	a := b.enqueue(ev("c", KindResolve, 3), t0)
	if !a.beyondBound || len(a.dropped) != 0 || b.len() != 3 {
		t.Errorf("admission %+v, %d waiting: want the resolve kept beyond max_pending", a, b.len())
	}
	a = b.enqueue(ev("d", KindTrigger, 4), t0)
	if len(a.dropped) != 1 || a.dropped[0].Fingerprint != "d" || b.len() != 3 {
		t.Errorf("admission %+v, %d waiting: want the trigger dropped, the resolves kept", a, b.len())
	}
}

// Events go in order per incident: only an incident's oldest event may be
// attempted, one backing off holds its incident and no other, a resolve
// goes first while draining, and a Retry-After hold stops everything.
func TestOutboxNextKeepsOrderPerIncident(t *testing.T) {
	b := boxWith(nil)
	fill(b, ev("a", KindTrigger, 1), ev("a", KindResolve, 2), ev("b", KindTrigger, 3), ev("c", KindResolve, 4))
	b.doc.Outbox[0].NotBefore = t0.Add(time.Minute) // a's trigger backs off

	p, _, _ := b.next(t0, false)
	if p == nil || p.Event.Fingerprint != "b" {
		t.Fatalf("next = %v, want b: a's resolve must wait behind its trigger", p)
	}
	b.inflight = 0
	if p, _, _ = b.next(t0, true); p == nil || p.Event.Fingerprint != "c" {
		t.Fatalf("draining, next = %v, want c's resolve first", p)
	}
	b.inflight = 0

	b.doc.Outbox = b.doc.Outbox[:2] // only a's events: its head backs off
	p, wait, empty := b.next(t0, false)
	if p != nil || empty || wait != time.Minute {
		t.Errorf("next = %v, %s, %v: want nothing due for a minute", p, wait, empty)
	}
	b.doc.HoldUntil = t0.Add(2 * time.Minute)
	if p, wait, _ = b.next(t0.Add(time.Minute), false); p != nil || wait != time.Minute {
		t.Errorf("under a Retry-After hold next = %v, %s; want nothing for a minute", p, wait)
	}
	b.doc.Outbox = nil
	if _, _, empty = b.next(t0, false); !empty {
		t.Error("an empty outbox is not empty")
	}
}

// settle decides an attempt's consequences: delivered, retried after a
// backoff or a (capped) Retry-After, given up when permanent or too old,
// kept when shutting down.
func TestOutboxSettle(t *testing.T) {
	retryable := WithReason(errors.New("503"), ReasonServerError)
	tests := []struct {
		name        string
		err         error
		firstTry    time.Time // zero: this is the first attempt
		stopping    bool
		wantGaveUp  string
		wantRetryAt time.Duration // after now; 0: not retried
		wantAsked   time.Duration
		wantHold    time.Duration
		wantWaiting int
	}{
		{name: "delivered", err: nil},
		{name: "nothing to send", err: ErrNothingToSend},
		{name: "retryable: backoff", err: retryable, wantRetryAt: 800 * time.Millisecond, wantWaiting: 1},
		{name: "Retry-After holds the integration", err: RetryAfter(errors.New("429"), 30*time.Second),
			wantRetryAt: 30 * time.Second, wantHold: 30 * time.Second, wantWaiting: 1},
		{name: "rate limit without a wait: the backoff holds the integration", err: Throttled(errors.New("429")),
			wantRetryAt: 800 * time.Millisecond, wantHold: 800 * time.Millisecond, wantWaiting: 1},
		{name: "Retry-After beyond the cap", err: RetryAfter(errors.New("429"), 3*time.Hour),
			wantRetryAt: DefaultMaxRetryAfter, wantHold: DefaultMaxRetryAfter, wantAsked: 3 * time.Hour, wantWaiting: 1},
		{name: "permanent", err: Permanent(errors.New("400")), wantGaveUp: "400"},
		{name: "retried too long", err: retryable, firstTry: t0.Add(-10 * time.Minute), wantGaveUp: "gave up after 1 attempts in 10m0s"},
		{name: "shutting down keeps it", err: retryable, stopping: true, wantWaiting: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := boxWith(nil)
			fill(b, ev("a", KindTrigger, 1))
			b.doc.Outbox[0].FirstAttempt = tc.firstTry
			p, _, _ := b.next(t0, false)
			send, ok, inc := b.prepare(p.Event)
			if !ok || send.Kind != KindTrigger {
				t.Fatalf("prepare = %v, %v", send.Kind, ok)
			}
			inc.Ref["ts"] = "1700000000.000100" // the notifier posted something
			s, found := b.settle(p.ID, send, inc, tc.err, t0, tc.stopping, 0)
			if !found || b.inflight != 0 {
				t.Fatalf("found %v, in flight %d", found, b.inflight)
			}
			if got := fmt.Sprint(s.gaveUp); (tc.wantGaveUp == "") != (s.gaveUp == nil) || !strings.Contains(got, tc.wantGaveUp) {
				t.Errorf("gave up %v, want %q", s.gaveUp, tc.wantGaveUp)
			}
			if got := s.retryAt.Sub(t0); (tc.wantRetryAt == 0) != s.retryAt.IsZero() || (!s.retryAt.IsZero() && got != tc.wantRetryAt) {
				t.Errorf("retry at now+%s (zero %v), want %s", got, s.retryAt.IsZero(), tc.wantRetryAt)
			}
			if s.retryAfterAsked != tc.wantAsked {
				t.Errorf("asked %s, want %s", s.retryAfterAsked, tc.wantAsked)
			}
			if got := b.doc.HoldUntil; (tc.wantHold == 0) != got.IsZero() || (!got.IsZero() && got.Sub(t0) != tc.wantHold) {
				t.Errorf("hold until %s, want now+%s", got, tc.wantHold)
			}
			if b.len() != tc.wantWaiting {
				t.Errorf("%d waiting, want %d", b.len(), tc.wantWaiting)
			}
			rec := b.doc.Incidents["a"]
			if rec == nil || rec.Ref["ts"] == "" {
				t.Fatalf("record %+v: the notifier's reference must be kept whatever the outcome", rec)
			}
			if delivered := tc.err == nil || errors.Is(tc.err, ErrNothingToSend); rec.Open != delivered {
				t.Errorf("record open = %v, want %v", rec.Open, delivered)
			}
		})
	}
}

// A delivered resolve closes the record and keeps a slim copy of it; a
// duplicate of it is then not sent.
func TestOutboxSettledResolveClosesTheRecord(t *testing.T) {
	b := boxWith(nil)
	r := ev("a", KindResolve, 2)
	r.Summary, r.Emergency = "long text", []string{"step"}
	fill(b, r)
	p, _, _ := b.next(t0, false)
	send, _, inc := b.prepare(p.Event)
	b.settle(p.ID, send, inc, nil, t0, false, 0)
	rec := b.doc.Incidents["a"]
	if rec.Open || rec.Last.Summary != "" || rec.Last.Emergency != nil || rec.Last.Kind != KindResolve {
		t.Errorf("record %+v, want closed with a slim last event", rec)
	}
	fill(b, r)
	p, _, _ = b.next(t0, false)
	if _, ok, _ := b.prepare(p.Event); ok {
		t.Error("a duplicate resolve would be sent again")
	}
}

// Refresh re-sends the last event of every incident open at the
// integration with nothing waiting, as a repeat, and never into a full
// outbox.
func TestOutboxRefresh(t *testing.T) {
	b := boxWith(func(o *QueueOptions) { o.MaxPending = 3 })
	open := func(fp string) *Incident { return &Incident{Fingerprint: fp, Open: true, Last: ev(fp, KindTrigger, 1)} }
	b.doc.Incidents = map[string]*Incident{
		"a": open("a"), "b": open("b"), "c": {Fingerprint: "c", Last: ev("c", KindResolve, 2)},
		"d": open("d"), "e": {Fingerprint: "e", Open: true}, // open, nothing delivered yet
	}
	fill(b, ev("b", KindUpdate, 5)) // b has something waiting
	later := t0.Add(time.Hour)
	if n := b.refresh(later); n != 2 {
		t.Errorf("refreshed %d, want a and d", n)
	}
	if got := waiting(b); got != "b/update#5 a/repeat#1 d/repeat#1" {
		t.Errorf("waiting %q", got)
	}
	if !b.doc.Outbox[1].Event.At.Equal(later) {
		t.Errorf("repeat at %s, want the refresh time", b.doc.Outbox[1].Event.At)
	}
	if n := b.refresh(later); n != 0 {
		t.Errorf("refreshed %d into a full outbox", n)
	}
}

// Records are bounded: resolved ones and notices after their retention,
// resolved notices at once, then beyond max_records the least useful first.
func TestOutboxPrune(t *testing.T) {
	b := boxWith(func(o *QueueOptions) {
		o.MaxRecords = 2
		o.ResolvedRetention = time.Hour
		o.NoticeRetention = time.Hour
	})
	rec := func(fp string, open bool, class string, age time.Duration) *Incident {
		return &Incident{Fingerprint: fp, Open: open, Last: Event{Class: class}, UpdatedAt: t0.Add(-age)}
	}
	b.doc.Incidents = map[string]*Incident{
		"old-resolved":    rec("old-resolved", false, "x", 2*time.Hour),
		"resolved-notice": rec("resolved-notice", false, ClassDeliveryFailure, 0),
		"stale-notice":    rec("stale-notice", true, ClassDeliveryFailure, 2*time.Hour),
		"resolved":        rec("resolved", false, "x", time.Minute),
		"notice":          rec("notice", true, ClassDeliveryFailure, time.Minute),
		"open-old":        rec("open-old", true, "x", 30*time.Minute),
		"open-new":        rec("open-new", true, "x", time.Minute),
	}
	evicted, open := b.prune(t0)
	if evicted != 2 || open != 1 {
		t.Errorf("evicted %d (%d open), want the resolved record and the open notice", evicted, open)
	}
	var kept []string
	for fp := range b.doc.Incidents {
		kept = append(kept, fp)
	}
	if len(kept) != 2 || b.doc.Incidents["open-old"] == nil || b.doc.Incidents["open-new"] == nil {
		t.Errorf("kept %v, want the two open incidents", kept)
	}
	b.doc.Incidents["open-newer"] = rec("open-newer", true, "x", 0)
	if evicted, open = b.prune(t0); evicted != 1 || open != 1 || b.doc.Incidents["open-old"] != nil {
		t.Errorf("evicted %d (%d open), want the oldest open incident", evicted, open)
	}
}

// A restored document is repaired: null entries dropped, IDs continued
// past the highest, a Retry-After hold and backoffs capped.
func TestOutboxRestore(t *testing.T) {
	b := boxWith(nil)
	d := queueDoc{Version: 1, HoldUntil: t0.Add(24 * time.Hour),
		Outbox:    []*pending{nil, {ID: 41, Event: ev("a", KindTrigger, 1), NotBefore: t0.Add(48 * time.Hour)}},
		Incidents: map[string]*Incident{"x": nil}}
	asked := b.restore(d, t0)
	if !asked.Equal(t0.Add(24 * time.Hour)) {
		t.Errorf("capped hold reported as %s", asked)
	}
	if b.doc.HoldUntil != t0.Add(DefaultMaxRetryAfter) {
		t.Errorf("hold %s, want capped at now+max_retry_after", b.doc.HoldUntil)
	}
	if b.len() != 1 || len(b.doc.Incidents) != 0 || b.doc.NextID != 42 {
		t.Errorf("restored %d waiting, %d records, next ID %d", b.len(), len(b.doc.Incidents), b.doc.NextID)
	}
	if nb := b.doc.Outbox[0].NotBefore; nb.After(t0.Add(DefaultMaxRetryAfter)) {
		t.Errorf("backoff not capped: %s", nb)
	}
	if b.restore(queueDoc{}, t0); b.len() != 0 || b.doc.Version != 1 || b.doc.Incidents == nil {
		t.Errorf("no document: %+v, want an empty outbox", b.doc)
	}
}
