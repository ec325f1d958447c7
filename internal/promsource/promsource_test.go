package promsource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// fakeAPI answers /api/v1/query and /api/v1/query_range with a canned
// body (and status) per endpoint, and records the queries it was asked.
type fakeAPI struct {
	mu      sync.Mutex
	status  int
	query   string // body of /api/v1/query
	rng     string // body of /api/v1/query_range
	block   bool   // never answer (until the client gives up)
	queries []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	f.mu.Lock()
	f.queries = append(f.queries, r.URL.Path+" "+r.Form.Get("query"))
	status, body, block := f.status, f.query, f.block
	if strings.HasSuffix(r.URL.Path, "/query_range") {
		body = f.rng
	}
	f.mu.Unlock()
	if block {
		<-r.Context().Done()
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

func (f *fakeAPI) set(change func(f *fakeAPI)) { f.mu.Lock(); change(f); f.mu.Unlock() }

func newReader(t *testing.T, url string, edit func(*Config)) (*Reader, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.URL = url
	cfg.Step = 5 * time.Second
	cfg.Timeout = 2 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate("history"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := New(cfg, 0, Options{}, reg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return r, reg
}

// store records appended scrapes.
type store struct{ scrapes []series.Scrape }

func (s *store) Append(sc series.Scrape) error { s.scrapes = append(s.scrapes, sc); return nil }

// Recorded from Prometheus 2.x/3.x (shape of /api/v1/query_range): two
// replicas by pod, one with a label Prometheus renamed on a clash
// (exported_endpoint), up for both; r2 fails its last scrape (up 0, no
// samples: Prometheus marked them stale).
const rangeBody = `{"status":"success","data":{"resultType":"matrix","result":[
{"metric":{"__name__":"sglang:num_running_reqs","engine_type":"unified","job":"sglang","instance":"10.0.0.1:30000","pod":"r1","model_name":"m","tp_rank":"0"},"values":[[1000,"3"],[1005,"4"]]},
{"metric":{"__name__":"sglang:http_requests_total","exported_endpoint":"/generate","endpoint":"http","method":"POST","job":"sglang","instance":"10.0.0.1:30000","pod":"r1","model_name":"m"},"values":[[1000,"10"],[1005,"20"]]},
{"metric":{"__name__":"up","job":"sglang","instance":"10.0.0.1:30000","pod":"r1"},"values":[[1000,"1"],[1005,"1"]]},
{"metric":{"__name__":"sglang:num_running_reqs","job":"sglang","instance":"10.0.0.2:30000","pod":"r2","model_name":"m"},"values":[[1000,"7"]]},
{"metric":{"__name__":"up","job":"sglang","instance":"10.0.0.2:30000","pod":"r2"},"values":[[1000,"1"],[1005,"0"]]},
{"metric":{"__name__":"sglang:num_running_reqs","job":"sglang"},"values":[[1000,"99"]]}
]}}`

// TestRangeIsWhatTheScraperWouldHaveSeen: a query_range answer becomes, at
// each step and for each replica (by replica_label), the normalized scrape:
// Prometheus' target labels gone, a renamed label restored, tp_rank
// dropped by normalization, a step where up is 0 a failed scrape, a series
// without the replica label ignored.
func TestRangeIsWhatTheScraperWouldHaveSeen(t *testing.T) {
	api := &fakeAPI{rng: rangeBody}
	srv := httptest.NewServer(api)
	defer srv.Close()
	r, reg := newReader(t, srv.URL, func(c *Config) { c.ReplicaLabel = "pod"; c.Selector = `job="sglang"`; c.ReplicasPerQuery = 0 })

	got, err := r.Range(context.Background(), time.Unix(1000, 0), time.Unix(1005, 0), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, sc := range got {
		line := fmt.Sprintf("%d %s %s %s", sc.At.Unix(), sc.Target, sc.Kind, sc.Reason)
		for _, g := range sc.Groups {
			line += " model=" + g.Model
			for _, s := range g.Samples {
				line += fmt.Sprintf(" %s%s=%g", s.Name, s.Labels, s.Value)
			}
		}
		lines = append(lines, line)
	}
	want := []string{
		`1000 r1 engine  model=m sglang:http_requests_total{endpoint="/generate",method="POST"}=10 sglang:num_running_reqs=3`,
		`1000 r2 engine  model=m sglang:num_running_reqs=7`,
		`1005 r1 engine  model=m sglang:http_requests_total{endpoint="/generate",method="POST"}=20 sglang:num_running_reqs=4`,
		`1005 r2 engine absent`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("scrapes:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if q := api.queries[0]; !strings.Contains(q, `job="sglang"`) || !strings.Contains(q, "/api/v1/query_range") {
		t.Errorf("query %q does not carry the selector", q)
	}
	if v := testutil.ToFloat64(r.metrics.queries.WithLabelValues("range", "ok")); v != 1 {
		t.Errorf("range ok queries %v, want 1", v)
	}
	_ = reg
}

// TestAPIFailuresAreClearErrors: timeouts, 5xx, bad request, huge
// answers and garbage come back as errors that say what happened, each
// counted under its result; nothing panics and nothing is appended.
func TestAPIFailuresAreClearErrors(t *testing.T) {
	huge := `{"status":"success","data":{"resultType":"matrix","result":[` + strings.Repeat(`{"metric":{"__name__":"sglang:x","instance":"a"},"values":[[1000,"1"]]},`, 2000) + `{"metric":{},"values":[]}]}}`
	for _, tc := range []struct {
		name, result, says string
		set                func(f *fakeAPI)
	}{
		{"5xx", "server_error", "server error: 503", func(f *fakeAPI) { f.status, f.rng = 503, "upstream down" }},
		{"bad selector", "bad_request", "parse error", func(f *fakeAPI) {
			f.status, f.rng = 400, `{"status":"error","errorType":"bad_data","error":"1:2: parse error: unexpected"}`
		}},
		{"timeout", "timeout", "deadline exceeded", func(f *fakeAPI) { f.block = true }},
		{"huge", "too_large", "more than 4096 bytes", func(f *fakeAPI) { f.rng = huge }},
		{"not json", "bad_response", "", func(f *fakeAPI) { f.rng = "<html>login</html>" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{}
			api.set(tc.set)
			srv := httptest.NewServer(api)
			defer srv.Close()
			r, _ := newReader(t, srv.URL, func(c *Config) { c.MaxResponseBytes = 4096; c.Timeout = 200 * time.Millisecond; c.ReplicasPerQuery = 0 })
			var st store
			res := r.Backfill(context.Background(), &st, time.Unix(2000, 0), time.Minute)
			if res.Err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(res.Err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", res.Err, tc.says)
			}
			if len(st.scrapes) != 0 {
				t.Errorf("%d scrapes appended from a failed read", len(st.scrapes))
			}
			if v := testutil.ToFloat64(r.metrics.queries.WithLabelValues("range", tc.result)); v == 0 {
				t.Errorf("no query counted as %s", tc.result)
			}
			if v := testutil.ToFloat64(r.metrics.failures); v != 1 {
				t.Errorf("backfill failures %v, want 1", v)
			}
			if tc.name == "huge" && !errors.Is(res.Err, ErrTooLarge) {
				t.Errorf("a huge answer is not ErrTooLarge: %v", res.Err)
			}
		})
	}
}

// TestBackfillChunksInOrder: a range longer than one chunk, of a fleet
// larger than one request's share of replicas, is read in chunk × batch
// requests (the replicas listed first) and appended in time order, each
// replica once per step.
func TestBackfillChunksInOrder(t *testing.T) {
	var mu sync.Mutex
	var ranges, batches []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		q := r.Form.Get("query")
		if r.URL.Path == "/api/v1/query" {
			if !strings.HasPrefix(q, "count by (instance) (last_over_time(") {
				t.Errorf("listing query %q", q)
			}
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"a"},"value":[1,"3"]},{"metric":{"instance":"b.1"},"value":[1,"3"]},{"metric":{"instance":"c"},"value":[1,"3"]}]}}`)
			return
		}
		var start, end float64
		fmt.Sscan(r.Form.Get("start"), &start)
		fmt.Sscan(r.Form.Get("end"), &end)
		_, sel, _ := strings.Cut(q, `instance=~"`)
		sel, _, _ = strings.Cut(sel, `"`)
		mu.Lock()
		ranges = append(ranges, r.Form.Get("start"))
		batches = append(batches, sel)
		mu.Unlock()
		var rows []string
		for _, inst := range []string{"a", "b.1", "c"} {
			if !regexp.MustCompile("^(" + strings.ReplaceAll(sel, `\\`, `\`) + ")$").MatchString(inst) {
				continue
			}
			var vals []string
			for ts := start; ts <= end; ts += 5 {
				vals = append(vals, fmt.Sprintf(`[%g,"%g"]`, ts, ts))
			}
			rows = append(rows, fmt.Sprintf(`{"metric":{"__name__":"sglang:num_requests_total","instance":%q},"values":[%s]}`, inst, strings.Join(vals, ",")))
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[%s]}}`, strings.Join(rows, ","))
	}))
	defer srv.Close()
	r, _ := newReader(t, srv.URL, func(c *Config) { c.Chunk = time.Minute; c.MaxConcurrent = 2; c.ReplicasPerQuery = 2 })
	var st store
	now := time.Unix(10_000, 0)
	res := r.Backfill(context.Background(), &st, now, 5*time.Minute)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(ranges) < 10 {
		t.Errorf("%d requests for 5 minutes in 1-minute chunks of 2 of 3 replicas, want at least 10", len(ranges))
	}
	for _, b := range batches {
		if b != `a|b\\.1` && b != "c" {
			t.Errorf("a request selects replicas %q, want a|b\\.1 or c (escaped, 2 at most)", b)
		}
	}
	if len(st.scrapes) != 3*60 {
		t.Errorf("%d scrapes, want 180 (3 replicas, 5 minutes at 5 s, ending one step before now)", len(st.scrapes))
	}
	for i := 1; i < len(st.scrapes); i++ {
		a, b := st.scrapes[i-1], st.scrapes[i]
		if b.At.Before(a.At) || (b.At.Equal(a.At) && b.Target <= a.Target) {
			t.Fatalf("scrape %d (%s at %v) after %s at %v: out of order or twice", i, b.Target, b.At, a.Target, a.At)
		}
	}
	if last := st.scrapes[len(st.scrapes)-1].At; !last.Before(now) {
		t.Errorf("the backfill reaches %v, not before now %v (a live scrape would be rejected)", last, now)
	}
}

// TestErrorsHideTheURLsToken: a token in history.url's query reaches
// the logs through the HTTP client's errors unless it is taken out.
func TestErrorsHideTheURLsToken(t *testing.T) {
	api := &fakeAPI{}
	api.set(func(f *fakeAPI) { f.block = true })
	srv := httptest.NewServer(api)
	defer srv.Close()
	r, _ := newReader(t, srv.URL+"/?token=s3cret", func(c *Config) { c.Timeout = 100 * time.Millisecond; c.ReplicasPerQuery = 0 })
	res := r.Backfill(context.Background(), &store{}, time.Unix(2000, 0), time.Minute)
	if res.Err == nil {
		t.Fatal("no error from a server that does not answer")
	}
	if strings.Contains(res.Err.Error(), "s3cret") {
		t.Errorf("error quotes the token: %v", res.Err)
	}
	if v := testutil.ToFloat64(r.metrics.queries.WithLabelValues("range", "timeout")); v == 0 {
		t.Error("a hidden timeout is no longer classified as one")
	}
}
