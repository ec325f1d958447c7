package window

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// The compact store answers every Window question exactly as the oracle
// that holds every point in plain slices, and the detectors find the same
// things in both, round by round. The scrape sequences are the simulator's
// (healthy load and each incident class, a crash with its counter reset
// included) scraped through the real decoder, then roughened: series
// missing from a scrape, NaN and +Inf values, failed scrapes, out-of-order
// scrapes, and a family gone for longer than the retention and back.
func TestCompactWindowMatchesOracle(t *testing.T) {
	cfg := detect.DefaultConfig()
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const interval = 5 * time.Second
	opts := Options{Retention: cfg.MaxLookback() + 2*interval, ScrapeInterval: interval}
	scenarios := []string{"healthy", sim.ClassCrash, sim.ClassPreemptStorm, sim.ClassCacheCollapse, sim.ClassRetryAvalanche}
	for n, name := range scenarios {
		t.Run(name, func(t *testing.T) {
			// Healthy is the full exposition moving with the simulator, past
			// the retention and past the gone family's return; each
			// incident (from minute 3) is the simulator's own exposition
			// for 20 minutes.
			var scrapes int
			var next func(i int, now time.Time) ([]series.Sample, bool)
			detectEvery := 6 // scrapes: every 30 s, as the daemon's rounds
			if name == "healthy" {
				seq := movingSequence(t)
				scrapes = len(seq)
				detectEvery = 24 // a long quiet run: every 2 minutes
				next = func(i int, _ time.Time) ([]series.Sample, bool) { return seq[i], true }
			} else {
				sc, err := sim.IncidentScenario(name)
				if err != nil {
					t.Fatal(err)
				}
				fleet := sim.NewFleet(sim.FleetConfig{Replicas: 1, Seed: uint64(n + 1), Start: t0, Scenario: sc, Warmup: 2 * time.Minute})
				dec := scrape.NewDecoder()
				var body bytes.Buffer
				scrapes = 240
				next = func(_ int, now time.Time) ([]series.Sample, bool) {
					fleet.Advance(now)
					body.Reset()
					if err := fleet.WriteMetrics(&body, 0); err != nil {
						return nil, false // down: the scrape fails
					}
					groups, err := dec.Decode(body.Bytes(), 0)
					if err != nil {
						t.Fatal(err)
					}
					return groups[0].Samples, true
				}
			}
			opts := opts
			if name != "healthy" {
				// Thin histograms after 2 minutes, so that the 20-minute
				// incidents (the crash's counter reset among them) are
				// read from thinned chunks too.
				opts.HistogramFullResolution = 2 * time.Minute
			}
			store := newTestStore(t, opts)
			o := newOracle(store.Options())
			rnd := rand.New(rand.NewPCG(uint64(n), 99))
			var checked, compared, findings int
			for i := range scrapes {
				now := t0.Add(time.Duration(i) * interval)
				raw, up := next(i, now)
				at := now
				if rnd.IntN(100) == 0 {
					at = now.Add(-7 * time.Second) // older than the previous scrape
				}
				if !up || rnd.IntN(50) == 0 {
					if err := store.Append(series.Scrape{Target: "r", Kind: "engine", At: at, Reason: series.FailureRefused}); err != nil {
						t.Fatal(err)
					}
					continue
				}
				samples := roughen(rnd, raw, i)
				accepted := o.append(at, samples)
				err = store.Append(okScrape("r", at, samples...))
				if accepted != (err == nil) || (err != nil && !errors.Is(err, ErrOutOfOrder)) {
					t.Fatalf("scrape %d at %s: store err %v, oracle accepted %v", i, at, err, accepted)
				}
				if i%detectEvery == 0 || i%300 == 0 || i == scrapes-1 {
					o.thinLike(store, "r")
				}
				if i%detectEvery == 0 {
					withView(t, store, "r", func(w detect.Window) {
						ov := oracleView{o: o, real: w}
						for _, d := range ds {
							got, want := d.Detect(w, now), d.Detect(ov, now)
							findings += len(got)
							if !reflect.DeepEqual(got, want) {
								t.Errorf("scrape %d %s: store finds %+v, oracle %+v", i, d.Class(), got, want)
							}
						}
					})
					checked++
				}
				if i%300 == 0 || i == scrapes-1 {
					withView(t, store, "r", func(w detect.Window) {
						compared += compareWindows(t, i, now, w, oracleView{o: o, real: w}, o)
					})
				}
			}
			// Equal chunks share their bytes (chunkShare): the answers
			// compared above read shared chunks too, and the replica's
			// accounting is what it holds.
			checkAccounting(t, store.replicas["r"])
			shared := 0
			for _, recs := range store.replicas["r"].families {
				for _, rec := range recs {
					for k := range rec.pts.sealed {
						if rec.pts.sealed[k].run.flags&runSharedBytes != 0 {
							shared++
						}
					}
				}
			}
			if shared == 0 {
				t.Error("no chunk shares its bytes: the comparison does not cover shared chunks")
			}
			t.Logf("%d scrapes, detectors compared at %d rounds (%d findings), %d window answers compared, %d chunks sharing bytes", scrapes, checked, findings, compared, shared)
		})
	}
}

// roughen drops, spoils and hides samples the way broken exporters do.
// The slice returned is new; the decoder's buffer is left alone.
func roughen(rnd *rand.Rand, in []series.Sample, scrapeNo int) []series.Sample {
	out := make([]series.Sample, 0, len(in))
	for _, s := range in {
		if s.Name == series.CacheHitRateGauge && scrapeNo >= 50 && scrapeNo < 840 {
			continue // gone for longer than the retention, then back
		}
		switch r := rnd.IntN(1000); {
		case r < 10:
			continue
		case r < 15:
			s.Value = math.NaN()
		case r < 17:
			s.Value = math.Inf(1)
		}
		out = append(out, s)
	}
	return out
}

// compareWindows asks both windows every question over ranges short and
// long, aligned to scrapes and not, crossing chunk boundaries and the
// retention, for every family held, and reports how many it compared.
func compareWindows(t *testing.T, scrapeNo int, now time.Time, got detect.Window, want oracleView, o *oracle) int {
	t.Helper()
	fams := map[string]bool{}
	var withLE []*oracleSeries
	for _, s := range o.series {
		fams[s.name] = true
		if s.labels.Get("le") != "" {
			withLE = append(withLE, s)
		}
	}
	names := make([]string, 0, len(fams))
	for f := range fams {
		names = append(names, f)
	}
	sort.Strings(names)
	type span struct{ from, to time.Time }
	var spans []span
	for _, d := range []time.Duration{30 * time.Second, 5 * time.Minute, 10*time.Minute + 2500*time.Millisecond, 65 * time.Minute, 2 * time.Hour} {
		spans = append(spans, span{now.Add(-d), now})
	}
	spans = append(spans,
		span{now.Add(-65 * time.Minute), now.Add(-5 * time.Minute)},             // a baseline before the current range
		span{now.Add(-11 * time.Minute), now.Add(-9*time.Minute - time.Second)}, // around a chunk boundary
		span{now.Add(-70 * time.Minute), now.Add(-60 * time.Minute)},            // across the retention's edge
	)
	n := 0
	check := func(what string, g, w float64, gok, wok bool) {
		n++
		if gok != wok || (gok && !sameFloat(g, w)) {
			t.Errorf("scrape %d: %s = %v, %v; oracle %v, %v", scrapeNo, what, g, gok, w, wok)
		}
	}
	for _, name := range names {
		sels := []detect.Selector{{Name: name}, {Name: name, Combine: detect.CombineMax}}
		if name == series.E2ERequestLatency+"_bucket" || name == "sglang:http_responses_total" {
			sels = append(sels, detect.Selector{Name: name, Match: []detect.Match{{Label: "le", Value: "1", Prefix: true}, {Label: "status_code", Value: "2", Prefix: true}}})
		}
		for _, sel := range sels {
			g, gok := got.Last(sel)
			w, wok := want.Last(sel)
			check("Last("+name+")", g, w, gok, wok)
			if got.Has(name) != want.Has(name) {
				t.Errorf("scrape %d: Has(%s) differs", scrapeNo, name)
			}
			for _, sp := range spans {
				if sel.Combine == detect.CombineSum { // Increase and Rate always sum
					g, gok = got.Increase(sel, sp.from, sp.to)
					w, wok = want.Increase(sel, sp.from, sp.to)
					check("Increase("+name+")", g, w, gok, wok)
					g, gok = got.Rate(sel, sp.from, sp.to)
					w, wok = want.Rate(sel, sp.from, sp.to)
					check("Rate("+name+")", g, w, gok, wok)
				}
				g, gok = got.Avg(sel, sp.from, sp.to)
				w, wok = want.Avg(sel, sp.from, sp.to)
				check("Avg("+name+")", g, w, gok, wok)
				g, gok = got.Max(sel, sp.from, sp.to)
				w, wok = want.Max(sel, sp.from, sp.to)
				check("Max("+name+")", g, w, gok, wok)
				if gp, wp := got.(detect.PointFinder).Present(sel, sp.from, sp.to), want.Present(sel, sp.from, sp.to); gp != wp {
					t.Errorf("scrape %d: Present(%s) = %v; oracle %v", scrapeNo, name, gp, wp)
				}
				n++
				g, gok = got.Min(sel, sp.from, sp.to)
				w, wok = want.Min(sel, sp.from, sp.to)
				check("Min("+name+")", g, w, gok, wok)
				ga, gs := got.(detect.ScrapeCounter).CountAbove(sel, 1, sp.from, sp.to)
				wa, ws := want.CountAbove(sel, 1, sp.from, sp.to)
				check("CountAbove("+name+")", float64(ga), float64(wa), gs > 0, ws > 0)
				check("CountAbove scrapes("+name+")", float64(gs), float64(ws), true, true)
			}
		}
	}
	hists := map[string]bool{}
	for _, s := range withLE {
		hists[s.name[:len(s.name)-len("_bucket")]] = true
	}
	for h := range hists {
		for _, sp := range spans {
			for _, q := range []float64{0.5, 0.9, 0.99} {
				g, gok := got.Quantile(q, h, nil, sp.from, sp.to)
				w, wok := want.Quantile(q, h, nil, sp.from, sp.to)
				check("Quantile("+h+")", g, w, gok, wok)
			}
			g, gok := got.Observations(h, nil, sp.from, sp.to)
			w, wok := want.Observations(h, nil, sp.from, sp.to)
			check("Observations("+h+")", g, w, gok, wok)
		}
	}
	for _, sp := range spans {
		check("Restarts", float64(got.Restarts(sp.from, sp.to)), float64(want.Restarts(sp.from, sp.to)), true, true)
	}
	if !got.LastRestart().Equal(want.LastRestart()) {
		t.Errorf("scrape %d: LastRestart = %s, oracle %s", scrapeNo, got.LastRestart(), want.LastRestart())
	}
	return n
}

// sameFloat: equal, or within 1e-12 relative (a series forgotten and
// recreated is summed in another order than the oracle's).
func sameFloat(a, b float64) bool {
	if a == b || (math.IsNaN(a) && math.IsNaN(b)) {
		return true
	}
	return math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b))
}
