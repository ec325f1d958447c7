package scrape

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func gzipped(t testing.TB, body []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression) // prometheus_client's level
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// A scrape asks a target for its exposition uncompressed, unless told to
// accept gzip; a server that answers as SGLang's does (gzip whenever it is
// accepted) is read to the same samples either way, and so is one that
// compresses without being asked.
func TestScrapeAsksForIdentityUnlessToldToAcceptGzip(t *testing.T) {
	current, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	target := func(url string) Target { return Target{Name: "r", URL: url + "/metrics", Kind: KindEngine} }
	want := ScrapeOnce(t.Context(), client(t), target(serve(t, current).URL), Options{})
	if want.Reason != "" || len(want.Groups) == 0 {
		t.Fatalf("plain scrape: reason %q error %q, %d groups", want.Reason, want.Error, len(want.Groups))
	}

	var expositions sim.ExpositionWriter
	for _, c := range []struct {
		name         string
		acceptGzip   bool
		alwaysGzip   bool // the server compresses whatever was asked
		wantAccept   string
		wantEncoding string // of the answer
	}{
		{"default", false, false, "identity", ""},
		{"accept_gzip", true, false, "gzip", "gzip"},
		{"server compresses unasked", false, true, "identity", "gzip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var (
				mu              sync.Mutex
				accept, encoded string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.alwaysGzip {
					r.Header.Set("Accept-Encoding", "gzip")
				}
				mu.Lock()
				accept = r.Header.Get("Accept-Encoding")
				mu.Unlock()
				expositions.Write(w, r, http.StatusOK, current)
				mu.Lock()
				encoded = w.Header().Get("Content-Encoding")
				mu.Unlock()
			}))
			t.Cleanup(srv.Close)
			got := ScrapeOnce(t.Context(), client(t), target(srv.URL), Options{AcceptGzip: c.acceptGzip})
			if got.Reason != "" {
				t.Fatalf("scrape failed: %s: %s", got.Reason, got.Error)
			}
			mu.Lock()
			defer mu.Unlock()
			if !c.alwaysGzip && accept != c.wantAccept {
				t.Errorf("Accept-Encoding = %q, want %q", accept, c.wantAccept)
			}
			if encoded != c.wantEncoding {
				t.Errorf("the server answered with Content-Encoding %q, want %q", encoded, c.wantEncoding)
			}
			if len(got.Groups) == 0 {
				t.Fatal("no groups")
			}
			diffLines(t, "samples", renderGroups(got.Groups), renderGroups(want.Groups))
		})
	}
}

// A compressed answer that is broken, too large once inflated, or in an
// encoding the watchdog does not read fails the scrape with its reason.
func TestScrapeCompressedFailures(t *testing.T) {
	current, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	whole := gzipped(t, current)
	answer := func(encoding string, body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Encoding", encoding)
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = w.Write(body)
		}
	}
	cut := func(w http.ResponseWriter, _ *http.Request) {
		// The stream ends mid-way, and the connection with it.
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(len(whole)))
		_, _ = w.Write(whole[:len(whole)/2])
	}
	flipped := bytes.Clone(whole)
	flipped[len(flipped)-6] ^= 0xff // the CRC-32 in the trailer
	for _, c := range []struct {
		name       string
		handler    http.HandlerFunc
		opts       Options
		wantReason series.ScrapeFailure
		wantError  string
	}{
		{"not gzip at all", answer("gzip", current), Options{}, series.FailureParse, "corrupt gzip body"},
		{"checksum", answer("gzip", flipped), Options{}, series.FailureParse, "corrupt gzip body"},
		{"cut off", cut, Options{}, series.FailureParse, "truncated"},
		{"a small answer too large once inflated", answer("gzip", gzipped(t, bytes.Repeat([]byte("# padding\n"), 1<<20))),
			Options{MaxBodyBytes: 1 << 20}, series.FailureTooLarge, "exceeds 1048576 bytes"},
		{"brotli", answer("br", []byte("\x0b\x02\x80hello\x03")), Options{}, series.FailureNotMetrics, `Content-Encoding "br"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			t.Cleanup(srv.Close)
			sc := ScrapeOnce(t.Context(), client(t), Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}, c.opts)
			if sc.Reason != c.wantReason || sc.Status != http.StatusOK || !strings.Contains(sc.Error, c.wantError) {
				t.Errorf("reason %q status %d error %q; want %q, 200, containing %q", sc.Reason, sc.Status, sc.Error, c.wantReason, c.wantError)
			}
			if len(sc.Groups) != 0 {
				t.Errorf("failed scrape kept %d groups", len(sc.Groups))
			}
		})
	}
}

// A scraper inflates every compressed answer with one gzip reader, reset
// for each: a new one is ≈42 KiB of inflate state.
func TestScraperReusesItsGzipReader(t *testing.T) {
	current, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	var expositions sim.ExpositionWriter
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		expositions.Write(w, r, http.StatusOK, current)
	}))
	t.Cleanup(srv.Close)
	opts, err := Options{AcceptGzip: true, Interval: 10 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := newScraper(httpFetcher(oneClient(client(t)), opts), opts)
	tg := Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}
	var first *gzip.Reader
	for i := range 3 {
		if sc := s.scrape(t.Context(), tg, nil); sc.Reason != "" {
			t.Fatalf("scrape %d failed: %s", i, sc.Error)
		}
		if i == 0 {
			first = s.body.gz
		}
		if s.body.gz == nil || s.body.gz != first {
			t.Fatalf("scrape %d inflated with another reader", i)
		}
	}
}
