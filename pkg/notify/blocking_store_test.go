package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// gatedStore is a MemStore whose writes wait at a gate while it is shut,
// like a state ConfigMap behind a stalled API server. It counts the writes
// begun per document.
type gatedStore struct {
	*notifytest.MemStore
	mu     sync.Mutex
	gate   chan struct{} // nil: open
	begun  map[string]int
	landed map[string]int
}

func newGatedStore() *gatedStore {
	return &gatedStore{MemStore: notifytest.NewMemStore(), begun: map[string]int{}, landed: map[string]int{}}
}

func (s *gatedStore) shut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *gatedStore) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.gate)
	s.gate = nil
}

func (s *gatedStore) Save(name string, v any) error {
	s.mu.Lock()
	s.begun[name]++
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err := s.MemStore.Save(name, v); err != nil {
		return err
	}
	s.mu.Lock()
	s.landed[name]++
	s.mu.Unlock()
	return nil
}

func (s *gatedStore) writes() (begun, landed map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, l := map[string]int{}, map[string]int{}
	for k, v := range s.begun {
		b[k] = v
	}
	for k, v := range s.landed {
		l[k] = v
	}
	return b, l
}

// A stalled store does not hold up Send (inside a synctest bubble a Send
// waiting for the store would be reported as a deadlock) nor delivery,
// which goes on from memory; once the store answers, the many saves made
// meanwhile land as one write per document, of the newest state.
func TestDeliveryGoesOnWhileTheStoreIsStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newGatedStore()
		pd, sl := &notifytest.Recorder{}, &notifytest.Recorder{}
		d, err := notify.NewDispatcher(notify.DispatcherConfig{
			Integrations: []notify.Integration{
				{Name: "pagerduty", Notifier: pd, Options: testOpts},
				{Name: "slack", Notifier: sl, Options: testOpts},
			},
			Routes: notify.DefaultRoutes(), Store: store, Registerer: prometheus.NewRegistry(),
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { _ = d.Run(ctx); close(done) }()

		store.shut()
		trig := at(notifytest.PreemptStorm(time.Now()), time.Now())
		d.Send(trig)
		synctest.Wait()
		begun, landed := store.writes()
		if n := begun["notify-log"] + begun["notify-pagerduty"] + begun["notify-slack"]; n != 1 || len(landed) != 0 {
			t.Fatalf("writes begun %v, landed %v: want the first one waiting at the store", begun, landed)
		}
		advance(time.Minute)
		upd := notifytest.Update(trig, time.Now(), detect.Critical)
		d.Send(upd)
		synctest.Wait()
		d.Send(notifytest.Resolve(upd, time.Now()))
		synctest.Wait()
		for name, rec := range map[string]*notifytest.Recorder{"pagerduty": pd, "slack": sl} {
			if got, want := kinds(rec.Delivered()), "5f1c/trigger 5f1c/update 5f1c/resolve"; got != want {
				t.Errorf("%s got %q while the store is stalled, want %q", name, got, want)
			}
		}
		if _, landed = store.writes(); len(landed) != 0 {
			t.Fatalf("writes landed while the store is stalled: %v", landed)
		}

		store.open()
		synctest.Wait()
		begun, _ = store.writes()
		for _, in := range []string{"log", "pagerduty", "slack"} {
			// At most the batch taken before the stall and one more with
			// the newest state, for the six saves each queue made.
			if n := begun["notify-"+in]; n < 1 || n > 2 {
				t.Errorf("notify-%s written %d times, want the saves coalesced into at most 2", in, n)
			}
		}
		for _, in := range []string{"pagerduty", "slack"} {
			var doc struct {
				Outbox    []json.RawMessage          `json:"outbox"`
				Incidents map[string]notify.Incident `json:"incidents"`
			}
			if err := json.Unmarshal(store.Raw("notify-"+in), &doc); err != nil {
				t.Fatal(err)
			}
			rec := doc.Incidents[trig.Fingerprint]
			if len(doc.Outbox) != 0 || rec.Open || rec.Last.Kind != notify.KindResolve {
				t.Errorf("notify-%s = %d waiting, record %+v: want the newest state, the incident resolved", in, len(doc.Outbox), rec)
			}
		}
		cancel()
		<-done
	})
}

// The same promise outside a bubble, where a Send that waited for the
// store would fail the test within seconds rather than hang it: Send,
// Enqueue and Len all return while every write is stuck.
func TestSendReturnsWhileTheStoreIsStalled(t *testing.T) {
	store := newGatedStore()
	store.shut()
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{{Name: "pagerduty", Notifier: &notifytest.Recorder{}, Options: testOpts}},
		Routes:       notify.DefaultRoutes(), Store: store,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	defer func() { cancel(); store.open(); <-done }()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		now := time.Now()
		for i := range 20 {
			ev := at(notifytest.PreemptStorm(now), now)
			ev.Fingerprint = fmt.Sprintf("%016x", i)
			d.Send(ev)
			d.Queue("pagerduty").Enqueue(notifytest.Update(ev, now, detect.Critical))
		}
		d.Queue("pagerduty").Len()
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second): // a guard, not a wait: each call takes microseconds
		t.Fatal("Send or Enqueue waited for the stalled store")
	}
}
