package pagerduty_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagerduty"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const routingKey = "R0UT1NGKEYsecret0123456789abcdef"

func newNotifier(t *testing.T, eventsURL string) *pagerduty.Notifier {
	t.Helper()
	n, err := pagerduty.New(pagerduty.Config{RoutingKey: routingKey, EventsURL: eventsURL}, &http.Client{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestGoldenEvents(t *testing.T) {
	srv := notifytest.NewPagerDutyServer()
	defer srv.Close()
	n := newNotifier(t, srv.EventsURL())
	for _, ev := range notifytest.Samples() {
		for _, step := range []struct {
			name string
			ev   notify.Event
		}{
			{"trigger", ev},
			{"resolve", recovered(notifytest.Resolve(ev, notifytest.T0.Add(17*time.Minute+12*time.Second)))},
		} {
			name := ev.Class + "." + step.name
			t.Run(name, func(t *testing.T) {
				before := len(srv.Requests())
				if err := n.Notify(ctxTimeout(t, 5*time.Second), step.ev); err != nil {
					t.Fatal(err)
				}
				reqs := srv.Requests()
				if len(reqs) != before+1 {
					t.Fatalf("want exactly one request, got %d", len(reqs)-before)
				}
				body := reqs[len(reqs)-1].Body
				if !bytes.Contains(body, []byte(routingKey)) {
					t.Fatal("routing key not sent")
				}
				body = bytes.ReplaceAll(body, []byte(routingKey), []byte("<routing_key>"))
				golden(t, filepath.Join("testdata", name+".golden.json"), body)
			})
		}
	}
}

// recovered gives a resolve the replica's values as the incident ends,
// named the way the alert tracker names them.
func recovered(ev notify.Event) notify.Event {
	ev.Recovered = []notify.Field{
		{Name: "queued requests", Value: 4},
		{Name: "KV cache usage", Value: 0.62, Unit: "ratio"},
		{Name: "time to first token p99", Value: 0.41, Unit: "s"},
	}
	return ev
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	pretty, _ := json.MarshalIndent(v, "", "  ")
	pretty = append(pretty, '\n')
	if *update {
		if err := os.WriteFile(path, pretty, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(pretty, want) {
		t.Errorf("%s differs (run go test -update):\n%s", path, pretty)
	}
}

func TestEventFieldsAndResolveContext(t *testing.T) {
	ev := notifytest.PreemptStorm(notifytest.T0)
	trig := pagerduty.BuildEvent(ev, routingKey)
	res := pagerduty.BuildEvent(notifytest.Resolve(ev, notifytest.T0.Add(time.Hour)), routingKey)
	if trig.Action != "trigger" || res.Action != "resolve" {
		t.Fatalf("actions %s/%s", trig.Action, res.Action)
	}
	if trig.DedupKey != ev.Fingerprint || res.DedupKey != ev.Fingerprint {
		t.Errorf("dedup keys %q/%q, want the fingerprint %q", trig.DedupKey, res.DedupKey, ev.Fingerprint)
	}
	p := trig.Payload
	if p.Source != ev.Replica || p.Severity != "critical" || p.Component != ev.Model || p.Group != ev.Class || p.Class != ev.Class {
		t.Errorf("payload %+v", p)
	}
	if res.Payload == nil || res.Payload.Source != p.Source || res.Payload.Class != p.Class || res.Payload.Component != p.Component {
		t.Errorf("resolve must carry the same routing context: %+v", res.Payload)
	}
	if len(trig.Links) != 2 {
		t.Errorf("links %v", trig.Links)
	}
	for sev, want := range map[detect.Severity]string{detect.Critical: "critical", detect.Warning: "warning", detect.Info: "info"} {
		e := ev
		e.Severity = sev
		if got := pagerduty.BuildEvent(e, "k").Payload.Severity; got != want {
			t.Errorf("severity %s → %s, want %s", sev, got, want)
		}
	}
}

func TestLimits(t *testing.T) {
	ev := notifytest.PreemptStorm(notifytest.T0)
	ev.Summary = strings.Repeat("ä", 5000)
	ev.Diagnosis = strings.Repeat("x", 1<<20)
	for range 1000 {
		ev.Evidence = append(ev.Evidence, notify.Field{Name: strings.Repeat("n", 10000), Value: 1})
		ev.Emergency = append(ev.Emergency, strings.Repeat("s", 10000))
		ev.RootCause = append(ev.RootCause, strings.Repeat("r", 10000))
	}
	e := pagerduty.BuildEvent(ev, routingKey)
	if n := len([]rune(e.Payload.Summary)); n > pagerduty.MaxSummary {
		t.Errorf("summary %d runes", n)
	}
	if !strings.HasSuffix(e.Payload.Summary, "…(truncated)") {
		t.Errorf("truncation not visible: %q", e.Payload.Summary[len(e.Payload.Summary)-30:])
	}
	b, _ := json.Marshal(e)
	if len(b) > 256<<10 {
		t.Errorf("event is %d bytes, want well under 512 KB", len(b))
	}
}

func TestConfiguredEventsURLIsUsed(t *testing.T) {
	tests := []struct {
		name, events, wantURL string
	}{
		{"default US", "", "https://events.pagerduty.com/v2/enqueue"},
		{"EU region", pagerduty.EUEventsURL, "https://events.eu.pagerduty.com/v2/enqueue"},
		{"proxy with prefix", "https://proxy.internal/pd/v2/enqueue", "https://proxy.internal/pd/v2/enqueue"},
		{"bare host", "https://events.eu.pagerduty.com", "https://events.eu.pagerduty.com/v2/enqueue"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
				got = r.URL.String()
				return &http.Response{StatusCode: 202, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(`{"status":"success"}`)), Request: r}, nil
			})}
			n, err := pagerduty.New(pagerduty.Config{RoutingKey: routingKey, EventsURL: tc.events}, client, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Notify(t.Context(), notifytest.PreemptStorm(notifytest.T0)); err != nil {
				t.Fatal(err)
			}
			if got != tc.wantURL {
				t.Errorf("posted to %s, want %s", got, tc.wantURL)
			}
		})
	}
	for _, bad := range []string{"ftp://x/v2/enqueue", "https://x/other", "not a url", "https://x/v2/enqueue?routing_key=1"} {
		if err := (pagerduty.Config{RoutingKey: routingKey, EventsURL: bad}).Validate(); err == nil || !strings.Contains(err.Error(), "events_url") {
			t.Errorf("%q: want events_url error, got %v", bad, err)
		}
	}
	if _, err := pagerduty.New(pagerduty.Config{}, nil, nil); err == nil || !strings.Contains(err.Error(), "routing_key") {
		t.Errorf("missing key: %v", err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestFailureClassification(t *testing.T) {
	tests := []struct {
		name          string
		resp          notifytest.Response
		wantPermanent bool
		wantReason    notify.Reason
		wantAfter     time.Duration // > 0: RetryAfter expected
		wantInError   string
	}{
		// No named wait: the queue's exponential backoff decides.
		{name: "429 without Retry-After", resp: notifytest.Response{Status: 429, Body: `{"status":"throttle event"}`},
			wantReason: notify.ReasonRateLimited},
		{name: "429 with Retry-After", resp: notifytest.Response{Status: 429, Header: http.Header{"Retry-After": {"7"}}},
			wantReason: notify.ReasonRateLimited, wantAfter: 7 * time.Second},
		{name: "429 with Retry-After as a date", resp: notifytest.Response{Status: 429, Header: http.Header{
			"Retry-After": {"Sun, 06 Dec 2026 16:00:10 GMT"}, "Date": {"Sun, 06 Dec 2026 16:00:00 GMT"}}},
			wantReason: notify.ReasonRateLimited, wantAfter: 10 * time.Second},
		{name: "500", resp: notifytest.Response{Status: 500, Body: "<html>oops</html>", Header: http.Header{"Content-Type": {"text/html"}}},
			wantReason: notify.ReasonServerError},
		{name: "503", resp: notifytest.Response{Status: 503}, wantReason: notify.ReasonServerError},
		{name: "400 with error body (echoing the key)", resp: notifytest.Response{Status: 400,
			Body: `{"status":"invalid event","message":"Event object is invalid","errors":["'payload.summary' is too long","routing_key ` + routingKey + ` ok"]}`},
			wantPermanent: true, wantReason: notify.ReasonInvalidPayload, wantInError: "'payload.summary' is too long"},
		{name: "401", resp: notifytest.Response{Status: 401}, wantPermanent: true, wantReason: notify.ReasonAuthError},
		{name: "403", resp: notifytest.Response{Status: 403}, wantPermanent: true, wantReason: notify.ReasonAuthError},
		{name: "404", resp: notifytest.Response{Status: 404}, wantPermanent: true, wantReason: notify.ReasonClientError},
		{name: "timeout", resp: notifytest.Response{Hang: true}, wantReason: notify.ReasonTimeout},
		{name: "connection reset", resp: notifytest.Response{Reset: true}, wantReason: notify.ReasonNetwork},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := notifytest.NewPagerDutyServer()
			defer srv.Close()
			srv.Respond(func(int, notifytest.Request) notifytest.Response { return tc.resp })
			n := newNotifier(t, srv.EventsURL())
			err := n.Notify(ctxTimeout(t, 300*time.Millisecond), notifytest.PreemptStorm(notifytest.T0))
			if err == nil {
				t.Fatal("want an error")
			}
			if got := len(srv.Requests()); got != 1 {
				t.Errorf("made %d requests, want exactly one attempt", got)
			}
			if got := notify.IsPermanent(err); got != tc.wantPermanent {
				t.Errorf("permanent = %v, want %v (%v)", got, tc.wantPermanent, err)
			}
			if got := notify.ReasonOf(err); got != tc.wantReason {
				t.Errorf("reason = %s, want %s (%v)", got, tc.wantReason, err)
			}
			after, ok := notify.RetryAfterOf(err)
			if throttled := tc.wantReason == notify.ReasonRateLimited; notify.IsThrottled(err) != throttled {
				t.Errorf("throttled = %v, want %v", notify.IsThrottled(err), throttled)
			}
			if ok != (tc.wantAfter > 0) || after != tc.wantAfter {
				t.Errorf("retry after = %s %v, want %s", after, ok, tc.wantAfter)
			}
			if !strings.Contains(err.Error(), tc.wantInError) {
				t.Errorf("error %q lacks %q", err, tc.wantInError)
			}
			assertNoSecret(t, err.Error(), srv.URL)
		})
	}
}

func assertNoSecret(t *testing.T, s string, extra ...string) {
	t.Helper()
	for _, secret := range append([]string{routingKey}, extra...) {
		if strings.Contains(s, secret) {
			t.Errorf("secret %q leaked into %q", secret, s)
		}
	}
}

func TestOnlyChangesAndResolvesAreSentForOpenIncidents(t *testing.T) {
	srv := notifytest.NewPagerDutyServer()
	defer srv.Close()
	n := newNotifier(t, srv.EventsURL())
	ev := notifytest.RetryAvalanche(notifytest.T0)
	open := &notify.Incident{Fingerprint: ev.Fingerprint, Open: true, Last: ev}
	ctx := ctxTimeout(t, 5*time.Second)
	same := notifytest.Update(ev, notifytest.T0.Add(time.Minute), detect.Warning)
	if err := n.NotifyIncident(ctx, same, open); !errors.Is(err, notify.ErrNothingToSend) {
		t.Errorf("update without severity change: %v, want ErrNothingToSend", err)
	}
	rep := same
	rep.Kind = notify.KindRepeat
	if err := n.NotifyIncident(ctx, rep, open); !errors.Is(err, notify.ErrNothingToSend) {
		t.Errorf("repeat: %v, want ErrNothingToSend", err)
	}
	if len(srv.Requests()) != 0 {
		t.Fatalf("requests for no-ops: %d", len(srv.Requests()))
	}
	esc := notifytest.Update(ev, notifytest.T0.Add(2*time.Minute), detect.Critical)
	if err := n.NotifyIncident(ctx, esc, open); err != nil {
		t.Fatal(err)
	}
	got := srv.Accepted()
	if len(got) != 1 || got[0].Action != "trigger" || got[0].Payload.Severity != "critical" || got[0].DedupKey != ev.Fingerprint {
		t.Errorf("escalation sent %+v", got)
	}
	// Impact that grew changes what the page says at the same severity:
	// PagerDuty gets the new summary on the same key.
	grew := notifytest.Update(ev, notifytest.T0.Add(3*time.Minute), detect.Warning)
	grew.Headline = "sim-2: 40% of requests failing over 2m — " + ev.Headline
	if err := n.NotifyIncident(ctx, grew, open); err != nil {
		t.Fatal(err)
	}
	got = srv.Accepted()
	if len(got) != 2 || got[1].Action != "trigger" || got[1].DedupKey != ev.Fingerprint || !strings.Contains(got[1].Payload.Summary, "40% of requests failing") {
		t.Errorf("impact update sent %+v", got)
	}
}

// Through the real queue: a script of failures of every kind ends with every
// page and resolve delivered or counted as permanently failed.
func TestQueueDeliversThroughFailures(t *testing.T) {
	srv := notifytest.NewPagerDutyServer()
	defer srv.Close()
	storm := notifytest.PreemptStorm(notifytest.T0)
	bad := notifytest.CacheCollapse(notifytest.T0)
	bad.Severity = detect.Critical
	resolve := notifytest.Resolve(storm, notifytest.T0.Add(time.Minute))
	scripts := map[string][]notifytest.Response{
		"trigger/" + storm.Fingerprint: {{Status: 503}, {Reset: true}, {Status: 429, Header: http.Header{"Retry-After": {"0"}}}, {Status: 500}},
		"resolve/" + storm.Fingerprint: {{Hang: true}, {Status: 502}},
		"trigger/" + bad.Fingerprint:   {{Status: 400, Body: `{"status":"invalid event","message":"Event object is invalid","errors":["bad"]}`}},
	}
	seen := map[string]int{}
	finished := make(chan struct{})
	var once sync.Once
	srv.Respond(func(n int, r notifytest.Request) notifytest.Response {
		var ev notifytest.PagerDutyEvent
		_ = json.Unmarshal(r.Body, &ev)
		k := ev.Action + "/" + ev.DedupKey
		i := seen[k]
		seen[k]++
		if s := scripts[k]; i < len(s) {
			return s[i]
		}
		if k == "resolve/"+storm.Fingerprint {
			once.Do(func() { close(finished) })
		}
		return notifytest.Response{}
	})
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{{Name: "pagerduty", Notifier: newNotifier(t, srv.EventsURL()), Options: notify.QueueOptions{
			InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, AttemptTimeout: 200 * time.Millisecond,
		}}},
		Routes: notify.DefaultRoutes(), Store: notifytest.NewMemStore(), Logger: zap.New(core), Registerer: reg,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	d.Send(storm)
	d.Send(bad)
	d.Send(resolve)
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("resolve never delivered")
	}
	cancel()
	<-done
	got := srv.Accepted()
	if len(got) != 2 || got[0].Action != "trigger" || got[1].Action != "resolve" || got[1].DedupKey != storm.Fingerprint {
		t.Errorf("accepted %+v, want the trigger then the resolve", got)
	}
	if d.Queue("pagerduty").Len() != 0 {
		t.Error("outbox not empty")
	}
	mfs, _ := reg.Gather()
	var failed, delivered float64
	for _, mf := range mfs {
		if mf.GetName() == "watchdog_notifications_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == "failed" && m.GetLabel()[0].GetValue() == "pagerduty" {
						failed = m.GetCounter().GetValue()
					}
					if l.GetName() == "result" && l.GetValue() == "delivered" && m.GetLabel()[0].GetValue() == "pagerduty" {
						delivered = m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if failed != 1 || delivered != 2 {
		t.Errorf("failed=%v delivered=%v, want 1 and 2", failed, delivered)
	}
	for _, e := range logs.All() {
		b, _ := json.Marshal(e.ContextMap())
		assertNoSecret(t, e.Message+string(b))
	}
	if logs.FilterMessageSnippet("NOTIFICATION LOST").Len() != 1 {
		t.Error("the permanent failure was not logged loudly")
	}
}
