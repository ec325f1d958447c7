package server

import (
	"encoding/json"
	"maps"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func serve(t *testing.T, fa *fakeAlerts, path string) (int, string) {
	t.Helper()
	h := (&Server{opts: Options{Alerts: fa, Now: time.Now}}).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

// /api/v2/alerts has Alertmanager's GettableAlert shape: the firing alerts
// only, labelled as silences match them, a silenced one suppressed by its
// silences; filter and the state parameters narrow it as Alertmanager's do.
func TestAlertmanagerShapedAlerts(t *testing.T) {
	fired := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fa := &fakeAlerts{ready: make(chan struct{}), alerts: []alert.Incident{
		{ID: "f1-1767323045", Fingerprint: "f1", Class: detect.PreemptStorm, Replica: "r1", Model: "m", State: alert.StateFiring, Severity: detect.Critical,
			Labels: map[string]string{"team": "inference", "replica": "spoofed"}, ActiveAt: fired.Add(-time.Minute), FiredAt: fired, LastSeen: fired.Add(time.Minute),
			Finding: detect.Finding{Summary: "storm", Diagnosis: "KV full", Runbook: "/runbooks/preempt_storm"}},
		{Fingerprint: "f2", Class: detect.CacheCollapse, Replica: "r2", State: alert.StateFiring, Severity: detect.Warning, FiredAt: fired,
			SilencedBy: []string{"s-1"}},
		{Fingerprint: "f3", Class: detect.CacheCollapse, Replica: "r1", State: alert.StatePending, Severity: detect.Warning},
		{Fingerprint: "f4", Class: detect.ReplicaDown, Replica: "r3", State: alert.StateResolved, Severity: detect.Critical},
	}}
	list := func(query string) models.GettableAlerts {
		t.Helper()
		code, body := serve(t, fa, "/api/v2/alerts"+query)
		var out models.GettableAlerts
		if code != 200 || json.Unmarshal([]byte(body), &out) != nil {
			t.Fatalf("GET /api/v2/alerts%s: %d %s", query, code, body)
		}
		if err := out.Validate(strfmt.Default); err != nil {
			t.Fatalf("GET /api/v2/alerts%s does not pass Alertmanager's schema: %v\n%s", query, err, body)
		}
		return out
	}
	all := list("")
	if len(all) != 2 {
		t.Fatalf("%d alerts, want the 2 firing ones", len(all))
	}
	a := all[0]
	wantLabels := models.LabelSet{"alertname": "preempt_storm", "class": "preempt_storm", "severity": "critical", "replica": "r1", "model": "m",
		"incident": "f1-1767323045", "team": "inference"}
	if !maps.Equal(a.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", a.Labels, wantLabels)
	}
	if a.Annotations["summary"] != "storm" || a.Annotations["description"] != "KV full" || a.Annotations["runbook_url"] != "/runbooks/preempt_storm" {
		t.Errorf("annotations %v", a.Annotations)
	}
	if *a.Fingerprint != "f1" || !time.Time(*a.StartsAt).Equal(fired) || !time.Time(*a.UpdatedAt).Equal(fired.Add(time.Minute)) ||
		*a.Status.State != "active" || len(a.Status.SilencedBy) != 0 {
		t.Errorf("alert %+v status %+v", a, a.Status)
	}
	if s := all[1]; *s.Status.State != "suppressed" || !slices.Equal(s.Status.SilencedBy, []string{"s-1"}) {
		t.Errorf("silenced alert status %+v, want suppressed by s-1", s.Status)
	}

	fingerprints := func(as models.GettableAlerts) string {
		var out []string
		for _, a := range as {
			out = append(out, *a.Fingerprint)
		}
		return strings.Join(out, ",")
	}
	for query, want := range map[string]string{
		"?filter=" + url.QueryEscape(`alertname="preempt_storm"`):                                    "f1",
		"?filter=" + url.QueryEscape(`team=~"inf.*"`) + "&filter=" + url.QueryEscape(`replica="r1"`): "f1",
		"?filter=" + url.QueryEscape(`severity!="critical"`):                                         "f2",
		"?silenced=false":  "f1",
		"?active=false":    "f2",
		"?inhibited=false": "f1,f2",
	} {
		if got := fingerprints(list(query)); got != want {
			t.Errorf("GET /api/v2/alerts%s = %s, want %s", query, got, want)
		}
	}
	for query, want := range map[string]string{
		"?filter=" + url.QueryEscape(`replica=~"(("`): "filter",
		"?silenced=sometimes":                         "silenced",
	} {
		code, body := serve(t, fa, "/api/v2/alerts"+query)
		var msg string
		if code != 400 || json.Unmarshal([]byte(body), &msg) != nil || !strings.HasPrefix(msg, want) {
			t.Errorf("GET %s: %d %s, want 400 naming %s", query, code, body, want)
		}
	}
}

// /api/v1/targets has Prometheus' shape: one active target per replica of
// the last round, with its labels, health and last error; the watchdog's
// own view is at /api/v1/watchdog/targets.
func TestPrometheusShapedTargets(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fa := &fakeAlerts{ready: make(chan struct{}), round: assess.Round{At: at, Replicas: []assess.Replica{
		{Replica: detect.Replica{Name: "r1", Target: "r1", Kind: "engine", Model: "m", Labels: map[string]string{"namespace": "llm"}},
			Scrape: detect.ScrapeState{LastAttempt: at, LastSuccess: at, Up: true}},
		{Replica: detect.Replica{Name: "r2", Target: "r2", Kind: "engine"},
			Scrape: detect.ScrapeState{LastAttempt: at, Reason: series.ScrapeFailure("refused"), Error: "dial tcp 10.0.0.2:30000: connection refused"}},
		{Replica: detect.Replica{Name: "r3", Target: "r3", Kind: "gateway"}},
	}}}
	code, body := serve(t, fa, "/api/v1/targets")
	var got struct {
		Status string
		Data   struct {
			ActiveTargets []struct {
				DiscoveredLabels map[string]string
				Labels           map[string]string
				ScrapePool       string
				LastError        string
				LastScrape       time.Time
				Health           string
			}
			DroppedTargets []any
		}
	}
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.Status != "success" || len(got.Data.ActiveTargets) != 3 || got.Data.DroppedTargets == nil {
		t.Fatalf("GET /api/v1/targets: %d %s", code, body)
	}
	r1, r2, r3 := got.Data.ActiveTargets[0], got.Data.ActiveTargets[1], got.Data.ActiveTargets[2]
	if want := map[string]string{"replica": "r1", "target": "r1", "kind": "engine", "model": "m", "namespace": "llm"}; !maps.Equal(r1.Labels, want) {
		t.Errorf("r1 labels %v, want %v", r1.Labels, want)
	}
	if r1.Health != "up" || r1.LastError != "" || !r1.LastScrape.Equal(at) || r1.ScrapePool != "r1" {
		t.Errorf("r1 %+v", r1)
	}
	if r2.Health != "down" || r2.LastError != "refused: dial tcp 10.0.0.2:30000: connection refused" {
		t.Errorf("r2 %+v", r2)
	}
	if r3.Health != "unknown" {
		t.Errorf("r3, never scraped: %+v", r3)
	}
	for _, key := range []string{`"activeTargets"`, `"scrapePool"`, `"lastError"`, `"lastScrape"`, `"health"`, `"discoveredLabels"`} {
		if !strings.Contains(body, key) {
			t.Errorf("body lacks %s", key)
		}
	}
	if code, body := serve(t, fa, "/api/v1/watchdog/targets"); code != 200 || !strings.Contains(body, `"replica": "r2"`) || !strings.Contains(body, `"last_failure_reason": "refused"`) {
		t.Errorf("/api/v1/watchdog/targets: %d %s", code, body)
	}
}
