package detect_test

import (
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Baselines that cannot absorb an incident, detector by detector: each
// relative detector reports the levels it compared against, keeps paging
// against them (a Frozen reference) after its own baseline has absorbed
// the incident, clears when the replica recovers, and a leftover frozen
// reference never makes a healthy replica page. The detectors whose
// peers can stand in for a missing baseline judge a young replica by
// their levels.

// relative are the relative detectors, each with a representative
// incident that starts about an hour into its scenario and never ends.
var relative = []struct {
	class    detect.Class
	incident func() *scenario
}{
	{detect.CacheCollapse, func() *scenario { return healthyEngine().with(hitRateChange(incidentLong, 0.05)...) }},
	{detect.QueueLatency, func() *scenario { return slowFirstToken(2.8, 2.3) }},
	{detect.DecodeSlowdown, func() *scenario { return slowDecode(0.07) }},
	{detect.KVSaturation, runawayDecode},
	{detect.PreemptStorm, func() *scenario { return preemptStorm(2) }},
	{detect.LoraThrash, loraThrash},
	{detect.PDTransferFailure, func() *scenario {
		return pdDecode().with(counter(series.TransferFailedTotal, stepAt(incident, 0, 0.5)))
	}},
	{detect.RetryAvalanche, retryAvalanche},
}

// mapped returns s with every function of time read through at: the
// scripted signal at at(el) instead of at el.
func (s *scenario) mapped(at func(time.Duration) time.Duration) *scenario {
	c := *s
	c.metrics = make([]metric, len(s.metrics))
	for i, m := range s.metrics {
		for _, f := range []*fn{&m.f, &m.value, &m.slow} {
			if g := *f; g != nil {
				*f = func(el time.Duration) float64 { return g(at(el)) }
			}
		}
		c.metrics[i] = m
	}
	return &c
}

// recoveredAt is s back to its state before the incident from until on.
func (s *scenario) recoveredAt(until time.Duration) *scenario {
	return s.mapped(func(el time.Duration) time.Duration {
		if el >= until {
			return 0
		}
		return el
	})
}

// healthy is s before its incident, for its whole length.
func (s *scenario) healthy() *scenario { return s.recoveredAt(0) }

// lasting is s with its incident going on for d past the scenario's end:
// the detector's own baseline holds nothing but the incident.
func (s *scenario) lasting(d time.Duration) *scenario {
	c := *s
	c.length += d
	return &c
}

// youngFor is s as a watchdog that started d before the scenario's end
// saw it: the same timeline, only its last d in the window.
func (s *scenario) youngFor(d time.Duration) *scenario {
	offset := s.length - d
	c := s.mapped(func(el time.Duration) time.Duration { return el + offset })
	c.length = d
	return c
}

// quiet is s at a hundredth of its traffic.
func (s *scenario) quiet() *scenario {
	c := *s
	c.metrics = make([]metric, len(s.metrics))
	for i, m := range s.metrics {
		if m.kind != gaugeKind {
			g := m.f
			m.f = func(el time.Duration) float64 { return g(el) / 100 }
		}
		c.metrics[i] = m
	}
	return &c
}

// corruptedAll is s with NaN and +Inf samples in every series.
func (s *scenario) corruptedAll() *scenario {
	c := *s
	c.metrics = make([]metric, len(s.metrics))
	for i, m := range s.metrics {
		v := math.NaN()
		if i%2 == 1 {
			v = math.Inf(1)
		}
		c.metrics[i] = m.corrupted(every(2+i%3, v))
	}
	return &c
}

// judge runs class's detector (default settings) on the scenario's window
// at its end, given refs.
func judge(t *testing.T, s *scenario, class detect.Class, refs detect.References) []detect.Finding {
	t.Helper()
	cfg := detect.DefaultConfig()
	store, now := s.run(t, cfg)
	d := detectorOf(t, cfg, class)
	var out []detect.Finding
	if !store.View(s.target, func(w detect.Window) { out = d.Detect(detect.WithReferences(w, refs), now) }) {
		t.Fatalf("replica %s not in the store", s.target)
	}
	checkSeverityDeclared(t, out)
	return out
}

func detectorOf(t *testing.T, cfg detect.Config, class detect.Class) detect.Detector {
	t.Helper()
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Class() == class {
			return d
		}
	}
	t.Fatalf("no %s detector", class)
	return nil
}

// frozenAtOnset is what the tracker freezes from the onset's finding.
func frozenAtOnset(t *testing.T, s *scenario, class detect.Class) detect.References {
	t.Helper()
	f := one(t, judge(t, s, class, nil))
	if len(f.Baselines) == 0 {
		t.Fatalf("%s reports no baselines: %+v", class, f)
	}
	for k, v := range f.Baselines {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("baseline %s = %v", k, v)
		}
	}
	return detect.References{class: {Source: detect.Frozen, Since: start.Add(incidentLong), Values: f.Baselines}}
}

// An incident that lasts more than its detector's baseline is absorbed by
// the window's baseline, and still pages against the baseline frozen at
// its onset; the finding reports the frozen levels it compared against.
// Once the replica is back as it was, the frozen baseline clears it.
func TestFrozenBaselineOutlastsTheWindowsAndClearsOnRecovery(t *testing.T) {
	for _, tt := range relative {
		t.Run(string(tt.class), func(t *testing.T) {
			frozen := frozenAtOnset(t, tt.incident(), tt.class)
			lasting := tt.incident().lasting(80 * minute)
			none(t, judge(t, lasting, tt.class, nil)) // the problem: absorbed
			f := one(t, judge(t, lasting, tt.class, frozen))
			if !maps.Equal(f.Baselines, frozen[tt.class].Values) {
				t.Errorf("compared against %v, want the frozen %v", f.Baselines, frozen[tt.class].Values)
			}
			recovered := tt.incident().lasting(40 * minute).recoveredAt(incident + 30*minute)
			none(t, judge(t, recovered, tt.class, frozen))
		})
	}
}

// A frozen reference left over for a class whose incident is over never
// makes a healthy replica page: at its usual heavy load, at a trickle of
// traffic, after a restart (a rollout's new process), with its series
// missing, or with NaN and Inf samples.
func TestLeftoverFrozenBaselineDoesNotPage(t *testing.T) {
	for _, tt := range relative {
		t.Run(string(tt.class), func(t *testing.T) {
			frozen := frozenAtOnset(t, tt.incident(), tt.class)
			restarted := tt.incident().healthy()
			restarted.restarts = []time.Duration{restarted.length - 3*minute}
			for name, s := range map[string]*scenario{
				"healthy heavy load": tt.incident().healthy(),
				"low traffic":        tt.incident().healthy().quiet(),
				"restarted":          restarted,
				"missing series":     newScenario(gauge(series.TokenUsage, constant(0.5))),
				"NaN/Inf samples":    tt.incident().healthy().corruptedAll(),
			} {
				t.Run(name, func(t *testing.T) { none(t, judge(t, s, tt.class, frozen)) })
			}
		})
	}
}

// A floor-decided finding (no baseline at its onset) reports NoBaseline,
// and frozen so, stays judged by its floor after the incident has filled
// its own baseline.
func TestFloorOnlyFindingsStayJudgedByTheirFloor(t *testing.T) {
	for _, class := range []detect.Class{detect.PreemptStorm, detect.PDTransferFailure} {
		t.Run(string(class), func(t *testing.T) {
			var s *scenario
			for _, r := range relative {
				if r.class == class {
					s = r.incident()
				}
			}
			young := s.youngFor(4 * minute)
			f := one(t, judge(t, young, class, nil))
			if f.Baselines[detect.NoBaseline] != 1 {
				t.Fatalf("a young replica's %s reports %v, want %s", class, f.Baselines, detect.NoBaseline)
			}
			frozen := detect.References{class: {Source: detect.Frozen, Values: f.Baselines}}
			lasting := s.lasting(80 * minute)
			none(t, judge(t, lasting, class, nil))
			one(t, judge(t, lasting, class, frozen))
			none(t, judge(t, s.lasting(40*minute).recoveredAt(incident+30*minute), class, frozen))
		})
	}
}

// observers are the detectors a young replica's healthy peers judge.
var observers = []detect.Class{detect.CacheCollapse, detect.DecodeSlowdown, detect.KVSaturation, detect.LoraThrash}

// A replica the watchdog met less than a baseline ago, broken all that
// time: its own history is no reference, so it needs its peers, and their
// levels (a healthy replica's) make it page; the finding reports them. A
// healthy young replica needs no peers, and their levels do not make it
// page.
func TestYoungReplicaIsJudgedByItsPeersLevels(t *testing.T) {
	for _, class := range observers {
		t.Run(string(class), func(t *testing.T) {
			var s *scenario
			for _, r := range relative {
				if r.class == class {
					s = r.incident()
				}
			}
			cfg := detect.DefaultConfig()
			o, ok := detectorOf(t, cfg, class).(detect.PeerObserver)
			if !ok {
				t.Fatalf("%s is no PeerObserver", class)
			}
			// The broken replica: the incident since a minute before the
			// watchdog met it, 15 minutes ago.
			broken := s.lasting(14 * minute).youngFor(15 * minute)
			healthy := s.healthy().youngFor(15 * minute)
			observe := func(s *scenario) (needs bool, levels map[string]float64) {
				store, now := s.run(t, cfg)
				store.View(s.target, func(w detect.Window) { needs, levels = o.NeedsPeers(w, now), o.Levels(w, now) })
				return needs, levels
			}
			needs, _ := observe(broken)
			if !needs {
				t.Errorf("the broken young replica does not need its peers")
			}
			needs, levels := observe(healthy)
			if needs || len(levels) == 0 {
				t.Fatalf("the healthy young replica: needs peers %v, levels %v", needs, levels)
			}
			peers := detect.References{class: {Source: detect.Peers, Since: start, Values: levels}}
			none(t, judge(t, broken, class, nil))
			f := one(t, judge(t, broken, class, peers))
			for k, v := range f.Baselines {
				if levels[k] != v {
					t.Errorf("compared %s against %v, the peers' level is %v", k, v, levels[k])
				}
			}
			none(t, judge(t, healthy, class, peers))
		})
	}
}

// While an incident's baselines are frozen, every baseline its page shows
// is the one from the onset: a context figure beside the rule's (the
// completions, the parts of the failures, a latency) whose baseline had
// absorbed the incident would read as if the incident were normal. The
// only exception is a comparison a detector names as a recent one ("half a
// range earlier": the growth of a backlog).
func TestFrozenPagesShowOnlyOnsetBaselines(t *testing.T) {
	for _, tt := range relative {
		t.Run(string(tt.class), func(t *testing.T) {
			onset := one(t, judge(t, tt.incident(), tt.class, nil))
			frozen := detect.References{tt.class: {Source: detect.Frozen, Since: start.Add(incidentLong), Values: onset.Baselines}}
			atOnset := map[string]float64{}
			for _, e := range onset.Evidence {
				if e.HasBaseline {
					atOnset[e.Name] = e.Baseline
				}
			}
			f := one(t, judge(t, tt.incident().lasting(80*minute), tt.class, frozen))
			for _, e := range f.Evidence {
				if !e.HasBaseline || strings.Contains(e.Name, "earlier") {
					continue
				}
				if want, ok := atOnset[e.Name]; !ok || math.Abs(e.Baseline-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Errorf("%s: baseline %v an hour into the incident, %v (known %v) at its onset", e.Name, e.Baseline, want, ok)
				}
			}
		})
	}
}
