package correlate

import (
	"slices"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// gatewayFleet is a gateway "gw" in front of the engine replicas w0..wn-1,
// each serving at 10.0.0.<i>:30000.
func gatewayFleet(n int) []detect.Replica {
	out := []detect.Replica{{Name: "gw", Kind: "gateway"}}
	for i := range n {
		out = append(out, detect.Replica{Name: "w" + string(rune('0'+i)), Kind: "engine", Model: "m",
			Address: "10.0.0." + string(rune('0'+i)) + ":30000"})
	}
	return out
}

// gatewayFinding is a finding on the gateway whose failures come from
// the workers at the addresses failing, of workers in all.
func gatewayFinding(class detect.Class, workers int, failing ...detect.UpstreamWorker) detect.Finding {
	g := f("gw", "", class, detect.LayerClient, detect.Critical)
	g.Upstream = &detect.Upstream{Workers: workers, Failing: failing}
	return g
}

func open(addr string) detect.UpstreamWorker {
	return detect.UpstreamWorker{Worker: addr, Breaker: "open", FailuresPerSecond: 12}
}

func TestGatewayFailuresFromAWorkerWithItsOwnIncidentJoinIt(t *testing.T) {
	hang := f("w0", "m", detect.EngineHang, detect.LayerDecode, detect.Warning)
	in := []detect.Finding{hang, gatewayFinding(detect.RetryAvalanche, 3, open("10.0.0.0:30000"))}
	out := Correlate(DefaultConfig(), in, gatewayFleet(3))
	if len(out) != 1 {
		t.Fatalf("want one incident, got %v", classes(out))
	}
	g := out[0]
	if g.Cause() != detect.EngineHang || g.Finding.Replica != "w0" {
		t.Errorf("incident %s on %s, want engine_hang on w0: named after the worker's cause", g.Cause(), g.Finding.Replica)
	}
	if g.Finding.Severity != detect.Critical {
		t.Errorf("severity %v, want the gateway's critical: users fail in front of the worker", g.Finding.Severity)
	}
	if !g.Shows("gw", detect.RetryAvalanche) || !slices.Contains(g.Finding.Consequences, detect.RetryAvalanche) {
		t.Errorf("the gateway's retry avalanche is not part of the incident: members %v, consequences %v", g.Classes(), g.Finding.Consequences)
	}
	if !slices.ContainsFunc(g.Finding.Evidence, func(e detect.Evidence) bool { return e.Name == "gw: retry_avalanche signal" }) {
		t.Errorf("the gateway's numbers are not on the page, named after the gateway: %v", g.Finding.Evidence)
	}
	for _, want := range []string{"10.0.0.0:30000 (breaker open, 12 failed attempts/s)", "took it out of rotation"} {
		if !strings.Contains(g.Finding.Diagnosis, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, g.Finding.Diagnosis)
		}
	}
}

func TestGatewayJoinsTheWorkerByTheConfiguredMapping(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GatewayWorkers = map[string]string{"http://sgl-0.sgl.svc:30000": "w0"}
	down := f("w0", "m", detect.ReplicaDown, detect.LayerProcess, detect.Critical)
	in := []detect.Finding{down, gatewayFinding(detect.ErrorRate, 2, open("sgl-0.sgl.svc:30000"))}
	out := Correlate(cfg, in, gatewayFleet(2))
	if len(out) != 1 || out[0].Cause() != detect.ReplicaDown || !out[0].Shows("gw", detect.ErrorRate) {
		t.Fatalf("want one replica_down incident on w0 holding the gateway's error_rate, got %v", classes(out))
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("a valid mapping is refused: %v", err)
	}
	cfg.GatewayWorkers = map[string]string{"http://sgl-0.sgl.svc:30000": ""}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "correlation.gateway_workers") {
		t.Errorf("a mapping without a target: %v, want an error naming correlation.gateway_workers", err)
	}
}

func TestGatewayFailuresFromAnUnwatchedWorkerStayTheGatewaysAndSaySo(t *testing.T) {
	in := []detect.Finding{gatewayFinding(detect.RetryAvalanche, 3, open("10.9.9.9:30000"))}
	out := Correlate(DefaultConfig(), in, gatewayFleet(2))
	if len(out) != 1 || out[0].Finding.Replica != "gw" {
		t.Fatalf("want the gateway's own incident, got %v", classes(out))
	}
	d := out[0].Finding.Diagnosis
	if !strings.Contains(d, "does not watch 10.9.9.9:30000") {
		t.Errorf("the diagnosis does not say the failing worker is not watched:\n%s", d)
	}
}

func TestGatewayFailuresFromAHealthyWatchedWorkerStayTheGateways(t *testing.T) {
	in := []detect.Finding{gatewayFinding(detect.RetryAvalanche, 3, open("10.0.0.1:30000"))}
	out := Correlate(DefaultConfig(), in, gatewayFleet(3))
	if len(out) != 1 || out[0].Finding.Replica != "gw" || out[0].Cause() != detect.RetryAvalanche {
		t.Fatalf("want the gateway's own incident, got %v", classes(out))
	}
	if strings.Contains(out[0].Finding.Diagnosis, "does not watch") {
		t.Errorf("a watched worker is called unwatched:\n%s", out[0].Finding.Diagnosis)
	}
}

// A gateway shedding because every worker behind it is full is overload,
// not a worker fault: it stays its own incident, and the workers' stay
// theirs.
func TestGatewaySheddingWithEveryWorkerSaturatedIsOverload(t *testing.T) {
	var in []detect.Finding
	var failing []detect.UpstreamWorker
	for i := range 2 {
		q := f("w"+string(rune('0'+i)), "m", detect.QueueLatency, detect.LayerQueue, detect.Warning)
		q.TriageVerdict = detect.TriageSaturated
		in = append(in, q)
		failing = append(failing, detect.UpstreamWorker{Worker: "10.0.0." + string(rune('0'+i)) + ":30000", FailuresPerSecond: 5})
	}
	in = append(in, gatewayFinding(detect.ErrorRate, 2, failing...))
	out := Correlate(DefaultConfig(), in, gatewayFleet(2))
	if len(out) != 3 || !slices.ContainsFunc(out, func(g Group) bool { return g.Finding.Replica == "gw" && g.Cause() == detect.ErrorRate }) {
		t.Fatalf("want the gateway's overload and each worker's queue as they were, got %v", classes(out))
	}
}

// One saturated worker among healthy ones is a worker at fault (an
// imbalance or a slow worker): the gateway's failures join it.
func TestGatewayFailuresFromOneSaturatedWorkerJoinIt(t *testing.T) {
	q := f("w0", "m", detect.QueueLatency, detect.LayerQueue, detect.Warning)
	q.TriageVerdict = detect.TriageSaturated
	in := []detect.Finding{q, gatewayFinding(detect.ErrorRate, 3, detect.UpstreamWorker{Worker: "10.0.0.0:30000", FailuresPerSecond: 5})}
	out := Correlate(DefaultConfig(), in, gatewayFleet(3))
	if len(out) != 1 || out[0].Cause() != detect.QueueLatency || !out[0].Shows("gw", detect.ErrorRate) {
		t.Fatalf("want w0's queue incident holding the gateway's failures, got %v", classes(out))
	}
	if strings.Contains(out[0].Finding.Diagnosis, "out of rotation") {
		t.Errorf("the breaker stayed closed, yet the page says the worker was taken out of rotation:\n%s", out[0].Finding.Diagnosis)
	}
}

// Once the gateway took the worker out of rotation, the page's first
// step is no longer to drain it but whether the rest carry its traffic,
// in the numbers the gateway reports.
func TestGatewayRotationOutComesFirstInTheSteps(t *testing.T) {
	for _, c := range []struct {
		name    string
		workers int
		failing []detect.UpstreamWorker
		want    string
	}{
		{"healthy others", 3, []detect.UpstreamWorker{open("10.0.0.0:30000")}, "check that the other 2 workers (queue, TTFT) carry its traffic"},
		{"another fails", 3, []detect.UpstreamWorker{open("10.0.0.0:30000"), open("10.0.0.1:30000")}, "lands on the other 2 workers, and 1 of them fails too"},
		{"only worker", 1, []detect.UpstreamWorker{open("10.0.0.0:30000")}, "has no other worker: every request through it fails"},
		{"count not reported", 0, []detect.UpstreamWorker{open("10.0.0.0:30000")}, "check that the other workers (queue, TTFT)"},
	} {
		down := f("w0", "m", detect.ReplicaDown, detect.LayerProcess, detect.Critical)
		down.Emergency = []string{"Confirm from outside the watchdog."}
		out := Correlate(DefaultConfig(), []detect.Finding{down, gatewayFinding(detect.ErrorRate, c.workers, c.failing...)}, gatewayFleet(3))
		i := slices.IndexFunc(out, func(g Group) bool { return g.Cause() == detect.ReplicaDown })
		if i < 0 {
			t.Fatalf("%s: no replica_down incident in %v", c.name, classes(out))
		}
		steps := out[i].Finding.Emergency
		if len(steps) != 2 || !strings.Contains(steps[0], "gw has already taken this worker out of rotation") || !strings.Contains(steps[0], c.want) {
			t.Errorf("%s: steps %q, want first the rotation step with %q, then the detector's", c.name, steps, c.want)
		}
	}
	// A closed breaker leaves the steps as the detector wrote them.
	down := f("w0", "m", detect.ReplicaDown, detect.LayerProcess, detect.Critical)
	down.Emergency = []string{"Confirm from outside the watchdog."}
	out := Correlate(DefaultConfig(), []detect.Finding{down, gatewayFinding(detect.ErrorRate, 3,
		detect.UpstreamWorker{Worker: "10.0.0.0:30000", FailuresPerSecond: 5})}, gatewayFleet(3))
	if len(out) != 1 || len(out[0].Finding.Emergency) != 1 {
		t.Errorf("breaker closed: steps %q, want the detector's alone", out[0].Finding.Emergency)
	}
}
