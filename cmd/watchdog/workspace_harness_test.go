package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// liveDaemon is the real daemon on a real loopback listener (a browser
// needs a socket) watching a simulated fleet in real time, with the
// demo's compressed timings and recorders in place of Slack and
// PagerDuty.
type liveDaemon struct {
	// URL is the daemon's base URL, http://127.0.0.1:port.
	URL string
	// Notifications are what Slack and PagerDuty were sent.
	Notifications *recorder
}

// stormAfter is a scenario: healthy for d, then a preempt storm on sim-0
// (the demo's) for good.
func stormAfter(d time.Duration) sim.Scenario {
	demo := sim.DemoScenario(1)
	storm := demo.Phases[1]
	return sim.Scenario{Name: "workspace", Base: demo.Base, Phases: []sim.Phase{{Name: "healthy", Duration: d}, storm}}
}

// startLiveDaemon runs daemon() until the test ends. configure, when set,
// edits the configuration after the targets are added.
func startLiveDaemon(t *testing.T, scenario sim.Scenario, configure func(*config.Config)) *liveDaemon {
	t.Helper()
	cfg, err := demoConfig()
	if err != nil {
		t.Fatal(err)
	}
	fleet := sim.NewFleet(sim.FleetConfig{Seed: 1, Start: time.Now(), Scenario: scenario, Warmup: time.Minute})
	for i, name := range fleet.Replicas() {
		srv := &http.Server{Handler: fleet.Handler(i), ReadHeaderTimeout: 5 * time.Second}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		cfg.Targets = append(cfg.Targets, config.Target{Name: name, URL: "http://" + ln.Addr().String(), Kind: "engine"})
	}
	cfg.ListenAddress = "127.0.0.1:0"
	cfg.StateDir = t.TempDir()
	if configure != nil {
		configure(&cfg)
	}
	d := &liveDaemon{Notifications: &recorder{}}
	addr := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { driveFleet(ctx, fleet, io.Discard) })
	stderr := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- daemon(ctx, cfg, daemonIO{stdout: io.Discard, stderr: stderr,
			started: func(a string) { addr <- a },
			extraIntegrations: []notify.Integration{
				{Name: notify.IntegrationPagerDuty, Notifier: d.Notifications.as(notify.IntegrationPagerDuty)},
				{Name: notify.IntegrationSlack, Notifier: d.Notifications.as(notify.IntegrationSlack)},
			}})
	}()
	select {
	case a := <-addr:
		d.URL = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("daemon: %v\n%s", err, stderr)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v\n%s", err, stderr)
		}
		wg.Wait()
	})
	return d
}

// waitFiring follows the daemon's incident journal until an incident of
// class fires on replica and a notification of it was delivered, at most
// within, and returns its record as the journal's API serves it.
func (d *liveDaemon) waitFiring(t *testing.T, class detect.Class, replica string, within time.Duration) incident.Record {
	t.Helper()
	var rec incident.Record
	eventually(t, within, fmt.Sprintf("a delivered %s incident on %s", class, replica), func() bool {
		r, ok := d.findIncident(t, "firing", class, replica)
		rec = r
		return ok && len(r.Deliveries) > 0
	})
	return rec
}

// waitIncident follows the journal until an incident of class on replica
// is in state (pending, firing, resolved), at most within.
func (d *liveDaemon) waitIncident(t *testing.T, state string, class detect.Class, replica string, within time.Duration) incident.Record {
	t.Helper()
	var rec incident.Record
	deadline := time.Now().Add(within)
	what := fmt.Sprintf("a %s %s incident on %s", state, class, replica)
	eventually(t, within, what, func() bool {
		var ok bool
		rec, ok = d.findIncident(t, state, class, replica)
		if !ok && time.Now().Add(time.Second).After(deadline) {
			var all any
			d.getJSON(t, "/api/v1/incidents", &all)
			t.Logf("waiting for %s; the journal holds: %v", what, all)
		}
		return ok
	})
	return rec
}

func (d *liveDaemon) findIncident(t *testing.T, state string, class detect.Class, replica string) (incident.Record, bool) {
	t.Helper()
	var list struct {
		Incidents []incident.Summary `json:"incidents"`
	}
	d.getJSON(t, "/api/v1/incidents?state="+state, &list)
	for _, s := range list.Incidents {
		if s.Class == class && s.Replica == replica {
			return d.Incident(t, s.ID), true
		}
	}
	return incident.Record{}, false
}

// sentFor is what the fake Slack and PagerDuty received for fingerprint.
func (d *liveDaemon) sentFor(fingerprint string) []recorded {
	return slices.DeleteFunc(d.Notifications.all(), func(r recorded) bool { return r.ev.Fingerprint != fingerprint })
}

// silencedTriggers reads watchdog_notifications_silenced_total{kind="trigger"}
// from the daemon's own /metrics.
func (d *liveDaemon) silencedTriggers(t *testing.T) float64 {
	t.Helper()
	resp, err := http.Get(d.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	for _, m := range families["watchdog_notifications_silenced_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" && l.GetValue() == string(notify.KindTrigger) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// eventually polls cond once a second until it holds, failing the test
// after within. The daemon runs on the real clock here (a browser needs
// real sockets and real time), so waiting is polling.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if cond() {
		return
	}
	deadline := time.Now().Add(within)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range tick.C {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", within, what)
		}
	}
}

// Incident is the journal's record of id as its API serves it.
func (d *liveDaemon) Incident(t *testing.T, id string) incident.Record {
	t.Helper()
	var rec incident.Record
	d.getJSON(t, "/api/v1/incidents/"+id, &rec)
	return rec
}

func (d *liveDaemon) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(d.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}
