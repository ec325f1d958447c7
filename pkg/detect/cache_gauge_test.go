package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// v04Window replays the official SGLang v0.4 /metrics example (no
// cached-token counters, only the per-batch sglang:cache_hit_rate gauge)
// through the real decoder into the real window: 65 minutes every 5 s, the
// counters growing at the rate their totals imply over an hour, the hit
// rate gauge at hit(el) after prefill batches and 0 on the decode logs in
// between (every other scrape), as the scheduler writes it.
func v04Window(t *testing.T, hit func(el time.Duration) float64) (*window.Store, string, time.Time) {
	t.Helper()
	body, err := fixture.SGLang("docs-production-metrics-example.prom")
	if err != nil {
		t.Fatal(err)
	}
	groups, err := scrape.NewDecoder().Decode(body, 0)
	if err != nil || len(groups) != 1 {
		t.Fatalf("decode v0.4 fixture: %d groups, %v", len(groups), err)
	}
	base := groups[0]
	cfg := detect.DefaultConfig()
	const step = 5 * time.Second
	store, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: step}, nil)
	if err != nil {
		t.Fatal(err)
	}
	counterLike := func(name string) bool {
		for _, s := range []string{"_total", "_count", "_sum", "_bucket"} {
			if strings.HasSuffix(name, s) {
				return true
			}
		}
		return false
	}
	var now time.Time
	for i := 0; el(i, step) <= 65*time.Minute; i++ {
		e := el(i, step)
		now = start.Add(e)
		g := base
		g.Samples = make([]series.Sample, len(base.Samples))
		for k, smp := range base.Samples {
			switch {
			case smp.Name == series.CacheHitRateGauge:
				smp.Value = 0
				if i%2 == 0 {
					smp.Value = hit(e)
				}
			case counterLike(smp.Name):
				smp.Value *= 1 + e.Hours()
			}
			g.Samples[k] = smp
		}
		if err := store.Append(series.Scrape{Target: "v04", Kind: "engine", At: now, Groups: []series.Group{g}}); err != nil {
			t.Fatal(err)
		}
	}
	return store, "v04", now
}

func el(i int, step time.Duration) time.Duration { return time.Duration(i) * step }

func detectCache(t *testing.T, store *window.Store, name string, now time.Time) []detect.Finding {
	t.Helper()
	ds, err := detect.New(detect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out []detect.Finding
	for _, d := range ds {
		if d.Class() != detect.CacheCollapse {
			continue
		}
		store.View(name, func(w detect.Window) { out = d.Detect(w, now) })
	}
	return out
}

// On v0.4 expositions the per-batch gauge averaged over the window is the
// only hit rate there is: a collapse pages, at lower confidence, and the
// page says where the number comes from.
func TestCacheCollapseFromTheV04PerBatchGauge(t *testing.T) {
	store, name, now := v04Window(t, stepAt(60*minute+time.Second, 0.62, 0.04))
	f := one(t, detectCache(t, store, name, now))
	if f.Class != detect.CacheCollapse || f.Model != "meta-llama/Llama-3.1-8B-Instruct" {
		t.Errorf("finding header: %s %s", f.Class, f.Model)
	}
	if f.Severity != detect.Warning {
		t.Errorf("severity %s: a per-batch gauge gives a warning at most", f.Severity)
	}
	e := evidenceNamed(t, f, "prefix cache hit rate")
	if !strings.Contains(e.Name, "per-batch gauge") || !e.HasBaseline || !approx(e.Value, 0.02, 0.05) || !approx(e.Baseline, 0.31, 0.05) {
		t.Errorf("hit rate evidence = %+v; want the gauge's window average 0.02 against 0.31", e)
	}
	contains(t, "diagnosis", f.Diagnosis, "from the per-batch gauge, lower confidence")
}

func TestCacheCollapseV04GaugeDoesNotPage(t *testing.T) {
	tests := []struct {
		name string
		hit  func(el time.Duration) float64
	}{
		{"steady hit rate", constant(0.62)},
		{"small dip", stepAt(60*minute+time.Second, 0.62, 0.45)},
		{"never any hits", constant(0)},
		{"NaN gauge", constant(math.NaN())},
		{"Inf gauge after the baseline", stepAt(60*minute+time.Second, 0.62, math.Inf(1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, name, now := v04Window(t, tt.hit)
			none(t, detectCache(t, store, name, now))
		})
	}
}
