package sim

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
)

// Accept-Encoding is read as prometheus_client reads it: gzip anywhere in
// the list, whatever its parameters.
func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"gzip":                 true,
		"GZIP":                 true,
		"deflate, gzip;q=1.0":  true,
		" br ,  gzip ; q=0.5 ": true,
		"":                     false,
		"identity":             false,
		"deflate, br":          false,
		"x-gzip":               false,
		"gzipped, notgzip;q=1": false,
	} {
		if got := AcceptsGzip(header); got != want {
			t.Errorf("AcceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}

// An exposition is compressed for a request that accepts gzip, and only
// then, and inflates to the bytes given.
func TestExpositionWriterCompressesWhenAsked(t *testing.T) {
	body := bytes.Repeat([]byte("sglang:num_running_reqs 3\n"), 100)
	var e ExpositionWriter
	for _, accept := range []string{"", "identity", "gzip", "gzip", ""} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if accept != "" {
			req.Header.Set("Accept-Encoding", accept)
		}
		rec := httptest.NewRecorder()
		e.Write(rec, req, http.StatusOK, body)
		res := rec.Result()
		got := rec.Body.Bytes()
		if enc := res.Header.Get("Content-Encoding"); (enc == "gzip") != (accept == "gzip") {
			t.Fatalf("Accept-Encoding %q: Content-Encoding %q", accept, enc)
		}
		if accept == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(got))
			if err != nil {
				t.Fatal(err)
			}
			if got, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != ContentType || !bytes.Equal(got, body) {
			t.Errorf("Accept-Encoding %q: status %d, Content-Type %q, %d bytes back of %d", accept, res.StatusCode, res.Header.Get("Content-Type"), len(got), len(body))
		}
	}
}

// BenchmarkCompressExposition is what answering one scrape with gzip
// costs a server, for the current full exposition: at level 9, as
// prometheus_client compresses (with zlib) for SGLang, and at the best
// speed ExpositionWriter uses.
func BenchmarkCompressExposition(b *testing.B) {
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		level int
	}{{"level9", gzip.BestCompression}, {"bestspeed", gzip.BestSpeed}} {
		b.Run(c.name, func(b *testing.B) {
			var out bytes.Buffer
			zw, err := gzip.NewWriterLevel(&out, c.level)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				out.Reset()
				zw.Reset(&out)
				if _, err := zw.Write(body); err != nil {
					b.Fatal(err)
				}
				if err := zw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(out.Len()), "gzip-bytes")
		})
	}
}

// The simulated servers, the demo's and the loopback fleet's, answer a
// scrape that accepts gzip compressed, and any other plain.
func TestSimulatedServersCompressWhenAsked(t *testing.T) {
	clock := &fakeClock{now: t0}
	l, err := NewLoopback(LoopbackConfig{Replicas: 2, Seed: 1, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		handler http.Handler
		path    string
	}{
		{"demo replica", NewFleet(FleetConfig{Seed: 1, Start: t0, Warmup: 20 * time.Second}).Handler(0), "/metrics"},
		{"loopback fleet", l.Handler(), "/replicas/1/metrics"},
	} {
		for _, accept := range []string{"", "gzip"} {
			req := httptest.NewRequest(http.MethodGet, c.path, nil)
			req.Header.Set("Accept-Encoding", accept)
			rec := httptest.NewRecorder()
			c.handler.ServeHTTP(rec, req)
			body := rec.Body.Bytes()
			if enc := rec.Header().Get("Content-Encoding"); enc != accept {
				t.Errorf("%s, Accept-Encoding %q: Content-Encoding %q", c.name, accept, enc)
				continue
			}
			if accept == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
			}
			if rec.Code != http.StatusOK || !bytes.Contains(body, []byte("\nsglang:num_running_reqs")) {
				t.Errorf("%s, Accept-Encoding %q: status %d, no exposition in %d bytes", c.name, accept, rec.Code, len(body))
			}
		}
	}
}

// A request with name[] gets the samples of those names only, and a
// family's HELP and TYPE only when a sample of it is kept, as from
// prometheus_client: asking for a histogram's _bucket keeps neither its
// _sum nor its _count.
func TestExpositionWriterRestrictsToNames(t *testing.T) {
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics?name[]=sglang:num_running_reqs&name[]=sglang:time_to_first_token_seconds_bucket&name[]=no_such_sample", nil)
	rec := httptest.NewRecorder()
	var e ExpositionWriter
	e.Write(rec, req, http.StatusOK, body)
	var types, samples []string
	for line := range strings.Lines(rec.Body.String()) {
		switch {
		case strings.HasPrefix(line, "# TYPE "):
			types = append(types, strings.Fields(line)[2])
		case strings.HasPrefix(line, "#"):
		default:
			name, _, _ := strings.Cut(line, "{")
			name, _, _ = strings.Cut(name, " ")
			if !slices.Contains(samples, name) {
				samples = append(samples, name)
			}
		}
	}
	slices.Sort(types)
	slices.Sort(samples)
	if want := []string{"sglang:num_running_reqs", "sglang:time_to_first_token_seconds"}; !slices.Equal(types, want) {
		t.Errorf("TYPE lines for %q, want %q", types, want)
	}
	if want := []string{"sglang:num_running_reqs", "sglang:time_to_first_token_seconds_bucket"}; !slices.Equal(samples, want) {
		t.Errorf("samples named %q, want %q", samples, want)
	}
	full := strings.Count(string(body), "sglang:time_to_first_token_seconds_bucket{")
	if got := strings.Count(rec.Body.String(), "sglang:time_to_first_token_seconds_bucket{"); got != full || full == 0 {
		t.Errorf("%d TTFT buckets kept of %d", got, full)
	}
}
