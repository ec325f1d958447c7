package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// failingFor makes the last n scrapes of a healthy replica fail.
func failingFor(n int, reason series.ScrapeFailure, text string) *scenario {
	s := healthyEngine()
	s.failures = []failure{{from: s.length - time.Duration(n-1)*s.step, to: s.length, reason: reason, error: text}}
	return s
}

// Only a server that cannot be reached at all (refused, timeout, DNS) is
// down; its page names the reason and the layer.
func TestReplicaDownScrapeFailures(t *testing.T) {
	tests := []struct {
		reason    series.ScrapeFailure
		text      string
		layer     detect.Layer
		diagnosis string
	}{
		{series.FailureRefused, "dial tcp 10.0.0.7:30000: connect: connection refused", detect.LayerProcess, "OOM-killed"},
		{series.FailureTimeout, "context deadline exceeded", detect.LayerProcess, "hung"},
		{series.FailureDNS, "lookup sglang-0: no such host", detect.LayerTransport, "no longer resolves"},
	}
	for _, tt := range tests {
		t.Run(string(tt.reason), func(t *testing.T) {
			f := one(t, run(t, failingFor(4, tt.reason, tt.text), detect.ReplicaDown))
			checkCommon(t, f, detect.ReplicaDown)
			if f.Severity != detect.Critical || f.Layer != tt.layer || f.Resolving {
				t.Errorf("severity %s layer %s resolving %v; want critical %s", f.Severity, f.Layer, f.Resolving, tt.layer)
			}
			if e := evidenceNamed(t, f, "consecutive failed scrapes"); e.Value != 4 {
				t.Errorf("failures evidence = %+v", e)
			}
			// Last success: the scrape before the four failures, 20 s ago.
			if e := evidenceNamed(t, f, "seconds since last successful scrape"); e.Value != 20 {
				t.Errorf("last success evidence = %+v", e)
			}
			contains(t, "diagnosis", f.Diagnosis, tt.diagnosis, tt.text)
			contains(t, "summary", f.Summary, string(tt.reason))
			none(t, run(t, failingFor(4, tt.reason, tt.text), detect.MetricsBlind))
		})
	}
}

// A metrics endpoint that answers unusably (an HTTP error, an HTML login
// page, a truncated or oversized exposition, a redirect elsewhere) while
// the server itself serves is never a critical replica_down: it is a
// metrics_blind warning naming what /metrics answered and which detectors
// are blind. A 500 that persists stays a warning, with its status.
func TestBrokenMetricsEndpointOnAHealthyServerDoesNotPage(t *testing.T) {
	tests := []struct {
		name   string
		reason series.ScrapeFailure
		status int
		text   string
		want   []string // in the summary or diagnosis
	}{
		{"404", series.FailureHTTPStatus, 404, "HTTP 404 Not Found", []string{"HTTP 404", "--enable-metrics"}},
		{"500 for an hour", series.FailureHTTPStatus, 500, "HTTP 500 Internal Server Error", []string{"HTTP 500", "metrics handler"}},
		{"502 from a proxy", series.FailureHTTPStatus, 502, "HTTP 502 Bad Gateway", []string{"HTTP 502", "proxy"}},
		{"403", series.FailureHTTPStatus, 403, "HTTP 403 Forbidden", []string{"HTTP 403", "authenticating proxy"}},
		{"HTML login page", series.FailureNotMetrics, 200, "HTTP 200 with an HTML page instead of metrics", []string{"an HTML page", "login"}},
		{"truncated exposition", series.FailureParse, 200, "exposition truncated: unexpected EOF", []string{"unreadable exposition", "truncated"}},
		{"over the series limit", series.FailureTooManySeries, 200, "more than 20000 series", []string{"limits", "fan-out"}},
		{"redirect to a login host", series.FailureRedirect, 0, "redirect refused: to another host https://sso.example.com", []string{"redirect to another host"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := healthyEngine()
			s.failures = []failure{{from: 5 * minute, to: s.length, reason: tt.reason, status: tt.status, error: tt.text}}
			s.pod = func(time.Duration) *series.Pod { return pod(-time.Hour, true, 0) }
			for _, c := range []detect.Class{detect.ReplicaDown, detect.ReplicaRestarted, detect.ColdStart, detect.EngineHang} {
				none(t, run(t, s, c))
			}
			f := one(t, run(t, s, detect.MetricsBlind))
			checkCommon(t, f, detect.MetricsBlind)
			if f.Severity != detect.Warning || f.Layer != detect.LayerTransport {
				t.Errorf("severity %s layer %s; want warning scrape", f.Severity, f.Layer)
			}
			contains(t, "page", f.Summary+" "+f.Diagnosis, append(tt.want, "preempt_storm", "engine_hang", tt.text, "Pod llm/sglang-0: phase Running, Ready")...)
			if tt.status != 0 {
				if e := evidenceNamed(t, f, "HTTP status of /metrics"); e.Value != float64(tt.status) {
					t.Errorf("status evidence %+v, want %d", e, tt.status)
				}
			}
		})
	}
}

// A replica that was never reached (a rollout's new pod loading its
// weights, a target added while its server starts) is cold_start's: silent
// within the startup budget, a warning after it, never a critical page.
func TestNeverReachableIsAColdStartNotAnOutage(t *testing.T) {
	refusing := func(length time.Duration) *scenario {
		s := healthyEngine()
		s.length = length
		s.failures = []failure{{from: 0, to: s.length, reason: series.FailureRefused, error: "connection refused"}}
		return s
	}
	for _, c := range []detect.Class{detect.ReplicaDown, detect.ColdStart, detect.MetricsBlind} {
		none(t, run(t, refusing(14*minute), c))
	}
	s := refusing(65 * minute)
	none(t, run(t, s, detect.ReplicaDown))
	f := one(t, run(t, s, detect.ColdStart))
	if f.Severity != detect.Warning || f.Layer != detect.LayerProcess {
		t.Errorf("cold start %s %s, want a warning", f.Severity, f.Layer)
	}
	if f.Model != "" {
		t.Errorf("model %q for a replica never scraped", f.Model)
	}
	contains(t, "summary", f.Summary, "was first seen 1h5m ago", "never answered (refused)")
	contains(t, "diagnosis", f.Diagnosis, "startup budget of 15m", "weights")
	// Metric detectors have nothing to say about a replica without data.
	for _, c := range []detect.Class{detect.PreemptStorm, detect.RetryAvalanche, detect.CacheCollapse} {
		none(t, run(t, s, c))
	}
}

// restartedAfterOutage: the replica serves, then refuses from 60 minutes
// for downFor, and answers again at the end of the scenario (the last
// scrape is the first that answers); restarted: its counters start from
// zero then.
func restartedAfterOutage(downFor time.Duration, restarted bool) *scenario {
	s := healthyEngine()
	s.failures = []failure{{from: 60 * minute, to: 60*minute + downFor, reason: series.FailureRefused, error: "connection refused"}}
	s.length = 60*minute + downFor + s.step
	if restarted {
		s.restarts = []time.Duration{s.length}
	}
	return s
}

// A replica that crashed and came back: replica_down resolves on the first
// scrape it answers, saying it came back after a restart and where to
// look; one scrape later it says nothing (the incident is over, not held
// for a restart look-back); no separate restart warning repeats it.
func TestReplicaDownResolvesWhenTheReplicaServesAgain(t *testing.T) {
	s := restartedAfterOutage(3*minute, true)
	during := *s
	during.length, during.restarts = s.length-s.step, nil
	if f := one(t, run(t, &during, detect.ReplicaDown)); f.Severity != detect.Critical || f.Resolving {
		t.Errorf("during the outage: %s resolving %v, want a critical page", f.Severity, f.Resolving)
	}
	f := one(t, run(t, s, detect.ReplicaDown))
	checkCommon(t, f, detect.ReplicaDown)
	if !f.Resolving || f.Severity != detect.Critical {
		t.Errorf("first answering scrape: resolving %v severity %s, want a resolving critical finding", f.Resolving, f.Severity)
	}
	contains(t, "summary", f.Summary, "serves again after 3m5s down", "came back after a restart", "crash/OOM")
	contains(t, "steps", strings.Join(f.Emergency, " "), "kubectl describe pod", "--previous", "dmesg")
	// From the first failed scrape to the first answered one.
	if e := evidenceNamed(t, f, "seconds down"); e.Value != 185 {
		t.Errorf("downtime evidence %+v", e)
	}
	none(t, run(t, s, detect.ReplicaRestarted))

	// A round may come a few scrapes after the first that answered: it
	// still says the replica serves again, up to recovered_scrapes (4)
	// answered scrapes; after that the finding is gone.
	for extra := 1; extra <= 4; extra++ {
		later := restartedAfterOutage(3*minute, true)
		first := later.length
		later.length += time.Duration(extra) * later.step
		later.restarts = []time.Duration{first}
		got := run(t, later, detect.ReplicaDown)
		if extra < 4 {
			if f := one(t, got); !strings.Contains(f.Summary, "serves again after 3m5s down") {
				t.Errorf("%d scrapes after the first that answered: %q, want it serving again", extra, f.Summary)
			}
		} else {
			none(t, got)
		}
		none(t, run(t, later, detect.ReplicaRestarted))
	}

	back := one(t, run(t, restartedAfterOutage(3*minute, false), detect.ReplicaDown))
	if !back.Resolving {
		t.Error("recovery without a restart is not resolving")
	}
	contains(t, "summary", back.Summary, "without a restart")
}

// A restart seen without downtime is its own warning, never a
// replica_down page; a crash loop still pages critical.
func TestReplicaRestarts(t *testing.T) {
	t.Run("one restart: replica_restarted warning", func(t *testing.T) {
		s := healthyEngine()
		s.restarts = []time.Duration{55 * minute}
		none(t, run(t, s, detect.ReplicaDown))
		f := one(t, run(t, s, detect.ReplicaRestarted))
		if f.Class != detect.ReplicaRestarted || f.Severity != detect.Warning || f.Layer != detect.LayerProcess {
			t.Errorf("finding = %s %s %s", f.Class, f.Severity, f.Layer)
		}
		contains(t, "summary", f.Summary, "restarted 10m ago", "without an outage")
		if e := evidenceNamed(t, f, "seconds since the restart"); e.Value != 600 {
			t.Errorf("restart age evidence = %+v", e)
		}
		contains(t, "steps", strings.Join(f.Emergency, " "), "OOMKilled", "--previous")
	})
	t.Run("restart long ago", func(t *testing.T) {
		s := healthyEngine()
		s.restarts = []time.Duration{30 * minute}
		none(t, run(t, s, detect.ReplicaRestarted))
	})
	t.Run("crash loop: critical", func(t *testing.T) {
		s := healthyEngine()
		s.restarts = []time.Duration{40 * minute, 50 * minute, 60 * minute}
		// Down for a few scrapes around each restart, as a crashing pod is.
		for _, r := range s.restarts {
			s.failures = append(s.failures, failure{from: r - 20*time.Second, to: r - 5*time.Second, reason: series.FailureRefused, error: "connection refused"})
		}
		f := one(t, run(t, s, detect.ReplicaDown))
		if f.Severity != detect.Critical || !strings.Contains(f.Summary, "Crash loop: 3 restarts") {
			t.Errorf("finding = %s %s", f.Severity, f.Summary)
		}
		if e := evidenceNamed(t, f, "restarts in crash-loop window"); e.Value != 3 {
			t.Errorf("restart count evidence = %+v", e)
		}
		none(t, run(t, s, detect.ReplicaRestarted))
	})
}

// pod is a Kubernetes pod status created at created (elapsed).
func pod(created time.Duration, ready bool, restarts int) *series.Pod {
	return &series.Pod{Namespace: "llm", Name: "sglang-0", Phase: "Running", Ready: ready, Created: start.Add(created), Restarts: restarts}
}

// With Kubernetes discovery the pod's status decides between starting,
// crashed, crash-looping and gone, and the page carries it.
func TestReplicaDownWithPodStatus(t *testing.T) {
	t.Run("rollout: new pod loading, not Ready", func(t *testing.T) {
		s := healthyEngine()
		s.length = 10 * minute
		s.failures = []failure{{from: 0, to: s.length, reason: series.FailureRefused, error: "connection refused"}}
		s.pod = func(time.Duration) *series.Pod { return pod(-time.Minute, false, 0) }
		for _, c := range []detect.Class{detect.ReplicaDown, detect.ColdStart, detect.MetricsBlind} {
			none(t, run(t, s, c))
		}
		s.length = 20 * minute
		s.failures[0].to = s.length
		f := one(t, run(t, s, detect.ColdStart))
		contains(t, "cold start", f.Summary+" "+f.Diagnosis, "was created 21m ago", "Pod llm/sglang-0: phase Running", "not Ready", "0 restarts")
		none(t, run(t, s, detect.ReplicaDown))
	})
	t.Run("replaced under the same name (StatefulSet)", func(t *testing.T) {
		s := healthyEngine()
		s.failures = []failure{{from: 50 * minute, to: s.length, reason: series.FailureRefused, error: "connection refused"}}
		s.pod = func(el time.Duration) *series.Pod {
			if el < 50*minute {
				return pod(-time.Hour, true, 0)
			}
			return pod(50*minute, false, 0)
		}
		none(t, run(t, s, detect.ReplicaDown))
		f := one(t, run(t, s, detect.ColdStart))
		contains(t, "cold start", f.Summary, "was created 15m ago")
		// When the replacement serves, there is no outage to resolve.
		s.length += s.step
		s.failures[0].to = s.length - s.step
		none(t, run(t, s, detect.ReplicaDown))
	})
	t.Run("served, then OOM-killed: down with the termination", func(t *testing.T) {
		s := failingFor(6, series.FailureRefused, "connection refused")
		s.pod = func(el time.Duration) *series.Pod {
			p := pod(-time.Hour, el < s.length-30*time.Second, 0)
			if el >= s.length-30*time.Second {
				p.Restarts = 1
				p.LastTermination = series.Termination{Reason: "OOMKilled", ExitCode: 137, Finished: start.Add(s.length - 30*time.Second)}
			}
			return p
		}
		f := one(t, run(t, s, detect.ReplicaDown))
		if f.Severity != detect.Critical || f.Resolving {
			t.Errorf("severity %s resolving %v", f.Severity, f.Resolving)
		}
		contains(t, "diagnosis", f.Diagnosis, "last termination OOMKilled, exit code 137", "OOM-killed (host memory")
		if e := evidenceNamed(t, f, "pod restarts"); e.Value != 1 {
			t.Errorf("restart evidence %+v", e)
		}
	})
	t.Run("crash loop while loading: critical although never reached", func(t *testing.T) {
		s := healthyEngine()
		s.length = 10 * minute
		s.failures = []failure{{from: 0, to: s.length, reason: series.FailureRefused, error: "connection refused"}}
		s.pod = func(time.Duration) *series.Pod {
			p := pod(-time.Minute, false, 4)
			p.Waiting = "CrashLoopBackOff"
			p.LastTermination = series.Termination{Reason: "Error", ExitCode: 1, Finished: start.Add(9 * minute)}
			return p
		}
		f := one(t, run(t, s, detect.ReplicaDown))
		if f.Severity != detect.Critical || !strings.Contains(f.Summary, "Crash loop: 4 restarts") {
			t.Errorf("finding %s %s", f.Severity, f.Summary)
		}
		contains(t, "diagnosis", f.Diagnosis, "waiting: CrashLoopBackOff", "last termination Error, exit code 1", "kubectl logs --previous")
	})
	t.Run("restart count climbing while loading: critical", func(t *testing.T) {
		s := healthyEngine()
		s.length = 20 * minute
		s.failures = []failure{{from: 0, to: s.length, reason: series.FailureRefused, error: "connection refused"}}
		s.pod = func(el time.Duration) *series.Pod {
			// OOM-killed while loading every 5 minutes; never in back-off
			// at the moment of a scrape that matters.
			n := int(el / (5 * minute))
			p := pod(-time.Minute, false, n)
			if n > 0 {
				p.LastTermination = series.Termination{Reason: "OOMKilled", ExitCode: 137, Finished: start.Add(time.Duration(n) * 5 * minute)}
			}
			return p
		}
		f := one(t, run(t, s, detect.ReplicaDown))
		if f.Severity != detect.Critical || !strings.Contains(f.Summary, "Crash loop: 4 restarts") {
			t.Errorf("finding %s %s", f.Severity, f.Summary)
		}
	})
	t.Run("old restarts and one new crash: down, not a loop", func(t *testing.T) {
		s := failingFor(6, series.FailureRefused, "connection refused")
		s.pod = func(el time.Duration) *series.Pod {
			if el < s.length-30*time.Second {
				return pod(-7*24*time.Hour, true, 7) // restarted 7 times last week
			}
			p := pod(-7*24*time.Hour, false, 8)
			p.LastTermination = series.Termination{Reason: "Error", ExitCode: 139, Finished: start.Add(s.length - 30*time.Second)}
			return p
		}
		f := one(t, run(t, s, detect.ReplicaDown))
		contains(t, "summary", f.Summary, "Replica down")
		contains(t, "diagnosis", f.Diagnosis, "segmentation fault")
	})
	t.Run("one crash while loading is not yet a loop", func(t *testing.T) {
		s := healthyEngine()
		s.length = 10 * minute
		s.failures = []failure{{from: 0, to: s.length, reason: series.FailureRefused, error: "connection refused"}}
		s.pod = func(time.Duration) *series.Pod {
			p := pod(-time.Minute, false, 1)
			p.LastTermination = series.Termination{Reason: "Error", ExitCode: 1, Finished: start.Add(9 * minute)}
			return p
		}
		none(t, run(t, s, detect.ReplicaDown))
	})
	t.Run("evicted: an outage, not a scale-down", func(t *testing.T) {
		s := failingFor(4, series.FailurePodFailed, "pod Failed (Evicted): not scraped")
		s.pod = func(el time.Duration) *series.Pod {
			if el < s.length-15*time.Second {
				return pod(-time.Hour, true, 0)
			}
			p := pod(-time.Hour, false, 0)
			p.Phase, p.Reason, p.Message = "Failed", "Evicted", "The node was low on resource: memory."
			return p
		}
		f := one(t, run(t, s, detect.ReplicaDown))
		checkCommon(t, f, detect.ReplicaDown)
		if f.Severity != detect.Critical {
			t.Errorf("severity %s", f.Severity)
		}
		contains(t, "page", f.Summary+" "+f.Diagnosis, "Evicted", "The node was low on resource: memory.", "replacement")
		none(t, run(t, s, detect.ColdStart))
		none(t, run(t, s, detect.MetricsBlind))
	})
}

func TestReplicaDownDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", healthyEngine()},
		{"two failed scrapes", failingFor(2, series.FailureTimeout, "context deadline exceeded")},
		{"recovered after failures", func() *scenario {
			s := healthyEngine()
			s.failures = []failure{{from: 60 * minute, to: 62 * minute, reason: series.FailureTimeout}}
			return s
		}()},
		{"restart long ago", func() *scenario {
			s := healthyEngine()
			s.restarts = []time.Duration{30 * minute}
			return s
		}()},
		// One counter going backwards (a glitch, a relabelled series) is not
		// a restart: most counters did not drop.
		{"one counter drops", healthyEngine().with(
			counter(series.NumAbortedRequestsTotal, constant(0.01)).corrupted(func(el time.Duration) (float64, bool) {
				return 1, el >= incident
			}))},
		{"healthy heavy load", healthyEngine().with(gauge(series.NumRunningReqs, constant(256)), gauge(series.NumQueueReqs, constant(5)))},
		{"missing series", newScenario()},
		{"NaN/Inf samples", healthyEngine().with(
			counter(series.NumRequestsTotal, constant(10)).corrupted(every(2, math.NaN())),
			counter(series.PromptTokensTotal, constant(10000)).corrupted(every(3, math.Inf(-1))),
			counter(series.EvictedTokensTotal, constant(500), "cache_type", "RadixCache").corrupted(every(5, 0)),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.ReplicaDown))
		})
	}
}

// ReplicaDown's golden page (checkPage).
func TestGoldenPageEventsReplicaDown(t *testing.T) {
	checkPage(t, pageCase{class: detect.ReplicaDown, scenario: failingFor(4, "refused", "dial tcp 10.0.0.7:30000: connect: connection refused")})
}

// A /metrics that times out on a server whose health probe still answers
// is no evidence the replica is down: it is metrics_blind's warning. With
// the probe failing too, the replica is down.
func TestMetricsTimeoutWithAnsweringProbeIsNotAReplicaDown(t *testing.T) {
	probed := func(up bool) *scenario {
		s := failingFor(4, series.FailureTimeout, "context deadline exceeded")
		s.failures[0].probeUp = &up
		return s
	}
	answering := probed(true)
	none(t, run(t, answering, detect.ReplicaDown))
	f := one(t, run(t, answering, detect.MetricsBlind))
	contains(t, "page", f.Summary+" "+f.Diagnosis, "scrape timeout", "health probe")

	silent := probed(false)
	if f := one(t, run(t, silent, detect.ReplicaDown)); f.Severity != detect.Critical {
		t.Errorf("probe failing too: %s, want a critical replica_down", f.Severity)
	}
	none(t, run(t, silent, detect.MetricsBlind))
}
