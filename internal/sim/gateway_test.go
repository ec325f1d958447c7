package sim

import (
	"bytes"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// gatewayValue is the value of the gateway's sample of family name whose
// labels include want.
func gatewayValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("the gateway does not export %s", name)
	}
	for _, m := range f.GetMetric() {
		match := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match == len(want) {
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

// The gateway in front of the demo fleet: healthy, every breaker closed;
// when sim-0's process dies, the gateway fails what sim-0 held with 502,
// retries the attempts that reach the dead worker until its breaker opens,
// and fails its health check; a minute after it opened, once sim-0 serves
// again, the breaker closes.
func TestGatewayTakesACrashedWorkerOutOfRotation(t *testing.T) {
	sc := DemoScenario(1)
	f := NewFleet(FleetConfig{Seed: 1, Start: t0, Scenario: sc, Warmup: time.Minute})
	url := func(i int) string { return "http://10.0.0." + string(rune('1'+i)) + ":30000" }
	read := func(at time.Duration) map[string]*dto.MetricFamily {
		f.Advance(t0.Add(at))
		var b bytes.Buffer
		if err := f.WriteGatewayMetrics(&b, url); err != nil {
			t.Fatal(err)
		}
		return parseExposition(t, b.Bytes())
	}
	worker := func(i int) map[string]string { return map[string]string{"worker": url(i)} }
	crash := phaseStart(t, sc, ClassCrash)

	before := read(crash - time.Second)
	for i := range 3 {
		if s := gatewayValue(t, before, "smg_worker_cb_state", worker(i)); s != 0 {
			t.Errorf("before the crash, sim-%d's breaker is %v, want closed", i, s)
		}
		if h := gatewayValue(t, before, "smg_worker_health", worker(i)); h != 1 {
			t.Errorf("before the crash, sim-%d's health is %v, want 1", i, h)
		}
	}
	bad0 := gatewayValue(t, before, "smg_http_responses_total", map[string]string{"status_code": "502"})
	retries0 := gatewayValue(t, before, "smg_worker_retries_total", nil)

	during := read(crash + 10*time.Second)
	if s := gatewayValue(t, during, "smg_worker_cb_state", worker(0)); s != 1 {
		t.Errorf("10 s into the crash, sim-0's breaker is %v, want open (1)", s)
	}
	if h := gatewayValue(t, during, "smg_worker_health", worker(0)); h != 0 {
		t.Errorf("10 s into the crash, sim-0's health is %v, want 0", h)
	}
	for i := 1; i < 3; i++ {
		if s := gatewayValue(t, during, "smg_worker_cb_state", worker(i)); s != 0 {
			t.Errorf("sim-%d's breaker is %v during sim-0's crash, want closed", i, s)
		}
	}
	if bad := gatewayValue(t, during, "smg_http_responses_total", map[string]string{"status_code": "502"}) - bad0; bad < 1 {
		t.Errorf("%v requests answered 502: sim-0 held requests when it died", bad)
	}
	// The requests sim-0 held count as breaker failures too, so fewer
	// new attempts reach it before the breaker opens.
	if r := gatewayValue(t, during, "smg_worker_retries_total", nil) - retries0; r < 1 || r > gatewayBreakerFailures {
		t.Errorf("%v retries, want 1 to %d: one per attempt that reached the dead worker before its breaker opened", r, gatewayBreakerFailures)
	}
	failed := gatewayValue(t, during, "smg_worker_cb_outcomes_total", map[string]string{"worker": url(0), "outcome": "failure"})
	if failed < gatewayBreakerFailures {
		t.Errorf("sim-0's failure outcomes %v, want at least %d", failed, gatewayBreakerFailures)
	}

	after := read(crash + 90*time.Second)
	if s := gatewayValue(t, after, "smg_worker_cb_state", worker(0)); s != 0 {
		t.Errorf("90 s after the crash, sim-0 serving again, its breaker is %v, want closed", s)
	}
	if h := gatewayValue(t, after, "smg_worker_health", worker(0)); h != 1 {
		t.Errorf("90 s after the crash, sim-0's health is %v, want 1", h)
	}
}
