package alertmanager

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// One incident's trigger, its escalation (severity up, re-titled to its
// cause, new consequences) and its resolve go through the dispatcher, the
// queue and the real notifier to an Alertmanager endpoint: the alert's
// label set never changes, so Alertmanager's grouping, silences and
// inhibition hold for the incident's life. The escalation adds the
// critical alert beside the warning one (the labels plus severity);
// nothing ends before the resolve, which ends both; what changed is in the
// annotations.
func TestIncidentLabelsStayStableAcrossUpdates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := memnet.New()
		ln, err := network.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var posts [][]postableAlert
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			var batch []postableAlert
			if err := json.Unmarshal(body, &batch); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			posts = append(posts, batch)
			mu.Unlock()
		}))
		srv.Listener = ln
		srv.Start()
		defer network.Close()
		defer srv.Close()

		cfg := DefaultConfig()
		cfg.URLs = []string{srv.URL}
		cfg.ExternalLabels = map[string]string{"cluster": "eu-1"}
		n, err := New(cfg, nil, commoncfg.WithDialContextFunc(network.DialContext))
		if err != nil {
			t.Fatal(err)
		}
		d, err := notify.NewDispatcher(notify.DispatcherConfig{
			Integrations: []notify.Integration{{Name: Name, Notifier: n}},
			Routes:       notify.RouteConfig{Routes: []notify.Route{{Receivers: []string{Name}}}},
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = d.Run(ctx); close(done) }()
		defer func() { stop(); <-done }()

		trigger := notifytest.PreemptStorm(time.Now())
		trigger.Severity, trigger.Title = detect.Warning, "Preemption storm"
		trigger.Labels = map[string]string{"namespace": "llm-prod", "team": "inference"}
		d.Send(trigger)
		synctest.Wait()
		<-time.After(20 * time.Second)

		update := notifytest.Update(trigger, time.Now(), detect.Critical)
		update.Class, update.Title = "cache_collapse", "Prefix-cache collapse" // re-titled to its cause
		update.Explains = []string{"preempt_storm", "retry_avalanche"}
		update.Headline = "llama-70b-0: prefix-cache hit rate fell to 4%; requests retracted, clients retrying"
		d.Send(update)
		synctest.Wait()
		<-time.After(20 * time.Second)

		resolvedAt := time.Now()
		d.Send(notifytest.Resolve(update, resolvedAt))
		synctest.Wait()

		mu.Lock()
		got := append([][]postableAlert(nil), posts...)
		mu.Unlock()
		if len(got) != 3 {
			t.Fatalf("%d posts, want trigger, update, resolve", len(got))
		}
		if len(got[0]) != 1 {
			t.Fatalf("trigger posted %d alerts", len(got[0]))
		}
		warning := got[0][0].Labels
		wantWarning := map[string]string{"alertname": "preempt_storm", "class": "preempt_storm", "severity": "warning",
			"replica": "llama-70b-0", "model": "meta-llama/Llama-3.1-70B-Instruct", "namespace": "llm-prod", "team": "inference", "cluster": "eu-1"}
		if !maps.Equal(warning, wantWarning) {
			t.Errorf("trigger labels %v, want %v", warning, wantWarning)
		}
		critical := maps.Clone(warning)
		critical["severity"] = "critical"
		for i, name := range []string{"update", "resolve"} {
			batch := got[i+1]
			if len(batch) != 2 || !maps.Equal(batch[0].Labels, warning) || !maps.Equal(batch[1].Labels, critical) {
				t.Fatalf("%s label sets %v, want the trigger's and the same with severity critical", name, labelsOf(batch))
			}
		}
		for _, a := range got[1] {
			if !a.EndsAt.After(resolvedAt) {
				t.Errorf("the update ended alert %v at %s", a.Labels, a.EndsAt)
			}
			if a.Annotations["current_severity"] != "critical" || a.Annotations["current_class"] != "cache_collapse" {
				t.Errorf("update annotations do not say what changed: %v", a.Annotations)
			}
		}
		if got[1][0].Annotations["summary"] == got[0][0].Annotations["summary"] {
			t.Error("the update's summary annotation did not change with its headline")
		}
		for _, a := range got[2] {
			if !a.EndsAt.Equal(resolvedAt) {
				t.Errorf("resolve ends %v at %s, want %s", a.Labels, a.EndsAt, resolvedAt)
			}
		}
	})
}

func labelsOf(batch []postableAlert) []map[string]string {
	out := make([]map[string]string, len(batch))
	for i, a := range batch {
		out[i] = a.Labels
	}
	return out
}
