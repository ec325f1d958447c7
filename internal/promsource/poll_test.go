package promsource

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// latestBody is an instant query of a range selector: raw samples at the
// times Prometheus scraped them. extra is spliced in at the top level
// (the flavours' fields).
func latestBody(extra string, samples map[string][]int) string {
	var result []string
	for _, replica := range []string{"a", "b"} {
		ts := samples[replica]
		if len(ts) == 0 {
			continue
		}
		var vals []string
		for _, t := range ts {
			vals = append(vals, fmt.Sprintf(`[%d,"%d"]`, t, t))
		}
		result = append(result, fmt.Sprintf(`{"metric":{"__name__":"sglang:num_requests_total","instance":%q,"job":"sglang"},"values":[%s]}`, replica, strings.Join(vals, ",")))
	}
	return `{"status":"success",` + extra + `"data":{"resultType":"matrix","result":[` + strings.Join(result, ",") + `]}}`
}

func summary(scrapes []series.Scrape) string {
	var out []string
	for _, sc := range scrapes {
		out = append(out, fmt.Sprintf("%s@%d%s", sc.Target, sc.At.Unix(), map[bool]string{true: " " + string(sc.Reason)}[sc.Reason != ""]))
	}
	return strings.Join(out, " ")
}

// TestPollerFollowsTheFleet: each poll appends each replica's newest
// Prometheus sample once, at the time Prometheus scraped it; a replica
// that stops appearing is down ("absent") after absent_intervals steps,
// and comes back with its next sample.
func TestPollerFollowsTheFleet(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	r, _ := newReader(t, srv.URL, func(c *Config) { c.AbsentIntervals = 3 })
	var st store
	p := NewPoller(r, &st, 5*time.Second, nil, nil)
	p.logger = r.logger
	poll := func(now int64, body string) {
		t.Helper()
		api.set(func(f *fakeAPI) { f.query = body })
		if err := p.Poll(context.Background(), time.Unix(now, 0)); err != nil {
			t.Fatalf("poll at %d: %v", now, err)
		}
	}
	poll(1001, latestBody("", map[string][]int{"a": {990, 995, 1000}, "b": {990, 995, 1000}}))
	poll(1006, latestBody("", map[string][]int{"a": {995, 1000, 1005}, "b": {995, 1000}}))
	poll(1011, latestBody("", map[string][]int{"a": {1000, 1005, 1010}, "b": {995, 1000}}))
	poll(1016, latestBody("", map[string][]int{"a": {1005, 1010, 1015}})) // b: last sample 16 s ago
	poll(1021, latestBody("", map[string][]int{"a": {1010, 1015, 1020}, "b": {1020}}))
	want := "a@1000 b@1000 a@1005 a@1010 a@1015 b@1016 absent a@1020 b@1020"
	if got := summary(st.scrapes); got != want {
		t.Errorf("appended:\n got %s\nwant %s", got, want)
	}
	if q := api.queries[0]; !strings.Contains(q, "[10000ms]") {
		t.Errorf("latest query %q does not read two steps of raw samples", q)
	}
	for _, sc := range st.scrapes {
		if sc.Reason == series.FailureAbsent && !strings.Contains(sc.Error, "absent from Prometheus") {
			t.Errorf("absent scrape says %q", sc.Error)
		}
	}
}

// TestPollerPartialAnswers: the flavours' ways of saying an answer may be
// incomplete — Thanos' and Mimir's "warnings" (Thanos with
// partial_response when a store is down), VictoriaMetrics cluster's
// "isPartial": true with its "stats" — keep the data but mark nobody
// absent; VictoriaMetrics' complete answer ("isPartial": false) does.
func TestPollerPartialAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		absent      bool
	}{
		{"prometheus", ``, true},
		{"thanos partial response", `"warnings":["No StoreAPIs matched for this query","receive-0: rpc error: code = Unavailable"],`, false},
		{"victoriametrics partial", `"isPartial":true,"stats":{"seriesFetched":"1","executionTimeMsec":3},`, false},
		{"victoriametrics complete", `"isPartial":false,"stats":{"seriesFetched":"1","executionTimeMsec":3},`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{}
			srv := httptest.NewServer(api)
			defer srv.Close()
			r, _ := newReader(t, srv.URL, func(c *Config) { c.AbsentIntervals = 2 })
			var st store
			p := NewPoller(r, &st, 5*time.Second, nil, r.logger)
			api.set(func(f *fakeAPI) { f.query = latestBody("", map[string][]int{"a": {1000}, "b": {1000}}) })
			if err := p.Poll(context.Background(), time.Unix(1001, 0)); err != nil {
				t.Fatal(err)
			}
			api.set(func(f *fakeAPI) { f.query = latestBody(tc.extra, map[string][]int{"a": {1015}}) })
			if err := p.Poll(context.Background(), time.Unix(1016, 0)); err != nil {
				t.Fatal(err)
			}
			got := summary(st.scrapes)
			if strings.Contains(got, "absent") != tc.absent {
				t.Errorf("appended %s; b marked absent: want %v", got, tc.absent)
			}
			if !strings.Contains(got, "a@1015") {
				t.Errorf("appended %s: the data of the partial answer was not kept", got)
			}
			partial := testutil.ToFloat64(r.metrics.queries.WithLabelValues("latest", "partial"))
			if (partial == 1) == tc.absent {
				t.Errorf("%v latest queries counted partial", partial)
			}
		})
	}
}

// TestPollerAPIDownMarksNobody: the API failing says nothing about the
// replicas: nothing is appended, the error says why.
func TestPollerAPIDownMarksNobody(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	r, _ := newReader(t, srv.URL, nil)
	var st store
	p := NewPoller(r, &st, 5*time.Second, nil, r.logger)
	api.set(func(f *fakeAPI) { f.query = latestBody("", map[string][]int{"a": {1000}}) })
	if err := p.Poll(context.Background(), time.Unix(1001, 0)); err != nil {
		t.Fatal(err)
	}
	api.set(func(f *fakeAPI) { f.status, f.query = 502, "bad gateway" })
	for now := int64(1006); now < 1100; now += 5 {
		if err := p.Poll(context.Background(), time.Unix(now, 0)); err == nil || !strings.Contains(err.Error(), "502") {
			t.Fatalf("poll against a failing API: error %v", err)
		}
	}
	if got := summary(st.scrapes); got != "a@1000" {
		t.Errorf("appended %s while the API was down, want only a@1000", got)
	}
}

// TestMimirPathPrefix: Mimir serves the API under /prometheus; the URL's
// path is kept.
func TestMimirPathPrefix(t *testing.T) {
	api := &fakeAPI{query: latestBody("", map[string][]int{"a": {1000}})}
	srv := httptest.NewServer(api)
	defer srv.Close()
	r, _ := newReader(t, srv.URL+"/prometheus", nil)
	var st store
	if err := NewPoller(r, &st, 5*time.Second, nil, r.logger).Poll(context.Background(), time.Unix(1001, 0)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(api.queries[0], "/prometheus/api/v1/query ") {
		t.Errorf("request %q, want /prometheus/api/v1/query", api.queries[0])
	}
}

// TestPollerBackfillsANewReplica: a replica that appears after the first
// poll gets its history (query_range of just that replica) before its
// first live sample; the replicas present at start are left alone (the
// daemon's start-up backfill covered them).
func TestPollerBackfillsANewReplica(t *testing.T) {
	api := &fakeAPI{rng: `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"sglang:num_requests_total","instance":"b"},"values":[[985,"1"],[990,"2"],[995,"3"],[1000,"4"]]}]}}`}
	srv := httptest.NewServer(api)
	defer srv.Close()
	r, reg := newReader(t, srv.URL, nil)
	var st store
	p := NewPoller(r, &st, 5*time.Second, nil, r.logger)
	p.BackfillNew(time.Minute)
	api.set(func(f *fakeAPI) { f.query = latestBody("", map[string][]int{"a": {1000}}) })
	if err := p.Poll(context.Background(), time.Unix(1001, 0)); err != nil {
		t.Fatal(err)
	}
	api.set(func(f *fakeAPI) { f.query = latestBody("", map[string][]int{"a": {1005}, "b": {1000, 1005}}) })
	if err := p.Poll(context.Background(), time.Unix(1006, 0)); err != nil {
		t.Fatal(err)
	}
	got := summary(st.scrapes)
	if want := "a@1000 b@985 b@990 b@995 b@1000 a@1005 b@1005"; got != want {
		t.Errorf("appended:\n got %s\nwant %s", got, want)
	}
	var ranges []string
	for _, q := range api.queries {
		if strings.HasPrefix(q, "/api/v1/query_range") {
			ranges = append(ranges, q)
		}
	}
	if len(ranges) != 1 || !strings.Contains(ranges[0], `instance=~"b"`) {
		t.Errorf("range queries %v, want one for b alone", ranges)
	}
	if v := testutil.ToFloat64(r.metrics.backfilled); v != 4 {
		t.Errorf("backfilled samples %v, want 4", v)
	}
	_ = reg
}
