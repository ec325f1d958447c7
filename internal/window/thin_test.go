package window

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Thinning old histogram buckets (Options.BucketFullResolution) leaves the
// ranges detectors compare now as they were and starts an hour-long
// baseline up to a minute late: over the full exposition moving as a busy
// server's does, at production retention, every quantile over a current
// range is the one without thinning, and every baseline quantile is the one
// without thinning over the same range started at one of its first
// minute's scrapes.
func TestThinnedBucketsKeepBaselineQuantiles(t *testing.T) {
	seq := movingSequence(t)
	full := productionOptions()
	full.BucketFullResolution = -1
	thinned, kept := newTestStore(t, productionOptions()), newTestStore(t, full)
	var now time.Time
	for i, samples := range seq {
		now = t0.Add(time.Duration(i) * full.ScrapeInterval)
		mustAppend(t, thinned, okScrape("r", now, samples...))
		mustAppend(t, kept, okScrape("r", now, samples...))
	}
	hists := map[string]bool{}
	for _, s := range seq[len(seq)-1] {
		if h, ok := strings.CutSuffix(s.Name, "_bucket"); ok {
			hists[h] = true
		}
	}
	type span struct {
		from, to time.Time
		baseline bool
	}
	spans := []span{
		{now.Add(-time.Minute), now, false},
		{now.Add(-5 * time.Minute), now, false},
		{now.Add(-61 * time.Minute), now.Add(-time.Minute), true},
		{now.Add(-65 * time.Minute), now.Add(-5 * time.Minute), true},
	}
	perMinute := int(time.Minute / full.ScrapeInterval)
	var worst float64
	compared := 0
	withView(t, thinned, "r", func(tw detect.Window) {
		withView(t, kept, "r", func(kw detect.Window) {
			for h := range hists {
				for _, sp := range spans {
					for _, q := range []float64{0.5, 0.9, 0.99} {
						got, gok := tw.Quantile(q, h, nil, sp.from, sp.to)
						want, wok := kw.Quantile(q, h, nil, sp.from, sp.to)
						if gok != wok {
							t.Fatalf("Quantile(%v, %s, %s..%s): ok %v thinned, %v not", q, h, sp.from, sp.to, gok, wok)
						}
						if !gok {
							continue
						}
						compared++
						if !sp.baseline {
							if got != want {
								t.Errorf("Quantile(%v, %s) over the last %s = %v thinned, %v not: a current range must read every scrape", q, h, sp.to.Sub(sp.from), got, want)
							}
							continue
						}
						worst = max(worst, math.Abs(got-want)/math.Max(math.Abs(want), 1e-9))
						late := -1
						for j := range perMinute {
							from := sp.from.Add(time.Duration(j) * full.ScrapeInterval)
							if w, ok := kw.Quantile(q, h, nil, from, sp.to); ok && w == got {
								late = j
								break
							}
						}
						if late < 0 {
							t.Errorf("baseline Quantile(%v, %s, %s..%s) = %v thinned, %v not, and no start within the first minute gives it", q, h, sp.from, sp.to, got, want)
						}
					}
				}
			}
		})
	})
	if compared == 0 {
		t.Fatal("no quantile compared")
	}
	tb, kb := thinned.replicas["r"].bytes, kept.replicas["r"].bytes
	if tb >= kb {
		t.Errorf("thinned window %d bytes, not below %d", tb, kb)
	}
	t.Logf("%d quantiles compared, baselines at most %.1f%% from the whole range's; window %d bytes thinned, %d not (%.0f%%)", compared, 100*worst, tb, kb, 100*float64(tb)/float64(kb))
}
