package notify_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

func snapshot(s *notifytest.MemStore) map[string]string {
	out := map[string]string{}
	for _, n := range s.Names() {
		out[n] = string(s.Raw(n))
	}
	return out
}

// A standby copy sends the same events as the leader but delivers nothing,
// writes nothing to the shared store, and reports an empty outbox although
// the leader's pending events are in the store it loaded.
func TestStandbyDeliversAndWritesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		pdDown := true
		pd := &notifytest.Recorder{Fail: func(notify.Event, int) error {
			if pdDown {
				return errors.New("pagerduty: 503")
			}
			return nil
		}}
		sl := &notifytest.Recorder{}
		leader := newCopy(t, store, pd, sl, false)
		leader.start(t)
		ev := at(notifytest.PreemptStorm(time.Now()), time.Now())
		leader.d.Send(ev)
		synctest.Wait()
		leader.stop() // PagerDuty still owes the trigger: it stays in the outbox

		pdF, slF := &notifytest.Recorder{}, &notifytest.Recorder{}
		follower := newCopy(t, store, pdF, slF, true)
		before := snapshot(store)
		follower.start(t)
		follower.d.Send(ev)
		follower.d.Send(notifytest.Resolve(ev, time.Now()))
		advance(10 * time.Minute)
		if n := len(pdF.Attempts()) + len(slF.Attempts()); n != 0 {
			t.Errorf("standby copy made %d delivery attempts", n)
		}
		if follower.d.Active() {
			t.Error("Active() = true in standby")
		}
		if after := snapshot(store); !maps.Equal(before, after) {
			t.Errorf("standby copy wrote the shared store:\nbefore %v\nafter  %v", before, after)
		}
		for _, in := range []string{"pagerduty", "slack", "log"} {
			if got := counter(t, follower.reg, "watchdog_notification_queue_length", "integration", in); got != 0 {
				t.Errorf("%s queue length on standby = %v, want 0 (the outbox is the leader's)", in, got)
			}
			if got := counter(t, follower.reg, "watchdog_notification_oldest_undelivered_age_seconds", "integration", in); got != 0 {
				t.Errorf("%s oldest age on standby = %v, want 0", in, got)
			}
		}
		if got := counter(t, follower.reg, "watchdog_notification_active"); got != 0 {
			t.Errorf("watchdog_notification_active = %v on standby", got)
		}
		if got := counter(t, follower.reg, "watchdog_notification_standby_events_total"); got != 2 {
			t.Errorf("standby events = %v, want 2", got)
		}
		if got := counter(t, leader.reg, "watchdog_notification_active"); got != 1 {
			t.Errorf("watchdog_notification_active = %v on the leader", got)
		}
		// What the standby copy loaded at start still serves the tracker.
		if got := kinds(follower.d.OpenIncidents()); got != "5f1c/trigger" {
			t.Errorf("OpenIncidents on standby = %q", got)
		}
		follower.stop()
	})
}

// The new leader reloads the old leader's records: its own trigger for the
// incident the old leader opened becomes an update, and the resolve
// follows; nothing the old leader delivered is delivered again.
func TestTakeoverContinuesTheOldLeadersIncident(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		pd, sl := &notifytest.Recorder{}, &notifytest.Recorder{}
		follower := newCopy(t, store, pd, sl, true) // started before the incident: its snapshot is empty
		follower.start(t)
		old := newCopy(t, store, pd, sl, false)
		old.start(t)
		t0 := time.Now()
		ev := at(notifytest.PreemptStorm(t0), t0)
		old.d.Send(ev)
		synctest.Wait()
		old.stop()
		if open := follower.d.OpenIncidents(); len(open) != 0 {
			t.Fatalf("standby snapshot already has %q", kinds(open))
		}

		advance(time.Minute)
		if err := follower.d.SetActive(true, time.Now()); err != nil {
			t.Fatal(err)
		}
		if !follower.d.Active() {
			t.Fatal("not active after SetActive(true)")
		}
		if got := kinds(follower.d.OpenIncidents()); got != "5f1c/trigger" {
			t.Fatalf("OpenIncidents after takeover = %q, want the old leader's incident", got)
		}
		// This copy's tracker never saw the incident fire (or restored it
		// without the old leader's start): it emits a trigger of its own.
		mine := at(notifytest.PreemptStorm(time.Now()), time.Now())
		follower.d.Send(mine)
		synctest.Wait()
		follower.d.Send(notifytest.Resolve(mine, time.Now()))
		synctest.Wait()
		for name, rec := range map[string]*notifytest.Recorder{"pagerduty": pd, "slack": sl} {
			if got, want := kinds(rec.Delivered()), "5f1c/trigger 5f1c/update 5f1c/resolve"; got != want {
				t.Errorf("%s got %q, want %q (the trigger after takeover must be an update)", name, got, want)
			}
		}
		follower.stop()
	})
}

// The old leader's undelivered outbox and the provider's Retry-After hold
// are taken over: the new leader waits out the hold and delivers once.
func TestTakeoverReloadsOutboxAndRetryAfterHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		calls := 0
		pd := &notifytest.Recorder{Fail: func(notify.Event, int) error {
			calls++
			if calls == 1 {
				return notify.RetryAfter(errors.New("pagerduty: 429"), time.Minute)
			}
			return nil
		}}
		sl := &notifytest.Recorder{}
		follower := newCopy(t, store, pd, sl, true)
		follower.start(t)
		old := newCopy(t, store, pd, sl, false)
		old.start(t)
		t0 := time.Now()
		old.d.Send(at(notifytest.PreemptStorm(t0), t0))
		synctest.Wait()
		old.stop() // within the drain timeout the hold has not passed
		if n := len(pd.Attempts()); n != 1 {
			t.Fatalf("attempts before takeover = %d, want 1", n)
		}

		if err := follower.d.SetActive(true, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := kinds(follower.d.Queue("pagerduty").Pending()); got != "5f1c/trigger" {
			t.Fatalf("taken-over outbox = %q", got)
		}
		if got := follower.d.Queue("pagerduty").HoldUntil(); !got.Equal(t0.Add(time.Minute)) {
			t.Errorf("hold = %s, want the old leader's %s", got, t0.Add(time.Minute))
		}
		if got := counter(t, follower.reg, "watchdog_notification_queue_length", "integration", "pagerduty"); got != 1 {
			t.Errorf("queue length after takeover = %v, want 1", got)
		}
		advance(time.Until(t0.Add(time.Minute)) - time.Millisecond)
		if n := len(pd.Attempts()); n != 1 {
			t.Fatalf("the new leader ignored the Retry-After hold: %d attempts", n)
		}
		advance(time.Millisecond)
		if got := kinds(pd.Delivered()); got != "5f1c/trigger" {
			t.Errorf("pagerduty delivered %q, want the one trigger", got)
		}
		if got := kinds(sl.Delivered()); got != "5f1c/trigger" {
			t.Errorf("slack delivered %q, want the one trigger (delivered by the old leader)", got)
		}
		follower.stop()
	})
}

// While no copy delivers (the leader died, the lease has not expired yet),
// the standby copy's tracker goes on: an incident resolves, another
// escalates, a third starts. On takeover exactly those reach the
// integrations; what the old leader already said is not repeated.
func TestTakeoverCatchesUpOnTheLeaderlessGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		pd, sl := &notifytest.Recorder{}, &notifytest.Recorder{}
		old := newCopy(t, store, pd, sl, false)
		follower := newCopy(t, store, pd, sl, true)
		old.start(t)
		follower.start(t)
		t0 := time.Now()
		storm := at(notifytest.PreemptStorm(t0), t0)   // critical: PagerDuty + Slack
		retry := at(notifytest.RetryAvalanche(t0), t0) // warning: Slack
		steady := at(notifytest.CacheCollapse(t0), t0) // warning: Slack, unchanged through the gap
		for _, ev := range []notify.Event{storm, retry, steady} {
			old.d.Send(ev)
			follower.d.Send(ev)
		}
		synctest.Wait()
		old.stop() // "dies"

		advance(5 * time.Second)
		gap := time.Now()
		follower.d.Send(notifytest.Resolve(storm, gap))
		follower.d.Send(notifytest.Update(retry, gap, detect.Critical))
		steadyRepeat := steady
		steadyRepeat.Seq++
		steadyRepeat.Kind, steadyRepeat.At = notify.KindRepeat, gap
		follower.d.Send(steadyRepeat)
		down := at(notifytest.PreemptStorm(gap), gap)
		down.Fingerprint, down.Class, down.Replica = "d0wn0000d0wn0000", "replica_down", "qwen-32b-gw"
		follower.d.Send(down)
		synctest.Wait()
		if n := len(pd.Attempts()) + len(sl.Attempts()); n != 4 {
			t.Fatalf("attempts before takeover = %d, want the old leader's 4", n)
		}

		advance(10 * time.Second)
		if err := follower.d.SetActive(true, time.Now()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// PagerDuty: the storm's resolve; the escalated retry avalanche now
		// routes to it and it never had it: a trigger; the new incident.
		if got, want := kinds(pd.Delivered()), "5f1c/trigger 5f1c/resolve 9a4e/trigger d0wn/trigger"; got != want {
			t.Errorf("pagerduty got %q, want %q", got, want)
		}
		// Slack: the same, with the escalation as an update of the open
		// message. Nothing for the cache collapse: its repeat says nothing new.
		if got, want := kinds(sl.Delivered()), "5f1c/trigger 9a4e/trigger c3d8/trigger 5f1c/resolve 9a4e/update d0wn/trigger"; got != want {
			t.Errorf("slack got %q, want %q", got, want)
		}
		// The catch-up is consumed: a second takeover repeats nothing.
		if err := follower.d.SetActive(false, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := follower.d.SetActive(true, time.Now()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := len(pd.Delivered()) + len(sl.Delivered()); n != 10 {
			t.Errorf("a second takeover delivered again: %d deliveries, want 10", n)
		}
		follower.stop()
	})
}

// Losing the lease mid-attempt: the attempt finishes, but its result is
// neither applied nor written (the new leader owns the store), and nothing
// more is attempted. Taking over again reloads the event from the store,
// where it is still pending, and delivers it (at least once).
func TestDeactivateDuringAnAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		release := make(chan struct{})
		first := true
		sl := &notifytest.Recorder{Fail: func(notify.Event, int) error {
			if first {
				first = false
				<-release
			}
			return nil
		}}
		r := newCopy(t, store, &notifytest.Recorder{}, sl, false)
		r.start(t)
		ev := at(notifytest.RetryAvalanche(time.Now()), time.Now())
		r.d.Send(ev)
		synctest.Wait() // the Slack attempt is in flight
		if err := r.d.SetActive(false, time.Now()); err != nil {
			t.Fatal(err)
		}
		before := snapshot(store)
		close(release)
		advance(time.Hour)
		if after := snapshot(store); !maps.Equal(before, after) {
			t.Error("the attempt's result was written after leadership was lost")
		}
		if r.logs.FilterMessageSnippet("leadership changed during a delivery attempt").Len() != 1 {
			t.Errorf("discarded result not logged: %v", r.logs.All())
		}
		if n := len(sl.Attempts()); n != 1 {
			t.Fatalf("attempts in standby: %d, want only the one in flight", n)
		}
		if err := r.d.SetActive(true, time.Now()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := kinds(sl.Delivered()); got != "9a4e/trigger 9a4e/trigger" {
			t.Errorf("slack delivered %q, want the trigger again after re-taking the lease", got)
		}
		r.stop()
	})
}

// A store that cannot be read at takeover: the queue starts empty (pages
// may repeat, none is lost) and SetActive reports it.
func TestTakeoverWithUnreadableStore(t *testing.T) {
	store := &failingLoad{MemStore: notifytest.NewMemStore()}
	sl := &notifytest.Recorder{}
	core, _ := observer.New(zapcore.InfoLevel)
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{{Name: "slack", Notifier: sl, Options: testOpts}},
		Routes:       notify.DefaultRoutes(), Store: store, Logger: zap.New(core), Standby: true,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	store.err = errors.New("configmaps is forbidden")
	err = d.SetActive(true, time.Now())
	if err == nil || !errors.Is(err, store.err) {
		t.Fatalf("SetActive = %v, want the load error", err)
	}
	if !d.Active() {
		t.Error("an unreadable store must not keep the copy from paging")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	d.Send(at(notifytest.RetryAvalanche(time.Now()), time.Now()))
	cancel()
	<-done
	if got := kinds(sl.Delivered()); got != "9a4e/trigger" {
		t.Errorf("delivered %q", got)
	}
	if !slices.Contains(store.Names(), "notify-slack") {
		t.Error("state not written after takeover")
	}
}

type failingLoad struct {
	*notifytest.MemStore
	err error
}

func (f *failingLoad) Load(name string, v any, now time.Time) error {
	if f.err != nil {
		return f.err
	}
	return f.MemStore.Load(name, v, now)
}
