package notify

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	amlabels "github.com/prometheus/alertmanager/pkg/labels"
)

// Route selects integrations for events by severity, class and label
// matchers. Empty Severities, Classes or Matchers match any. An empty
// Integrations list means "log only" (the log integration receives every
// event anyway).
type Route struct {
	Severities []string `yaml:"severities,omitempty"`
	Classes    []string `yaml:"classes,omitempty"`
	// Matchers are label matchers in Alertmanager's syntax (team="infra",
	// namespace=~"llm-.*", model!="llama-3-8b"; an entry may hold several,
	// comma-separated) on the event's labels (see EventLabels); every one
	// must match.
	Matchers     []string `yaml:"matchers,omitempty"`
	Integrations []string `yaml:"integrations"`
}

// RouteConfig is the routing table: the first matching route wins; an event
// no route matches goes to the log only.
type RouteConfig struct {
	Routes []Route `yaml:"routes"`
}

// Integration names used by the default routes.
const (
	IntegrationPagerDuty = "pagerduty"
	IntegrationSlack     = "slack"
)

// DefaultRoutes: critical → PagerDuty and Slack, warning → Slack, info → log only.
func DefaultRoutes() RouteConfig {
	return RouteConfig{Routes: []Route{
		{Severities: []string{"critical"}, Integrations: []string{IntegrationPagerDuty, IntegrationSlack}},
		{Severities: []string{"warning"}, Integrations: []string{IntegrationSlack}},
		{Severities: []string{"info"}, Integrations: []string{}},
	}}
}

var validSeverities = []string{"critical", "warning", "info"}

var validClass = regexp.MustCompile(`^[a-z0-9][a-z0-9_]*$`)

// Validate reports every problem, each prefixed with its YAML path relative
// to the route config ("routes[1].severities[0]: ...").
func (c RouteConfig) Validate() error {
	var errs []error
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		for j, s := range r.Severities {
			if !slices.Contains(validSeverities, s) {
				errs = append(errs, fmt.Errorf("%s.severities[%d]: %q is not one of critical, warning, info", p, j, s))
			}
		}
		for j, cl := range r.Classes {
			if !validClass.MatchString(cl) {
				errs = append(errs, fmt.Errorf("%s.classes[%d]: %q is not an incident class name", p, j, cl))
			}
		}
		for j, m := range r.Matchers {
			if _, err := amlabels.ParseMatchers(m); err != nil {
				errs = append(errs, fmt.Errorf("%s.matchers[%d]: %w", p, j, err))
			}
		}
		for j, n := range r.Integrations {
			if !validIntegrationName.MatchString(n) {
				errs = append(errs, fmt.Errorf("%s.integrations[%d]: %q is not an integration name", p, j, n))
			}
		}
	}
	return errors.Join(errs...)
}

// Match returns the integrations of the first route matching ev, nil when
// none matches.
func (c RouteConfig) Match(ev Event) []string {
	var labels map[string]string
	for _, r := range c.Routes {
		if len(r.Severities) > 0 && !slices.Contains(r.Severities, ev.Severity.String()) {
			continue
		}
		if len(r.Classes) > 0 && !slices.Contains(r.Classes, ev.Class) {
			continue
		}
		if len(r.Matchers) > 0 {
			if labels == nil {
				labels = EventLabels(ev)
			}
			if !matchesAll(r.Matchers, labels) {
				continue
			}
		}
		return r.Integrations
	}
	return nil
}

// matchesAll reports whether labels satisfy every matcher. Matchers are
// validated when the table is loaded; one that does not parse matches
// nothing. A missing label is the empty value, as in Alertmanager.
func matchesAll(matchers []string, labels map[string]string) bool {
	for _, m := range matchers {
		ms, err := amlabels.ParseMatchers(m)
		if err != nil {
			return false
		}
		for _, one := range ms {
			if !one.Matches(labels[one.Name]) {
				return false
			}
		}
	}
	return true
}

// EventLabels are the labels routes match and Alertmanager receives: the
// replica's target labels (their names made Prometheus label names, see
// LabelName), then class, severity, replica, model, and fleet="true" for
// a fleet incident, which win over target labels of the same name. Empty
// values are left out.
func EventLabels(ev Event) map[string]string {
	out := make(map[string]string, len(ev.Labels)+5)
	for k, v := range ev.Labels {
		if name := LabelName(k); name != "" && v != "" {
			out[name] = v
		}
	}
	set := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	set("class", ev.Class)
	set("severity", ev.Severity.String())
	set("replica", ev.Replica)
	set("model", ev.Model)
	if ev.Fleet {
		set("fleet", "true")
	}
	return out
}

// LabelName maps a target label key (a Kubernetes label such as
// app.kubernetes.io/name) to a Prometheus label name, as Prometheus's
// Kubernetes discovery does: every character outside [a-zA-Z0-9_] becomes
// _, and a leading digit gets a _ prefix. Reserved names (__*) give "".
func LabelName(key string) string {
	b := make([]byte, 0, len(key)+1)
	for i, r := range key {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
			b = append(b, byte(r))
		case r >= '0' && r <= '9':
			if i == 0 {
				b = append(b, '_')
			}
			b = append(b, byte(r))
		default:
			b = append(b, '_')
		}
	}
	if len(b) == 0 || (len(b) >= 2 && b[0] == '_' && b[1] == '_') {
		return ""
	}
	return string(b)
}
