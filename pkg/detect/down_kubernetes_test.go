package detect_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// healthyNode is a Ready node without pressure: it explains nothing.
func healthyNode() *series.Node { return &series.Node{Name: "gpu-node-3"} }

// withKube makes the scenario's pod (a healthy Running pod when it has
// none) carry what mod sets from the given elapsed time on.
func withKube(s *scenario, from time.Duration, mod func(p *series.Pod)) {
	prev := s.pod
	s.pod = func(el time.Duration) *series.Pod {
		var p *series.Pod
		if prev != nil {
			p = prev(el)
		} else {
			p = pod(-time.Hour, true, 0)
		}
		if el >= from {
			mod(p)
		}
		return p
	}
}

// startsWith checks the page names the cause first.
func startsWith(t *testing.T, what, text, prefix string) {
	t.Helper()
	if !strings.HasPrefix(text, prefix) {
		t.Errorf("%s does not start with %q:\n%s", what, prefix, text)
	}
}

// A replica whose node went NotReady: the down page names the node and
// since when, and its first step is to cordon and drain it.
func TestReplicaDownNamesNodeNotReady(t *testing.T) {
	s := failingFor(4, series.FailureTimeout, "context deadline exceeded")
	now := start.Add(s.length)
	since := now.Add(-2 * minute)
	withKube(s, s.length-time.Minute, func(p *series.Pod) {
		p.Node = &series.Node{Name: "gpu-node-3", Conditions: []series.NodeCondition{{Type: series.NodeReady, Status: "Unknown",
			Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", Since: since}}}
	})
	f := one(t, run(t, s, detect.ReplicaDown))
	checkCommon(t, f, detect.ReplicaDown)
	startsWith(t, "summary", f.Summary, "Replica down: node gpu-node-3 NotReady since "+since.Format("15:04")+" UTC;")
	startsWith(t, "diagnosis", f.Diagnosis, "Kubernetes: node gpu-node-3 is NotReady (status Unknown")
	contains(t, "diagnosis", f.Diagnosis, "Kubelet stopped posting node status.", "Last error: context deadline exceeded.")
	if strings.Contains(f.Diagnosis, "hung") || strings.Contains(f.Diagnosis, "Kubernetes also reports") {
		t.Errorf("the node's page guesses a hang or repeats the node:\n%s", f.Diagnosis)
	}
	startsWith(t, "first step", f.Emergency[0], "Cordon and drain node gpu-node-3 (kubectl cordon gpu-node-3;")
	if e := evidenceNamed(t, f, "seconds node gpu-node-3 has been NotReady (Unknown)"); e.Value != 120 {
		t.Errorf("node evidence %+v", e)
	}
}

// An evicted pod: the page says why — the node's pressure when it still
// has it, else the kubelet's message — and how to relieve the node.
func TestReplicaDownNamesTheEviction(t *testing.T) {
	evicted := func(mod func(p *series.Pod)) *scenario {
		s := failingFor(4, series.FailurePodFailed, "pod Failed (Evicted): not scraped")
		withKube(s, s.length-15*time.Second, func(p *series.Pod) {
			p.Phase, p.Ready = "Failed", false
			mod(p)
		})
		return s
	}
	t.Run("node under memory pressure", func(t *testing.T) {
		s := evicted(func(p *series.Pod) {
			p.Reason, p.Message = "Evicted", "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi."
			p.Node = &series.Node{Name: "gpu-node-3", Conditions: []series.NodeCondition{{Type: series.NodeMemoryPressure, Status: "True", Since: start.Add(s0(58))}}}
		})
		f := one(t, run(t, s, detect.ReplicaDown))
		contains(t, "summary", f.Summary, "Replica down: pod evicted: node gpu-node-3 has MemoryPressure (pod sglang-0)")
		startsWith(t, "diagnosis", f.Diagnosis, "Kubernetes: the kubelet evicted the pod")
		contains(t, "diagnosis", f.Diagnosis, "The node was low on resource: memory.", "node gpu-node-3 has had MemoryPressure since 13:58 UTC.")
		startsWith(t, "first step", f.Emergency[0], "Check node gpu-node-3")
	})
	t.Run("known from the event only", func(t *testing.T) {
		s := evicted(func(p *series.Pod) {
			p.Events = []series.PodEvent{{Reason: "Evicted", Message: "The node was low on resource: ephemeral-storage. Container sglang was using 80Gi.", Count: 1, Last: start.Add(s0(59))}}
		})
		f := one(t, run(t, s, detect.ReplicaDown))
		contains(t, "summary", f.Summary, "Replica down: pod evicted: The node was low on resource: ephemeral-storage (pod sglang-0)")
		contains(t, "diagnosis", f.Diagnosis, "Container sglang was using 80Gi.")
		if e := evidenceNamed(t, f, "Kubernetes warning events Evicted"); e.Value != 1 {
			t.Errorf("event evidence %+v", e)
		}
	})
}

// s0 is minutes into the default scenario, as an offset from start.
func s0(minutes int) time.Duration { return time.Duration(minutes) * minute }

// neverReached is a pod created a minute before the scenario that no
// scrape reached for 20 minutes: a cold start past its budget.
func neverReached(reason series.ScrapeFailure, text string, mod func(p *series.Pod)) *scenario {
	s := healthyEngine()
	s.length = 20 * minute
	s.failures = []failure{{from: 0, to: s.length, reason: reason, error: text}}
	s.pod = func(time.Duration) *series.Pod {
		p := pod(-time.Minute, false, 0)
		mod(p)
		return p
	}
	return s
}

// A pod the scheduler cannot place: the cold start says so first, with
// the scheduler's message, not "loading"; the placeholder address's DNS
// error is no evidence of anything.
func TestColdStartNamesFailedScheduling(t *testing.T) {
	s := neverReached(series.FailureDNS, "lookup unscheduled-pod.invalid: no such host", func(p *series.Pod) {
		p.Phase = "Pending"
		p.Unschedulable = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu. preemption: 0/8 nodes are available: 8 No preemption victims found."
		p.Events = []series.PodEvent{{Reason: "FailedScheduling", Message: p.Unschedulable, Count: 14, Last: start.Add(19 * minute)}}
	})
	f := one(t, run(t, s, detect.ColdStart))
	startsWith(t, "summary", f.Summary, "Cold start: unschedulable: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu (FailedScheduling ×14); replica was created 21m ago")
	startsWith(t, "diagnosis", f.Diagnosis, "Kubernetes: the scheduler cannot place the pod")
	for _, not := range []string{"unscheduled-pod.invalid", "SGLang listens only once"} {
		if strings.Contains(f.Diagnosis, not) {
			t.Errorf("diagnosis says %q:\n%s", not, f.Diagnosis)
		}
	}
	contains(t, "first step", f.Emergency[0], "scale the GPU node pool up")
	if e := evidenceNamed(t, f, "Kubernetes warning events FailedScheduling"); e.Value != 14 {
		t.Errorf("event evidence %+v", e)
	}
	none(t, run(t, s, detect.ReplicaDown))
}

// An image that cannot be pulled: named with the image, and the steps are
// about the tag and the pull secret.
func TestColdStartNamesImagePullBackOff(t *testing.T) {
	s := neverReached(series.FailureRefused, "connection refused", func(p *series.Pod) {
		p.Waiting, p.Image = "ImagePullBackOff", "lmsysorg/sglang:v9.9-typo"
		p.WaitingMessage = `Back-off pulling image "lmsysorg/sglang:v9.9-typo"`
	})
	f := one(t, run(t, s, detect.ColdStart))
	startsWith(t, "summary", f.Summary, "Cold start: image pull back-off: lmsysorg/sglang:v9.9-typo; replica was created 21m ago and has never answered")
	startsWith(t, "diagnosis", f.Diagnosis, "Kubernetes: the container cannot start because lmsysorg/sglang:v9.9-typo cannot be pulled (ImagePullBackOff)")
	contains(t, "diagnosis", f.Diagnosis, `Back-off pulling image "lmsysorg/sglang:v9.9-typo".`)
	startsWith(t, "first step", f.Emergency[0], "Fix the image reference or its pull secret")
}

// Probes that failed before the container restarted are the cause of a
// start that never finishes, and of a crash loop: fix the probe timings.
// Probes failing without a restart (readiness while the model loads) are
// listed, not named first.
func TestProbeFailuresBeforeARestart(t *testing.T) {
	liveness := "Liveness probe failed: Get \"http://10.1.0.4:30000/health\": dial tcp 10.1.0.4:30000: connect: connection refused"
	t.Run("cold start killed by its liveness probe", func(t *testing.T) {
		s := neverReached(series.FailureRefused, "connection refused", func(p *series.Pod) {
			p.Restarts = 1
			p.LastTermination = series.Termination{Reason: "Error", ExitCode: 137, Finished: start.Add(15 * minute)}
			p.Events = []series.PodEvent{{Reason: "Unhealthy", Message: liveness, Count: 9, Last: start.Add(15 * minute)}}
		})
		f := one(t, run(t, s, detect.ColdStart))
		startsWith(t, "summary", f.Summary, "Cold start: probe failing: Liveness probe failed: Get \"http://10.1.0.4:30000/health\": dial tcp 10.1.0.4:30000: connect: connection refused (Unhealthy ×9);")
		startsWith(t, "first step", f.Emergency[0], "Fix the probe timings against the model's load time")
	})
	t.Run("crash loop of liveness kills", func(t *testing.T) {
		s := neverReached(series.FailureRefused, "connection refused", func(p *series.Pod) {
			p.Restarts, p.Waiting = 4, "CrashLoopBackOff"
			p.LastTermination = series.Termination{Reason: "Error", ExitCode: 137, Finished: start.Add(18 * minute)}
			p.Events = []series.PodEvent{{Reason: "Unhealthy", Message: liveness, Count: 30, Last: start.Add(18 * minute)}}
		})
		f := one(t, run(t, s, detect.ReplicaDown))
		startsWith(t, "summary", f.Summary, "Crash loop: probe failing: Liveness probe failed:")
		contains(t, "summary", f.Summary, "4 restarts in the last 30m")
		startsWith(t, "first step", f.Emergency[0], "Fix the probe timings")
	})
	t.Run("readiness failing while loading, no restart: a fact, not the cause", func(t *testing.T) {
		s := neverReached(series.FailureRefused, "connection refused", func(p *series.Pod) {
			p.Events = []series.PodEvent{{Reason: "Unhealthy", Message: "Readiness probe failed: HTTP probe failed with statuscode: 503", Count: 120, Last: start.Add(19 * minute)}}
		})
		f := one(t, run(t, s, detect.ColdStart))
		startsWith(t, "summary", f.Summary, "Cold start: replica was created 21m ago and has never answered (refused)")
		contains(t, "diagnosis", f.Diagnosis, "Kubernetes reports: Unhealthy ×120 1m ago: Readiness probe failed: HTTP probe failed with statuscode: 503.")
	})
}

// What Kubernetes says names a cause only when it is one now: an old event
// (outside the detector's range), a healthy node and a pod without events
// leave the page exactly as it is without Kubernetes data.
func TestKubernetesDataThatExplainsNothing(t *testing.T) {
	page := func(f detect.Finding) []any {
		return []any{f.Summary, f.Diagnosis, f.Emergency, f.Evidence, f.Severity, f.Layer}
	}
	t.Run("down: healthy node, no events", func(t *testing.T) {
		plain := one(t, run(t, failingFor(4, series.FailureRefused, "connection refused"), detect.ReplicaDown))
		s := failingFor(4, series.FailureRefused, "connection refused")
		withKube(s, 0, func(p *series.Pod) { p.Node = healthyNode() })
		ref := failingFor(4, series.FailureRefused, "connection refused")
		withKube(ref, 0, func(*series.Pod) {})
		if got, want := page(one(t, run(t, s, detect.ReplicaDown))), page(one(t, run(t, ref, detect.ReplicaDown))); !reflect.DeepEqual(got, want) {
			t.Errorf("a healthy node changed the page:\n got %v\nwant %v", got, want)
		}
		// A static target: no pod, no Kubernetes sentence.
		if strings.Contains(plain.Summary+plain.Diagnosis, "Kubernetes") || strings.Contains(plain.Diagnosis, "Pod ") {
			t.Errorf("static target's page mentions Kubernetes: %s %s", plain.Summary, plain.Diagnosis)
		}
	})
	t.Run("cold start: probe kills and a mount failure an hour old", func(t *testing.T) {
		old := start.Add(-time.Hour)
		mod := func(p *series.Pod) {
			p.Restarts = 1
			p.LastTermination = series.Termination{Reason: "Error", ExitCode: 137, Finished: old}
		}
		s := neverReached(series.FailureRefused, "connection refused", func(p *series.Pod) {
			mod(p)
			p.Node = healthyNode()
			p.Events = []series.PodEvent{
				{Reason: "Unhealthy", Message: "Liveness probe failed: connection refused", Count: 9, Last: old},
				{Reason: "FailedMount", Message: "MountVolume.SetUp failed for volume \"models\"", Count: 3, Last: old},
			}
		})
		ref := neverReached(series.FailureRefused, "connection refused", mod)
		got, want := one(t, run(t, s, detect.ColdStart)), one(t, run(t, ref, detect.ColdStart))
		if !reflect.DeepEqual(page(got), page(want)) {
			t.Errorf("old events changed the page:\n got %v\nwant %v", page(got), page(want))
		}
		for _, not := range []string{"probe failing", "Liveness", "FailedMount"} {
			if strings.Contains(got.Summary+got.Diagnosis, not) {
				t.Errorf("page names an hour-old %q: %s %s", not, got.Summary, got.Diagnosis)
			}
		}
	})
	t.Run("a cordoned healthy node is a fact, not the cause", func(t *testing.T) {
		s := failingFor(4, series.FailureRefused, "connection refused")
		withKube(s, 0, func(p *series.Pod) { p.Node = &series.Node{Name: "gpu-node-3", Cordoned: true} })
		f := one(t, run(t, s, detect.ReplicaDown))
		startsWith(t, "summary", f.Summary, "Replica down: 4 consecutive scrapes failed (refused)")
		contains(t, "diagnosis", f.Diagnosis, "Kubernetes reports: node gpu-node-3 cordoned.")
	})
	t.Run("healthy replicas do not page", func(t *testing.T) {
		s := healthyEngine()
		withKube(s, 0, func(p *series.Pod) {
			p.Node = &series.Node{Name: "gpu-node-3", Cordoned: true}
			p.Events = []series.PodEvent{{Reason: "Unhealthy", Message: "Readiness probe failed: timeout", Count: 2, Last: start.Add(s.length - minute)}}
		})
		none(t, run(t, s, detect.ReplicaDown))
		none(t, run(t, s, detect.ColdStart))
	})
}
