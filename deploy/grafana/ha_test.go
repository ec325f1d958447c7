package grafana

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Two HA copies both evaluate and scrape, so both export the alert and
// target gauges; the dashboard counts the leader's only. A copy without
// HA (no watchdog_leader) counts as it is.
func TestHACopiesAreNotCountedTwice(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is needed (Debian's prometheus package; .ci/run installs it): %v", err)
	}
	copyOf := func(instance string, leader string) []string {
		ls := func(name string, extra ...string) map[string]string {
			m := map[string]string{"__name__": name, "job": "sglang-watchdog", "instance": instance}
			for i := 0; i+1 < len(extra); i += 2 {
				m[extra[i]] = extra[i+1]
			}
			return m
		}
		out := []string{
			series(ls("watchdog_alerts", "class", "preempt_storm", "state", "firing"), 1),
			series(ls("watchdog_alerts", "class", "replica_down", "state", "firing"), 2),
			series(ls("watchdog_target_up", "target", "sglang-0"), 1),
			series(ls("watchdog_target_up", "target", "sglang-1"), 0),
		}
		if leader != "" {
			out = append(out, series(ls("watchdog_leader"), map[string]float64{"leader": 1, "follower": 0}[leader]))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		copies []string
	}{
		{"two HA copies", append(copyOf("10.2.0.1:9402", "leader"), copyOf("10.2.0.2:9402", "follower")...)},
		{"one copy without HA", copyOf("10.2.0.1:9402", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tests := []struct{ panel, want string }{
				{"Alerts firing", "\n          - labels: '{class=\"preempt_storm\"}'\n            value: 1\n          - labels: '{class=\"replica_down\"}'\n            value: 2"},
			}
			var exprs []string
			for _, tt := range tests {
				q := panelTarget(t, tt.panel, "A")
				expr := strings.NewReplacer(`"$cluster"`, `".*"`, `"$watchdog_job"`, `".*"`).Replace(q.Expr)
				exprs = append(exprs, fmt.Sprintf("      - expr: %s\n        eval_time: 2m\n        exp_samples:%s", yamlQuote(expr), tt.want))
			}
			for _, targets := range []struct {
				target string
				want   string
			}{{"A", "1"}, {"B", "2"}} {
				q := panelTarget(t, "Targets up", targets.target)
				expr := strings.NewReplacer(`"$cluster"`, `".*"`, `"$watchdog_job"`, `".*"`).Replace(q.Expr)
				exprs = append(exprs, fmt.Sprintf("      - expr: %s\n        eval_time: 2m\n        exp_samples:\n          - labels: '{}'\n            value: %s", yamlQuote(expr), targets.want))
			}
			file := filepath.Join(t.TempDir(), "ha.test.yaml")
			doc := "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n" +
				strings.Join(tc.copies, "") + "    promql_expr_test:\n" + strings.Join(exprs, "\n") + "\n"
			if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
				t.Errorf("promtool test rules: %v\n%s", err, out)
			}
		})
	}
}

// panelTarget is the query of refId of the panel titled title.
func panelTarget(t *testing.T, title, refID string) Query {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := Queries(b)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(queries, func(q Query) bool { return q.Where == fmt.Sprintf("panel %q target %s", title, refID) })
	if i < 0 {
		t.Fatalf("no panel %q target %s", title, refID)
	}
	return queries[i]
}
