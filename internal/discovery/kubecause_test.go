package discovery

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// newNode is a node with the given Ready status and no pressure.
func newNode(name string, ready corev1.ConditionStatus, since time.Time) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nvidia.com/gpu.product": "H100"}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady", LastTransitionTime: metav1.NewTime(since), LastHeartbeatTime: metav1.NewTime(since)},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse},
			},
			Images: []corev1.ContainerImage{{Names: []string{"lmsysorg/sglang:v0.5"}, SizeBytes: 30 << 30}},
		},
	}
}

// podOn is an SGLang pod bound to node.
func podOn(name, ip, node string) *corev1.Pod {
	p := newPod("llm", name, ip, false, sglangLabels("m", "decode"))
	p.UID = types.UID("uid-" + name)
	p.Spec.NodeName = node
	return p
}

// warning is a core v1 warning event about a pod.
func warning(pod *corev1.Pod, name, reason, msg string, count int32, last time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: pod.Namespace, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Type:           corev1.EventTypeWarning, Reason: reason, Message: msg, Count: count,
		FirstTimestamp: metav1.NewTime(last.Add(-time.Hour)), LastTimestamp: metav1.NewTime(last),
	}
}

func createObj(t *testing.T, cs *fake.Clientset, obj runtime.Object) {
	t.Helper()
	var err error
	switch o := obj.(type) {
	case *corev1.Node:
		_, err = cs.CoreV1().Nodes().Create(t.Context(), o, metav1.CreateOptions{})
	case *corev1.Event:
		_, err = cs.CoreV1().Events(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
	default:
		t.Fatalf("createObj: %T", obj)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// The node a pod runs on rides on its status: a healthy node adds its name
// only; NotReady, pressure and a cordon are published when they happen.
func TestKubernetesNodeConditions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		since := time.Now().Add(-time.Hour).Truncate(time.Second)
		cs := fake.NewClientset(podOn("sglang-a", "10.1.0.1", "gpu-node-3"), newNode("gpu-node-3", corev1.ConditionTrue, since),
			podOn("sglang-b", "10.1.0.2", "gpu-node-9")) // a node not listed (yet)
		h := newHarness(t, kubeConfig(nil), nil, cs, nil)
		h.start(t)

		u := h.next(t)
		a := find(t, u.targets, "llm.sglang-a").Pod
		if a.Node == nil || a.Node.Name != "gpu-node-3" || a.Node.Cordoned || len(a.Node.Conditions) != 0 {
			t.Fatalf("healthy node: %+v", a.Node)
		}
		if b := find(t, u.targets, "llm.sglang-b").Pod; b.Node != nil {
			t.Errorf("unknown node: %+v, want nil", b.Node)
		}

		// A heartbeat (and a new image on the node) changes nothing a page reads.
		n, err := cs.CoreV1().Nodes().Get(t.Context(), "gpu-node-3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now())
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{"busybox"}})
		if _, err := cs.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.none(t, 10*time.Second)

		// The kubelet stops posting, memory runs low, someone cordons it.
		down := time.Now().Truncate(time.Second)
		n.Spec.Unschedulable = true
		n.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
			Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", LastTransitionTime: metav1.NewTime(down)}
		n.Status.Conditions[1].Status = corev1.ConditionTrue
		n.Status.Conditions[1].LastTransitionTime = metav1.NewTime(down.Add(-time.Minute))
		if _, err := cs.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		a = find(t, h.next(t).targets, "llm.sglang-a").Pod
		want := []series.NodeCondition{
			{Type: series.NodeReady, Status: "Unknown", Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", Since: down},
			{Type: series.NodeMemoryPressure, Status: "True", Since: down.Add(-time.Minute)},
		}
		if a.Node == nil || !a.Node.Cordoned || !slices.EqualFunc(a.Node.Conditions, want, func(x, y series.NodeCondition) bool {
			return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message && x.Since.Equal(y.Since)
		}) {
			t.Errorf("node after NotReady: %+v, want cordoned with %+v", a.Node, want)
		}
	})
}

// Warning events about a pod ride on its status, newest first, at most
// series.MaxPodEvents; normal events, events about other pods and events
// of an earlier pod of the same name are not its own.
func TestKubernetesPodEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := podOn("sglang-a", "10.1.0.1", "gpu-node-3")
		other := podOn("sglang-b", "10.1.0.2", "gpu-node-3")
		now := time.Now().Truncate(time.Second)
		earlier := warning(a, "old-pod.1", "Unhealthy", "Liveness probe failed", 3, now.Add(-time.Minute))
		earlier.InvolvedObject.UID = "uid-of-a-deleted-pod"
		normal := warning(a, "pulled.1", "Pulled", "Successfully pulled image", 1, now)
		normal.Type = corev1.EventTypeNormal
		cs := fake.NewClientset(a, other, newNode("gpu-node-3", corev1.ConditionTrue, now),
			warning(a, "a.1", "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503", 42, now.Add(-2*time.Minute)),
			warning(other, "b.1", "BackOff", "Back-off restarting failed container", 7, now),
			earlier, normal)
		h := newHarness(t, kubeConfig(nil), nil, cs, nil)
		h.start(t)

		got := find(t, h.next(t).targets, "llm.sglang-a").Pod.Events
		want := []series.PodEvent{{Reason: "Unhealthy", Message: "Readiness probe failed: HTTP probe failed with statuscode: 503", Count: 42, Last: now.Add(-2 * time.Minute)}}
		if !slices.Equal(got, want) {
			t.Fatalf("events %+v, want %+v", got, want)
		}

		// More warnings than a page needs: the newest are kept, messages cut.
		long := strings.Repeat("0/8 nodes are available: 8 Insufficient nvidia.com/gpu. ", 10)
		for i := range 6 {
			createObj(t, cs, warning(a, fmt.Sprintf("a.sched.%d", i), "FailedScheduling", long, 1, now.Add(time.Duration(i)*time.Second)))
		}
		var u update
		var evs []series.PodEvent
		for len(evs) == 0 || evs[0].Reason != "FailedScheduling" || !evs[0].Last.Equal(now.Add(5*time.Second)) {
			u = h.next(t)
			evs = find(t, u.targets, "llm.sglang-a").Pod.Events
		}
		if len(evs) != series.MaxPodEvents {
			t.Fatalf("%d events kept, want %d", len(evs), series.MaxPodEvents)
		}
		for i, e := range evs {
			if want := now.Add(time.Duration(5-i) * time.Second); !e.Last.Equal(want) {
				t.Errorf("event %d last seen %v, want %v (newest first)", i, e.Last, want)
			}
			if len(e.Message) > series.MaxKubeMessage || !strings.HasSuffix(e.Message, "…") {
				t.Errorf("event %d message of %d bytes: %q", i, len(e.Message), e.Message)
			}
		}
		if evs := find(t, u.targets, "llm.sglang-b").Pod.Events; len(evs) != 1 || evs[0].Reason != "BackOff" || evs[0].Count != 7 {
			t.Errorf("events of the other pod: %+v", evs)
		}
	})
}

// A pod the scheduler cannot place has no IP; it is a target all the same
// (never scraped: its address cannot resolve), carrying the scheduler's
// message, so a replica that never starts is seen. Other pods without an
// IP still wait for one.
func TestKubernetesUnschedulablePod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPod("llm", "sglang-a", "", false, sglangLabels("m", "decode"))
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."}}
		cs := fake.NewClientset(p)
		h := newHarness(t, kubeConfig(nil), nil, cs, nil)
		h.start(t)
		tg := find(t, h.next(t).targets, "llm.sglang-a")
		if tg.URL != "http://unscheduled-pod.invalid:30000/metrics" || tg.Pod.Unschedulable != "0/8 nodes are available: 8 Insufficient nvidia.com/gpu." || tg.Pod.Node != nil {
			t.Errorf("unschedulable pod: %s %+v", tg.URL, tg.Pod)
		}

		// Placed, pulling its image: no IP yet, no target until it has one.
		mutate(t, cs, "llm", "sglang-a", func(p *corev1.Pod) {
			p.Spec.NodeName = "gpu-node-3"
			p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}
		})
		wantNames(t, h.next(t).targets)

		// The image cannot be pulled: the waiting reason, its message and the image.
		mutate(t, cs, "llm", "sglang-a", func(p *corev1.Pod) {
			p.Status.PodIP = "10.1.0.1"
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", Image: "lmsysorg/sglang:v9.9-typo",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
					Message: `Back-off pulling image "lmsysorg/sglang:v9.9-typo"`}}}}
		})
		st := find(t, h.next(t).targets, "llm.sglang-a").Pod
		if st.Waiting != "ImagePullBackOff" || st.Image != "lmsysorg/sglang:v9.9-typo" || st.WaitingMessage != `Back-off pulling image "lmsysorg/sglang:v9.9-typo"` || st.Unschedulable != "" {
			t.Errorf("pod pulling its image: %+v", st)
		}

		// With include_not_ready false an unschedulable pod is no target.
		no := false
		h2 := newHarness(t, kubeConfig(func(k *KubernetesConfig) { k.IncludeNotReady = &no }), nil, fake.NewClientset(p), nil)
		h2.start(t)
		wantNames(t, h2.next(t).targets)
	})
}

// An init container that cannot pull its image (a model downloader) is
// why the pod waits, not the serving container's PodInitializing.
func TestKubernetesInitContainerWaits(t *testing.T) {
	p := podOn("sglang-a", "10.1.0.1", "gpu-node-3")
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: "fetch-weights", Image: "registry.local/fetch:1", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "pull access denied"}}},
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "sglang", Image: "lmsysorg/sglang:v0.5", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: podInitializing}}},
	}
	st := podStatus(p)
	if st.Waiting != "ErrImagePull" || st.Image != "registry.local/fetch:1" || st.WaitingMessage != "pull access denied" {
		t.Errorf("pod held by its init container: %+v", st)
	}
}

// Events come aggregated the old way (count, lastTimestamp) or as a series
// (events.k8s.io); either way the newest occurrence and the count are read.
func TestPodEventTimes(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e := &corev1.Event{Reason: "Unhealthy", Message: "m", EventTime: metav1.NewMicroTime(at),
		Series: &corev1.EventSeries{Count: 12, LastObservedTime: metav1.NewMicroTime(at.Add(5 * time.Minute))}}
	if got := podEvent(e); got.Count != 12 || !got.Last.Equal(at.Add(5*time.Minute)) {
		t.Errorf("series event: %+v", got)
	}
	e = &corev1.Event{Reason: "Evicted", EventTime: metav1.NewMicroTime(at)}
	if got := podEvent(e); got.Count != 1 || !got.Last.Equal(at) {
		t.Errorf("single new-style event: %+v", got)
	}
}

// Without watch_nodes no node is read (no ClusterRole needed); a node list
// the API refuses is counted and logged once, and the pods still come.
func TestKubernetesNodesOptional(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(podOn("sglang-a", "10.1.0.1", "gpu-node-3"), newNode("gpu-node-3", corev1.ConditionFalse, time.Now()))
		no := false
		h := newHarness(t, kubeConfig(func(k *KubernetesConfig) { k.WatchNodes = &no }), nil, cs, nil)
		h.start(t)
		if st := find(t, h.next(t).targets, "llm.sglang-a").Pod; st.Node != nil {
			t.Errorf("node read without watch_nodes: %+v", st.Node)
		}
		for _, a := range cs.Actions() {
			if a.GetResource().Resource == "nodes" {
				t.Errorf("nodes %s without watch_nodes", a.GetVerb())
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(podOn("sglang-a", "10.1.0.1", "gpu-node-3"))
		cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "",
				fmt.Errorf(`User "system:serviceaccount:llm:watchdog" cannot list resource "nodes" at the cluster scope`))
		})
		h := newHarness(t, kubeConfig(nil), nil, cs, nil)
		h.start(t)
		if st := find(t, h.next(t).targets, "llm.sglang-a").Pod; st.Node != nil {
			t.Errorf("node without permission: %+v", st.Node)
		}
		if n := h.logs.FilterMessage("kubernetes node list/watch failed; retrying").Len(); n != 1 {
			t.Errorf("%d node failure logs, want 1", n)
		}
	})
}
