package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// linksConfig makes a preempt storm page within seconds.
const linksConfig = `
scrape: {interval: 100ms}
evaluation: {interval: 100ms}
detectors:
  preempt_storm: {range: 2s, baseline: 5s, min_retractions_per_second: 1, critical_retractions_per_second: 2}
alerts: {for: 300ms, keep_firing_for: 1s, resolved_retention: 1m, restore_grace: 2s}
`

// linkDaemon runs the real daemon on one fake replica with the given extra
// environment; it returns the replica, the daemon's base URL and its logs.
func linkDaemon(t *testing.T, extra map[string]string) (*fakeReplica, string, *lines) {
	t.Helper()
	rep := newFakeReplica()
	srv := httptest.NewServer(rep)
	t.Cleanup(srv.Close)
	env := map[string]string{"WATCHDOG_CONFIG": writeConfig(t, linksConfig), "WATCHDOG_TARGETS": "r0=" + srv.URL}
	for k, v := range extra {
		env[k] = v
	}
	_, logs := runDaemon(t, env)
	startLine := logs.waitFor(t, "start log line", func(s string) bool { return strings.Contains(s, "watchdog started") })
	var started struct{ Listen string }
	if err := json.Unmarshal([]byte(startLine), &started); err != nil || started.Listen == "" {
		t.Fatalf("start line %q: %v", startLine, err)
	}
	return rep, "http://" + started.Listen, logs
}

// readyBody returns /readyz's body once it answers 200, asking again after
// each scrape of the replica (readiness follows the first evaluation).
func readyBody(t *testing.T, rep *fakeReplica, base string) string {
	t.Helper()
	for range 50 {
		if code, body := get(t, base+"/readyz"); code == 200 {
			return body
		}
		rep.waitScrapes(t, 1)
	}
	t.Fatal("/readyz never answered 200")
	return ""
}

// Slack and PagerDuty configured without external_url: the daemon says so
// at start-up and in /readyz (staying ready), and the pages carry absolute
// runbook and alert links to this daemon's address, which answer.
func TestPagesLinkToTheDaemonWithoutExternalURL(t *testing.T) {
	slackSrv := notifytest.NewSlackServer()
	t.Cleanup(slackSrv.Close)
	pd := notifytest.NewPagerDutyServer()
	t.Cleanup(pd.Close)
	pdEvents := make(chan notifytest.Request, 100)
	pd.Respond(func(_ int, r notifytest.Request) notifytest.Response { pdEvents <- r; return notifytest.Response{} })
	rep, base, logs := linkDaemon(t, map[string]string{
		"SLACK_BOT_TOKEN": secretToken, "SLACK_CHANNEL": "#oncall", "SLACK_API_URL": slackSrv.APIURL(),
		"PAGERDUTY_ROUTING_KEY": secretKey, "PAGERDUTY_EVENTS_URL": pd.EventsURL(),
	})

	// Logged before the start line, which linkDaemon has waited for.
	var warn string
	for _, l := range strings.Split(logs.text(), "\n") {
		if strings.Contains(l, "external_url is not set") {
			warn = l
		}
	}
	var w struct{ Level, LinksBase, DerivedFrom string }
	if err := json.Unmarshal([]byte(strings.NewReplacer("links_base", "LinksBase", "derived_from", "DerivedFrom").Replace(warn)), &w); err != nil {
		t.Fatalf("warning line %q: %v", warn, err)
	}
	if w.Level != "warn" || w.LinksBase != base || w.DerivedFrom != "listen_address" {
		t.Errorf("warning %+v, want level warn, links_base %s from listen_address", w, base)
	}
	if body := readyBody(t, rep, base); !strings.HasPrefix(body, "ready\n") || !strings.Contains(body, "warning: external_url is not set") || !strings.Contains(body, base) {
		t.Errorf("/readyz body %q lacks the external_url warning naming %s", body, base)
	}

	rep.waitScrapes(t, 30)
	rep.setStorm(true)
	ev := firstPagerDutyTrigger(t, pdEvents)
	// The page links the incident's page, /incidents/<fingerprint>-<opened>.
	runbookURL, alertURL := base+"/runbooks/preempt_storm", ev.ClientURL
	incidentID, isIncident := strings.CutPrefix(alertURL, base+"/incidents/")
	if !isIncident || !strings.HasPrefix(incidentID, ev.DedupKey+"-") {
		t.Errorf("PagerDuty client_url %q, want %s/incidents/%s-<opened>", alertURL, base, ev.DedupKey)
	}
	hrefs := ev.hrefs()
	if !hrefs[runbookURL] || !hrefs[alertURL] || ev.ClientURL != alertURL {
		t.Errorf("PagerDuty links %v, client_url %q; want %s and %s", ev.Links, ev.ClientURL, runbookURL, alertURL)
	}
	if code, body := get(t, runbookURL); code != 200 || body == "" {
		t.Errorf("runbook link answers %d", code)
	}
	// The page at the link renders the journal's record, served as JSON here.
	if body := getJSON(t, base+"/api/v1/incidents/"+incidentID, nil); !strings.Contains(body, ev.DedupKey) || !strings.Contains(body, "preempt_storm") {
		t.Errorf("the linked incident's record answers %s", body)
	}
	// Slack has its own queue: its page may land after PagerDuty's. Look
	// again after each scrape of the replica, a bounded number of times.
	var slackBlocks string
	for range 50 {
		for _, r := range slackSrv.Requests() {
			if r.Method == "chat.postMessage" && r.Form.Get("thread_ts") == "" && strings.Contains(r.Form.Get("blocks"), "preempt_storm") {
				// JSON escapes <, > and & in strings.
				slackBlocks = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(r.Form.Get("blocks"))
			}
		}
		if slackBlocks != "" {
			break
		}
		rep.waitScrapes(t, 1)
	}
	for _, u := range []string{runbookURL, alertURL} {
		if !strings.Contains(slackBlocks, "<"+u+"|") {
			t.Errorf("the Slack page does not link %s: %s", u, slackBlocks)
		}
	}
}

// No warning when external_url is set (its links are used) or when nothing
// pages (only the log integration).
func TestNoLinkWarningWhenConfiguredOrNotPaging(t *testing.T) {
	slackSrv := notifytest.NewSlackServer()
	t.Cleanup(slackSrv.Close)
	for name, env := range map[string]map[string]string{
		"external_url set": {"WATCHDOG_EXTERNAL_URL": "https://watchdog.example.com/",
			"SLACK_BOT_TOKEN": secretToken, "SLACK_CHANNEL": "#oncall", "SLACK_API_URL": slackSrv.APIURL()},
		"no paging integration": {},
	} {
		t.Run(name, func(t *testing.T) {
			rep, base, logs := linkDaemon(t, env)
			if body := readyBody(t, rep, base); body != "ready\n" {
				t.Errorf("/readyz body %q, want no warning", body)
			}
			if strings.Contains(logs.text(), "external_url") {
				t.Errorf("logged an external_url warning:\n%s", logs.text())
			}
		})
	}
}

// pagerDutyEvent is what the tests read of an Events API v2 request.
type pagerDutyEvent struct {
	Action    string              `json:"event_action"`
	DedupKey  string              `json:"dedup_key"`
	ClientURL string              `json:"client_url"`
	Links     []map[string]string `json:"links"`
}

// hrefs are the event's link targets.
func (ev pagerDutyEvent) hrefs() map[string]bool {
	out := map[string]bool{}
	for _, l := range ev.Links {
		out[l["href"]] = true
	}
	return out
}

// firstPagerDutyTrigger waits for the first trigger among the events the
// fake PagerDuty received.
func firstPagerDutyTrigger(t *testing.T, events <-chan notifytest.Request) pagerDutyEvent {
	t.Helper()
	for {
		select {
		case r := <-events:
			var ev pagerDutyEvent
			if err := json.Unmarshal(r.Body, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Action == "trigger" {
				return ev
			}
		case <-t.Context().Done():
			t.Fatal("no PagerDuty trigger")
		}
	}
}
