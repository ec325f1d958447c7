package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
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
	// Journal stands in for the incident journal: it follows the
	// daemon's alerts API and the recorders.
	Journal *followedJournal
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
	d := &liveDaemon{Notifications: &recorder{}, Journal: &followedJournal{records: map[string]*incident.Record{}}}
	addr := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { driveFleet(ctx, fleet, io.Discard) })
	stderr := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- daemon(ctx, cfg, daemonIO{stdout: io.Discard, stderr: stderr,
			started: func(a string) { addr <- a },
			journal: d.Journal,
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
	d.Journal.base, d.Journal.sent = d.URL, d.Notifications
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v\n%s", err, stderr)
		}
		wg.Wait()
	})
	return d
}

// waitFiring follows the daemon until an alert of class fires on replica,
// at most within, and returns its journal record.
func (d *liveDaemon) waitFiring(t *testing.T, class detect.Class, replica string, within time.Duration) incident.Record {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range tick.C {
		if err := d.Journal.follow(); err != nil {
			t.Fatal(err)
		}
		for _, r := range d.Journal.Incidents() {
			if r.Class == class && r.Replica == replica && r.State == alert.StateFiring && len(r.Deliveries) > 0 {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s fired on %s within %s", class, replica, within)
		}
	}
	panic("unreachable")
}

// followedJournal is an incident.Reader filled from a live run: each
// follow() reads the daemon's alerts API and appends every open alert's
// evidence as one point per signal, and the recorders' notifications as
// deliveries. It stands in until the daemon's own journal feeds the
// pages. The numeric limit of a signal comes from its rule's text
// (">= 90%" is 0.9); the journal takes it from the detector.
type followedJournal struct {
	base string
	sent *recorder

	mu      sync.Mutex
	order   []string
	records map[string]*incident.Record
}

var ruleNumber = regexp.MustCompile(`^[<>]=?\s*([0-9.]+)(%?)`)

func (j *followedJournal) follow() error {
	resp, err := http.Get(j.base + "/api/v1/watchdog/alerts")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		EvaluatedAt time.Time `json:"evaluated_at"`
		Alerts      []struct {
			Fingerprint string            `json:"fingerprint"`
			State       alert.State       `json:"state"`
			Class       detect.Class      `json:"class"`
			Severity    string            `json:"severity"`
			Replica     string            `json:"replica"`
			Model       string            `json:"model"`
			Summary     string            `json:"summary"`
			Diagnosis   string            `json:"diagnosis"`
			Evidence    []detect.Evidence `json:"evidence"`
			Emergency   []string          `json:"emergency_steps"`
			RootCause   []string          `json:"root_cause_steps"`
			Runbook     string            `json:"runbook"`
			Explains    []detect.Class    `json:"explains"`
			ActiveAt    time.Time         `json:"active_at"`
			FiredAt     time.Time         `json:"fired_at"`
			ResolvedAt  time.Time         `json:"resolved_at"`
		} `json:"alerts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("alerts API: %w", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, a := range out.Alerts {
		id := incident.ID(a.Fingerprint, a.ActiveAt)
		r, ok := j.records[id]
		if !ok {
			r = &incident.Record{ID: id, Fingerprint: a.Fingerprint, OpenedAt: a.ActiveAt, Replicas: []string{a.Replica}}
			j.records[id] = r
			j.order = append([]string{id}, j.order...)
			r.Timeline = append(r.Timeline, incident.Event{At: a.ActiveAt, Kind: incident.EventFirstFinding, Text: a.Summary})
		}
		if r.FiredAt.IsZero() && !a.FiredAt.IsZero() {
			r.Timeline = append(r.Timeline, incident.Event{At: a.FiredAt, Kind: incident.EventFired, Text: a.Severity})
		}
		r.Class, r.Replica, r.Model, r.State, r.Severity = a.Class, a.Replica, a.Model, a.State, a.Severity
		r.FiredAt, r.ResolvedAt, r.Headline, r.Diagnosis = a.FiredAt, a.ResolvedAt, a.Summary, a.Diagnosis
		r.Emergency, r.RootCause, r.Runbook = a.Emergency, a.RootCause, a.Runbook
		r.Chain = append([]detect.Class{a.Class}, a.Explains...)
		if a.State == alert.StateResolved {
			continue
		}
		for _, e := range a.Evidence {
			i := 0
			for i < len(r.Signals) && r.Signals[i].Name != e.Name {
				i++
			}
			if i == len(r.Signals) {
				s := incident.Signal{Name: e.Name, Unit: e.Unit, Threshold: e.Threshold}
				if m := ruleNumber.FindStringSubmatch(e.Threshold); m != nil {
					s.Limit, _ = strconv.ParseFloat(m[1], 64)
					if m[2] == "%" {
						s.Limit /= 100
					}
					s.HasLimit = true
				}
				r.Signals = append(r.Signals, s)
			}
			r.Signals[i].Points = append(r.Signals[i].Points, incident.Point{At: out.EvaluatedAt, Value: e.Value, Baseline: e.Baseline, HasBaseline: e.HasBaseline})
		}
	}
	for _, r := range j.records {
		r.Deliveries = nil
	}
	for _, s := range j.sent.all() {
		for _, r := range j.records {
			if r.Fingerprint == s.ev.Fingerprint && !s.ev.At.Before(r.OpenedAt) {
				r.Deliveries = append(r.Deliveries, incident.Delivery{At: s.ev.At, Integration: s.integration, Kind: strings.ToLower(string(s.ev.Kind)), Attempt: 1, OK: true})
			}
		}
	}
	return nil
}

func (j *followedJournal) Incidents() []incident.Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]incident.Record, 0, len(j.order))
	for _, id := range j.order {
		out = append(out, j.copy(j.records[id]))
	}
	return out
}

func (j *followedJournal) Incident(id string) (incident.Record, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r, ok := j.records[id]
	if !ok {
		return incident.Record{}, false
	}
	return j.copy(r), true
}

// copy is a record follow() does not change under the reader.
func (j *followedJournal) copy(r *incident.Record) incident.Record {
	c := *r
	c.Signals = slices.Clone(r.Signals)
	return c
}
