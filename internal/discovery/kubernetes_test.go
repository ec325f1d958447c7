package discovery

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// sglangLabels are the labels of an SGLang pod of the test fleet.
func sglangLabels(model, role string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "sglang", "model": model, "role": role, "pod-template-hash": "7d9f"}
}

// newPod is a Running SGLang pod declaring ports http (30000) and metrics
// (9400).
func newPod(ns, name, ip string, ready bool, labels map[string]string) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "sglang",
			Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 30000, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", ContainerPort: 9400},
			},
		}}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
		},
	}
}

func create(t *testing.T, cs *fake.Clientset, p *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mutate(t *testing.T, cs *fake.Clientset, ns, name string, fn func(p *corev1.Pod)) {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fn(p)
	if _, err := cs.CoreV1().Pods(ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, cs *fake.Clientset, ns, name string) {
	t.Helper()
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setReady(ready bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		if ready {
			p.Status.Conditions[0].Status = corev1.ConditionTrue
		}
	}
}

func kubeConfig(mod func(k *KubernetesConfig)) Config {
	k := &KubernetesConfig{Namespaces: []string{"llm"}, LabelSelector: "app.kubernetes.io/name=sglang"}
	if mod != nil {
		mod(k)
	}
	return Config{Kubernetes: k}
}

// The lifecycle of issue 5's acceptance: pods added, becoming Ready,
// relabelled, deleted; pods elsewhere ignored.
func TestKubernetesPodLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(
			newPod("llm", "sglang-a", "10.1.0.1", true, sglangLabels("llama-3-70b", "decode")),
			newPod("prod", "sglang-x", "10.9.0.1", true, sglangLabels("llama-3-70b", "decode")), // other namespace
			newPod("llm", "redis-0", "10.1.0.9", true, map[string]string{"app.kubernetes.io/name": "redis"}),
		)
		h := newHarness(t, kubeConfig(nil), nil, cs, nil)
		start := time.Now()
		h.start(t)

		u := h.next(t)
		if u.at != start {
			t.Errorf("first update after %v, want as soon as the caches synced", u.at.Sub(start))
		}
		wantNames(t, u.targets, "llm.sglang-a")
		a := u.targets[0]
		if a.URL != "http://10.1.0.1:30000/metrics" || a.Kind != scrape.KindEngine {
			t.Errorf("target %+v", a)
		}
		// The default copy_labels and the namespace, not the rest (pod-template-hash).
		if want := map[string]string{"app.kubernetes.io/name": "sglang", "model": "llama-3-70b", "role": "decode", "namespace": "llm"}; !maps.Equal(a.Labels, want) {
			t.Errorf("labels %v, want %v", a.Labels, want)
		}

		// A cold start: scheduled, has an IP, not Ready yet. It is a target
		// at once, so a replica that never becomes Ready is seen.
		create(t, cs, newPod("llm", "sglang-b", "10.1.0.2", false, sglangLabels("llama-3-70b", "prefill")))
		u = h.next(t)
		wantNames(t, u.targets, "llm.sglang-a", "llm.sglang-b")
		if got := u.at.Sub(start); got != DefaultMinUpdateInterval {
			t.Errorf("change published after %v, want %v", got, DefaultMinUpdateInterval)
		}

		// A pod without an IP yet cannot be scraped; it joins with its IP.
		create(t, cs, newPod("llm", "sglang-c", "", false, sglangLabels("qwen-2.5-72b", "decode")))
		h.none(t, 10*time.Second)
		mutate(t, cs, "llm", "sglang-c", func(p *corev1.Pod) { p.Status.PodIP = "10.1.0.3" })
		wantNames(t, h.next(t).targets, "llm.sglang-a", "llm.sglang-b", "llm.sglang-c")

		// The pod status rides on the target: a new pod is not Ready and
		// has not restarted.
		if b := find(t, u.targets, "llm.sglang-b").Pod; b == nil || b.Ready || b.Restarts != 0 || b.Phase != "Running" || b.Name != "sglang-b" {
			t.Errorf("pod status of the starting pod: %+v", b)
		}
		// Becoming Ready, and a restart after an OOM kill, are published
		// (the scraper takes a status change without restarting the
		// loop); probe churn that changes nothing the detectors read is not.
		mutate(t, cs, "llm", "sglang-b", setReady(true))
		if b := find(t, h.next(t).targets, "llm.sglang-b").Pod; b == nil || !b.Ready {
			t.Errorf("pod status after Ready: %+v", b)
		}
		oom := time.Now().Add(-time.Minute).Truncate(time.Second)
		mutate(t, cs, "llm", "sglang-b", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", RestartCount: 3,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					Reason: "OOMKilled", ExitCode: 137, FinishedAt: metav1.NewTime(oom)}},
			}}
		})
		b := find(t, h.next(t).targets, "llm.sglang-b").Pod
		if want := (series.Termination{Reason: "OOMKilled", ExitCode: 137, Finished: oom}); b == nil || b.Restarts != 3 ||
			b.Waiting != "CrashLoopBackOff" || !b.LastTermination.Finished.Equal(oom) || b.LastTermination.Reason != want.Reason || b.LastTermination.ExitCode != want.ExitCode {
			t.Errorf("pod status after the OOM kill: %+v, want 3 restarts, CrashLoopBackOff, last termination %+v", b, want)
		}
		mutate(t, cs, "llm", "sglang-b", func(p *corev1.Pod) {
			p.Status.Conditions[0].LastProbeTime = metav1.NewTime(time.Now())
		})
		h.none(t, 10*time.Second)

		// A copied label changed: the target is updated with it.
		mutate(t, cs, "llm", "sglang-b", func(p *corev1.Pod) { p.Labels["role"] = "decode" })
		u = h.next(t)
		if got := find(t, u.targets, "llm.sglang-b").Labels["role"]; got != "decode" {
			t.Errorf("role = %q after relabel", got)
		}

		// Relabelled out of the selector: removed.
		prev := u.targets
		mutate(t, cs, "llm", "sglang-c", func(p *corev1.Pod) { p.Labels["app.kubernetes.io/name"] = "sglang-debug" })
		u = h.next(t)
		wantNames(t, u.targets, "llm.sglang-a", "llm.sglang-b")
		if gone := Removed(prev, u.targets); !slices.Equal(gone, []string{"llm.sglang-c"}) {
			t.Errorf("Removed = %q", gone)
		}

		// Deleted: removed, and Removed names it for retirement.
		prev = u.targets
		remove(t, cs, "llm", "sglang-a")
		u = h.next(t)
		wantNames(t, u.targets, "llm.sglang-b")
		if gone := Removed(prev, u.targets); !slices.Equal(gone, []string{"llm.sglang-a"}) {
			t.Errorf("Removed = %q", gone)
		}

		// A scale-down: the pod is terminating (deletionTimestamp set)
		// while it drains. It is dropped at once, before it stops
		// answering, so its shutdown pages nobody.
		mutate(t, cs, "llm", "sglang-b", func(p *corev1.Pod) {
			now := metav1.NewTime(time.Now())
			p.DeletionTimestamp = &now
		})
		wantNames(t, h.next(t).targets)

		// Completed pods are not targets.
		done := newPod("llm", "sglang-e", "10.1.0.5", false, sglangLabels("llama-3-70b", "decode"))
		done.Status.Phase = corev1.PodSucceeded
		create(t, cs, done)
		create(t, cs, newPod("prod", "sglang-y", "10.9.0.2", true, sglangLabels("llama-3-70b", "decode")))
		h.none(t, 10*time.Second)

		// An evicted pod is an outage, not a scale-down: it stays a target,
		// marked failed, at an address that can never be scraped (its IP
		// may already be another pod's).
		evicted := newPod("llm", "sglang-d", "10.1.0.4", false, sglangLabels("llama-3-70b", "decode"))
		evicted.Status.Phase = corev1.PodFailed
		evicted.Status.Reason = "Evicted"
		evicted.Status.Message = "The node was low on resource: memory."
		create(t, cs, evicted)
		d := find(t, h.next(t).targets, "llm.sglang-d")
		if d.Pod == nil || d.Pod.Phase != "Failed" || d.Pod.Reason != "Evicted" || strings.Contains(d.URL, "10.1.0.4") {
			t.Errorf("evicted pod target %+v pod %+v", d, d.Pod)
		}

		if got := testutil.ToFloat64(h.d.metrics.updates); got != 10 {
			t.Errorf("watchdog_discovery_updates_total = %v, want 10", got)
		}
	})
}

func TestKubernetesExcludeNotReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(newPod("llm", "sglang-a", "10.1.0.1", false, sglangLabels("m", "decode")))
		no := false
		h := newHarness(t, kubeConfig(func(k *KubernetesConfig) { k.IncludeNotReady = &no }), nil, cs, nil)
		h.start(t)
		wantNames(t, h.next(t).targets)

		mutate(t, cs, "llm", "sglang-a", setReady(true))
		wantNames(t, h.next(t).targets, "llm.sglang-a")
		mutate(t, cs, "llm", "sglang-a", setReady(false))
		wantNames(t, h.next(t).targets)
	})
}

// A port given by name is looked up in the pod's container ports; a pod
// that does not declare it is skipped with one warning, not one per pass.
func TestKubernetesNamedPort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bare := newPod("llm", "sglang-bare", "10.1.0.2", true, sglangLabels("m", "decode"))
		bare.Spec.Containers[0].Ports = nil
		cs := fake.NewClientset(newPod("llm", "sglang-a", "10.1.0.1", true, sglangLabels("m", "decode")), bare)
		h := newHarness(t, kubeConfig(func(k *KubernetesConfig) { k.Port = "metrics"; k.Path = "/stats"; k.Scheme = "https" }), nil, cs, nil)
		h.start(t)

		u := h.next(t)
		wantNames(t, u.targets, "llm.sglang-a")
		if got := u.targets[0].URL; got != "https://10.1.0.1:9400/stats" {
			t.Errorf("URL %s", got)
		}
		// More passes over the cache: still one warning for the bare pod.
		create(t, cs, newPod("llm", "sglang-b", "10.1.0.3", true, sglangLabels("m", "decode")))
		wantNames(t, h.next(t).targets, "llm.sglang-a", "llm.sglang-b")
		remove(t, cs, "llm", "sglang-b")
		wantNames(t, h.next(t).targets, "llm.sglang-a")
		if n := h.logs.FilterMessage("pod is not a target").FilterField(zap.String("pod", "llm.sglang-bare")).Len(); n != 1 {
			t.Errorf("%d warnings for the pod without the port, want 1", n)
		}

		// It declares the port in a new revision: it joins.
		mutate(t, cs, "llm", "sglang-bare", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9500}}
		})
		u = h.next(t)
		if got := find(t, u.targets, "llm.sglang-bare").URL; got != "https://10.1.0.2:9500/stats" {
			t.Errorf("URL %s", got)
		}
	})
}

// model_label names the pod label that carries the model when it is not
// "model"; it becomes the target's "model" label (the replica's model and
// the shard key).
func TestKubernetesModelLabel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ls := map[string]string{"app.kubernetes.io/name": "sglang", "sglang.ai/model": "deepseek-v3", "model": "stale"}
		cs := fake.NewClientset(newPod("llm", "sglang-a", "10.1.0.1", true, ls))
		h := newHarness(t, kubeConfig(func(k *KubernetesConfig) { k.ModelLabel = "sglang.ai/model"; k.CopyLabels = []string{} }), nil, cs, nil)
		h.start(t)
		u := h.next(t)
		if got := u.targets[0].Labels; !maps.Equal(got, map[string]string{LabelModel: "deepseek-v3", LabelNamespace: "llm"}) {
			t.Errorf("labels %v", got)
		}
	})
}

// Without namespaces, the watchdog's own namespace (from its service
// account) is watched, and only it.
func TestKubernetesOwnNamespace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(
			newPod("llm", "sglang-a", "10.1.0.1", true, sglangLabels("m", "decode")),
			newPod("default", "sglang-z", "10.2.0.1", true, sglangLabels("m", "decode")),
		)
		h := newHarness(t, kubeConfig(func(k *KubernetesConfig) { k.Namespaces = nil }), nil, cs, nil)
		h.start(t)
		wantNames(t, h.next(t).targets, "llm.sglang-a")
	})
}

func TestKubernetesSeveralNamespaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(
			newPod("llm", "sglang-a", "10.1.0.1", true, sglangLabels("m", "decode")),
			newPod("llm-canary", "sglang-a", "10.3.0.1", true, sglangLabels("m", "decode")),
			newPod("default", "sglang-z", "10.2.0.1", true, sglangLabels("m", "decode")),
		)
		h := newHarness(t, kubeConfig(func(k *KubernetesConfig) { k.Namespaces = []string{"llm", "llm-canary"} }), nil, cs, nil)
		h.start(t)
		wantNames(t, h.next(t).targets, "llm-canary.sglang-a", "llm.sglang-a")
		create(t, cs, newPod("llm-canary", "sglang-b", "10.3.0.2", false, sglangLabels("m", "decode")))
		wantNames(t, h.next(t).targets, "llm-canary.sglang-a", "llm-canary.sglang-b", "llm.sglang-a")
	})
}

// A rollout churns many pods at once: the burst is coalesced into few
// updates, at most one per second, and the last one is complete.
func TestKubernetesBurstIsDebounced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset()
		h := newHarness(t, kubeConfig(nil), nil, cs, nil)
		h.start(t)
		wantNames(t, h.next(t).targets)

		// A rollout: 50 pods arrive over 1.5 s of (fake) time.
		var want []string
		for i := range 50 {
			name := fmt.Sprintf("sglang-%02d", i)
			create(t, cs, newPod("llm", name, fmt.Sprintf("10.1.0.%d", i+1), i%2 == 0, sglangLabels("m", "decode")))
			want = append(want, "llm."+name)
			<-time.After(30 * time.Millisecond)
		}
		var got []update
		for {
			u := h.next(t)
			got = append(got, u)
			if len(u.targets) == 50 {
				break
			}
		}
		h.none(t, 10*time.Second)
		t.Logf("%d update(s) for a burst of 50 pod creations", len(got))
		if len(got) > 3 {
			t.Errorf("%d updates for a burst of 50 pods, want ≤ 3", len(got))
		}
		for i := 1; i < len(got); i++ {
			if gap := got[i].at.Sub(got[i-1].at); gap < DefaultMinUpdateInterval {
				t.Errorf("updates %d and %d only %v apart", i-1, i, gap)
			}
		}
		wantNames(t, got[len(got)-1].targets, want...)
	})
}

// An API server that refuses the list (e.g. RBAC not granted) does not
// hold the static targets hostage: after the initial sync timeout they are
// published; the failures are counted and logged once; the pods join when
// the list succeeds.
func TestKubernetesListFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(newPod("llm", "sglang-a", "10.1.0.1", true, sglangLabels("m", "decode")))
		var forbidden atomic.Bool
		forbidden.Store(true)
		cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if forbidden.Load() {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
					fmt.Errorf(`User "system:serviceaccount:llm:watchdog" cannot list resource "pods"`))
			}
			return false, nil, nil
		})
		static := []scrape.Target{{Name: "gateway", URL: "http://router:29000/metrics", Kind: scrape.KindGateway}}
		h := newHarness(t, kubeConfig(nil), static, cs, nil)
		start := time.Now()
		h.start(t)

		u := h.next(t)
		if got := u.at.Sub(start); got != DefaultInitialSyncTimeout {
			t.Errorf("first update after %v, want the initial sync timeout %v", got, DefaultInitialSyncTimeout)
		}
		wantNames(t, u.targets, "gateway")
		failures := testutil.ToFloat64(h.d.metrics.failures.WithLabelValues(SourceKubernetes))
		if failures < 2 {
			t.Errorf("refresh failures = %v, want the retries counted", failures)
		}
		if n := h.logs.FilterMessage("kubernetes pod list/watch failed; retrying").Len(); n != 1 {
			t.Errorf("%d failure logs, want 1", n)
		}

		forbidden.Store(false)
		wantNames(t, h.next(t).targets, "gateway", "llm.sglang-a")
	})
}
