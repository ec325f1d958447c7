package alertmanager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/alertmanager"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// webhookMessage is the part of Alertmanager's webhook payload the test
// reads.
type webhookMessage struct {
	Receiver string `json:"receiver"`
	Status   string `json:"status"`
	Alerts   []struct {
		Status string            `json:"status"`
		Labels map[string]string `json:"labels"`
	} `json:"alerts"`
}

type webhook struct {
	mu   sync.Mutex
	msgs []webhookMessage
}

func (w *webhook) received(status string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		for _, a := range m.Alerts {
			if a.Status == status && a.Labels["team"] == "inference" && a.Labels["class"] == "preempt_storm" && m.Receiver == "team-webhook" &&
				a.Labels["cluster"] == "ci-east" && a.Labels["alertname"] == "SGLangPreemptStorm" {
				return true
			}
		}
	}
	return false
}

// eventually polls cond every 200 ms until it holds or the deadline passes:
// the other side is a real Alertmanager process, not a fake clock.
func eventually(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", within, what)
		}
		<-tick.C
	}
}

// TestRealAlertmanagerRoundTrip runs against a real Alertmanager started by
// .ci/alertmanager-e2e.sh (ALERTMANAGER_URL), configured to route
// team="inference" to a webhook receiver at ALERTMANAGER_WEBHOOK_ADDR,
// which this test serves. Through the real dispatcher, queue and notifier:
// the incident arrives and is routed by its label, with the external label
// and the prefixed alertname; a silence added with amtool silences it at
// the next refresh; the resolve reaches the webhook.
// Without ALERTMANAGER_URL it is skipped (go test ./... on a laptop); with
// it, an unreachable Alertmanager fails the test.
func TestRealAlertmanagerRoundTrip(t *testing.T) {
	amURL := os.Getenv("ALERTMANAGER_URL")
	if amURL == "" {
		t.Skip("ALERTMANAGER_URL not set; .ci/alertmanager-e2e.sh runs this against a real Alertmanager")
	}
	hookAddr := os.Getenv("ALERTMANAGER_WEBHOOK_ADDR")
	if hookAddr == "" {
		t.Fatal("ALERTMANAGER_WEBHOOK_ADDR must be set with ALERTMANAGER_URL")
	}
	resp, err := http.Get(amURL + "/-/ready")
	if err != nil {
		t.Fatalf("Alertmanager at %s unreachable: %v", amURL, err)
	}
	resp.Body.Close()

	hook := &webhook{}
	ln, err := net.Listen("tcp", hookAddr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m webhookMessage
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &m); err != nil {
			t.Errorf("webhook payload: %v", err)
		}
		hook.mu.Lock()
		hook.msgs = append(hook.msgs, m)
		hook.mu.Unlock()
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	cfg := alertmanager.DefaultConfig()
	cfg.URLs = []string{amURL}
	cfg.ResendInterval = time.Second
	cfg.ExternalLabels = map[string]string{"cluster": "ci-east"}
	cfg.AlertnamePrefix = "SGLang"
	n, err := alertmanager.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{{Name: alertmanager.Name, Notifier: n}},
		Routes: notify.RouteConfig{Routes: []notify.Route{
			{Matchers: []string{`team="inference"`}, Integrations: []string{alertmanager.Name}},
		}},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		_ = d.Run(ctx)
		close(done)
	}()
	defer func() { cancel(); <-done }()

	// A unique replica, so that reruns against the same Alertmanager do
	// not see each other's alerts.
	replica := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	ev := notifytest.PreemptStorm(time.Now())
	ev.Fingerprint = replica
	ev.Replica = replica
	ev.Labels = map[string]string{"namespace": "llm-prod", "team": "inference"}
	d.Send(ev)

	eventually(t, "the firing alert at the team's webhook receiver", 30*time.Second, func() bool { return hook.received("firing") })

	out, err := exec.Command("amtool", "--alertmanager.url="+amURL, "silence", "add",
		"replica="+replica, "team=inference", "--duration=10m", "--author=ci", "--comment=watchdog e2e").CombinedOutput()
	if err != nil {
		t.Fatalf("amtool silence add: %v: %s", err, out)
	}
	silenceID := strings.TrimSpace(string(out))
	t.Logf("silence %s", silenceID)

	// The next refresh is evaluated against the silence: Alertmanager shows
	// the alert suppressed by it.
	eventually(t, "the refreshed alert silenced by "+silenceID, 30*time.Second, func() bool {
		return alertSilencedBy(t, amURL, replica, silenceID)
	})

	out, err = exec.Command("amtool", "--alertmanager.url="+amURL, "silence", "expire", silenceID).CombinedOutput()
	if err != nil {
		t.Fatalf("amtool silence expire: %v: %s", err, out)
	}
	d.Send(notifytest.Resolve(ev, time.Now()))
	eventually(t, "the resolve at the team's webhook receiver", 30*time.Second, func() bool { return hook.received("resolved") })
}

// alertSilencedBy reports whether Alertmanager holds replica's alert as
// suppressed by silence id.
func alertSilencedBy(t *testing.T, amURL, replica, id string) bool {
	q := url.Values{"filter": {`replica="` + replica + `"`}, "silenced": {"true"}}
	resp, err := http.Get(amURL + "/api/v2/alerts?" + q.Encode())
	if err != nil {
		t.Fatalf("Alertmanager API: %v", err)
	}
	defer resp.Body.Close()
	var alerts []struct {
		Status struct {
			State      string   `json:"state"`
			SilencedBy []string `json:"silencedBy"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		t.Fatalf("Alertmanager API: %v", err)
	}
	for _, a := range alerts {
		if a.Status.State == "suppressed" && len(a.Status.SilencedBy) > 0 && a.Status.SilencedBy[0] == id {
			return true
		}
	}
	return false
}
