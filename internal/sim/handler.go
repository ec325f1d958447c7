package sim

import (
	"bytes"
	"net/http"
	"strings"
)

// ContentType is what SGLang's /metrics answers with for a classic scrape.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves replica i the way its SGLang HTTP server would:
//
//	GET /metrics            the exposition (also /metrics/..., as SGLang's mount)
//	GET /health             200, or 503 while the server is Starting
//	GET /health_generate    200, or 503 while the server is Starting
//
// While the process is dead every request fails like a dead process: the
// connection is hijacked and closed without a response, so a scraper sees a
// transport error rather than an HTTP status. The handler renders the state
// as of the last Advance; it never advances the simulation itself. Like
// SGLang's middleware it counts its own requests in sglang:http_requests_total.
func (f *Fleet) Handler(i int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		f.mu.Lock()
		r := f.replicas[i]
		e := r.engine
		if e == nil {
			f.mu.Unlock()
			dropConnection(w)
			return
		}
		var ep int
		switch {
		case strings.HasPrefix(req.URL.Path, "/metrics"):
			ep = epMetrics
		case req.URL.Path == "/health":
			ep = epHealth
		case req.URL.Path == "/health_generate":
			ep = epHealthGenerate
		default:
			f.mu.Unlock()
			http.NotFound(w, req)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			f.mu.Unlock()
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		// The middleware counts the request on arrival and the response
		// after the handler; the /metrics body therefore shows itself as
		// one active request, as a real scrape does.
		e.http[ep].requests++
		e.http[ep].active++
		status, sc := http.StatusOK, 0
		var body bytes.Buffer
		switch {
		case ep == epMetrics:
			r.render(&body)
		case float64(f.k)*dt < e.ready:
			status, sc = http.StatusServiceUnavailable, 2
		}
		e.respond(ep, sc)
		f.mu.Unlock()

		if ep == epMetrics {
			f.expositions.Write(w, req, status, body.Bytes())
			return
		}
		w.WriteHeader(status)
	})
}

// dropConnection closes the client connection without writing a response.
// Servers that cannot hijack (HTTP/2) answer 503 instead.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "replica down", http.StatusServiceUnavailable)
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		http.Error(w, "replica down", http.StatusServiceUnavailable)
		return
	}
	_ = conn.Close() // the point is to drop it
}
