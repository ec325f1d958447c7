package main

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sglang-watchdog/sglang-watchdog/deploy/grafana"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/leader"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
)

const dashboardFile = "../../deploy/grafana/sglang-watchdog.json"

// metricNames are the sample names an exposition carries: each family's
// name, and for histograms and summaries the _bucket, _sum and _count
// series PromQL selects.
func metricNames(t *testing.T, where string, exposition []byte) map[string]bool {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	out := map[string]bool{}
	for name, f := range families {
		out[name] = true
		switch f.GetType().String() {
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case "SUMMARY":
			out[name+"_sum"], out[name+"_count"] = true, true
		}
	}
	return out
}

// watchdogMetrics runs `watchdog run` (configured from a file, as in
// production, so the reload metrics are there too) against a replica that
// serves a captured SGLang exposition, and returns the metric names of its
// /metrics once every name in want is there, or what it had when the test's
// patience ran out. It re-reads /metrics after each scrape of the replica:
// families appear as the daemon scrapes, evaluates and notifies.
func watchdogMetrics(t *testing.T, want []string) map[string]bool {
	t.Helper()
	exposition, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	scraped := make(chan struct{}, 1)
	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			w.Write(exposition)
			select {
			case scraped <- struct{}{}:
			default:
			}
			return
		}
		w.WriteHeader(http.StatusOK) // /health_generate
	}))
	defer replica.Close()
	cfgPath := writeConfig(t, "scrape: {interval: 100ms}\nevaluation: {interval: 100ms}\n"+
		"targets:\n  - name: r0\n    url: "+replica.URL+"\n")
	_, logs := runDaemon(t, map[string]string{"WATCHDOG_CONFIG": cfgPath})
	startLine := logs.waitFor(t, "start", func(s string) bool { return strings.Contains(s, "watchdog started") })
	var started struct{ Listen string }
	if err := json.Unmarshal([]byte(startLine), &started); err != nil {
		t.Fatalf("start line %q: %v", startLine, err)
	}
	deadline := time.After(30 * time.Second)
	var names map[string]bool
	for {
		select {
		case <-scraped:
		case <-deadline:
			return names
		}
		resp, err := http.Get("http://" + started.Listen + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		names = metricNames(t, "the daemon's /metrics", body)
		if !slices.ContainsFunc(want, func(n string) bool { return !names[n] }) {
			return names
		}
	}
}

// Every query of the Grafana dashboard names metrics that exist: SGLang's
// in some captured exposition, the watchdog's in the daemon's own /metrics.
// (deploy/grafana's tests show the check fails on a made-up name.)
func TestDashboardQueriesNameRealMetrics(t *testing.T) {
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := grafana.Queries(dashboard)
	if err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	sglang := map[string]bool{}
	for _, name := range fixture.Names() {
		b, err := fixture.SGLang(name)
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(sglang, metricNames(t, name, b))
	}
	// DCGM_FI_*: the simulated dcgm-exporter, in both throttle field names.
	dcgm := map[string]bool{}
	for _, c := range []sim.GPUConfig{{}, {ThrottleReasonsLegacyName: true}} {
		var b bytes.Buffer
		if err := sim.NewFleet(sim.FleetConfig{Replicas: 1, GPU: c}).WriteGPUMetrics(&b, 0); err != nil {
			t.Fatal(err)
		}
		maps.Copy(dcgm, metricNames(t, "the simulated dcgm-exporter", b.Bytes()))
	}
	var wanted []string
	for _, q := range queries {
		for _, n := range q.Metrics {
			if strings.HasPrefix(n, "watchdog_") && !strings.HasPrefix(n, "watchdog_leader") {
				wanted = append(wanted, n)
			}
		}
	}
	watchdog := watchdogMetrics(t, wanted)
	// watchdog_leader*: an HA copy's (the daemon above runs alone), as the
	// elector registers them.
	reg := prometheus.NewRegistry()
	if _, err := leader.New(leader.DefaultConfig(), fake.NewClientset(), "dashboard-test", reg, nil); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		watchdog[mf.GetName()] = true
	}
	known := func(name string) bool {
		switch {
		case strings.HasPrefix(name, "watchdog_"):
			return watchdog[name]
		case strings.HasPrefix(name, "DCGM_FI_"):
			return dcgm[name]
		}
		return sglang[name]
	}
	for _, u := range grafana.Unknown(queries, known) {
		t.Errorf("%s: no such metric (SGLang names: the captures in internal/fixture; watchdog_*: the daemon's /metrics)", u)
	}
	// The dashboard covers both halves.
	var read []string
	for _, q := range queries {
		read = append(read, q.Metrics...)
	}
	for _, prefix := range []string{"sglang:", "watchdog_"} {
		if !slices.ContainsFunc(read, func(n string) bool { return strings.HasPrefix(n, prefix) }) {
			t.Errorf("no query reads a %s metric", prefix)
		}
	}
	if t.Failed() {
		var have []string
		for n := range watchdog {
			if strings.HasPrefix(n, "watchdog_") {
				have = append(have, n)
			}
		}
		slices.Sort(have)
		t.Logf("the daemon's watchdog_* metrics: %v", have)
	}
}
