package backtest

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Pages that stay true for the whole incident: a relative detector's
// baseline is frozen when its incident begins, so an incident that
// outlasts the baseline does not become its own baseline and resolve
// while still there; and a replica broken since the watchdog first saw
// it is judged by its healthy peers.

// timeline renders events for a failure message.
func timeline(evs []notify.Event) string {
	var lines []string
	for _, ev := range evs {
		lines = append(lines, ev.At.Sub(start).String()+" "+string(ev.Kind)+" "+ev.Severity.String()+" "+ev.Replica+" "+ev.Class+": "+ev.Headline)
	}
	return strings.Join(lines, "\n")
}

// incident returns the events of the one incident whose trigger is of
// class on replica, failing the test unless exactly one such trigger was
// sent.
func incident(t *testing.T, res Result, replica string, class detect.Class) []notify.Event {
	t.Helper()
	var fp string
	for _, ev := range res.Events {
		if ev.Kind == notify.KindTrigger && ev.Replica == replica && ev.Class == string(class) {
			if fp != "" {
				t.Fatalf("more than one %s trigger on %s:\n%s", class, replica, timeline(res.Events))
			}
			fp = ev.Fingerprint
		}
	}
	if fp == "" {
		t.Fatalf("no %s trigger on %s:\n%s", class, replica, timeline(res.Events))
	}
	var out []notify.Event
	for _, ev := range res.Events {
		if ev.Fingerprint == fp {
			out = append(out, ev)
		}
	}
	return out
}

// staysOpenUntil checks that the incident evs never resolved before
// recovery and resolved exactly once after it.
func staysOpenUntil(t *testing.T, evs []notify.Event, recovery time.Time) {
	t.Helper()
	resolves := 0
	for _, ev := range evs {
		if ev.Kind != notify.KindResolve {
			continue
		}
		if ev.At.Before(recovery) {
			t.Errorf("resolved at %s, before the recovery at %s:\n%s", ev.At.Sub(start), recovery.Sub(start), timeline(evs))
		}
		resolves++
	}
	if resolves != 1 {
		t.Errorf("%d resolves, want one after the recovery at %s:\n%s", resolves, recovery.Sub(start), timeline(evs))
	}
}

// A prompt-template change that is not rolled back for six times the
// cache_collapse baseline pages once and stays open, whatever the
// baseline comes to hold; rolled back, it resolves once (after the
// backlog and the aborts it built have drained: they are its members).
func TestTemplateChangeNeverRolledBackStaysOpen(t *testing.T) {
	s := demoSettings(t)
	collapse := 6 * detect.Get[detect.CacheCollapseConfig](s.Detectors).Baseline
	scenario := sim.Scenario{Name: "template change", Base: sim.DefaultLoad(), Phases: []sim.Phase{
		{Name: "healthy", Duration: sim.IncidentBaseline},
		{Name: "timestamped system prompt", Class: sim.ClassCacheCollapse, Duration: collapse, Replicas: []int{0},
			Change: func(l *sim.Load) { l.TimestampedSystemPrompt = true }},
		{Name: "rolled back"},
	}}
	d := sim.IncidentBaseline + collapse + 8*time.Minute
	res, err := Run(Scrapes(simulate(t, scenario, d, time.Second), start, start.Add(d), time.Second), s)
	if err != nil {
		t.Fatal(err)
	}
	evs := incident(t, res, "sim-0", detect.CacheCollapse)
	if at := evs[0].At; at.Before(start.Add(sim.IncidentBaseline)) || at.After(start.Add(sim.IncidentBaseline+time.Minute)) {
		t.Errorf("triggered at %s, want within a minute of the change at %s", at.Sub(start), sim.IncidentBaseline)
	}
	staysOpenUntil(t, evs, start.Add(sim.IncidentBaseline+collapse))
}

// A time to first token five times its normal level, for six times the
// queue_latency baseline, pages once and stays open; back to normal, it
// resolves once.
func TestSlowFirstTokensStayOpenForSixBaselines(t *testing.T) {
	s := demoSettings(t)
	detect.Edit(&s.Detectors, func(c *detect.QueueLatencyConfig) {
		c.Range, c.Baseline, c.MinRequests = 20*time.Second, time.Minute, 20
	})
	if err := s.Detectors.Validate(); err != nil {
		t.Fatal(err)
	}
	const healthy, slow, after = 3 * time.Minute, 6 * time.Minute, 2 * time.Minute
	ttft := func(el time.Duration) float64 {
		if el >= healthy && el < healthy+slow {
			return 1.6
		}
		return 0.3
	}
	d := healthy + slow + after
	res, err := Run(Scrapes(engineScrapes("engine-0", d, ttft), start, start.Add(d), time.Second), s)
	if err != nil {
		t.Fatal(err)
	}
	evs := incident(t, res, "engine-0", detect.QueueLatency)
	if at := evs[0].At; at.Before(start.Add(healthy)) || at.After(start.Add(healthy+time.Minute)) {
		t.Errorf("triggered at %s, want within a minute of the slowdown at %s", at.Sub(start), healthy)
	}
	staysOpenUntil(t, evs, start.Add(healthy+slow))
}

// engineScrapes is a synthetic engine's scrapes, one a second for d: ten
// requests a second, each waiting ttft(elapsed) seconds for its first
// token, nearly all of it in the queue.
func engineScrapes(target string, d time.Duration, ttft func(time.Duration) float64) []series.Scrape {
	bounds := []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20}
	type hist struct {
		buckets    []float64
		sum, count float64
	}
	newHist := func() *hist { return &hist{buckets: make([]float64, len(bounds))} }
	ttftH, queueH := newHist(), newHist()
	observe := func(h *hist, n, v float64) {
		for i, ub := range bounds {
			if v <= ub {
				h.buckets[i] += n
			}
		}
		h.count += n
		h.sum += n * v
	}
	labels := func(pairs ...string) series.Labels {
		var ls series.Labels
		for i := 0; i+1 < len(pairs); i += 2 {
			ls = append(ls, series.Label{Name: pairs[i], Value: pairs[i+1]})
		}
		return ls.Sort()
	}
	emit := func(samples []series.Sample, name string, h *hist) []series.Sample {
		for i, ub := range bounds {
			samples = append(samples, series.Sample{Name: name + "_bucket", Labels: labels("le", strconv.FormatFloat(ub, 'g', -1, 64)), Value: h.buckets[i]})
		}
		return append(samples,
			series.Sample{Name: name + "_bucket", Labels: labels("le", "+Inf"), Value: h.count},
			series.Sample{Name: name + "_sum", Value: h.sum},
			series.Sample{Name: name + "_count", Value: h.count})
	}
	const rate = 10.0
	var requests float64
	var out []series.Scrape
	for el := time.Duration(0); el < d; el += time.Second {
		v := ttft(el)
		observe(ttftH, rate, v)
		observe(queueH, rate, math.Max(0, v-0.2))
		requests += rate
		samples := []series.Sample{
			{Name: series.HTTPRequestsTotal, Labels: labels("endpoint", "/v1/chat/completions", "method", "POST"), Value: requests},
			{Name: series.NumRequestsTotal, Value: requests},
			{Name: series.NumRunningReqs, Value: 40},
			{Name: series.NumQueueReqs, Value: 2 + 10*v},
			{Name: series.TokenUsage, Value: 0.5},
		}
		samples = emit(samples, series.TTFTSeconds, ttftH)
		samples = emit(samples, series.QueueTimeSeconds, queueH)
		out = append(out, series.Scrape{Target: target, Kind: "engine", At: start.Add(el), Duration: 2 * time.Millisecond,
			Groups: []series.Group{{Model: "Qwen/Qwen3-8B", EngineType: "unified", Samples: samples}}})
	}
	return out
}

// Three replicas of one model, one of them with a timestamped system
// prompt since before the watchdog first scraped it: it has no healthy
// history to compare with, so its healthy peers' hit rate is its
// reference. It pages, and stays open for six baselines although its own
// baseline, once ready, holds nothing but the collapse; its peers do not
// page.
func TestReplicaBrokenSinceStartIsPagedByItsPeers(t *testing.T) {
	s := demoSettings(t)
	d := 6 * detect.Get[detect.CacheCollapseConfig](s.Detectors).Baseline
	scenario := sim.Scenario{Name: "broken since start", Base: sim.DefaultLoad(), Phases: []sim.Phase{
		{Name: "timestamped system prompt on sim-2", Class: sim.ClassCacheCollapse, Replicas: []int{2},
			Change: func(l *sim.Load) { l.TimestampedSystemPrompt = true }},
	}}
	res, err := Run(Scrapes(simulateFleet(t, scenario, 3, d, time.Second), start, start.Add(d), time.Second), s)
	if err != nil {
		t.Fatal(err)
	}
	evs := incident(t, res, "sim-2", detect.CacheCollapse)
	if at := evs[0].At; at.After(start.Add(time.Minute)) {
		t.Errorf("triggered at %s, want within the first minute", at.Sub(start))
	}
	for _, ev := range evs {
		if ev.Kind == notify.KindResolve {
			t.Errorf("resolved at %s while still broken:\n%s", ev.At.Sub(start), timeline(evs))
		}
	}
	for _, ev := range res.Events {
		if ev.Replica != "sim-2" && ev.Severity != detect.Info {
			t.Errorf("a healthy peer paged:\n%s", timeline(res.Events))
			break
		}
	}
}
