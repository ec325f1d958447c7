package sim

import (
	"bytes"
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

// Write answers with status and body, which it does not keep; a request
// with name[] gets only the samples it names, as from prometheus_client.
func (e *ExpositionWriter) Write(w http.ResponseWriter, r *http.Request, status int, body []byte) {
	if names := r.URL.Query()[nameParam]; len(names) > 0 {
		body = Restrict(body, names)
	}
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

// nameParam is the query parameter prometheus_client restricts an
// exposition with (its restricted_registry): only samples whose names are
// given are rendered, and a family's HELP and TYPE only when one of its
// samples is.
const nameParam = "name[]"

// Restrict is a copy of the exposition body with only the samples named,
// as prometheus_client answers a request with name[].
func Restrict(body []byte, names []string) []byte {
	var dst []byte
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
	}
	// A family's comment lines wait in pending until one of its samples is
	// kept; the next family's comments replace them.
	var pending []byte
	inComments := false
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line = body[:i+1]
		}
		body = body[len(line):]
		if line[0] == '#' {
			if !inComments {
				pending = pending[:0]
			}
			inComments = true
			pending = append(pending, line...)
			continue
		}
		inComments = false
		name := line
		if i := bytes.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !keep[string(name)] {
			continue
		}
		dst = append(dst, pending...)
		pending = pending[:0]
		dst = append(dst, line...)
	}
	return dst
}
