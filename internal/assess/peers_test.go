package assess

import (
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// level is a fake relative detector whose level is the gauge "level". A
// replica whose gauge "young" is 1 has no baseline of its own and needs
// its peers; given a Peers (or Frozen) reference it fires when its level
// is at most half the reference's, reporting the reference as its
// baseline. With fires set it fires on those replicas whatever the
// reference (an incident of that class on them).
type level struct {
	class detect.Class
	fires map[string]bool
}

func (d level) Class() detect.Class { return d.class }

func (d level) Detect(w detect.Window, _ time.Time) []detect.Finding {
	r := w.Replica()
	f := detect.Finding{Class: d.class, Replica: r.Name, Model: r.Model, Severity: detect.Warning}
	if d.fires[r.Name] {
		return []detect.Finding{f}
	}
	ref, ok := detect.ReferenceOf(w, d.class)
	v, okV := w.Last(detect.Sel("level"))
	if !ok || !okV || v > ref.Values["level"]/2 {
		return nil
	}
	f.Summary = string(ref.Source)
	f.Baselines = ref.Values
	return []detect.Finding{f}
}

func (d level) NeedsPeers(w detect.Window, _ time.Time) bool {
	v, ok := w.Last(detect.Sel("young"))
	return ok && v == 1
}

func (d level) Levels(w detect.Window, _ time.Time) map[string]float64 {
	v, ok := w.Last(detect.Sel("level"))
	if !ok {
		return nil
	}
	return map[string]float64{"level": v}
}

// peer is one replica of a peers store.
type peer struct {
	name, model, engineType string
	level                   float64
	young                   bool
}

// peerStore holds the replicas, scraped every 10 s for a minute.
func peerStore(t *testing.T, peers ...peer) *window.Store {
	t.Helper()
	s, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= 6; i++ {
		at := t0.Add(time.Duration(i-6) * 10 * time.Second)
		for _, p := range peers {
			young := 0.0
			if p.young {
				young = 1
			}
			if err := s.Append(series.Scrape{Target: p.name, Kind: "engine", At: at, Groups: []series.Group{{Model: p.model, EngineType: p.engineType,
				Samples: []series.Sample{{Name: "level", Value: p.level}, {Name: "young", Value: young}, {Name: series.NumRunningReqs, Value: 4}}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s
}

func findingsOf(r Round, replica string) []detect.Finding {
	rep, _ := r.Replica(replica)
	return rep.Findings
}

// A young replica far below its healthy peers is judged by the median of
// their levels (two peers: their mean), and its finding reports that
// reference; the healthy peers, young too, are not flagged by a
// reference that the broken one drags down.
func TestYoungReplicaIsJudgedByTheMedianOfItsHealthyPeers(t *testing.T) {
	a := New([]detect.Detector{level{class: detect.CacheCollapse}}, Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()})
	s := peerStore(t,
		peer{name: "r1", model: "m", engineType: "unified", level: 0.8, young: true},
		peer{name: "r2", model: "m", engineType: "unified", level: 0.7, young: true},
		peer{name: "r3", model: "m", engineType: "unified", level: 0.05, young: true},
	)
	r := a.Assess(s, t0, nil)
	fs := findingsOf(r, "r3")
	if len(fs) != 1 || fs[0].Summary != string(detect.Peers) || fs[0].Baselines["level"] != 0.75 {
		t.Fatalf("r3: %+v, want one finding against its peers' median 0.75", fs)
	}
	for _, name := range []string{"r1", "r2"} {
		if fs := findingsOf(r, name); len(fs) != 0 {
			t.Errorf("%s: a healthy peer was flagged: %+v", name, fs)
		}
	}
	if len(r.Groups) != 1 || r.Groups[0].Finding.Replica != "r3" {
		t.Errorf("groups %+v, want r3's finding correlated", r.Groups)
	}
}

// Peers are the replicas of the same model and engine type, with no
// finding and no open incident of the class; fewer than MinPeers of them
// judge nothing, and a replica with a frozen reference keeps it.
func TestPeersAreHealthyReplicasOfTheSameModelAndEngineType(t *testing.T) {
	cfg := Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()}
	broken := peer{name: "r0", model: "m", engineType: "unified", level: 0.05, young: true}
	tests := []struct {
		name   string
		peers  []peer
		fires  map[string]bool
		refs   map[string]detect.References
		source detect.ReferenceSource // of r0's finding; "" for none
		level  float64
	}{
		{name: "another model", peers: []peer{broken,
			{name: "r1", model: "m", engineType: "unified", level: 0.8},
			{name: "r2", model: "other", engineType: "unified", level: 0.8}}},
		{name: "another engine type", peers: []peer{broken,
			{name: "r1", model: "m", engineType: "unified", level: 0.8},
			{name: "r2", model: "m", engineType: "prefill", level: 0.8}}},
		{name: "a peer with a finding of the class", peers: []peer{broken,
			{name: "r1", model: "m", engineType: "unified", level: 0.8},
			{name: "r2", model: "m", engineType: "unified", level: 0.8}},
			fires: map[string]bool{"r2": true}},
		{name: "a peer in an open incident of the class", peers: []peer{broken,
			{name: "r1", model: "m", engineType: "unified", level: 0.8},
			{name: "r2", model: "m", engineType: "unified", level: 0.8}},
			refs: map[string]detect.References{"r2": {detect.CacheCollapse: {Source: detect.Frozen, Values: map[string]float64{"level": 0.9}}}}},
		{name: "no model name", peers: []peer{{name: "r0", level: 0.05, young: true}, {name: "r1", level: 0.8}, {name: "r2", level: 0.8}}},
		{name: "three healthy peers", peers: []peer{broken,
			{name: "r1", model: "m", engineType: "unified", level: 0.8},
			{name: "r2", model: "m", engineType: "unified", level: 0.6},
			{name: "r3", model: "m", engineType: "unified", level: 0.9}},
			source: detect.Peers, level: 0.8},
		{name: "a frozen reference wins", peers: []peer{broken,
			{name: "r1", model: "m", engineType: "unified", level: 0.8},
			{name: "r2", model: "m", engineType: "unified", level: 0.8}},
			refs:   map[string]detect.References{"r0": {detect.CacheCollapse: {Source: detect.Frozen, Values: map[string]float64{"level": 0.5}}}},
			source: detect.Frozen, level: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New([]detect.Detector{level{class: detect.CacheCollapse, fires: tt.fires}}, cfg)
			fs := findingsOf(a.Assess(peerStore(t, tt.peers...), t0, tt.refs), "r0")
			switch {
			case tt.source == "" && len(fs) != 0:
				t.Errorf("r0 judged: %+v", fs)
			case tt.source != "" && (len(fs) != 1 || fs[0].Summary != string(tt.source) || fs[0].Baselines["level"] != tt.level):
				t.Errorf("r0: %+v, want one finding against a %s level %v", fs, tt.source, tt.level)
			}
		})
	}
}

// Judged again by its peers, a replica keeps its other findings in
// detector order, and its frozen references of other classes.
func TestPeersJudgeOnlyTheirClass(t *testing.T) {
	ds := []detect.Detector{
		findsOn{class: detect.PreemptStorm, on: map[string]bool{"r0": true}},
		level{class: detect.CacheCollapse},
		level{class: detect.QueueLatency},
		findsOn{class: detect.ErrorRate, on: map[string]bool{"r0": true}},
	}
	a := New(ds, Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()})
	s := peerStore(t,
		peer{name: "r0", model: "m", engineType: "unified", level: 0.05, young: true},
		peer{name: "r1", model: "m", engineType: "unified", level: 0.8},
		peer{name: "r2", model: "m", engineType: "unified", level: 0.8},
	)
	refs := map[string]detect.References{"r0": {detect.QueueLatency: {Source: detect.Frozen, Values: map[string]float64{"level": 0.2}}}}
	fs := findingsOf(a.Assess(s, t0, refs), "r0")
	want := []struct {
		class  detect.Class
		source string
	}{{detect.PreemptStorm, ""}, {detect.CacheCollapse, string(detect.Peers)}, {detect.QueueLatency, string(detect.Frozen)}, {detect.ErrorRate, ""}}
	if len(fs) != len(want) {
		t.Fatalf("findings %+v", fs)
	}
	for i, w := range want {
		if fs[i].Class != w.class || (w.source != "" && fs[i].Summary != w.source) {
			t.Errorf("finding %d: %s %q, want %s %q", i, fs[i].Class, fs[i].Summary, w.class, w.source)
		}
	}
}
