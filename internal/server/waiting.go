package server

import (
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// WaitingOptions are those of the server of a daemon whose configuration
// cannot be used yet.
type WaitingOptions struct {
	Gatherer prometheus.Gatherer
	// Problem says why the configuration cannot be used and what the daemon
	// does about it; it is shown to anyone who reaches the port, so it must
	// hold nothing secret.
	Problem func() string
	// Reload reads the configuration again (POST /-/reload); nil: 403, as
	// the daemon's own server answers without --web.enable-lifecycle.
	Reload func() error
	// Listen binds the address; nil: net.Listen.
	Listen func(network, address string) (net.Listener, error)
	// Web is the daemon's route prefix and web configuration file: the
	// probes answer where they will once it starts, behind the same TLS
	// and basic auth.
	Web    Web
	Logger *zap.Logger
}

// NewWaiting binds addr for a daemon that has no usable configuration and
// is not evaluating. /-/healthy answers 200: the process works, and
// restarting it would read the same configuration again (in a sidecar, a
// crash-looping container takes the serving pod out of its Service).
// /-/ready answers 503 with the problem, as does every page and API path;
// /metrics serves the gatherer.
func NewWaiting(addr string, opts WaitingOptions) (*Server, error) {
	if err := opts.Web.Check(); err != nil {
		return nil, err
	}
	ln, err := bind(opts.Listen, addr)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: Options{Web: opts.Web, Logger: opts.Logger}, ln: ln, stopping: make(chan struct{})}
	s.srv = newHTTPServer(opts.Web.mount(waitingHandler(opts)))
	return s, nil
}

func waitingHandler(opts WaitingOptions) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	for _, path := range []string{"/-/healthy", "/healthz"} {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte("ok: waiting for a usable configuration\n"))
		})
	}
	unavailable := func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not evaluating: the configuration cannot be used\n\n"+opts.Problem(), http.StatusServiceUnavailable)
	}
	for _, path := range []string{"/-/ready", "/readyz"} {
		mux.HandleFunc("GET "+path, unavailable)
	}
	mux.Handle("POST /-/reload", http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if opts.Reload == nil {
			http.Error(w, "the lifecycle API is not enabled: start the daemon with --web.enable-lifecycle, or send it SIGHUP", http.StatusForbidden)
			return
		}
		if err := opts.Reload(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write([]byte("loaded; the daemon starts\n"))
	})))
	// The workspace, the API and anything else: the same answer, so a
	// bookmarked page says what is wrong instead of 404.
	mux.HandleFunc("/", unavailable)
	return mux
}
