package eval

import (
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// The stage benchmarks split BenchmarkReplicaScrapeParseIngestEvaluate
// (one replica, one scrape of sglang-current-full.prom, a full one-hour
// window) into its stages, each in steady state with its buffers reused
// as the daemon reuses them. BenchmarkStageBareTextparse is the reference
// every ratio is taken to: Prometheus' textparse reading every sample with
// its labels, as a scraper that keeps everything must.

func BenchmarkStageBareTextparse(b *testing.B) {
	body := benchBody(b)
	st := labels.NewSymbolTable()
	var ls labels.Labels
	b.ReportAllocs()
	for b.Loop() {
		p := textparse.NewPromParser(body, st, false)
		for {
			e, err := p.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if e == textparse.EntrySeries {
				p.Series()
				p.Labels(&ls)
			}
		}
	}
}

// BenchmarkStageParse is the daemon's parser keeping every family.
func BenchmarkStageParse(b *testing.B) {
	body := benchBody(b)
	p := scrape.NewParser()
	var raw []scrape.RawSample
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if raw, err = p.Parse(raw[:0], body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(raw)), "samples")
}

// BenchmarkStageParseFilter is parse plus the keep filter: the families
// the assessment does not read are dropped from their names.
func BenchmarkStageParseFilter(b *testing.B) {
	body := benchBody(b)
	dec := scrape.NewKeepingDecoder(assess.Reads(detect.DefaultConfig()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dec.Decode(body, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStageParseFilterFleet is BenchmarkStageParseFilter over the
// moving bodies of the loopback fleet's eight sources, read in turn by one
// decoder, as a scraper taken from the pool reads whichever replica is due:
// the same texts in the same order, but values that move and each source's
// own pid-labelled lines. Per scrape.
func BenchmarkStageParseFilterFleet(b *testing.B) {
	const sources = 8
	at := time.Unix(1_800_000_000, 0)
	fleet, err := sim.NewLoopback(sim.LoopbackConfig{Replicas: sources, Seed: 1, Now: func() time.Time { return at }})
	if err != nil {
		b.Fatal(err)
	}
	h := fleet.Handler()
	var bodies [][]byte
	for range 4 {
		at = at.Add(window.DefaultScrapeInterval)
		for i := range sources {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, sim.MetricsPath(i), nil))
			bodies = append(bodies, rec.Body.Bytes())
		}
	}
	dec := scrape.NewKeepingDecoder(assess.Reads(detect.DefaultConfig()))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := dec.Decode(bodies[i%len(bodies)], 0); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// stageFixture is a store holding 800 scrapes (an hour and 6 minutes at
// 5 s) of the full exposition through the daemon's path, and that path.
type stageFixture struct {
	store *window.Store
	dec   *scrape.Decoder
	at    time.Time
	body  []byte
	cfg   detect.Config
}

func newStageFixture(b *testing.B) *stageFixture {
	b.Helper()
	cfg := detect.DefaultConfig()
	store, err := window.New(window.Options{Retention: time.Hour + 5*time.Minute, ScrapeInterval: 5 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := &stageFixture{store: store, dec: scrape.NewKeepingDecoder(assess.Reads(cfg)),
		at: time.Unix(1_800_000_000, 0), body: benchBody(b), cfg: cfg}
	for range 800 {
		f.append(b, f.decode(b))
	}
	return f
}

func (f *stageFixture) decode(b *testing.B) []series.Group {
	groups, err := f.dec.Decode(f.body, 0)
	if err != nil {
		b.Fatal(err)
	}
	return groups
}

func (f *stageFixture) append(b *testing.B, groups []series.Group) {
	f.at = f.at.Add(5 * time.Second)
	if err := f.store.Append(series.Scrape{Target: "r0", Kind: "engine", At: f.at, Groups: groups}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStageIngest is one scrape's append into a full window.
func BenchmarkStageIngest(b *testing.B) {
	f := newStageFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		groups := f.decode(b)
		b.StartTimer()
		f.append(b, groups)
	}
}

// BenchmarkStageView is the replica snapshot's queries over a full window
// (what the workspace and the API render).
func BenchmarkStageView(b *testing.B) {
	f := newStageFixture(b)
	from := f.at.Add(-f.cfg.Triage.Range)
	b.ReportAllocs()
	for b.Loop() {
		f.store.View("r0", func(w detect.Window) {
			assess.ReadSnapshot(w, from, f.at, detect.DefaultInferenceEndpoints)
		})
	}
}

// BenchmarkStageDetectors is every detector over a full window.
func BenchmarkStageDetectors(b *testing.B) {
	f := newStageFixture(b)
	ds, err := detect.New(f.cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		f.store.View("r0", func(w detect.Window) {
			for _, d := range ds {
				d.Detect(w, f.at)
			}
		})
	}
}

// BenchmarkStageRound is one evaluation round: detectors, triage,
// snapshot, correlation and the alert tracker.
func BenchmarkStageRound(b *testing.B) {
	f := newStageFixture(b)
	ds, err := detect.New(f.cfg)
	if err != nil {
		b.Fatal(err)
	}
	loop := New(Options{Assessor: assess.New(ds, assess.Config{Triage: f.cfg.Triage, Correlation: correlate.DefaultConfig()}),
		Tracker: alert.NewTracker(alert.DefaultConfig()), Windows: f.store, Sender: discard{}, Logger: zap.NewNop()}, nil)
	b.ReportAllocs()
	for b.Loop() {
		loop.Evaluate(f.at)
	}
}

// BenchmarkStageRoundFleet is one evaluation round over 100 replicas, each
// holding the full window of BenchmarkStageRound, assessed on every core:
// what a round costs per replica in a fleet (ns/replica), the figure that
// scales to a round over 10,000 replicas.
func BenchmarkStageRoundFleet(b *testing.B) {
	const replicas = 100
	cfg := detect.DefaultConfig()
	store, err := window.New(window.Options{Retention: time.Hour + 5*time.Minute, ScrapeInterval: 5 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	dec := scrape.NewKeepingDecoder(assess.Reads(cfg))
	body := benchBody(b)
	at := time.Unix(1_800_000_000, 0)
	for range 800 {
		at = at.Add(5 * time.Second)
		groups, err := dec.Decode(body, 0)
		if err != nil {
			b.Fatal(err)
		}
		for r := range replicas {
			if err := store.Append(series.Scrape{Target: "r" + strconv.Itoa(r), Kind: "engine", At: at, Groups: groups}); err != nil {
				b.Fatal(err)
			}
		}
	}
	benchFleetRound(b, cfg, store, replicas, func() time.Time { return at })
}

// BenchmarkStageRoundFleetMoving is BenchmarkStageRoundFleet on windows
// whose values move as the loopback fleet's do (watchdog-bench fleet):
// counters grow at their own rates and gauges vary, so chunks hold what a
// serving replica's hold, not the constant values of one capture. Eight
// replicas are rendered and decoded, one per simulated source; each is
// appended to -fleet.replicas/8 targets (96 in all by default), on every
// core. With -fleet.replicas=10000 it times the round the target
// names directly rather than scaling the per-replica figure: ten thousand
// hour-long windows, ≈2.5 GB, no longer fit any cache, which a hundred do.
//
// Once the windows are full, every round follows one more scrape of every
// replica (untimed), as the daemon's do. A round's cost depends on where
// the ranges it reads begin and end among the chunks, which moves with
// every scrape and repeats every 120 scrapes, as chunks are sealed: timed
// at one moment of the cycle, a round cost half as much again as at
// another. So -benchtime 120x times one whole cycle, and ns/replica and
// window-B/replica are averages over the rounds timed.
func BenchmarkStageRoundFleetMoving(b *testing.B) {
	const sources = 8
	copies := max(1, (*fleetReplicas+sources-1)/sources)
	cfg := detect.DefaultConfig()
	opts := window.Options{Retention: cfg.MaxLookback() + 2*window.DefaultScrapeInterval, ScrapeInterval: window.DefaultScrapeInterval}
	reg := prometheus.NewRegistry()
	store, err := window.New(opts, reg)
	if err != nil {
		b.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 0)
	fleet, err := sim.NewLoopback(sim.LoopbackConfig{Replicas: sources, Seed: 1, Now: func() time.Time { return at }})
	if err != nil {
		b.Fatal(err)
	}
	h := fleet.Handler()
	dec := scrape.NewKeepingDecoder(assess.Reads(cfg))
	workers := runtime.GOMAXPROCS(0)
	errs := make([]error, workers)
	scrapeAll := func() {
		at = at.Add(opts.ScrapeInterval)
		for i := range sources {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, sim.MetricsPath(i), nil))
			groups, err := dec.Decode(rec.Body.Bytes(), 0)
			if err != nil {
				b.Fatal(err)
			}
			// The copies of one source are appended on every core, as a
			// fleet's scrapes are; Append only reads the groups.
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for k := w; k < copies; k += workers {
						target := "r" + strconv.Itoa(k*sources+i)
						if err := store.Append(series.Scrape{Target: target, Kind: "engine", At: at, Groups: groups}); err != nil {
							errs[w] = err
							return
						}
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
		}
	}
	for range int(opts.Retention/opts.ScrapeInterval) + 1 {
		scrapeAll()
	}
	windowBytes, rounds := 0.0, 0
	benchFleetRound(b, cfg, store, sources*copies, func() time.Time {
		scrapeAll()
		windowBytes += gaugeSum(b, reg, "watchdog_window_bytes")
		rounds++
		return at
	})
	b.ReportMetric(windowBytes/float64(rounds)/float64(sources*copies), "window-B/replica")
}

// fleetReplicas sizes BenchmarkStageRoundFleetMoving's fleet.
var fleetReplicas = flag.Int("fleet.replicas", 96, "replicas of BenchmarkStageRoundFleetMoving (rounded up to a multiple of 8)")

// benchFleetRound times evaluation rounds over the replicas held by store,
// on every core, and reports the time per replica. Before each round,
// untimed, next returns the time to evaluate at, after whatever it does
// to the windows.
func benchFleetRound(b *testing.B, cfg detect.Config, store *window.Store, replicas int, next func() time.Time) {
	ds, err := detect.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	loop := New(Options{Assessor: assess.New(ds, assess.Config{Triage: cfg.Triage, Correlation: correlate.DefaultConfig()}),
		Tracker: alert.NewTracker(alert.DefaultConfig()), Windows: store, Sender: discard{}, Logger: zap.NewNop()}, nil)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		at := next()
		b.StartTimer()
		loop.Evaluate(at)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(replicas), "ns/replica")
}

// gaugeSum is the sum of the gauge family name's series in reg.
func gaugeSum(b *testing.B, reg prometheus.Gatherer, name string) float64 {
	families, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	sum := 0.0
	for _, mf := range families {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
