package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

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
	deadline := time.Now().Add(within)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range tick.C {
		var list struct {
			Incidents []incident.Summary `json:"incidents"`
		}
		d.getJSON(t, "/api/v1/incidents?state=firing", &list)
		for _, s := range list.Incidents {
			if s.Class != class || s.Replica != replica {
				continue
			}
			rec := d.Incident(t, s.ID)
			if len(rec.Deliveries) > 0 {
				return rec
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s fired on %s within %s", class, replica, within)
		}
	}
	panic("unreachable")
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
