package assess

import (
	"math"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ttftStore holds replica r of model m scraped every 10 s from t0-10m to
// t0+10m, 100 requests a scrape: 90 with a TTFT within 0.5 s, 5 within
// 1 s, 5 slower. At t0+5m it restarts: its counters start over from
// zero (the first scrape after it holds that scrape's 100 requests).
func ttftStore(t *testing.T) *window.Store {
	t.Helper()
	s, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	le := func(v string) series.Labels { return series.Labels{{Name: "le", Value: v}} }
	n := 0.0
	for i := -60; i <= 60; i++ {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		if i == 31 {
			n = 0 // restarted at t0+5m10s
		}
		n++
		bucket := series.TTFTSeconds + "_bucket"
		if err := s.Append(series.Scrape{Target: "r", Kind: "engine", At: at, Groups: []series.Group{{Model: "m", Samples: []series.Sample{
			{Name: bucket, Labels: le("0.5"), Value: 90 * n}, {Name: bucket, Labels: le("1"), Value: 95 * n},
			{Name: bucket, Labels: le("+Inf"), Value: 100 * n},
			{Name: series.TTFTSeconds + "_count", Value: 100 * n}, {Name: series.TTFTSeconds + "_sum", Value: 30 * n},
			{Name: series.NumRequestsTotal, Value: 100 * n},
		}}}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Rounds every 45 s (not a multiple of the scrapes) count every step of
// the counters once: the events of (t0, t0+10m] are the 60 scrapes'
// 6000 requests, 5400 within the boundary, across the replica's
// restart. The 0.8 s threshold is not a bucket boundary: the 0.5 s
// bucket is read, and the status says so.
func TestRoundsCountEveryEventOnceAcrossARestart(t *testing.T) {
	book := slo.NewBook(slo.Config{Policy: slo.DefaultPolicy(), Objectives: []slo.Objective{
		{Name: "ttft", Model: "m", Kind: slo.TTFT, Threshold: 800 * time.Millisecond, Target: 0.99, Period: 24 * time.Hour},
	}})
	a := New(nil, Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig(), SLOs: book})
	ws := ttftStore(t)
	book.Record(t0, nil) // the memory's end: the first round counts from t0
	var sum slo.Events
	var last Round
	for at := t0.Add(45 * time.Second); !at.After(t0.Add(10 * time.Minute)); at = at.Add(45 * time.Second) {
		last = a.Assess(ws, at, nil)
		for _, s := range last.SLI {
			sum = sum.Add(s.Events)
		}
		book.Record(last.At, last.SLI)
	}
	// The rounds end at t0+9m45s: 58 scrapes after t0.
	if math.Abs(sum.Total-5800) > 1e-6 || math.Abs(sum.Good-5220) > 1e-6 {
		t.Errorf("events counted %+v, want 5220 good of 5800", sum)
	}
	if len(last.SLOs) != 1 {
		t.Fatalf("statuses %+v", last.SLOs)
	}
	st := last.SLOs[0]
	if !st.Rounded || st.Boundary != 0.5 || st.Title != "TTFT ≤ 0.5s for 99%" {
		t.Errorf("boundary %v rounded %v title %q; want the 0.5 s bucket, said", st.Boundary, st.Rounded, st.Title)
	}
	if st.Burning() {
		t.Errorf("ten minutes of memory judged an hour-long rule: %+v", st.Rules)
	}
}
