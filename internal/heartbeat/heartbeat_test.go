package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// secretURL carries a credential in its path and query, as real heartbeat
// URLs do; none of it may appear in logs or errors.
const secretURL = "https://hc.example.com/ping/0f4c-SECRET-UUID?key=SECRET-KEY"

func secretParts() []string { return []string{"SECRET", "0f4c", "hc.example.com/ping"} }

// ping is one request seen by the fake transport, with the (bubble's) time.
type ping struct {
	method string
	url    string
	at     time.Time
}

// fakeTransport answers from memory: network I/O is not durably blocking
// inside a synctest bubble, so the real transport cannot be used there.
// respond decides the answer; nil answers 200.
type fakeTransport struct {
	pings   chan ping
	respond func(*http.Request) (*http.Response, error)
}

func newFake(respond func(*http.Request) (*http.Response, error)) *fakeTransport {
	return &fakeTransport{pings: make(chan ping, 100), respond: respond}
}

func (f *fakeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.pings <- ping{method: r.Method, url: r.URL.String(), at: time.Now()}
	if f.respond != nil {
		return f.respond(r)
	}
	return status(http.StatusOK), nil
}

func status(code int) *http.Response {
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Body: io.NopCloser(strings.NewReader("OK")), Header: http.Header{}}
}

func enabled() Config {
	c := DefaultConfig()
	c.Enabled = true
	c.URL = secretURL
	return c
}

// start runs h in the bubble (or not) and returns a stop function that
// cancels it and waits for Run to return.
func start(t *testing.T, h *Heartbeat) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- h.Run(ctx) }()
	return func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func newHeartbeat(t *testing.T, cfg Config, rt http.RoundTripper, healthy func() bool) (*Heartbeat, *prometheus.Registry, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	h, err := New(cfg, &http.Client{Transport: rt}, healthy, reg, zap.New(core))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h, reg, logs
}

func TestPingsEveryIntervalWhileHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFake(nil)
		h, _, _ := newHeartbeat(t, enabled(), rt, nil)
		t0 := time.Now()
		stop := start(t, h)
		for i := range 4 {
			p := <-rt.pings
			if want := t0.Add(time.Duration(i) * time.Minute); !p.at.Equal(want) {
				t.Errorf("ping %d at %s, want %s", i, p.at.Sub(t0), want.Sub(t0))
			}
			if p.method != http.MethodGet || p.url != secretURL {
				t.Errorf("ping %d: %s %s, want GET to the configured URL", i, p.method, p.url)
			}
		}
		synctest.Wait() // the last ping's result is recorded
		last := testutil.ToFloat64(h.lastSuccess)
		if want := float64(t0.Add(3*time.Minute).UnixNano()) / 1e9; last != want {
			t.Errorf("last success %v, want %v", last, want)
		}
		if got := testutil.ToFloat64(h.interval); got != 60 {
			t.Errorf("interval gauge %v, want 60", got)
		}
		if n := testutil.ToFloat64(h.failures.WithLabelValues(ReasonHTTPStatus)); n != 0 {
			t.Errorf("%v failures, want 0", n)
		}
		stop()
	})
}

func TestPOST(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFake(func(r *http.Request) (*http.Response, error) {
			if r.ContentLength > 0 {
				t.Errorf("POST body of %d bytes, want none", r.ContentLength)
			}
			return status(http.StatusOK), nil
		})
		cfg := enabled()
		cfg.Method = "post"
		h, _, _ := newHeartbeat(t, cfg, rt, nil)
		stop := start(t, h)
		if p := <-rt.pings; p.method != http.MethodPost {
			t.Errorf("method %s, want POST", p.method)
		}
		stop()
	})
}

// The daemon says whether a ping is due: a follower or a stuck evaluation
// loop must stay silent so the receiver pages.
func TestNoPingWhileUnhealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFake(nil)
		var ok atomic.Bool
		checks := make(chan time.Time, 1000)
		healthy := func() bool { checks <- time.Now(); return ok.Load() }
		h, reg, logs := newHeartbeat(t, enabled(), rt, healthy)
		t0 := time.Now()
		stop := start(t, h)

		// Ten minutes unhealthy: health is polled every 5s, nothing is sent.
		var at time.Time
		for at.Before(t0.Add(10 * time.Minute)) {
			at = <-checks
		}
		synctest.Wait()
		select {
		case p := <-rt.pings:
			t.Fatalf("ping at %s while unhealthy", p.at.Sub(t0))
		default:
		}
		if got := testutil.ToFloat64(h.lastSuccess); got != 0 {
			t.Errorf("last success %v before any ping, want 0", got)
		}
		if logs.FilterMessageSnippet("paused").Len() != 1 {
			t.Errorf("want one 'paused' log line, got %v", logs.All())
		}

		// Healthy again: the ping follows within one recheck period, then
		// every interval.
		ok.Store(true)
		p := <-rt.pings
		if d := p.at.Sub(at); d <= 0 || d > 5*time.Second {
			t.Errorf("first ping %s after becoming healthy, want within 5s", d)
		}
		if p2 := <-rt.pings; p2.at.Sub(p.at) != time.Minute {
			t.Errorf("second ping %s after the first, want 1m", p2.at.Sub(p.at))
		}

		// Unhealthy again (lost the leadership): pings stop.
		ok.Store(false)
		<-checks
		for range 100 { // 100 rechecks
			<-checks
		}
		synctest.Wait()
		select {
		case p := <-rt.pings:
			t.Errorf("ping at %s after becoming unhealthy", p.at.Sub(t0))
		default:
		}
		stop()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watchdog_heartbeat_failures_total Heartbeat pings that failed, by reason (timeout, http_status, error).
# TYPE watchdog_heartbeat_failures_total counter
watchdog_heartbeat_failures_total{reason="error"} 0
watchdog_heartbeat_failures_total{reason="http_status"} 0
watchdog_heartbeat_failures_total{reason="timeout"} 0
`), "watchdog_heartbeat_failures_total"); err != nil {
			t.Error(err)
		}
	})
}

func TestFailuresAreCountedRetriedAndRedacted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		respond func(*http.Request) (*http.Response, error)
		reason  string
	}{
		{"http status", func(*http.Request) (*http.Response, error) { return status(http.StatusNotFound), nil }, ReasonHTTPStatus},
		{"transport error", func(r *http.Request) (*http.Response, error) {
			// The error a dialer gives; the client wraps it in a *url.Error
			// quoting the URL.
			return nil, errors.New("dial tcp: connect: connection refused")
		}, ReasonError},
		{"timeout", func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}, ReasonTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The first two pings fail, the rest succeed.
				var calls atomic.Int32
				rt := newFake(func(r *http.Request) (*http.Response, error) {
					if calls.Add(1) <= 2 {
						return tc.respond(r)
					}
					return status(http.StatusOK), nil
				})
				h, _, logs := newHeartbeat(t, enabled(), rt, nil)
				stop := start(t, h)

				p1, p2, p3 := <-rt.pings, <-rt.pings, <-rt.pings
				// Retried after interval/4 (15s), counted from the end of
				// the failed attempt (which took the 10s timeout if it
				// timed out).
				wantGap := 15 * time.Second
				if tc.reason == ReasonTimeout {
					wantGap += 10 * time.Second
				}
				if d1, d2 := p2.at.Sub(p1.at), p3.at.Sub(p2.at); d1 != wantGap || d2 != wantGap {
					t.Errorf("retries %s and %s after the failures, want %s", d1, d2, wantGap)
				}
				synctest.Wait()
				if n := testutil.ToFloat64(h.failures.WithLabelValues(tc.reason)); n != 2 {
					t.Errorf("failures{reason=%q} = %v, want 2", tc.reason, n)
				}
				if want := float64(p3.at.UnixNano()) / 1e9; testutil.ToFloat64(h.lastSuccess) != want {
					t.Errorf("last success %v, want %v (the third ping)", testutil.ToFloat64(h.lastSuccess), want)
				}
				if p4 := <-rt.pings; p4.at.Sub(p3.at) != time.Minute {
					t.Errorf("after recovery the next ping came %s later, want 1m", p4.at.Sub(p3.at))
				}
				if logs.FilterMessageSnippet("succeeded again").Len() != 1 {
					t.Error("no 'succeeded again' log line after recovery")
				}
				stop()

				warns := logs.FilterMessage("heartbeat ping failed").All()
				if len(warns) != 2 {
					t.Fatalf("%d failure log lines, want 2", len(warns))
				}
				assertNoSecret(t, logs)
			})
		})
	}
}

// assertNoSecret checks every logged message and field.
func assertNoSecret(t *testing.T, logs *observer.ObservedLogs) {
	t.Helper()
	for _, e := range logs.All() {
		text := e.Message
		for k, v := range e.ContextMap() {
			text += " " + k + "=" + toString(v)
		}
		for _, s := range secretParts() {
			if strings.Contains(text, s) {
				t.Errorf("log line leaks %q: %s", s, text)
			}
		}
	}
}

func toString(v any) string {
	if err, ok := v.(error); ok {
		return err.Error()
	}
	return fmt.Sprint(v)
}

func TestDisabledRunsIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFake(nil)
		h, _, _ := newHeartbeat(t, DefaultConfig(), rt, nil)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		if err := h.Run(ctx); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if len(rt.pings) != 0 {
			t.Errorf("%d pings while disabled", len(rt.pings))
		}
		if got := testutil.ToFloat64(h.interval); got != 0 {
			t.Errorf("interval gauge %v while disabled, want 0", got)
		}
	})
}

// A real server and the real transport, outside any bubble: the request
// arrives with the configured method and path.
func TestRealHTTPServer(t *testing.T) {
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.RequestURI() + " " + r.UserAgent()
		io.WriteString(w, "OK")
	}))
	defer srv.Close()
	cfg := enabled()
	cfg.URL = ""
	cfg.URLFile = filepath.Join(t.TempDir(), "url")
	cfg.Method = http.MethodPost
	if err := os.WriteFile(cfg.URLFile, []byte(srv.URL+"/ping/abc-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg, srv.Client(), nil, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	stop := start(t, h)
	if req := <-got; req != "POST /ping/abc-123 sglang-watchdog-heartbeat" {
		t.Errorf("request %q", req)
	}
	stop()
}

func TestRealHTTPServerRefusedIsRedacted(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close() // nothing listens there any more
	cfg := enabled()
	cfg.URL = notify.Secret(base + "/ping/0f4c-SECRET-UUID")
	h, err := New(cfg, nil, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reason, err := h.ping(t.Context())
	if err == nil || reason != ReasonError {
		t.Fatalf("ping to a closed port: reason %q, err %v; want an error", reason, err)
	}
	for _, s := range secretParts() {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error leaks %q: %v", s, err)
		}
	}
	if !strings.HasPrefix(err.Error(), `Get "`+redact.Hidden+`": `) {
		t.Errorf("error %q does not say which request failed", err)
	}
}

// New may run again on the same registry (a configuration reload).
func TestNewTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(enabled(), nil, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.failures.WithLabelValues(ReasonTimeout).Inc()
	b, err := New(DefaultConfig(), nil, nil, reg, nil)
	if err != nil {
		t.Fatalf("second New: %v", err)
	}
	if n := testutil.ToFloat64(b.failures.WithLabelValues(ReasonTimeout)); n != 1 {
		t.Errorf("failures after re-New %v, want the old count 1", n)
	}
	if got := testutil.ToFloat64(b.interval); got != 0 {
		t.Errorf("interval %v after disabling, want 0", got)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string // substrings of the error; none: valid
	}{
		{"defaults enabled", func(*Config) {}, nil},
		{"disabled ignores everything", func(c *Config) { c.Enabled = false; c.URL = ""; c.Interval = -1 }, nil},
		{"zero fields take defaults", func(c *Config) { c.Interval = 0; c.Method = "" }, nil},
		{"lower-case post", func(c *Config) { c.Method = "post" }, nil},
		{"url file only", func(c *Config) { c.URL = ""; c.URLFile = "/etc/watchdog/secrets/heartbeat-url" }, nil},
		{"no url", func(c *Config) { c.URL = "" }, []string{"heartbeat.url: required"}},
		{"both", func(c *Config) { c.URLFile = "/x" }, []string{"heartbeat.url: set url or url_file, not both"}},
		{"relative url", func(c *Config) { c.URL = "/ping/0f4c-SECRET-UUID" }, []string{"heartbeat.url: not an absolute http(s) URL"}},
		{"ftp url", func(c *Config) { c.URL = "ftp://hc.example.com/0f4c-SECRET-UUID" }, []string{"heartbeat.url: not an absolute"}},
		{"bad url", func(c *Config) { c.URL = "http://hc.example.com/%zz-SECRET" }, []string{"heartbeat.url: not a valid URL"}},
		{"method", func(c *Config) { c.Method = "PUT" }, []string{`heartbeat.method: "PUT" is not GET or POST`}},
		{"negative", func(c *Config) { c.Interval = -time.Second; c.Timeout = -time.Second },
			[]string{"heartbeat.interval: must not be negative", "heartbeat.timeout: must not be negative"}},
		{"too fast", func(c *Config) { c.Interval = 100 * time.Millisecond }, []string{"heartbeat.interval: must be at least 1s"}},
		{"timeout not below interval", func(c *Config) { c.Interval = 10 * time.Second; c.Timeout = 10 * time.Second },
			[]string{"heartbeat.timeout: 10s must be below interval 10s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := enabled()
			tc.edit(&c)
			err := c.Validate("heartbeat")
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, s := range secretParts() {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error leaks %q: %v", s, err)
				}
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	c := Config{Enabled: true, URL: secretURL, Interval: 4 * time.Second, Method: "get"}.WithDefaults()
	if c.Timeout != 2*time.Second || c.Method != http.MethodGet {
		t.Errorf("WithDefaults = timeout %s method %s, want 2s (half the interval) and GET", c.Timeout, c.Method)
	}
	if d := (Config{}).WithDefaults(); d.Interval != time.Minute || d.Timeout != 10*time.Second {
		t.Errorf("zero config: interval %s timeout %s, want 1m and 10s", d.Interval, d.Timeout)
	}
}

func TestNewRejectsBadURLFile(t *testing.T) {
	dir := t.TempDir()
	cfg := enabled()
	cfg.URL = ""
	cfg.URLFile = filepath.Join(dir, "missing")
	if _, err := New(cfg, nil, nil, prometheus.NewRegistry(), nil); err == nil || !strings.Contains(err.Error(), "heartbeat.url_file") {
		t.Errorf("missing file: err %v", err)
	}
	cfg.URLFile = filepath.Join(dir, "bad")
	if err := os.WriteFile(cfg.URLFile, []byte("hc.example.com/ping/0f4c-SECRET-UUID"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(cfg, nil, nil, prometheus.NewRegistry(), nil)
	if err == nil || !strings.Contains(err.Error(), "not an absolute http(s) URL") {
		t.Fatalf("relative URL in file: err %v", err)
	}
	for _, s := range secretParts() {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error leaks %q: %v", s, err)
		}
	}
}

// The metric names and help texts pass the same linter as
// `promtool check metrics`.
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := New(enabled(), nil, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.lastSuccess.Set(1)
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func mustGather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 3 {
		t.Errorf("%d metric families, want 3", len(mfs))
	}
	return mfs
}
