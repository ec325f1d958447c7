package scrape

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func TestScrapeOnceFailures(t *testing.T) {
	current, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", code) }
	}
	body := func(b []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(b) }
	}
	htmlPage := func(contentType string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if contentType != "" {
				w.Header().Set("Content-Type", contentType)
			}
			_, _ = w.Write([]byte("<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>login</body></html>\n"))
		}
	}
	truncated := func(w http.ResponseWriter, _ *http.Request) {
		// The proxy cut the exposition mid-sample and closed the stream.
		w.Header().Set("Content-Length", "4096")
		_, _ = w.Write([]byte("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 3\nsglang:token_usage{tp_ra"))
	}
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		opts       Options
		wantReason series.ScrapeFailure
		wantStatus int
		wantError  string // substring
	}{
		{"garbage bytes", body([]byte("\x00\x01{{{ not metrics }}} \xff\n")), Options{}, series.FailureParse, 200, "line 1"},
		{"body over the limit", body(bytes.Repeat([]byte("# padding\n"), 200)), Options{MaxBodyBytes: 1024}, series.FailureTooLarge, 200, "1024 bytes"},
		{"body exactly at the limit", body(bytes.Repeat([]byte("# padding\n"), 100)), Options{MaxBodyBytes: 1000}, "", 0, ""},
		{"too many series", body(current), Options{MaxSeries: 10}, series.FailureTooManySeries, 200, "more than 10 series"},
		{"404 without --enable-metrics", status(http.StatusNotFound), Options{}, series.FailureHTTPStatus, 404, "HTTP 404"},
		{"500", status(http.StatusInternalServerError), Options{}, series.FailureHTTPStatus, 500, "HTTP 500 Internal Server Error"},
		{"HTML login page with 200", htmlPage("text/html; charset=utf-8"), Options{}, series.FailureNotMetrics, 200, "HTML"},
		{"HTML login page served as text/plain", htmlPage("text/plain"), Options{}, series.FailureNotMetrics, 200, "HTML"},
		{"truncated exposition", truncated, Options{}, series.FailureParse, 200, "truncated"},
		{"hung replica", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // answers only when the scraper gives up
		}, Options{Interval: time.Second, Timeout: 50 * time.Millisecond}, series.FailureTimeout, 0, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			t.Cleanup(srv.Close)
			sc := ScrapeOnce(t.Context(), client(t), Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}, tt.opts)
			if sc.Reason != tt.wantReason || sc.Status != tt.wantStatus || !strings.Contains(sc.Error, tt.wantError) {
				t.Errorf("reason %q status %d error %q; want %q, %d, containing %q", sc.Reason, sc.Status, sc.Error, tt.wantReason, tt.wantStatus, tt.wantError)
			}
			if tt.wantReason != "" && len(sc.Groups) != 0 {
				t.Errorf("failed scrape kept %d groups", len(sc.Groups))
			}
		})
	}
}

// Redirects are followed only to the same host, a bounded number of
// times: another host never receives the watchdog's requests (nor the
// credentials of the target URL).
func TestScrapeRedirects(t *testing.T) {
	var otherHits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		otherHits.Add(1)
		_, _ = w.Write([]byte("sglang:num_running_reqs 1\n"))
	}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			_, _ = w.Write([]byte("sglang:num_running_reqs 2\n"))
		case "/moved":
			http.Redirect(w, r, "/metrics", http.StatusMovedPermanently)
		case "/elsewhere":
			http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	// The daemon hands its own client in; the policy must hold for it too.
	clients := map[string]*http.Client{"default client": nil, "caller's client": client(t)}
	for cname, c := range clients {
		for _, tt := range []struct {
			path       string
			wantReason series.ScrapeFailure
		}{
			{"/moved", ""},
			{"/elsewhere", series.FailureRedirect},
			{"/loop", series.FailureRedirect},
		} {
			t.Run(cname+tt.path, func(t *testing.T) {
				sc := ScrapeOnce(t.Context(), c, Target{Name: "r", URL: srv.URL + tt.path, Kind: KindEngine}, Options{})
				if sc.Reason != tt.wantReason {
					t.Errorf("reason %q (%s), want %q", sc.Reason, sc.Error, tt.wantReason)
				}
			})
		}
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the other host was asked %d times", n)
	}
	if c := client(t); c.CheckRedirect != nil {
		t.Error("the caller's client was modified")
	}
}

func TestScrapeOnceRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there any more

	sc := ScrapeOnce(t.Context(), client(t), Target{Name: "r", URL: addr + "/metrics", Kind: KindEngine}, Options{})
	if sc.Reason != series.FailureRefused || sc.Status != 0 {
		t.Errorf("reason %q (%s), want refused", sc.Reason, sc.Error)
	}
}

func TestClassify(t *testing.T) {
	expired, cancel := context.WithTimeout(t.Context(), 0)
	defer cancel()
	wrap := func(err error) error {
		return &url.Error{Op: "Get", URL: "http://u:pw@h/metrics?token=t", Err: err}
	}
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want series.ScrapeFailure
	}{
		{"no such host", t.Context(), wrap(&net.DNSError{Err: "no such host", Name: "h", IsNotFound: true}), series.FailureDNS},
		{"resolver timeout", t.Context(), wrap(&net.DNSError{Err: "i/o timeout", Name: "h", IsTimeout: true}), series.FailureTimeout},
		{"refused", t.Context(), wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), series.FailureRefused},
		{"reset", t.Context(), wrap(&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), series.FailureRefused},
		{"dropped mid-response", t.Context(), wrap(io.ErrUnexpectedEOF), series.FailureRefused},
		{"deadline", expired, wrap(context.DeadlineExceeded), series.FailureTimeout},
		{"redirect refused", t.Context(), wrap(fmt.Errorf("%w: to another host", errRedirect)), series.FailureRedirect},
		{"other", t.Context(), wrap(http.ErrSchemeMismatch), series.FailureError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := classify(tt.ctx, tt.err, "http://u:pw@h/metrics?token=t")
			if fe.reason != tt.want {
				t.Errorf("reason %q, want %q (%s)", fe.reason, tt.want, fe.msg)
			}
			if strings.Contains(fe.msg, "pw") || strings.Contains(fe.msg, "token=t") {
				t.Errorf("message leaks a secret: %s", fe.msg)
			}
		})
	}
}

// Credentials in the target URL must never reach Scrape.Error, whatever
// the failure.
func TestScrapeErrorsNeverLeakSecrets(t *testing.T) {
	const user, password, token = "scraper", "s3cr3t-pw", "tok-abc123"
	secretURL := func(base string) string {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(user, password)
		u.Path = "/metrics"
		u.RawQuery = "token=" + token
		return u.String()
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hung.Close)
	notFound := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notFound.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "ftp://elsewhere/"+r.URL.RequestURI(), http.StatusFound) // unfollowable
	}))
	t.Cleanup(redirect.Close)

	for name, base := range map[string]string{
		"refused": closedURL, "timeout": hung.URL, "404": notFound.URL, "bad redirect": redirect.URL,
	} {
		t.Run(name, func(t *testing.T) {
			target := Target{Name: "r", URL: secretURL(base), Kind: KindEngine}
			sc := ScrapeOnce(t.Context(), client(t), target, Options{Interval: time.Second, Timeout: 100 * time.Millisecond})
			if sc.Reason == "" {
				t.Fatal("scrape unexpectedly succeeded")
			}
			for _, secret := range []string{password, token, user + ":"} {
				if strings.Contains(sc.Error, secret) {
					t.Errorf("Error %q leaks %q", sc.Error, secret)
				}
			}
		})
	}
}

func TestFetchRequestHeaders(t *testing.T) {
	var (
		mu  sync.Mutex
		got http.Header
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		_, _ = w.Write([]byte("sglang:num_running_reqs 1\n"))
	}))
	t.Cleanup(srv.Close)

	sc := ScrapeOnce(t.Context(), client(t), Target{Name: "r", URL: srv.URL, Kind: KindEngine},
		Options{Interval: 10 * time.Second, UserAgent: "watchdog-test/1"})
	if sc.Reason != "" {
		t.Fatalf("scrape failed: %s", sc.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	for h, want := range map[string]string{
		"Accept":                              "text/plain;version=0.0.4;q=1,*/*;q=0.1",
		"User-Agent":                          "watchdog-test/1",
		"X-Prometheus-Scrape-Timeout-Seconds": "8", // default: 80% of the interval
	} {
		if g := got.Get(h); g != want {
			t.Errorf("%s = %q, want %q", h, g, want)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		wantErr     string
		wantTimeout time.Duration
	}{
		{"defaults", Options{}, "", 4 * time.Second},
		{"timeout defaults to 80% of interval", Options{Interval: 10 * time.Second}, "", 8 * time.Second},
		{"timeout equal to interval", Options{Interval: time.Second, Timeout: time.Second}, "shorter than the interval", 0},
		{"negative interval", Options{Interval: -time.Second, Timeout: time.Millisecond}, "must be positive", 0},
		{"negative limits", Options{MaxBodyBytes: -1, MaxSeries: -1}, "max series", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.opts.withDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Timeout != tt.wantTimeout {
				t.Errorf("timeout %s err %v, want %s", got.Timeout, err, tt.wantTimeout)
			}
		})
	}
}
