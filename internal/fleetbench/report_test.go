package fleetbench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

const daemonBefore = `# TYPE watchdog_scrape_duration_seconds histogram
watchdog_scrape_duration_seconds_bucket{kind="engine",le="0.005"} 10
watchdog_scrape_duration_seconds_bucket{kind="engine",le="0.01"} 10
watchdog_scrape_duration_seconds_bucket{kind="engine",le="+Inf"} 10
watchdog_scrape_duration_seconds_sum{kind="engine"} 0.01
watchdog_scrape_duration_seconds_count{kind="engine"} 10
watchdog_scrape_duration_seconds_bucket{kind="gateway",le="0.005"} 0
watchdog_scrape_duration_seconds_bucket{kind="gateway",le="0.01"} 0
watchdog_scrape_duration_seconds_bucket{kind="gateway",le="+Inf"} 0
watchdog_scrape_duration_seconds_sum{kind="gateway"} 0
watchdog_scrape_duration_seconds_count{kind="gateway"} 0
# TYPE watchdog_evaluation_duration_seconds histogram
watchdog_evaluation_duration_seconds_bucket{le="0.1"} 1
watchdog_evaluation_duration_seconds_bucket{le="+Inf"} 1
watchdog_evaluation_duration_seconds_sum 0.05
watchdog_evaluation_duration_seconds_count 1
# TYPE watchdog_samples_ingested_total counter
watchdog_samples_ingested_total 1000
`

// 100 more scrapes (50 under 5 ms, 40 more under 10 ms, 10 slower), 4
// more rounds taking 0.2 s, 6000 more samples.
const daemonAfter = `# TYPE watchdog_scrape_duration_seconds histogram
watchdog_scrape_duration_seconds_bucket{kind="engine",le="0.005"} 60
watchdog_scrape_duration_seconds_bucket{kind="engine",le="0.01"} 100
watchdog_scrape_duration_seconds_bucket{kind="engine",le="+Inf"} 110
watchdog_scrape_duration_seconds_sum{kind="engine"} 0.9
watchdog_scrape_duration_seconds_count{kind="engine"} 110
# TYPE watchdog_evaluation_duration_seconds histogram
watchdog_evaluation_duration_seconds_bucket{le="0.1"} 5
watchdog_evaluation_duration_seconds_bucket{le="+Inf"} 5
watchdog_evaluation_duration_seconds_sum 0.25
watchdog_evaluation_duration_seconds_count 5
# TYPE watchdog_samples_ingested_total counter
watchdog_samples_ingested_total 7000
# TYPE watchdog_window_bytes gauge
watchdog_window_bytes{target="a"} 1000
watchdog_window_bytes{target="b"} 3000
`

func TestDaemonTimingsOverTheWindow(t *testing.T) {
	d, samples, err := daemonTimings(parse(t, daemonBefore), parse(t, daemonAfter), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	// p50: rank 50 of the window's 100, in the first bucket: 5 ms · 50/50.
	// p99: rank 99, past the last finite bucket's 90: its bound, 10 ms.
	if d.Scrapes != 100 || !near(d.ScrapeP50.Seconds, 0.005) || d.ScrapeP50.AtLeast || d.ScrapeP99 != (Quantile{0.01, true}) {
		t.Errorf("scrapes %d, p50 %+v, p99 %+v; want 100, 0.005, at least 0.01", d.Scrapes, d.ScrapeP50, d.ScrapeP99)
	}
	if d.Rounds != 4 || !near(d.RoundMeanSeconds, 0.05) {
		t.Errorf("rounds %d, mean %v; want 4, 0.05", d.Rounds, d.RoundMeanSeconds)
	}
	if samples != 3000 {
		t.Errorf("samples/s %v, want 3000", samples)
	}
	if d.WindowBytes != 4000 {
		t.Errorf("window bytes %v, want the targets' 4000 at the end", d.WindowBytes)
	}

	// A daemon that lost a metric the report reads is an error, naming it.
	_, _, err = daemonTimings(parse(t, daemonBefore), parse(t, "# TYPE x counter\nx 1\n"), time.Second)
	if err == nil || !strings.Contains(err.Error(), "watchdog_scrape_duration_seconds") {
		t.Errorf("missing histogram: error %v", err)
	}
}

func TestQuantileInterpolatesWithinTheBucket(t *testing.T) {
	w := histogramWindow{bounds: []float64{1, 2, 4}, cum: []float64{0, 10, 20}, count: 20}
	for q, want := range map[float64]float64{0.25: 1.5, 0.5: 2, 0.75: 3, 1: 4} {
		if got := w.quantile(q); got != (Quantile{Seconds: want}) {
			t.Errorf("q%v = %+v, want %v", q, got, want)
		}
	}
	if got := (histogramWindow{bounds: []float64{1}, cum: []float64{0}}).quantile(0.5); got != (Quantile{}) {
		t.Errorf("empty window: q0.5 = %+v, want 0", got)
	}
}

func TestSlopeIsTheMemoryTrendPerMinute(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var points []memPoint
	for i := range 7 {
		rss := uint64(100<<20 + i*(1<<20)) // +1 MiB every 30 s
		if i == 3 {
			rss -= 1 << 20 // a collection in the middle bends, not breaks, the trend
		}
		points = append(points, memPoint{t0.Add(time.Duration(i) * 30 * time.Second), rss})
	}
	if got := slopePerMinute(points) / (1 << 20); math.Abs(got-2) > 0.1 {
		t.Errorf("slope %.3f MiB/min, want about 2", got)
	}
	if got := slopePerMinute(points[:1]); got != 0 {
		t.Errorf("one point: slope %v, want 0", got)
	}
}

func TestReportFormats(t *testing.T) {
	r := Report{Replicas: 1000, IntervalSeconds: 5, EvaluationIntervalSeconds: 15, WarmupSeconds: 60, WindowSeconds: 120, HostCPUs: 2, HostLoad1m: 1.25,
		Watchdog: Measurement{CPUCores: 0.1, RSSBytes: 200 << 20, ReplicasScraped: 1000, Daemon: &DaemonTimings{Scrapes: 24000, ScrapeP50: Quantile{Seconds: 0.002}, RoundP99: Quantile{8.192, true}}}}
	var text bytes.Buffer
	if err := r.Write(&text, FormatText); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1000 loopback replicas at 5s (the watchdog evaluating every 15s), measured over 2m0s after a 1m0s warm-up; host: 2 CPUs, load average 1.2 at the end", "CPU, cores (average)", "0.100", "200.0", "1000/1000", "2.00 / 0.00", "0.00 / ≥8192.00"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	if strings.Contains(text.String(), "prometheus") {
		t.Errorf("text report without Prometheus mentions it:\n%s", text.String())
	}
	if err := r.Write(&text, "yaml"); err == nil {
		t.Error("format yaml: no error")
	}
}
