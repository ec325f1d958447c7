package scrape

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// fakeFetch serves targets from memory (network I/O is not durably
// blocking inside a synctest bubble). Targets named "dead*" never answer:
// they block until the scrape's context gives up.
func fakeFetch(body []byte) fetchFunc {
	return func(ctx context.Context, t Target, buf *responseBody) error {
		if strings.HasPrefix(t.Name, "dead") {
			<-ctx.Done()
			return ctx.Err()
		}
		buf.Reset()
		buf.Write(body)
		return nil
	}
}

func currentFull(t *testing.T) []byte {
	t.Helper()
	b, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func engines(names ...string) []Target {
	ts := make([]Target, len(names))
	for i, n := range names {
		ts[i] = Target{Name: n, URL: "http://" + n + ":30000/metrics", Kind: KindEngine}
	}
	return ts
}

// startManager runs m in the bubble and returns a stop function that
// cancels it and waits for Run to return.
func startManager(t *testing.T, m *Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	return func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// next receives scrapes until one of target arrives, collecting the rest.
func next(t *testing.T, rec *recorder, target string, others map[string][]series.Scrape) series.Scrape {
	t.Helper()
	for {
		sc := <-rec.scrapes
		if sc.Target == target {
			return sc
		}
		others[sc.Target] = append(others[sc.Target], sc)
	}
}

func TestLoopDeadTargetDoesNotStallHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval, timeout = 5 * time.Second, 4 * time.Second
		rec := newRecorder(t)
		reg := prometheus.NewRegistry()
		core, logs := observer.New(zapcore.WarnLevel)
		m, err := New(engines("healthy", "dead-1", "dead-2"), Options{Interval: interval, Timeout: timeout}, rec, reg, zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = fakeFetch(currentFull(t))
		start := time.Now()
		stop := startManager(t, m)

		others := map[string][]series.Scrape{}
		for k := range 6 {
			sc := next(t, rec, "healthy", others)
			// Exactly on its grid: the dead targets' 4 s hangs cost it nothing.
			if want := start.Add(startOffset("healthy", interval) + time.Duration(k)*interval); !sc.At.Equal(want) {
				t.Errorf("healthy scrape %d at %v, want %v", k, sc.At.Sub(start), want.Sub(start))
			}
			if sc.Reason != "" || len(sc.Groups) != 1 {
				t.Fatalf("healthy scrape %d: %q %q, %d groups", k, sc.Reason, sc.Error, len(sc.Groups))
			}
		}
		stop()

		for _, name := range []string{"dead-1", "dead-2"} {
			got := others[name]
			if len(got) < 4 {
				t.Fatalf("%s: %d scrapes, want ≥ 4", name, len(got))
			}
			for _, sc := range got {
				if sc.Reason != series.FailureTimeout || sc.Duration != timeout {
					t.Errorf("%s: reason %q after %v, want timeout after %v", name, sc.Reason, sc.Duration, timeout)
				}
			}
			if up := testutil.ToFloat64(m.metrics.up.WithLabelValues(name)); up != 0 {
				t.Errorf("%s: up = %v, want 0", name, up)
			}
			if n := testutil.ToFloat64(m.metrics.scrapes.WithLabelValues(name, string(series.FailureTimeout))); n != float64(len(got)) {
				t.Errorf("%s: scrapes_total{result=timeout} = %v, want %d", name, n, len(got))
			}
		}
		if up := testutil.ToFloat64(m.metrics.up.WithLabelValues("healthy")); up != 1 {
			t.Errorf("healthy: up = %v, want 1", up)
		}
		if n := testutil.ToFloat64(m.metrics.samples.WithLabelValues("healthy")); n < 100 {
			t.Errorf("healthy: samples = %v, want the normalized count", n)
		}
		// A target that stays down is logged once, not every interval.
		if n := logs.FilterMessage("scrape failed").Len(); n != 2 {
			t.Errorf("%d 'scrape failed' logs, want 2 (one per dead target)", n)
		}
	})
}

func TestStartOffsetsSpreadDeterministically(t *testing.T) {
	const interval = 5 * time.Second
	const buckets = 10
	filled := map[time.Duration]bool{}
	for i := range 200 {
		name := fmt.Sprintf("replica-%d", i)
		off := startOffset(name, interval)
		if off < 0 || off >= interval {
			t.Fatalf("%s: offset %v outside [0, %v)", name, off, interval)
		}
		if again := startOffset(name, interval); again != off {
			t.Fatalf("%s: offset %v then %v", name, off, again)
		}
		filled[off/(interval/buckets)] = true
	}
	if len(filled) != buckets {
		t.Errorf("200 targets fill %d of %d slices of the interval", len(filled), buckets)
	}
}

func TestSetTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 5 * time.Second
		rec := newRecorder(t)
		reg := prometheus.NewRegistry()
		m, err := New(engines("a", "b"), Options{Interval: interval}, rec, reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = fakeFetch(currentFull(t))
		start := time.Now()
		stop := startManager(t, m)
		defer stop()

		others := map[string][]series.Scrape{}
		next(t, rec, "a", others)
		if len(others["b"]) == 0 {
			next(t, rec, "b", others)
		}

		changed := Target{Name: "b", URL: "http://b-new:30000/metrics", Kind: KindEngine}
		if err := m.SetTargets([]Target{engines("c")[0], changed}); err != nil {
			t.Fatal(err)
		}
		added := time.Now()
		if got := rec.removedTargets(); !slices.Equal(got, []string{"a"}) {
			t.Errorf("removed %v, want [a]", got)
		}
		// The removed target's series are gone; b and c have theirs.
		for c, want := range map[prometheus.Collector]int{
			m.metrics.up: 2, m.metrics.samples: 2, m.metrics.scrapes: 2 * len(results),
		} {
			if n := testutil.CollectAndCount(c); n != want {
				t.Errorf("%d series after removal, want %d", n, want)
			}
		}

		seen := map[string]time.Time{}
		for len(seen) < 2 {
			sc := <-rec.scrapes
			if sc.Target == "a" {
				t.Fatal("removed target scraped")
			}
			if _, ok := seen[sc.Target]; !ok {
				seen[sc.Target] = sc.At
			}
		}
		// New and restarted loops start at their own offset from the change.
		for _, name := range []string{"b", "c"} {
			if want := added.Add(startOffset(name, interval)); !seen[name].Equal(want) {
				t.Errorf("%s first scraped at %v, want %v", name, seen[name].Sub(start), want.Sub(start))
			}
		}

		// Unchanged targets keep their loop (and phase).
		loopOf := func(name string) *loop {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.loops[name]
		}
		before := loopOf("c")
		if err := m.SetTargets([]Target{engines("c")[0], changed}); err != nil {
			t.Fatal(err)
		}
		if loopOf("c") != before {
			t.Error("unchanged target was restarted")
		}
		if err := m.SetTargets(append(engines("c"), engines("c")...)); err == nil {
			t.Error("duplicate names accepted")
		}
	})
}

func TestRunStopsAndReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(t)
		m, err := New(engines("a", "dead-b"), Options{}, rec, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = fakeFetch(currentFull(t))
		stop := startManager(t, m)
		<-rec.scrapes // at least one loop is running
		stop()        // Run returned: synctest.Test also fails if any goroutine is left

		if err := m.Run(t.Context()); err == nil {
			t.Error("second Run accepted")
		}
		if err := m.SetTargets(engines("x")); err != nil {
			t.Errorf("SetTargets after Run: %v", err)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.loops["x"] != nil {
			t.Error("SetTargets after Run started a loop")
		}
	})
}

func TestAppendErrorsAreCountedNotFatal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(t)
		rec.err = errors.New("window full")
		m, err := New(engines("a"), Options{}, rec, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = fakeFetch(currentFull(t))
		stop := startManager(t, m)
		<-rec.scrapes
		<-rec.scrapes // the loop carried on after the refusal
		stop()
		if n := testutil.ToFloat64(m.metrics.appendErrors); n < 2 {
			t.Errorf("append errors = %v, want ≥ 2", n)
		}
	})
}

func TestNewValidates(t *testing.T) {
	rec := newRecorder(t)
	secret := Target{Name: "s", URL: "ftp://u:hunter2@h/metrics", Kind: KindEngine}
	tests := []struct {
		name    string
		targets []Target
		opts    Options
		app     Appender
		wantErr string
	}{
		{"timeout not below interval", engines("a"), Options{Interval: time.Second, Timeout: 2 * time.Second}, rec, "shorter than the interval"},
		{"duplicate", engines("a", "a"), Options{}, rec, "duplicate"},
		{"empty name", []Target{{URL: "http://h/metrics", Kind: KindEngine}}, Options{}, rec, "empty name"},
		{"bad kind", []Target{{Name: "a", URL: "http://h/metrics", Kind: "router"}}, Options{}, rec, "kind"},
		{"bad URL", []Target{secret}, Options{}, rec, "http(s)"},
		{"nil appender", engines("a"), Options{}, nil, "Appender"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.targets, tt.opts, tt.app, prometheus.NewRegistry(), nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error leaks the URL password: %v", err)
			}
		})
	}
}

// A pod status change (Ready, restarts) reaches the next scrape without
// restarting the loop; a failed pod (evicted) is not fetched at all, since
// its address may already belong to another pod.
func TestSetTargetsUpdatesPodStatusInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 5 * time.Second
		rec := newRecorder(t)
		tg := engines("pod-a")[0]
		tg.Pod = &series.Pod{Name: "a", Phase: "Running"}
		m, err := New([]Target{tg}, Options{Interval: interval}, rec, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var fetches int
		var mu sync.Mutex
		inner := fakeFetch(currentFull(t))
		m.fetch = func(ctx context.Context, t Target, buf *responseBody) error {
			mu.Lock()
			fetches++
			mu.Unlock()
			return inner(ctx, t, buf)
		}
		start := time.Now()
		stop := startManager(t, m)
		defer stop()
		off := startOffset(tg.Name, interval)

		first := <-rec.scrapes
		if first.Pod == nil || first.Pod.Ready {
			t.Fatalf("first scrape pod %+v, want the not-ready pod", first.Pod)
		}
		ready := tg
		ready.Pod = &series.Pod{Name: "a", Phase: "Running", Ready: true}
		if err := m.SetTargets([]Target{ready}); err != nil {
			t.Fatal(err)
		}
		second := <-rec.scrapes
		if second.Pod == nil || !second.Pod.Ready {
			t.Errorf("scrape after the update carries pod %+v, want Ready", second.Pod)
		}
		if at := second.At.Sub(start); at != off+interval {
			t.Errorf("second scrape at %v, want %v: a status change must not restart the loop", at, off+interval)
		}

		evicted := tg
		evicted.Pod = &series.Pod{Name: "a", Phase: "Failed", Reason: "Evicted"}
		if err := m.SetTargets([]Target{evicted}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		before := fetches
		mu.Unlock()
		third := <-rec.scrapes
		if third.Reason != series.FailurePodFailed || !strings.Contains(third.Error, "Evicted") {
			t.Errorf("failed pod scrape: reason %q error %q, want pod_failed naming Evicted", third.Reason, third.Error)
		}
		mu.Lock()
		if fetches != before {
			t.Errorf("the failed pod's address was fetched")
		}
		mu.Unlock()
	})
}

// Probes in flight never exceed the configured concurrency, even when
// every engine hangs; probes that find no slot are skipped, not queued.
func TestHealthProbeConcurrencyBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 2
		m, err := New(engines("e1", "e2", "e3", "e4", "e5"), Options{
			Interval: 5 * time.Second, HealthProbeInterval: 30 * time.Second, HealthProbeTimeout: 25 * time.Second,
			HealthProbeConcurrency: limit,
		}, newRecorder(t), prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = fakeFetch(currentFull(t))
		var mu sync.Mutex
		inFlight, peak, probes := 0, 0, 0
		m.probe = func(ctx context.Context, _ Target) HealthProbe {
			mu.Lock()
			inFlight++
			probes++
			peak = max(peak, inFlight)
			mu.Unlock()
			<-ctx.Done() // every engine hangs
			mu.Lock()
			inFlight--
			mu.Unlock()
			return HealthProbe{Reason: series.FailureTimeout}
		}
		stop := startManager(t, m)
		<-time.After(5 * time.Minute) // virtual time inside the bubble
		stop()
		mu.Lock()
		defer mu.Unlock()
		if peak != limit {
			t.Errorf("peak probes in flight %d, want %d", peak, limit)
		}
		// Two slots, 25 s each, over 5 minutes: about 24 probes, not 50.
		if probes > 2*(5*60/25)+limit {
			t.Errorf("%d probes ran; skipped probes must not queue", probes)
		}
	})
}

// A scraper reuses the arrays of its output once the Appender has taken
// the scrape (the Appender contract): a steady-state scrape of the full
// current exposition, parse and normalization included, allocates a few
// kilobytes, not a new array of its samples, and gives the same samples.
func TestScraperReusesItsOutput(t *testing.T) {
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	s := newScraper(fakeFetch(body), Options{Timeout: time.Second, MaxSeries: 10000})
	tg := Target{Name: "r", URL: "http://r/metrics", Kind: KindEngine}
	first := s.scrape(t.Context(), tg, nil)
	if first.Reason != "" || len(first.Groups) == 0 {
		t.Fatalf("scrape failed: %s %s", first.Reason, first.Error)
	}
	want := renderGroups(cloneGroups(first.Groups))
	var sc series.Scrape
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		sc = s.scrape(t.Context(), tg, nil)
	}
	runtime.ReadMemStats(&after)
	if got := renderGroups(sc.Groups); !slices.Equal(got, want) {
		t.Errorf("a reused scrape differs:\n%v\nwant\n%v", got, want)
	}
	// Measured 1.6 KB (textparse's parser, the scrape's context); with a
	// fresh output for the 477 samples every scrape, 46.7 KB.
	perScrape := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("%d bytes allocated per scrape", perScrape)
	if perScrape > 8<<10 {
		t.Errorf("a steady-state scrape allocates %d bytes, want less than 8 KiB", perScrape)
	}
}
