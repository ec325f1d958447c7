package redact_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// leaks fails t for every part of secrets that text shows.
func leaks(t *testing.T, text string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if strings.Contains(text, p) {
			t.Errorf("%q shows %q", text, p)
		}
	}
}

func TestURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://user:pw@replica:30000/metrics?token=t#frag": "http://replica:30000/metrics",
		"https://h/":              "https://h/",
		"http://[::1]:8080/a%2Fb": "http://[::1]:8080/a%2Fb",
		"http://h/metrics?x=1":    "http://h/metrics",
		"http://user@h":           "http://h",
		"://no scheme":            "<unparseable URL>",
		"http://h/%zz?token=t":    "<unparseable URL>",
	} {
		if got := redact.URL(raw); got != want {
			t.Errorf("URL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestStringHidesValuesAndURLParts(t *testing.T) {
	const target = "http://scraper:s3cr3t@replica:30000/metrics?token=tok-abc"
	s := redact.Secrets{URLs: []string{target}, Values: []string{"xoxb-1234", "https://hooks.example.com/services/T/B/KEY"}}
	text := "token xoxb-1234 to https://hooks.example.com/services/T/B/KEY; " +
		"scraping " + target + " failed; a proxy said: user scraper:s3cr3t@replica, query token=tok-abc, password s3cr3t"
	got := s.String(text)
	leaks(t, got, "xoxb-1234", "KEY", "s3cr3t", "tok-abc", "scraper:")
	for _, want := range []string{"token " + redact.Hidden, "to " + redact.Hidden + ";", "scraping http://replica:30000/metrics failed", "user replica"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not contain %q", got, want)
		}
	}
	if plain := "nothing secret here"; s.String(plain) != plain {
		t.Errorf("text without secrets changed: %q", s.String(plain))
	}
	if (redact.Secrets{Values: []string{""}}).String("abc") != "abc" {
		t.Error("an empty value hid something")
	}
}

func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func TestErrorRebuildsAURLError(t *testing.T) {
	const target = "http://u:pw@h:9/metrics?token=t"
	err := (redact.Secrets{URLs: []string{target}}).Error(&url.Error{Op: "Get", URL: target, Err: refused()})
	if want := `Get "http://h:9/metrics": dial tcp: connect: connection refused`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Error("the cause is lost: errors.Is does not see ECONNREFUSED")
	}
	ue, ok := errors.AsType[*url.Error](err)
	if !ok || ue.URL != "http://h:9/metrics" {
		t.Errorf("errors.As finds %v, want the rebuilt *url.Error", ue)
	}
}

// An unlisted URL (a redirect's target) is reduced too, wherever it and
// its parts appear, and a wrapping error keeps its words.
func TestErrorWrappedAndUnlisted(t *testing.T) {
	const location = "http://other:pw2@elsewhere/login?session=s-99"
	inner := fmt.Errorf("redirect refused: location %s (session=s-99)", location)
	err := fmt.Errorf("scrape r1: %w", &url.Error{Op: "Get", URL: location, Err: inner})
	got := redact.Secrets{}.Error(err)
	leaks(t, got.Error(), "pw2", "s-99", "other:")
	if want := `scrape r1: Get "http://elsewhere/login": redirect refused: location http://elsewhere/login (` + redact.Hidden + `)`; got.Error() != want {
		t.Errorf("message %q, want %q", got, want)
	}
	for e := got; e != nil; e = errors.Unwrap(e) {
		leaks(t, e.Error(), "pw2", "s-99")
	}
}

// A URL that is a credential as a whole does not show at all, and the
// error still tells a timeout from a refusal.
func TestErrorHidesAWholeURL(t *testing.T) {
	const hook = "https://hooks.example.com/services/T/B/KEY"
	s := redact.Secrets{Values: []string{hook}}
	for _, tc := range []struct {
		cause   error
		timeout bool
	}{
		{context.DeadlineExceeded, true},
		{refused(), false},
		{fmt.Errorf("read %s: %w", hook, context.DeadlineExceeded), true},
	} {
		err := s.Error(&url.Error{Op: "Post", URL: hook, Err: tc.cause})
		leaks(t, err.Error(), "KEY", "hooks.example.com")
		if !strings.HasPrefix(err.Error(), `Post "`+redact.Hidden+`": `) {
			t.Errorf("message %q does not name the request", err)
		}
		ne, ok := errors.AsType[net.Error](err)
		if !ok || ne.Timeout() != tc.timeout {
			t.Errorf("%v: net.Error %v, timeout %v; want timeout %v", tc.cause, ok, ok && ne.Timeout(), tc.timeout)
		}
	}
}

// A URL inside an error's text, with no *url.Error around it.
func TestErrorRawURLInText(t *testing.T) {
	const target = "https://u:pw@h/metrics?key=k1"
	err := fmt.Errorf("cannot build a request for %s: %w", target, context.DeadlineExceeded)
	got := (redact.Secrets{URLs: []string{target}}).Error(err)
	if want := "cannot build a request for https://h/metrics: context deadline exceeded"; got.Error() != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if errors.Unwrap(got) != nil {
		t.Error("the result unwraps to the error that quotes the URL")
	}
	if to, ok := got.(interface{ Timeout() bool }); !ok || !to.Timeout() {
		t.Error("a deadline no longer says it timed out")
	}
}

func TestErrorWithNothingToHide(t *testing.T) {
	s := redact.Secrets{URLs: []string{"http://u:pw@h/"}, Values: []string{"tok"}}
	if s.Error(nil) != nil {
		t.Error("nil must stay nil")
	}
	plain := fmt.Errorf("x: %w", context.Canceled)
	if s.Error(plain) != plain {
		t.Error("an error without secrets was replaced")
	}
}

// Through a real client: a refused connection and a timeout to a URL with
// credentials in its userinfo and query.
func TestErrorOfARealRequest(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hung.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for name, base := range map[string]string{"timeout": hung.URL, "refused": closed.URL} {
		t.Run(name, func(t *testing.T) {
			u, _ := url.Parse(base)
			u.User = url.UserPassword("scraper", "pw-9f8e")
			u.Path, u.RawQuery = "/metrics", "token=tok-7d6c"
			raw := u.String()
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("the request succeeded")
			}
			got := (redact.Secrets{URLs: []string{raw}}).Error(err)
			leaks(t, got.Error(), "pw-9f8e", "tok-7d6c", "scraper")
			if !strings.Contains(got.Error(), redact.URL(raw)) {
				t.Errorf("%q does not say which URL failed", got)
			}
			if timedOut := errors.Is(got, context.DeadlineExceeded); timedOut != (name == "timeout") {
				t.Errorf("errors.Is(DeadlineExceeded) = %v for %s: %v", timedOut, name, got)
			}
		})
	}
}

// A configuration error quotes the URL it rejects; nobody listed it.
func TestURLsInText(t *testing.T) {
	text := `notify.alertmanager.urls[1]: http://am:pw@alertmanager:9093/?token=t1 is listed twice` + "\n" +
		`external_url: "https://user:s3cr3t@watchdog.example.com/x?k=v" is not an absolute http(s) URL; see (ftp://u:p@h/f)`
	got := redact.URLs(text)
	leaks(t, got, "am:pw", "t1", "s3cr3t", "k=v", "u:p@")
	for _, want := range []string{
		"urls[1]: http://alertmanager:9093/ is listed twice",
		`external_url: "https://watchdog.example.com/x" is not`,
		"(ftp://h/f)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not contain %q", got, want)
		}
	}
	if plain := "scrape.interval: must be positive, got -1s"; redact.URLs(plain) != plain {
		t.Errorf("text without a URL changed: %q", redact.URLs(plain))
	}
}
