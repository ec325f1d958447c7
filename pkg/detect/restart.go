package detect

import (
	"fmt"
	"time"
)

// ReplicaRestarted is a restart seen without an outage the watchdog paged:
// the counters started from zero (or the process start time changed)
// between two scrapes that both answered. It is a warning of its own, never
// a continuation of a replica_down page.
const ReplicaRestarted Class = "replica_restarted"

// ReplicaRestartedDetector warns that a replica restarted within the
// look-back while it kept answering its scrapes (a fast restart, or one
// between two scrapes): possibly a crash or an OOM kill nobody noticed. A
// restart inside an outage replica_down paged is told by that page's
// resolve instead; repeated restarts are replica_down's crash loop.
type ReplicaRestartedDetector struct {
	cfg  ReplicaRestartedConfig
	down ReplicaDownConfig
}

// Class implements Detector.
func (d *ReplicaRestartedDetector) Class() Class { return ReplicaRestarted }

// Detect implements Detector.
func (d *ReplicaRestartedDetector) Detect(w Window, now time.Time) []Finding {
	if w.Replica().Kind == KindGPU {
		return nil // a GPU's exporter is no SGLang server: the GPU detectors read it
	}
	st := w.Scrape()
	lr := w.LastRestart()
	if !st.Up || lr.IsZero() || lr.After(now) || now.Sub(lr) > d.cfg.Lookback {
		return nil
	}
	pod := w.Replica().Pod
	crash := ReplicaDownDetector{cfg: d.down}
	if _, loop := crash.crashLoop(w, pod, now); loop && d.down.Enabled {
		return nil // replica_down pages the crash loop
	}
	if o := st.LastOutage; !lr.Before(o.From) && !lr.After(o.To) && crash.paged(o, st, pod) {
		return nil // the restart ended an outage replica_down paged and resolved
	}
	f := finding(ReplicaRestarted, w, Warning, LayerProcess)
	ago := now.Sub(lr)
	f.Evidence = []Evidence{
		{Name: "seconds since the restart", Value: ago.Seconds(), Unit: "s", Threshold: "within " + ShortDuration(d.cfg.Lookback)},
		{Name: "restarts in the look-back", Value: float64(w.Restarts(now.Add(-d.cfg.Lookback), now))},
	}
	podEv, podText := podEvidence(pod, now)
	f.Evidence = append(f.Evidence, podEv...)
	f.Summary = fmt.Sprintf("Replica restarted %s ago without an outage — possible crash/OOM", ShortDuration(ago.Round(time.Second)))
	f.Diagnosis = sentence(
		"Process layer: the server restarted (most counters reset at once, or the process start time changed) while its scrapes kept answering. Unless it was a planned restart, suspect a crash or an OOM kill that the restart policy healed quickly.",
		podText, terminationHint(pod),
		"The radix cache restarted empty: expect a lower hit rate and higher TTFT while it warms up.")
	f.Emergency = []string{
		"Check whether it was a planned restart or rollout; if so, nothing to do.",
		"Find out how it died: kubectl describe pod <pod> (Last State: OOMKilled / Error, exit code, restart count) and kubectl get events.",
		"Read the log of the previous process: kubectl logs <pod> --previous (CUDA out of memory, NCCL errors, tracebacks).",
		"Check the node: dmesg for the OOM killer and GPU Xid errors.",
	}
	f.RootCause = []string{
		"GPU OOM: lower --mem-fraction-static (e.g. 0.85 -> 0.7), reduce --cuda-graph-max-bs, size KV for the real prompt and output lengths.",
		"Host OOM (container memory limit): raise the limit or reduce tokenizer/detokenizer workers.",
	}
	return []Finding{f}
}

// ReplicaRestartedConfig tunes the restart warning.
type ReplicaRestartedConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Lookback: a restart seen within it raises the warning.
	Lookback time.Duration `yaml:"lookback" doc:"a restart within this raises the warning"`
}

func (ReplicaRestartedConfig) defaults() ReplicaRestartedConfig {
	return ReplicaRestartedConfig{Enabled: true, Lookback: 15 * time.Minute}
}

// The methods below make ReplicaRestartedConfig a registry entry (settings,
// in registry.go).
func (c ReplicaRestartedConfig) class() Class                     { return ReplicaRestarted }
func (c ReplicaRestartedConfig) enabled() bool                    { return c.Enabled }
func (c ReplicaRestartedConfig) disabled() ReplicaRestartedConfig { c.Enabled = false; return c }
func (c ReplicaRestartedConfig) usesTriage() bool                 { return false }
func (c ReplicaRestartedConfig) needs() []need                    { return nil }
func (c ReplicaRestartedConfig) lookback() time.Duration          { return c.Lookback }
func (c ReplicaRestartedConfig) reads() []string {
	// Restarts come from the window's reset accounting over these.
	return restartFamilies()
}

func (c ReplicaRestartedConfig) build(env buildEnv) Detector {
	return &ReplicaRestartedDetector{cfg: c, down: env.replicaDown}
}

func (c ReplicaRestartedConfig) oneShot(lookback time.Duration, samples int) (ReplicaRestartedConfig, OneShot) {
	return c, OneShot{Judged: true, Note: "judged only if the restart happened between the scrapes"}
}

func (c ReplicaRestartedConfig) validate(e *configErrors) {
	e.positiveDuration("lookback", c.Lookback)
}

// severities lists what its findings can carry; its runbook describes each.
func (c ReplicaRestartedConfig) severities() []Severity { return []Severity{Warning} }

// position: off the chain, a new process starts cold: an empty prefix
// cache, a warm-up, dropped requests.
func (c ReplicaRestartedConfig) position(Finding) position {
	return position{explains: []Class{ColdStart, QueueLatency, ErrorRate}}
}

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c ReplicaRestartedConfig) doc() doc {
	return doc{
		name:     "Replica restarted",
		means:    "a restart seen without an outage (possible crash/OOM)",
		signals:  "counter resets, process start time",
		settings: "A restart seen without an outage (counters reset): warning.",
	}
}
