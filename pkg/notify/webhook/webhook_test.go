package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/webhook"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	secret   = "whsec-3f9a1c"
	urlToken = "tok-a8d02e"
)

// verify is a receiver's check, written from docs/webhook.md and not from
// the package: the signature is HMAC-SHA256 over "<timestamp>.<body>",
// and the timestamp is within five minutes of now.
func verify(h http.Header, body []byte, now time.Time) error {
	ts := h.Get("X-Watchdog-Timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("no timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("stale timestamp")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(body)))
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(h.Get("X-Watchdog-Signature"))) {
		return errors.New("bad signature")
	}
	return nil
}

type received struct {
	header http.Header
	body   []byte
	path   string
}

// endpoint is a receiver that verifies every request and answers as
// status says (200 when nil).
type endpoint struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	status func(n int) (int, http.Header)
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		n := len(e.got)
		e.got = append(e.got, received{header: r.Header.Clone(), body: body, path: r.URL.RequestURI()})
		status := e.status
		e.mu.Unlock()
		if err := verify(r.Header, body, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		code, h := http.StatusNoContent, http.Header(nil)
		if status != nil {
			code, h = status(n)
		}
		for k, vs := range h {
			w.Header()[k] = vs
		}
		if code >= 400 {
			http.Error(w, "no route for "+r.URL.RequestURI()+" with "+secret, code) // a server quoting secrets back
			return
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *endpoint) received() []received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]received(nil), e.got...)
}

func newNotifier(t *testing.T, url string, client *http.Client) *webhook.Notifier {
	t.Helper()
	n, err := webhook.New(webhook.Config{URL: notify.Secret(url), Secret: secret}, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRequestIsSignedAndATamperedOneIsRejected(t *testing.T) {
	e := newEndpoint(t)
	n := newNotifier(t, e.URL+"/hooks/"+urlToken+"?team=inference", nil)
	ev := notifytest.PreemptStorm(time.Now())
	if err := n.Notify(context.Background(), ev); err != nil {
		t.Fatalf("a verified request failed: %v", err)
	}
	got := e.received()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	r := got[0]
	if r.path != "/hooks/"+urlToken+"?team=inference" {
		t.Errorf("posted to %q", r.path)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if d := r.header.Get("X-Watchdog-Delivery"); d != ev.Fingerprint+"-1" {
		t.Errorf("delivery id %q, want fingerprint-seq", d)
	}
	var p webhook.Payload
	if err := json.Unmarshal(r.body, &p); err != nil || p.Fingerprint != ev.Fingerprint || p.Kind != "trigger" {
		t.Fatalf("body %s: %v", r.body, err)
	}
	now := time.Now()
	tampered := bytes.Replace(r.body, []byte(`"critical"`), []byte(`"info"`), 1)
	if bytes.Equal(tampered, r.body) {
		t.Fatal("the tampering changed nothing")
	}
	if err := verify(r.header, tampered, now); err == nil {
		t.Error("a tampered body verified")
	}
	replayed := r.header.Clone()
	replayed.Set("X-Watchdog-Timestamp", strconv.FormatInt(now.Add(time.Hour).Unix(), 10))
	if err := verify(replayed, r.body, now.Add(time.Hour)); err == nil {
		t.Error("a request with a changed timestamp verified")
	}
	if err := verify(r.header, r.body, now.Add(10*time.Minute)); err == nil {
		t.Error("a request replayed ten minutes later verified")
	}
	if sig := webhook.Sign([]byte(secret), r.header.Get("X-Watchdog-Timestamp"), r.body); sig != r.header.Get("X-Watchdog-Signature") {
		t.Errorf("Sign gives %s, the request carried %s", sig, r.header.Get("X-Watchdog-Signature"))
	}
}

func TestFailuresAreClassified(t *testing.T) {
	cases := []struct {
		status     int
		header     http.Header
		reason     notify.Reason
		permanent  bool
		retryAfter time.Duration
	}{
		{400, nil, notify.ReasonInvalidPayload, true, 0},
		{401, nil, notify.ReasonAuthError, true, 0},
		{403, nil, notify.ReasonAuthError, true, 0},
		{404, nil, notify.ReasonClientError, true, 0},
		{408, nil, notify.ReasonTimeout, false, 0},
		{429, http.Header{"Retry-After": {"7"}}, notify.ReasonRateLimited, false, 7 * time.Second},
		{429, nil, notify.ReasonRateLimited, false, 0},
		{500, nil, notify.ReasonServerError, false, 0},
		{503, nil, notify.ReasonServerError, false, 0},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			e := newEndpoint(t)
			e.status = func(int) (int, http.Header) { return c.status, c.header }
			n := newNotifier(t, e.URL+"/hooks/"+urlToken, nil)
			err := n.Notify(context.Background(), notifytest.PreemptStorm(time.Now()))
			if err == nil {
				t.Fatal("no error")
			}
			if got := notify.ReasonOf(err); got != c.reason {
				t.Errorf("reason %s, want %s", got, c.reason)
			}
			if notify.IsPermanent(err) != c.permanent {
				t.Errorf("permanent = %v, want %v", notify.IsPermanent(err), c.permanent)
			}
			d, named := notify.RetryAfterOf(err)
			if named != (c.retryAfter > 0) || d != c.retryAfter {
				t.Errorf("retry after %s (named %v), want %s", d, named, c.retryAfter)
			}
			if c.status == 429 && !notify.IsThrottled(err) {
				t.Error("429 not throttled")
			}
			if strings.Contains(err.Error(), urlToken) || strings.Contains(err.Error(), secret) {
				t.Errorf("error shows a secret: %v", err)
			}
		})
	}
}

func TestTimeoutAndRefusedAreRetryable(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) }) // runs first
	n := newNotifier(t, hang.URL+"/hooks/"+urlToken, &http.Client{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := n.Notify(ctx, notifytest.PreemptStorm(time.Now()))
	if notify.ReasonOf(err) != notify.ReasonTimeout || notify.IsPermanent(err) {
		t.Errorf("hang: %v (reason %s, permanent %v), want a retryable timeout", err, notify.ReasonOf(err), notify.IsPermanent(err))
	}
	if strings.Contains(err.Error(), urlToken) {
		t.Errorf("error shows the URL's token: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n = newNotifier(t, "http://"+addr+"/hooks/"+urlToken, &http.Client{})
	err = n.Notify(context.Background(), notifytest.PreemptStorm(time.Now()))
	if notify.ReasonOf(err) != notify.ReasonNetwork || notify.IsPermanent(err) {
		t.Errorf("refused: %v (reason %s), want a retryable network error", err, notify.ReasonOf(err))
	}
	if strings.Contains(err.Error(), urlToken) {
		t.Errorf("error shows the URL's token: %v", err)
	}
}

func TestConfigIsValidatedWithoutShowingSecrets(t *testing.T) {
	err := webhook.Config{URL: "ftp://hooks.example/" + urlToken}.Validate()
	if err == nil || !strings.Contains(err.Error(), "url: not an absolute http(s) URL") || !strings.Contains(err.Error(), "secret: required") {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), urlToken) {
		t.Errorf("error shows the URL: %v", err)
	}
	if _, err := webhook.New(webhook.Config{URL: "https://hooks.example/x"}, nil, nil); err == nil {
		t.Error("a webhook without a signing secret was built")
	}
}

// The documented example is the real output: the golden payloads are the
// bodies the notifier posts for sample events, docs/webhook.md shows the
// trigger's verbatim, and every field of the schema is documented there.
func TestPayloadGoldenAndDocs(t *testing.T) {
	trigger := notifytest.PreemptStorm(notifytest.T0)
	trigger.Title = "Preemption storm"
	trigger.Labels = map[string]string{"namespace": "llm-prod", "team": "inference"}
	impact := 148.0
	trigger.Impact = &notify.Impact{Queued: &impact}
	resolve := notifytest.Resolve(trigger, notifytest.T0.Add(14*time.Minute))
	e := newEndpoint(t)
	n := newNotifier(t, e.URL, nil)
	for i, c := range []struct {
		name string
		ev   notify.Event
	}{{"trigger", trigger}, {"resolve", resolve}} {
		if err := n.Notify(context.Background(), c.ev); err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		if err := json.Indent(&body, e.received()[i].body, "", "  "); err != nil {
			t.Fatalf("posted body is not JSON: %v", err)
		}
		body.WriteByte('\n')
		path := filepath.Join("testdata", c.name+".golden.json")
		if *update {
			if err := os.WriteFile(path, body.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if string(want) != body.String() {
			t.Errorf("%s differs (run go test -update):\n%s", path, body.String())
		}
	}
	doc, err := os.ReadFile("../../../docs/webhook.md")
	if err != nil {
		t.Fatal(err)
	}
	golden, _ := os.ReadFile(filepath.Join("testdata", "trigger.golden.json"))
	if !strings.Contains(string(doc), "```json\n"+string(golden)+"```") {
		t.Error("docs/webhook.md does not show testdata/trigger.golden.json verbatim in a json block")
	}
	for _, key := range jsonKeys(reflect.TypeFor[webhook.Payload]()) {
		if !strings.Contains(string(doc), "`"+key+"`") && !strings.Contains(string(doc), "[]."+key+"`") {
			t.Errorf("docs/webhook.md does not document field %q", key)
		}
	}
	if !strings.Contains(string(doc), "version `"+webhook.SchemaVersion+"`") {
		t.Errorf("docs/webhook.md does not name schema version %s", webhook.SchemaVersion)
	}
}

// jsonKeys are the JSON names of t's fields and of its nested structs'.
func jsonKeys(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
			out = append(out, jsonKeys(ft)...)
		}
	}
	return out
}
