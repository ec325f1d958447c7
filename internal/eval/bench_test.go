package eval

import (
	"bytes"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// The benchmarks below are the performance claim of the watchdog: the
// cost of watching one replica for one interval (parse the full current
// exposition keeping the families read, ingest it into the window, run
// every detector and the alert tracker) next to the bare parse of the same
// bytes (stage_bench_test.go has textparse's and each stage's).

func benchBody(b *testing.B) []byte {
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func BenchmarkBareExpfmtParse(b *testing.B) {
	body := benchBody(b)
	p := expfmt.NewTextParser(model.UTF8Validation)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}

type discard struct{}

func (discard) Send(notify.Event) {}

func BenchmarkReplicaScrapeParseIngestEvaluate(b *testing.B) {
	body := benchBody(b)
	benchPipeline(b, func(time.Time) []byte { return body })
}

// simBodies renders a simulated replica under healthy heavy load every 5 s,
// so counters move and every detector computes real rates and quantiles
// (a replayed fixture would let them stop early at "no traffic").
func simBodies(start time.Time) func(at time.Time) []byte {
	fleet := sim.NewFleet(sim.FleetConfig{Replicas: 1, Seed: 1, Start: start, Scenario: sim.HealthyScenario()})
	var buf bytes.Buffer
	return func(at time.Time) []byte {
		fleet.Advance(at)
		buf.Reset()
		fleet.WriteMetrics(&buf, 0)
		return buf.Bytes()
	}
}

func BenchmarkSimBareExpfmtParse(b *testing.B) {
	at := time.Unix(1_800_000_000, 0)
	next := simBodies(at)
	p := expfmt.NewTextParser(model.UTF8Validation)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		at = at.Add(5 * time.Second)
		body := next(at)
		b.StartTimer()
		if _, err := p.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSimReplicaScrapeParseIngestEvaluate(b *testing.B) {
	benchPipeline(b, simBodies(time.Unix(1_800_000_000, 0)))
}

// benchPipeline measures one replica's scrape after the fetch: decode,
// ingest, every detector, correlation and the alert tracker. Rendering the
// next body (the simulated replica's work) is excluded from the timing.
func benchPipeline(b *testing.B, next func(at time.Time) []byte) {
	store, err := window.New(window.Options{Retention: time.Hour + 5*time.Minute, ScrapeInterval: 5 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ds, err := detect.New(detect.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	loop := New(Options{Assessor: assess.New(ds, assess.Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()}), Tracker: alert.NewTracker(alert.DefaultConfig()),
		Windows: store, Sender: discard{}, Logger: zap.NewNop()}, nil)
	// The daemon's path: only the families the assessment reads are kept.
	dec := scrape.NewKeepingDecoder(assess.Reads(detect.DefaultConfig()))
	at := time.Unix(1_800_000_000, 0)
	step := func(body []byte) {
		groups, err := dec.Decode(body, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Append(series.Scrape{Target: "r0", Kind: "engine", At: at, Groups: groups}); err != nil {
			b.Fatal(err)
		}
		loop.Evaluate(at)
	}
	// Fill the window to its steady state (65 minutes of 5 s scrapes), so
	// detectors read full ranges and rings no longer grow.
	for range 800 {
		at = at.Add(5 * time.Second)
		step(next(at))
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		at = at.Add(5 * time.Second)
		body := next(at)
		b.StartTimer()
		step(body)
	}
}
