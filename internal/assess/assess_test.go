package assess

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

var t0 = time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)

// findsOn is a detector that reports class on the replicas listed, with a
// triage line of its own when triaged (the assessment must replace it by
// the replica's one triage).
type findsOn struct {
	class   detect.Class
	on      map[string]bool
	triaged bool
}

func (d findsOn) Class() detect.Class { return d.class }
func (d findsOn) Detect(w detect.Window, _ time.Time) []detect.Finding {
	r := w.Replica()
	if !d.on[r.Name] {
		return nil
	}
	f := detect.Finding{Class: d.class, Replica: r.Name, Model: r.Model, Severity: detect.Critical, Summary: string(d.class)}
	if d.triaged {
		f.Triage = "a detector's own triage"
	}
	return []detect.Finding{f}
}

// store holds two replicas scraped every 10 s for two minutes: r1 with two
// data-parallel ranks whose KV usage differs, r2 quiet.
func store(t *testing.T) *window.Store {
	t.Helper()
	s, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rank := func(dp string) series.Labels { return series.Labels{{Name: "dp_rank", Value: dp}} }
	for i := 0; i <= 12; i++ {
		at := t0.Add(time.Duration(i-12) * 10 * time.Second)
		if err := s.Append(series.Scrape{Target: "r1", Kind: "engine", At: at, Groups: []series.Group{{Model: "m", Samples: []series.Sample{
			{Name: series.NumRunningReqs, Labels: rank("0"), Value: 10}, {Name: series.NumRunningReqs, Labels: rank("1"), Value: 6},
			{Name: series.NumQueueReqs, Labels: rank("0"), Value: 30}, {Name: series.NumQueueReqs, Labels: rank("1"), Value: 20},
			{Name: series.TokenUsage, Labels: rank("0"), Value: 0.3}, {Name: series.TokenUsage, Labels: rank("1"), Value: 0.99},
		}}}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(series.Scrape{Target: "r2", Kind: "engine", At: at, Groups: []series.Group{{Model: "m", Samples: []series.Sample{
			{Name: series.NumRunningReqs, Value: 1}, {Name: series.NumQueueReqs, Value: 0}, {Name: series.TokenUsage, Value: 0.1},
		}}}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestRoundHasOneSnapshotAndOneTriagePerReplica(t *testing.T) {
	ds := []detect.Detector{
		findsOn{class: detect.PreemptStorm, on: map[string]bool{"r1": true}, triaged: true},
		findsOn{class: detect.QueueLatency, on: map[string]bool{"r1": true}, triaged: true},
	}
	a := New(ds, Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()})
	round := a.Assess(store(t), t0, nil)

	if len(round.Replicas) != 2 || round.Replicas[0].Replica.Name != "r1" || round.Replicas[1].Replica.Name != "r2" {
		t.Fatalf("replicas %+v", round.Replicas)
	}
	r1, ok := round.Replica("r1")
	if !ok {
		t.Fatal("r1 not found")
	}
	sn := r1.Snapshot
	if sn.KVUsage == nil || *sn.KVUsage != 0.99 {
		t.Errorf("KV usage %v: want the fullest rank's 0.99, never a sum or an average of ranks", sn.KVUsage)
	}
	if sn.QueuedRequests == nil || *sn.QueuedRequests != 50 || sn.RunningRequests == nil || *sn.RunningRequests != 16 {
		t.Errorf("counts add up across ranks: queued %v running %v", sn.QueuedRequests, sn.RunningRequests)
	}
	if r1.Triage.Verdict == "" || r1.Triage.Verdict == detect.TriageUnknown {
		t.Errorf("no triage for r1: %+v", r1.Triage)
	}
	for _, f := range r1.Findings {
		if f.Triage != r1.Triage.String() || f.TriageVerdict != r1.Triage.Verdict {
			t.Errorf("%s carries triage %q, want the replica's one triage %q", f.Class, f.Triage, r1.Triage.String())
		}
	}
	if len(round.Groups) != 1 || round.Groups[0].Cause() != detect.PreemptStorm || !round.Groups[0].Shows("r1", detect.QueueLatency) {
		t.Fatalf("want one storm incident explaining the queue latency, got %+v", round.Groups)
	}
	if len(round.Findings()) != 2 {
		t.Errorf("findings %d", len(round.Findings()))
	}
	if _, ok := round.Replica("nope"); ok {
		t.Error("found a replica that does not exist")
	}
}

// A replica whose latency goes into executing single requests is sent to
// the finding on it that explains that latency (the root one, where one
// explains another), not to profiling; with none, the generic walk stays.
func TestExecutionTriageNamesTheFindingThatExplainsTheLatency(t *testing.T) {
	for _, c := range []struct {
		found []detect.Class
		cause string
	}{
		{[]detect.Class{detect.QueueLatency}, ""},
		{[]detect.Class{detect.QueueLatency, detect.ErrorRate}, ""},
		{[]detect.Class{detect.QueueLatency, detect.LoraThrash}, "LoRA thrash"},
		{[]detect.Class{detect.PreemptStorm, detect.CacheCollapse, detect.QueueLatency}, "Prefix-cache collapse"},
	} {
		var ds []detect.Detector
		for _, class := range c.found {
			ds = append(ds, findsOn{class: class, on: map[string]bool{"r2": true}, triaged: true})
		}
		a := New(ds, Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()})
		r2, _ := a.Assess(store(t), t0, nil).Replica("r2")
		tr := r2.Triage
		if tr.Verdict != detect.TriageExecution {
			t.Fatalf("%v: verdict %s, want the execution side (1 running, none queued, latency high)", c.found, tr.Verdict)
		}
		generic := strings.Contains(tr.NextStep, "only then profile")
		named := c.cause != "" && strings.Contains(tr.NextStep, "this replica's "+c.cause+" finding explains")
		if c.cause == "" && !generic || c.cause != "" && (generic || !named) {
			t.Errorf("%v: next step %q, want it to point at %q (none: the generic walk)", c.found, tr.NextStep, c.cause)
		}
	}
}

func TestAssessWindowIsTheSameDecisionForOneReplica(t *testing.T) {
	ds := []detect.Detector{findsOn{class: detect.QueueLatency, on: map[string]bool{"r1": true}, triaged: true}}
	a := New(ds, Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()})
	s := store(t)
	fleet := a.Assess(s, t0, nil)
	var one Round
	s.View("r1", func(w detect.Window) { one = a.AssessWindow(w, t0) })
	want, _ := fleet.Replica("r1")
	got := one.Replicas[0]
	if got.Triage != want.Triage || *got.Snapshot.KVUsage != *want.Snapshot.KVUsage || len(got.Findings) != len(want.Findings) {
		t.Errorf("one window: %+v\nfleet: %+v", got, want)
	}
}

// A round over many replicas, assessed by several workers at once, is the
// round one worker gives: the same replicas in the same order, the same
// findings, triage and snapshots, the same incidents. The fleet is the
// simulator's in a preempt storm, so that the real detectors find things
// (and, under -race, share nothing).
func TestAssessInParallelIsTheSameRound(t *testing.T) {
	cfg := detect.DefaultConfig()
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sim.IncidentScenario(sim.ClassPreemptStorm)
	if err != nil {
		t.Fatal(err)
	}
	const interval = 10 * time.Second
	fleet := sim.NewFleet(sim.FleetConfig{Replicas: 12, Seed: 3, Start: t0, Scenario: sc, Warmup: 5 * time.Minute})
	store := newStore(t, cfg, interval)
	dec := scrape.NewDecoder()
	one := New(ds, Config{Triage: cfg.Triage, Correlation: correlate.DefaultConfig(), Workers: 1})
	many := New(ds, Config{Triage: cfg.Triage, Correlation: correlate.DefaultConfig(), Workers: 5})
	var buf bytes.Buffer
	findings := 0
	for el := time.Duration(0); el <= sim.IncidentBaseline+6*time.Minute; el += interval {
		now := t0.Add(el)
		fleet.Advance(now)
		for i, name := range fleet.Replicas() {
			buf.Reset()
			scr := series.Scrape{Target: name, Kind: scrape.KindEngine, At: now}
			if err := fleet.WriteMetrics(&buf, i); err != nil {
				scr.Reason, scr.Error = series.FailureRefused, err.Error()
			} else if scr.Groups, err = dec.Decode(buf.Bytes(), 0); err != nil {
				t.Fatal(err)
			}
			if err := store.Append(scr); err != nil {
				t.Fatal(err)
			}
		}
		if el%(5*time.Minute) != 0 && el < sim.IncidentBaseline {
			continue
		}
		want, got := one.Assess(store, now, nil), many.Assess(store, now, nil)
		if len(got.Replicas) != 12 {
			t.Fatalf("%s: %d replicas assessed, want 12", el, len(got.Replicas))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: five workers' round differs from one's:\n%+v\n%+v", el, got, want)
		}
		findings += len(got.Findings())
	}
	if findings == 0 {
		t.Fatal("no finding in a preempt storm: the comparison compared nothing")
	}
}
