package detect

import (
	"fmt"
	"strings"
	"time"
)

// ReplicaDownDetector pages when a replica cannot be scraped for several
// consecutive scrapes (critical), when it restarted recently (warning:
// possibly a crash or OOM kill) and when it keeps restarting (critical:
// crash loop). Scrape failures are data the window records, so this
// detector needs no metric at all.
type ReplicaDownDetector struct{ cfg ReplicaDownConfig }

// Class implements Detector.
func (d *ReplicaDownDetector) Class() Class { return ReplicaDown }

// Detect implements Detector.
func (d *ReplicaDownDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	st := w.Scrape()
	if !st.Up && st.ConsecutiveFailures >= c.FailuresToPage {
		return []Finding{d.down(w, st, now)}
	}
	restarts := w.Restarts(now.Add(-c.CrashLoopWindow), now)
	if restarts >= c.CrashLoopRestarts {
		return []Finding{d.restarted(w, now, restarts, true)}
	}
	if lr := w.LastRestart(); !lr.IsZero() && !lr.After(now) && now.Sub(lr) <= c.RestartLookback {
		return []Finding{d.restarted(w, now, restarts, false)}
	}
	return nil
}

// failureDiagnosis explains a scrape failure reason: the layer that fails
// and what usually causes it.
func failureDiagnosis(reason, errText string) (Layer, string, []string) {
	switch reason {
	case "refused":
		return LayerProcess, "Process layer: the connection is refused, so nothing listens on the metrics port — the server process is down: crashed, OOM-killed, or restarting (pod not ready).",
			[]string{
				"Check the pod/container: kubectl describe pod (Last State, Reason: OOMKilled / Error, exit code) and kubectl get events.",
				"Read the last server log lines before the exit (CUDA out of memory, NCCL errors, Python tracebacks).",
				"Check the node: dmesg for the OOM killer and GPU Xid errors; nvidia-smi for a lost GPU.",
			}
	case "timeout":
		return LayerProcess, "Process layer: the replica accepts connections but does not answer /metrics in time — it is hung (scheduler stuck, NCCL collective waiting on a dead rank) or so overloaded that its HTTP loop is starved.",
			[]string{
				"Probe /health_generate (it generates one token; 503 or no answer within ~20 s means the engine is stuck).",
				"Dump the stacks: py-spy dump --pid <scheduler pid> for each rank; a rank waiting in all_reduce/NCCL points to a collective hang.",
				"Check GPU state (nvidia-smi: utilization stuck at 100% without progress) and the last log lines.",
			}
	case "http_status":
		if strings.Contains(errText, "404") {
			return LayerTransport, "Scrape layer: /metrics answers 404 — the server runs without --enable-metrics (metrics are off by default), or the target points at the wrong port/path.",
				[]string{
					"Check the launch flags for --enable-metrics and that the target uses the HTTP port (--port, default 30000), path /metrics.",
					"Restart with --enable-metrics if it is missing.",
				}
		}
		return LayerTransport, "Scrape layer: /metrics answers with an HTTP error status (" + errText + "): the server or a proxy in front of it is failing.",
			[]string{
				"Curl /metrics and /health_generate directly on the pod to tell the server from the proxy/ingress.",
				"Check the server logs around the failing scrapes.",
			}
	case "parse_error":
		return LayerTransport, "Scrape layer: the endpoint answers but not with Prometheus text — the target points at another service or port, a proxy returns an error page, or the exposition is corrupt.",
			[]string{
				"Curl the target URL and check it returns sglang:* metrics in text format.",
				"Check the target configuration (port, path, Accept header handling by proxies).",
			}
	case "too_large", "too_many_series":
		return LayerTransport, "Scrape layer: the exposition exceeds the watchdog's limits — usually label fan-out (--enable-metrics-for-all-schedulers with many ranks, custom labels, per-priority series).",
			[]string{
				"Curl /metrics and count series per family to find the fan-out.",
				"Reduce the fan-out (drop custom labels, disable per-rank export) or raise the watchdog's scrape limits deliberately.",
			}
	default:
		return LayerTransport, "Scrape layer: the scrape fails (" + reason + ": " + errText + ") — DNS, TLS, network policy or the pod being gone.",
			[]string{
				"Check the target resolves and is reachable from the watchdog (DNS, network policy, TLS).",
				"Check the pod/container still exists and is scheduled.",
			}
	}
}

func (d *ReplicaDownDetector) down(w Window, st ScrapeState, now time.Time) Finding {
	layer, diag, steps := failureDiagnosis(string(st.Reason), st.Error)
	f := finding(ReplicaDown, w, Critical, layer)
	f.Evidence = []Evidence{{
		Name: "consecutive failed scrapes", Value: float64(st.ConsecutiveFailures),
		Threshold: fmt.Sprintf(">= %d", d.cfg.FailuresToPage),
	}}
	since := "never scraped successfully"
	if !st.LastSuccess.IsZero() {
		age := now.Sub(st.LastSuccess)
		f.Evidence = append(f.Evidence, Evidence{Name: "seconds since last successful scrape", Value: age.Seconds(), Unit: "s"})
		since = "last success " + age.Round(time.Second).String() + " ago"
	}
	f.Summary = fmt.Sprintf("Replica down: %d consecutive scrapes failed (%s), %s", st.ConsecutiveFailures, st.Reason, since)
	if st.Error != "" {
		diag += " Last error: " + st.Error + "."
	}
	f.Diagnosis = diag
	f.Emergency = append([]string{
		"Confirm from outside the watchdog (curl /health_generate and /metrics on the pod); if the replica is really gone, make sure the router has taken it out of rotation.",
	}, steps...)
	f.RootCause = []string{
		"If it crashed or was OOM-killed: compare --mem-fraction-static, --max-running-requests and context length with the GPU memory, and check the traffic mix at the time.",
		"If it hangs: collect stacks of every rank before restarting; check NCCL/driver versions and inter-node networking.",
		"Keep the restart policy and readiness probe (/health_generate) so a dead replica leaves rotation automatically.",
	}
	return f
}

func (d *ReplicaDownDetector) restarted(w Window, now time.Time, restarts int, loop bool) Finding {
	lr := w.LastRestart()
	sev, layer := Warning, LayerProcess
	if loop {
		sev = Critical
	}
	f := finding(ReplicaDown, w, sev, layer)
	f.Evidence = []Evidence{
		{Name: "restarts in crash-loop window", Value: float64(restarts),
			Threshold: fmt.Sprintf(">= %d in %s is a crash loop", d.cfg.CrashLoopRestarts, d.cfg.CrashLoopWindow)},
		{Name: "seconds since last restart", Value: now.Sub(lr).Seconds(), Unit: "s"},
	}
	ago := now.Sub(lr).Round(time.Second)
	if loop {
		f.Summary = fmt.Sprintf("Crash loop: %d restarts in the last %s (last %s ago)", restarts, d.cfg.CrashLoopWindow, ago)
		f.Diagnosis = "Process layer: the server keeps restarting (most counters reset repeatedly). A crash loop is usually a deterministic failure: OOM at startup or under the first batches, a bad flag or model path after a deploy, or a GPU/driver fault on the node."
	} else {
		f.Summary = fmt.Sprintf("Replica restarted %s ago — possible crash/OOM", ago)
		f.Diagnosis = "Process layer: the server restarted (most counters reset at once, or the process start time changed). Unless it was a planned deploy, suspect a crash or an OOM kill; the radix cache restarts empty, so expect a lower hit rate and higher TTFT while it warms up."
	}
	f.Emergency = []string{
		"Check whether it was a planned rollout; if so, nothing to do.",
		"Check the pod: kubectl describe pod (Last State: OOMKilled / Error, exit code, restart count) and kubectl get events.",
		"Check the node: dmesg for the OOM killer and GPU Xid errors.",
		"Read the last log lines before the restart (CUDA out of memory, NCCL errors, tracebacks).",
	}
	if loop {
		f.Emergency = append(f.Emergency, "Take the replica out of rotation or roll back the last deploy while you investigate.")
	}
	f.RootCause = []string{
		"GPU OOM: lower --mem-fraction-static (e.g. 0.85 -> 0.7), reduce --cuda-graph-max-bs, disable optional features (speculative decoding, LoRA) to confirm.",
		"Host OOM (container memory limit): raise the limit or reduce tokenizer/detokenizer workers.",
		"Deterministic crash after a deploy: roll back, then reproduce with the new version off the serving path.",
	}
	return f
}

// ReplicaDownConfig tunes the scrape-failure and restart detector.
type ReplicaDownConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// FailuresToPage is how many consecutive failed scrapes make the replica
	// down (critical). One timeout under load is not an outage.
	FailuresToPage int `yaml:"failures_to_page"`
	// RestartLookback: a restart (counter reset) seen within it raises a
	// warning "restarted — possible crash/OOM".
	RestartLookback time.Duration `yaml:"restart_lookback"`
	// CrashLoopRestarts restarts within CrashLoopWindow are a crash loop
	// (critical).
	CrashLoopRestarts int           `yaml:"crash_loop_restarts"`
	CrashLoopWindow   time.Duration `yaml:"crash_loop_window"`
}

// defaultReplicaDown returns the production settings, tuned for a 5 s scrape
// interval.
func defaultReplicaDown() ReplicaDownConfig {
	return ReplicaDownConfig{
		Enabled:           true,
		FailuresToPage:    3,
		RestartLookback:   15 * time.Minute,
		CrashLoopRestarts: 3,
		CrashLoopWindow:   30 * time.Minute,
	}
}

// The methods below make ReplicaDownConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c ReplicaDownConfig) class() Class                { return ReplicaDown }
func (c ReplicaDownConfig) enabled() bool               { return c.Enabled }
func (c ReplicaDownConfig) disabled() ReplicaDownConfig { c.Enabled = false; return c }
func (c ReplicaDownConfig) usesTriage() bool            { return false }
func (c ReplicaDownConfig) needs() []need {
	return nil // it judges the scrape itself, no family
}
func (c ReplicaDownConfig) lookback() time.Duration {
	return max(c.RestartLookback, c.CrashLoopWindow)
}

func (c ReplicaDownConfig) build(env buildEnv) Detector { return &ReplicaDownDetector{cfg: c} }

func (c ReplicaDownConfig) oneShot(lookback time.Duration, samples int) (ReplicaDownConfig, OneShot) {
	// Down means every scrape of the observation failed.
	c.FailuresToPage = max(1, samples)
	return c, OneShot{Judged: true, Note: "judged: down when every scrape failed; a restart only if it happened between the scrapes"}
}

func (c ReplicaDownConfig) validate(e *configErrors) {
	e.check(c.FailuresToPage >= 1, "failures_to_page", "must be at least 1, got %d", c.FailuresToPage)
	e.positiveDuration("restart_lookback", c.RestartLookback)
	e.check(c.CrashLoopRestarts >= 2, "crash_loop_restarts", "must be at least 2, got %d", c.CrashLoopRestarts)
	e.positiveDuration("crash_loop_window", c.CrashLoopWindow)
}

// severities lists what its findings can carry; its runbook describes each.
func (c ReplicaDownConfig) severities() []Severity { return []Severity{Warning, Critical} }
