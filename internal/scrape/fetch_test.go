package scrape

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestScrapeOnceFailures(t *testing.T) {
	current, err := os.ReadFile("testdata/sglang-current-full.prom")
	if err != nil {
		t.Fatal(err)
	}
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", code) }
	}
	body := func(b []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(b) }
	}
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		opts       Options
		wantReason string
		wantError  string // substring
	}{
		{"garbage bytes", body([]byte("\x00\x01{{{ not metrics }}} \xff\n")), Options{}, ReasonParseError, "line 1"},
		{"body over the limit", body(bytes.Repeat([]byte("# padding\n"), 200)), Options{MaxBodyBytes: 1024}, ReasonTooLarge, "1024 bytes"},
		{"body exactly at the limit", body(bytes.Repeat([]byte("# padding\n"), 100)), Options{MaxBodyBytes: 1000}, "", ""},
		{"too many series", body(current), Options{MaxSeries: 10}, ReasonTooManySeries, "more than 10 series"},
		{"404 without --enable-metrics", status(http.StatusNotFound), Options{}, ReasonHTTPStatus, "HTTP 404: is --enable-metrics on?"},
		{"500", status(http.StatusInternalServerError), Options{}, ReasonHTTPStatus, "HTTP 500 Internal Server Error"},
		{"hung replica", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // answers only when the scraper gives up
		}, Options{Interval: time.Second, Timeout: 50 * time.Millisecond}, ReasonTimeout, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			t.Cleanup(srv.Close)
			sc := ScrapeOnce(t.Context(), client(t), Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}, tt.opts)
			if sc.Reason != tt.wantReason || !strings.Contains(sc.Error, tt.wantError) {
				t.Errorf("reason %q error %q; want %q containing %q", sc.Reason, sc.Error, tt.wantReason, tt.wantError)
			}
			if tt.wantReason != "" && len(sc.Groups) != 0 {
				t.Errorf("failed scrape kept %d groups", len(sc.Groups))
			}
		})
	}
}

func TestScrapeOnceRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there any more

	sc := ScrapeOnce(t.Context(), client(t), Target{Name: "r", URL: addr + "/metrics", Kind: KindEngine}, Options{})
	if sc.Reason != ReasonRefused {
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
		want string
	}{
		{"no such host", t.Context(), wrap(&net.DNSError{Err: "no such host", Name: "h", IsNotFound: true}), ReasonRefused},
		{"refused", t.Context(), wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), ReasonRefused},
		{"reset", t.Context(), wrap(&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), ReasonRefused},
		{"dropped mid-response", t.Context(), wrap(io.ErrUnexpectedEOF), ReasonRefused},
		{"deadline", expired, wrap(context.DeadlineExceeded), ReasonTimeout},
		{"other", t.Context(), wrap(http.ErrSchemeMismatch), ReasonError},
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
