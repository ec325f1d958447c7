package notify_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
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
	ev.Severity = detect.Critical
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

func TestRouteMatchersSelectByEventLabels(t *testing.T) {
	routes := notify.RouteConfig{Routes: []notify.Route{
		{Matchers: []string{`team="inference"`, `namespace=~"llm-.*"`}, Integrations: []string{"alertmanager"}},
		{Severities: []string{"critical"}, Matchers: []string{`model!="meta-llama/Llama-3.1-70B-Instruct"`}, Integrations: []string{notify.IntegrationPagerDuty}},
		{Matchers: []string{`class=preempt_storm, replica=~"llama-.*"`, `app_kubernetes_io_name="sglang"`}, Integrations: []string{notify.IntegrationSlack}},
	}}
	if err := routes.Validate(); err != nil {
		t.Fatal(err)
	}
	ev := notifytest.PreemptStorm(time.Unix(100, 0)) // critical, 70B model
	cases := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"team and namespace match", map[string]string{"team": "inference", "namespace": "llm-prod"}, "alertmanager"},
		{"namespace does not match the regexp", map[string]string{"team": "inference", "namespace": "prod"}, ""},
		{"target label names are made label names", map[string]string{"app.kubernetes.io/name": "sglang"}, "slack"},
		{"no labels", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := ev
			e.Labels = c.labels
			got := routes.Match(e)
			want := c.want
			if (len(got) == 0 && want != "") || (len(got) > 0 && got[0] != want) {
				t.Errorf("routed to %v, want %q", got, want)
			}
		})
	}
	other := ev
	other.Model = "qwen"
	if got := routes.Match(other); len(got) != 1 || got[0] != notify.IntegrationPagerDuty {
		t.Errorf("a critical event of another model routed to %v, want pagerduty", got)
	}
}

func TestRouteMatchersAreValidatedWithTheirPath(t *testing.T) {
	bad := notify.RouteConfig{Routes: []notify.Route{
		{Matchers: []string{`team="ok"`}},
		{Matchers: []string{`team="ok"`, `namespace=~"("`, `==`}},
	}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"routes[1].matchers[1]:", "routes[1].matchers[2]:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "routes[0]") {
		t.Errorf("a valid route reported: %v", err)
	}
}

func TestEventLabels(t *testing.T) {
	ev := notifytest.PreemptStorm(time.Unix(100, 0))
	ev.Labels = map[string]string{"class": "spoofed", "team": "inference", "9lives": "x", "__reserved": "y", "empty": ""}
	got := notify.EventLabels(ev)
	want := map[string]string{"class": "preempt_storm", "severity": "critical", "replica": "llama-70b-0",
		"model": "meta-llama/Llama-3.1-70B-Instruct", "team": "inference", "_9lives": "x"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
