package sim

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

var t0 = time.Unix(1_700_000_000, 0)

// scraped is one parsed /metrics of one replica.
type scraped map[string]*dto.MetricFamily

func scrape(t *testing.T, f *Fleet, i int) scraped {
	t.Helper()
	var buf bytes.Buffer
	if err := f.WriteMetrics(&buf, i); err != nil {
		if errors.Is(err, ErrReplicaDown) {
			return nil
		}
		t.Fatal(err)
	}
	return parseExposition(t, buf.Bytes())
}

// v sums the family's series whose labels include the given pairs; for a
// histogram it sums the observation counts.
func (s scraped) v(name string, pairs ...string) float64 {
	total := 0.0
	for _, m := range s[name].GetMetric() {
		if !hasLabels(m, pairs) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// hsum sums a histogram's _sum over its series.
func (s scraped) hsum(name string) float64 {
	total := 0.0
	for _, m := range s[name].GetMetric() {
		total += m.GetHistogram().GetSampleSum()
	}
	return total
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

const chat = "/v1/chat/completions"

// scrapeEvery is the tests' scrape interval: coarser than the demo's 1 s to
// keep -race runs short; gauges are still sampled many times per phase.
const scrapeEvery = 2 * time.Second

// window holds counter deltas and gauge extremes of one replica between
// two instants, sampled every second as a scraper would.
type window struct {
	retracted, prompt, cached, effHit, effAll float64
	httpReq, requests, aborted                float64
	ttftN, ttftSum, itlN, itlSum              float64
	maxUsage, maxQueue, lastQueue, meanRun    float64
}

func (w window) hitRate() float64 { return w.cached / w.prompt }
func (w window) effHitRate() float64 {
	return w.effHit / w.effAll
}

// observe advances the fleet second by second over [from, to) (offsets from
// t0) and returns the window of every replica, as a 1 s scraper sees it.
func observeAll(t *testing.T, f *Fleet, from, to time.Duration) []window {
	t.Helper()
	f.Advance(t0.Add(from))
	n := len(f.Replicas())
	first, last := make([]scraped, n), make([]scraped, n)
	for i := range n {
		first[i] = scrape(t, f, i)
		last[i] = first[i]
	}
	ws := make([]window, n)
	samples := 0.0
	for at := from + scrapeEvery; at <= to; at += scrapeEvery {
		f.Advance(t0.Add(at))
		samples++
		for i := range n {
			s := scrape(t, f, i)
			if s == nil || first[i] == nil {
				continue // down: callers that care check it themselves
			}
			w := &ws[i]
			w.maxUsage = max(w.maxUsage, s.v("sglang:token_usage"))
			w.maxQueue = max(w.maxQueue, s.v("sglang:num_queue_reqs"))
			w.meanRun += s.v("sglang:num_running_reqs")
			last[i] = s
		}
	}
	for i := range n {
		w, a, b := &ws[i], first[i], last[i]
		if a == nil || b == nil {
			continue
		}
		w.meanRun /= samples
		w.lastQueue = b.v("sglang:num_queue_reqs")
		d := func(name string, pairs ...string) float64 { return b.v(name, pairs...) - a.v(name, pairs...) }
		w.retracted = d("sglang:num_retracted_requests_total")
		w.prompt = d("sglang:prompt_tokens_total")
		w.cached = d("sglang:cached_tokens_total")
		w.effHit = d("sglang:prefill_effective_tokens_total", "mode", "device_hit")
		w.effAll = d("sglang:prefill_effective_tokens_total")
		w.httpReq = d("sglang:http_requests_total", "endpoint", chat)
		w.requests = d("sglang:num_requests_total")
		w.aborted = d("sglang:num_aborted_requests_total")
		w.ttftN = d("sglang:time_to_first_token_seconds")
		w.ttftSum = b.hsum("sglang:time_to_first_token_seconds") - a.hsum("sglang:time_to_first_token_seconds")
		w.itlN = d("sglang:inter_token_latency_seconds")
		w.itlSum = b.hsum("sglang:inter_token_latency_seconds") - a.hsum("sglang:inter_token_latency_seconds")
	}
	return ws
}

func observe(t *testing.T, f *Fleet, i int, from, to time.Duration) window {
	t.Helper()
	return observeAll(t, f, from, to)[i]
}

func (w window) String() string {
	return fmt.Sprintf("retracted=%.0f hit=%.2f effHit=%.2f http=%.0f done=%.0f aborted=%.0f ttft=%.3fs itl=%.4fs maxUsage=%.2f maxQueue=%.0f lastQueue=%.0f meanRunning=%.1f",
		w.retracted, w.hitRate(), w.effHitRate(), w.httpReq, w.requests, w.aborted,
		w.ttftSum/w.ttftN, w.itlSum/w.itlN, w.maxUsage, w.maxQueue, w.lastQueue, w.meanRun)
}

// phaseStart is when sc's phase called name begins.
func phaseStart(t *testing.T, sc Scenario, name string) time.Duration {
	t.Helper()
	d, ok := sc.Start(name)
	if !ok {
		t.Fatalf("no phase %q", name)
	}
	return d
}

func TestHealthyScenarioIsHealthy(t *testing.T) {
	f := NewFleet(FleetConfig{Seed: 3, Start: t0, Warmup: time.Minute})
	rates := make([][]float64, 3)
	for k := range 5 {
		from := time.Duration(k) * time.Minute
		for i, w := range observeAll(t, f, from, from+time.Minute) {
			t.Logf("sim-%d minute %d: %v", i, k, w)
			if w.retracted != 0 || w.aborted != 0 {
				t.Errorf("sim-%d minute %d: retracted %.0f, aborted %.0f; want none", i, k, w.retracted, w.aborted)
			}
			if w.maxQueue > 40 || w.maxUsage > 0.5 {
				t.Errorf("sim-%d minute %d: max queue %.0f, max token_usage %.2f; want a short queue and a roomy pool", i, k, w.maxQueue, w.maxUsage)
			}
			if w.meanRun < 0.6*64 {
				t.Errorf("sim-%d minute %d: mean running %.1f; want the batch near --max-running-requests", i, k, w.meanRun)
			}
			if ratio := w.requests / w.httpReq; ratio < 0.9 || ratio > 1.1 {
				t.Errorf("sim-%d minute %d: completions/arrivals %.2f; want ~1", i, k, ratio)
			}
			rates[i] = append(rates[i], w.hitRate())
		}
	}
	for i, rs := range rates {
		lo, hi := rs[0], rs[0]
		for _, r := range rs {
			lo, hi = min(lo, r), max(hi, r)
		}
		if lo < 0.7 || hi-lo > 0.05 {
			t.Errorf("sim-%d: per-minute hit rates %v; want high and stable", i, rs)
		}
	}
}

// TestDemoScenario drives the whole demo with synthetic times and checks
// that each incident shows on its replica -- and only there -- in the
// numbers a watchdog reads.
func TestDemoScenario(t *testing.T) {
	sc := DemoScenario(1)
	f := NewFleet(FleetConfig{Seed: 1, Start: t0, Scenario: sc, Warmup: time.Minute})
	at := func(name string) time.Duration { return phaseStart(t, sc, name) }
	s := time.Second

	// Healthy reference, per replica, from the first phase.
	base := observeAll(t, f, 0, 45*s)
	for i, w := range base {
		t.Logf("healthy sim-%d: %v", i, w)
	}

	// Preempt storm on sim-0: the wave fills the pool, then retractions.
	storm := at(ClassPreemptStorm)
	ws := observeAll(t, f, storm, storm+60*s)
	w0 := ws[0]
	t.Logf("preempt_storm sim-0: %v", w0)
	if w0.retracted < 5 {
		t.Errorf("preempt storm: %.0f retractions, want several", w0.retracted)
	}
	if w0.maxUsage < 0.95 {
		t.Errorf("preempt storm: max token_usage %.2f, want the pool full", w0.maxUsage)
	}
	if itl, healthy := w0.itlSum/w0.itlN, base[0].itlSum/base[0].itlN; itl < 1.4*healthy {
		t.Errorf("preempt storm: mean ITL %.4f s vs healthy %.4f s, want it clearly higher", itl, healthy)
	}
	for _, i := range []int{1, 2} {
		if ws[i].retracted != 0 || ws[i].aborted != 0 {
			t.Errorf("sim-%d during sim-0's storm: %v; want it untouched", i, ws[i])
		}
	}

	// Cache collapse on sim-1: hit rate collapses, TTFT rises, KV stays normal.
	collapse := at(ClassCacheCollapse)
	w1 := observe(t, f, 1, collapse+15*s, collapse+45*s)
	t.Logf("cache_collapse sim-1: %v", w1)
	if w1.hitRate() > 0.2*base[1].hitRate() || w1.effHitRate() > 0.2*base[1].effHitRate() {
		t.Errorf("cache collapse: hit rate %.2f (effective %.2f) vs healthy %.2f, want a collapse",
			w1.hitRate(), w1.effHitRate(), base[1].hitRate())
	}
	if ttft, healthy := w1.ttftSum/w1.ttftN, base[1].ttftSum/base[1].ttftN; ttft < 2*healthy {
		t.Errorf("cache collapse: mean TTFT %.3f s vs healthy %.3f s, want it to rise", ttft, healthy)
	}
	if w1.maxUsage > 0.85 || w1.retracted != 0 {
		t.Errorf("cache collapse: max token_usage %.2f, %.0f retractions; want KV normal", w1.maxUsage, w1.retracted)
	}

	// Retry avalanche on sim-2: arrivals ≫ completions, aborts, growing queue.
	aval := at(ClassRetryAvalanche)
	w2 := observe(t, f, 2, aval+15*s, aval+45*s)
	t.Logf("retry_avalanche sim-2: %v", w2)
	if w2.httpReq < 3*w2.requests {
		t.Errorf("avalanche: %.0f HTTP requests vs %.0f completions, want arrivals ≫ completions", w2.httpReq, w2.requests)
	}
	if w2.aborted < 100 {
		t.Errorf("avalanche: %.0f aborts, want many", w2.aborted)
	}
	if w2.lastQueue < 4*max(base[2].maxQueue, 5) {
		t.Errorf("avalanche: queue %.0f at the end vs healthy max %.0f, want it grown", w2.lastQueue, base[2].maxQueue)
	}

	// Crash of sim-0: unreachable, then counters from zero and a new pid.
	crash := at(ClassCrash)
	f.Advance(t0.Add(crash - s))
	before := scrape(t, f, 0)
	f.Advance(t0.Add(crash + 5*s))
	if f.Up(0) || scrape(t, f, 0) != nil {
		t.Fatal("sim-0 should be down 5 s into the crash phase")
	}
	f.Advance(t0.Add(crash + 26*s))
	after := scrape(t, f, 0)
	if after == nil {
		t.Fatal("sim-0 should be back 26 s into the crash phase")
	}
	if got := after.v("sglang:num_requests_total"); got != 0 {
		t.Errorf("after restart num_requests_total = %v, want 0", got)
	}
	if pid := func(s scraped) string {
		return s["sglang:num_retracted_reqs"].GetMetric()[0].GetLabel()[3].GetValue()
	}; pid(before) == pid(after) {
		t.Errorf("pid label unchanged across the restart: %s", pid(after))
	}
	end := observe(t, f, 0, crash+60*s, crash+90*s)
	t.Logf("after restart sim-0: %v", end)
	if end.requests == 0 || end.hitRate() < 0.7 || end.maxQueue > 25 {
		t.Errorf("sim-0 should serve normally again after the restart: %v", end)
	}

	// Healthy at the end everywhere, once the GPU fault's backlog drained.
	var settled time.Duration
	for _, p := range sc.Phases[:len(sc.Phases)-1] {
		settled += p.Duration
	}
	for i, w := range observeAll(t, f, settled+60*s, settled+90*s) {
		if w.retracted != 0 || w.maxQueue > 25 || w.aborted > 0 {
			t.Errorf("sim-%d not healthy at the end: %v", i, w)
		}
	}
}

// TestInvariants checks every sub-step of the demo: the KV pool adds up,
// token_usage stays in [0,1], the batch never exceeds its limit, and
// counters only go down across a restart.
func TestInvariants(t *testing.T) {
	f := NewFleet(FleetConfig{Seed: 5, Start: t0, Scenario: DemoScenario(1)})
	type snap struct {
		e *engine
		c []float64
	}
	prev := make([]snap, 3)
	for k := 1; k <= 3600; k++ {
		f.Advance(t0.Add(time.Duration(k) * Step))
		for i, r := range f.replicas {
			e := r.engine
			if e == nil {
				continue
			}
			total := e.cfg.MaxTotalTokens
			if e.available() < 0 || e.used() < 0 || e.cache.evictable < 0 || e.used()+e.cache.evictable > total {
				t.Fatalf("step %d sim-%d: pool does not add up: used %d evictable %d available %d of %d",
					k, i, e.used(), e.cache.evictable, e.available(), total)
			}
			if u := e.g.tokenUsage; u < 0 || u > 1 {
				t.Fatalf("step %d sim-%d: token_usage %v", k, i, u)
			}
			if len(e.running) > e.cfg.MaxRunningRequests {
				t.Fatalf("step %d sim-%d: %d running > max %d", k, i, len(e.running), e.cfg.MaxRunningRequests)
			}
			c := counterValues(e)
			if prev[i].e == e {
				for j := range c {
					if c[j] < prev[i].c[j] {
						t.Fatalf("step %d sim-%d: counter %d went down %v -> %v without a restart", k, i, j, prev[i].c[j], c[j])
					}
				}
			}
			prev[i] = snap{e, c}
		}
	}
}

func counterValues(e *engine) []float64 {
	c := e.c
	v := []float64{c.retractedReqs, c.retractedIn, c.retractedOut, c.rtPrefillCompute, c.rtPrefillCache, c.rtDecode,
		c.effInput, c.effDeviceHit, c.evicted, c.cached, c.aborted, c.cpu}
	for s := range 2 {
		v = append(v, c.prompt[s], c.generation[s], c.requests[s], e.h.ttft[s].sum, e.h.e2e[s].sum)
	}
	for _, h := range []*histogram{e.h.queueTime, e.h.itl, e.h.promptLen, e.h.genLen, e.h.uncache, e.h.ttft[0], e.h.ttft[1]} {
		v = append(v, h.counts...)
	}
	for _, ep := range e.http {
		v = append(v, ep.requests)
		v = append(v, ep.responses[:]...)
	}
	return v
}

// TestDeterminism: same seed and times give byte-identical expositions, no
// matter how the same span is chopped into Advance calls.
func TestDeterminism(t *testing.T) {
	render := func(seed uint64, steps []time.Duration) []byte {
		f := NewFleet(FleetConfig{Seed: seed, Start: t0, Scenario: DemoScenario(1)})
		for _, d := range steps {
			f.Advance(t0.Add(d))
		}
		var out bytes.Buffer
		for i := range f.Replicas() {
			if err := f.WriteMetrics(&out, i); err != nil {
				t.Fatal(err)
			}
		}
		return out.Bytes()
	}
	end := 100 * time.Second
	var fine, jittery []time.Duration
	for d := time.Duration(0); d <= end; d += 37 * time.Millisecond {
		fine = append(fine, d)
	}
	for d := time.Duration(0); d < end; d += 2300 * time.Millisecond {
		jittery = append(jittery, d)
	}
	fine, jittery = append(fine, end), append(jittery, end)
	once := render(9, []time.Duration{end})
	if !bytes.Equal(once, render(9, []time.Duration{end})) {
		t.Fatal("same seed and times gave different expositions")
	}
	if !bytes.Equal(once, render(9, fine)) || !bytes.Equal(once, render(9, jittery)) {
		t.Fatal("the exposition depends on how often Advance is called")
	}
	if bytes.Equal(once, render(10, []time.Duration{end})) {
		t.Fatal("a different seed gave the same exposition")
	}
}

func TestScenarioPhases(t *testing.T) {
	sc := DemoScenario(1)
	for _, tc := range []struct {
		at   time.Duration
		want string
	}{
		{-time.Minute, "healthy"}, // warm-up
		{0, "healthy"},
		{44 * time.Second, "healthy"},
		{45 * time.Second, ClassPreemptStorm},
		{3*time.Minute + 32*time.Second, "latency_blip"},
		{4*time.Minute + 50*time.Second, ClassCrash},
		{time.Hour, "healthy"},
	} {
		if p, _ := sc.PhaseAt(tc.at); p.Name != tc.want {
			t.Errorf("PhaseAt(%v) = %q, want %q", tc.at, p.Name, tc.want)
		}
	}
	var total time.Duration
	for _, p := range sc.Phases[:len(sc.Phases)-1] {
		total += p.Duration
	}
	if total > 7*time.Minute {
		t.Errorf("demo takes %v before settling, want about seven minutes", total)
	}
	if half := DemoScenario(0.5); half.Phases[1].Duration != 30*time.Second {
		t.Errorf("DemoScenario(0.5) storm lasts %v, want 30s", half.Phases[1].Duration)
	}

	f := NewFleet(FleetConfig{Seed: 1, Start: t0, Scenario: sc})
	if got := f.Phase(t0.Add(46 * time.Second)); got != ClassPreemptStorm {
		t.Errorf("Fleet.Phase = %q, want %q", got, ClassPreemptStorm)
	}
}

func TestIncidentScenario(t *testing.T) {
	for _, class := range []string{ClassPreemptStorm, ClassCacheCollapse, ClassRetryAvalanche, ClassCrash} {
		t.Run(class, func(t *testing.T) {
			sc, err := IncidentScenario(class)
			if err != nil {
				t.Fatal(err)
			}
			f := NewFleet(FleetConfig{Seed: 2, Start: t0, Scenario: sc, Warmup: time.Minute})
			at := IncidentBaseline + 50*time.Second
			f.Advance(t0.Add(at))
			if p, _ := sc.PhaseAt(at); p.Class != class {
				t.Errorf("phase at %v has class %q", at, p.Class)
			}
			w := observe(t, f, 1, at, at+10*time.Second) // the other replicas stay healthy
			if w.retracted != 0 || w.aborted != 0 {
				t.Errorf("sim-1 should be healthy: %v", w)
			}
			s := scrape(t, f, 0)
			switch class {
			case ClassCrash:
				if s != nil {
					t.Error("sim-0 should be down")
				}
			case ClassPreemptStorm:
				if s.v("sglang:num_retracted_requests_total") == 0 {
					t.Error("no retractions")
				}
			case ClassCacheCollapse:
				if w0 := observe(t, f, 0, at+10*time.Second, at+20*time.Second); w0.hitRate() > 0.2 {
					t.Errorf("hit rate %.2f", w0.hitRate())
				}
			case ClassRetryAvalanche:
				if w0 := observe(t, f, 0, at+10*time.Second, at+20*time.Second); w0.httpReq < 2*w0.requests {
					t.Errorf("arrivals %.0f vs completions %.0f", w0.httpReq, w0.requests)
				}
			}
		})
	}
	if _, err := IncidentScenario("gpu_on_fire"); err == nil {
		t.Error("unknown class accepted")
	}
}
