package window

import (
	"bytes"
	"math"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// fixtureSamples flattens the sglang-current-full.prom capture (a full /metrics
// of a current SGLang release) the way the scraper does: histograms become
// _bucket{le}, _sum and _count samples.
func fixtureSamples(tb testing.TB) []series.Sample {
	tb.Helper()
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		tb.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	var out []series.Sample
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			var ls series.Labels
			for _, lp := range m.GetLabel() {
				ls = append(ls, series.Label{Name: lp.GetName(), Value: lp.GetValue()})
			}
			ls.Sort()
			add := func(n string, v float64, extra ...series.Label) {
				l := append(append(series.Labels(nil), ls...), extra...)
				out = append(out, series.Sample{Name: n, Labels: l.Sort(), Value: v})
			}
			switch fam.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add(name+"_bucket", float64(b.GetCumulativeCount()),
						series.Label{Name: "le", Value: strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)})
				}
				add(name+"_bucket", float64(h.GetSampleCount()), series.Label{Name: "le", Value: "+Inf"})
				add(name+"_sum", h.GetSampleSum())
				add(name+"_count", float64(h.GetSampleCount()))
			default:
				add(name, m.GetUntyped().GetValue())
			}
		}
	}
	return out
}

func TestFixtureLoads(t *testing.T) {
	samples := fixtureSamples(t)
	if len(samples) < 400 {
		t.Fatalf("fixture gave %d samples", len(samples))
	}
	s := newTestStore(t, Options{Retention: time.Hour})
	mustAppend(t, s, okScrape("r", at(0), samples...))
	for k := range samples {
		samples[k].Value *= 2
	}
	mustAppend(t, s, okScrape("r", at(5), samples...))
	withView(t, s, "r", func(w detect.Window) {
		if v, ok := w.Last(detect.Sel(series.NumRunningReqs)); !ok || v != 48 {
			t.Errorf("Last(num_running_reqs) = %v, %v", v, ok)
		}
		if !w.Has(series.TTFTSeconds + "_bucket") {
			t.Error("TTFT histogram missing")
		}
	})
}

// BenchmarkAppend measures the steady-state cost of recording one realistic
// scrape (the full current SGLang exposition) into a replica whose rings are
// already at their cap, i.e. the per-scrape cost of 1,000 replicas every 5 s.
func BenchmarkAppend(b *testing.B) {
	samples := fixtureSamples(b)
	s := newTestStore(b, Options{Retention: 65 * time.Minute, ScrapeInterval: 5 * time.Second})
	sc := okScrape("r", t0, samples...)
	step := func(i int) {
		sc.At = t0.Add(time.Duration(i) * 5 * time.Second)
		for k := range samples {
			samples[k].Value += 1 // counters keep growing: no restart path
		}
		if err := s.Append(sc); err != nil {
			b.Fatal(err)
		}
	}
	warm := s.Options().MaxPointsPerSeries + 10
	for i := 0; i < warm; i++ {
		step(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step(warm + i)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(samples)), "ns/sample")
	b.ReportMetric(float64(len(samples)), "samples/scrape")
}

// BenchmarkQuantileOneHour measures a detector's heaviest question: a p99
// over one hour of a 23-bucket histogram (720 scrapes).
func BenchmarkQuantileOneHour(b *testing.B) {
	samples := fixtureSamples(b)
	s := newTestStore(b, Options{Retention: 65 * time.Minute})
	for i := 0; i < 780; i++ {
		for k := range samples {
			samples[k].Value += math.Mod(float64(k), 7)
		}
		if err := s.Append(okScrape("r", t0.Add(time.Duration(i)*5*time.Second), samples...)); err != nil {
			b.Fatal(err)
		}
	}
	now := t0.Add(779 * 5 * time.Second)
	b.ReportAllocs()
	b.ResetTimer()
	s.View("r", func(w detect.Window) {
		for i := 0; i < b.N; i++ {
			if _, ok := w.Quantile(0.99, series.InterTokenLatency, nil, now.Add(-time.Hour), now); !ok {
				b.Fatal("no quantile")
			}
		}
	})
}
