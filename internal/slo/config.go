// Package slo holds the service level objectives users were promised and
// the error-budget burn-rate paging over them (the SRE workbook's
// multi-window, multi-burn-rate alerts), per model:
//
//   - Config: the objectives (availability, TTFT, inter-token and
//     end-to-end latency, each a share of events over a period) and the
//     burn-rate policy;
//   - Read: the good and total events of one replica over a span, from
//     its window (counter increases, reset-aware);
//   - Book: the long memory, per objective and model (not per replica),
//     of those events at one-minute resolution over the longest policy
//     window and one-hour resolution over the period, filled from
//     Prometheus at start;
//   - Status: an objective's SLI, burn rates and budget left at an
//     instant, and the finding it pages with (class slo_burn), which
//     correlation files under the detector incident of the model that
//     explains it.
//
// Everything here but the Book's memory is pure: events and a time in.
package slo

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Kind is what an objective counts as a good event.
type Kind string

// Kinds of objective.
const (
	// Availability: inference requests answered without a 5xx, a shed
	// (429/503) or an abort, as the error_rate detector counts them.
	Availability Kind = "availability"
	// TTFT: requests whose time to first token is within the threshold.
	TTFT Kind = "ttft"
	// ITL: inter-token intervals within the threshold (the histogram
	// counts intervals, one per generated token after the first).
	ITL Kind = "itl"
	// E2E: requests whose end-to-end latency is within the threshold.
	E2E Kind = "e2e"
)

var kinds = []Kind{Availability, TTFT, ITL, E2E}

// Objective is one promise: the share Target of a model's events that
// must be good over Period.
type Objective struct {
	// Name identifies the objective on pages and in the API.
	Name string `yaml:"name"`
	// Model is the served model (model_name) the objective covers; ""
	// covers every model, each on its own budget.
	Model string `yaml:"model"`
	// Match narrows the replicas to those whose target labels (the
	// target's labels, or the pod's from discovery) have these values.
	Match map[string]string `yaml:"match"`
	Kind  Kind              `yaml:"kind"`
	// Threshold is the latency a good request stays within (latency
	// kinds). It is read at the largest histogram bucket boundary at or
	// below it; the status and the page name that boundary.
	Threshold time.Duration `yaml:"threshold"`
	// Target is the objective as a share, e.g. 0.995.
	Target float64 `yaml:"objective"`
	// Period is the budget's period, e.g. 672h (28 days).
	Period time.Duration `yaml:"period"`
}

// Window is one rule of the policy: the burn rate over the long window
// and over the short one must both reach BurnRate.
type Window struct {
	Long     time.Duration `yaml:"long"`
	Short    time.Duration `yaml:"short"`
	BurnRate float64       `yaml:"burn_rate"`
}

// Policy is when an objective's burn pages (critical) and when it files
// a warning.
type Policy struct {
	Page    []Window `yaml:"page"`
	Warning []Window `yaml:"warning"`
	// MinEvents is the fewest events in a rule's short window for a
	// verdict: on a quiet model one bad request is a large share.
	MinEvents float64 `yaml:"min_events"`
}

// Config is the `slos` section.
type Config struct {
	Policy     Policy      `yaml:"policy"`
	Objectives []Objective `yaml:"objectives"`
}

// DefaultPolicy is the SRE workbook's: page at 14.4x over 1h and 5m (2%
// of a 30-day budget in an hour) or 6x over 6h and 30m (5% in six hours);
// a warning at 3x over 1d and 2h or 1x over 3d and 6h.
func DefaultPolicy() Policy {
	return Policy{
		Page: []Window{
			{Long: time.Hour, Short: 5 * time.Minute, BurnRate: 14.4},
			{Long: 6 * time.Hour, Short: 30 * time.Minute, BurnRate: 6},
		},
		Warning: []Window{
			{Long: 24 * time.Hour, Short: 2 * time.Hour, BurnRate: 3},
			{Long: 72 * time.Hour, Short: 6 * time.Hour, BurnRate: 1},
		},
		MinEvents: 20,
	}
}

// DefaultConfig has the default policy and no objective.
func DefaultConfig() Config { return Config{Policy: DefaultPolicy()} }

// Resolution is the step of the memory over the policy's windows.
const Resolution = time.Minute

// PeriodResolution is the step of the memory over an objective's period.
const PeriodResolution = time.Hour

// Longest is the longest window of the policy: how far back the
// per-minute memory reaches.
func (p Policy) Longest() time.Duration {
	var d time.Duration
	for _, w := range slices.Concat(p.Page, p.Warning) {
		d = max(d, w.Long)
	}
	return d
}

// Validate reports every problem with its YAML path under prefix
// ("slos").
func (c Config) Validate(prefix string) error {
	var errs []error
	add := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", prefix, path, fmt.Sprintf(format, a...)))
	}
	p := c.Policy
	for _, rules := range []struct {
		key string
		ws  []Window
	}{{"policy.page", p.Page}, {"policy.warning", p.Warning}} {
		for i, w := range rules.ws {
			path := fmt.Sprintf("%s[%d]", rules.key, i)
			if w.Short < Resolution {
				add(path+".short", "must be at least %s (the memory's resolution), got %s", Resolution, w.Short)
			}
			if w.Long <= w.Short {
				add(path+".long", "must be longer than short (%s), got %s", w.Short, w.Long)
			}
			if w.Long%Resolution != 0 || w.Short%Resolution != 0 {
				add(path, "windows must be whole minutes, got %s and %s", w.Long, w.Short)
			}
			if !(w.BurnRate > 0) {
				add(path+".burn_rate", "must be positive, got %v", w.BurnRate)
			}
		}
	}
	if len(c.Objectives) > 0 && len(p.Page)+len(p.Warning) == 0 {
		add("policy", "objectives need at least one page or warning rule")
	}
	if p.MinEvents < 0 {
		add("policy.min_events", "must not be negative, got %v", p.MinEvents)
	}
	seen := map[string]int{}
	for i, o := range c.Objectives {
		path := fmt.Sprintf("objectives[%d]", i)
		switch j, dup := seen[o.Name]; {
		case strings.TrimSpace(o.Name) == "":
			add(path+".name", "required")
		case dup:
			add(path+".name", "%q duplicates objectives[%d]", o.Name, j)
		default:
			seen[o.Name] = i
		}
		if !slices.Contains(kinds, o.Kind) {
			add(path+".kind", "%q is not one of availability, ttft, itl, e2e", o.Kind)
		}
		switch {
		case o.Kind == Availability && o.Threshold != 0:
			add(path+".threshold", "an availability objective has no latency threshold, got %s", o.Threshold)
		case o.Kind != Availability && slices.Contains(kinds, o.Kind) && o.Threshold <= 0:
			add(path+".threshold", "a %s objective needs a positive latency threshold, got %s", o.Kind, o.Threshold)
		}
		if !(o.Target > 0 && o.Target < 1) {
			add(path+".objective", "must be a share in (0,1), e.g. 0.995, got %v", o.Target)
		}
		if o.Period < PeriodResolution || o.Period%PeriodResolution != 0 {
			add(path+".period", "must be whole hours, at least 1h (28 days: 672h), got %s", o.Period)
		}
		for _, k := range slices.Sorted(maps.Keys(o.Match)) {
			if strings.TrimSpace(k) == "" {
				add(path+".match", "a label name is required")
			}
		}
	}
	return errors.Join(errs...)
}

// key identifies an objective's memory: a change of what it counts or
// where starts it afresh; a change of objective, period or name does not
// change the events.
func (o Objective) key() string {
	labels := make([]string, 0, len(o.Match))
	for _, k := range slices.Sorted(maps.Keys(o.Match)) {
		labels = append(labels, k+"="+o.Match[k])
	}
	return fmt.Sprintf("%s|%s|%s|%s", o.Model, o.Kind, o.Threshold, strings.Join(labels, ","))
}

// Title is the objective's promise in words: "TTFT ≤ 1s for 99.5%".
func (o Objective) Title(boundary float64) string {
	pct := formatPercent(o.Target)
	switch o.Kind {
	case Availability:
		return "availability " + pct
	}
	lim := formatSeconds(o.Threshold.Seconds())
	if boundary > 0 && boundary < o.Threshold.Seconds() {
		lim = formatSeconds(boundary)
	}
	return fmt.Sprintf("%s ≤ %s for %s", o.kindTitle(), lim, pct)
}

func (o Objective) kindTitle() string {
	switch o.Kind {
	case TTFT:
		return "TTFT"
	case ITL:
		return "inter-token latency"
	case E2E:
		return "end-to-end latency"
	}
	return "availability"
}
