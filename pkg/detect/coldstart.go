package detect

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ColdStartDetector pages when a replica that answers its scrapes has not
// started serving long after it (re)started: its /health_generate probe
// still fails (SGLang answers 503 while Starting), or requests wait on it
// while nothing has been processed since the start. A target that refuses
// connections all along is replica_down's, never this one's; one that
// served and then stopped is engine_hang's.
type ColdStartDetector struct{ cfg ColdStartConfig }

// Class implements Detector.
func (d *ColdStartDetector) Class() Class { return ColdStart }

// startupPhases are the phase label values of sglang:startup_time_seconds.
var startupPhases = []string{"load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"}

// Detect implements Detector.
func (d *ColdStartDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	st := w.Scrape()
	if !st.Up {
		return nil // refused/timeouts while starting are replica_down's
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
		Threshold: fmt.Sprintf(">= %s startup budget", dur(c.StartupBudget))})
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
		f.Evidence = append(f.Evidence, Evidence{Name: "queued requests (lowest in the last " + dur(c.DemandRange) + ")", Value: queued})
	}
	if aOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "in-flight inference requests (lowest in the last " + dur(c.DemandRange) + ")", Value: active})
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
		phaseText = append(phaseText, fmt.Sprintf("%s %ss", ph.name, num(ph.secs)))
	}

	ago := dur(age.Round(time.Second))
	var what []string
	if notReady {
		what = append(what, "every /health_generate probe since then failed (SGLang answers 503 until warm-up finishes)")
	}
	if demand {
		what = append(what, "requests have been waiting on it for the last "+dur(c.DemandRange)+" while it has processed nothing since the start")
	}
	f.Summary = fmt.Sprintf("Cold start: replica %s %s ago and is still not serving", origin, ago)
	diag := []string{
		fmt.Sprintf("Process layer: the replica %s %s ago and answers its metrics scrapes, but %s.", origin, ago, strings.Join(what, ", and ")),
		fmt.Sprintf("That is past the startup budget of %s.", dur(c.StartupBudget)),
	}
	if len(phaseText) > 0 {
		diag = append(diag, "Startup phases (longest first): "+strings.Join(phaseText, ", ")+".")
	}
	diag = append(diag, "Typical causes: slow weight loading (large models take minutes from network storage), CUDA graph capture for many batch sizes (30-60 s and more), slow image pulls, or a warm-up request that cannot complete (then it is a hang at startup: look at the stacks). Meanwhile the other replicas carry its share of the traffic.")
	f.Diagnosis = strings.Join(diag, " ")
	f.Emergency = []string{
		"Keep the replica out of rotation until /health_generate answers 200, so traffic is not sent to a server that cannot serve it (readiness probe on /health_generate).",
		"Relieve the replicas that carry the load: bring up instances from a warm pool, or over-provision for now (raise the autoscaler's minimum).",
		"Read the server log of the start: the last line says which phase it is in (loading weights, capturing CUDA graphs, warm-up); if it stopped moving, dump the stacks (py-spy dump) and restart.",
	}
	f.RootCause = []string{
		"Prefetch weights to local disk or a ramdisk (or a nearby NFS cache) before the server starts instead of loading them from remote storage.",
		"Capture fewer CUDA graphs: a shorter --cuda-graph-bs list (or a lower --cuda-graph-max-bs) cuts capture time.",
		"Use pre-built, pre-pulled images (or snapshots) so a new replica does not download gigabytes first.",
		"Scale ahead of demand: scale on queue time with enough headroom that a 5-10 minute start does not overload the others.",
	}
	return []Finding{f}
}
