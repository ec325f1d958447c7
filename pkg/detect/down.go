package detect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ReplicaDown is the class of a replica that served and can no longer be
// reached, a crash loop or an evicted pod.
const ReplicaDown Class = "replica_down"

// ReplicaDownDetector pages (critical) when the server process of a replica
// that served cannot be reached for several consecutive scrapes (refused,
// timeout, DNS: nothing answers), when it keeps restarting (crash loop), and
// when its Kubernetes pod failed (evicted). A broken metrics endpoint on a
// server that answers is metrics_blind's; a target that never served yet
// (a rollout or scale-out loading its weights) is cold_start's; a single
// restart is replica_restarted's. When the replica serves again the finding
// turns Resolving for one scrape, saying how long it was down and whether
// it came back restarted, so the resolve says it. Scrape failures are data
// the window records, so this detector needs no metric at all.
type ReplicaDownDetector struct{ cfg ReplicaDownConfig }

// Class implements Detector.
func (d *ReplicaDownDetector) Class() Class { return ReplicaDown }

// Kubernetes values the detectors read from series.Pod.
const (
	podFailed        = "Failed"
	crashLoopBackOff = "CrashLoopBackOff"
)

// Detect implements Detector.
func (d *ReplicaDownDetector) Detect(w Window, now time.Time) []Finding {
	if w.Replica().Kind == KindGPU {
		return nil // a GPU's exporter is no SGLang server: the GPU detectors read it
	}
	c := d.cfg
	st := w.Scrape()
	pod := w.Replica().Pod
	if pod != nil && pod.Phase == podFailed {
		return []Finding{d.podGone(w, pod, now)}
	}
	if restarts, loop := d.crashLoop(w, pod, now); loop {
		return []Finding{d.looping(w, pod, now, restarts)}
	}
	if !st.Up {
		if !st.Reason.Unreachable() || st.ConsecutiveFailures < c.FailuresToPage || starting(st, pod) || probeAnswers(st) {
			return nil // metrics_blind's, not yet, or cold_start's
		}
		return []Finding{d.down(w, st, pod, now)}
	}
	if o := st.LastOutage; st.ConsecutiveSuccesses >= 1 && st.ConsecutiveSuccesses <= c.RecoveredScrapes && d.paged(o, st, pod) {
		return []Finding{d.recovered(w, o, pod)}
	}
	return nil
}

// probeAnswers reports whether a replica whose /metrics scrapes time out
// still answers its health probe (/health_generate generates a token)
// every time since its last good scrape: its metrics endpoint is slow or
// stuck, the replica is not down. Refused connections and names that no
// longer resolve are evidence it is gone; a timeout alone is not.
func probeAnswers(st ScrapeState) bool {
	return st.Reason == series.FailureTimeout && st.ProbeAnswered
}

// starting reports whether a replica that cannot be reached is still coming
// up rather than down: it never answered a scrape, or its pod was created
// after the last one it answered (a replacement under the same name). A
// rollout's new pods refuse connections for minutes while weights load and
// CUDA graphs are captured; that is cold_start's, not an outage.
func starting(st ScrapeState, pod *series.Pod) bool {
	return st.LastSuccess.IsZero() || (pod != nil && pod.Created.After(st.LastSuccess))
}

// paged reports whether an ended outage was one this detector reported:
// unreachable for enough scrapes, after the replica had served, and not a
// replacement pod (created during the outage) starting up.
func (d *ReplicaDownDetector) paged(o Outage, st ScrapeState, pod *series.Pod) bool {
	return o.Failures >= d.cfg.FailuresToPage && o.Reason.Unreachable() && o.From.After(st.FirstSeen) &&
		(pod == nil || pod.Created.Before(o.From))
}

// crashLoop counts the restarts in the crash-loop window: counter resets
// the window saw, or (Kubernetes) increases of the pod's restart count — a
// pod that crashes while it loads is never scraped, so no reset is ever
// seen. A pod the kubelet holds in CrashLoopBackOff with enough restarts is
// a crash loop by the kubelet's own verdict, even if the watchdog only just
// met it.
func (d *ReplicaDownDetector) crashLoop(w Window, pod *series.Pod, now time.Time) (int, bool) {
	c := d.cfg
	from := now.Add(-c.CrashLoopWindow)
	restarts := w.Restarts(from, now)
	seen := 0
	for _, t := range w.Scrape().PodRestarts {
		if t.After(from) && !t.After(now) {
			seen++
		}
	}
	restarts = max(restarts, seen)
	if pod != nil && pod.Waiting == crashLoopBackOff && pod.Restarts >= c.CrashLoopRestarts {
		restarts = max(restarts, pod.Restarts)
	}
	return restarts, restarts >= c.CrashLoopRestarts
}

// failureDiagnosis explains why an unreachable replica cannot be reached:
// the layer that fails and what usually causes it.
func failureDiagnosis(reason series.ScrapeFailure) (Layer, string, []string) {
	switch reason {
	case series.FailureTimeout:
		return LayerProcess, "Process layer: the replica does not answer /metrics in time — it is hung (scheduler stuck, NCCL collective waiting on a dead rank) or so overloaded that its HTTP loop is starved.",
			[]string{
				"Probe /health_generate (it generates one token; 503 or no answer within ~20 s means the engine is stuck).",
				"Dump the stacks: py-spy dump --pid <scheduler pid> for each rank; a rank waiting in all_reduce/NCCL points to a collective hang.",
				"Check GPU state (nvidia-smi: utilization stuck at 100% without progress) and the last log lines.",
			}
	case series.FailureDNS:
		return LayerTransport, "Scrape layer: the replica's host name no longer resolves — the pod or its Service is gone (deleted, evicted, rescheduled under a new address), or DNS itself fails.",
			[]string{
				"Check the pod and Service exist: kubectl get pod,svc,endpoints; kubectl get events for evictions and deletions.",
				"Resolve the name from inside the cluster (nslookup from a debug pod) to tell a missing record from a DNS outage.",
			}
	case series.FailureAbsent:
		return LayerTransport, "Scrape layer: the replica is absent from the Prometheus the watchdog reads (no recent samples there, or up is 0): Prometheus cannot scrape it — the process is down or hung, the pod is gone, or Prometheus' own scrape of it broke.",
			[]string{
				"Look at the replica's target in Prometheus (Status > Targets: last error, last scrape) and query up for it.",
				"Check the pod: kubectl get pod,endpoints; kubectl describe pod (restarts, OOMKilled); kubectl logs <pod> --previous.",
			}
	default:
		return LayerProcess, "Process layer: the connection is refused or dropped, so nothing listens on the metrics port — the server process is down: crashed, OOM-killed, or restarting.",
			[]string{
				"Check the pod/container: kubectl describe pod (Last State, Reason: OOMKilled / Error, exit code) and kubectl get events.",
				"Read the last server log lines before the exit: kubectl logs <pod> --previous (CUDA out of memory, NCCL errors, Python tracebacks).",
				"Check the node: dmesg for the OOM killer and GPU Xid errors; nvidia-smi for a lost GPU.",
			}
	}
}

// podEvidence renders what Kubernetes says about the pod, and a sentence
// for the diagnosis; nothing for targets not discovered from Kubernetes.
func podEvidence(pod *series.Pod, now time.Time) ([]Evidence, string) {
	if pod == nil {
		return nil, ""
	}
	ev := []Evidence{{Name: "pod restarts", Value: float64(pod.Restarts)}}
	if !pod.Created.IsZero() {
		ev = append(ev, Evidence{Name: "pod age", Value: now.Sub(pod.Created).Seconds(), Unit: "s"})
	}
	parts := []string{fmt.Sprintf("Pod %s/%s: phase %s", pod.Namespace, pod.Name, pod.Phase)}
	if pod.Reason != "" {
		parts[0] += " (" + pod.Reason + ")"
	}
	if pod.Ready {
		parts = append(parts, "Ready")
	} else {
		parts = append(parts, "not Ready")
	}
	parts = append(parts, fmt.Sprintf("%d restarts", pod.Restarts))
	if pod.Waiting != "" {
		parts = append(parts, "waiting: "+pod.Waiting)
	}
	if t := pod.LastTermination; t.Reason != "" || t.ExitCode != 0 {
		last := fmt.Sprintf("last termination %s, exit code %d", t.Reason, t.ExitCode)
		if !t.Finished.IsZero() {
			last += fmt.Sprintf(", %s ago", ShortDuration(now.Sub(t.Finished).Round(time.Second)))
			ev = append(ev, Evidence{Name: "seconds since the last termination (" + t.Reason + ")", Value: now.Sub(t.Finished).Seconds(), Unit: "s"})
		}
		parts = append(parts, last)
	}
	text := strings.Join(parts, ", ") + "."
	if pod.Message != "" {
		text += " Kubernetes says: " + pod.Message
		if !strings.HasSuffix(text, ".") {
			text += "."
		}
	}
	return ev, text
}

// terminationHint reads the last termination: what an OOM kill or an exit
// code means.
func terminationHint(pod *series.Pod) string {
	if pod == nil {
		return ""
	}
	switch t := pod.LastTermination; {
	case t.Reason == "OOMKilled" || t.ExitCode == 137:
		return "The container was OOM-killed (host memory: the container's memory limit or the node ran out) — not a CUDA OOM, which exits with a Python traceback and code 1."
	case t.Reason == "Error" && t.ExitCode == 1:
		return "The process exited with an error (code 1): read kubectl logs --previous for the traceback (CUDA out of memory, NCCL errors, a bad flag)."
	case t.Reason == "Error" && t.ExitCode == 139:
		return "The process died of a segmentation fault (code 139): a native crash in a kernel, driver or NCCL."
	}
	return ""
}

func (d *ReplicaDownDetector) down(w Window, st ScrapeState, pod *series.Pod, now time.Time) Finding {
	layer, diag, steps := failureDiagnosis(st.Reason)
	f := finding(ReplicaDown, w, Critical, layer)
	f.Evidence = []Evidence{{
		Name: "consecutive failed scrapes", Value: float64(st.ConsecutiveFailures),
		Threshold: fmt.Sprintf(">= %d", d.cfg.FailuresToPage),
		Limit:     float64(d.cfg.FailuresToPage), HasLimit: true,
	}}
	age := now.Sub(st.LastSuccess)
	f.Evidence = append(f.Evidence, Evidence{Name: "seconds since last successful scrape", Value: age.Seconds(), Unit: "s"})
	f.Summary = fmt.Sprintf("Replica down: %d consecutive scrapes failed (%s), last success %s ago", st.ConsecutiveFailures, st.Reason, ShortDuration(age.Round(time.Second)))
	from := now.Add(-d.cfg.CrashLoopWindow)
	cause, explained := kubeCauseOf(pod, from, now)
	if explained {
		// What usually makes a replica unreachable gives way to what did.
		f.Summary = fmt.Sprintf("Replica down: %s; %d consecutive scrapes failed (%s), last success %s ago", cause.headline, st.ConsecutiveFailures, st.Reason, ShortDuration(age.Round(time.Second)))
		diag, steps = "", nil
	}
	podEv, podText := podEvidence(pod, now)
	kubeEv, kubeText := kubeFacts(pod, cause, from, now)
	f.Evidence = append(append(f.Evidence, podEv...), kubeEv...)
	if st.Error != "" {
		diag += " Last error: " + st.Error + "."
	}
	f.Diagnosis = sentence(cause.diagnosis, diag, podText, kubeText, terminationHint(pod))
	f.Emergency = append(append(slices.Clone(cause.emergency),
		"Confirm from outside the watchdog (curl /health_generate and /metrics on the pod); if the replica is really gone, make sure the router has taken it out of rotation.",
	), steps...)
	f.RootCause = []string{
		"If it crashed or was OOM-killed: compare --mem-fraction-static, --max-running-requests and context length with the GPU memory, and check the traffic mix at the time.",
		"If it hangs: collect stacks of every rank before restarting; check NCCL/driver versions and inter-node networking.",
		"Keep the restart policy and readiness probe (/health_generate) so a dead replica leaves rotation automatically.",
	}
	return f
}

// recovered is the Resolving finding of the first scrape a replica answers
// after an outage this detector paged: how long it was down and whether it
// came back restarted (then: where to look for the crash).
func (d *ReplicaDownDetector) recovered(w Window, o Outage, pod *series.Pod) Finding {
	f := finding(ReplicaDown, w, Critical, LayerProcess)
	f.Resolving = true
	down := o.To.Sub(o.From)
	lr := w.LastRestart()
	restarted := !lr.IsZero() && !lr.Before(o.From) && !lr.After(o.To)
	f.Evidence = []Evidence{
		{Name: "seconds down", Value: down.Seconds(), Unit: "s"},
		{Name: "failed scrapes in the outage", Value: float64(o.Failures)},
	}
	podEv, podText := podEvidence(pod, o.To)
	f.Evidence = append(f.Evidence, podEv...)
	if restarted {
		f.Summary = fmt.Sprintf("Replica serves again after %s down; it came back after a restart (possible crash/OOM)", ShortDuration(down.Round(time.Second)))
		f.Diagnosis = sentence(
			fmt.Sprintf("Process layer: the replica answers again after %s of %s scrapes, and its counters started from zero: the server process restarted. Unless it was a planned restart, suspect a crash or an OOM kill.", ShortDuration(down.Round(time.Second)), o.Reason),
			podText, terminationHint(pod),
			"The radix cache restarted empty: expect a lower hit rate and higher TTFT while it warms up.")
		f.Emergency = []string{
			"Find out how it died: kubectl describe pod <pod> (Last State: OOMKilled / Error, exit code, restart count) and kubectl get events.",
			"Read the log of the previous process: kubectl logs <pod> --previous (CUDA out of memory, NCCL errors, tracebacks).",
			"Check the node: dmesg for the OOM killer and GPU Xid errors.",
		}
	} else {
		f.Summary = fmt.Sprintf("Replica serves again after %s down, without a restart", ShortDuration(down.Round(time.Second)))
		f.Diagnosis = sentence(
			fmt.Sprintf("The replica answers again after %s of %s scrapes, and its counters continued: the process did not restart. The outage was in the path to it (network, node, DNS) or a stall it recovered from.", ShortDuration(down.Round(time.Second)), o.Reason),
			podText)
		f.Emergency = []string{
			"Check the node and network events for the outage window (kubectl get events, node conditions, CNI logs).",
			"If it was a stall, read the server log for the outage window (long GC, a blocked event loop, NCCL timeouts).",
		}
	}
	f.RootCause = []string{
		"GPU OOM: lower --mem-fraction-static, reduce --cuda-graph-max-bs, size KV for the real prompt and output lengths.",
		"Host OOM (container memory limit): raise the limit or reduce tokenizer/detokenizer workers.",
	}
	return f
}

// podGone is the finding of a failed pod (evicted, exited for good): the
// replica is lost until a replacement serves.
func (d *ReplicaDownDetector) podGone(w Window, pod *series.Pod, now time.Time) Finding {
	f := finding(ReplicaDown, w, Critical, LayerProcess)
	why := pod.Reason
	if why == "" {
		why = "failed"
	}
	from := now.Add(-d.cfg.CrashLoopWindow)
	podEv, podText := podEvidence(pod, now)
	cause, explained := kubeCauseOf(pod, from, now)
	kubeEv, kubeText := kubeFacts(pod, cause, from, now)
	f.Evidence = append(append([]Evidence{{Name: "pod failed (" + why + ")", Value: 1}}, podEv...), kubeEv...)
	f.Summary = fmt.Sprintf("Replica down: pod %s (%s)", pod.Name, why)
	diag := "Process layer: the pod is in phase Failed and will not run again; the replica is lost until a replacement serves."
	if pod.Reason == podEvicted {
		diag = "Process layer: the kubelet evicted the pod (node pressure: memory, disk or PIDs); it will not run again, and its replacement must load the model from scratch."
	}
	if explained {
		f.Summary = fmt.Sprintf("Replica down: %s (pod %s)", cause.headline, pod.Name)
		diag = "Process layer: the pod is in phase Failed and will not run again; its replacement must load the model from scratch."
	}
	f.Diagnosis = sentence(cause.diagnosis, diag, podText, kubeText, terminationHint(pod))
	f.Emergency = append(slices.Clone(cause.emergency),
		"Check that a replacement pod is scheduled and loading (kubectl get pods -o wide); until it serves, the other replicas carry its traffic.",
		"kubectl describe pod <pod> and kubectl get events: which resource ran out on which node.",
		"Delete the failed pod once understood (kubectl delete pod <pod>); this incident resolves with it.",
	)
	f.RootCause = []string{
		"Set memory requests equal to limits for serving pods (Guaranteed QoS) so they are evicted last.",
		"Keep node ephemeral storage and memory headroom for the model cache and logs; move large caches to a volume.",
	}
	return f
}

func (d *ReplicaDownDetector) looping(w Window, pod *series.Pod, now time.Time, restarts int) Finding {
	f := finding(ReplicaDown, w, Critical, LayerProcess)
	f.Evidence = []Evidence{
		{Name: "restarts in crash-loop window", Value: float64(restarts),
			Threshold: fmt.Sprintf(">= %d in %s is a crash loop", d.cfg.CrashLoopRestarts, ShortDuration(d.cfg.CrashLoopWindow)),
			Limit:     float64(d.cfg.CrashLoopRestarts), HasLimit: true},
	}
	last := w.LastRestart()
	if pod != nil && pod.LastTermination.Finished.After(last) {
		last = pod.LastTermination.Finished
	}
	ago := "?"
	if !last.IsZero() {
		ago = ShortDuration(now.Sub(last).Round(time.Second))
		f.Evidence = append(f.Evidence, Evidence{Name: "seconds since last restart", Value: now.Sub(last).Seconds(), Unit: "s"})
	}
	from := now.Add(-d.cfg.CrashLoopWindow)
	podEv, podText := podEvidence(pod, now)
	cause, explained := kubeCauseOf(pod, from, now)
	kubeEv, kubeText := kubeFacts(pod, cause, from, now)
	f.Evidence = append(append(f.Evidence, podEv...), kubeEv...)
	f.Summary = fmt.Sprintf("Crash loop: %d restarts in the last %s (last %s ago)", restarts, ShortDuration(d.cfg.CrashLoopWindow), ago)
	if explained {
		f.Summary = fmt.Sprintf("Crash loop: %s; %d restarts in the last %s (last %s ago)", cause.headline, restarts, ShortDuration(d.cfg.CrashLoopWindow), ago)
	}
	f.Diagnosis = sentence(cause.diagnosis, "Process layer: the server keeps restarting. A crash loop is usually a deterministic failure: OOM at startup or under the first batches, a bad flag or model path after a deploy, or a GPU/driver fault on the node.",
		podText, kubeText, terminationHint(pod))
	f.Emergency = append(slices.Clone(cause.emergency), []string{
		"Check whether a rollout is in progress; roll back the last deploy (image, flags, model, driver) while you investigate.",
		"Check the pod: kubectl describe pod (Last State: OOMKilled / Error, exit code, restart count) and kubectl get events.",
		"Read the log of the previous process: kubectl logs <pod> --previous (CUDA out of memory, NCCL errors, tracebacks).",
		"Check the node: dmesg for the OOM killer and GPU Xid errors.",
		"Take the replica out of rotation while you investigate.",
	}...)
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
	FailuresToPage int `yaml:"failures_to_page" doc:"consecutive scrapes that reached nothing"`
	// CrashLoopRestarts restarts within CrashLoopWindow are a crash loop
	// (critical).
	CrashLoopRestarts int           `yaml:"crash_loop_restarts" doc:"this many restarts (or pod restarts) ..."`
	CrashLoopWindow   time.Duration `yaml:"crash_loop_window" doc:"... within this window: critical crash loop"`
	// RecoveredScrapes is for how many successful scrapes after a paged
	// outage the replica is reported serving again (the page's last
	// words before it resolves). A round may come several scrapes after
	// the first that answered (evaluation.interval over scrape.interval):
	// at least that many, or the resolve would say the replica is down.
	RecoveredScrapes int `yaml:"recovered_scrapes" doc:"successful scrapes after an outage shown as serving again; at least evaluation.interval / scrape.interval"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (ReplicaDownConfig) defaults() ReplicaDownConfig {
	return ReplicaDownConfig{
		Enabled:           true,
		FailuresToPage:    3,
		CrashLoopRestarts: 3,
		CrashLoopWindow:   30 * time.Minute,
		RecoveredScrapes:  4,
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
func (c ReplicaDownConfig) reads() []string {
	// It judges the scrape itself and the pod, never a family.
	return nil
}
func (c ReplicaDownConfig) lookback() time.Duration {
	return c.CrashLoopWindow
}

func (c ReplicaDownConfig) build(env buildEnv) Detector { return &ReplicaDownDetector{cfg: c} }

func (c ReplicaDownConfig) oneShot(lookback time.Duration, samples int) (ReplicaDownConfig, OneShot) {
	// Down means every scrape of the observation failed.
	c.FailuresToPage = max(1, samples)
	return c, OneShot{Judged: true, Note: "judged: down when every scrape failed to reach the server; a crash loop from the pod's restarts"}
}

func (c ReplicaDownConfig) validate(e *configErrors) {
	e.check(c.FailuresToPage >= 1, "failures_to_page", "must be at least 1, got %d", c.FailuresToPage)
	e.check(c.CrashLoopRestarts >= 2, "crash_loop_restarts", "must be at least 2, got %d", c.CrashLoopRestarts)
	e.positiveDuration("crash_loop_window", c.CrashLoopWindow)
	e.check(c.RecoveredScrapes >= 1, "recovered_scrapes", "must be at least 1, got %d", c.RecoveredScrapes)
}

// severities lists what its findings can carry; its runbook describes each.
// The correlation makes a replica of a model whose other replicas still
// serve a warning (correlation.down_critical_share).
func (c ReplicaDownConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: off the chain, a replica down or restarting fails or drops
// what it was serving; a crash/restart (layer process) also explains the
// cold start and the slow first tokens that follow (an empty prefix
// cache, a backlog to drain). Its scrape failure (layer scrape) on a
// target without usable metrics (metrics_blind, a 404) is explained by
// that.
func (c ReplicaDownConfig) position(f Finding) position {
	p := position{explains: []Class{ErrorRate}}
	switch f.Layer {
	case LayerProcess:
		p.explains = append(p.explains, ColdStart, QueueLatency)
	case LayerTransport:
		p.explainedBy = []Class{MetricsBlind}
	}
	return p
}

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c ReplicaDownConfig) doc() doc {
	return doc{
		name:     "Replica down",
		means:    "a replica that served can no longer be reached (refused, timeout, DNS), a crash loop, an evicted pod",
		signals:  "typed scrape failures; counter resets and pod restarts; Kubernetes pod phase, restart count, last termination reason and exit code on the page, and the cause first when the pod's node or warning events name one (NotReady, eviction, image pull, probes). It resolves on the first scrape that answers and says whether the replica came back after a restart",
		settings: "A replica that served and can no longer be reached (refused, timeout, DNS), a crash loop, or an evicted pod: critical. A metrics endpoint that answers unusably is metrics_blind; a replica never reached yet (a rollout's pod loading) is cold_start.",
	}
}
