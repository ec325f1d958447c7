package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// triggers are the run's trigger and update events that paged someone.
func (r *simRun) triggers() []notify.Event {
	var out []notify.Event
	for _, ev := range r.paged() {
		if ev.Kind != notify.KindResolve {
			out = append(out, ev)
		}
	}
	return out
}

// A cooling fault throttles sim-0's GPU (HW slowdown and HW thermal) for
// three minutes: its decode slows. That is one incident; from the round
// the throttle is judged (sustained over most of its range) it is named
// after the throttle, with the GPU in the headline, and the slowdown and
// what it causes folded into it. The slowdown, judged sooner, may page
// first: the same incident, re-titled by its next update.
func TestGPUThermalThrottlePagesOnceNamedAfterTheGPU(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	slackSrv, pd := integrationFakes(t)
	synctest.Test(t, func(t *testing.T) {
		sc := sim.GPUThermalScenario(1)
		run := startSimDaemon(t, "detectors: {gpu_throttled: {range: 20s}}\n", sim.FleetConfig{Seed: 1, Scenario: sc, Warmup: time.Minute}, slackSrv, pd)
		thermal := phaseStart(t, sc, "gpu_thermal")
		run.runUntil(t, thermal+2*time.Minute)

		triggers := run.triggers()
		if len(triggers) == 0 {
			t.Fatal("nothing paged")
		}
		key := triggers[0].Fingerprint
		named := false
		for i, ev := range triggers {
			line := run.pageLine(ev)
			if ev.Fingerprint != key || ev.Replica != "sim-0" {
				t.Errorf("a second incident: %s", line)
				continue
			}
			if ev.Class != string(detect.GPUThrottled) {
				if named || i > 0 {
					t.Errorf("page %d is %s, want gpu_throttled (only the first page may precede the throttle's verdict): %s", i+1, ev.Class, line)
				}
				continue
			}
			named = true
			if !strings.Contains(ev.Headline, "GPU 0 on node sim-node-0") || !regexp.MustCompile(`(?i)thermal`).MatchString(ev.Headline) {
				t.Errorf("the headline does not name the GPU (index, node) and the thermal throttle: %s", line)
			}
			if !strings.Contains(ev.Diagnosis, "GPU-") {
				t.Errorf("the diagnosis does not give the GPU's UUID for the hardware ticket: %s", ev.Diagnosis)
			}
		}
		last := triggers[len(triggers)-1]
		if !named {
			t.Fatalf("the incident was never named after the GPU throttle; last page: %s", run.pageLine(last))
		}
		if !slices.Contains(last.Explains, string(detect.DecodeSlowdown)) {
			t.Errorf("sim-0's decode slowdown is not folded into the GPU's incident: explains %v", last.Explains)
		}
	})
}

// sim-0's GPU falls off the bus (Xid 79): the process dies with it. The
// replica-down page is named after the GPU fault and names the GPU; one
// incident, critical.
func TestXid79PagesTheOutageNamedAfterTheGPU(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	slackSrv, pd := integrationFakes(t)
	synctest.Test(t, func(t *testing.T) {
		sc := sim.GPUFallenOffBusScenario(1)
		run := startSimDaemon(t, "", sim.FleetConfig{Seed: 1, Scenario: sc, Warmup: time.Minute}, slackSrv, pd)
		off := phaseStart(t, sc, "gpu_off_bus")
		run.runUntil(t, off+time.Minute)

		var critical []notify.Event
		for _, ev := range run.triggers() {
			if ev.Replica == "sim-0" && ev.Severity == detect.Critical {
				critical = append(critical, ev)
			}
			if ev.Replica != "sim-0" {
				t.Errorf("another replica paged: %s", run.pageLine(ev))
			}
		}
		if len(critical) == 0 {
			t.Fatal("sim-0's outage did not page critical")
		}
		first := critical[0]
		for _, ev := range critical {
			if ev.Fingerprint != first.Fingerprint {
				t.Errorf("a second critical incident: %s", run.pageLine(ev))
			}
		}
		last := critical[len(critical)-1]
		if last.Class != string(detect.GPUFault) || !strings.Contains(last.Headline, "79") || !strings.Contains(last.Headline, "sim-node-0") {
			t.Errorf("the outage page is not named after the GPU's Xid 79 on sim-node-0: %s", run.pageLine(last))
		}
		explainsDown := false
		for _, c := range last.Explains {
			explainsDown = explainsDown || c == string(detect.ReplicaDown)
		}
		if !explainsDown {
			t.Errorf("replica_down is not folded into the GPU fault: explains %v", last.Explains)
		}
	})
}
