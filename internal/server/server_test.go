package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

type fakeAlerts struct {
	alerts []alert.Alert
	round  assess.Round
	ready  chan struct{}
}

func (f *fakeAlerts) Alerts() []alert.Alert     { return f.alerts }
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

	fa := &fakeAlerts{ready: make(chan struct{}), alerts: []alert.Alert{
		{Fingerprint: "f1", Class: detect.PreemptStorm, Replica: "r1", State: alert.StateFiring, Severity: "critical",
			Finding: detect.Finding{Summary: "storm", Diagnosis: "KV full", Evidence: []detect.Evidence{{Name: "retractions/s", Value: 3}}, Emergency: []string{"lower --max-running-requests"}}},
		{Fingerprint: "f2", Class: detect.CacheCollapse, Replica: "r1", State: alert.StateResolved},
	}}
	reloads := 0
	fa.round = assess.New(nil, assess.Config{Triage: detect.DefaultConfig().Triage}).Assess(store, now)
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

	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	if code, _ := get(t, base+"/readyz"); code != 503 {
		t.Errorf("readyz before the first round: %d", code)
	}
	close(fa.ready)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("readyz after: %d", code)
	}

	_, body := get(t, base+"/api/v1/alerts?state=firing")
	var alerts struct{ Alerts []apiAlert }
	json.Unmarshal([]byte(body), &alerts)
	if len(alerts.Alerts) != 1 || alerts.Alerts[0].Diagnosis != "KV full" || len(alerts.Alerts[0].Evidence) != 1 || len(alerts.Alerts[0].Emergency) != 1 {
		t.Errorf("alerts: %s", body)
	}

	_, body = get(t, base+"/api/v1/targets")
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
