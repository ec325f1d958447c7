package notify_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// refreshing is a recording Notifier whose provider forgets firing alerts
// unless they are re-sent every interval (like Alertmanager).
type refreshing struct {
	notifytest.Recorder
	every time.Duration
}

func (r *refreshing) RefreshInterval() time.Duration { return r.every }

// refreshRig runs a dispatcher on store that routes every event to a
// refreshing integration "am" and a plain recording "slack".
func refreshRig(t *testing.T, store notify.Store, am *refreshing, sl *notifytest.Recorder) (*notify.Dispatcher, func()) {
	t.Helper()
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{
			{Name: "am", Notifier: am, Options: testOpts},
			{Name: "slack", Notifier: sl, Options: testOpts},
		},
		Routes: notify.RouteConfig{Routes: []notify.Route{{Integrations: []string{"am", "slack"}}}},
		Store:  store,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		_ = d.Run(ctx)
		close(done)
	}()
	return d, func() { cancel(); <-done }
}

func TestRefresherResendsOpenIncidentsUntilResolved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		am, sl := &refreshing{every: time.Minute}, &notifytest.Recorder{}
		d, stop := refreshRig(t, notifytest.NewMemStore(), am, sl)
		defer stop()
		start := time.Now()
		ev := at(notifytest.PreemptStorm(start), start)
		d.Send(ev)
		synctest.Wait()
		advance(3*time.Minute + time.Second)
		got := am.Delivered()
		if kinds(got) != "5f1c/trigger 5f1c/repeat 5f1c/repeat 5f1c/repeat" {
			t.Fatalf("refreshing integration got %s, want the trigger and one repeat per minute", kinds(got))
		}
		for i, e := range got[1:] {
			if want := start.Add(time.Duration(i+1) * time.Minute); !e.At.Equal(want) || e.Summary != ev.Summary || e.Seq != ev.Seq {
				t.Errorf("repeat %d: at %s seq %d, want the last delivered event again at %s", i, e.At, e.Seq, want)
			}
		}
		if kinds(sl.Delivered()) != "5f1c/trigger" {
			t.Errorf("an integration that is no Refresher was re-sent: %s", kinds(sl.Delivered()))
		}
		d.Send(notifytest.Resolve(ev, time.Now()))
		synctest.Wait()
		advance(5 * time.Minute)
		got = am.Delivered()
		if last := got[len(got)-1]; last.Kind != notify.KindResolve {
			t.Errorf("after the resolve: %s, want nothing re-sent", kinds(got))
		}
	})
}

// While an event of the incident waits (a failing Alertmanager, backing
// off), no refresh is queued behind it: the waiting event is the refresh.
func TestRefreshWaitsForThePendingEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		down.Store(true)
		am := &refreshing{every: time.Minute}
		am.Fail = func(notify.Event, int) error {
			if down.Load() {
				return notify.WithReason(errors.New("alertmanager: HTTP 503"), notify.ReasonServerError)
			}
			return nil
		}
		d, stop := refreshRig(t, notifytest.NewMemStore(), am, &notifytest.Recorder{})
		defer stop()
		d.Send(at(notifytest.PreemptStorm(time.Now()), time.Now()))
		synctest.Wait()
		advance(5 * time.Minute)
		if n := len(d.Queue("am").Pending()); n != 1 {
			t.Fatalf("%d events pending, want only the undelivered trigger", n)
		}
		down.Store(false)
		advance(2 * time.Minute)
		got := am.Delivered()
		if len(got) == 0 || got[0].Kind != notify.KindTrigger {
			t.Fatalf("delivered %s, want the trigger first", kinds(got))
		}
		if len(got) > 3 {
			t.Errorf("delivered %s: refreshes piled up while the trigger waited", kinds(got))
		}
	})
}

// After a restart the open incidents are re-sent at once: they may have
// expired at the provider while the daemon was down.
func TestRefreshAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		am := &refreshing{every: time.Hour}
		d, stop := refreshRig(t, store, am, &notifytest.Recorder{})
		d.Send(at(notifytest.PreemptStorm(time.Now()), time.Now()))
		synctest.Wait()
		stop()
		advance(10 * time.Minute)

		am2 := &refreshing{every: time.Hour}
		_, stop2 := refreshRig(t, store, am2, &notifytest.Recorder{})
		defer stop2()
		synctest.Wait()
		if kinds(am2.Delivered()) != "5f1c/repeat" {
			t.Errorf("after the restart: %s, want the open incident re-sent at once", kinds(am2.Delivered()))
		}
	})
}
