// Package correlate turns one evaluation round's findings into incidents,
// between the detectors and the alert tracker, so that one cause pages once:
//
//   - On one replica, findings that are cause and effect (detect.Explains:
//     cache collapse -> KV pressure -> retractions -> queueing -> client
//     retries) become one incident named after the earliest cause, listing
//     the consequences it explains.
//   - The same class on most replicas of one model at once becomes one fleet
//     incident (likely a router, deploy or client change) instead of N pages.
//
// It is pure: findings in, findings out.
package correlate

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Config of the correlation step.
type Config struct {
	// FoldConsequences merges a replica's effect findings into the finding
	// of their cause.
	FoldConsequences bool `yaml:"fold_consequences"`
	// FleetMinReplicas is the smallest fleet (replicas of one model) for
	// which fleet-wide grouping applies.
	FleetMinReplicas int `yaml:"fleet_min_replicas"`
	// FleetFraction of a model's replicas showing the same class makes a
	// fleet incident.
	FleetFraction float64 `yaml:"fleet_fraction"`
}

// DefaultConfig holds production values.
func DefaultConfig() Config {
	return Config{FoldConsequences: true, FleetMinReplicas: 3, FleetFraction: 0.5}
}

// Validate reports every problem with its YAML path.
func (c Config) Validate() error {
	var errs []error
	if c.FleetMinReplicas < 2 {
		errs = append(errs, fmt.Errorf("correlation.fleet_min_replicas: must be at least 2, got %d", c.FleetMinReplicas))
	}
	if c.FleetFraction <= 0 || c.FleetFraction > 1 {
		errs = append(errs, fmt.Errorf("correlation.fleet_fraction: must be in (0,1], got %v", c.FleetFraction))
	}
	return errors.Join(errs...)
}

// FleetReplica is the replica name of a fleet incident of a model.
func FleetReplica(model string) string {
	if model == "" {
		model = "unknown-model"
	}
	return "fleet/" + model
}

// Correlate groups the findings of one round. replicas is every replica
// being watched (the denominator of "most of the fleet").
func Correlate(cfg Config, findings []detect.Finding, replicas []detect.Replica) []detect.Finding {
	out := findings
	if cfg.FoldConsequences {
		out = fold(out)
	}
	return fleet(cfg, out, replicas)
}

// fold merges, per replica, every finding explained by another into its
// root cause. A finding explained by several roots goes to the first root in
// class order, so the output is deterministic.
func fold(findings []detect.Finding) []detect.Finding {
	byReplica := map[string][]int{}
	for i, f := range findings {
		byReplica[f.Replica] = append(byReplica[f.Replica], i)
	}
	absorbed := make([]bool, len(findings))
	consequences := map[int][]int{}
	for _, idx := range byReplica {
		sort.Slice(idx, func(a, b int) bool { return findings[idx[a]].Class < findings[idx[b]].Class })
		for _, e := range idx {
			root := -1
			for _, c := range idx {
				if c != e && detect.Explains(findings[c], findings[e]) && !explainedWithin(findings, idx, c) {
					root = c
					break
				}
			}
			if root >= 0 {
				absorbed[e] = true
				consequences[root] = append(consequences[root], e)
			}
		}
	}
	out := make([]detect.Finding, 0, len(findings))
	for i, f := range findings {
		if absorbed[i] {
			continue
		}
		if cs := consequences[i]; len(cs) > 0 {
			f = withConsequences(f, findings, cs)
		}
		out = append(out, f)
	}
	return out
}

// explainedWithin reports whether finding c is itself explained by another
// finding of the group: only roots absorb consequences, so a chain
// A -> B -> C folds into A.
func explainedWithin(findings []detect.Finding, idx []int, c int) bool {
	for _, o := range idx {
		if o != c && detect.Explains(findings[o], findings[c]) {
			return true
		}
	}
	return false
}

func withConsequences(root detect.Finding, all []detect.Finding, cs []int) detect.Finding {
	root.Evidence = append([]detect.Evidence(nil), root.Evidence...)
	var lines []string
	for _, i := range cs {
		c := all[i]
		root.Consequences = append(root.Consequences, c.Class)
		if c.Severity > root.Severity {
			root.Severity = c.Severity // the incident is as bad as its worst symptom
		}
		lines = append(lines, fmt.Sprintf("%s (%s)", c.Class, c.Summary))
		for _, e := range c.Evidence {
			e.Name = string(c.Class) + ": " + e.Name
			root.Evidence = append(root.Evidence, e)
		}
	}
	root.Diagnosis += " Root cause of this incident; it also explains, on the same replica: " + strings.Join(lines, "; ") +
		". Fix the cause first: the consequences should clear with it."
	return root
}

// fleet replaces, per model and class, the findings of most of the model's
// replicas by one fleet finding.
func fleet(cfg Config, findings []detect.Finding, replicas []detect.Replica) []detect.Finding {
	size := map[string]int{}
	for _, r := range replicas {
		size[r.Model]++
	}
	type key struct {
		model string
		class detect.Class
	}
	groups := map[key][]int{}
	for i, f := range findings {
		groups[key{f.Model, f.Class}] = append(groups[key{f.Model, f.Class}], i)
	}
	drop := make([]bool, len(findings))
	var fleetFindings []detect.Finding
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].model != keys[b].model {
			return keys[a].model < keys[b].model
		}
		return keys[a].class < keys[b].class
	})
	for _, k := range keys {
		idx := groups[k]
		n := size[k.model]
		if n < cfg.FleetMinReplicas || len(idx) < cfg.FleetMinReplicas || float64(len(idx)) < cfg.FleetFraction*float64(n) {
			continue
		}
		for _, i := range idx {
			drop[i] = true
		}
		fleetFindings = append(fleetFindings, fleetFinding(k.model, k.class, n, findings, idx))
	}
	if len(fleetFindings) == 0 {
		return findings
	}
	out := make([]detect.Finding, 0, len(findings))
	for i, f := range findings {
		if !drop[i] {
			out = append(out, f)
		}
	}
	return append(out, fleetFindings...)
}

func fleetFinding(model string, class detect.Class, fleetSize int, all []detect.Finding, idx []int) detect.Finding {
	first := all[idx[0]]
	f := detect.Finding{
		Class:     class,
		Severity:  first.Severity,
		Replica:   FleetReplica(model),
		Model:     model,
		Layer:     first.Layer,
		Emergency: first.Emergency,
		RootCause: first.RootCause,
		Runbook:   first.Runbook,
	}
	var names []string
	for _, i := range idx {
		r := all[i]
		names = append(names, r.Replica)
		if r.Severity > f.Severity {
			f.Severity = r.Severity
		}
	}
	sort.Strings(names)
	f.Summary = fmt.Sprintf("Fleet-wide %s: %d of %d replicas of %s at once", class, len(idx), fleetSize, displayModel(model))
	f.Diagnosis = fmt.Sprintf("The same incident appeared on %d of %d replicas of this model in the same evaluation round, "+
		"so the cause is most likely shared, not in one replica: a router or gateway policy change (e.g. cache-aware routing "+
		"switched to round robin), a deploy or configuration rollout, a client release or a global prompt change. "+
		"Check what changed fleet-wide in the last hour before touching individual replicas. One replica's view: %s",
		len(idx), fleetSize, first.Diagnosis)
	f.Evidence = append(f.Evidence,
		detect.Evidence{Name: "replicas affected", Value: float64(len(idx))},
		detect.Evidence{Name: "replicas of the model", Value: float64(fleetSize)})
	for _, e := range first.Evidence {
		e.Name = first.Replica + ": " + e.Name
		f.Evidence = append(f.Evidence, e)
	}
	f.AffectedReplicas = names
	return f
}

func displayModel(m string) string {
	if m == "" {
		return "an unnamed model"
	}
	return m
}
