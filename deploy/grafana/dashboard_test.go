package grafana

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "sglang-watchdog.json"

// Every panel and variable reads the datasource variable, so the dashboard
// works against whichever Prometheus is picked.
func TestDashboardQueriesParse(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := Queries(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) < 20 {
		t.Errorf("%d queries", len(queries))
	}
	if n := bytes.Count(b, []byte(`"uid": "${datasource}"`)); n < len(queries) {
		t.Errorf("%d references to ${datasource} for %d queries: every panel and target must use the datasource variable", n, len(queries))
	}
	for _, v := range []string{"$model", "$instance", "$watchdog_job"} {
		if !bytes.Contains(b, []byte(v)) {
			t.Errorf("no query uses %s", v)
		}
	}
}

func TestQueriesAndUnknown(t *testing.T) {
	known := func(name string) bool {
		return slices.Contains([]string{"sglang:num_running_reqs", "sglang:time_to_first_token_seconds_bucket", "watchdog_scrapes_total"}, name)
	}
	panelWith := func(expr string) string {
		return `{"panels": [{"title": "p", "targets": [{"refId": "A", "expr": ` + quote(expr) + `}]}]}`
	}
	for _, tc := range []struct {
		name      string
		dashboard string
		metrics   []string // the first query's
		unknown   []string
		err       string
	}{
		{name: "known names", dashboard: panelWith(`sum by (instance) (sglang:num_running_reqs{model_name=~"$model", instance=~"${instance}"})`),
			metrics: []string{"sglang:num_running_reqs"}},
		{name: "histogram quantile over a rate interval",
			dashboard: panelWith(`histogram_quantile(0.99, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket[$__rate_interval])))`),
			metrics:   []string{"sglang:time_to_first_token_seconds_bucket"}},
		{name: "made-up name", dashboard: panelWith(`sum(rate(sglang:num_running_requests_total[5m]))`),
			metrics: []string{"sglang:num_running_requests_total"}, unknown: []string{`panel "p" target A: sglang:num_running_requests_total`}},
		{name: "__name__ matcher", dashboard: panelWith(`{__name__="watchdog_scrape_failures_total", job="x"}`),
			metrics: []string{"watchdog_scrape_failures_total"}, unknown: []string{`panel "p" target A: watchdog_scrape_failures_total`}},
		{name: "both sides of a ratio", dashboard: panelWith(`rate(watchdog_scrapes_total[5m]) / rate(watchdog_evaluations[5m])`),
			metrics: []string{"watchdog_evaluations", "watchdog_scrapes_total"}, unknown: []string{`panel "p" target A: watchdog_evaluations`}},
		{name: "a row's nested panel", dashboard: `{"panels": [{"title": "row", "type": "row", "panels": [{"title": "inner", "targets": [{"refId": "B", "expr": "sglang:made_up"}]}]}]}`,
			metrics: []string{"sglang:made_up"}, unknown: []string{`panel "row" / panel "inner" target B: sglang:made_up`}},
		{name: "query variable", dashboard: `{"templating": {"list": [{"name": "model", "type": "query", "query": {"query": "label_values(sglang:nope{a=\"$b\"}, model_name)"}}]}}`,
			metrics: []string{"sglang:nope"}, unknown: []string{"variable model: sglang:nope"}},
		{name: "bad PromQL", dashboard: panelWith(`sum(rate(sglang:num_running_reqs[5m])`), err: `panel "p" target A`},
		{name: "no metric name", dashboard: panelWith(`vector(1)`), err: "selects no metric by name"},
		{name: "empty expr", dashboard: panelWith(``), err: "no expr"},
		{name: "not JSON", dashboard: `{`, err: "dashboard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queries, err := Queries([]byte(tc.dashboard))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(queries) == 0 || !slices.Equal(queries[0].Metrics, tc.metrics) {
				t.Fatalf("queries %+v, want metrics %q first", queries, tc.metrics)
			}
			if got := Unknown(queries, known); !slices.Equal(got, tc.unknown) {
				t.Errorf("unknown %q, want %q", got, tc.unknown)
			}
		})
	}
}

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}
