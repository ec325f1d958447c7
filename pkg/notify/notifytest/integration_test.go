package notifytest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagerduty"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/slack"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	botToken   = "xoxb-9999-8888-TOPSECRETslacktoken"
	routingKey = "PDROUTINGKEYtopsecret0123456789a"
)

type world struct {
	slack    *notifytest.SlackServer
	pd       *notifytest.PagerDutyServer
	store    notify.Store
	logs     *observer.ObservedLogs
	reg      *prometheus.Registry
	logOut   bytes.Buffer
	slackCfg slack.Config
	opts     notify.QueueOptions
}

func newWorld(t *testing.T, store notify.Store) *world {
	w := &world{slack: notifytest.NewSlackServer(), pd: notifytest.NewPagerDutyServer(), store: store}
	t.Cleanup(w.slack.Close)
	t.Cleanup(w.pd.Close)
	w.slackCfg = slack.Config{BotToken: botToken, Channel: "#llm-oncall", APIURL: w.slack.APIURL()}
	w.opts = notify.QueueOptions{InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		MaxRetryDuration: 200 * time.Millisecond, AttemptTimeout: 100 * time.Millisecond, DrainTimeout: 3 * time.Second}
	return w
}

// dispatcher builds a fresh dispatcher (a new process) on the world's store.
func (w *world) dispatcher(t *testing.T) *notify.Dispatcher {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	w.logs, w.reg = logs, prometheus.NewRegistry()
	logger := zap.New(core)
	sl, err := slack.New(w.slackCfg, &http.Client{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := pagerduty.New(pagerduty.Config{RoutingKey: routingKey, EventsURL: w.pd.EventsURL()}, &http.Client{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	opts := w.opts
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{
			{Name: notify.IntegrationSlack, Notifier: sl, Options: opts},
			{Name: notify.IntegrationPagerDuty, Notifier: pd, Options: opts},
		},
		Routes: notify.DefaultRoutes(), Store: w.store, Logger: logger, Registerer: w.reg, LogWriter: &w.logOut,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// run sends evs and stops the dispatcher at once: Run's drain delivers
// everything (or gives up) before it returns, so no waiting is needed.
func run(t *testing.T, d *notify.Dispatcher, evs ...notify.Event) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	for _, ev := range evs {
		d.Send(ev)
	}
	go func() { _ = d.Run(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// Firing incident → restart → the tracker re-sends the trigger → no new
// PagerDuty trigger, no second Slack parent; then the resolve updates the
// original Slack message and resolves PagerDuty with the original dedup_key.
func TestRestartWithStateDir(t *testing.T) {
	dir := t.TempDir()
	open := func() notify.Store {
		s, err := state.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w := newWorld(t, open())
	ev := notifytest.PreemptStorm(notifytest.T0)
	run(t, w.dispatcher(t), ev)
	if got := w.pd.Accepted(); len(got) != 1 || got[0].Action != "trigger" || got[0].DedupKey != ev.Fingerprint {
		t.Fatalf("before restart pagerduty got %+v", got)
	}
	parents := w.slack.Parents()
	if len(parents) != 1 {
		t.Fatalf("before restart %d slack parents", len(parents))
	}
	origTS := parents[0].TS

	// Restart: new process, same state directory.
	w.store = open()
	d2 := w.dispatcher(t)
	openIncs := d2.OpenIncidents()
	if len(openIncs) != 1 || openIncs[0].Fingerprint != ev.Fingerprint || openIncs[0].Severity != detect.Critical {
		t.Fatalf("OpenIncidents after restart = %+v", openIncs)
	}
	again := ev
	again.At = notifytest.T0.Add(5 * time.Minute)
	again.Evidence = append([]notify.Field(nil), ev.Evidence...)
	again.Evidence[0].Value = 4.6 // the numbers moved on while we were down
	res := notifytest.Resolve(again, notifytest.T0.Add(40*time.Minute))
	run(t, d2, again, res)

	got := w.pd.Accepted()
	if len(got) != 2 || got[1].Action != "resolve" || got[1].DedupKey != ev.Fingerprint {
		t.Errorf("pagerduty after restart: %+v, want only the resolve with dedup_key %s", got, ev.Fingerprint)
	}
	for _, e := range got[1:] {
		if e.Action == "trigger" {
			t.Error("a duplicate trigger was sent after the restart")
		}
	}
	parents = w.slack.Parents()
	if len(parents) != 1 || parents[0].TS != origTS {
		t.Fatalf("slack parents after restart %+v, want only the original %s", parents, origTS)
	}
	if !strings.Contains(parents[0].Text, "RESOLVED") || parents[0].Updates < 1 {
		t.Errorf("the original message was not updated to resolved: %q", parents[0].Text)
	}
	replies := w.slack.Replies(origTS)
	if len(replies) != 1 || !strings.Contains(replies[0].Text, "[RESOLVED]") {
		t.Errorf("thread replies %+v, want one resolve reply", replies)
	}
	if n := len(d2.OpenIncidents()); n != 0 {
		t.Errorf("%d incidents still open", n)
	}
	// The state documents hold the Slack ts exactly as returned, and no secret.
	raw, err := os.ReadFile(filepath.Join(dir, "notify-slack.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`"ts":"`+origTS+`"`)) {
		t.Errorf("slack ts not stored verbatim: %s", raw)
	}
	scanDir(t, dir)
}

// An incident resolved while the daemon was down: the tracker learns it
// from OpenIncidents and sends the resolve, which reaches both integrations.
func TestResolveOfIncidentThatEndedWhileDown(t *testing.T) {
	store := notifytest.NewMemStore()
	w := newWorld(t, store)
	ev := notifytest.PreemptStorm(notifytest.T0)
	// The process dies with the trigger undeliverable (PagerDuty down).
	w.pd.Respond(func(int, notifytest.Request) notifytest.Response { return notifytest.Response{Status: 503} })
	w.opts.MaxRetryDuration = time.Hour // the trigger is still owed when the process stops
	w.opts.DrainTimeout = time.Second   // ends with PagerDuty still failing
	w.opts.AttemptTimeout = time.Second
	d := w.dispatcher(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	d.Send(ev)
	_ = d.Run(ctx) // drain: Slack delivered, PagerDuty failing
	if len(w.slack.Parents()) != 1 {
		t.Fatal("slack parent missing")
	}
	w.pd.Respond(nil)
	w.opts.DrainTimeout = 3 * time.Second
	d2 := w.dispatcher(t)
	var toResolve []notify.Event
	for _, inc := range d2.OpenIncidents() {
		toResolve = append(toResolve, notifytest.Resolve(inc, notifytest.T0.Add(time.Hour)))
	}
	if len(toResolve) != 1 {
		t.Fatalf("open incidents %d, want 1", len(toResolve))
	}
	run(t, d2, toResolve...)
	acc := w.pd.Accepted()
	// At least once: a request cut off by the first process's drain deadline
	// may have reached the server, so the trigger can appear twice (PagerDuty
	// dedups it by dedup_key); the resolve must come last.
	if len(acc) < 2 || acc[0].Action != "trigger" || acc[len(acc)-1].Action != "resolve" || acc[len(acc)-1].DedupKey != ev.Fingerprint {
		t.Errorf("pagerduty got %+v, want the owed trigger, then the resolve", acc)
	}
	if p := w.slack.Parents(); len(p) != 1 || !strings.Contains(p[0].Text, "RESOLVED") {
		t.Errorf("slack parent not resolved: %+v", p)
	}
}

// Failures everywhere, then scan every log line, error, metric, state
// document, failure notice and golden file for the secrets.
func TestNoSecretAnywhere(t *testing.T) {
	store := notifytest.NewMemStore()
	w := newWorld(t, store)
	w.pd.Respond(func(n int, r notifytest.Request) notifytest.Response {
		switch n % 4 {
		case 0:
			return notifytest.Response{Status: 400, Body: `{"status":"invalid event","message":"bad routing_key ` + routingKey + `"}`}
		case 1:
			return notifytest.Response{Reset: true}
		case 2:
			return notifytest.Response{Hang: true}
		}
		return notifytest.Response{Status: 401}
	})
	w.slack.Respond(func(n int, r notifytest.Request) notifytest.Response {
		switch n % 3 {
		case 0:
			return notifytest.Response{Status: 200, Body: `{"ok":false,"error":"invalid_auth"}`}
		case 1:
			return notifytest.Response{Reset: true}
		}
		return notifytest.Response{Status: 429, Header: http.Header{"Retry-After": {"0"}}}
	})
	d := w.dispatcher(t)
	var evs []notify.Event
	for _, ev := range notifytest.Samples() {
		ev.Severity = detect.Critical
		evs = append(evs, ev, notifytest.Resolve(ev, notifytest.T0.Add(time.Minute)))
	}
	run(t, d, evs...)

	secrets := []string{botToken, routingKey}
	var corpus []string
	for _, e := range w.logs.All() {
		enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
		buf, err := enc.EncodeEntry(e.Entry, e.Context)
		if err != nil {
			t.Fatal(err)
		}
		corpus = append(corpus, buf.String())
	}
	if len(corpus) == 0 {
		t.Fatal("no log lines captured")
	}
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		corpus = append(corpus, mf.String())
	}
	for _, name := range []string{"notify-slack", "notify-pagerduty", "notify-log"} {
		corpus = append(corpus, string(store.Raw(name)))
	}
	corpus = append(corpus, w.logOut.String())
	// Bodies sent to each provider must not carry the other one's secret
	// (failure notices travel across integrations).
	for _, r := range w.slack.Requests() {
		corpus = append(corpus, r.Form.Get("text")+r.Form.Get("blocks"))
		if strings.Contains(string(r.Body), routingKey) {
			t.Errorf("slack request carries the routing key")
		}
	}
	for _, r := range w.pd.Requests() {
		if strings.Contains(string(r.Body), botToken) {
			t.Errorf("pagerduty request carries the slack token")
		}
	}
	// Errors, directly.
	sl, _ := slack.New(w.slackCfg, &http.Client{}, nil)
	pd, _ := pagerduty.New(pagerduty.Config{RoutingKey: routingKey, EventsURL: w.pd.EventsURL()}, &http.Client{}, nil)
	wh, _ := slack.New(slack.Config{WebhookURL: notify.Secret(w.slack.WebhookURL())}, &http.Client{}, nil)
	for range 4 {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		for _, n := range []notify.Notifier{sl, pd, wh} {
			if err := n.Notify(ctx, notifytest.CacheCollapse(notifytest.T0)); err != nil {
				corpus = append(corpus, err.Error(), fmt.Sprintf("%+v %#v", err, err))
			}
		}
		cancel()
	}
	// Unreachable webhook host: *url.Error carries the URL.
	dead, _ := slack.New(slack.Config{WebhookURL: "http://127.0.0.1:1/services/T/B/DEADSECRETPART"}, &http.Client{}, nil)
	if err := dead.Notify(t.Context(), notifytest.CacheCollapse(notifytest.T0)); err != nil {
		corpus = append(corpus, err.Error())
		secrets = append(secrets, "DEADSECRETPART")
	} else {
		t.Error("dead webhook succeeded")
	}
	secrets = append(secrets, w.slack.WebhookURL(), notifytest.SlackWebhookPath)
	// Golden outputs.
	for _, dir := range []string{"../slack/testdata", "../pagerduty/testdata"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.golden.json"))
		if len(files) == 0 {
			t.Errorf("no golden files in %s", dir)
		}
		for _, f := range files {
			b, _ := os.ReadFile(f)
			corpus = append(corpus, string(b))
		}
	}
	// Config printing.
	cfgs := map[string]any{"slack": slack.Config{BotToken: botToken, WebhookURL: notify.Secret(w.slack.WebhookURL())},
		"pagerduty": pagerduty.Config{RoutingKey: routingKey}}
	y, _ := yaml.Marshal(cfgs)
	j, _ := json.Marshal(cfgs)
	corpus = append(corpus, string(y), string(j), fmt.Sprintf("%v %+v %#v", cfgs, cfgs, cfgs))

	for _, text := range corpus {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("secret %q found in %.300q", s, text)
			}
		}
	}
	if !strings.Contains(string(y), "<secret>") {
		t.Errorf("secrets should print as <secret>: %s", y)
	}
	// Every event ended delivered or counted as failed, never silently lost.
	for _, q := range []string{"slack", "pagerduty"} {
		if n := d.Queue(q).Len(); n != 0 {
			for _, e := range w.logs.FilterField(zap.String("integration", q)).All() {
				t.Log(e.Message, e.ContextMap())
			}
			t.Errorf("%s outbox still has %d events after the drain", q, n)
		}
	}
	if w.logs.FilterMessageSnippet("NOTIFICATION LOST").Len() == 0 {
		t.Error("permanent failures were not logged")
	}
}

func scanDir(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range []string{botToken, routingKey} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s contains a secret", f)
			}
		}
	}
}
