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

// The routing tree as Alertmanager's: the first matching route wins unless
// it continues; a matching route's children refine it and inherit its
// receivers; what no route matches goes to the log only (nil).
func TestRouteTree(t *testing.T) {
	tree := notify.RouteConfig{Routes: []notify.Route{
		{Severities: []string{"critical"}, Receivers: []string{"platform-pager"}, Continue: true},
		{Matchers: []string{`namespace="llm-prod"`}, Receivers: []string{"inference-slack"}, Routes: []notify.Route{
			{Severities: []string{"critical"}, Receivers: []string{"inference-pager", "inference-slack"}},
			{Classes: []string{"preempt_storm"}, Matchers: []string{`model=~".*70B.*"`}, Continue: true},
			{Matchers: []string{`app_kubernetes_io_component="decode"`}, Receivers: []string{"inference-webhook"}},
		}},
		{Matchers: []string{`team="research"`}, Receivers: []string{"research-webhook"}},
		{Severities: []string{"info"}, Receivers: []string{}},
	}}
	if err := tree.Validate(); err != nil {
		t.Fatal(err)
	}
	base := notifytest.PreemptStorm(time.Unix(100, 0)) // preempt_storm, 70B model
	cases := []struct {
		name     string
		severity detect.Severity
		class    string
		model    string
		labels   map[string]string
		want     []string // nil: no route matched, the log only
	}{
		{"critical continues into the team's critical child", detect.Critical, "", "", map[string]string{"namespace": "llm-prod"},
			[]string{"platform-pager", "inference-pager", "inference-slack"}},
		{"no child matches: the parent's own receivers", detect.Warning, "kv_cache_pressure", "qwen", map[string]string{"namespace": "llm-prod"},
			[]string{"inference-slack"}},
		{"a child without receivers inherits, continues to a sibling on a target label", detect.Warning, "", "",
			map[string]string{"namespace": "llm-prod", "app.kubernetes.io/component": "decode"}, []string{"inference-slack", "inference-webhook"}},
		{"class or model off: the inheriting child does not match", detect.Warning, "kv_cache_pressure", "",
			map[string]string{"namespace": "llm-prod", "app.kubernetes.io/component": "decode"}, []string{"inference-webhook"}},
		{"continue reaches a later sibling", detect.Critical, "", "", map[string]string{"team": "research"},
			[]string{"platform-pager", "research-webhook"}},
		{"the first match without continue stops", detect.Critical, "", "", map[string]string{"namespace": "llm-prod", "team": "research"},
			[]string{"platform-pager", "inference-pager", "inference-slack"}},
		{"warning of another team", detect.Warning, "", "", map[string]string{"team": "research"}, []string{"research-webhook"}},
		{"matched with no receivers: log only, but matched", detect.Info, "", "", nil, []string{}},
		{"nothing matches: fall through to the log", detect.Warning, "", "", map[string]string{"namespace": "staging"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := base
			ev.Severity, ev.Labels = c.severity, c.labels
			if c.class != "" {
				ev.Class = c.class
			}
			if c.model != "" {
				ev.Model = c.model
			}
			got := tree.Match(ev)
			if (got == nil) != (c.want == nil) || strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("routed to %#v, want %#v", got, c.want)
			}
		})
	}
}

func TestRouteTreeIsValidatedWithPaths(t *testing.T) {
	bad := notify.RouteConfig{Routes: []notify.Route{
		{Receivers: []string{"ok"}, Routes: []notify.Route{
			{Severities: []string{"page"}},
			{Receivers: []string{"Team A"}},
		}},
		{Receivers: []string{"a"}, Integrations: []string{"b"}},
	}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`routes[0].routes[0].severities[0]: "page"`,
		`routes[0].routes[1].receivers[0]: "Team A" is not a receiver name`,
		`routes[1]: receivers and integrations are the same list; set one`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	known := func(n string) bool { return n == "ok" || n == "a" }
	err = bad.CheckReceivers(known)
	if err == nil || !strings.Contains(err.Error(), `routes[0].routes[1].receivers[0]: "Team A" is not a configured receiver`) {
		t.Fatalf("unknown receivers: %v", err)
	}
	if strings.Contains(err.Error(), `"ok"`) || strings.Contains(err.Error(), `"a"`) {
		t.Errorf("a known receiver reported: %v", err)
	}
}
