package scrape

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/httpclient"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// resultOK is the result label of a successful scrape; failures use their
// series.ScrapeFailure.
const resultOK = "ok"

// results is every value of the result label, pre-created per target.
var results = func() []string {
	out := []string{resultOK}
	for _, f := range series.ScrapeFailures {
		out = append(out, string(f))
	}
	return out
}()

// acceptHeader asks for the classic text format. prometheus_client answers
// with OpenMetrics if the client merely accepts it, so say exactly what we
// parse.
const acceptHeader = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// Accept-Encoding values. The scrape asks for identity unless told
// otherwise (Options.AcceptGzip), where Go's transport would ask for gzip
// by itself: SGLang serves /metrics through prometheus_client, which then
// compresses the exposition at level 9 on every scrape, with zlib on its
// server's event loop (≈1.4 ms in Go for the current release's 70 KB,
// BenchmarkCompressExposition), and inflating it makes a scrape over
// loopback ≈1.6 times as costly for the watchdog (BenchmarkScrapeOverHTTP).
const (
	encodingIdentity = "identity"
	encodingGzip     = "gzip"
)

// fetchError is a failed fetch: a typed reason, the HTTP status when there
// was an answer, and a message that is safe to log and page (no URL
// credentials or query).
type fetchError struct {
	reason series.ScrapeFailure
	status int
	msg    string
}

func (e *fetchError) Error() string { return e.msg }

// fetchFunc fetches a target's exposition into dst, within ctx (which
// carries the scrape timeout). It is a seam: loops in synctest bubbles swap
// in an in-memory fake, because network I/O is not durably blocking there.
type fetchFunc func(ctx context.Context, t Target, dst *responseBody) error

// responseBody is a scraper's buffer for one exposition, and the gzip
// reader that inflated the last compressed one, reset for the next: a new
// reader is ≈42 KiB of inflate state.
type responseBody struct {
	bytes.Buffer
	gz *gzip.Reader
}

// clientFunc returns the client of a target's settings (nil: the
// scrape-level ones).
type clientFunc func(*HTTPClientConfig) (*http.Client, error)

// oneClient is the clientFunc of a single client for every target.
func oneClient(c *http.Client) clientFunc {
	return func(*HTTPClientConfig) (*http.Client, error) { return c, nil }
}

// httpFetcher returns the real fetchFunc over the targets' clients.
func httpFetcher(clients clientFunc, opts Options) fetchFunc {
	timeoutHeader := strconv.FormatFloat(opts.Timeout.Seconds(), 'f', -1, 64)
	encoding := encodingIdentity
	if opts.AcceptGzip {
		encoding = encodingGzip
	}
	return func(ctx context.Context, t Target, dst *responseBody) error {
		client, err := clients(t.HTTPClient)
		if err != nil {
			return &fetchError{reason: series.FailureError, msg: err.Error()}
		}
		return fetch(ctx, client, t, opts, timeoutHeader, encoding, dst)
	}
}

func fetch(ctx context.Context, client *http.Client, t Target, opts Options, timeoutHeader, encoding string, dst *responseBody) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return &fetchError{reason: series.FailureError, msg: "bad target URL " + redact.URL(t.URL)}
	}
	req.Header.Set("Accept", acceptHeader)
	req.Header.Set("User-Agent", opts.UserAgent)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeoutHeader)
	// Set here, the transport neither asks for gzip nor inflates: a
	// compressed answer, asked for or not, is inflated below.
	req.Header.Set("Accept-Encoding", encoding)

	resp, err := client.Do(req)
	if err != nil {
		return classify(ctx, err, t.URL)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
			// An unfollowable redirect (no Location), or any with
			// follow_redirects off.
			msg := statusMessage(resp.StatusCode) + " without a usable Location"
			if resp.Header.Get("Location") != "" {
				msg = statusMessage(resp.StatusCode) + ": a redirect, not followed (follow_redirects is false)"
			}
			return &fetchError{reason: series.FailureRedirect, status: resp.StatusCode, msg: msg}
		}
		return &fetchError{reason: series.FailureHTTPStatus, status: resp.StatusCode, msg: statusMessage(resp.StatusCode)}
	}
	if html(resp.Header.Get("Content-Type")) {
		// A login page or a proxy's error page served with 200: the text
		// parser might even accept some of it, so never try.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return &fetchError{reason: series.FailureNotMetrics, status: resp.StatusCode,
			msg: fmt.Sprintf("HTTP %d with an HTML page instead of metrics (a login or proxy page?)", resp.StatusCode)}
	}

	body, fe := dst.decoded(ctx, resp, t.URL)
	if fe != nil {
		return fe
	}
	// Read one byte past the limit to tell "exactly at the limit" from
	// "over it" without buffering an unbounded body. The limit is on the
	// exposition inflated, so a small compressed answer cannot fill memory.
	dst.Reset()
	n, err := dst.ReadFrom(io.LimitReader(body, opts.MaxBodyBytes+1))
	if err != nil {
		if fe := corruptGzip(err, resp.StatusCode); fe != nil {
			return fe
		}
		fe := classify(ctx, err, t.URL)
		if fe.reason == series.FailureRefused {
			// The server answered and then the body broke off: the
			// exposition is truncated, whoever cut it.
			fe.reason = series.FailureParse
			fe.msg = "exposition truncated: " + fe.msg
		}
		fe.status = resp.StatusCode
		return fe
	}
	if n > opts.MaxBodyBytes {
		return &fetchError{reason: series.FailureTooLarge, status: resp.StatusCode, msg: fmt.Sprintf("body exceeds %d bytes", opts.MaxBodyBytes)}
	}
	return nil
}

// decoded is what reads resp's exposition: its body, or, when the server
// compressed it with gzip, dst's gzip reader over it. Any other encoding is
// no exposition the watchdog can read.
func (dst *responseBody) decoded(ctx context.Context, resp *http.Response, rawURL string) (io.Reader, *fetchError) {
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", encodingIdentity:
		return resp.Body, nil
	case encodingGzip, "x-gzip":
		var err error
		if dst.gz == nil {
			dst.gz, err = gzip.NewReader(resp.Body)
		} else {
			err = dst.gz.Reset(resp.Body)
		}
		if err == nil {
			return dst.gz, nil
		}
		fe := corruptGzip(err, resp.StatusCode)
		if fe == nil { // the header did not arrive
			fe = classify(ctx, err, rawURL)
			fe.status = resp.StatusCode
		}
		return nil, fe
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, &fetchError{reason: series.FailureNotMetrics, status: resp.StatusCode,
			msg: fmt.Sprintf("HTTP %d with Content-Encoding %.40q, which the watchdog does not decode (it reads %s and gzip only)", resp.StatusCode, enc, encodingIdentity)}
	}
}

// corruptGzip is the failure of a gzip stream broken in itself (a bad
// header, checksum or deflate data), or nil when err is not the stream's
// own but, say, a connection's.
func corruptGzip(err error, status int) *fetchError {
	if _, deflate := errors.AsType[flate.CorruptInputError](err); deflate || errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) {
		return &fetchError{reason: series.FailureParse, status: status, msg: "corrupt gzip body: " + err.Error()}
	}
	return nil
}

// html reports whether a Content-Type names an HTML document.
func html(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "text/html" || mt == "application/xhtml+xml")
}

func statusMessage(code int) string {
	msg := fmt.Sprintf("HTTP %d", code)
	if text := http.StatusText(code); text != "" {
		msg += " " + text
	}
	return msg
}

// Redirect policy of the scrape and probe clients.
const maxRedirects = 3

// errRedirect marks a redirect the client refused to follow.
var errRedirect = errors.New("redirect refused")

// checkRedirect follows a redirect only to the same scheme and host, at
// most maxRedirects times: a target's credentials and the watchdog's
// requests must not be handed to another host (an SSO login page, an
// open redirect), and a redirect loop must not stall a scrape.
func checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	switch {
	case len(via) > maxRedirects:
		return fmt.Errorf("%w: more than %d redirects", errRedirect, maxRedirects)
	case req.URL.Host != first.Host || req.URL.Scheme != first.Scheme:
		return fmt.Errorf("%w: to another host %s://%s", errRedirect, req.URL.Scheme, req.URL.Host)
	}
	return nil
}

// withRedirectPolicy returns c with checkRedirect as its redirect policy,
// copying it when it has another (the caller's client is not ours to
// change).
func withRedirectPolicy(c *http.Client) *http.Client {
	cp := *c
	cp.CheckRedirect = checkRedirect
	return &cp
}

// classify turns a transport error into a reason and a message free of the
// target URL (which may carry user:password or ?token=).
func classify(ctx context.Context, err error, rawURL string) *fetchError {
	reason := series.FailureError
	var (
		netErr net.Error
		dnsErr *net.DNSError
	)
	switch {
	case errors.Is(err, errRedirect):
		reason = series.FailureRedirect
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		reason = series.FailureTimeout
	case errors.As(err, &dnsErr):
		reason = series.FailureDNS
		if dnsErr.IsTimeout {
			reason = series.FailureTimeout
		}
	case errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		// The replica dropped the connection (e.g. died mid-response).
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		reason = series.FailureRefused
	case errors.As(err, &netErr) && netErr.Timeout():
		reason = series.FailureTimeout
	}
	return &fetchError{reason: reason, msg: redact.Secrets{URLs: []string{rawURL}}.Error(err).Error()}
}

// NewClient is an HTTP client for scraping a fleet, built as Prometheus
// builds its scrapers' (pkg/httpclient): its own transport, keeping the
// connection of every target between scrapes (up to 1,000 idle to one
// address, 20,000 in all), so a scrape does not pay a TCP (and TLS)
// handshake and leave a socket in TIME_WAIT. A connection idle for
// 90 s, several scrape intervals, is closed. Redirects are followed only
// to the same scheme and host. dial, when not nil, replaces the operating
// system's network (a test's in-memory one).
func NewClient(dial Dialer) *http.Client {
	c := httpclient.New("scrape", 0, commoncfg.WithDialContextFunc(dial), commoncfg.WithIdleConnTimeout(scrapeIdleConnTimeout))
	c.CheckRedirect = checkRedirect
	return c
}

// newDefaultClient is the client used when Options.Client is nil: a
// NewClient with dials bounded by timeout, and whole requests too.
func newDefaultClient(timeout time.Duration) *http.Client {
	c := NewClient((&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext)
	c.Timeout = timeout
	return c
}
