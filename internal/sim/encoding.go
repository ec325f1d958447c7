package sim

import (
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// ExpositionWriter answers a /metrics request as SGLang's server does
// through prometheus_client: gzip-compressed when the request accepts gzip
// (Prometheus asks for it, and so does Go's transport unless told
// otherwise), plain otherwise. The zero value is ready; it is safe for
// concurrent use.
//
// prometheus_client compresses at level 9; this compresses at gzip's best
// speed (≈0.13 ms for the current exposition instead of ≈1.4 ms,
// BenchmarkCompressExposition), so that
// a loopback fleet spends little of the machine it measures on. What the
// client pays to inflate is about the same at either level.
type ExpositionWriter struct {
	writers sync.Pool // *gzip.Writer
}

// Write answers with status and body, which it does not keep.
func (e *ExpositionWriter) Write(w http.ResponseWriter, r *http.Request, status int, body []byte) {
	w.Header().Set("Content-Type", ContentType)
	if !AcceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		_, _ = w.Write(body) // the scraper hung up; nothing to do
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	w.WriteHeader(status)
	zw, _ := e.writers.Get().(*gzip.Writer)
	if zw == nil {
		zw, _ = gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
	} else {
		zw.Reset(w)
	}
	_, _ = zw.Write(body)
	_ = zw.Close()
	zw.Reset(nil) // hold no reference to the response
	e.writers.Put(zw)
}

// AcceptsGzip reports whether an Accept-Encoding header lists gzip, the
// way prometheus_client reads it: any element whose coding is gzip, its
// parameters (a q-value) ignored.
func AcceptsGzip(acceptEncoding string) bool {
	for _, coding := range strings.Split(acceptEncoding, ",") {
		coding, _, _ = strings.Cut(coding, ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			return true
		}
	}
	return false
}
