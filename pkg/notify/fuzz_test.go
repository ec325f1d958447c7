package notify_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// FuzzQueueRestore stores arbitrary bytes as an integration's persisted
// outbox document and starts a queue on it, as the daemon does after a
// restart: nothing may panic, the queue must come up (starting empty when
// the document is corrupt), report its state in its metrics, and accept a
// new event.
func FuzzQueueRestore(f *testing.F) {
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	ev := notify.Event{Fingerprint: "f1", Seq: 1, Kind: notify.KindTrigger, Status: notify.StatusFiring,
		Class: "preempt_storm", Severity: detect.Critical, Replica: "r1", At: at}
	seed := notifytest.NewMemStore()
	q, err := notify.NewQueue("pagerduty", &notifytest.Recorder{}, testOpts, seed, zap.NewNop(), notify.NewMetrics(prometheus.NewRegistry()), at)
	if err != nil {
		f.Fatal(err)
	}
	q.Enqueue(ev)
	f.Add(seed.Raw("notify-pagerduty"))
	f.Add([]byte(`{"version":1,"next_id":0,"outbox":[null],"incidents":{"x":null}}`))
	f.Add([]byte(`{"version":1,"hold_until":"9999-12-31T23:59:59Z","outbox":[{"id":18446744073709551615}]}`))
	f.Add([]byte(`{"version":"one"}`))
	f.Add([]byte("\x00garbage"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		store := notifytest.NewMemStore()
		store.Put("notify-pagerduty", doc)
		reg := prometheus.NewRegistry()
		q, err := notify.NewQueue("pagerduty", &notifytest.Recorder{}, testOpts, store, zap.NewNop(), notify.NewMetrics(reg), at)
		if err != nil {
			t.Fatalf("the queue did not start on a bad document: %v", err)
		}
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
