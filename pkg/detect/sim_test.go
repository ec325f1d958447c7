package detect_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// The project's queueing model of SGLang, run at ~90% load for 70
// minutes, scraped through the real scraper every 10 s into the real window:
// a healthy, heavily loaded fleet whose latencies are bursty as a real one's
// are. No detector may raise anything about it, whatever the minute.
func TestSimulatedHealthyFleetRaisesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("70 simulated minutes")
	}
	start := time.Date(2026, 5, 29, 13, 0, 0, 0, time.UTC)
	fleet := sim.NewFleet(sim.FleetConfig{Seed: 3, Start: start, Scenario: sim.HealthyScenario(), Warmup: 5 * time.Minute})
	cfg := detect.DefaultConfig()
	const interval = 10 * time.Second
	store, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: interval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var targets []scrape.Target
	for i, name := range fleet.Replicas() {
		srv := httptest.NewServer(fleet.Handler(i))
		defer srv.Close()
		targets = append(targets, scrape.Target{Name: name, URL: srv.URL + "/metrics", Kind: scrape.KindEngine})
	}
	for el := time.Duration(0); el <= 70*time.Minute; el += interval {
		now := start.Add(el)
		fleet.Advance(now)
		for _, tg := range targets {
			sc := scrape.ScrapeOnce(context.Background(), nil, tg, scrape.Options{})
			sc.At = now // synthetic time: the sim and the window share it
			if err := store.Append(sc); err != nil {
				t.Fatal(err)
			}
		}
		if el < 65*time.Minute || el%(30*time.Second) != 0 {
			continue // the hour of baseline first
		}
		for _, tg := range targets {
			store.View(tg.Name, func(w detect.Window) {
				for _, d := range ds {
					for _, f := range d.Detect(w, now) {
						t.Errorf("%s at %s: %s %s: %s | %s", tg.Name, el, f.Class, f.Severity, f.Summary, f.Diagnosis)
					}
				}
			})
		}
	}
}

// simulateCollapse runs one simulated replica through an hour of the
// base load, then the change for 5 minutes, scraped every 10 s through the
// real scraper into the real window, and returns the cache_collapse
// findings at the end.
func simulateCollapse(t *testing.T, base sim.Load, change func(*sim.Load)) []detect.Finding {
	t.Helper()
	start := time.Date(2026, 5, 29, 13, 0, 0, 0, time.UTC)
	sc := sim.Scenario{Name: "collapse", Base: base, Phases: []sim.Phase{
		{Name: "healthy", Duration: 62 * time.Minute},
		{Name: sim.ClassCacheCollapse, Class: sim.ClassCacheCollapse, Replicas: []int{0}, Change: change}}}
	fleet := sim.NewFleet(sim.FleetConfig{Seed: 1, Replicas: 1, Start: start, Scenario: sc, Warmup: 5 * time.Minute})
	cfg := detect.DefaultConfig()
	const interval = 10 * time.Second
	store, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: interval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fleet.Handler(0))
	defer srv.Close()
	tg := scrape.Target{Name: fleet.Replicas()[0], URL: srv.URL + "/metrics", Kind: scrape.KindEngine}
	end := 67 * time.Minute
	for el := time.Duration(0); el <= end; el += interval {
		fleet.Advance(start.Add(el))
		s := scrape.ScrapeOnce(context.Background(), nil, tg, scrape.Options{})
		s.At = start.Add(el)
		if err := store.Append(s); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []detect.Finding
	store.View(tg.Name, func(w detect.Window) {
		for _, d := range ds {
			if d.Class() == detect.CacheCollapse {
				out = d.Detect(w, start.Add(end))
			}
		}
	})
	return out
}

// The simulator's prompt change (a timestamp at the head of the system
// prompt) on its full, churning cache: evictions triple and KV usage
// quadruples, as a memory-pressure collapse would show them, yet the
// diagnosis keeps to the prompts because the rise is what the lost hits
// explain.
func TestSimulatedPromptChangeIsNotEvictionPressure(t *testing.T) {
	fs := simulateCollapse(t, sim.DefaultLoad(), func(l *sim.Load) { l.TimestampedSystemPrompt = true })
	f := one(t, fs)
	if f.Layer != detect.LayerPrefill {
		t.Errorf("layer = %s, want prefill", f.Layer)
	}
	contains(t, "diagnosis", f.Diagnosis, "prompts most likely stopped sharing prefixes", "no more than the lost hits add")
	if strings.Contains(f.Diagnosis, "evicted under memory pressure") || strings.Contains(f.Diagnosis, "normal") {
		t.Errorf("prompt change blamed on eviction or KV called normal: %s", f.Diagnosis)
	}
	t.Logf("%s | %s", f.Summary, f.Diagnosis)
}
