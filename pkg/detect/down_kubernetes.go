package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Kubernetes reasons the pages of replica_down and cold_start read from
// series.Pod: waiting reasons, the eviction, and warning event reasons.
const (
	podEvicted       = "Evicted"
	errImagePull     = "ErrImagePull"
	imagePullBackOff = "ImagePullBackOff"
	eventUnhealthy   = "Unhealthy"        // a liveness, readiness or startup probe failed
	eventScheduling  = "FailedScheduling" // no node fits the pod
	eventFailedMount = "FailedMount"      // a volume cannot be mounted (model cache, secrets)
	eventAttach      = "FailedAttachVolume"
)

// kubeCause is what Kubernetes says made a replica unreachable or holds
// its start, when it says something: the page names it first.
type kubeCause struct {
	headline  string   // a short phrase for the summary
	diagnosis string   // the sentence that opens the diagnosis
	emergency []string // the steps that fit, before the generic ones
	// condition and event are the node condition type and the event
	// reason it names, which the facts' sentence then leaves out.
	condition, event string
}

// recentEvents are the pod's warning events last seen within [from, now]:
// an older event (a probe that failed an hour ago) is no cause now.
func recentEvents(pod *series.Pod, from, now time.Time) []series.PodEvent {
	var out []series.PodEvent
	for _, e := range pod.Events {
		if !e.Last.Before(from) && !e.Last.After(now) {
			out = append(out, e)
		}
	}
	return out
}

// eventOf is the newest recent event with the reason and the count over
// every recent event with it.
func eventOf(evs []series.PodEvent, reason string) (series.PodEvent, bool) {
	var first series.PodEvent
	found := false
	for _, e := range evs {
		if e.Reason != reason {
			continue
		}
		if !found {
			first, found = e, true
			continue
		}
		first.Count += e.Count
	}
	return first, found
}

// nodeCondition is the node's condition of that type when it is unhealthy.
func nodeCondition(pod *series.Pod, typ string) (series.NodeCondition, bool) {
	if pod.Node == nil {
		return series.NodeCondition{}, false
	}
	for _, c := range pod.Node.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return series.NodeCondition{}, false
}

// clock renders a time of day for a page.
func clock(t time.Time) string { return t.UTC().Format("15:04 UTC") }

// firstSentence is a Kubernetes message up to its first full stop, for a
// headline; the diagnosis quotes it whole.
func firstSentence(msg string) string {
	msg = strings.TrimSpace(msg)
	if i := strings.Index(msg, ". "); i > 0 {
		return msg[:i]
	}
	return strings.TrimSuffix(msg, ".")
}

// quoted ends a Kubernetes message as a sentence.
func quoted(msg string) string {
	msg = strings.TrimSpace(msg)
	if msg == "" || strings.HasSuffix(msg, ".") || strings.HasSuffix(msg, "…") {
		return msg
	}
	return msg + "."
}

func times(n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(" ×%d", n)
}

// kubeCauseOf reads the pod and its node for the cause of an outage or a
// stuck start, most specific first: an eviction, the node NotReady, the
// scheduler unable to place the pod, an image that cannot be pulled, node
// pressure, a volume that cannot be mounted, probes that failed before a
// restart. Events count only when last seen within [from, now]. Nothing
// when the pod is nil (static targets) or nothing explains it.
func kubeCauseOf(pod *series.Pod, from, now time.Time) (kubeCause, bool) {
	if pod == nil {
		return kubeCause{}, false
	}
	evs := recentEvents(pod, from, now)
	node := "its node"
	if pod.Node != nil {
		node = "node " + pod.Node.Name
	}
	pressure := func() (series.NodeCondition, bool) {
		for _, typ := range []string{series.NodeMemoryPressure, series.NodeDiskPressure, series.NodePIDPressure} {
			if c, ok := nodeCondition(pod, typ); ok {
				return c, true
			}
		}
		return series.NodeCondition{}, false
	}

	evicted, evictedEvent := eventOf(evs, podEvicted)
	if pod.Reason == podEvicted || (pod.Phase == podFailed && evictedEvent) {
		msg := pod.Message
		if msg == "" {
			msg = evicted.Message
		}
		c := kubeCause{emergency: []string{
			fmt.Sprintf("Check %s: kubectl describe node (Conditions, Allocated resources) — if it stays under pressure, cordon and drain it (kubectl cordon <node>; kubectl drain <node> --ignore-daemonsets --delete-emptydir-data) so the replacement lands elsewhere.", node),
		}}
		c.event = podEvicted
		if p, ok := pressure(); ok {
			c.headline, c.condition = fmt.Sprintf("pod evicted: %s has %s", node, p.Type), p.Type
		} else if msg != "" {
			c.headline = "pod evicted: " + firstSentence(msg)
		} else {
			c.headline = "pod evicted"
		}
		c.diagnosis = "Kubernetes: the kubelet evicted the pod to relieve node pressure (memory, disk or PIDs)."
		if p, ok := pressure(); ok {
			c.diagnosis += fmt.Sprintf(" %s has had %s since %s.", node, p.Type, clock(p.Since))
		}
		if pod.Message == "" {
			c.diagnosis += " " + quoted(msg) // else the pod's sentence quotes it
		}
		return c, true
	}

	if r, ok := nodeCondition(pod, series.NodeReady); ok {
		state := "NotReady"
		if r.Status == "Unknown" {
			state = "NotReady (status Unknown: the kubelet stopped reporting)"
		}
		return kubeCause{
			condition: series.NodeReady,
			headline:  fmt.Sprintf("%s NotReady since %s", node, clock(r.Since)),
			diagnosis: sentence(fmt.Sprintf("Kubernetes: %s is %s since %s (%s ago); a replica on it cannot be reached, and its pods are evicted after the toleration (5m by default).",
				node, state, clock(r.Since), ShortDuration(now.Sub(r.Since).Round(time.Second))), quoted(r.Message)),
			emergency: []string{
				fmt.Sprintf("Cordon and drain %s (kubectl cordon %s; kubectl drain %s --ignore-daemonsets --delete-emptydir-data) so the replica is rescheduled on a healthy node; delete a pod stuck Terminating there.", node, pod.Node.Name, pod.Node.Name),
				"Find out why the node is down: kubectl describe node (kubelet, container runtime, network), dmesg for GPU Xid errors and the OOM killer, the cloud console for a lost instance.",
			},
		}, true
	}

	if pod.Unschedulable != "" {
		ev, _ := eventOf(evs, eventScheduling)
		return kubeCause{
			event:    eventScheduling,
			headline: fmt.Sprintf("unschedulable: %s (%s%s)", firstSentence(pod.Unschedulable), eventScheduling, times(ev.Count)),
			diagnosis: "Kubernetes: the scheduler cannot place the pod, so it has no node and no address: " + quoted(pod.Unschedulable) +
				" It is not loading; it waits for room (usually free GPUs: nvidia.com/gpu).",
			emergency: []string{
				"Free GPUs or add them: scale the GPU node pool up (or check why the cluster autoscaler does not: kubectl -n kube-system logs deploy/cluster-autoscaler), or scale down a lower-priority GPU workload.",
				"Check the pod's constraints against the nodes: kubectl describe pod <pod> (requests, nodeSelector, affinity, tolerations) and kubectl describe nodes | grep -A5 Allocated; uncordon nodes cordoned by mistake.",
			},
		}, true
	}

	if pod.Waiting == imagePullBackOff || pod.Waiting == errImagePull {
		image := pod.Image
		if image == "" {
			image = "its image"
		}
		what := "image pull back-off"
		if pod.Waiting == errImagePull {
			what = "image pull failing"
		}
		return kubeCause{
			headline:  fmt.Sprintf("%s: %s", what, image),
			diagnosis: sentence(fmt.Sprintf("Kubernetes: the container cannot start because %s cannot be pulled (%s); it is not loading the model.", image, pod.Waiting), quoted(pod.WaitingMessage)),
			emergency: []string{
				"Fix the image reference or its pull secret: check the tag exists in the registry (a typo, a deleted tag) and the pod's imagePullSecrets/service account can read it; roll back the deploy that changed it.",
				"If the registry is slow or rate-limited, pre-pull the image on the GPU nodes or mirror it closer.",
			},
		}, true
	}

	if p, ok := pressure(); ok {
		return kubeCause{
			condition: p.Type,
			headline:  fmt.Sprintf("%s under %s since %s", node, p.Type, clock(p.Since)),
			diagnosis: sentence(fmt.Sprintf("Kubernetes: %s reports %s since %s; the kubelet evicts pods and refuses new ones until it clears.", node, p.Type, clock(p.Since)), quoted(p.Message)),
			emergency: []string{
				fmt.Sprintf("Relieve %s (kubectl describe node: Allocated resources, kubectl top pods on it), or cordon and drain it (kubectl cordon <node>; kubectl drain <node> --ignore-daemonsets --delete-emptydir-data).", node),
			},
		}, true
	}

	for _, reason := range []string{eventFailedMount, eventAttach} {
		if ev, ok := eventOf(evs, reason); ok && !pod.Ready {
			return kubeCause{
				event:     reason,
				headline:  fmt.Sprintf("volume mount failing (%s%s)", reason, times(ev.Count)),
				diagnosis: "Kubernetes: a volume of the pod cannot be attached or mounted, so the container cannot start: " + quoted(ev.Message),
				emergency: []string{
					"Fix the volume: kubectl describe pod <pod> names it; check the PVC is Bound (kubectl get pvc), the secret or ConfigMap exists, and the volume is not still attached to another node.",
				},
			}, true
		}
	}

	if ev, ok := eventOf(evs, eventUnhealthy); ok && !pod.LastTermination.Finished.Before(from) && !pod.LastTermination.Finished.IsZero() {
		return kubeCause{
			event:    eventUnhealthy,
			headline: fmt.Sprintf("probe failing: %s (%s%s)", firstSentence(ev.Message), eventUnhealthy, times(ev.Count)),
			diagnosis: "Kubernetes: the container's probes failed and it was restarted since: " + quoted(ev.Message) +
				" A liveness or startup probe that gives up before the model has loaded kills every start.",
			emergency: []string{
				"Fix the probe timings against the model's load time: a startupProbe whose failureThreshold × periodSeconds exceeds the longest load (weights, CUDA graphs), liveness only after it; readiness on /health_generate.",
			},
		}, true
	}
	return kubeCause{}, false
}

// kubeFacts are the evidence lines and the sentence of what Kubernetes
// reports about the pod's node and its warning events in [from, now];
// nothing for a static target, a healthy node and no recent warning. The
// sentence leaves out what the cause already says; the evidence does not.
func kubeFacts(pod *series.Pod, cause kubeCause, from, now time.Time) ([]Evidence, string) {
	if pod == nil {
		return nil, ""
	}
	var ev []Evidence
	var parts []string
	if n := pod.Node; n != nil {
		for _, c := range n.Conditions {
			state := c.Type + " " + c.Status
			if c.Type == series.NodeReady {
				state = "NotReady (" + c.Status + ")"
			}
			ev = append(ev, Evidence{Name: fmt.Sprintf("seconds node %s has been %s", n.Name, state), Value: now.Sub(c.Since).Seconds(), Unit: "s"})
			if c.Type != cause.condition {
				parts = append(parts, fmt.Sprintf("node %s %s since %s", n.Name, state, clock(c.Since)))
			}
		}
		if n.Cordoned {
			ev = append(ev, Evidence{Name: "node " + n.Name + " cordoned", Value: 1})
			parts = append(parts, "node "+n.Name+" cordoned")
		}
	}
	for _, e := range recentEvents(pod, from, now) {
		ev = append(ev, Evidence{Name: "Kubernetes warning events " + e.Reason, Value: float64(e.Count)})
		if e.Reason == cause.event {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s%s %s ago: %s", e.Reason, times(e.Count), ShortDuration(now.Sub(e.Last).Round(time.Second)), strings.TrimSuffix(e.Message, ".")))
	}
	if len(parts) == 0 {
		return ev, ""
	}
	what := "Kubernetes reports: "
	if cause.headline != "" {
		what = "Kubernetes also reports: "
	}
	return ev, what + strings.Join(parts, "; ") + "."
}
