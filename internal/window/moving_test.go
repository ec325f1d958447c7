package window

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// movingFixture yields successive scrapes of the full current exposition
// (sglang-current-full.prom, normalized by the real decoder) whose values
// move as a serving replica's do: the series the simulator renders (320 of
// the fixture's 477) take the simulator's values, scrape by scrape; the
// other counters grow by a few events per scrape; the other gauges (memory
// sizes, speculative-decoding and hybrid-model settings) stay as captured,
// as they do on a real server.
type movingFixture struct {
	fleet   *sim.Fleet
	dec     *scrape.Decoder
	body    bytes.Buffer
	samples []series.Sample
	byKey   map[string]int
	counter []bool
	rnd     *rand.Rand
}

func newMovingFixture(tb testing.TB, start time.Time, seed uint64, readOnly bool) *movingFixture {
	tb.Helper()
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		tb.Fatal(err)
	}
	groups, err := scrape.NewDecoder().Decode(body, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var read map[string]bool
	if readOnly {
		read = readFamilies(tb)
	}
	m := &movingFixture{
		fleet: sim.NewFleet(sim.FleetConfig{Replicas: 1, Seed: seed, Start: start, Warmup: 2 * time.Minute}),
		dec:   scrape.NewDecoder(),
		byKey: map[string]int{},
		rnd:   rand.New(rand.NewPCG(seed, 7)),
	}
	for _, g := range groups {
		for _, s := range g.Samples {
			if read != nil && !read[canonicalFamily(s.Name)] {
				continue
			}
			m.byKey[s.Key()] = len(m.samples)
			m.samples = append(m.samples, s)
			m.counter = append(m.counter, isCounterName(s.Name))
		}
	}
	return m
}

func isCounterName(name string) bool {
	for _, suf := range []string{"_total", "_count", "_sum", "_bucket"} {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

func canonicalFamily(name string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suf); ok {
			return f
		}
	}
	return name
}

// readFamilies are the families the daemon keeps by default: what the
// assessment with the default configuration reads (assess.Reads, the list
// the scraper's keep filter is built from).
func readFamilies(tb testing.TB) map[string]bool {
	tb.Helper()
	out := map[string]bool{}
	for _, f := range assess.Reads(detect.DefaultConfig()) {
		out[f] = true
	}
	return out
}

// next returns the samples of the scrape at now. The slice is reused.
func (m *movingFixture) next(tb testing.TB, now time.Time) []series.Sample {
	tb.Helper()
	m.fleet.Advance(now)
	m.body.Reset()
	if err := m.fleet.WriteMetrics(&m.body, 0); err != nil {
		tb.Fatal(err)
	}
	groups, err := m.dec.Decode(m.body.Bytes(), 0)
	if err != nil {
		tb.Fatal(err)
	}
	moved := make([]bool, len(m.samples))
	for _, g := range groups {
		for _, s := range g.Samples {
			if i, ok := m.byKey[s.Key()]; ok {
				m.samples[i].Value, moved[i] = s.Value, true
			}
		}
	}
	for i := range m.samples {
		if !moved[i] && m.counter[i] {
			m.samples[i].Value += float64(m.rnd.IntN(4))
		}
	}
	return m.samples
}

// movingScrapes caches movingCycle: the simulator is the slow part of the
// tests that use it, under -race most of all.
var movingScrapes struct {
	once sync.Once
	seq  [][]series.Sample
}

// movingSequence is the moving full exposition (seed 1) every 5 s from t0,
// for the production retention plus one chunk. Callers must not modify it.
func movingSequence(tb testing.TB) [][]series.Sample {
	tb.Helper()
	opts := productionOptions()
	return movingCycle(tb)[:int(opts.Retention/opts.ScrapeInterval)+samplesPerChunk]
}

// movingCycle is movingSequence and then one whole cycle of what a
// window holds: maxThinnedSpan scrapes more, after which chunks are sealed,
// thinned, merged and dropped at the same scrapes as before. Callers must
// not modify it.
func movingCycle(tb testing.TB) [][]series.Sample {
	tb.Helper()
	movingScrapes.once.Do(func() {
		opts := productionOptions()
		mf := newMovingFixture(tb, t0, 1, false)
		seq := make([][]series.Sample, int(opts.Retention/opts.ScrapeInterval)+samplesPerChunk+maxThinnedSpan)
		for i := range seq {
			seq[i] = slices.Clone(mf.next(tb, t0.Add(time.Duration(i)*opts.ScrapeInterval)))
		}
		movingScrapes.seq = seq
	})
	if movingScrapes.seq == nil {
		tb.Fatal("the moving sequence failed to build (see the first test that asked for it)")
	}
	return movingScrapes.seq
}
