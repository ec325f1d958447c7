package window_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

var rankStart = time.Date(2026, 5, 29, 14, 0, 0, 0, time.UTC)

// rankCounters is a data-parallel replica with two scheduler ranks, each
// processing perRank tokens/s; rank 1's scheduler restarts (its counter goes
// back to zero) at restartStep. Rank 0 has been up for long (a large counter).
type rankCounters struct {
	perRank     float64
	restartStep int
	step        time.Duration
}

func (rc rankCounters) values(i int) (r0, r1 float64) {
	sec := rc.step.Seconds()
	r0 = 4e6 + rc.perRank*sec*float64(i)
	if i < rc.restartStep {
		return r0, 3e6 + rc.perRank*sec*float64(i)
	}
	return r0, rc.perRank * sec * float64(i-rc.restartStep+1)
}

// One rank's restart must not turn into a rate of millions of tokens per
// second through the real path: the scraper folds the DP ranks of an
// exposition into one series before the window sees it, so the window has
// to cope with a summed counter that drops by one rank's share.
func TestRateAcrossOneRankRestartThroughScraper(t *testing.T) {
	rc := rankCounters{perRank: 500, restartStep: 30, step: 5 * time.Second}
	store, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: rc.step}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dec := scrape.NewDecoder()
	const steps = 60
	for i := 0; i < steps; i++ {
		r0, r1 := rc.values(i)
		// The scheduler's counters carry dp_rank; the tokenizer's (finished
		// requests, latency histograms) are one per replica and keep going.
		done := 20 * rc.step.Seconds() * float64(i)
		body := fmt.Sprintf(`# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{dp_rank="0",engine_type="unified",mode="decode",model_name="m",tp_rank="0"} %g
sglang:realtime_tokens_total{dp_rank="1",engine_type="unified",mode="decode",model_name="m",tp_rank="0"} %g
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"} 20
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",tp_rank="0"} 20
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m"} %g
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} %g
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} %g
sglang:time_to_first_token_seconds_bucket{le="1",model_name="m"} %g
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} %g
sglang:time_to_first_token_seconds_sum{model_name="m"} %g
sglang:time_to_first_token_seconds_count{model_name="m"} %g
`, r0, r1, 1e5+done, 5e7+50*done, 9e4+0.9*done, 1e5+done, 1e5+done, 3e4+0.3*done, 1e5+done)
		groups, err := dec.Decode([]byte(body), 0)
		if err != nil {
			t.Fatal(err)
		}
		sc := series.Scrape{Target: "dp", Kind: "engine", At: rankStart.Add(time.Duration(i) * rc.step), Groups: groups}
		if err := store.Append(sc); err != nil {
			t.Fatal(err)
		}
	}
	now := rankStart.Add((steps - 1) * rc.step)
	sel := detect.Sel(series.RealtimeTokensTotal, "mode", "decode")
	want := 2 * rc.perRank
	store.View("dp", func(w detect.Window) {
		if n := w.Restarts(rankStart, now); n != 0 {
			t.Errorf("one rank's restart counted as %d replica restarts", n)
		}
		for _, span := range []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute} {
			rate, ok := w.Rate(sel, now.Add(-span), now)
			if !ok || math.Abs(rate-want) > 0.1*want {
				t.Errorf("Rate over %s across one rank's restart = %v, %v; want about %v tokens/s", span, rate, ok, want)
			}
			inc, ok := w.Increase(sel, now.Add(-span), now)
			if wantInc := want * (span - rc.step).Seconds(); !ok || math.Abs(inc-wantInc) > 0.1*wantInc {
				t.Errorf("Increase over %s across one rank's restart = %v, %v; want about %v", span, inc, ok, wantInc)
			}
		}
	})
}

// With the ranks kept apart (series told apart by dp_rank), the increase is
// taken per series and summed: the restarted rank counts from zero.
func TestRatePerRankSeriesThenSum(t *testing.T) {
	rc := rankCounters{perRank: 500, restartStep: 30, step: 5 * time.Second}
	store, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: rc.step}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const steps = 60
	for i := 0; i < steps; i++ {
		r0, r1 := rc.values(i)
		sc := series.Scrape{Target: "dp", Kind: "engine", At: rankStart.Add(time.Duration(i) * rc.step),
			Groups: []series.Group{{Samples: []series.Sample{
				{Name: "tokens_total", Labels: series.Labels{{Name: "dp_rank", Value: "0"}}, Value: r0},
				{Name: "tokens_total", Labels: series.Labels{{Name: "dp_rank", Value: "1"}}, Value: r1},
			}}}}
		if err := store.Append(sc); err != nil {
			t.Fatal(err)
		}
	}
	now := rankStart.Add((steps - 1) * rc.step)
	store.View("dp", func(w detect.Window) {
		rate, ok := w.Rate(detect.Sel("tokens_total"), now.Add(-5*time.Minute), now)
		if want := 2 * rc.perRank; !ok || math.Abs(rate-want) > 0.01*want {
			t.Errorf("Rate = %v, %v; want %v", rate, ok, want)
		}
	})
}
