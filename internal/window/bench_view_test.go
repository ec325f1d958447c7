package window

import (
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// BenchmarkViewQueries measures the detectors' typical questions on a
// replica whose window holds 65 minutes of the full current exposition at
// 5 s, values moving as a busy server's (so the points are as costly to
// decode as in production): a counter's rate over 1 minute, a latency
// histogram's p99 over 5 minutes and over the 1-hour baseline, and a
// gauge's average over the 1-hour baseline. Each question opens its own
// View, as a round does for each replica, so decoding is paid every time.
func BenchmarkViewQueries(b *testing.B) {
	opts := Options{Retention: 65*time.Minute + 10*time.Second, ScrapeInterval: 5 * time.Second}
	s := newTestStore(b, opts)
	mf := newMovingFixture(b, t0, 1, false)
	const scrapes = 800
	for i := range scrapes {
		now := t0.Add(time.Duration(i) * opts.ScrapeInterval)
		mustAppend(b, s, okScrape("r", now, mf.next(b, now)...))
	}
	now := t0.Add((scrapes - 1) * opts.ScrapeInterval)
	for _, q := range []struct {
		name string
		ask  func(w detect.Window) bool
	}{
		{"Rate1m", func(w detect.Window) bool {
			_, ok := w.Rate(detect.Sel(series.PromptTokensTotal), now.Add(-time.Minute), now)
			return ok
		}},
		{"Quantile5m", func(w detect.Window) bool {
			_, ok := w.Quantile(0.99, series.InterTokenLatency, nil, now.Add(-5*time.Minute), now)
			return ok
		}},
		{"Quantile1h", func(w detect.Window) bool {
			_, ok := w.Quantile(0.99, series.InterTokenLatency, nil, now.Add(-time.Hour), now)
			return ok
		}},
		{"Avg1h", func(w detect.Window) bool {
			_, ok := w.Avg(detect.Sel(series.NumRunningReqs), now.Add(-time.Hour), now)
			return ok
		}},
	} {
		b.Run(q.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.View("r", func(w detect.Window) {
					if !q.ask(w) {
						b.Fatal("no answer")
					}
				})
			}
		})
	}
}
