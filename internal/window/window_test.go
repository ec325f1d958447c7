package window

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

var t0 = time.Date(2026, 5, 29, 14, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func smp(name string, v float64, labelValues ...string) series.Sample {
	var ls series.Labels
	for i := 0; i+1 < len(labelValues); i += 2 {
		ls = append(ls, series.Label{Name: labelValues[i], Value: labelValues[i+1]})
	}
	return series.Sample{Name: name, Labels: ls.Sort(), Value: v}
}

func okScrape(target string, when time.Time, samples ...series.Sample) series.Scrape {
	return series.Scrape{Target: target, Kind: "engine", At: when,
		Groups: []series.Group{{Model: "m", Samples: samples}}}
}

func newTestStore(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.Retention == 0 {
		opts.Retention = time.Hour
	}
	s, err := New(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustAppend(t testing.TB, s *Store, sc series.Scrape) {
	t.Helper()
	if err := s.Append(sc); err != nil {
		t.Fatalf("append at %s: %v", sc.At, err)
	}
}

func withView(t testing.TB, s *Store, name string, fn func(w detect.Window)) {
	t.Helper()
	if !s.View(name, fn) {
		t.Fatalf("replica %q not found", name)
	}
}

// feed appends one scrape per element of vals (every 5 s from t0) holding
// the counter "c_total"; NaN in vals means the series is absent from that
// scrape, a gauge "g" is always present so the scrape itself exists.
func feed(t *testing.T, s *Store, vals []float64, raw map[int]float64) {
	t.Helper()
	for i, v := range vals {
		samples := []series.Sample{smp("g", 1)}
		if rv, ok := raw[i]; ok {
			samples = append(samples, smp("c_total", rv))
		} else if !math.IsNaN(v) {
			samples = append(samples, smp("c_total", v))
		}
		mustAppend(t, s, okScrape("r", at(float64(5*i)), samples...))
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestRing(t *testing.T) {
	var r ring[int]
	for i := 0; i < 10; i++ {
		r.push(i, 6)
	}
	if r.n != 6 || r.first != 4 || len(r.buf) != 6 {
		t.Fatalf("after 10 pushes with cap 6: n=%d first=%d len=%d", r.n, r.first, len(r.buf))
	}
	for seq := uint64(0); seq < 12; seq++ {
		v, ok := r.at(seq)
		if want := seq >= 4 && seq < 10; ok != want || (ok && v != int(seq)) {
			t.Errorf("at(%d) = %d, %v", seq, v, ok)
		}
	}
	r.dropBefore(7)
	if v, ok := r.at(7); !ok || v != 7 || r.n != 3 {
		t.Errorf("after dropBefore(7): at(7)=%d,%v n=%d", v, ok, r.n)
	}
	if _, ok := r.at(6); ok {
		t.Error("seq 6 still held after dropBefore(7)")
	}
	r.dropBefore(100)
	if r.n != 0 || r.end() != 100 {
		t.Errorf("dropBefore past the end: n=%d end=%d", r.n, r.end())
	}
}

func TestIncreaseAndRate(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name     string
		vals     []float64       // one scrape every 5 s from t0; NaN = absent
		raw      map[int]float64 // scrape index -> raw (possibly non-finite) value
		from, to float64         // seconds after t0
		wantInc  float64
		wantRate float64
		wantOK   bool
	}{
		{name: "monotonic", vals: []float64{0, 10, 20, 30}, from: -1, to: 15, wantInc: 30, wantRate: 2, wantOK: true},
		{name: "from is exclusive", vals: []float64{0, 10, 20, 30}, from: 0, to: 15, wantInc: 20, wantRate: 2, wantOK: true},
		{name: "to is inclusive", vals: []float64{0, 10, 20, 30}, from: -1, to: 10, wantInc: 20, wantRate: 2, wantOK: true},
		// 10 -> 20 (+10), reset to 5 (+5 since the restart), 5 -> 15 (+10).
		{name: "reset counts the post-reset value", vals: []float64{10, 20, 5, 15}, from: -1, to: 15, wantInc: 25, wantRate: 25.0 / 15, wantOK: true},
		{name: "reset to zero", vals: []float64{100, 200, 0, 10}, from: -1, to: 15, wantInc: 110, wantRate: 110.0 / 15, wantOK: true},
		// The rate divides by the 10 s the two remaining points span.
		{name: "gap: absent scrape", vals: []float64{0, nan, 20}, from: -1, to: 10, wantInc: 20, wantRate: 2, wantOK: true},
		{name: "series starts late: span is what the points cover", vals: []float64{nan, nan, 0, 10}, from: -1, to: 15, wantInc: 10, wantRate: 2, wantOK: true},
		{name: "NaN and Inf points ignored", vals: []float64{0, 0, 20, 0, 30}, raw: map[int]float64{1: nan, 3: math.Inf(1)}, from: -1, to: 20, wantInc: 30, wantRate: 1.5, wantOK: true},
		{name: "single point", vals: []float64{0, 10}, from: 0, to: 10, wantOK: false},
		{name: "only non-finite", vals: []float64{0, 0}, raw: map[int]float64{0: nan, 1: math.Inf(-1)}, from: -1, to: 10, wantOK: false},
		{name: "empty range", vals: []float64{0, 10, 20}, from: 100, to: 200, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t, Options{})
			feed(t, s, tt.vals, tt.raw)
			withView(t, s, "r", func(w detect.Window) {
				inc, ok := w.Increase(detect.Sel("c_total"), at(tt.from), at(tt.to))
				if ok != tt.wantOK || (ok && !near(inc, tt.wantInc)) {
					t.Errorf("Increase = %v, %v; want %v, %v", inc, ok, tt.wantInc, tt.wantOK)
				}
				rate, ok := w.Rate(detect.Sel("c_total"), at(tt.from), at(tt.to))
				if ok != tt.wantOK || (ok && !near(rate, tt.wantRate)) {
					t.Errorf("Rate = %v, %v; want %v, %v", rate, ok, tt.wantRate, tt.wantOK)
				}
			})
		})
	}
}

func TestSelectorsSumMatchingSeries(t *testing.T) {
	s := newTestStore(t, Options{})
	for i := 0; i < 3; i++ {
		n := float64(i)
		mustAppend(t, s, okScrape("r", at(float64(5*i)),
			smp("resp_total", 10*n, "code", "200"),
			smp("resp_total", 2*n, "code", "503"),
			smp("resp_total", 1*n, "code", "429"),
			smp("tok_total", 100*n, "mode", "device_hit"),
			smp("tok_total", 10*n, "mode", "host_hit"),
			smp("tok_total", 1000*n, "mode", "input"),
			smp("no_label_total", 7*n),
		))
	}
	tests := []struct {
		sel  detect.Selector
		want float64
	}{
		{detect.Sel("resp_total"), 26},
		{detect.Sel("resp_total", "code", "200"), 20},
		{detect.Sel("resp_total", "code", "503|429"), 6},
		{detect.Selector{Name: "resp_total", Match: []detect.Match{{Label: "code", Value: "4|5", Prefix: true}}}, 6},
		{detect.Selector{Name: "tok_total", Match: []detect.Match{{Label: "mode", Value: "_hit", Suffix: true}}}, 220},
		{detect.Sel("no_label_total", "code", ""), 14}, // an absent label matches ""
		{detect.Sel("resp_total", "code", "404"), 0},
	}
	withView(t, s, "r", func(w detect.Window) {
		for _, tt := range tests {
			got, ok := w.Increase(tt.sel, at(-1), at(10))
			if tt.want == 0 {
				if ok {
					t.Errorf("%+v: Increase = %v, want ok=false (nothing selected)", tt.sel, got)
				}
				continue
			}
			if !ok || got != tt.want {
				t.Errorf("%+v: Increase = %v, %v; want %v", tt.sel, got, ok, tt.want)
			}
		}
	})
}

func TestLastHasAndStaleSeries(t *testing.T) {
	s := newTestStore(t, Options{})
	mustAppend(t, s, okScrape("r", at(0), smp("q", 3, "dp", "0"), smp("q", 4, "dp", "1"), smp("gone", 1)))
	mustAppend(t, s, okScrape("r", at(5), smp("q", 5, "dp", "0"), smp("nan_only", math.NaN())))
	// A failed scrape does not make the last successful one disappear.
	if err := s.Append(series.Scrape{Target: "r", At: at(10), Reason: "timeout", Error: "deadline"}); err != nil {
		t.Fatal(err)
	}
	withView(t, s, "r", func(w detect.Window) {
		if v, ok := w.Last(detect.Sel("q")); !ok || v != 5 {
			t.Errorf("Last(q) = %v, %v; want 5 (dp=1 is stale)", v, ok)
		}
		if _, ok := w.Last(detect.Sel("gone")); ok {
			t.Error("Last(gone) ok for a series absent from the latest scrape")
		}
		if w.Has("gone") {
			t.Error("Has(gone) for a family absent from the latest scrape")
		}
		if !w.Has("q") || !w.Has("nan_only") {
			t.Error("Has is false for families of the latest scrape")
		}
		if _, ok := w.Last(detect.Sel("nan_only")); ok {
			t.Error("Last ok for a NaN-only family")
		}
		if _, ok := w.Last(detect.Sel("missing")); ok {
			t.Error("Last ok for a missing family")
		}
		st := w.Scrape()
		if st.Up || st.Reason != "timeout" || st.ConsecutiveFailures != 1 || !st.LastSuccess.Equal(at(5)) || !st.FirstSeen.Equal(at(0)) {
			t.Errorf("scrape state = %+v", st)
		}
		if rep := w.Replica(); rep.Name != "r" || rep.Model != "m" || rep.Kind != "engine" {
			t.Errorf("replica = %+v", rep)
		}
	})
}

func TestGaugeAggregates(t *testing.T) {
	s := newTestStore(t, Options{})
	// Per scrape sums: 3, (absent), 10, 6 (the Inf in dp=1 is ignored), 1.
	rows := [][]series.Sample{
		{smp("u", 1, "dp", "0"), smp("u", 2, "dp", "1")},
		{smp("other", 1)},
		{smp("u", 4, "dp", "0"), smp("u", 6, "dp", "1")},
		{smp("u", 6, "dp", "0"), smp("u", math.Inf(1), "dp", "1")},
		{smp("u", 1, "dp", "0")},
	}
	for i, row := range rows {
		mustAppend(t, s, okScrape("r", at(float64(5*i)), row...))
	}
	withView(t, s, "r", func(w detect.Window) {
		sel := detect.Sel("u")
		if v, ok := w.Avg(sel, at(-1), at(20)); !ok || !near(v, 5) {
			t.Errorf("Avg = %v, %v; want 5", v, ok)
		}
		if v, ok := w.Max(sel, at(-1), at(20)); !ok || v != 10 {
			t.Errorf("Max = %v, %v; want 10", v, ok)
		}
		if v, ok := w.Min(sel, at(-1), at(20)); !ok || v != 1 {
			t.Errorf("Min = %v, %v; want 1", v, ok)
		}
		if v, ok := w.Avg(sel, at(0), at(10)); !ok || v != 10 {
			t.Errorf("Avg over (0,10] = %v, %v; want 10", v, ok)
		}
		if _, ok := w.Avg(sel, at(2), at(8)); ok {
			t.Error("Avg ok over a range where the family is absent")
		}
		// Ratios combine by max across ranks: per scrape 2, 6, 6, 1.
		maxSel := detect.Selector{Name: "u", Combine: detect.CombineMax}
		if v, ok := w.Avg(maxSel, at(-1), at(20)); !ok || !near(v, 3.75) {
			t.Errorf("Avg(CombineMax) = %v, %v; want 3.75", v, ok)
		}
		if v, ok := w.Max(maxSel, at(-1), at(20)); !ok || v != 6 {
			t.Errorf("Max(CombineMax) = %v, %v; want 6", v, ok)
		}
		counter := w.(detect.ScrapeCounter)
		if above, n := counter.CountAbove(sel, 3, at(-1), at(20)); above != 2 || n != 4 {
			t.Errorf("CountAbove(3) = %d of %d; want 2 of 4", above, n)
		}
	})
}

func TestQuantile(t *testing.T) {
	// Two label sets (is_streaming) of the same histogram; their bucket
	// increases add up per bound. The "true" set resets between scrape 1
	// and 2 (a restart): its post-reset values count as increase.
	type counts [4]float64 // le 0.1, 0.5, 1, +Inf
	scrapes := []struct{ f, tr counts }{
		{f: counts{5, 10, 20, 20}, tr: counts{100, 100, 100, 100}},
		{f: counts{10, 20, 30, 30}, tr: counts{102, 105, 110, 110}},
		{f: counts{13, 27, 40, 42}, tr: counts{5, 13, 20, 28}},
	}
	// Increases per bound (le 0.1, 0.5, 1, +Inf):
	//   false: 8, 17, 20, 22
	//   true:  2+5=7, 5+13=18, 10+20=30, 10+28=38
	//   sum:   15, 35, 50, 60
	les := []string{"0.1", "0.5", "1", "+Inf"}
	s := newTestStore(t, Options{})
	for i, sc := range scrapes {
		var samples []series.Sample
		for b, le := range les {
			samples = append(samples,
				smp("lat_bucket", sc.f[b], "le", le, "is_streaming", "false"),
				smp("lat_bucket", sc.tr[b], "le", le, "is_streaming", "true"))
		}
		samples = append(samples, smp("lat_count", sc.f[3], "is_streaming", "false"), smp("lat_count", sc.tr[3], "is_streaming", "true"))
		mustAppend(t, s, okScrape("r", at(float64(5*i)), samples...))
	}
	tests := []struct {
		q    float64
		want float64
	}{
		// rank 3 in the first bucket [0, 0.1] holding 15: 0.1 × 3/15.
		{0.05, 0.02},
		// rank 30 in (0.1, 0.5] holding 35-15=20, 15 below: 0.1 + 0.4 × 15/20.
		{0.5, 0.4},
		// rank 45 in (0.5, 1] holding 15, 35 below: 0.5 + 0.5 × 10/15.
		{0.75, 0.5 + 0.5*10.0/15},
		// rank 54 lies in +Inf: the highest finite bound.
		{0.9, 1},
		{0.99, 1},
	}
	withView(t, s, "r", func(w detect.Window) {
		for _, tt := range tests {
			got, ok := w.Quantile(tt.q, "lat", nil, at(-1), at(10))
			if !ok || !near(got, tt.want) {
				t.Errorf("Quantile(%v) = %v, %v; want %v", tt.q, got, ok, tt.want)
			}
		}
		// Only the streaming set: increases 7, 18, 30, 38; q=0.5 -> rank 19 in
		// (0.5, 1] holding 12, 18 below: 0.5 + 0.5 × 1/12.
		got, ok := w.Quantile(0.5, "lat", []detect.Match{{Label: "is_streaming", Value: "true"}}, at(-1), at(10))
		if want := 0.5 + 0.5/12; !ok || !near(got, want) {
			t.Errorf("Quantile(0.5, streaming) = %v, %v; want %v", got, ok, want)
		}
		if obs, ok := w.Observations("lat", nil, at(-1), at(10)); !ok || obs != 60 {
			t.Errorf("Observations = %v, %v; want 60", obs, ok)
		}
		if _, ok := w.Quantile(0.5, "lat", nil, at(0), at(5)); ok {
			t.Error("Quantile ok over a range with a single scrape")
		}
		if _, ok := w.Quantile(0.5, "missing", nil, at(-1), at(10)); ok {
			t.Error("Quantile ok for a missing family")
		}
		if _, ok := w.Quantile(1.5, "lat", nil, at(-1), at(10)); ok {
			t.Error("Quantile ok for q > 1")
		}
	})
}

func TestBucketQuantileEdges(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		q       float64
		buckets []bucket
		want    float64
		wantOK  bool
	}{
		{"no observations", 0.5, []bucket{{1, 0}, {inf, 0}}, 0, false},
		{"no +Inf bucket", 0.5, []bucket{{1, 5}, {2, 10}}, 0, false},
		{"single bucket", 0.5, []bucket{{inf, 10}}, 0, false},
		{"unsorted input", 0.5, []bucket{{inf, 10}, {2, 10}, {1, 0}}, 1.5, true},
		{"non-monotonic fixed up", 0.5, []bucket{{1, 10}, {2, 4}, {inf, 20}}, 1, true},
		{"negative first bound", 0.1, []bucket{{-1, 5}, {0, 10}, {inf, 10}}, -1, true},
	}
	for _, tt := range tests {
		got, ok := bucketQuantile(tt.q, tt.buckets)
		if ok != tt.wantOK || (ok && !near(got, tt.want)) {
			t.Errorf("%s: got %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestRestarts(t *testing.T) {
	s := newTestStore(t, Options{})
	type row struct {
		a, b, c, d float64 // four counters
		start      float64
	}
	rows := []row{
		{10, 10, 10, 10, 1000},
		{20, 20, 20, 20, 1000},
		{25, 1, 25, 25, 1000}, // one of four dropped: a counter glitch, not a restart
		{2, 0, 0, 25, 1000},   // three of four dropped: restart
		{5, 6, 1, 26, 1000},
		{6, 7, 2, 27, 2000}, // start time changed: restart
		{7, 8, 3, 28, 2000},
	}
	for i, r := range rows {
		mustAppend(t, s, okScrape("r", at(float64(5*i)),
			smp("a_total", r.a), smp("b_count", r.b), smp("c_bucket", r.c, "le", "1"), smp("d_sum", r.d),
			smp("gh_count", 0, "gt", "1", "le", "2"), // a gauge-histogram: not a counter
			smp("process_start_time_seconds", r.start)))
	}
	withView(t, s, "r", func(w detect.Window) {
		if n := w.Restarts(at(-1), at(30)); n != 2 {
			t.Errorf("Restarts = %d, want 2", n)
		}
		if n := w.Restarts(at(15), at(30)); n != 1 {
			t.Errorf("Restarts in (15s, 30s] = %d, want 1", n)
		}
		if lr := w.LastRestart(); !lr.Equal(at(25)) {
			t.Errorf("LastRestart = %v, want %v", lr, at(25))
		}
		// The reset is not a spike: a_total went 10, 20, 25, 2, 5, 6, 7.
		if inc, _ := w.Increase(detect.Sel("a_total"), at(-1), at(30)); inc != 15+2+3+1+1 {
			t.Errorf("Increase across restart = %v, want 22", inc)
		}
	})
}

func TestFailuresAndPlaceholders(t *testing.T) {
	s := newTestStore(t, Options{})
	fail := func(target string, sec float64, reason string) {
		t.Helper()
		kind := "engine"
		if target == "gw" {
			kind = "gateway"
		}
		if err := s.Append(series.Scrape{Target: target, Kind: kind, At: at(sec), Reason: series.ScrapeFailure(reason), Error: reason + " text"}); err != nil {
			t.Fatal(err)
		}
	}
	// A never-reachable target is visible as a down replica.
	fail("dead", 0, "refused")
	fail("dead", 5, "refused")
	withView(t, s, "dead", func(w detect.Window) {
		st := w.Scrape()
		if st.Up || st.ConsecutiveFailures != 2 || st.Reason != "refused" || !st.LastSuccess.IsZero() || !st.FirstSeen.Equal(at(0)) {
			t.Errorf("never-reachable state = %+v", st)
		}
	})
	// A gateway that starts answering with two workers: the placeholder goes.
	fail("gw", 0, "timeout")
	gw := series.Scrape{Target: "gw", Kind: "gateway", At: at(5), Groups: []series.Group{
		{Worker: "http://a:30000", Samples: []series.Sample{smp("x", 1)}},
		{Worker: "http://b:30000", Samples: []series.Sample{smp("x", 2)}},
	}}
	mustAppend(t, s, gw)
	var names []string
	for _, r := range s.Replicas() {
		names = append(names, r.Name)
	}
	if got, want := strings.Join(names, ","), "dead,gw/http://a:30000,gw/http://b:30000"; got != want {
		t.Errorf("replicas = %s, want %s", got, want)
	}
	// A failed gateway scrape marks every worker down.
	fail("gw", 10, "refused")
	for _, n := range []string{"gw/http://a:30000", "gw/http://b:30000"} {
		withView(t, s, n, func(w detect.Window) {
			if st := w.Scrape(); st.Up || st.ConsecutiveFailures != 1 || !st.LastSuccess.Equal(at(5)) {
				t.Errorf("%s: state = %+v", n, st)
			}
			// Workers behind a gateway's /engine_metrics are engines.
			if w.Replica().Kind != "engine" {
				t.Errorf("%s: kind = %q", n, w.Replica().Kind)
			}
		})
	}
	// Recovery resets the failure count.
	gw.At = at(15)
	mustAppend(t, s, gw)
	withView(t, s, "gw/http://a:30000", func(w detect.Window) {
		if st := w.Scrape(); !st.Up || st.ConsecutiveFailures != 0 || st.Reason != "" {
			t.Errorf("after recovery: %+v", st)
		}
	})
	s.Remove("gw")
	if len(s.Replicas()) != 1 || s.View("gw/http://a:30000", func(detect.Window) {}) {
		t.Error("Remove left replicas of the target")
	}
}

func TestOutOfOrderScrapeIgnored(t *testing.T) {
	s := newTestStore(t, Options{})
	mustAppend(t, s, okScrape("r", at(10), smp("g", 1)))
	err := s.Append(okScrape("r", at(10), smp("g", 2)))
	if !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("err = %v, want ErrOutOfOrder", err)
	}
	withView(t, s, "r", func(w detect.Window) {
		if v, _ := w.Last(detect.Sel("g")); v != 1 {
			t.Errorf("Last = %v, want 1", v)
		}
	})
}

func TestRetentionBound(t *testing.T) {
	s := newTestStore(t, Options{Retention: time.Minute, ScrapeInterval: 5 * time.Second})
	limit := s.Options().MaxPointsPerSeries
	if limit != 12+2+2 {
		t.Fatalf("derived MaxPointsPerSeries = %d, want 16", limit)
	}
	// 1000 scrapes every 5 s; "early" disappears after the first 10.
	for i := 0; i < 1000; i++ {
		samples := []series.Sample{smp("c_total", float64(i))}
		if i < 10 {
			samples = append(samples, smp("early", 1))
		}
		mustAppend(t, s, okScrape("r", at(float64(5*i)), samples...))
	}
	now := at(5 * 999)
	s.mu.RLock()
	r := s.replicas["r"]
	s.mu.RUnlock()
	r.mu.RLock()
	if r.times.n > 13 || len(r.times.buf) > limit {
		t.Errorf("times ring holds %d points in a buffer of %d; want <= 13 within one minute", r.times.n, len(r.times.buf))
	}
	for _, rec := range r.families["c_total"] {
		// Whole chunks fall out of the window: at most the one that
		// straddles its start, beside the head.
		if len(rec.pts.sealed) > 1 {
			t.Errorf("series holds %d sealed chunks of %d samples for a window of 13 scrapes", len(rec.pts.sealed), samplesPerChunk)
		}
	}
	if _, ok := r.families["early"]; ok || r.nSeries != 1 {
		t.Errorf("a series silent for longer than the retention was not freed (nSeries=%d)", r.nSeries)
	}
	r.mu.RUnlock()
	withView(t, s, "r", func(w detect.Window) {
		if _, ok := w.Increase(detect.Sel("c_total"), now.Add(-2*time.Hour), now.Add(-time.Hour)); ok {
			t.Error("Increase ok over a range older than the retention")
		}
		if inc, ok := w.Increase(detect.Sel("c_total"), now.Add(-time.Minute), now); !ok || inc != 11 {
			t.Errorf("Increase over the last minute = %v, %v; want 11", inc, ok)
		}
	})
}

// Two series of a replica whose hashes meet are both held, looked up and
// freed, each on its own: the later one among the collided series, where a
// third of the same hash is not put while the series map's slot is free.
func TestSeriesHashCollision(t *testing.T) {
	r := newReplica("r", "t", "", &labelSets{})
	const h = 42 // as if the three hashed alike
	a, b, c := smp("a_total", 1), smp("b_total", 1, "x", "y"), smp("c_total", 1)
	ra, rb := r.create(h, &a), r.create(h, &b)
	if got := r.lookup(h, a.Name, a.Labels); got != ra {
		t.Fatalf("lookup(a) = %v, want the series made first", got)
	}
	if got := r.lookup(h, b.Name, b.Labels); got != rb || len(r.collided[h]) != 1 {
		t.Fatalf("lookup(b) = %v with %d collided series, want the collided series", got, len(r.collided[h]))
	}
	if got := r.lookup(h, c.Name, c.Labels); got != nil {
		t.Fatalf("lookup(c) = %v before it was made", got)
	}
	rb.pts.put(5, 1, nil) // b holds a point at seq 5, a none
	r.times.restart(3)
	r.sweep()
	if r.lookup(h, a.Name, a.Labels) != nil || r.lookup(h, b.Name, b.Labels) != rb || r.nSeries != 1 || len(r.families[a.Name]) != 0 {
		t.Fatalf("after a fell out of the window: a %v, b %v, %d series", r.lookup(h, a.Name, a.Labels), r.lookup(h, b.Name, b.Labels), r.nSeries)
	}
	rc := r.create(h, &c)
	if r.series[h] != rc || r.lookup(h, b.Name, b.Labels) != rb || r.lookup(h, c.Name, c.Labels) != rc {
		t.Fatal("a series made after the first was freed: want it in the series map, b still collided")
	}
	r.times.restart(10)
	r.sweep()
	if r.nSeries != 0 || len(r.series) != 0 || len(r.collided) != 0 || r.bytes != 0 {
		t.Errorf("after every series fell out of the window: %d series, %d in the map, %d collided, %d bytes; want none", r.nSeries, len(r.series), len(r.collided), r.bytes)
	}
}

func TestSeriesLimit(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	s, err := New(Options{Retention: time.Hour, MaxSeriesPerReplica: 3}, reg)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, okScrape("r", at(0), smp("a", 1), smp("b", 1)))
	// A target suddenly exposing many more series: an error, no growth.
	var many []series.Sample
	many = append(many, smp("a", 2), smp("b", 2))
	for i := 0; i < 100; i++ {
		many = append(many, smp("burst", float64(i), "i", strings.Repeat("x", i)))
	}
	err = s.Append(okScrape("r", at(5), many...))
	if !errors.Is(err, ErrTooManySeries) {
		t.Fatalf("err = %v, want ErrTooManySeries", err)
	}
	withView(t, s, "r", func(w detect.Window) {
		if v, ok := w.Last(detect.Sel("a")); !ok || v != 2 {
			t.Errorf("existing series stopped working: Last(a) = %v, %v", v, ok)
		}
		if v, ok := w.Last(detect.Sel("burst")); !ok || v != 0 {
			t.Errorf("Last(burst) = %v, %v; want only the first admitted series (0)", v, ok)
		}
	})
	if got := testutil.ToFloat64(s.rejected.WithLabelValues("r", string(RejectSeriesLimit))); got != 99 {
		t.Errorf("watchdog_series_rejected_total = %v, want 99", got)
	}
	if got := testutil.ToFloat64(s.seriesHeld.WithLabelValues("r")); got != 3 {
		t.Errorf("watchdog_series = %v, want 3", got)
	}
	if got := testutil.ToFloat64(s.ingested); got != 2+3 {
		t.Errorf("watchdog_samples_ingested_total = %v, want 5", got)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	s, err := New(Options{Retention: time.Hour}, reg)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, okScrape("r", at(0), smp("a", 1)))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering twice on one registry did not fail")
		}
	}()
	_, _ = New(Options{Retention: time.Hour}, reg)
}

func TestOptions(t *testing.T) {
	if _, err := New(Options{}, nil); err == nil {
		t.Error("zero retention accepted")
	}
	if _, err := New(Options{Retention: time.Hour, MaxSeriesPerReplica: -1}, nil); err == nil {
		t.Error("negative limit accepted")
	}
	s := newTestStore(t, Options{Retention: time.Hour})
	if o := s.Options(); o.MaxSeriesPerReplica != DefaultMaxSeriesPerReplica || o.MaxPointsPerSeries != 720+144+2 {
		t.Errorf("defaults = %+v", o)
	}
}

// Appends and views of many replicas run concurrently; -race checks them.
func TestConcurrentAppendAndView(t *testing.T) {
	s := newTestStore(t, Options{Retention: time.Minute})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		target := string(rune('a' + g))
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if err := s.Append(okScrape(target, at(float64(i)), smp("c_total", float64(i)))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				for _, r := range s.Replicas() {
					s.View(r.Name, func(w detect.Window) { w.Rate(detect.Sel("c_total"), at(-1), at(300)) })
				}
			}
		}()
	}
	wg.Wait()
	if n := len(s.Replicas()); n != 4 {
		t.Errorf("replicas = %d, want 4", n)
	}
}

// A worker that leaves a gateway's /engine_metrics is kept (stale) for the
// retention, then forgotten.
func TestVanishedWorkerIsForgottenAfterRetention(t *testing.T) {
	s := newTestStore(t, Options{Retention: time.Minute})
	gw := func(sec float64, workers ...string) series.Scrape {
		sc := series.Scrape{Target: "gw", Kind: "gateway", At: at(sec)}
		for _, w := range workers {
			sc.Groups = append(sc.Groups, series.Group{Worker: w, Samples: []series.Sample{smp("x", 1)}})
		}
		return sc
	}
	mustAppend(t, s, gw(0, "a", "b"))
	for sec := 5.0; sec <= 60; sec += 5 {
		mustAppend(t, s, gw(sec, "a"))
	}
	if n := len(s.Replicas()); n != 2 {
		t.Fatalf("replicas = %d, want 2 (b kept within the retention)", n)
	}
	mustAppend(t, s, gw(65, "a"))
	if rs := s.Replicas(); len(rs) != 1 || rs[0].Name != "gw/a" {
		t.Errorf("replicas = %+v, want only gw/a", rs)
	}
}

// Max of one series reads a sealed chunk that never drops from its summary
// and decodes the rest: a counter whose highest value lies in a chunk in
// the middle of the range (it reset later), one with NaN and +Inf points
// (skipped), and a gauge that drops inside its chunks give the maximum a
// scan of every point gives.
func TestMaxOverWholeChunks(t *testing.T) {
	const n = 5 * samplesPerChunk
	values := map[string]func(i int) float64{
		// Rising to 239, then reset and rising slowly: the maximum is the
		// last value of the second chunk, which lies inside the range.
		"reset_total": func(i int) float64 {
			if i < 2*samplesPerChunk {
				return float64(i)
			}
			return float64(i-2*samplesPerChunk) / 10
		},
		"spoiled_total": func(i int) float64 {
			switch {
			case i == 130:
				return math.Inf(1)
			case i%7 == 0:
				return math.NaN()
			}
			return float64(i)
		},
		"saw": func(i int) float64 { return float64((i * 37) % 101) },
	}
	s := newTestStore(t, Options{})
	for i := range n {
		var row []series.Sample
		for name, f := range values {
			row = append(row, smp(name, f(i)))
		}
		mustAppend(t, s, okScrape("r", at(float64(5*i)), row...))
	}
	withView(t, s, "r", func(w detect.Window) {
		for name, f := range values {
			want := math.Inf(-1)
			for i := 10; i < n; i++ {
				if v := f(i); finite(v) {
					want = math.Max(want, v)
				}
			}
			if got, ok := w.Max(detect.Sel(name), at(5*10-1), at(5*n)); !ok || got != want {
				t.Errorf("Max(%s) = %v, %v; want %v", name, got, ok, want)
			}
		}
	})
}

// A bucket whose head holds what the bucket before it holds is not taken
// to read what it read over an older range: after a restart the buckets
// le=2 and le=4 of lat count alike (nothing falls between them), before
// it they did not; late's le=2 appears only at scrape 120, where its le=4
// drops to what le=2 holds, and both then hold the same chunk. A quantile
// over a range reaching back past either reads each bucket from its own
// chunks, as the oracle does.
func TestQuantileReadsEachBucketsOwnChunks(t *testing.T) {
	opts := Options{Retention: 30 * time.Minute, ScrapeInterval: 5 * time.Second}
	s := newTestStore(t, opts)
	o := newOracle(s.Options())
	const restart, scrapes = 150, 300
	var now time.Time
	for i := range scrapes {
		now = t0.Add(time.Duration(i) * opts.ScrapeInterval)
		perBucket := [4]float64{2, 3, 5, 6} // le 1, 2, 4, +Inf
		j := i
		if i >= restart {
			perBucket, j = [4]float64{1, 3, 3, 4}, i-restart
		}
		var samples []series.Sample
		for b, le := range []string{"1", "2", "4", "+Inf"} {
			samples = append(samples, smp("lat_bucket", perBucket[b]*float64(j), "le", le))
		}
		samples = append(samples, smp("lat_count", perBucket[3]*float64(j)))
		if i < samplesPerChunk {
			samples = append(samples, smp("late_bucket", float64(1000+3*i), "le", "4"))
		} else {
			// le=4 drops to what le=2, new, holds; +Inf is new too.
			v := float64(i - samplesPerChunk + 5)
			samples = append(samples, smp("late_bucket", v, "le", "4"), smp("late_bucket", v, "le", "2"), smp("late_bucket", 2*v, "le", "+Inf"))
		}
		o.append(now, samples)
		mustAppend(t, s, okScrape("r", now, samples...))
	}
	r := s.replicas["r"]
	two, four := &r.families["lat_bucket"][1].pts, &r.families["lat_bucket"][2].pts
	if !sameHead(two, four) || len(two.sealed) != 2 || two.sealed[1] == four.sealed[1] {
		t.Fatal("lat: want le=2 and le=4 with equal heads and unequal chunks before them")
	}
	four, two = &r.families["late_bucket"][0].pts, &r.families["late_bucket"][1].pts
	if !sameHead(two, four) || len(four.sealed) != 2 || len(two.sealed) != 1 || four.sealed[1] != two.sealed[0] {
		t.Fatal("late: want le=4 then le=2, with equal heads and chunks, le=4 with an older chunk")
	}
	withView(t, s, "r", func(w detect.Window) {
		ov := oracleView{o: o, real: w}
		for _, ago := range []time.Duration{time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 24 * time.Minute} {
			for _, q := range []float64{0.2, 0.5, 0.75, 0.8, 0.9} {
				for _, h := range []string{"lat", "late"} {
					got, gok := w.Quantile(q, h, nil, now.Add(-ago), now)
					want, wok := ov.Quantile(q, h, nil, now.Add(-ago), now)
					if gok != wok || !near(got, want) {
						t.Errorf("Quantile(%v, %s) over the last %s = %v, %v; oracle %v, %v", q, h, ago, got, gok, want, wok)
					}
				}
			}
		}
	})
}

// A View answers a question asked again from what it found the first time,
// and only the same question: the same family, matches, quantile and
// range. A caller that reuses its slice of matches for another question
// gets that question's answer.
func TestViewAnswersOnlyTheSameQuestionAgain(t *testing.T) {
	s := newTestStore(t, Options{})
	for i := range 30 {
		n := float64(i)
		mustAppend(t, s, okScrape("r", at(float64(5*i)),
			smp("resp_total", 2*n, "code", "500"), smp("resp_total", 3*n, "code", "404"),
			smp("lat_bucket", n, "le", "1"), smp("lat_bucket", 4*n, "le", "2"), smp("lat_bucket", 4*n, "le", "+Inf")))
	}
	from, to := at(50), at(145)
	withView(t, s, "r", func(w detect.Window) {
		ms := []detect.Match{{Label: "code", Value: "5", Prefix: true}}
		for range 2 {
			if got, ok := w.Increase(detect.Selector{Name: "resp_total", Match: ms}, from, to); !ok || got != 2*18 {
				t.Errorf("Increase(5xx) = %v, %v; want 36", got, ok)
			}
		}
		ms[0].Value = "4" // the same slice, another question
		if got, ok := w.Increase(detect.Selector{Name: "resp_total", Match: ms}, from, to); !ok || got != 3*18 {
			t.Errorf("Increase(4xx) after Increase(5xx) with the same slice = %v, %v; want 54", got, ok)
		}
		if got, ok := w.Increase(detect.Sel("resp_total"), from, to); !ok || got != 5*18 {
			t.Errorf("Increase(all) = %v, %v; want 90", got, ok)
		}
		if got, ok := w.Increase(detect.Sel("resp_total"), from, at(95)); !ok || got != 5*8 {
			t.Errorf("Increase(all) over a shorter range = %v, %v; want 40", got, ok)
		}
		// The range holds 19 scrapes, 18 steps. Increases per bound 18,
		// 72, 72: p25 is rank 18, the top of (0, 1]; p50 rank 36 in (1, 2]
		// holding 54, 18 below.
		for range 2 {
			for _, c := range []struct{ q, want float64 }{{0.25, 1}, {0.5, 1 + 18.0/54}, {0.25, 1}} {
				if got, ok := w.Quantile(c.q, "lat", nil, from, to); !ok || !near(got, c.want) {
					t.Errorf("Quantile(%v) = %v, %v; want %v", c.q, got, ok, c.want)
				}
			}
		}
	})
}
