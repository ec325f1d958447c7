package scrape

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func benchBody(b *testing.B) []byte {
	b.Helper()
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkParseExpfmt is the floor: expfmt alone, as any scraper pays it.
func BenchmarkParseExpfmt(b *testing.B) {
	body := benchBody(b)
	p := expfmt.NewTextParser(model.UTF8Validation)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := p.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseAndNormalize is what a target loop does per scrape after
// the fetch: the parser seam plus normalization, with per-target buffers
// reused as in the loop.
func BenchmarkParseAndNormalize(b *testing.B) {
	body := benchBody(b)
	p := NewParser()
	n := newNormalizer()
	var raw []RawSample
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var err error
		if raw, err = p.Parse(raw[:0], body); err != nil {
			b.Fatal(err)
		}
		if _, err := n.normalize(raw, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNormalize isolates normalization (the part this package adds
// on top of parsing), from already-parsed raw samples.
func BenchmarkNormalize(b *testing.B) {
	body := benchBody(b)
	raw, err := NewParser().Parse(nil, body)
	if err != nil {
		b.Fatal(err)
	}
	n := newNormalizer()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := n.normalize(raw, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNormalizeDP4TP2 is a fanned-out replica: every sample of the
// current exposition from 8 scheduler ranks.
func BenchmarkNormalizeDP4TP2(b *testing.B) {
	raw, err := NewParser().Parse(nil, benchBody(b))
	if err != nil {
		b.Fatal(err)
	}
	var fanned []RawSample
	for dp := range 4 {
		for tp := range 2 {
			for _, rs := range raw {
				ls := append(append([]series.Label(nil), rs.Labels...),
					series.Label{Name: "dp_rank", Value: string(rune('0' + dp))},
					series.Label{Name: "tp_rank", Value: string(rune('0' + tp))})
				fanned = append(fanned, RawSample{Name: rs.Name, Labels: ls, Value: rs.Value})
			}
		}
	}
	n := newNormalizer()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := n.normalize(fanned, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(fanned)), "raw_samples")
}

// BenchmarkScrapeOverHTTP is one steady-state scrape of the current
// exposition from a loopback server that answers as SGLang's does (gzip
// when the request accepts it, here compressed once beforehand so that
// the server's compression is not timed): the request, the body, and
// parsing, filtering and normalizing it, with the scraper's buffers
// reused as in a target loop. identity is the default; gzip is
// scrape.accept_gzip, the body inflated by the scraper's own reader.
func BenchmarkScrapeOverHTTP(b *testing.B) {
	body := benchBody(b)
	compressed := gzipped(b, body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := body
		if sim.AcceptsGzip(r.Header.Get("Accept-Encoding")) {
			w.Header().Set("Content-Encoding", "gzip")
			out = compressed
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	for _, c := range []struct {
		name       string
		acceptGzip bool
	}{{"identity", false}, {"gzip", true}} {
		b.Run(c.name, func(b *testing.B) {
			s, tg := loopbackScraper(b, srv.URL, Options{KeepFamilies: keptFamilies, AcceptGzip: c.acceptGzip})
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if sc := s.scrape(b.Context(), tg, nil); sc.Reason != "" {
					b.Fatal(sc.Error)
				}
			}
		})
	}
}

// loopbackScraper is a scraper with opts (at a 10 s interval) over its own
// HTTP client, and the engine target at serverURL's /metrics; the client's
// connections close when b ends.
func loopbackScraper(b *testing.B, serverURL string, opts Options) (*scraper, Target) {
	b.Helper()
	opts.Interval = 10 * time.Second
	opts, err := opts.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	b.Cleanup(hc.CloseIdleConnections)
	return newScraper(httpFetcher(oneClient(hc), opts), opts), Target{Name: "r", URL: serverURL + "/metrics", Kind: KindEngine}
}
