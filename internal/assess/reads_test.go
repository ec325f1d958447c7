package assess

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// recordingWindow notes every family asked of the window it wraps: the
// family of a selector, of Has, and a histogram's _bucket (Quantile) and
// _count (Observations).
type recordingWindow struct {
	detect.Window
	asked map[string]bool
}

func (r recordingWindow) Last(sel detect.Selector) (float64, bool) {
	r.asked[sel.Name] = true
	return r.Window.Last(sel)
}
func (r recordingWindow) Has(name string) bool { r.asked[name] = true; return r.Window.Has(name) }
func (r recordingWindow) Increase(sel detect.Selector, from, to time.Time) (float64, bool) {
	r.asked[sel.Name] = true
	return r.Window.Increase(sel, from, to)
}
func (r recordingWindow) Rate(sel detect.Selector, from, to time.Time) (float64, bool) {
	r.asked[sel.Name] = true
	return r.Window.Rate(sel, from, to)
}
func (r recordingWindow) Avg(sel detect.Selector, from, to time.Time) (float64, bool) {
	r.asked[sel.Name] = true
	return r.Window.Avg(sel, from, to)
}
func (r recordingWindow) Max(sel detect.Selector, from, to time.Time) (float64, bool) {
	r.asked[sel.Name] = true
	return r.Window.Max(sel, from, to)
}
func (r recordingWindow) Min(sel detect.Selector, from, to time.Time) (float64, bool) {
	r.asked[sel.Name] = true
	return r.Window.Min(sel, from, to)
}
func (r recordingWindow) Quantile(q float64, family string, match []detect.Match, from, to time.Time) (float64, bool) {
	r.asked[family+"_bucket"] = true
	return r.Window.Quantile(q, family, match, from, to)
}
func (r recordingWindow) Observations(family string, match []detect.Match, from, to time.Time) (float64, bool) {
	r.asked[family+"_count"] = true
	return r.Window.Observations(family, match, from, to)
}

// CountAbove passes the optional ScrapeCounter through, so detectors take
// the same branches as on the bare window.
func (r recordingWindow) CountAbove(sel detect.Selector, threshold float64, from, to time.Time) (int, int) {
	r.asked[sel.Name] = true
	if sc, ok := r.Window.(detect.ScrapeCounter); ok {
		return sc.CountAbove(sel, threshold, from, to)
	}
	return 0, 0
}

func (r recordingWindow) CountWhere(sel detect.Selector, match func(float64) bool, from, to time.Time) (int, int) {
	r.asked[sel.Name] = true
	if sc, ok := r.Window.(detect.ScrapeCounter); ok {
		return sc.CountWhere(sel, match, from, to)
	}
	return 0, 0
}

// declared reports whether a family asked for is covered by a declaration:
// named itself, or a histogram part whose base family is named.
func declared(reads map[string]bool, asked string) bool {
	if reads[asked] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(asked, suf); ok && reads[base] {
			return true
		}
	}
	return false
}

func setOf(names ...[]string) map[string]bool {
	m := make(map[string]bool)
	for _, ns := range names {
		for _, n := range ns {
			m[n] = true
		}
	}
	return m
}

// readsCheck runs every detector, the triage and the snapshot over one
// window through a recorder and reports each family asked for but not
// declared, by reader. asked collects everything asked, by reader.
type readsCheck struct {
	cfg       detect.Config
	entries   []detect.Entry // enabled, in the order of detectors
	detectors []detect.Detector
	signals   map[string]bool // every detector's needs: metrics_blind asks for them
	asked     map[string]map[string]bool
}

func newReadsCheck(t *testing.T) *readsCheck {
	t.Helper()
	cfg := detect.DefaultConfig()
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc := &readsCheck{cfg: cfg, detectors: ds, signals: map[string]bool{}, asked: map[string]map[string]bool{}}
	for _, e := range detect.Registry() {
		if e.Enabled(cfg) {
			rc.entries = append(rc.entries, e)
		}
		for _, s := range e.Signals() {
			rc.signals[s] = true
		}
	}
	if len(rc.entries) != len(ds) {
		t.Fatalf("%d enabled entries, %d detectors", len(rc.entries), len(ds))
	}
	return rc
}

func (rc *readsCheck) record(reader string, fn func(w detect.Window), w detect.Window) {
	if rc.asked[reader] == nil {
		rc.asked[reader] = map[string]bool{}
	}
	fn(recordingWindow{Window: w, asked: rc.asked[reader]})
}

func (rc *readsCheck) run(w detect.Window, now time.Time) {
	for i, d := range rc.detectors {
		rc.record(string(rc.entries[i].Class()), func(w detect.Window) { d.Detect(w, now) }, w)
	}
	for _, known := range []detect.KnownLatency{detect.LatencyToJudge, detect.LatencyHigh, detect.DecodeSlower} {
		rc.record("triage", func(w detect.Window) { rc.cfg.Triage.Classify(w, now, known) }, w)
	}
	rc.record("snapshot", func(w detect.Window) {
		ReadSnapshot(w, now.Add(-rc.cfg.Triage.Range), now, detect.DefaultInferenceEndpoints)
	}, w)
}

// check fails for every family a reader asked for that it did not declare.
func (rc *readsCheck) check(t *testing.T) {
	t.Helper()
	triage := setOf(rc.cfg.Triage.Reads())
	for reader, asked := range rc.asked {
		var reads map[string]bool
		switch reader {
		case "triage":
			reads = triage
		case "snapshot":
			reads = setOf(snapshotReads())
		default:
			e := rc.entries[slices.IndexFunc(rc.entries, func(e detect.Entry) bool { return string(e.Class()) == reader })]
			// A detector that attaches the triage reads what it reads;
			// metrics_blind asks for the other detectors' needs, which
			// they declare.
			reads = setOf(e.Reads(rc.cfg))
			if e.UsesTriage(rc.cfg) {
				maps.Copy(reads, triage)
			}
			if e.Class() == detect.MetricsBlind {
				maps.Copy(reads, rc.signals)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(asked)) {
			if !declared(reads, name) {
				t.Errorf("%s reads %s but does not declare it (add it to its reads)", reader, name)
			}
		}
	}
	if len(rc.asked) < len(rc.detectors)+2 {
		t.Errorf("only %d readers asked anything", len(rc.asked))
	}
}

// Every family a detector, the triage or the snapshot asks of a window is
// in its declaration, over the simulated incidents (every branch an
// incident takes) and every captured release. The scraper keeps only
// declared families, so a read that is not declared would find nothing in
// production: a detector added without its reads fails here.
func TestReadsDeclareEveryFamilyRead(t *testing.T) {
	rc := newReadsCheck(t)
	start := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	const interval = 10 * time.Second
	for _, class := range []string{sim.ClassPreemptStorm, sim.ClassCacheCollapse, sim.ClassRetryAvalanche, sim.ClassCrash} {
		sc, err := sim.IncidentScenario(class)
		if err != nil {
			t.Fatal(err)
		}
		fleet := sim.NewFleet(sim.FleetConfig{Seed: 7, Start: start, Scenario: sc, Warmup: 5 * time.Minute})
		store := newStore(t, rc.cfg, interval)
		dec := scrape.NewDecoder()
		var buf bytes.Buffer
		for el := time.Duration(0); el <= sim.IncidentBaseline+6*time.Minute; el += interval {
			now := start.Add(el)
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
			if el < time.Minute {
				continue
			}
			for _, name := range fleet.Replicas() {
				store.View(name, func(w detect.Window) { rc.run(w, now) })
			}
		}
	}
	for _, name := range fixture.Names() {
		body, err := fixture.SGLang(name)
		if err != nil {
			t.Fatal(err)
		}
		kind := scrape.KindEngine
		if strings.Contains(name, "router") || strings.Contains(name, "gateway") {
			kind = scrape.KindGateway
		}
		store := newStore(t, rc.cfg, interval)
		dec := scrape.NewDecoder()
		var now time.Time
		for k := range 3 {
			now = start.Add(time.Duration(k) * interval)
			groups, err := dec.Decode(body, 0)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := store.Append(series.Scrape{Target: "r", Kind: kind, At: now, Groups: groups}); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range store.Replicas() {
			store.View(r.Name, func(w detect.Window) { rc.run(w, now) })
		}
	}
	rc.check(t)
}

func newStore(t *testing.T, cfg detect.Config, interval time.Duration) *window.Store {
	t.Helper()
	s, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: interval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// metrics_blind reports a replica that lacks a family some detector needs;
// it can only see the family if the scraper kept it. So every need is
// read, and every read is kept for the active configuration.
func TestNeedsAreReadAndKept(t *testing.T) {
	cfg := detect.DefaultConfig()
	kept := setOf(Reads(cfg))
	for _, e := range detect.Registry() {
		reads := setOf(e.Reads(cfg))
		for _, s := range e.Signals() {
			if !declared(reads, s) {
				t.Errorf("%s needs %s but does not read it", e.Class(), s)
			}
		}
		for _, r := range e.Reads(cfg) {
			if !kept[r] {
				t.Errorf("%s reads %s, not in Reads", e.Class(), r)
			}
		}
	}
	for _, r := range append(cfg.Triage.Reads(), snapshotReads()...) {
		if !kept[r] {
			t.Errorf("triage or snapshot reads %s, not in Reads", r)
		}
	}
	if !kept[detect.ProcessStartTime] {
		t.Errorf("Reads lacks %s: restarts would go unseen", detect.ProcessStartTime)
	}
}
