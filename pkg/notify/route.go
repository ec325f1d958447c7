package notify

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	amlabels "github.com/prometheus/alertmanager/pkg/labels"
)

// Route selects receivers (named integrations) for events by severity,
// class and label matchers, as a node of Alertmanager's routing tree. Empty
// Severities, Classes or Matchers match any. The log receives every event
// anyway, so a route whose receivers are empty sends to the log only.
type Route struct {
	Severities []string `yaml:"severities,omitempty"`
	Classes    []string `yaml:"classes,omitempty"`
	// Matchers are label matchers in Alertmanager's syntax (team="infra",
	// namespace=~"llm-.*", model!="llama-3-8b"; an entry may hold several,
	// comma-separated) on the event's labels (see EventLabels); every one
	// must match.
	Matchers []string `yaml:"matchers,omitempty"`
	// Receivers are the names of the integrations a matching event goes
	// to. A child route that names none (nil) inherits its parent's; an
	// empty list sends to the log only.
	Receivers []string `yaml:"receivers,omitempty"`
	// Integrations is the older name of Receivers; a route sets one or
	// the other.
	Integrations []string `yaml:"integrations,omitempty"`
	// Continue goes on to the next sibling route after this one matched,
	// so one event can reach the receivers of several routes.
	Continue bool `yaml:"continue,omitempty"`
	// Routes are child routes, tried in order once this one matches: the
	// receivers of the children that match replace this route's own; when
	// none matches, this route's receivers are used.
	Routes []Route `yaml:"routes,omitempty"`
}

// names are the route's own receivers; inherited when it names none.
func (r Route) names(inherited []string) []string {
	switch {
	case r.Receivers != nil:
		return r.Receivers
	case r.Integrations != nil:
		return r.Integrations
	}
	return inherited
}

// RouteConfig is the routing tree's top level, an implicit root whose
// receivers are none: the first matching route wins unless it continues;
// an event no route matches goes to the log only.
type RouteConfig struct {
	Routes []Route `yaml:"routes"`
}

// Integration names of the single-integration configuration
// (notify.slack, notify.pagerduty), used by the default routes.
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

// ValidName reports whether name can name a receiver: lower-case letters,
// digits, _ and -, starting with a letter, at most 63 characters (it is
// part of a state document's name and a metric label).
func ValidName(name string) bool { return validIntegrationName.MatchString(name) }

// Validate reports every problem, each prefixed with its YAML path relative
// to the route config ("routes[1].severities[0]: ...",
// "routes[0].routes[2].receivers[1]: ...").
func (c RouteConfig) Validate() error {
	return validateRoutes("routes", c.Routes)
}

func validateRoutes(path string, routes []Route) error {
	var errs []error
	for i, r := range routes {
		p := fmt.Sprintf("%s[%d]", path, i)
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
		if r.Receivers != nil && r.Integrations != nil {
			errs = append(errs, fmt.Errorf("%s: receivers and integrations are the same list; set one", p))
		}
		key, names := "receivers", r.Receivers
		if names == nil {
			key, names = "integrations", r.Integrations
		}
		for j, n := range names {
			if !ValidName(n) {
				errs = append(errs, fmt.Errorf("%s.%s[%d]: %q is not a receiver name", p, key, j, n))
			}
		}
		if err := validateRoutes(p+".routes", r.Routes); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckReceivers reports every receiver name the tree uses that known
// does not know, with its YAML path relative to the route config.
func (c RouteConfig) CheckReceivers(known func(name string) bool) error {
	var errs []error
	c.walk(func(path, name string) {
		if !known(name) {
			errs = append(errs, fmt.Errorf("%s: %q is not a configured receiver", path, name))
		}
	})
	return errors.Join(errs...)
}

// walk calls f with every receiver name of the tree and its YAML path.
func (c RouteConfig) walk(f func(path, name string)) {
	var visit func(path string, routes []Route)
	visit = func(path string, routes []Route) {
		for i, r := range routes {
			p := fmt.Sprintf("%s[%d]", path, i)
			key, names := "receivers", r.Receivers
			if names == nil {
				key, names = "integrations", r.Integrations
			}
			for j, n := range names {
				f(fmt.Sprintf("%s.%s[%d]", p, key, j), n)
			}
			visit(p+".routes", r.Routes)
		}
	}
	visit("routes", c.Routes)
}

// Match returns the receivers ev goes to, in the order the tree names
// them and each once: those of the first matching route, and of every
// later sibling that matches while the routes before it continue; a
// matching route with children gives its matching children's receivers,
// its own when none matches. Nil when no route matches.
func (c RouteConfig) Match(ev Event) []string {
	m := matcher{ev: ev}
	out, matched := m.match(c.Routes, nil)
	if !matched {
		return nil
	}
	if out == nil {
		out = []string{}
	}
	return out
}

// matcher computes the event's labels once, when a route first asks.
type matcher struct {
	ev     Event
	labels map[string]string
}

func (m *matcher) match(routes []Route, inherited []string) (out []string, matched bool) {
	for _, r := range routes {
		if !m.matches(r) {
			continue
		}
		matched = true
		own := r.names(inherited)
		names, childMatched := m.match(r.Routes, own)
		if !childMatched {
			names = own
		}
		for _, n := range names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		if !r.Continue {
			break
		}
	}
	return out, matched
}

func (m *matcher) matches(r Route) bool {
	if len(r.Severities) > 0 && !slices.Contains(r.Severities, m.ev.Severity.String()) {
		return false
	}
	if len(r.Classes) > 0 && !slices.Contains(r.Classes, m.ev.Class) {
		return false
	}
	if len(r.Matchers) > 0 {
		if m.labels == nil {
			m.labels = EventLabels(m.ev)
		}
		if !matchesAll(r.Matchers, m.labels) {
			return false
		}
	}
	return true
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
