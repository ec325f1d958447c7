package notify_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// fuzzDispatcher is a dispatcher with one PagerDuty integration over store.
func fuzzDispatcher(tb testing.TB, store notify.Store, reg prometheus.Registerer, at time.Time) *notify.Queue {
	tb.Helper()
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{{Name: "pagerduty", Notifier: &notifytest.Recorder{}, Options: testOpts}},
		Routes:       notify.DefaultRoutes(),
		Store:        store,
		Registerer:   reg,
	}, at)
	if err != nil {
		tb.Fatalf("the dispatcher did not start: %v", err)
	}
	return d.Queue("pagerduty")
}

// FuzzQueueRestore stores arbitrary bytes as an integration's persisted
// outbox document and starts a dispatcher on it, as the daemon does after a
// restart: nothing may panic, the queue must come up (starting empty when
// the document is corrupt), report its state in its metrics, and accept a
// new event.
func FuzzQueueRestore(f *testing.F) {
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	ev := notify.Event{Fingerprint: "f1", Seq: 1, Kind: notify.KindTrigger, Status: notify.StatusFiring,
		Class: "preempt_storm", Severity: detect.Critical, Replica: "r1", At: at}
	q := fuzzDispatcher(f, notifytest.NewMemStore(), prometheus.NewRegistry(), at)
	q.Enqueue(ev)
	f.Add(q.Document())
	f.Add([]byte(`{"version":1,"next_id":0,"outbox":[null],"incidents":{"x":null}}`))
	f.Add([]byte(`{"version":1,"hold_until":"9999-12-31T23:59:59Z","outbox":[{"id":18446744073709551615}]}`))
	f.Add([]byte(`{"version":"one"}`))
	f.Add([]byte("\x00garbage"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		store := notifytest.NewMemStore()
		store.Put("notify-pagerduty", doc)
		reg := prometheus.NewRegistry()
		q := fuzzDispatcher(t, store, reg, at)
		q.Len()
		q.Tracks("f1")
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("metrics after restore: %v", err)
		}
		before := q.Len()
		next := ev
		next.Fingerprint, next.At = "f-new", at.Add(time.Minute)
		q.Enqueue(next)
		if q.Len() < 1 || q.Len() < before {
			t.Fatalf("%d pending after enqueueing onto %d", q.Len(), before)
		}
	})
}
