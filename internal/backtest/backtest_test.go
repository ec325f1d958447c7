package backtest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/configs"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

var start = time.Unix(1_800_000_000, 0)

// simulate scrapes one simulated replica (sim-0) running scenario every
// step for d, as the scraper would have delivered it to the window.
func simulate(t testing.TB, scenario sim.Scenario, d, step time.Duration) []series.Scrape {
	t.Helper()
	return simulateFleet(t, scenario, 1, d, step)
}

// simulateFleet scrapes every replica of a simulated fleet (sim-0, sim-1,
// ...) running scenario every step for d, in time order.
func simulateFleet(t testing.TB, scenario sim.Scenario, replicas int, d, step time.Duration) []series.Scrape {
	t.Helper()
	fleet := sim.NewFleet(sim.FleetConfig{Replicas: replicas, Seed: 1, Start: start, Scenario: scenario, Warmup: time.Minute})
	dec := scrape.NewDecoder()
	var out []series.Scrape
	var body bytes.Buffer
	for at := start; at.Before(start.Add(d)); at = at.Add(step) {
		fleet.Advance(at)
		for i, name := range fleet.Replicas() {
			body.Reset()
			sc := series.Scrape{Target: name, Kind: "engine", At: at, Duration: 2 * time.Millisecond}
			if err := fleet.WriteMetrics(&body, i); err != nil {
				sc.Reason, sc.Error = series.FailureRefused, "connection refused"
			} else if sc.Groups, err = dec.Decode(body.Bytes(), 0); err != nil {
				t.Fatal(err)
			}
			out = append(out, sc)
		}
	}
	return out
}

// demoSettings are the demo's settings: baselines of a minute, so an
// incident scenario's three healthy minutes fill them.
func demoSettings(t testing.TB) Settings {
	t.Helper()
	cfg, err := config.Parse(config.Default(), configs.Demo())
	if err != nil {
		t.Fatal(err)
	}
	return Settings{ScrapeInterval: cfg.Scrape.Interval, MaxSeries: cfg.Scrape.MaxSeries, Detectors: cfg.Detectors, Alerts: cfg.Alerts, Correlation: cfg.Correlation, SLOs: cfg.SLOs}
}

// A replay of each simulated incident class pages it on its replica after
// it starts, and pages nothing critical before.
func TestReplayPagesEachIncidentClass(t *testing.T) {
	for class, want := range map[string]string{
		sim.ClassPreemptStorm:   "preempt_storm",
		sim.ClassCacheCollapse:  "cache_collapse",
		sim.ClassRetryAvalanche: "retry_avalanche",
		sim.ClassCrash:          "replica_down",
	} {
		t.Run(class, func(t *testing.T) {
			scenario, err := sim.IncidentScenario(class)
			if err != nil {
				t.Fatal(err)
			}
			s := demoSettings(t)
			d := sim.IncidentBaseline + 2*time.Minute
			res, err := Run(Scrapes(simulate(t, scenario, d, time.Second), start, start.Add(d), time.Second), s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Rounds != int(d/time.Second)+1 || res.Scrapes != int(d/time.Second) {
				t.Errorf("%d rounds and %d scrapes, want %d and %d", res.Rounds, res.Scrapes, int(d/time.Second)+1, int(d/time.Second))
			}
			onset := start.Add(sim.IncidentBaseline)
			paged := false
			for _, ev := range res.Events {
				if ev.Severity == detect.Critical && ev.Kind != notify.KindResolve && ev.At.Before(onset) {
					t.Errorf("critical %s before the incident: %s", ev.Class, ev.Headline)
				}
				if ev.Class == want && ev.Replica == "sim-0" && ev.Severity == detect.Critical && (ev.Kind == notify.KindTrigger || ev.Kind == notify.KindUpdate) {
					paged = true
				}
			}
			if !paged {
				var lines []string
				for _, ev := range res.Events {
					lines = append(lines, ev.At.Sub(start).String()+" "+string(ev.Kind)+" "+ev.Severity.String()+" "+ev.Class+" "+ev.Headline)
				}
				t.Errorf("no critical %s page on sim-0; events:\n%s", want, strings.Join(lines, "\n"))
			}
		})
	}
}

// Healthy heavy load replays to no page at all.
func TestReplayOfHealthyLoadPagesNothing(t *testing.T) {
	d := 6 * time.Minute
	res, err := Run(Scrapes(simulate(t, sim.HealthyScenario(), d, time.Second), start, start.Add(d), time.Second), demoSettings(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range res.Events {
		if ev.Severity != detect.Info {
			t.Errorf("%s %s %s: %s", ev.Kind, ev.Severity, ev.Class, ev.Headline)
		}
	}
	if res.Rounds == 0 {
		t.Fatal("no rounds")
	}
}

// A round at t reads the scrapes taken before t, not those taken at t
// (in the daemon a scrape reaches the window only once it completed).
func TestScrapesPutRoundsBetweenScrapes(t *testing.T) {
	scrapes := []series.Scrape{{Target: "a", At: start}, {Target: "a", At: start.Add(time.Second)}, {Target: "a", At: start.Add(1500 * time.Millisecond)}}
	src := Scrapes(scrapes, start, start.Add(2*time.Second), time.Second)
	var got []string
	for {
		step, ok, err := src.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if step.Scrape != nil {
			got = append(got, "scrape "+step.Scrape.At.Sub(start).String())
		} else {
			got = append(got, "round "+step.Evaluate.Sub(start).String())
		}
	}
	want := "round 0s, scrape 0s, round 1s, scrape 1s, scrape 1.5s, round 2s"
	if g := strings.Join(got, ", "); g != want {
		t.Errorf("steps %s, want %s", g, want)
	}
}

// The cost of replaying one replica's hour at a 5 s scrape and evaluation
// interval with the default settings (1 h baselines): the hope is
// a week in seconds. Rendering the simulated expositions is not timed.
func BenchmarkBacktestHour(b *testing.B) {
	const step = 5 * time.Second
	scrapes := simulate(b, sim.HealthyScenario(), time.Hour, step)
	cfg := config.Default()
	s := Settings{ScrapeInterval: step, MaxSeries: cfg.Scrape.MaxSeries, Detectors: cfg.Detectors, Alerts: cfg.Alerts, Correlation: cfg.Correlation}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := Run(Scrapes(scrapes, start, start.Add(time.Hour), step), s)
		if err != nil || res.Rounds != 721 {
			b.Fatalf("%d rounds, err %v", res.Rounds, err)
		}
	}
}
