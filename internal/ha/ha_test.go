package ha_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/ha"
	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore"
	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore/kubetest"
	"github.com/sglang-watchdog/sglang-watchdog/internal/leader"
	"github.com/sglang-watchdog/sglang-watchdog/internal/silence"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagerduty"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/slack"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/persist"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	namespace   = "watchdog"
	replicaName = "llama-70b-0"
)

// The lease is real time. lease_duration must exceed renew_deadline by a
// second, the resolution at which followers see renewals.
var haCfg = leader.Config{
	Enabled:       true,
	Namespace:     namespace,
	LeaseDuration: 2 * time.Second,
	RenewDeadline: 500 * time.Millisecond,
	RetryPeriod:   200 * time.Millisecond,
}

var queueOpts = notify.QueueOptions{
	InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
	MaxRetryDuration: 5 * time.Second, AttemptTimeout: 2 * time.Second, DrainTimeout: 2 * time.Second,
}

// world is what the copies share.
type world struct {
	api       *kubetest.API
	slack     *notifytest.SlackServer
	pd        *notifytest.PagerDutyServer
	slackReqs chan notifytest.Request
	pdReqs    chan notifytest.Request
	base      time.Time // evaluation times are base + n·5s
}

func newWorld(t *testing.T) *world {
	w := &world{
		api: kubetest.NewAPI(), slack: notifytest.NewSlackServer(), pd: notifytest.NewPagerDutyServer(),
		slackReqs: make(chan notifytest.Request, 100), pdReqs: make(chan notifytest.Request, 100),
		base: time.Now().Truncate(time.Second),
	}
	t.Cleanup(w.slack.Close)
	t.Cleanup(w.pd.Close)
	w.slack.Respond(func(_ int, r notifytest.Request) notifytest.Response { w.slackReqs <- r; return notifytest.Response{} })
	w.pd.Respond(func(_ int, r notifytest.Request) notifytest.Response { w.pdReqs <- r; return notifytest.Response{} })
	return w
}

func (w *world) at(n int) time.Time { return w.base.Add(time.Duration(n) * 5 * time.Second) }

// daemon is one watchdog copy, built from the same components as
// cmd/watchdog in HA mode: a kubestore and the writer over it, a standby
// dispatcher with Slack and PagerDuty, the real evaluation loop (window
// store, assessment, alert tracker) and the Failover that switches them on
// leadership changes.
type daemon struct {
	name     string
	store    *kubestore.Store
	writer   *persist.Writer
	d        *notify.Dispatcher
	loop     *eval.Loop
	silences *silence.Store
	detector *scriptedDetector
	changes  chan change
	requests atomic.Int64 // HTTP requests this copy made to Slack and PagerDuty
	logs     *observer.ObservedLogs

	stopNotify, stopWriter, stopFailover context.CancelFunc
	notifyDone, writerDone, failoverDone chan struct{}
}

type countingTransport struct {
	n  *atomic.Int64
	rt http.RoundTripper
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// scriptedDetector reports, for the replica, the findings the test sets:
// the detector step is the one part of the pipeline these tests script.
type scriptedDetector struct {
	mu       sync.Mutex
	findings []detect.Finding
}

func (s *scriptedDetector) Class() detect.Class { return detect.PreemptStorm }

func (s *scriptedDetector) Detect(w detect.Window, _ time.Time) []detect.Finding {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.Replica().Name != replicaName {
		return nil
	}
	return slices.Clone(s.findings)
}

func (s *scriptedDetector) set(fs []detect.Finding) {
	s.mu.Lock()
	s.findings = fs
	s.mu.Unlock()
}

// observedElector tells the test when each switch of the Failover began
// and how long it took; it changes nothing of what the Failover does.
type observedElector struct {
	*leader.Elector
	changes chan<- change
}

func (o observedElector) OnChange(fn func(bool)) {
	o.Elector.OnChange(func(leading bool) {
		at := time.Now()
		fn(leading)
		o.changes <- change{leading, at, time.Since(at)}
	})
}

func (w *world) start(t *testing.T, name string) *daemon {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	logger := zap.New(core).With(zap.String("copy", name))
	reg := prometheus.NewRegistry()
	client := w.api.Client(name)
	dm := &daemon{name: name, changes: make(chan change, 16), logs: logs, detector: &scriptedDetector{}}
	httpClient := &http.Client{Transport: countingTransport{&dm.requests, http.DefaultTransport}}

	store, err := kubestore.New(client, kubestore.Options{Namespace: namespace, ReadOnly: true, Logger: logger}, reg)
	if err != nil {
		t.Fatal(err)
	}
	writer := persist.New(store, persist.Options{
		Order:  []string{notify.StateDocumentPrefix + "*", eval.HeldDocument, eval.AlertsDocument},
		Logger: logger, Metrics: persist.NewMetrics(reg),
	})
	sl, err := slack.New(slack.Config{BotToken: "xoxb-test", Channel: "#llm-oncall", APIURL: w.slack.APIURL()}, httpClient, logger)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := pagerduty.New(pagerduty.Config{RoutingKey: "PDROUTINGKEY0123456789abcdef0123", EventsURL: w.pd.EventsURL()}, httpClient, logger)
	if err != nil {
		t.Fatal(err)
	}
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{
			{Name: notify.IntegrationSlack, Notifier: sl, Options: queueOpts},
			{Name: notify.IntegrationPagerDuty, Notifier: pd, Options: queueOpts},
		},
		Routes: notify.DefaultRoutes(), Store: writer, Logger: logger, Registerer: reg, Standby: true,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	// The replica's window: one successful scrape makes it known; the
	// scripted detector decides what it shows.
	windows, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: 5 * time.Second}, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.Append(series.Scrape{Target: replicaName, Kind: "engine", At: w.base}); err != nil {
		t.Fatal(err)
	}
	silenceOpts := silence.DefaultOptions()
	silenceOpts.Persister = store
	dm.silences = silence.New(silenceOpts, reg)
	if err := dm.silences.Load(w.base); err != nil {
		t.Fatal(err)
	}
	dm.loop = eval.New(eval.Options{
		Interval: time.Second, // never ticks: the test calls Evaluate
		Assessor: assess.New([]detect.Detector{dm.detector}, assess.Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()}),
		Tracker:  alert.NewTracker(alert.Config{ResolvedRetention: time.Hour}),
		Links:    alert.Links{ExternalURL: "https://watchdog.example"},
		Windows:  windows, Sender: d, Persister: writer, Silences: dm.silences, Logger: logger,
	}, reg)

	e, err := leader.New(haCfg, client, name, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	failover, err := ha.New(ha.Options{
		Elector: observedElector{e, dm.changes}, Store: writer, Dispatcher: d, Evaluator: dm.loop,
		Now: time.Now, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	dm.store, dm.writer, dm.d = store, writer, d

	// Registered before the stop below, so it runs after it: no switch this
	// copy made, the final step-down included, found the state unreadable.
	t.Cleanup(func() {
		if errs := logs.FilterMessageSnippet("at takeover").All(); len(errs) > 0 {
			t.Errorf("%s: %+v", name, errs)
		}
	})
	nctx, stopNotify := context.WithCancel(context.Background())
	wctx, stopWriter := context.WithCancel(context.Background())
	fctx, stopFailover := context.WithCancel(context.Background())
	dm.stopNotify, dm.stopWriter, dm.stopFailover = stopNotify, stopWriter, stopFailover
	dm.notifyDone, dm.writerDone, dm.failoverDone = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { _ = d.Run(nctx); close(dm.notifyDone) }()
	go func() { _ = writer.Run(wctx); close(dm.writerDone) }()
	go func() { _ = failover.Run(fctx); close(dm.failoverDone) }()
	t.Cleanup(dm.stop)
	return dm
}

// stop is the daemon's clean shutdown order: the dispatcher drains and the
// state is written while this copy still leads, then the lease is released.
func (dm *daemon) stop() {
	dm.stopNotify()
	<-dm.notifyDone
	dm.stopWriter()
	<-dm.writerDone
	dm.stopFailover()
	<-dm.failoverDone
}

// evaluate is one evaluation round of the real loop with the detector
// showing findings: assessment, alert tracker, events to the dispatcher,
// firing alerts saved (a follower's writer keeps nothing).
func (dm *daemon) evaluate(t *testing.T, findings []detect.Finding, now time.Time) []notify.Event {
	t.Helper()
	dm.detector.set(findings)
	return dm.loop.Evaluate(now)
}

// change is one leadership change as the daemon saw it: when it was told,
// and how long the Failover took to switch the store, the dispatcher and
// the evaluation loop.
type change struct {
	leader bool
	at     time.Time
	took   time.Duration
}

func (dm *daemon) next(t *testing.T, d time.Duration) (bool, time.Time) {
	t.Helper()
	select {
	case c := <-dm.changes:
		if c.took > 100*time.Millisecond {
			t.Logf("%s: switching to leader=%v took %s", dm.name, c.leader, c.took)
		}
		return c.leader, c.at
	case <-time.After(d):
		t.Fatalf("%s: no leadership change within %s", dm.name, d)
		return false, time.Time{}
	}
}

func storm(sev detect.Severity) []detect.Finding {
	return []detect.Finding{{
		Class: detect.PreemptStorm, Severity: sev, Replica: replicaName, Model: "meta-llama/Llama-3.1-70B-Instruct",
		Layer: "kv_memory", Summary: "Requests are being retracted at 4.2/s with the KV cache 97% full",
		Diagnosis: "The KV cache is exhausted, so the scheduler evicts running requests.",
		Evidence:  []detect.Evidence{{Name: "retractions", Value: 4.2, Baseline: 0.05, HasBaseline: true, Unit: "/s"}},
		Emergency: []string{"Shift traffic away from llama-70b-0."},
		Runbook:   detect.RunbookPath(detect.PreemptStorm),
	}}
}

var fingerprint = alert.Fingerprint(replicaName, detect.PreemptStorm)

// waitFor returns the first request on ch that pred accepts.
func waitFor(t *testing.T, ch <-chan notifytest.Request, what string, pred func(notifytest.Request) bool) notifytest.Request {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case r := <-ch:
			if pred(r) {
				return r
			}
		case <-deadline:
			t.Fatalf("no %s within 5s", what)
			return notifytest.Request{}
		}
	}
}

func slackMethod(m string) func(notifytest.Request) bool {
	return func(r notifytest.Request) bool { return r.Method == m }
}

func pdAction(action string) func(notifytest.Request) bool {
	return func(r notifytest.Request) bool {
		var ev notifytest.PagerDutyEvent
		_ = json.Unmarshal(r.Body, &ev)
		return ev.Action == action
	}
}

// persisted waits until the ConfigMap holds the record of the incident of
// every integration given, open and with nothing pending, and returns the
// Slack message's ts as recorded there (which is also when the fake Slack
// has stored the message: the record is written after its answer).
func (w *world) persisted(t *testing.T, integrations ...string) string {
	t.Helper()
	type doc struct {
		Outbox    []json.RawMessage `json:"outbox"`
		Incidents map[string]struct {
			Open bool              `json:"open"`
			Ref  map[string]string `json:"ref"`
		} `json:"incidents"`
	}
	var ts string
	ok := w.api.Await(5*time.Second, func() bool {
		cm, err := w.api.Client("check").CoreV1().ConfigMaps(namespace).Get(context.Background(), kubestore.DefaultName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, in := range integrations {
			var d doc
			if json.Unmarshal([]byte(cm.Data["notify-"+in]), &d) != nil || len(d.Outbox) > 0 || !d.Incidents[fingerprint].Open {
				return false
			}
			if in == notify.IntegrationSlack {
				if ts = d.Incidents[fingerprint].Ref[slack.RefTS]; ts == "" {
					return false
				}
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("the leader's records (%v) never reached the ConfigMap", integrations)
	}
	return ts
}

// checkPages asserts what the providers saw of the incident in total: one
// Slack parent, every edit of it on its ts, and PagerDuty exactly the
// actions given, all with the incident's dedup key.
func (w *world) checkPages(t *testing.T, parentTS string, pdActions ...string) {
	t.Helper()
	parents := w.slack.Parents()
	if len(parents) != 1 || parents[0].TS != parentTS {
		t.Errorf("slack parents = %+v, want exactly the one posted first (%s)", parents, parentTS)
	}
	updates := 0
	for _, r := range w.slack.Requests() {
		switch r.Method {
		case "chat.update":
			updates++
			if r.Form.Get("ts") != parentTS {
				t.Errorf("chat.update of ts %s, want the original message %s", r.Form.Get("ts"), parentTS)
			}
		case "chat.postMessage":
			if ts := r.Form.Get("thread_ts"); ts != "" && ts != parentTS {
				t.Errorf("thread reply to %s, want %s", ts, parentTS)
			}
		}
	}
	if updates == 0 {
		t.Error("the Slack message was never updated")
	}
	got := w.pd.Accepted()
	var actions []string
	for _, ev := range got {
		actions = append(actions, ev.Action)
		if ev.DedupKey != fingerprint {
			t.Errorf("pagerduty %s with dedup_key %q, want %q", ev.Action, ev.DedupKey, fingerprint)
		}
	}
	if len(actions) != len(pdActions) {
		t.Fatalf("pagerduty actions %v, want %v", actions, pdActions)
	}
	for i := range actions {
		if actions[i] != pdActions[i] {
			t.Errorf("pagerduty actions %v, want %v", actions, pdActions)
		}
	}
}

// The leader pages; it is stopped cleanly mid-incident (drains, releases
// the lease); the other copy takes over at once and resolves the same
// Slack message and PagerDuty incident.
func TestHACleanHandover(t *testing.T) {
	w := newWorld(t)
	a := w.start(t, "watchdog-a")
	if l, _ := a.next(t, 3*time.Second); !l {
		t.Fatal("a did not lead")
	}
	b := w.start(t, "watchdog-b")

	// Both copies see the incident start as a warning: Slack only.
	for _, dm := range []*daemon{a, b} {
		if evs := dm.evaluate(t, storm(detect.Warning), w.at(1)); len(evs) != 1 || evs[0].Kind != notify.KindTrigger {
			t.Fatalf("%s: events %v", dm.name, evs)
		}
	}
	waitFor(t, w.slackReqs, "Slack parent", slackMethod("chat.postMessage"))
	// It escalates: the message is edited, PagerDuty paged.
	for _, dm := range []*daemon{a, b} {
		dm.evaluate(t, storm(detect.Critical), w.at(2))
	}
	waitFor(t, w.pdReqs, "PagerDuty trigger", pdAction("trigger"))
	parentTS := w.persisted(t, "slack", "pagerduty")
	if b.requests.Load() != 0 {
		t.Fatalf("the follower made %d requests to Slack/PagerDuty", b.requests.Load())
	}

	stopped := time.Now()
	a.stop()
	if l, at := b.next(t, 3*time.Second); !l {
		t.Fatal("b did not take over")
	} else {
		t.Logf("takeover %s after a clean stop (lease_duration %s)", at.Sub(stopped), haCfg.LeaseDuration)
		if at.Sub(stopped) >= haCfg.LeaseDuration {
			t.Errorf("takeover took %s although the lease was released", at.Sub(stopped))
		}
	}

	// The incident ends: b resolves what a opened.
	if evs := b.evaluate(t, nil, w.at(3)); len(evs) != 1 || evs[0].Kind != notify.KindResolve {
		t.Fatalf("b's events: %v", evs)
	}
	waitFor(t, w.pdReqs, "PagerDuty resolve", pdAction("resolve"))
	b.stop()
	w.checkPages(t, parentTS, "trigger", "resolve")
	if got := w.slack.Messages()[0]; got.Updates < 2 {
		t.Errorf("parent updated %d times, want the escalation (by a) and the resolve (by b)", got.Updates)
	}
}

// The leader is cut off from the API server (it cannot renew or release)
// but keeps running: it stops paging by itself within renew_deadline; the
// other copy takes over once the lease expires, escalates and resolves the
// same incident, and the cut-off copy never pages again.
func TestHAHardStop(t *testing.T) {
	w := newWorld(t)
	a := w.start(t, "watchdog-a")
	a.next(t, 3*time.Second)
	b := w.start(t, "watchdog-b")
	for _, dm := range []*daemon{a, b} {
		dm.evaluate(t, storm(detect.Warning), w.at(1))
	}
	waitFor(t, w.slackReqs, "Slack parent", slackMethod("chat.postMessage"))
	parentTS := w.persisted(t, "slack")

	cut := time.Now()
	w.api.Partition("watchdog-a", true)
	aReqs := a.requests.Load()
	lostLeader, lostAt := a.next(t, 3*time.Second)
	gotLeader, gotAt := b.next(t, 5*time.Second)
	if lostLeader || !gotLeader {
		t.Fatalf("a leader=%v, b leader=%v", lostLeader, gotLeader)
	}
	t.Logf("after the cut: a stopped paging in %s, b took over in %s (lease_duration %s, retry_period %s)",
		lostAt.Sub(cut), gotAt.Sub(cut), haCfg.LeaseDuration, haCfg.RetryPeriod)
	if !lostAt.Before(gotAt) {
		t.Error("both copies led at once")
	}
	// Typically 2.0-2.3s: lease_duration after b last saw a renewal, plus up
	// to two polls (retry_period with 120% jitter); the bound allows for a
	// loaded CI machine running every package under -race.
	if limit := haCfg.LeaseDuration + 2*time.Duration(2.2*float64(haCfg.RetryPeriod)) + 2*time.Second; gotAt.Sub(cut) > limit {
		t.Errorf("takeover took %s, want within %s (lease_duration + 2 polls + 2s for a busy machine)", gotAt.Sub(cut), limit)
	}

	// Escalation after the takeover, seen by both copies.
	for _, dm := range []*daemon{a, b} {
		dm.evaluate(t, storm(detect.Critical), w.at(2))
	}
	waitFor(t, w.pdReqs, "PagerDuty trigger", pdAction("trigger"))
	waitFor(t, w.slackReqs, "Slack update", slackMethod("chat.update"))
	for _, dm := range []*daemon{a, b} {
		dm.evaluate(t, nil, w.at(3))
	}
	waitFor(t, w.pdReqs, "PagerDuty resolve", pdAction("resolve"))
	b.stop()
	a.stop()
	if n := a.requests.Load() - aReqs; n != 0 {
		t.Errorf("the cut-off copy made %d requests after the cut", n)
	}
	w.checkPages(t, parentTS, "trigger", "resolve")
}

// The leader dies mid-incident and the incident ends before anyone else
// leads: the new leader's tracker saw the end while it was a follower, and
// on takeover it resolves the incident the old leader opened (the old
// leader never will).
func TestHALeaderlessGapIsCaughtUp(t *testing.T) {
	w := newWorld(t)
	a := w.start(t, "watchdog-a")
	a.next(t, 3*time.Second)
	b := w.start(t, "watchdog-b")
	for _, dm := range []*daemon{a, b} {
		dm.evaluate(t, storm(detect.Critical), w.at(1))
	}
	waitFor(t, w.pdReqs, "PagerDuty trigger", pdAction("trigger"))
	waitFor(t, w.slackReqs, "Slack parent", slackMethod("chat.postMessage"))
	parentTS := w.persisted(t, "slack", "pagerduty")

	// Hold b off the API for a moment so that the gap is certain.
	w.api.Partition("watchdog-b", true)
	w.api.Partition("watchdog-a", true)
	a.stopNotify() // a "dies": no more deliveries
	<-a.notifyDone
	if l, _ := a.next(t, 3*time.Second); l {
		t.Fatal("a still leads")
	}
	// No copy leads; the incident ends.
	for _, dm := range []*daemon{a, b} {
		if evs := dm.evaluate(t, nil, w.at(2)); len(evs) != 1 || evs[0].Kind != notify.KindResolve {
			t.Fatalf("%s: %v", dm.name, evs)
		}
	}
	w.api.Partition("watchdog-b", false)
	if l, _ := b.next(t, 5*time.Second); !l {
		t.Fatal("b did not take over")
	}
	waitFor(t, w.pdReqs, "PagerDuty resolve", pdAction("resolve"))
	b.stop()
	w.checkPages(t, parentTS, "trigger", "resolve")
	cm, err := w.api.Client("check").CoreV1().ConfigMaps(namespace).Get(context.Background(), kubestore.DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var saved []alert.Incident
	if err := json.Unmarshal([]byte(cm.Data[eval.AlertsDocument]), &saved); err != nil || len(saved) != 0 {
		t.Errorf("alerts document after the resolve = %s (%v), want no firing alert", cm.Data[eval.AlertsDocument], err)
	}
}

// A silence set on the leader is in the shared ConfigMap: the follower
// (which reloads it, as its silence store's Follow does) mutes the same
// incident, so its standby has no held-back page to catch up at takeover;
// the new leader keeps muting, and when the silence is expired on it while
// the storm goes on, the page goes out.
func TestHASilenceOnTheLeaderMutesAfterTakeover(t *testing.T) {
	w := newWorld(t)
	a := w.start(t, "watchdog-a")
	if l, _ := a.next(t, 3*time.Second); !l {
		t.Fatal("a did not lead")
	}
	b := w.start(t, "watchdog-b")
	st, err := a.silences.Add(silence.Silence{Matchers: []string{`replica="` + replicaName + `"`}, EndsAt: w.at(100), CreatedBy: "ana"}, w.at(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.silences.Load(w.at(0)); err != nil {
		t.Fatal(err)
	}
	for _, dm := range []*daemon{a, b} {
		if evs := dm.evaluate(t, storm(detect.Critical), w.at(1)); len(evs) != 0 {
			t.Fatalf("%s sent %d events of a silenced incident", dm.name, len(evs))
		}
	}
	a.stop()
	if l, _ := b.next(t, 3*time.Second); !l {
		t.Fatal("b did not take over")
	}
	if evs := b.evaluate(t, storm(detect.Critical), w.at(2)); len(evs) != 0 {
		t.Fatalf("new leader sent %d events of a silenced incident", len(evs))
	}
	if got := b.loop.Alerts(); len(got) != 1 || !slices.Equal(got[0].SilencedBy, []string{st.ID}) {
		t.Fatalf("new leader's alerts %+v, want one silenced by %s", got, st.ID)
	}
	if n := a.requests.Load() + b.requests.Load(); n != 0 {
		t.Fatalf("%d requests to Slack/PagerDuty while silenced", n)
	}
	if _, err := b.silences.Expire(st.ID, w.at(3)); err != nil {
		t.Fatal(err)
	}
	if evs := b.evaluate(t, storm(detect.Critical), w.at(4)); len(evs) != 1 || evs[0].Kind != notify.KindTrigger {
		t.Fatalf("after the silence ended the new leader sent %v, want one trigger", evs)
	}
	waitFor(t, w.pdReqs, "PagerDuty trigger", pdAction("trigger"))
	waitFor(t, w.slackReqs, "Slack parent", slackMethod("chat.postMessage"))
}
