package detect_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// servingPod is the Kubernetes pod dcgm-exporter's pod labels name in
// fixture.DCGMPods (GPUs 0 and 1).
func servingPod(time.Duration) *series.Pod {
	return &series.Pod{Namespace: "llm", Name: "llama-70b-0", Phase: "Running", Ready: true,
		Created: start.Add(-2 * time.Hour), Started: start.Add(-2 * time.Hour)}
}

// assessWithGPUs runs the engine scenario and a dcgm-exporter exposition
// (edits(el) applied at each scrape) side by side through the window and
// the whole assessment: detectors, snapshot, correlation.
func assessWithGPUs(t *testing.T, engine *scenario, exposition string, edits func(el time.Duration) []fixture.DCGMEdit, corr correlate.Config) assess.Round {
	t.Helper()
	cfg := detect.DefaultConfig()
	store, now := engine.run(t, cfg)
	dec := scrape.NewKeepingDecoder(assess.Reads(cfg))
	for el := time.Duration(0); el <= engine.length; el += gpuInterval {
		var es []fixture.DCGMEdit
		if edits != nil {
			es = edits(el)
		}
		body, err := fixture.DCGMWith(exposition, es...)
		if err != nil {
			t.Fatal(err)
		}
		groups, err := dec.DecodeAs(scrape.KindGPU, body, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Append(series.Scrape{Target: "dcgm-a", Kind: scrape.KindGPU, At: start.Add(el), Groups: groups}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return assess.New(ds, assess.Config{Triage: cfg.Triage, Correlation: corr}).Assess(store, now, nil)
}

func groupsOn(round assess.Round, replica string) []correlate.Group {
	var out []correlate.Group
	for _, g := range round.Groups {
		if g.Finding.Replica == replica {
			out = append(out, g)
		}
	}
	return out
}

// HW thermal slowdown on a GPU of the replica's pod and the replica's
// decode slowdown are one incident, named after the throttle, the
// slowdown folded in.
func TestThermalThrottleExplainsTheDecodeSlowdownOfItsReplica(t *testing.T) {
	engine := slowDecode(0.07)
	engine.pod = servingPod
	round := assessWithGPUs(t, engine, fixture.DCGMPods, func(el time.Duration) []fixture.DCGMEdit {
		if el < incident-5*time.Minute {
			return nil
		}
		return []fixture.DCGMEdit{{Family: series.DCGMClockEventReasons, GPU: "0", Value: "68"}, // 0x40|0x4
			{Family: series.DCGMSMClock, GPU: "0", Value: "1100"}}
	}, correlate.DefaultConfig())
	if len(round.Groups) != 1 {
		for _, g := range round.Groups {
			t.Errorf("group %s on %s: %s", g.Cause(), g.Finding.Replica, g.Finding.Summary)
		}
		t.Fatalf("%d groups, want one", len(round.Groups))
	}
	g := round.Groups[0]
	if g.Cause() != detect.GPUThrottled || g.Finding.Replica != "sglang-0" || !g.Shows("sglang-0", detect.DecodeSlowdown) ||
		!strings.Contains(g.Finding.Summary, "HW thermal slowdown (0x40) on GPU 0 on node gpu-node-a for") ||
		!strings.Contains(g.Finding.Diagnosis, "GPU 0 on node gpu-node-a (NVIDIA H100 80GB HBM3, GPU-5a1f0c0e") ||
		!strings.Contains(g.Finding.Diagnosis, "Replica sglang-0 runs on this GPU") || g.Finding.Severity < detect.Warning {
		t.Errorf("%s on %s (%s): %q\n%s\nconsequences %v", g.Cause(), g.Finding.Replica, g.Finding.Severity, g.Finding.Summary, g.Finding.Diagnosis, g.Finding.Consequences)
	}
}

// Xid 79 on a GPU of the replica's pod while the replica is unreachable:
// one incident, named after the GPU fault, the outage folded in; the
// headline names the GPU by index and node, the diagnosis by its UUID too.
func TestXid79NamesTheGPUUnderTheReplicaDown(t *testing.T) {
	engine := failingFor(24, series.FailureRefused, "connection refused")
	engine.pod = servingPod
	round := assessWithGPUs(t, engine, fixture.DCGMPods, func(el time.Duration) []fixture.DCGMEdit {
		return []fixture.DCGMEdit{{Family: series.DCGMXIDErrors, GPU: "1", Value: after(el, engine.length-3*time.Minute, "79"),
			ErrMsg: after(el, engine.length-3*time.Minute, "GPU has fallen off the bus")}}
	}, correlate.DefaultConfig())
	if len(round.Groups) != 1 {
		for _, g := range round.Groups {
			t.Errorf("group %s on %s: %s", g.Cause(), g.Finding.Replica, g.Finding.Summary)
		}
		t.Fatalf("%d groups, want one", len(round.Groups))
	}
	g := round.Groups[0]
	if g.Cause() != detect.GPUFault || g.Finding.Replica != "sglang-0" || !g.Shows("sglang-0", detect.ReplicaDown) ||
		g.Finding.Severity != detect.Critical || !strings.Contains(g.Finding.Summary, "Xid 79 on GPU 1 on node gpu-node-a") ||
		strings.Contains(g.Finding.Summary, "GPU-9c3e2d14") || !strings.Contains(g.Finding.Diagnosis, "GPU-9c3e2d14-77a0-41f9-b2c8-0e5d6a8f3b12") {
		t.Errorf("%s on %s (%s): %q, members %v\n%s", g.Cause(), g.Finding.Replica, g.Finding.Severity, g.Finding.Summary, g.Classes(), g.Finding.Diagnosis)
	}
}

// An exporter without pod labels attributes no GPU: the fault stays on
// its GPU and says no watched replica uses it; the outage pages apart. A
// mapping of the node's GPU to the target attributes it.
func TestAnExporterWithoutPodLabelsAttributesNothing(t *testing.T) {
	engine := failingFor(24, series.FailureRefused, "connection refused")
	engine.pod = servingPod
	xid := func(el time.Duration) []fixture.DCGMEdit {
		return []fixture.DCGMEdit{{Family: series.DCGMXIDErrors, GPU: "1", Value: after(el, engine.length-3*time.Minute, "79")}}
	}
	round := assessWithGPUs(t, engine, fixture.DCGMNoPods, xid, correlate.DefaultConfig())
	gpu, down := groupsOn(round, "dcgm-a/gpu1"), groupsOn(round, "sglang-0")
	if len(gpu) != 1 || gpu[0].Cause() != detect.GPUFault || !strings.Contains(gpu[0].Finding.Diagnosis, "No watched SGLang replica uses this GPU") {
		t.Errorf("on the GPU: %+v", gpu)
	}
	if len(down) != 1 || down[0].Cause() != detect.ReplicaDown || len(down[0].Members) != 1 {
		t.Errorf("on the replica: %+v", down)
	}

	corr := correlate.DefaultConfig()
	corr.GPUTargets = []correlate.GPUTarget{{Target: "sglang-0", Node: "gpu-node-b", GPUs: []int{0, 1}}}
	round = assessWithGPUs(t, engine, fixture.DCGMNoPods, xid, corr)
	if len(round.Groups) != 1 || round.Groups[0].Cause() != detect.GPUFault || round.Groups[0].Finding.Replica != "sglang-0" ||
		!round.Groups[0].Shows("sglang-0", detect.ReplicaDown) {
		for _, g := range round.Groups {
			t.Errorf("mapped: group %s on %s: %s", g.Cause(), g.Finding.Replica, g.Finding.Summary)
		}
	}
}

// A hung engine whose GPU sits busy says it matches the collective-hang
// fingerprint; one whose GPU idles does not.
func TestHangOnABusyGPUIsTheCollectiveFingerprint(t *testing.T) {
	for util, want := range map[string]bool{"100": true, "40": false} {
		engine := ncclHang(incident - 3*time.Minute)
		engine.pod = servingPod
		round := assessWithGPUs(t, engine, fixture.DCGMPods, func(el time.Duration) []fixture.DCGMEdit {
			return []fixture.DCGMEdit{{Family: series.DCGMGPUUtil, GPU: "0", Value: util}, {Family: series.DCGMGPUUtil, GPU: "1", Value: util}}
		}, correlate.DefaultConfig())
		gs := groupsOn(round, "sglang-0")
		if len(gs) != 1 || gs[0].Cause() != detect.EngineHang {
			t.Fatalf("util %s: groups %+v", util, round.Groups)
		}
		if got := strings.Contains(gs[0].Finding.Diagnosis, "collective-hang fingerprint"); got != want {
			t.Errorf("util %s: fingerprint said %v, want %v: %s", util, got, want, gs[0].Finding.Diagnosis)
		}
	}
}

// A healthy replica beside a healthy exporter, and beside GPUs at their
// power cap under full load, pages nothing.
func TestHealthyReplicaAndGPUsPageNothing(t *testing.T) {
	for what, edits := range map[string]func(time.Duration) []fixture.DCGMEdit{
		"healthy": nil,
		"power cap at full load": func(time.Duration) []fixture.DCGMEdit {
			return []fixture.DCGMEdit{{Family: series.DCGMClockEventReasons, GPU: "0", Value: "4"}, {Family: series.DCGMGPUUtil, GPU: "0", Value: "100"}}
		},
	} {
		engine := healthyEngine()
		engine.pod = servingPod
		round := assessWithGPUs(t, engine, fixture.DCGMPods, edits, correlate.DefaultConfig())
		for _, g := range round.Groups {
			t.Errorf("%s: %s on %s: %s", what, g.Cause(), g.Finding.Replica, g.Finding.Summary)
		}
	}
}
