// Package grafana reads the PromQL of a Grafana dashboard, so that tests can
// check that every query names metrics that exist: SGLang's, as the captured
// expositions show them, and the watchdog's own, as the daemon serves them
// (cmd/watchdog's TestDashboardQueriesNameRealMetrics). A renamed metric then
// fails a test instead of leaving an empty panel.
//
// The dashboard itself is sglang-watchdog.json beside this file; the Helm
// chart ships a copy in its files/ directory (Helm cannot read files outside
// the chart), written by `go generate ./...` (scripts/generate).
package grafana

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Query is one PromQL expression of a dashboard and the metrics it reads.
type Query struct {
	// Where names the panel and target, or the template variable.
	Where string
	Expr  string
	// Metrics are the metric names the expression selects, from vector
	// selectors' names and their __name__ equality matchers.
	Metrics []string
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row holds its panels
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// Queries returns every PromQL expression of the dashboard JSON: panel
// targets (rows' nested panels included) and query variables. An expression
// that does not parse is an error naming where it is.
func Queries(dashboardJSON []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	// A query variable's label_values(selector, label): the selector is PromQL.
	labelValues := regexp.MustCompile(`^\s*label_values\((.*),\s*\w+\s*\)\s*$`)
	var out []Query
	var errs []string
	add := func(where, expr string) {
		metrics, err := metricNames(expr)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", where, err))
			return
		}
		out = append(out, Query{Where: where, Expr: expr, Metrics: metrics})
	}
	var walk func(prefix string, ps []panel)
	walk = func(prefix string, ps []panel) {
		for _, p := range ps {
			where := prefix + "panel " + fmt.Sprintf("%q", p.Title)
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					errs = append(errs, fmt.Sprintf("%s target %s: no expr", where, t.RefID))
					continue
				}
				add(where+" target "+t.RefID, t.Expr)
			}
			walk(where+" / ", p.Panels)
		}
	}
	walk("", d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := "variable " + v.Name
		q, err := variableQuery(v.Query)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			add(where, m[1])
			continue
		}
		add(where, q)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("dashboard queries:\n  %s", strings.Join(errs, "\n  "))
	}
	return out, nil
}

// variableQuery reads a query variable's query: a string, or (Grafana 10+)
// an object with a "query" string.
func variableQuery(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object with a query: %w", err)
	}
	return o.Query, nil
}

func metricNames(expr string) ([]string, error) {
	// Grafana substitutes its interval variables before the query reaches
	// Prometheus; any duration parses the same way.
	substituted := regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`).ReplaceAllString(expr, "5m")
	// Other variables appear only inside label matcher strings, where any
	// text parses.
	substituted = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`).ReplaceAllString(substituted, "var")
	node, err := parser.NewParser(parser.Options{}).ParseExpr(substituted)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name != "" {
			names = append(names, vs.Name)
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual && m.Value != vs.Name {
				names = append(names, m.Value)
			}
		}
		return nil
	})
	if len(names) == 0 {
		return nil, fmt.Errorf("%q selects no metric by name", expr)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Unknown lists, for each query, the metric names that known does not
// accept, as "where: name".
func Unknown(queries []Query, known func(name string) bool) []string {
	var out []string
	for _, q := range queries {
		for _, m := range q.Metrics {
			if !known(m) {
				out = append(out, fmt.Sprintf("%s: %s", q.Where, m))
			}
		}
	}
	return out
}
