package correlate

import (
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func gpuReplica(name, uuid, ns, pod string) detect.Replica {
	l := map[string]string{series.GPUNode: "n1", series.GPUIndex: "0", series.GPUUUID: uuid}
	if pod != "" {
		l[series.GPUNamespace], l[series.GPUPod] = ns, pod
	}
	return detect.Replica{Name: name, Target: name, Kind: detect.KindGPU, Labels: l}
}

// One GPU seen by two exporters (one UUID) is one GPU: one finding on the
// replica that holds it, not two.
func TestOneGPUSeenTwiceIsOneGPU(t *testing.T) {
	reps := []detect.Replica{
		{Name: "llama-0", Target: "llama-0", Kind: "engine", Model: "m", Pod: &series.Pod{Namespace: "llm", Name: "llama-0"}},
		gpuReplica("dcgm-a/gpu0", "GPU-1", "llm", "llama-0"),
		gpuReplica("dcgm-b/gpu0", "GPU-1", "llm", "llama-0"),
	}
	fault := func(r string) detect.Finding {
		return detect.Finding{Class: detect.GPUFault, Severity: detect.Critical, Replica: r, Summary: "GPU fault: Xid 79 on GPU 0"}
	}
	down := detect.Finding{Class: detect.ReplicaDown, Severity: detect.Critical, Replica: "llama-0", Model: "m", Summary: "Replica down"}
	out := Correlate(DefaultConfig(), []detect.Finding{fault("dcgm-a/gpu0"), fault("dcgm-b/gpu0"), down}, reps)
	if len(out) != 1 || out[0].Cause() != detect.GPUFault || out[0].Finding.Replica != "llama-0" || out[0].Finding.Model != "m" ||
		len(out[0].Members) != 2 || !out[0].Shows("llama-0", detect.ReplicaDown) {
		t.Errorf("groups %+v", out)
	}
}

// A pod label of another pod, or of another namespace, is no attribution;
// neither is a GPU without pod labels when no mapping names it. GPU
// findings never make a fleet incident, and GPUs do not count as
// replicas of a model.
func TestGPUAttributionIsExact(t *testing.T) {
	reps := []detect.Replica{
		{Name: "llama-0", Target: "llama-0", Kind: "engine", Pod: &series.Pod{Namespace: "llm", Name: "llama-0"}},
		{Name: "llama-1", Target: "llama-1", Kind: "engine"},
		gpuReplica("dcgm/gpu0", "GPU-1", "other", "llama-0"),
		gpuReplica("dcgm/gpu1", "GPU-2", "", ""),
		gpuReplica("dcgm/gpu2", "GPU-3", "", ""),
	}
	var fs []detect.Finding
	for _, r := range reps[2:] {
		fs = append(fs, detect.Finding{Class: detect.GPUThrottled, Severity: detect.Warning, Replica: r.Name})
	}
	out := Correlate(DefaultConfig(), fs, reps)
	if len(out) != 3 {
		t.Fatalf("groups %+v", out)
	}
	for _, g := range out {
		if g.Fleet || !strings.HasPrefix(g.Finding.Replica, "dcgm/") || !strings.Contains(g.Finding.Diagnosis, "No watched SGLang replica uses this GPU") {
			t.Errorf("%+v", g)
		}
	}
}

func TestGPUTargetsValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GPUTargets = []GPUTarget{{Target: "a", Node: "n", GPUs: []int{0, 1}}, {Target: "b", Node: "n", GPUs: []int{1}}, {GPUs: []int{-1}}}
	err := cfg.Validate()
	for _, want := range []string{"gpu_targets[1].gpus[0]: GPU 1 of node \"n\" is mapped by gpu_targets[0]", "gpu_targets[2].target: required",
		"gpu_targets[2].node: required", "gpu_targets[2].gpus[0]: a GPU index is not negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
}
