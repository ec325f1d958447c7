package sim

import (
	"testing"
	"time"
)

// A slowed-down GPU makes every iteration of its replica slower, and only
// its replica's, and only for the phase.
func TestGPUSlowdownSlowsTheReplicasGPU(t *testing.T) {
	light := DefaultLoad()
	light.Rate = 2 // a short batch: the step's fixed cost dominates
	sc := Scenario{Name: "slow", Base: light, Phases: []Phase{
		{Name: "healthy", Duration: time.Minute},
		{Name: "slow", Duration: time.Minute, Replicas: []int{0}, GPUSlowdown: 4},
		{Name: "healthy"},
	}}
	f := NewFleet(FleetConfig{Seed: 4, Start: t0, Scenario: sc, Warmup: time.Minute, Replicas: 2})
	itl := func(w window) float64 { return w.itlSum / w.itlN }
	before := observeAll(t, f, 0, time.Minute)
	during := observeAll(t, f, time.Minute+10*time.Second, 2*time.Minute)
	after := observeAll(t, f, 2*time.Minute+30*time.Second, 3*time.Minute+30*time.Second)
	for i, ws := range [][]window{before, during, after} {
		t.Logf("window %d: sim-0 %v; sim-1 %v", i, ws[0], ws[1])
	}
	// 4x the cost per step, and more: requests take longer, so more of
	// them share each step.
	if r := itl(during[0]) / itl(before[0]); r < 4 {
		t.Errorf("sim-0 mean ITL %.4f s during the slowdown, %.4f s before: %.1fx, want at least 4x", itl(during[0]), itl(before[0]), r)
	}
	if r := itl(after[0]) / itl(before[0]); r > 1.3 {
		t.Errorf("sim-0 mean ITL %.4f s after the slowdown, %.4f s before: %.1fx, want back to normal", itl(after[0]), itl(before[0]), r)
	}
	if r := itl(during[1]) / itl(before[1]); r < 0.8 || r > 1.25 {
		t.Errorf("sim-1 mean ITL %.4f s during sim-0's slowdown, %.4f s before: %.1fx, want unchanged", itl(during[1]), itl(before[1]), r)
	}
	if during[0].aborted != 0 || during[0].retracted != 0 {
		t.Errorf("sim-0 during the slowdown: %v; a light load on a slower GPU neither times out nor retracts", during[0])
	}
}

// GPUSlowdownScenario: healthy with impatient clients, a GPU slowdown that
// sets off their retries, a loop that outlives the slowdown, and a drain
// once the clients stop retrying.
func TestGPUSlowdownScenario(t *testing.T) {
	sc := GPUSlowdownScenario(1)
	f := NewFleet(FleetConfig{Seed: 1, Start: t0, Scenario: sc, Warmup: time.Minute})
	at := func(name string) time.Duration { return phaseStart(t, sc, name) }
	itl := func(w window) float64 { return w.itlSum / w.itlN }
	s := time.Second
	healthy := observeAll(t, f, at("gpu_slowdown")-30*s, at("gpu_slowdown"))
	slow := observeAll(t, f, at("gpu_slowdown")+30*s, at("retry_loop"))
	loop := observeAll(t, f, at("retries_off")-30*s, at("retries_off"))
	drained := observeAll(t, f, at("retries_off")+90*s, at("retries_off")+2*time.Minute)
	for name, ws := range map[string][]window{"healthy": healthy, "gpu_slowdown": slow, "retry_loop": loop, "retries_off": drained} {
		for i, w := range ws {
			t.Logf("%s sim-%d: %v", name, i, w)
		}
	}
	h := healthy[0]
	if h.httpReq > 1.1*h.requests || h.aborted > 0.05*h.httpReq || h.maxQueue > 25 {
		t.Errorf("healthy: %v; want the impatient clients served, few timeouts, a short queue", h)
	}
	if w := slow[0]; itl(w) < 3*itl(h) || w.httpReq < 1.5*h.httpReq || w.aborted < 0.4*w.httpReq {
		t.Errorf("gpu_slowdown: %v; want ITL at least 3x healthy (%.4f s), arrivals up by half with retries, many attempts aborted", w, itl(h))
	}
	if w := loop[0]; itl(w) > 2*itl(h) || w.httpReq < 3*w.requests || w.lastQueue < 100 {
		t.Errorf("retry_loop: %v; want ITL near healthy (%.4f s) and the loop still on: arrivals ≫ completions, a full queue", w, itl(h))
	}
	if w := drained[0]; w.maxQueue > 5 || w.aborted > 0.05*w.httpReq {
		t.Errorf("retries_off: %v; want the queue drained and few aborts", w)
	}
	for _, ws := range [][]window{healthy, slow, loop, drained} {
		for i := 1; i < len(ws); i++ {
			if w := ws[i]; w.maxQueue > 25 || w.aborted > 0.05*w.httpReq {
				t.Errorf("sim-%d: %v; want it untouched by sim-0's incident", i, w)
			}
		}
	}
}
