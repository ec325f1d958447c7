package scrape

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// compressedDetectors is the default configuration with the ranges and
// baselines of the incident detectors compressed as configs/demo.yaml
// does, so the simulated incidents page within minutes.
func compressedDetectors() detect.Config {
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.PreemptStormConfig) {
		s.Range, s.Baseline, s.MinRetractionsPerSecond, s.CriticalRetractionsPerSecond = 20*time.Second, time.Minute, 0.05, 0.1
	})
	detect.Edit(&cfg, func(s *detect.RetryAvalancheConfig) {
		s.Range, s.Baseline, s.MinRequests = 20*time.Second, time.Minute, 50
	})
	detect.Edit(&cfg, func(s *detect.CacheCollapseConfig) {
		s.Range, s.Baseline, s.MinPromptTokens, s.RestartGrace = 20*time.Second, time.Minute, 5000, time.Minute
	})
	detect.Edit(&cfg, func(s *detect.ErrorRateConfig) { s.Range = 30 * time.Second })
	detect.Edit(&cfg, func(s *detect.ReplicaDownConfig) { s.FailuresToPage, s.CrashLoopWindow = 3, 5*time.Minute })
	detect.Edit(&cfg, func(s *detect.ReplicaRestartedConfig) { s.Lookback = time.Minute })
	return cfg
}

// replayPath is one way from exposition bytes to assessment rounds.
type replayPath struct {
	dec      *Decoder
	store    *window.Store
	assessor *assess.Assessor
}

func newReplayPath(t *testing.T, cfg detect.Config, parser Parser, interval time.Duration) *replayPath {
	t.Helper()
	store, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: interval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &replayPath{
		dec:      &Decoder{parser: parser, norm: newNormalizer()},
		store:    store,
		assessor: assess.New(ds, assess.Config{Triage: cfg.Triage, Correlation: correlate.DefaultConfig()}),
	}
}

func (p *replayPath) append(t *testing.T, sc series.Scrape, body []byte) {
	t.Helper()
	if body != nil {
		groups, err := p.dec.Decode(body, 0)
		if err != nil {
			t.Fatal(err)
		}
		sc.Groups = groups
	}
	if err := p.store.Append(sc); err != nil {
		t.Fatal(err)
	}
}

// round renders an assessment round (every replica's findings, triage and
// snapshot, and the correlated incidents) as JSON.
func (p *replayPath) round(t *testing.T, now time.Time) (string, []detect.Finding) {
	t.Helper()
	r := p.assessor.Assess(p.store, now, nil)
	b, err := json.Marshal(struct {
		Replicas  []assess.Replica
		Incidents []correlate.Group
	}{r.Replicas, r.Groups})
	if err != nil {
		t.Fatal(err)
	}
	return string(b), r.Findings()
}

// The same scrape sequence of a simulated fleet through the reference
// path (expfmt, every family kept) and the daemon's path (textparse,
// only the families read) gives the same findings, triage, snapshots and
// incidents, round by round, through each incident class the simulator
// plays: a preemption storm, a prefix-cache collapse, a retry avalanche
// and a crash with a restart.
func TestReplayReferenceAndFilteredPathsAgree(t *testing.T) {
	cfg := compressedDetectors()
	start := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	const interval, every = 5 * time.Second, 10 * time.Second
	for class, pages := range map[string]detect.Class{
		sim.ClassPreemptStorm:   detect.PreemptStorm,
		sim.ClassCacheCollapse:  detect.CacheCollapse,
		sim.ClassRetryAvalanche: detect.RetryAvalanche,
		sim.ClassCrash:          detect.ReplicaDown,
	} {
		t.Run(class, func(t *testing.T) {
			sc, err := sim.IncidentScenario(class)
			if err != nil {
				t.Fatal(err)
			}
			fleet := sim.NewFleet(sim.FleetConfig{Replicas: 2, Seed: 11, Start: start, Scenario: sc, Warmup: 5 * time.Minute})
			ref := newReplayPath(t, cfg, newExpfmtParser(), interval)
			kept := newReplayPath(t, cfg, newTextParser(newKeepSet(assess.Reads(cfg)).filter()), interval)
			var buf bytes.Buffer
			seen := false
			for el := time.Duration(0); el <= sim.IncidentBaseline+4*time.Minute; el += interval {
				now := start.Add(el)
				fleet.Advance(now)
				for i, name := range fleet.Replicas() {
					buf.Reset()
					scr := series.Scrape{Target: name, Kind: KindEngine, At: now}
					var body []byte
					if err := fleet.WriteMetrics(&buf, i); err != nil {
						scr.Reason, scr.Error = series.FailureRefused, err.Error()
					} else {
						body = buf.Bytes()
					}
					ref.append(t, scr, body)
					kept.append(t, scr, body)
				}
				if el%every != 0 {
					continue
				}
				want, fs := ref.round(t, now)
				got, _ := kept.round(t, now)
				if got != want {
					t.Fatalf("at %s the paths disagree:\nreference: %s\nfiltered:  %s", el, want, got)
				}
				for _, f := range fs {
					seen = seen || f.Class == pages
				}
			}
			if !seen {
				t.Errorf("no %s finding in any round: the replay does not compare the incident", pages)
			}
		})
	}
}
