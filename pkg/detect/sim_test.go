package detect_test

import (
	"context"
	"net/http/httptest"
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
