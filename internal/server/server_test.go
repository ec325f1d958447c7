package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

type fakeAlerts struct {
	alerts []alert.Incident
	round  assess.Round
	ready  chan struct{}
}

func (f *fakeAlerts) Alerts() []alert.Incident  { return f.alerts }
func (f *fakeAlerts) Round() assess.Round       { return f.round }
func (f *fakeAlerts) LastEvaluation() time.Time { return time.Unix(100, 0) }
func (f *fakeAlerts) Ready() <-chan struct{}    { return f.ready }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	now := time.Unix(1000, 0)
	store, _ := window.New(window.Options{Retention: time.Hour}, nil)
	for i := 0; i < 3; i++ {
		at := now.Add(time.Duration(i-2) * 5 * time.Second)
		store.Append(series.Scrape{Target: "r1", Kind: "engine", At: at, Groups: []series.Group{{Model: "m", Samples: []series.Sample{
			{Name: series.NumRunningReqs, Value: 8}, {Name: series.NumQueueReqs, Value: 47}, {Name: series.TokenUsage, Value: 0.91},
			{Name: series.PromptTokensTotal, Value: float64(1000 * i)}, {Name: series.CachedTokensTotal, Value: float64(340 * i)},
		}}}})
	}
	store.Append(series.Scrape{Target: "r2", Kind: "engine", At: now, Reason: "refused", Error: "connection refused"})

	fa := &fakeAlerts{ready: make(chan struct{}), alerts: []alert.Incident{
		{Fingerprint: "f1", Class: detect.PreemptStorm, Replica: "r1", State: alert.StateFiring, Severity: detect.Critical,
			Finding: detect.Finding{Summary: "storm", Diagnosis: "KV full", Evidence: []detect.Evidence{{Name: "retractions/s", Value: 3}}, Emergency: []string{"lower --max-running-requests"}}},
		{Fingerprint: "f2", Class: detect.CacheCollapse, Replica: "r1", State: alert.StateResolved},
		{Fingerprint: "f3", Class: detect.PreemptStorm, Replica: "r2", State: alert.StateFiring, Severity: detect.Critical, Draining: true,
			Failing: "40% of requests failing over 20s", Finding: detect.Finding{Summary: "40% of requests failing over 20s"}},
	}}
	reloads := 0
	fa.round = assess.New(nil, assess.Config{Triage: detect.DefaultConfig().Triage}).Assess(store, now, nil)
	srv, err := New("127.0.0.1:0", Options{Gatherer: prometheus.NewRegistry(), Alerts: fa, Logger: zap.NewNop(),
		Now: func() time.Time { return now }, Reload: func() error {
			reloads++
			if reloads > 1 {
				return errors.New("yaml: bad key")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- srv.Run(ctx) }()
	base := "http://" + srv.Addr()

	for _, path := range []string{"/-/healthy", "/healthz"} {
		if code, _ := get(t, base+path); code != 200 {
			t.Errorf("%s %d", path, code)
		}
	}
	for _, path := range []string{"/-/ready", "/readyz"} {
		if code, _ := get(t, base+path); code != 503 {
			t.Errorf("%s before the first round: %d", path, code)
		}
	}
	close(fa.ready)
	for _, path := range []string{"/-/ready", "/readyz"} {
		if code, _ := get(t, base+path); code != 200 {
			t.Errorf("%s after: %d", path, code)
		}
	}

	_, body := get(t, base+"/api/v1/watchdog/alerts?state=firing")
	var alerts struct{ Alerts []apiAlert }
	json.Unmarshal([]byte(body), &alerts)
	if len(alerts.Alerts) != 2 || alerts.Alerts[0].Diagnosis != "KV full" || len(alerts.Alerts[0].Evidence) != 1 || len(alerts.Alerts[0].Emergency) != 1 {
		t.Errorf("alerts: %s", body)
	}
	// A storm that cleared while its failures drain says so: its summary
	// is the failures', not the storm's.
	if a := alerts.Alerts[1]; len(alerts.Alerts) == 2 && (!a.Draining || a.Failing == "" || alerts.Alerts[0].Draining) {
		t.Errorf("draining alert: %s", body)
	}

	_, body = get(t, base+"/api/v1/watchdog/targets")
	var targets struct{ Targets []apiTarget }
	json.Unmarshal([]byte(body), &targets)
	if len(targets.Targets) != 2 {
		t.Fatalf("targets: %s", body)
	}
	r1, r2 := targets.Targets[0], targets.Targets[1]
	sn := r1.Snapshot
	if !r1.Up || sn.QueuedRequests == nil || *sn.QueuedRequests != 47 || sn.KVUsage == nil || *sn.KVUsage != 0.91 || r1.Model != "m" {
		t.Errorf("r1: %s", body)
	}
	if hr := sn.PrefixHitRate; hr == nil || *hr < 0.33 || *hr > 0.35 {
		t.Errorf("hit rate: %s", body)
	}
	if r1.Triage.Verdict == "" {
		t.Errorf("no triage: %s", body)
	}
	if r2.Up || r2.Reason != "refused" || r2.ConsecutiveFailures != 1 {
		t.Errorf("r2: %+v", r2)
	}

	// A browser on another site posting to /-/reload is refused, whichever
	// header gives it away.
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
		req, _ := http.NewRequest("POST", base+"/-/reload", nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("cross-origin reload %v: %d, want 403", h, resp.StatusCode)
		}
	}
	if code, _ := get(t, base+"/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload: %d, want 405", code)
	}
	if reloads != 0 {
		t.Fatalf("refused requests reloaded %d times", reloads)
	}
	resp, _ := http.Post(base+"/-/reload", "", nil)
	resp.Body.Close()
	resp2, _ := http.Post(base+"/-/reload", "", nil)
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp.StatusCode != 200 || resp2.StatusCode != 400 || !strings.Contains(string(b), "bad key") {
		t.Errorf("reload: %d, then %d %s", resp.StatusCode, resp2.StatusCode, b)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// The API at /api/v1/alerts has Prometheus' shape: active alerts only,
// with labels, annotations, state, activeAt and value.
func TestPrometheusShapedAlerts(t *testing.T) {
	active := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fa := &fakeAlerts{ready: make(chan struct{}), alerts: []alert.Incident{
		{Fingerprint: "f1", Class: detect.PreemptStorm, Replica: "r1", Model: "m", State: alert.StateFiring, Severity: detect.Critical, ActiveAt: active,
			Finding: detect.Finding{Layer: detect.LayerMemory, Summary: "storm", Diagnosis: "KV full", Runbook: "/runbooks/preempt_storm",
				Evidence: []detect.Evidence{{Name: "retractions/s", Value: 3}}}},
		{Fingerprint: "f2", Class: detect.CacheCollapse, Replica: "r1", State: alert.StatePending, Severity: detect.Warning, ActiveAt: active},
		{Fingerprint: "f3", Class: detect.ReplicaDown, Replica: "r2", State: alert.StateResolved, Severity: detect.Critical},
	}}
	h := (&Server{opts: Options{Alerts: fa, Now: time.Now}}).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/alerts", nil))
	var got struct {
		Status string
		Data   struct {
			Alerts []struct {
				Labels      map[string]string
				Annotations map[string]string
				State       string
				ActiveAt    time.Time
				Value       string
			}
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if got.Status != "success" || len(got.Data.Alerts) != 2 {
		t.Fatalf("want status success and the 2 active alerts: %s", rec.Body)
	}
	a := got.Data.Alerts[0]
	wantLabels := map[string]string{"alertname": "preempt_storm", "severity": "critical", "replica": "r1", "model": "m", "fingerprint": "f1", "layer": string(detect.LayerMemory)}
	if !maps.Equal(a.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", a.Labels, wantLabels)
	}
	if a.Annotations["summary"] != "storm" || a.Annotations["description"] != "KV full" || a.Annotations["runbook_url"] != "/runbooks/preempt_storm" {
		t.Errorf("annotations %v", a.Annotations)
	}
	if a.State != "firing" || !a.ActiveAt.Equal(active) || a.Value != "3e+00" {
		t.Errorf("state %q activeAt %s value %q", a.State, a.ActiveAt, a.Value)
	}
	if got.Data.Alerts[1].State != "pending" {
		t.Errorf("second alert %+v, want the pending one", got.Data.Alerts[1])
	}
	for _, key := range []string{`"activeAt"`, `"labels"`, `"annotations"`} {
		if !strings.Contains(rec.Body.String(), key) {
			t.Errorf("body lacks %s: %s", key, rec.Body)
		}
	}
}

// Without the lifecycle API enabled, /-/reload refuses and says how to
// enable it.
func TestReloadDisabledByDefault(t *testing.T) {
	h := (&Server{opts: Options{Now: time.Now}}).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/-/reload", nil))
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "--web.enable-lifecycle") {
		t.Errorf("%d %q, want 403 naming --web.enable-lifecycle", rec.Code, rec.Body)
	}
}

// Go's profiles are served only with Options.Pprof, and never the command
// line. (A CPU profile is taken end to end by watchdog-bench fleet's test.)
func TestPprofOnlyWhenEnabled(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		h := (&Server{opts: Options{Now: time.Now, Pprof: enabled}}).Handler()
		get := func(path string) (int, string) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			return rec.Code, rec.Body.String()
		}
		code, body := get("/debug/pprof/")
		if want := map[bool]int{false: 404, true: 200}[enabled]; code != want || enabled != strings.Contains(body, "goroutine") {
			t.Errorf("pprof %v: GET /debug/pprof/ %d, want %d and the profiles listed when enabled:\n%.300s", enabled, code, want, body)
		}
		if code, body := get("/debug/pprof/heap?debug=1"); enabled != (code == 200 && strings.Contains(body, "heap profile:")) {
			t.Errorf("pprof %v: GET /debug/pprof/heap %d %.100q", enabled, code, body)
		}
		if code, _ := get("/debug/pprof/cmdline"); code != 404 {
			t.Errorf("pprof %v: GET /debug/pprof/cmdline %d, want 404", enabled, code)
		}
	}
}

// stallingWindows are a window store whose reads block while stalled, as
// a round stuck on a lock or a slow dependency would.
type stallingWindows struct {
	mu      sync.Mutex
	stalled chan struct{} // nil: reads return at once
}

func (w *stallingWindows) stall() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stalled = make(chan struct{})
	return w.stalled
}

func (w *stallingWindows) Replicas() []detect.Replica {
	w.mu.Lock()
	c := w.stalled
	w.mu.Unlock()
	if c != nil {
		<-c
	}
	return nil
}

func (w *stallingWindows) View(string, func(detect.Window)) bool { return false }

// Liveness and readiness follow the real evaluation loop: both answer 200
// while rounds complete, both turn 503 once no round has completed for
// StaleAfter, and both recover when rounds resume.
func TestProbesFollowTheEvaluationLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		windows := &stallingWindows{}
		loop := eval.New(eval.Options{
			Interval: 5 * time.Second, Windows: windows, Sender: discard{}, Logger: zap.NewNop(),
			Assessor: assess.New(nil, assess.Config{Triage: detect.DefaultConfig().Triage}),
			Tracker:  alert.NewTracker(alert.DefaultConfig()),
		}, prometheus.NewRegistry())
		h := (&Server{opts: Options{Alerts: loop, Now: time.Now, StaleAfter: 20 * time.Second}, stopping: make(chan struct{}), started: time.Now()}).Handler()
		probe := func(path string) (int, string) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			return rec.Code, rec.Body.String()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- loop.Run(ctx) }()

		if code, _ := probe("/-/ready"); code != 503 {
			t.Errorf("/-/ready before the first round: %d", code)
		}
		if code, _ := probe("/-/healthy"); code != 200 {
			t.Errorf("/-/healthy while waiting for the first round: %d", code)
		}
		time.Sleep(6 * time.Second) // virtual time: one round
		synctest.Wait()
		for _, path := range []string{"/-/healthy", "/-/ready"} {
			if code, body := probe(path); code != 200 {
				t.Errorf("%s while rounds complete: %d %s", path, code, body)
			}
		}

		release := windows.stall()
		time.Sleep(19 * time.Second) // the next round is stuck, within the limit
		synctest.Wait()
		if code, body := probe("/-/healthy"); code != 200 {
			t.Errorf("/-/healthy within StaleAfter: %d %s", code, body)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		for _, path := range []string{"/-/healthy", "/healthz", "/-/ready", "/readyz"} {
			if code, body := probe(path); code != 503 || !strings.Contains(body, "evaluation loop stalled") {
				t.Errorf("%s with the loop stuck: %d %q, want 503 saying it stalled", path, code, body)
			}
		}

		windows.mu.Lock()
		windows.stalled = nil
		windows.mu.Unlock()
		close(release)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		for _, path := range []string{"/-/healthy", "/-/ready"} {
			if code, body := probe(path); code != 200 {
				t.Errorf("%s after rounds resumed: %d %s", path, code, body)
			}
		}
		cancel()
		<-done
	})
}

type discard struct{}

func (discard) Send(notify.Event) {}

// Before the first round (the backfill from history runs first) the
// loop may take StaleAfter plus StartGrace; past that it is stalled.
func TestLivenessGivesTheFirstRoundTheStartGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		loop := eval.New(eval.Options{
			Interval: 5 * time.Second, Windows: &stallingWindows{}, Sender: discard{}, Logger: zap.NewNop(),
			Assessor: assess.New(nil, assess.Config{Triage: detect.DefaultConfig().Triage}),
			Tracker:  alert.NewTracker(alert.DefaultConfig()),
		}, prometheus.NewRegistry())
		h := (&Server{opts: Options{Alerts: loop, Now: time.Now, StaleAfter: 20 * time.Second, StartGrace: 30 * time.Second},
			stopping: make(chan struct{}), started: time.Now()}).Handler()
		probe := func(path string) int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			return rec.Code
		}
		time.Sleep(49 * time.Second) // the loop never runs: a backfill still going
		if code := probe("/-/healthy"); code != 200 {
			t.Errorf("/-/healthy 49 s in, within 20 s + 30 s of grace: %d", code)
		}
		time.Sleep(2 * time.Second)
		if code := probe("/-/healthy"); code != 503 {
			t.Errorf("/-/healthy 51 s in without a round: %d, want 503", code)
		}
	})
}
