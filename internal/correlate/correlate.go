// Package correlate groups one evaluation round's findings by cause,
// between the detectors and the alert tracker, so that one cause pages once:
//
//   - On one replica, findings that are cause and effect (detect.Explains:
//     cache collapse -> KV pressure -> retractions -> queueing -> client
//     retries -> failed requests) become one group named after the
//     earliest cause, listing the consequences it explains.
//   - The same cause on most replicas of one model at once becomes one
//     fleet group (likely a router, deploy or client change) instead of N
//     pages.
//
// It is pure and stateless: findings in, groups out. Continuity across
// rounds (a cause found a round after its effect, a fleet share hovering at
// the threshold) is the alert tracker's, which matches these groups to
// the ones it already holds.
package correlate

import (
	"errors"
	"fmt"
	"maps"
	"slices"
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
	// FleetFraction of a model's replicas showing the same cause makes a
	// fleet incident. Once open, the tracker keeps it until no replica of
	// the model shows the cause (hysteresis).
	FleetFraction float64 `yaml:"fleet_fraction"`
	// DownCriticalShare is the share of a model's replicas that must be
	// down at once for a replica_down to page critical: losing one replica
	// in ten leaves the others serving (a warning), losing the last one
	// standing does not. Requests failing on the replica (error_rate
	// critical) keep it critical whatever the share.
	DownCriticalShare float64 `yaml:"down_critical_share"`
	// GatewayWorkers maps a worker URL as a gateway names it to the target
	// serving there, where the address the watchdog scrapes is not the one
	// the gateway sends to (a Service name, another port). Without an
	// entry a worker is matched to the target serving at its address.
	GatewayWorkers map[string]string `yaml:"gateway_workers"`
	// GPUTargets map GPUs without pod labels to the targets that run on
	// them (gpu.go).
	GPUTargets []GPUTarget `yaml:"gpu_targets"`
}

// DefaultConfig holds production values.
func DefaultConfig() Config {
	return Config{FoldConsequences: true, FleetMinReplicas: 3, FleetFraction: 0.5, DownCriticalShare: 0.2}
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
	if c.DownCriticalShare < 0 || c.DownCriticalShare > 1 {
		errs = append(errs, fmt.Errorf("correlation.down_critical_share: must be in [0,1], got %v", c.DownCriticalShare))
	}
	for _, url := range slices.Sorted(maps.Keys(c.GatewayWorkers)) {
		if strings.TrimSpace(url) == "" || strings.TrimSpace(c.GatewayWorkers[url]) == "" {
			errs = append(errs, fmt.Errorf("correlation.gateway_workers: %q: a worker URL and a target name are both required, got %q", url, c.GatewayWorkers[url]))
		}
	}
	errs = append(errs, validateGPUTargets(c.GPUTargets)...)
	return errors.Join(errs...)
}

// FleetReplica is the replica name a fleet incident of a model is shown
// under.
func FleetReplica(model string) string {
	if model == "" {
		model = "unknown-model"
	}
	return "fleet/" + model
}

// Group is one cause and what it explains in one round. The alert
// tracker turns groups into incidents, which live across rounds.
type Group struct {
	// Finding is what the page shows: the root cause with its consequences
	// folded in (their classes, evidence and a sentence in the diagnosis),
	// as severe as its worst member. For a fleet incident, the fleet-wide
	// finding.
	Finding detect.Finding
	// Fleet marks an incident over most replicas of Finding.Model.
	Fleet bool
	// Members are the detectors' findings the group holds, the root
	// first. For a fleet incident: every member replica's root and
	// consequences.
	Members []detect.Finding
}

// Cause is the class the group is named after.
func (g Group) Cause() detect.Class { return g.Finding.Class }

// Shows reports whether replica shows class as part of this group.
func (g Group) Shows(replica string, class detect.Class) bool {
	for _, m := range g.Members {
		if m.Replica == replica && m.Class == class {
			return true
		}
	}
	return false
}

// Classes are the distinct member classes, sorted.
func (g Group) Classes() []detect.Class {
	var out []detect.Class
	for _, m := range g.Members {
		if !slices.Contains(out, m.Class) {
			out = append(out, m.Class)
		}
	}
	slices.Sort(out)
	return out
}

// Correlate groups the findings of one round. replicas is every replica
// being watched (the denominator of "most of the fleet").
func Correlate(cfg Config, findings []detect.Finding, replicas []detect.Replica) []Group {
	return CorrelateGPUs(cfg, findings, replicas, nil)
}

// CorrelateGPUs is Correlate with what the round knows of the GPUs beside
// the findings: each GPU replica's lowest utilization (%) over the round's
// span, by replica name (nil: unknown). GPU findings are first moved onto
// the SGLang replicas that hold their GPU (attributeGPUs), so a replica's
// slowdown, hang or outage folds under the GPU's fault.
func CorrelateGPUs(cfg Config, findings []detect.Finding, replicas []detect.Replica, gpuUtil map[string]float64) []Group {
	findings = attributeGPUs(cfg, findings, replicas, gpuUtil)
	replicas = slices.DeleteFunc(slices.Clone(replicas), func(r detect.Replica) bool { return r.Kind == detect.KindGPU })
	findings = strongest(findings)
	var out []Group
	if cfg.FoldConsequences {
		out = upstream(cfg, fold(findings), replicas)
	} else {
		for _, f := range findings {
			out = append(out, Group{Finding: f, Members: []detect.Finding{f}})
		}
	}
	downShare(cfg, out, findings, replicas)
	return fleet(cfg, out, replicas)
}

// downShare makes a replica_down a warning while most of its model still
// serves: fewer than DownCriticalShare of the model's replicas down, and
// no requests failing critically on the replica.
func downShare(cfg Config, groups []Group, findings []detect.Finding, replicas []detect.Replica) {
	size, down := map[string]int{}, map[string]int{}
	for _, r := range replicas {
		size[r.Model]++
	}
	for _, f := range findings {
		if f.Class == detect.ReplicaDown {
			down[f.Model]++
		}
	}
	for i := range groups {
		g := &groups[i]
		if g.Cause() != detect.ReplicaDown || g.Finding.Severity < detect.Critical || size[g.Finding.Model] == 0 ||
			float64(down[g.Finding.Model]) >= cfg.DownCriticalShare*float64(size[g.Finding.Model]) {
			continue
		}
		if slices.ContainsFunc(g.Members, func(m detect.Finding) bool { return m.Class == detect.ErrorRate && m.Severity >= detect.Critical }) {
			continue
		}
		g.Finding.Severity = detect.Warning
		g.Finding.Diagnosis = strings.TrimSpace(g.Finding.Diagnosis + fmt.Sprintf(
			" %d of the %d replicas of this model are down: the others still serve, so this pages as a warning; it pages critical once %s of them are down or its requests fail.",
			down[g.Finding.Model], size[g.Finding.Model], pctShare(cfg.DownCriticalShare)))
	}
}

func pctShare(v float64) string { return detect.FormatNumber(100*v) + "%" }

// strongest keeps, per replica and class, the most severe finding (a
// detector may report a replica twice, e.g. down and restarted), in input
// order.
func strongest(findings []detect.Finding) []detect.Finding {
	type key struct {
		replica string
		class   detect.Class
	}
	at := map[key]int{}
	out := make([]detect.Finding, 0, len(findings))
	for _, f := range findings {
		k := key{f.Replica, f.Class}
		if i, ok := at[k]; ok {
			if f.Severity > out[i].Severity {
				out[i] = f
			}
			continue
		}
		at[k] = len(out)
		out = append(out, f)
	}
	return out
}

// fold merges, per replica, every finding explained by another into its
// root cause. A finding explained by several roots goes to the first root in
// class order, so the output is deterministic.
func fold(findings []detect.Finding) []Group {
	byReplica := map[string][]int{}
	for i, f := range findings {
		byReplica[f.Replica] = append(byReplica[f.Replica], i)
	}
	absorbed := make([]bool, len(findings))
	consequences := map[int][]int{}
	for _, idx := range byReplica {
		sort.SliceStable(idx, func(a, b int) bool { return findings[idx[a]].Class < findings[idx[b]].Class })
		for _, e := range idx {
			for _, c := range idx {
				if c == e || !detect.Explains(findings[c], findings[e]) {
					continue
				}
				if r := rootOf(findings, idx, c, e); r >= 0 {
					absorbed[e] = true
					consequences[r] = append(consequences[r], e)
					break
				}
			}
		}
	}
	out := make([]Group, 0, len(findings))
	for i, f := range findings {
		if absorbed[i] {
			continue
		}
		inc := Group{Finding: f, Members: []detect.Finding{f}}
		for _, c := range consequences[i] {
			inc.Members = append(inc.Members, findings[c])
		}
		if len(inc.Members) > 1 {
			inc.Finding = withConsequences(f, inc.Members[1:])
		}
		out = append(out, inc)
	}
	return out
}

// rootOf is the root cause c leads back to on its replica (c itself when
// nothing explains it), for e, which c explains: only roots absorb
// consequences, so a chain A -> B -> C folds into A even where A's
// position names B but not C (a GPU throttle explains a decode slowdown,
// which explains the failed requests). -1 when the chain's top is itself
// explained (by e or within a cycle): no root to absorb e.
func rootOf(findings []detect.Finding, idx []int, c, e int) int {
	seen := map[int]bool{c: true, e: true}
	for {
		next := -1
		for _, o := range idx {
			if !seen[o] && detect.Explains(findings[o], findings[c]) {
				next = o
				break
			}
		}
		if next < 0 {
			break
		}
		seen[next], c = true, next
	}
	if explainedWithin(findings, idx, c) {
		return -1
	}
	return c
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

// withConsequences folds cs, the findings root explains on its replica,
// into root. A consequence that feeds on itself once started (a retry
// loop) does not clear with its cause: its emergency steps come first,
// since they stop the harm sooner, and the diagnosis says so; the others
// should clear with the cause.
func withConsequences(root detect.Finding, cs []detect.Finding) detect.Finding {
	root.Evidence = slices.Clone(root.Evidence)
	root.Consequences = nil
	var clearing, sustaining []string
	var first []string
	where := "on this replica"
	for _, c := range cs {
		if c.Class != root.Class && !slices.Contains(root.Consequences, c.Class) {
			root.Consequences = append(root.Consequences, c.Class)
		}
		if c.Severity > root.Severity {
			root.Severity = c.Severity // the incident is as bad as its worst symptom
		}
		summary := c.Summary
		if c.Replica != root.Replica {
			// A gateway's finding joined to the worker it comes from: its
			// lines say where they were seen.
			where = "on this replica and in front of it"
			summary = "at " + c.Replica + ": " + summary
		}
		if detect.SelfSustaining(c) {
			sustaining = append(sustaining, summary)
			first = append(first, c.Emergency...)
		} else {
			clearing = append(clearing, summary)
		}
		for _, e := range c.Evidence {
			if c.Replica != root.Replica {
				e = e.Of(c.Replica)
			}
			if hasEvidence(root.Evidence, e.Name) {
				continue // the triage and shared signals appear once
			}
			root.Evidence = append(root.Evidence, e)
		}
	}
	if len(first) > 0 {
		steps := slices.Clone(first)
		for _, s := range root.Emergency {
			if !slices.Contains(steps, s) {
				steps = append(steps, s)
			}
		}
		root.Emergency = steps
	}
	if len(sustaining) > 0 {
		root.Diagnosis = strings.TrimSpace(root.Diagnosis + " It set off what now feeds on itself " + where + ": " +
			strings.Join(sustaining, "; ") + ". That loop does not stop when the cause is fixed: break it first (its steps come first), then fix the cause.")
	}
	if len(clearing) > 0 {
		root.Diagnosis = strings.TrimSpace(root.Diagnosis + " Consequences " + where + ", explained by this cause: " +
			strings.Join(clearing, "; ") + ". Fix the cause first: they should clear with it.")
	}
	return root
}

// hasEvidence reports whether es already shows the quantity name shows.
// Detectors qualify a shared quantity in parentheses ("aborted requests/s
// (clients gave up)", "offered load/s (highest fresh arrivals in the
// look-back)"), so the quantity is the name without its qualifier: the
// cause's line stays and the consequence's copy of it is not repeated.
func hasEvidence(es []detect.Evidence, name string) bool {
	q := quantity(name)
	for _, e := range es {
		if quantity(e.Name) == q {
			return true
		}
	}
	return false
}

// quantity is an evidence name without its parenthesized qualifier.
func quantity(name string) string {
	if i := strings.Index(name, " ("); i > 0 {
		name = name[:i]
	}
	return strings.ToLower(strings.TrimSpace(name))
}

// fleet replaces, per model and cause, the groups of most of the model's
// replicas by one fleet group.
func fleet(cfg Config, incidents []Group, replicas []detect.Replica) []Group {
	size := map[string]int{}
	for _, r := range replicas {
		size[r.Model]++
	}
	type key struct {
		model string
		class detect.Class
	}
	groups := map[key][]int{}
	for i, inc := range incidents {
		if isGPUClass(inc.Finding.Class) {
			continue // a fault of hardware, one GPU at a time, never a fleet change
		}
		k := key{inc.Finding.Model, inc.Finding.Class}
		groups[k] = append(groups[k], i)
	}
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
	drop := make([]bool, len(incidents))
	var fleets []Group
	for _, k := range keys {
		idx := groups[k]
		n := size[k.model]
		if n < cfg.FleetMinReplicas || len(idx) < cfg.FleetMinReplicas || float64(len(idx)) < cfg.FleetFraction*float64(n) {
			continue
		}
		for _, i := range idx {
			drop[i] = true
		}
		fleets = append(fleets, FleetGroup(k.model, k.class, n, pick(incidents, idx)))
	}
	if len(fleets) == 0 {
		return incidents
	}
	out := make([]Group, 0, len(incidents))
	for i, inc := range incidents {
		if !drop[i] {
			out = append(out, inc)
		}
	}
	return append(out, fleets...)
}

func pick(incidents []Group, idx []int) []Group {
	out := make([]Group, 0, len(idx))
	for _, i := range idx {
		out = append(out, incidents[i])
	}
	return out
}

// FleetGroup is the group of class across members, replica groups
// of one model (fleetSize replicas). Its diagnosis and steps are the
// fleet's: when every member's layer triage says saturated (the batch at
// its cap, requests waiting), the fleet lacks capacity; otherwise the
// cause is most likely shared and changed fleet-wide.
func FleetGroup(model string, class detect.Class, fleetSize int, members []Group) Group {
	first := members[0].Finding
	f := detect.Finding{
		Class:     class,
		Severity:  first.Severity,
		Replica:   FleetReplica(model),
		Model:     model,
		Layer:     first.Layer,
		RootCause: first.RootCause,
		Runbook:   "/runbooks/fleet",
	}
	inc := Group{Fleet: true}
	var names []string
	for _, m := range members {
		names = append(names, m.Finding.Replica)
		f.Severity = max(f.Severity, m.Finding.Severity)
		inc.Members = append(inc.Members, m.Members...)
	}
	sort.Strings(names)
	f.Summary = fmt.Sprintf("%s on %d of %d replicas of %s at once", first.Summary, len(members), fleetSize, displayModel(model))
	together := fmt.Sprintf("The same incident appeared on %d of %d replicas of this model together", len(members), fleetSize)
	view := fmt.Sprintf("One replica's view (%s): %s", first.Replica, first.Diagnosis)
	if saturated(members) {
		f.Diagnosis = together + ", and the layer triage of every one of them says saturated: the batch at its cap with requests waiting. " +
			"The fleet lacks capacity for the traffic it gets; a shared change is not needed to explain it, and moving traffic between " +
			"replicas that are all full does not help. " + view
		f.Emergency = []string{
			"Scale out the model's fleet: add replicas (raise the autoscaler's minimum); every affected replica is at its cap.",
			"Until they serve, shed at the gateway: a concurrency limit for the model (the model gateway's --max-concurrent-requests) that answers the excess at once with 429/503 and Retry-After, so clients fail fast instead of timing out.",
			"Lower max_tokens for the heaviest clients or routes: shorter answers free batch slots sooner on every replica.",
			"Find what drove the traffic up (a client release, a batch job, retries: see retry_avalanche) and defer what can wait.",
		}
		f.RootCause = append([]string{"Size the fleet for peak arrivals with headroom, and autoscale on queue time or queue depth, not GPU utilization."}, f.RootCause...)
	} else {
		f.Diagnosis = together + ", so the cause is most likely shared, not in one replica: a router or gateway policy change (e.g. cache-aware routing " +
			"switched to round robin), a deploy or configuration rollout, a client release or a global prompt change. " +
			"Check what changed fleet-wide in the last hour before touching individual replicas. " + view
		f.Emergency = []string{
			"Find what changed on every replica at the start time: the deploy log, the router's configuration history, client releases, prompt and template changes.",
			"Roll back the change if there is one: router policy first (fast, low risk), then the deploy, then ask the client or prompt owners to roll back theirs.",
			"Do not restart or drain the replicas one by one: the cause is not in them, and the others take the same load.",
			fmt.Sprintf("While the rollback takes effect, protect the service with the emergency steps of /runbooks/%s, applied to every affected replica.", class),
		}
	}
	f.Evidence = append(f.Evidence,
		detect.Evidence{Name: "replicas affected", Value: float64(len(members))},
		detect.Evidence{Name: "replicas of the model", Value: float64(fleetSize)})
	for _, e := range first.Evidence {
		f.Evidence = append(f.Evidence, e.Of(first.Replica))
	}
	f.AffectedReplicas = names
	inc.Finding = f
	return inc
}

// saturated reports whether the layer triage of every member replica says
// saturated: its batch at its cap with requests waiting. A member's verdict
// is carried by the first of its findings that has one.
func saturated(members []Group) bool {
	for _, m := range members {
		verdict := m.Finding.TriageVerdict
		for _, x := range m.Members {
			if verdict != "" {
				break
			}
			verdict = x.TriageVerdict
		}
		if verdict != detect.TriageSaturated {
			return false
		}
	}
	return len(members) > 0
}

func displayModel(m string) string {
	if m == "" {
		return "an unnamed model"
	}
	return m
}
