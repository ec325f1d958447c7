package detect

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ColdStart is the class of a replica not serving yet, or up but serving
// nothing long after a start.
const ColdStart Class = "cold_start"

// ColdStartDetector reports a replica that has not started serving long
// after it (re)started. Either it never answered a scrape at all — SGLang
// refuses connections until weights are loaded and CUDA graphs captured, so
// every pod of a rollout or scale-out looks unreachable for minutes — which
// is a warning once the startup budget is spent, never an outage page
// (replica_down owns replicas that served and then became unreachable). Or
// it answers its scrapes but its /health_generate probe still fails
// (SGLang answers 503 while Starting), or requests wait on it while nothing
// has been processed since the start. One that served and then stopped is
// engine_hang's.
type ColdStartDetector struct{ cfg ColdStartConfig }

// Class implements Detector.
func (d *ColdStartDetector) Class() Class { return ColdStart }

// startupPhases are the phase label values of sglang:startup_time_seconds.
var startupPhases = []string{"load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"}

// Detect implements Detector.
func (d *ColdStartDetector) Detect(w Window, now time.Time) []Finding {
	if w.Replica().Kind == KindGPU {
		return nil // a GPU's exporter is no SGLang server: the GPU detectors read it
	}
	c := d.cfg
	st := w.Scrape()
	if !st.Up {
		return d.unreachable(w, st, now)
	}
	start, never := neverServed(w, now, c.FreshRequests)
	if !never {
		return nil
	}
	age := now.Sub(start)
	if age < c.StartupBudget {
		return nil
	}
	from := start.Add(-time.Nanosecond)

	probe := readProbe(w, from, now, c.MinProbes)
	notReady := probe.present && probe.allFailed

	demandFrom := now.Add(-c.DemandRange)
	queued, qOK := w.Min(Sel(series.NumQueueReqs), demandFrom, now)
	active, aOK := w.Min(inference(series.HTTPRequestsActive, c.InferenceEndpoints), demandFrom, now)
	demand := (qOK && queued > 0 && covers(w, Sel(series.NumQueueReqs), demandFrom, now)) ||
		(aOK && active > 0 && covers(w, inference(series.HTTPRequestsActive, c.InferenceEndpoints), demandFrom, now))
	if !notReady && !demand {
		return nil
	}

	sev := Warning
	if age >= c.CriticalAfter {
		sev = Critical
	}
	f := finding(ColdStart, w, sev, LayerProcess)
	origin := "was first seen"
	if lr := w.LastRestart(); !lr.IsZero() && lr.Equal(start) {
		origin = "restarted"
	}
	f.Evidence = append(f.Evidence, Evidence{Name: "seconds since the replica " + origin, Value: age.Seconds(), Unit: "s",
		Threshold: fmt.Sprintf(">= %s startup budget", ShortDuration(c.StartupBudget))}.WithLimit(c.StartupBudget.Seconds()))
	for _, src := range progressSources {
		if inc, ok := w.Increase(src.sel, from, now); ok {
			f.Evidence = append(f.Evidence, Evidence{Name: src.name + " since the start", Value: inc})
			break
		}
	}
	if probe.present {
		e := Evidence{Name: "failed /health_generate probes since the start", Value: float64(probe.failed)}
		if probe.probes > 0 {
			e.Threshold = fmt.Sprintf("of %d probes", probe.probes)
		}
		f.Evidence = append(f.Evidence, e)
	}
	if qOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "queued requests (lowest in the last " + ShortDuration(c.DemandRange) + ")", Value: queued})
	}
	if aOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "in-flight inference requests (lowest in the last " + ShortDuration(c.DemandRange) + ")", Value: active})
	}

	// Where the startup time went, when the release exposes it.
	type phase struct {
		name string
		secs float64
	}
	var phases []phase
	for _, ph := range startupPhases {
		if v, ok := w.Last(Selector{Name: series.StartupTimeSeconds, Match: []Match{{Label: "phase", Value: ph}}, Combine: CombineMax}); ok {
			phases = append(phases, phase{ph, v})
		}
	}
	if v, ok := w.Last(Sel(startupCUDAGraphTime)); ok {
		phases = append(phases, phase{"cuda_graph_capture", v})
	}
	sort.SliceStable(phases, func(i, j int) bool { return phases[i].secs > phases[j].secs })
	var phaseText []string
	for _, ph := range phases {
		f.Evidence = append(f.Evidence, Evidence{Name: "startup phase " + ph.name, Value: ph.secs, Unit: "s"})
		phaseText = append(phaseText, fmt.Sprintf("%s %s s", ph.name, num(ph.secs)))
	}

	ago := ShortDuration(age.Round(time.Second))
	var what []string
	if notReady {
		what = append(what, "every /health_generate probe since then failed (SGLang answers 503 until warm-up finishes)")
	}
	if demand {
		what = append(what, "requests have been waiting on it for the last "+ShortDuration(c.DemandRange)+" while it has processed nothing since the start")
	}
	f.Summary = fmt.Sprintf("Cold start: replica %s %s ago and is still not serving", origin, ago)
	pod := w.Replica().Pod
	kubeFrom := now.Add(-c.lookback())
	cause, explained := kubeCauseOf(pod, kubeFrom, now)
	kubeEv, kubeText := kubeFacts(pod, cause, kubeFrom, now)
	f.Evidence = append(f.Evidence, kubeEv...)
	if explained {
		f.Summary = fmt.Sprintf("Cold start: %s; replica %s %s ago and is still not serving", cause.headline, origin, ago)
	}
	diag := []string{
		cause.diagnosis,
		fmt.Sprintf("Process layer: the replica %s %s ago and answers its metrics scrapes, but %s.", origin, ago, strings.Join(what, ", and ")),
		fmt.Sprintf("That is past the startup budget of %s.", ShortDuration(c.StartupBudget)),
	}
	if len(phaseText) > 0 {
		diag = append(diag, "Startup phases (longest first): "+strings.Join(phaseText, ", ")+".")
	}
	if kubeText != "" {
		diag = append(diag, kubeText)
	}
	diag = append(diag, "Typical causes: slow weight loading (large models take minutes from network storage), CUDA graph capture for many batch sizes (30-60 s and more), slow image pulls, or a warm-up request that cannot complete (then it is a hang at startup: look at the stacks). Meanwhile the other replicas carry its share of the traffic.")
	f.Diagnosis = sentence(diag...)
	f.Emergency = append(slices.Clone(cause.emergency), []string{
		"Keep the replica out of rotation until /health_generate answers 200, so traffic is not sent to a server that cannot serve it (readiness probe on /health_generate).",
		"Relieve the replicas that carry the load: bring up instances from a warm pool, or over-provision for now (raise the autoscaler's minimum).",
		"Read the server log of the start: the last line says which phase it is in (loading weights, capturing CUDA graphs, warm-up); if it stopped moving, dump the stacks (py-spy dump) and restart.",
	}...)
	f.RootCause = []string{
		"Prefetch weights to local disk or a ramdisk (or a nearby NFS cache) before the server starts instead of loading them from remote storage.",
		"Capture fewer CUDA graphs: a shorter --cuda-graph-bs list (or a lower --cuda-graph-max-bs) cuts capture time.",
		"Use pre-built, pre-pulled images (or snapshots) so a new replica does not download gigabytes first.",
		"Scale ahead of demand: scale on queue time with enough headroom that a 5-10 minute start does not overload the others.",
	}
	return []Finding{f}
}

// unreachable reports a replica that has never answered a scrape (or whose
// pod was replaced since it last did) for longer than the startup budget.
func (d *ColdStartDetector) unreachable(w Window, st ScrapeState, now time.Time) []Finding {
	c := d.cfg
	pod := w.Replica().Pod
	if !st.Reason.Unreachable() || !starting(st, pod) || (pod != nil && pod.Phase == podFailed) {
		return nil // a broken metrics endpoint, an outage, or a failed pod
	}
	start, origin := st.FirstSeen, "was first seen"
	if pod != nil && !pod.Created.IsZero() {
		start, origin = pod.Created, "was created"
	}
	age := now.Sub(start)
	if start.IsZero() || age < c.StartupBudget {
		return nil
	}
	f := finding(ColdStart, w, Warning, LayerProcess)
	ago := ShortDuration(age.Round(time.Second))
	f.Evidence = []Evidence{
		{Name: "seconds since the replica " + origin, Value: age.Seconds(), Unit: "s",
			Threshold: fmt.Sprintf(">= %s startup budget", ShortDuration(c.StartupBudget)), Limit: c.StartupBudget.Seconds(), HasLimit: true},
		{Name: "consecutive failed scrapes (" + string(st.Reason) + ")", Value: float64(st.ConsecutiveFailures)},
	}
	from := now.Add(-c.lookback())
	podEv, podText := podEvidence(pod, now)
	cause, explained := kubeCauseOf(pod, from, now)
	kubeEv, kubeText := kubeFacts(pod, cause, from, now)
	f.Evidence = append(append(f.Evidence, podEv...), kubeEv...)
	f.Summary = fmt.Sprintf("Cold start: replica %s %s ago and has never answered (%s)", origin, ago, st.Reason)
	reached := fmt.Sprintf("Process layer: the replica %s %s ago and no scrape has reached its server since (%s), past the startup budget of %s.", origin, ago, st.Reason, ShortDuration(c.StartupBudget))
	loading := "SGLang listens only once weights are loaded and CUDA graphs captured, so a new replica is unreachable for minutes by design; this long, the start is stuck or very slow."
	waiting := ""
	if pod != nil && pod.Waiting != "" {
		waiting = "The container waits: " + pod.Waiting + " (an image pull or a crash back-off, not loading)."
	}
	lastError := st.Error
	if explained {
		f.Summary = fmt.Sprintf("Cold start: %s; replica %s %s ago and has never answered", cause.headline, origin, ago)
		loading, waiting = "", ""
		if pod.Unschedulable != "" {
			// Its address is a placeholder: there is nothing to reach.
			reached = fmt.Sprintf("Process layer: the replica %s %s ago and has not started, past the startup budget of %s.", origin, ago, ShortDuration(c.StartupBudget))
			lastError = ""
		}
	}
	f.Diagnosis = sentence(
		cause.diagnosis,
		reached,
		loading, podText, kubeText, waiting, terminationHint(pod),
		"Meanwhile the other replicas carry its share of the traffic.")
	if lastError != "" {
		f.Diagnosis += " Last error: " + lastError + "."
	}
	f.Emergency = append(slices.Clone(cause.emergency), []string{
		"Check the pod: kubectl describe pod <pod> (events: Pending on GPUs, image pull, OOMKilled while loading) and kubectl get events.",
		"Read the start log: kubectl logs <pod> (and --previous after a restart) — the last line says the phase: downloading or loading weights, capturing CUDA graphs, or a traceback.",
		"Keep it out of rotation (readiness probe on /health_generate) and relieve the replicas carrying its load.",
	}...)
	f.RootCause = []string{
		"Prefetch weights to local disk or a nearby cache before the server starts instead of loading them from remote storage.",
		"Capture fewer CUDA graphs (a shorter --cuda-graph-bs list or a lower --cuda-graph-max-bs).",
		"Use pre-pulled images; raise the startup budget if your model legitimately loads for longer.",
	}
	return []Finding{f}
}

// ColdStartConfig tunes the slow-startup detector.
type ColdStartConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// StartupBudget is how long a replica may take from its (re)start to
	// serving. Large models load for minutes; CUDA graph capture adds up to
	// a minute.
	StartupBudget time.Duration `yaml:"startup_budget" doc:"from a (re)start to serving; longer: a warning"`
	// CriticalAfter makes the finding critical.
	CriticalAfter time.Duration `yaml:"critical_after" doc:"up but serving nothing this long after a start: critical"`
	// DemandRange: requests must have been waiting (queued or in flight)
	// over this whole recent range to count as demand that is not served.
	DemandRange time.Duration `yaml:"demand_range" doc:"requests waiting over this whole range are unserved demand"`
	// InferenceEndpoints are the endpoint label values whose in-flight
	// requests count as demand, "|"-separated.
	InferenceEndpoints string `yaml:"inference_endpoints" doc:"endpoint values whose in-flight requests count as demand"`
	// MinProbes is the fewest /health_generate probes since the start, all
	// failed, for the probe to say "not ready".
	MinProbes int `yaml:"min_probes" doc:"failed /health_generate probes since the start for \"not ready\""`
	// FreshRequests: at most this many finished requests since the start
	// (the warm-up) still counts as a fresh process.
	FreshRequests float64 `yaml:"fresh_requests" doc:"finished requests since the start that still count as warming up"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (ColdStartConfig) defaults() ColdStartConfig {
	return ColdStartConfig{
		Enabled:            true,
		StartupBudget:      15 * time.Minute, // large models load for 5-10 minutes from network storage, plus graph capture
		CriticalAfter:      20 * time.Minute,
		DemandRange:        2 * time.Minute,
		InferenceEndpoints: DefaultInferenceEndpoints,
		MinProbes:          2,
		FreshRequests:      10,
	}
}

// The methods below make ColdStartConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c ColdStartConfig) class() Class              { return ColdStart }
func (c ColdStartConfig) enabled() bool             { return c.Enabled }
func (c ColdStartConfig) disabled() ColdStartConfig { c.Enabled = false; return c }
func (c ColdStartConfig) usesTriage() bool          { return false }
func (c ColdStartConfig) needs() []need {
	return []need{{class: ColdStart, what: "a progress counter", anyOf: progressFamilies(), afterTraffic: true}}
}
func (c ColdStartConfig) reads() []string {
	return append(append(progressReads(), probeFamilies()...), series.HTTPRequestsActive, series.NumQueueReqs,
		series.StartupTimeSeconds, startupCUDAGraphTime)
}
func (c ColdStartConfig) lookback() time.Duration {
	// It reads back to the replica's start; past CriticalAfter the
	// verdict no longer changes.
	return max(c.CriticalAfter, c.DemandRange)
}

func (c ColdStartConfig) build(env buildEnv) Detector { return &ColdStartDetector{cfg: c} }

func (c ColdStartConfig) oneShot(lookback time.Duration, samples int) (ColdStartConfig, OneShot) {
	// The start time comes from the process itself; the budgets stay.
	return c, OneShot{Judged: true, Note: "partly: judged from the process start time against the startup budget; 'demand not served' needs the daemon's longer watch"}
}

func (c ColdStartConfig) validate(e *configErrors) {
	e.positiveDuration("startup_budget", c.StartupBudget)
	e.check(c.CriticalAfter >= c.StartupBudget, "critical_after", "must be at least startup_budget (%s), got %s", c.StartupBudget, c.CriticalAfter)
	e.positiveDuration("demand_range", c.DemandRange)
	e.endpoints("inference_endpoints", c.InferenceEndpoints)
	e.check(c.MinProbes >= 1, "min_probes", "must be at least 1, got %d", c.MinProbes)
	e.check(c.FreshRequests >= 0, "fresh_requests", "must not be negative, got %v", c.FreshRequests)
}

// severities lists what its findings can carry; its runbook describes each.
func (c ColdStartConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: off the chain, a replica that never finishes starting holds
// requests in the queue, and clients retry and fail.
func (c ColdStartConfig) position(Finding) position {
	return position{explains: []Class{QueueLatency, RetryAvalanche, ErrorRate}}
}

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c ColdStartConfig) doc() doc {
	return doc{
		name:     "Cold start",
		means:    "a target never reached yet (a rollout's pod loading weights and CUDA graphs), or up but serving nothing long after a start",
		signals:  "a target never reached (with Kubernetes, also a pod the scheduler cannot place; the cause first: unschedulable, image pull, volume, probes, node): silent for `startup_budget` (15m), then a warning, never critical — a rollout pages nothing critical; a replica that answers its scrapes but still serves nothing after `critical_after` (20m): critical",
		settings: "Up but not serving for too long after a start.",
	}
}
