package correlate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// GPUTarget says which GPUs of a node a target's SGLang server runs on,
// for dcgm-exporters that do not label GPUs with their pod (static
// targets, or an exporter without Kubernetes mapping).
type GPUTarget struct {
	// Target is the engine target's name.
	Target string `yaml:"target"`
	// Node is the GPU node as dcgm-exporter's Hostname says it.
	Node string `yaml:"node"`
	// GPUs are the GPU indexes on the node.
	GPUs []int `yaml:"gpus"`
}

// validateGPUTargets reports every problem with its YAML path.
func validateGPUTargets(ts []GPUTarget) []error {
	var errs []error
	seen := map[string]int{}
	for i, t := range ts {
		path := fmt.Sprintf("correlation.gpu_targets[%d]", i)
		if strings.TrimSpace(t.Target) == "" {
			errs = append(errs, errors.New(path+".target: required"))
		}
		if strings.TrimSpace(t.Node) == "" {
			errs = append(errs, errors.New(path+".node: required"))
		}
		if len(t.GPUs) == 0 {
			errs = append(errs, errors.New(path+".gpus: list at least one GPU index"))
		}
		for j, g := range t.GPUs {
			key := t.Node + "/" + strconv.Itoa(g)
			switch k, dup := seen[key]; {
			case g < 0:
				errs = append(errs, fmt.Errorf("%s.gpus[%d]: a GPU index is not negative, got %d", path, j, g))
			case dup:
				errs = append(errs, fmt.Errorf("%s.gpus[%d]: GPU %d of node %q is mapped by gpu_targets[%d] already", path, j, g, t.Node, k))
			default:
				seen[key] = i
			}
		}
	}
	return errs
}

// BusyGPUUtil is the utilization (%) at or above which a GPU under a hung
// engine is busy-waiting: the seed runbook's collective-hang fingerprint.
const BusyGPUUtil = 95

// isGPUClass reports whether a class is a GPU detector's.
func isGPUClass(c detect.Class) bool { return c == detect.GPUFault || c == detect.GPUThrottled }

// attributeGPUs moves each GPU finding onto every SGLang replica that
// holds its GPU, so that the per-replica fold files the replica's
// slowdown, hang or outage under it; a GPU finding no watched replica
// holds stays on its GPU and says so. A GPU seen by two exporters (one
// UUID) counts once. A replica holds a GPU when dcgm-exporter's pod labels
// name the replica's Kubernetes pod, or, for a GPU without pod labels,
// when cfg.GPUTargets maps the GPU's node and index to the replica's
// target; nothing else attributes a GPU. An engine_hang on a replica one
// of whose GPUs sat at BusyGPUUtil or more (gpuUtil: each GPU replica's
// lowest utilization in the round's span) says that it matches the
// collective-hang fingerprint.
func attributeGPUs(cfg Config, findings []detect.Finding, replicas []detect.Replica, gpuUtil map[string]float64) []detect.Finding {
	gpus := map[string]detect.Replica{}
	for _, r := range replicas {
		if r.Kind == detect.KindGPU {
			gpus[r.Name] = r
		}
	}
	if len(gpus) == 0 {
		return findings
	}
	holders := func(g detect.Replica) []detect.Replica {
		var out []detect.Replica
		for _, r := range replicas {
			if r.Kind != detect.KindGPU && holds(cfg, r, g) {
				out = append(out, r)
			}
		}
		return out
	}
	out := make([]detect.Finding, 0, len(findings))
	seen := map[string]bool{} // GPU identity + class
	for _, f := range findings {
		g, onGPU := gpus[f.Replica]
		if !onGPU || !isGPUClass(f.Class) {
			out = append(out, f)
			continue
		}
		id := g.Labels[series.GPUUUID]
		if id == "" {
			id = g.Name
		}
		if seen[id+"\x00"+string(f.Class)] {
			continue
		}
		seen[id+"\x00"+string(f.Class)] = true
		hs := holders(g)
		if len(hs) == 0 {
			f.Diagnosis = strings.TrimSpace(f.Diagnosis + " No watched SGLang replica uses this GPU (by its pod labels or correlation.gpu_targets).")
			out = append(out, f)
			continue
		}
		for _, h := range hs {
			p := f
			p.Replica, p.Model = h.Name, h.Model
			p.Evidence = slices.Clone(f.Evidence)
			p.Diagnosis = strings.TrimSpace(f.Diagnosis + " Replica " + h.Name + " runs on this GPU.")
			out = append(out, p)
		}
	}
	for i := range out {
		f := &out[i]
		if f.Class != detect.EngineHang {
			continue
		}
		for _, g := range gpus {
			u, ok := gpuUtil[g.Name]
			if !ok || u < BusyGPUUtil || !holdsByName(cfg, replicas, f.Replica, g) {
				continue
			}
			f.Evidence = append(slices.Clone(f.Evidence), detect.Evidence{Name: "GPU utilization while stalled (" + detect.GPUDescription(g) + ", lowest in the last minute)",
				Value: u, Unit: "%", Threshold: ">= " + detect.FormatNumber(BusyGPUUtil) + "%"}.WithLimit(BusyGPUUtil))
			f.Diagnosis = strings.TrimSpace(f.Diagnosis + " " + detect.GPUDescription(g) + " sat at " + detect.FormatNumber(u) +
				"% utilization while no token was produced: this matches the seed runbook's NCCL/collective-hang fingerprint — the GPU busy-waits in a collective for a rank that does not answer.")
			break
		}
	}
	return out
}

// holds reports whether replica r runs on GPU g.
func holds(cfg Config, r detect.Replica, g detect.Replica) bool {
	if pod := g.Labels[series.GPUPod]; pod != "" {
		return r.Pod != nil && r.Pod.Name == pod && r.Pod.Namespace == g.Labels[series.GPUNamespace]
	}
	node, idx := g.Labels[series.GPUNode], g.Labels[series.GPUIndex]
	if node == "" || idx == "" {
		return false
	}
	for _, t := range cfg.GPUTargets {
		if t.Target == r.Target && t.Node == node && slices.ContainsFunc(t.GPUs, func(i int) bool { return strconv.Itoa(i) == idx }) {
			return true
		}
	}
	return false
}

func holdsByName(cfg Config, replicas []detect.Replica, name string, g detect.Replica) bool {
	for _, r := range replicas {
		if r.Name == name && r.Kind != detect.KindGPU {
			return holds(cfg, r, g)
		}
	}
	return false
}
