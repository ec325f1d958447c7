package notify

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
)

// Route selects integrations for events by severity and class. Empty
// Severities or Classes match any. An empty Integrations list means "log
// only" (the log integration receives every event anyway).
type Route struct {
	Severities   []string `yaml:"severities,omitempty"`
	Classes      []string `yaml:"classes,omitempty"`
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
		for j, n := range r.Integrations {
			if !validIntegrationName.MatchString(n) {
				errs = append(errs, fmt.Errorf("%s.integrations[%d]: %q is not an integration name", p, j, n))
			}
		}
	}
	return errors.Join(errs...)
}

// Match returns the integrations of the first route matching severity and
// class, nil when none matches.
func (c RouteConfig) Match(severity, class string) []string {
	for _, r := range c.Routes {
		if len(r.Severities) > 0 && !slices.Contains(r.Severities, severity) {
			continue
		}
		if len(r.Classes) > 0 && !slices.Contains(r.Classes, class) {
			continue
		}
		return r.Integrations
	}
	return nil
}
