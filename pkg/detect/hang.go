package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// EngineHang is the class of requests in flight without decode progress (e.g.
// an NCCL hang).
const EngineHang Class = "engine_hang"

// EngineHangDetector pages when the engine stops making progress while
// requests wait on it — typically a collective (NCCL) waiting on a rank
// that will never answer. Scheduler gauges freeze at their last values
// when the loop is stuck, so a hang looks "healthy but constant"; the
// detector reads counters instead: the decode progress counter
// (realtime_tokens_total, bumped every decode iteration) flat with requests
// in flight. Older releases fall back to the finished-request counters,
// which need a longer silence and a second signal (frozen gauges, a failing
// /health_generate probe, a flat CPU counter). The active probe, when the
// scraper records it, also catches a stuck engine nobody is calling.
//
// It stays silent for an idle replica (nothing in flight), for a replica
// whose scrape fails (replica_down) and for one that has not served since
// it started (cold_start).
type EngineHangDetector struct{ cfg EngineHangConfig }

// Class implements Detector.
func (d *EngineHangDetector) Class() Class { return EngineHang }

// frozenGauges are the scheduler gauges that stop changing when the loop
// is stuck.
var frozenGauges = []string{series.NumRunningReqs, series.NumQueueReqs, series.TokenUsage, series.GenThroughput}

// Detect implements Detector.
func (d *EngineHangDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	st := w.Scrape()
	if !st.Up {
		return nil // replica_down reports it
	}
	if _, never := neverServed(w, now, c.FreshRequests); never {
		return nil // still starting: cold_start reports it
	}

	primary := Sel(series.RealtimeTokensTotal)
	hasRealtime := present(w, series.RealtimeTokensTotal, now.Add(-c.Range), now)
	rng := c.Range
	if !hasRealtime {
		rng = c.FallbackRange
	}
	from := now.Add(-rng)
	if !st.FirstSeen.IsZero() && st.FirstSeen.After(from) {
		return nil // not watched for the whole range yet
	}
	if lr := w.LastRestart(); !lr.IsZero() && lr.After(from) {
		return nil // a new process: replica_down reports the restart, cold_start a slow start
	}

	probe := readProbe(w, from, now, c.MinProbes)
	if probe.present && probe.allOK {
		// The engine generated a token for the probe within the range: it
		// is not stuck, whatever the counters say.
		return nil
	}

	// Requests in flight for the whole range: active inference requests, or
	// a running batch (frozen > 0 when the loop is stuck).
	httpActive, httpOK := w.Min(inference(series.HTTPRequestsActive, c.InferenceEndpoints), from, now)
	runningMin, runningOK := w.Min(Sel(series.NumRunningReqs), from, now)
	inFlight := (httpOK && httpActive >= c.MinInFlight) || (runningOK && runningMin >= c.MinInFlight)

	// Progress over the range.
	type flat struct {
		src progressSource
		inc float64
	}
	var flats []flat
	progressFlat, progressKnown := false, false
	if hasRealtime {
		if !covers(w, primary, from, now) {
			return nil
		}
		inc, ok := w.Increase(primary, from, now)
		if !ok {
			return nil
		}
		progressKnown, progressFlat = true, inc <= c.MaxProgressTokens
		flats = append(flats, flat{progressSources[0], inc})
	} else {
		progressFlat = true
		for _, src := range progressSources[1:] {
			if !present(w, src.sel.Name, from, now) {
				continue
			}
			inc, ok := w.Increase(src.sel, from, now)
			if !ok || !covers(w, src.sel, from, now) {
				continue
			}
			progressKnown = true
			progressFlat = progressFlat && inc <= c.MaxProgressTokens
			flats = append(flats, flat{src, inc})
		}
		progressFlat = progressFlat && progressKnown
	}

	// Corroboration: gauges frozen at exactly their last values, CPU flat.
	var frozen []string
	active := false
	for _, name := range frozenGauges {
		lo, okLo := w.Min(Sel(name), from, now)
		hi, okHi := w.Max(Sel(name), from, now)
		if !okLo || !okHi || !covers(w, Sel(name), from, now) {
			continue
		}
		if lo != hi {
			frozen = nil
			break
		}
		frozen = append(frozen, fmt.Sprintf("%s=%s", strings.TrimPrefix(name, "sglang:"), num(hi)))
		active = active || ((name == series.NumRunningReqs || name == series.GenThroughput) && hi > 0)
	}
	gaugesFrozen := len(frozen) >= 2 && active
	cpu := Sel(series.ProcessCPUSecondsTotal)
	cpuInc, cpuOK := w.Increase(cpu, from, now)
	cpuFlat := cpuOK && covers(w, cpu, from, now) && cpuInc == 0

	var trigger string
	switch {
	case hasRealtime && inFlight && progressFlat:
		trigger = "counter"
	case !hasRealtime && inFlight && progressFlat && (gaugesFrozen || probe.allFailed || cpuFlat):
		trigger = "fallback"
	case probe.allFailed && (!progressKnown || progressFlat):
		// Nobody may be calling, but the engine does not generate the one
		// token the probe asks for.
		trigger = "probe"
	default:
		return nil
	}

	f := finding(EngineHang, w, Critical, LayerProcess)
	for _, fl := range flats {
		f.Evidence = append(f.Evidence, Evidence{Name: fl.src.name + " in the last " + ShortDuration(rng), Value: fl.inc,
			Threshold: fmt.Sprintf("<= %s is flat", num(c.MaxProgressTokens))}.WithLimit(c.MaxProgressTokens))
	}
	if hasRealtime {
		if dec, ok := w.Increase(Sel(series.RealtimeTokensTotal, "mode", "decode"), from, now); ok {
			f.Evidence = append(f.Evidence, Evidence{Name: "decode tokens in the last " + ShortDuration(rng), Value: dec})
		}
		if before, ok := w.Rate(primary, now.Add(-rng*4), from); ok {
			f.Evidence = append(f.Evidence, Evidence{Name: "tokens/s before the stall", Value: before, Unit: "/s"})
		}
	}
	if httpOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "in-flight inference requests (lowest in range)", Value: httpActive,
			Threshold: fmt.Sprintf(">= %s", num(c.MinInFlight))})
	}
	if runningOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "running requests (lowest in range)", Value: runningMin})
	}
	if probe.present {
		e := Evidence{Name: "failed /health_generate probes in range", Value: float64(probe.failed)}
		if probe.probes > 0 {
			e.Threshold = fmt.Sprintf("of %d probes", probe.probes)
		}
		f.Evidence = append(f.Evidence, e)
		if probe.slowestOK {
			f.Evidence = append(f.Evidence, Evidence{Name: "slowest /health_generate probe", Value: probe.slowest, Unit: "s"})
		}
	}
	if cpuOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "process CPU seconds in range", Value: cpuInc, Unit: "s"})
	}

	// held is what a restart drops, counted when the gauges count it.
	inFlightText, held := "requests in flight", "the requests it holds"
	switch {
	case httpOK && httpActive >= c.MinInFlight:
		inFlightText = fmt.Sprintf("%s requests in flight", num(httpActive))
		held = "the " + inFlightText
	case runningOK && runningMin >= c.MinInFlight:
		inFlightText = fmt.Sprintf("%s requests in the running batch", num(runningMin))
		held = "the " + inFlightText
	}
	var diag []string
	switch trigger {
	case "counter":
		f.Summary = fmt.Sprintf("Engine hang: %s but no token processed for %s (realtime_tokens_total flat)", inFlightText, ShortDuration(rng))
		diag = append(diag, fmt.Sprintf("Process layer: %s, yet the engine processed no token in the last %s — the progress counter, bumped on every decode iteration and prefill batch, is flat. The scheduler loop is stuck.", inFlightText, ShortDuration(rng)))
	case "fallback":
		f.Summary = fmt.Sprintf("Engine hang: %s but nothing finished for %s", inFlightText, ShortDuration(rng))
		diag = append(diag, fmt.Sprintf("Process layer: %s, yet no request finished and no token was reported for %s. This release has no per-iteration progress counter (realtime_tokens_total), so the verdict rests on the finished-request counters plus a second signal.", inFlightText, ShortDuration(rng)))
	case "probe":
		f.Summary = fmt.Sprintf("Engine hang: /health_generate failed for %s and nothing progresses", ShortDuration(rng))
		diag = append(diag, fmt.Sprintf("Process layer: every /health_generate probe in the last %s failed — the engine did not produce the single token it asks for within SGLang's timeout — and no progress counter moved.", ShortDuration(rng)))
	}
	if gaugesFrozen {
		diag = append(diag, "The scheduler gauges are frozen at exactly their last values ("+strings.Join(frozen, ", ")+"): they are only written by the scheduler loop, so it has stopped.")
	}
	if probe.allFailed && trigger != "probe" {
		diag = append(diag, "The active /health_generate probe failed as well.")
	}
	if cpuFlat {
		diag = append(diag, "The process CPU counter did not move either.")
	}
	diag = append(diag, "Most often a collective operation (NCCL all-reduce) waits on a rank that crashed or lost its network path, so every rank blocks with GPU utilization pinned but no progress; also a CUDA error in one rank, a deadlock after an exception, or a driver/Xid fault.",
		"SGLang's own watchdog crashes the server when one forward batch runs longer than --watchdog-timeout (default 300 s), and the restart policy brings it back; a stall outside a forward batch, or one under a raised timeout, lasts until the replica is restarted.")
	f.Diagnosis = strings.Join(diag, " ")
	f.Emergency = []string{
		"Take the replica out of rotation at the router/gateway so no new request waits on it; the other replicas carry its traffic.",
		"Before restarting, capture evidence: py-spy dump --pid <pid> for the scheduler process of every rank (a rank waiting in all_reduce / ncclAllReduce is blocked; the rank that is elsewhere or gone is the culprit).",
		"Check the GPUs and the topology: nvidia-smi (utilization stuck at 100% without temperature rising means kernels wait on communication), nvidia-smi topo -m, dmesg for Xid errors.",
		"Then kill every SGLang process of the replica and restart it — this drops " + held + ", which make no progress anyway; to diagnose a recurrence, restart with NCCL_DEBUG=INFO and read the last NCCL INFO line of each rank (which rank, which collective).",
	}
	f.RootCause = []string{
		"Match NCCL with the CUDA major version and the driver; upgrade NCCL if they drift.",
		"Check the network between nodes: MTU consistency, firewall rules for the NCCL ports, InfiniBand links (ibstat) or packet loss on socket transports.",
		"Set NCCL_ASYNC_ERROR_HANDLING=1 (TORCH_NCCL_ASYNC_ERROR_HANDLING in newer PyTorch) so a failed collective aborts the process instead of hanging, and keep /health_generate as the liveness probe so it gets restarted.",
		"Keep SGLang's --watchdog-timeout (default 300 s) no longer than you can afford a stuck replica, so a stuck forward batch crashes and restarts; --soft-watchdog-timeout dumps debugging information before that.",
	}
	return []Finding{f}
}

// EngineHangConfig tunes the engine hang (e.g. NCCL) detector.
type EngineHangConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is how long the progress counter must stay flat while requests
	// are in flight. Longer than SGLang's own 20 s health-check timeout.
	Range time.Duration `yaml:"range" doc:"how long progress must stay flat with requests in flight"`
	// FallbackRange applies to releases without realtime_tokens_total:
	// their counters move only when requests finish, so a long generation
	// can look flat for a while; the fallback needs a longer silence and a
	// second signal (frozen gauges, failing probe or a flat CPU counter).
	FallbackRange time.Duration `yaml:"fallback_range" doc:"for releases without the decode progress counter"`
	// InferenceEndpoints are the endpoint label values whose in-flight
	// requests count (the watchdog's own /metrics and /health_generate
	// requests do not), "|"-separated.
	InferenceEndpoints string `yaml:"inference_endpoints" doc:"endpoint values whose in-flight requests count"`
	// MinInFlight is the fewest requests that must stay in flight over the
	// range (active HTTP requests, or the running batch).
	MinInFlight float64 `yaml:"min_in_flight" doc:"fewest requests in flight over the whole range"`
	// MaxProgressTokens is how many tokens may still be processed in the
	// range for it to count as flat.
	MaxProgressTokens float64 `yaml:"max_progress_tokens" doc:"tokens still processed in range that count as flat"`
	// MinProbes is the fewest failed /health_generate probes in the range
	// for the probe to count as failing.
	MinProbes int `yaml:"min_probes" doc:"failed /health_generate probes (when probing is on)"`
	// FreshRequests: a process that finished at most this many requests
	// since it started and made no progress is still starting (cold_start),
	// not hung.
	FreshRequests float64 `yaml:"fresh_requests" doc:"a process with at most this many finished requests is starting (cold_start), not hung"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (EngineHangConfig) defaults() EngineHangConfig {
	return EngineHangConfig{
		Enabled:            true,
		Range:              2 * time.Minute, // six times SGLang's 20 s health-check timeout
		FallbackRange:      5 * time.Minute,
		InferenceEndpoints: DefaultInferenceEndpoints,
		MinInFlight:        1,
		MaxProgressTokens:  0, // any token processed is progress
		MinProbes:          2,
		FreshRequests:      10,
	}
}

// The methods below make EngineHangConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c EngineHangConfig) class() Class               { return EngineHang }
func (c EngineHangConfig) enabled() bool              { return c.Enabled }
func (c EngineHangConfig) disabled() EngineHangConfig { c.Enabled = false; return c }
func (c EngineHangConfig) usesTriage() bool           { return false }
func (c EngineHangConfig) needs() []need {
	return []need{{class: EngineHang, what: "a progress counter", anyOf: progressFamilies(), afterTraffic: true}}
}
func (c EngineHangConfig) reads() []string {
	return append(append(append(progressReads(), probeFamilies()...), frozenGauges...),
		series.HTTPRequestsActive, series.ProcessCPUSecondsTotal)
}
func (c EngineHangConfig) lookback() time.Duration {
	return c.FallbackRange
}

func (c EngineHangConfig) build(env buildEnv) Detector { return &EngineHangDetector{cfg: c} }

func (c EngineHangConfig) oneShot(lookback time.Duration, samples int) (EngineHangConfig, OneShot) {
	c.Range = lookback
	return c, OneShot{Judged: false, Note: "needs history: the progress counter must stay flat over a range longer than SGLang's 20 s health check — the layer verdict ('stuck') and the /health_generate probe above stand in"}
}

func (c EngineHangConfig) validate(e *configErrors) {
	e.positiveDuration("range", c.Range)
	e.check(c.FallbackRange >= c.Range, "fallback_range", "must be at least range (%s), got %s", c.Range, c.FallbackRange)
	e.endpoints("inference_endpoints", c.InferenceEndpoints)
	e.positive("min_in_flight", c.MinInFlight)
	e.check(c.MaxProgressTokens >= 0, "max_progress_tokens", "must not be negative, got %v", c.MaxProgressTokens)
	e.check(c.MinProbes >= 1, "min_probes", "must be at least 1, got %d", c.MinProbes)
	e.check(c.FreshRequests >= 0, "fresh_requests", "must not be negative, got %v", c.FreshRequests)
}

// severities lists what its findings can carry; its runbook describes each.
func (c EngineHangConfig) severities() []Severity { return []Severity{Critical} }

// position: off the chain, a hang freezes the KV gauges and stalls every
// request: KV saturation, latency, retries and failed requests follow.
func (c EngineHangConfig) position(Finding) position {
	return position{explains: []Class{KVSaturation, QueueLatency, DecodeSlowdown, RetryAvalanche, ErrorRate}}
}

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c EngineHangConfig) doc() doc {
	return doc{
		name:     "Engine hang",
		means:    "e.g. an NCCL hang",
		signals:  "requests in flight, decode progress flat, frozen gauges, the `/health_generate` probe (on by default every 30 s, `scrape.health_probe`)",
		settings: "Requests in flight, no decode progress (e.g. an NCCL hang).",
	}
}
