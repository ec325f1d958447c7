package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// amAlert is the part of a posted Alertmanager alert the test reads.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
}

type amPost struct {
	at     time.Time
	alerts []amAlert
}

// The daemon configured with notify.alertmanager and a route matching the
// target's team label posts the incident to Alertmanager with the target's
// labels, refreshes it while it fires (endsAt ahead, moving forward) and
// resolves it (endsAt in the past).
func TestDaemonPostsIncidentsToAlertmanager(t *testing.T) {
	posts := make(chan amPost, 1000)
	am := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var alerts []amAlert
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/api/v2/alerts" || json.Unmarshal(body, &alerts) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		posts <- amPost{at: time.Now(), alerts: alerts}
	}))
	t.Cleanup(am.Close)
	rep := newFakeReplica()
	srv := httptest.NewServer(rep)
	t.Cleanup(srv.Close)
	cfg := linksConfig + fmt.Sprintf(`
targets:
  - {name: r0, url: %q, labels: {team: inference}}
notify:
  alertmanager: {urls: [%q], resend_interval: 300ms}
  routes:
    - matchers: ['team="inference"']
      integrations: [alertmanager]
`, srv.URL, am.URL)
	runDaemon(t, map[string]string{"WATCHDOG_CONFIG": writeConfig(t, cfg)})
	rep.waitScrapes(t, 30)
	rep.setStorm(true)

	next := func(what string) amPost {
		t.Helper()
		select {
		case p := <-posts:
			if len(p.alerts) != 1 {
				t.Fatalf("%s: posted %+v, want one alert", what, p.alerts)
			}
			return p
		case <-t.Context().Done():
			t.Fatalf("no Alertmanager post: %s", what)
		}
		return amPost{}
	}
	first := next("trigger")
	a := first.alerts[0]
	if a.Labels["team"] != "inference" || a.Labels["replica"] != "r0" || a.Labels["class"] != "preempt_storm" || a.Labels["alertname"] != "preempt_storm" {
		t.Fatalf("labels %v", a.Labels)
	}
	if !a.EndsAt.After(first.at) || a.Annotations["runbook_url"] == "" || a.Annotations["diagnosis"] == "" {
		t.Errorf("firing alert ends %s (posted %s), annotations %v", a.EndsAt, first.at, a.Annotations)
	}
	refreshed := 0
	last := a.EndsAt
	for refreshed < 2 {
		p := next("refresh")
		if !p.alerts[0].EndsAt.After(last) {
			t.Fatalf("a refresh did not move endsAt forward: %s after %s", p.alerts[0].EndsAt, last)
		}
		last = p.alerts[0].EndsAt
		refreshed++
	}
	rep.setStorm(false)
	for {
		p := next("resolve")
		r := p.alerts[0]
		if r.EndsAt.After(p.at) {
			continue // still firing: a refresh or an update
		}
		if r.Labels["team"] != "inference" || !r.StartsAt.Equal(a.StartsAt) {
			t.Errorf("resolve %+v, want the incident's label set and start", r)
		}
		return
	}
}
