package notifytest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagerduty"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/slack"
)

// standby builds a dispatcher of a standby copy on the world's store.
func (w *world) standby(t *testing.T) *notify.Dispatcher {
	t.Helper()
	sl, err := slack.New(w.slackCfg, &http.Client{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	pd, err := pagerduty.New(pagerduty.Config{RoutingKey: routingKey, EventsURL: w.pd.EventsURL()}, &http.Client{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{
			{Name: notify.IntegrationSlack, Notifier: sl, Options: w.opts},
			{Name: notify.IntegrationPagerDuty, Notifier: pd, Options: w.opts},
		},
		Routes: notify.DefaultRoutes(), Store: w.store, Registerer: prometheus.NewRegistry(), Standby: true,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// After a takeover, the new leader's own trigger for the incident the old
// leader opened (its tracker fired at a slightly different time) edits the
// old leader's Slack message and sends PagerDuty nothing; its resolve closes
// both with the same ts and dedup_key.
func TestTakeoverTriggerEditsTheSameMessage(t *testing.T) {
	w := newWorld(t, notifytest.NewMemStore())
	follower := w.standby(t)
	old := notifytest.PreemptStorm(notifytest.T0)
	run(t, w.dispatcher(t), old)
	parents := w.slack.Parents()
	if len(parents) != 1 {
		t.Fatalf("%d slack parents from the old leader", len(parents))
	}
	ts := parents[0].TS

	follower.Send(old) // standby: dropped, the old leader has it
	if err := follower.SetActive(true, time.Now()); err != nil {
		t.Fatal(err)
	}
	mine := notifytest.PreemptStorm(notifytest.T0.Add(12 * time.Second))
	run(t, follower, mine, notifytest.Resolve(mine, notifytest.T0.Add(20*time.Minute)))

	if p := w.slack.Parents(); len(p) != 1 || p[0].TS != ts {
		t.Fatalf("slack parents %+v, want only %s", p, ts)
	}
	updates := 0
	for _, r := range w.slack.Requests() {
		if r.Method == "chat.update" {
			updates++
			if r.Form.Get("ts") != ts {
				t.Errorf("chat.update of %s, want %s", r.Form.Get("ts"), ts)
			}
		}
	}
	if updates != 2 {
		t.Errorf("%d chat.update calls, want 2 (the trigger as an edit, the resolve)", updates)
	}
	acc := w.pd.Accepted()
	if len(acc) != 2 || acc[0].Action != "trigger" || acc[1].Action != "resolve" || acc[1].DedupKey != old.Fingerprint {
		t.Errorf("pagerduty got %+v, want the old leader's trigger and this copy's resolve, one dedup_key", acc)
	}
}
