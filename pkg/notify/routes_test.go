package notify_test

import (
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

func targetNames(qs []*notify.Queue, d *notify.Dispatcher) []string {
	var out []string
	for _, name := range d.Integrations() {
		for _, q := range qs {
			if q == d.Queue(name) {
				out = append(out, name)
			}
		}
	}
	return out
}

func TestSetRoutesChangesRoutingLiveAndRejectsBadTables(t *testing.T) {
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{{Name: notify.IntegrationPagerDuty, Notifier: &notifytest.Recorder{}}},
		Routes:       notify.RouteConfig{Routes: []notify.Route{{Severities: []string{"critical"}, Integrations: []string{}}}},
	}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	ev := notifytest.PreemptStorm(time.Unix(100, 0))
	ev.Severity = "critical"
	if got := targetNames(d.Targets(ev), d); len(got) != 1 || got[0] != "log" {
		t.Fatalf("before: %v", got)
	}
	if err := d.SetRoutes(notify.DefaultRoutes()); err != nil {
		t.Fatal(err)
	}
	if got := targetNames(d.Targets(ev), d); len(got) != 2 || got[1] != notify.IntegrationPagerDuty {
		t.Fatalf("after: %v", got)
	}
	bad := notify.RouteConfig{Routes: []notify.Route{{Severities: []string{"urgent"}}}}
	if err := d.SetRoutes(bad); err == nil {
		t.Fatal("bad table accepted")
	}
	if got := targetNames(d.Targets(ev), d); len(got) != 2 {
		t.Fatalf("a rejected table changed routing: %v", got)
	}
}
