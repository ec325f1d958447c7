package alertmanager

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// fakeAM is an Alertmanager /api/v2/alerts endpoint that records what it
// is posted and answers as reply says.
type fakeAM struct {
	*httptest.Server
	mu    sync.Mutex
	posts [][]postableAlert
	auth  []string
	reply func(n int) (status int, header http.Header)
}

func newFakeAM(t *testing.T) *fakeAM {
	f := &fakeAM{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != AlertsPath {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var batch []postableAlert
		if err := json.Unmarshal(body, &batch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		n := len(f.posts)
		f.posts = append(f.posts, batch)
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		reply := f.reply
		f.mu.Unlock()
		status := http.StatusOK
		if reply != nil {
			var h http.Header
			status, h = reply(n)
			for k, vs := range h {
				w.Header()[k] = vs
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAM) Posts() [][]postableAlert {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]postableAlert(nil), f.posts...)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newNotifier(t *testing.T, cfg Config, now time.Time) *Notifier {
	t.Helper()
	n, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.now = func() time.Time { return now }
	return n
}

func configFor(urls ...string) Config {
	c := DefaultConfig()
	c.URLs = urls
	return c
}

// teamEvent is a critical preempt storm on a replica discovered in
// Kubernetes with namespace, team and app labels.
func teamEvent() notify.Event {
	ev := notifytest.PreemptStorm(t0)
	ev.Labels = map[string]string{"namespace": "llm-prod", "team": "inference", "app.kubernetes.io/name": "sglang", "model": "ignored-target-label"}
	return ev
}

func TestFiringAlertCarriesLabelsAnnotationsAndEndsAtFourResends(t *testing.T) {
	am := newFakeAM(t)
	n := newNotifier(t, configFor(am.URL), t0.Add(30*time.Second))
	ev := teamEvent()
	if err := n.Notify(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	posts := am.Posts()
	if len(posts) != 1 || len(posts[0]) != 1 {
		t.Fatalf("want one post of one alert, got %+v", posts)
	}
	a := posts[0][0]
	want := map[string]string{
		"alertname": "preempt_storm", "class": "preempt_storm", "severity": "critical",
		"replica": "llama-70b-0", "model": "meta-llama/Llama-3.1-70B-Instruct",
		"namespace": "llm-prod", "team": "inference", "app_kubernetes_io_name": "sglang",
	}
	if len(a.Labels) != len(want) {
		t.Errorf("labels %v, want %v", a.Labels, want)
	}
	for k, v := range want {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, a.Labels[k], v)
		}
	}
	for key, part := range map[string]string{
		"summary":          "[CRITICAL] llama-70b-0: Requests are being retracted",
		"diagnosis":        "The KV cache is exhausted",
		"emergency_steps":  "1. Shift traffic away from llama-70b-0",
		"root_cause_steps": "3. Lower --chunked-prefill-size",
		"evidence":         "retractions: 4.2/s",
		"runbook_url":      notifytest.BaseURL + "/runbooks/preempt_storm",
		"incident_url":     notifytest.BaseURL + "/incidents/" + ev.Incident,
	} {
		if !strings.Contains(a.Annotations[key], part) {
			t.Errorf("annotation %s = %q, want it to contain %q", key, a.Annotations[key], part)
		}
	}
	if !a.StartsAt.Equal(t0) {
		t.Errorf("startsAt %s, want the incident's start %s", a.StartsAt, t0)
	}
	if wantEnd := t0.Add(30*time.Second + 4*DefaultResendInterval); !a.EndsAt.Equal(wantEnd) {
		t.Errorf("endsAt %s, want now + 4 resend intervals = %s", a.EndsAt, wantEnd)
	}
	if a.GeneratorURL != ev.AlertURL {
		t.Errorf("generatorURL %q, want the incident URL", a.GeneratorURL)
	}
}

func TestResolveEndsTheAlertAtTheResolveTime(t *testing.T) {
	am := newFakeAM(t)
	n := newNotifier(t, configFor(am.URL), t0.Add(10*time.Minute))
	inc := &notify.Incident{Ref: map[string]string{}}
	ev := teamEvent()
	if err := n.NotifyIncident(t.Context(), ev, inc); err != nil {
		t.Fatal(err)
	}
	resolvedAt := t0.Add(9 * time.Minute)
	if err := n.NotifyIncident(t.Context(), notifytest.Resolve(ev, resolvedAt), inc); err != nil {
		t.Fatal(err)
	}
	posts := am.Posts()
	if len(posts) != 2 || len(posts[1]) != 1 {
		t.Fatalf("want the resolve as one alert in a second post, got %+v", posts)
	}
	r := posts[1][0]
	if !r.EndsAt.Equal(resolvedAt) {
		t.Errorf("resolve endsAt %s, want the resolve time %s", r.EndsAt, resolvedAt)
	}
	if r.Labels["team"] != "inference" || r.Labels["severity"] != "critical" {
		t.Errorf("the resolve must carry the firing alert's label set, got %v", r.Labels)
	}
	if !strings.HasPrefix(r.Annotations["summary"], "[RESOLVED]") {
		t.Errorf("resolve summary %q", r.Annotations["summary"])
	}
}

// Alerts still open from an earlier incident of the fingerprint (its
// resolve was lost), or kept in the record's older format with other
// labels, are ended in the request that opens the new incident's alert.
func TestAlertsLeftFromBeforeAreEnded(t *testing.T) {
	am := newFakeAM(t)
	now := t0.Add(5 * time.Minute)
	n := newNotifier(t, configFor(am.URL), now)
	inc := &notify.Incident{Ref: map[string]string{}}
	first := teamEvent()
	if err := n.NotifyIncident(t.Context(), first, inc); err != nil {
		t.Fatal(err)
	}
	inc.Open = true // its resolve never arrived
	next := teamEvent()
	next.Incident, next.Severity = next.Fingerprint+"-later", detect.Warning
	if err := n.NotifyIncident(t.Context(), next, inc); err != nil {
		t.Fatal(err)
	}
	posts := am.Posts()
	if len(posts) != 2 || len(posts[1]) != 2 {
		t.Fatalf("want the new alert and the old one's end in one post, got %+v", posts)
	}
	cur, old := posts[1][0], posts[1][1]
	if cur.Labels["severity"] != "warning" || !cur.EndsAt.After(now) {
		t.Errorf("new incident's alert %v ends %s, want warning and firing", cur.Labels, cur.EndsAt)
	}
	if old.Labels["severity"] != "critical" || !old.EndsAt.Equal(now) {
		t.Errorf("earlier incident's alert %v ends %s, want it ended at %s", old.Labels, old.EndsAt, now)
	}

	legacy := &notify.Incident{Open: true, Ref: map[string]string{"alertmanager_labels": `{"alertname":"preempt_storm","severity":"warning","replica":"llama-70b-0"}`}}
	if err := n.NotifyIncident(t.Context(), notifytest.Update(teamEvent(), now, detect.Critical), legacy); err != nil {
		t.Fatal(err)
	}
	posts = am.Posts()
	if len(posts[2]) != 2 || posts[2][1].Labels["severity"] != "warning" || !posts[2][1].EndsAt.Equal(now) {
		t.Errorf("the older record's label set was not ended: %+v", posts[2])
	}
	if _, kept := legacy.Ref["alertmanager_labels"]; kept {
		t.Error("the older record format is kept beside the new one")
	}
}

func TestFailuresAreClassified(t *testing.T) {
	cases := []struct {
		status     int
		header     http.Header
		permanent  bool
		reason     notify.Reason
		retryAfter time.Duration
	}{
		{status: http.StatusBadRequest, permanent: true, reason: notify.ReasonInvalidPayload},
		{status: http.StatusUnauthorized, permanent: true, reason: notify.ReasonAuthError},
		{status: http.StatusNotFound, permanent: true, reason: notify.ReasonClientError},
		{status: http.StatusServiceUnavailable, reason: notify.ReasonServerError},
		{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"7"}}, reason: notify.ReasonRateLimited, retryAfter: 7 * time.Second},
		{status: http.StatusTooManyRequests, reason: notify.ReasonRateLimited}, // the backoff decides
	}
	for _, c := range cases {
		t.Run(http.StatusText(c.status), func(t *testing.T) {
			am := newFakeAM(t)
			am.reply = func(int) (int, http.Header) { return c.status, c.header }
			n := newNotifier(t, configFor(am.URL), t0)
			err := n.Notify(t.Context(), teamEvent())
			if err == nil {
				t.Fatal("no error")
			}
			if notify.IsPermanent(err) != c.permanent || notify.ReasonOf(err) != c.reason {
				t.Errorf("%v: permanent %v reason %s, want %v %s", err, notify.IsPermanent(err), notify.ReasonOf(err), c.permanent, c.reason)
			}
			if notify.IsThrottled(err) != (c.reason == notify.ReasonRateLimited) {
				t.Errorf("throttled %v for %s", notify.IsThrottled(err), c.reason)
			}
			if d, _ := notify.RetryAfterOf(err); d != c.retryAfter {
				t.Errorf("retry after %s, want %s", d, c.retryAfter)
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		am := newFakeAM(t)
		am.Close()
		n := newNotifier(t, configFor(am.URL), t0)
		err := n.Notify(t.Context(), teamEvent())
		if err == nil || notify.IsPermanent(err) || notify.ReasonOf(err) != notify.ReasonNetwork {
			t.Errorf("got %v (reason %s), want a retryable network error", err, notify.ReasonOf(err))
		}
	})
}

// The Alertmanagers of a cluster share alerts: one accepting is a delivery,
// and a cluster where one rejects and one is down is retried, not given up.
func TestClusterOneAcceptanceIsEnough(t *testing.T) {
	up, down, rejecting := newFakeAM(t), newFakeAM(t), newFakeAM(t)
	down.reply = func(int) (int, http.Header) { return http.StatusServiceUnavailable, nil }
	rejecting.reply = func(int) (int, http.Header) { return http.StatusBadRequest, nil }

	n := newNotifier(t, configFor(down.URL, up.URL), t0)
	if err := n.Notify(t.Context(), teamEvent()); err != nil {
		t.Fatalf("one member accepted, got %v", err)
	}
	if len(up.Posts()) != 1 || len(down.Posts()) != 1 {
		t.Errorf("every member must be posted to: up %d, down %d", len(up.Posts()), len(down.Posts()))
	}

	n = newNotifier(t, configFor(rejecting.URL, down.URL), t0)
	err := n.Notify(t.Context(), teamEvent())
	if err == nil || notify.IsPermanent(err) || notify.ReasonOf(err) != notify.ReasonServerError {
		t.Errorf("one rejecting, one down: got %v (permanent %v, reason %s), want retryable server_error", err, notify.IsPermanent(err), notify.ReasonOf(err))
	}
	if err != nil && (!strings.Contains(err.Error(), rejecting.URL) || !strings.Contains(err.Error(), down.URL)) {
		t.Errorf("the error must name every member's failure: %v", err)
	}

	n = newNotifier(t, configFor(rejecting.URL, rejecting.URL+"/"), t0)
	if err := n.Notify(t.Context(), teamEvent()); !notify.IsPermanent(err) {
		t.Errorf("every member rejected: got %v, want permanent", err)
	}
}

func TestHTTPClientConfigAuthenticatesAndKeepsTheSecretOut(t *testing.T) {
	am := newFakeAM(t)
	am.reply = func(int) (int, http.Header) { return http.StatusUnauthorized, nil }
	cfg := configFor(am.URL)
	cfg.HTTPClient.BasicAuth = &commoncfg.BasicAuth{Username: "watchdog", Password: "s3cret-pw"}
	n := newNotifier(t, cfg, t0)
	err := n.Notify(t.Context(), teamEvent())
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("got %v", err)
	}
	if got := am.auth[0]; !strings.HasPrefix(got, "Basic ") {
		t.Errorf("Authorization %q, want basic auth from http_client", got)
	}
	if s := cfg.HTTPClient.String(); strings.Contains(s, "s3cret-pw") {
		t.Errorf("the config's printed form holds the password: %s", s)
	}
}

func TestConfigValidateNamesEveryProblem(t *testing.T) {
	cfg := DefaultConfig()
	cfg.URLs = []string{"http://am-0:9093", "ftp://am", "http://user:pw@am-1:9093", "http://am-0:9093"}
	cfg.ResendInterval = 0
	cfg.HTTPClient.BearerToken = "t"
	cfg.HTTPClient.BearerTokenFile = "/tmp/t"
	cfg.ExternalLabels = map[string]string{"cluster": "", "bad-name": "x", "__meta": "y", "region": "eu"}
	cfg.AlertnamePrefix = "9SGLang"
	err := cfg.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"urls[1]:", "urls[2]: must not hold credentials", "urls[3]: http://am-0:9093 is listed twice", "resend_interval:", "http_client:",
		`external_labels: "bad-name"`, `external_labels: "__meta"`, "external_labels.cluster: empty value", "alertname_prefix:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "pw@") {
		t.Errorf("the error repeats a URL's credentials: %v", err)
	}
	if err := configFor("https://am.example:9093/prefix/").Validate(); err != nil {
		t.Errorf("a URL with a path prefix: %v", err)
	}
	if got, _ := alertsURL("https://am.example:9093/prefix/"); got != "https://am.example:9093/prefix/api/v2/alerts" {
		t.Errorf("alerts URL %q", got)
	}
}

// Two clusters' watchdogs share an Alertmanager: external labels tell their
// alerts apart, a label the alert has wins, and the alertname can carry a
// prefix while the class label stays the class.
func TestExternalLabelsAndAlertnamePrefix(t *testing.T) {
	am := newFakeAM(t)
	cfg := configFor(am.URL)
	cfg.ExternalLabels = map[string]string{"cluster": "us-east-1", "team": "platform"}
	cfg.AlertnamePrefix = "SGLang"
	n := newNotifier(t, cfg, t0.Add(30*time.Second))
	if err := n.Notify(t.Context(), teamEvent()); err != nil {
		t.Fatal(err)
	}
	a := am.Posts()[0][0]
	for k, v := range map[string]string{"cluster": "us-east-1", "team": "inference", "alertname": "SGLangPreemptStorm", "class": "preempt_storm"} {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, a.Labels[k], v, a.Labels)
		}
	}
	for class, want := range map[string]string{"replica_down": "SGLangReplicaDown", "pd_transfer_failure": "SGLangPdTransferFailure", "x": "SGLangX"} {
		if got := Alertname("SGLang", class); got != want {
			t.Errorf("Alertname(SGLang, %s) = %q, want %q", class, got, want)
		}
	}
	if got := Alertname("", "replica_down"); got != "replica_down" {
		t.Errorf("no prefix: %q, want the class", got)
	}
}
