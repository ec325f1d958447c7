// Package server is the daemon's own HTTP surface: /metrics, the probes
// (/-/healthy and /-/ready as in Prometheus, /healthz and /readyz as
// aliases), the lifecycle endpoint /-/reload, the JSON API
// (/api/v1/alerts and /api/v1/targets in Prometheus' shape, /api/v2/alerts
// in Alertmanager's, the watchdog's own under /api/v1/watchdog/) and the
// runbooks. Apart from /-/reload it only reads:
// alert state and windows are owned by the evaluation loop and the window
// store.
//
// Every endpoint is mounted under the route prefix (--web.route-prefix),
// and the listener speaks TLS and asks for basic auth as the web
// configuration file (--web.config.file) says, in the format of
// Prometheus' exporter-toolkit, which serves it (web.go).
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Alerts is the alert state and assessment source (the evaluation loop).
type Alerts interface {
	Alerts() []alert.Incident
	Round() assess.Round
	LastEvaluation() time.Time
	Ready() <-chan struct{}
}

// Options of the server.
type Options struct {
	Gatherer prometheus.Gatherer
	Alerts   Alerts
	Runbooks http.Handler // serves /runbooks/...; nil: none
	Logger   *zap.Logger
	// Now reads the clock for the API's "age" fields; main passes time.Now.
	Now func() time.Time
	// Reload applies the configuration again (POST /-/reload); nil: the
	// lifecycle API is off and /-/reload answers 403 saying so.
	Reload func() error
	// StaleAfter is how long the evaluation loop may go without completing
	// a round before the daemon reports itself unhealthy and unready; 0
	// never.
	StaleAfter time.Duration
	// StartGrace is how much longer than StaleAfter the first round may
	// take (the backfill from history runs before it).
	StartGrace time.Duration
	// Notices returns operator warnings shown in /readyz (e.g. page links
	// no one configured); they do not make the daemon unready. nil: none.
	Notices func() []string
	// Listen binds the address; nil: net.Listen. Tests pass an in-memory
	// network's.
	Listen func(network, address string) (net.Listener, error)
	// Incidents serves the incident journal's API and postmortem drafts
	// (incident.Handler), mounted on incident.Routes; nil: none.
	Incidents http.Handler
	// Workspace serves the HTML pages on its Patterns (internal/ui), "/"
	// among them; nil: "/" lists the API in plain text.
	Workspace interface {
		http.Handler
		Patterns() []string
	}
	// Silences serves the silences API and pages (silences.go); nil: none.
	Silences http.Handler
	// Pprof serves Go's runtime profiles under /debug/pprof/
	// (--web.enable-pprof): off by default, as a CPU profile or an
	// execution trace costs the daemon while it runs and anyone who
	// reaches the port could ask for one.
	Pprof bool
	// Web is the route prefix and the web configuration file.
	Web Web
}

// Server is the HTTP server.
type Server struct {
	opts     Options
	srv      *http.Server
	ln       net.Listener
	stopping chan struct{}
	// started stands in for the last round until the first one completes,
	// so a daemon is healthy while it waits for its first round.
	started time.Time
}

// bind listens on addr with listen, the operating system's network when
// nil (tests pass an in-memory one).
func bind(listen func(network, address string) (net.Listener, error), addr string) (net.Listener, error) {
	if listen == nil {
		listen = net.Listen
	}
	return listen("tcp", addr)
}

// New checks the web configuration file and binds the listener (so ":0"
// gets a port and Addr works before Run).
func New(addr string, opts Options) (*Server, error) {
	if err := opts.Web.Check(); err != nil {
		return nil, err
	}
	ln, err := bind(opts.Listen, addr)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, ln: ln, stopping: make(chan struct{}), started: opts.Now()}
	s.srv = newHTTPServer(s.Handler())
	return s, nil
}

// Timeouts of the server. Every request it serves is small (GETs and an
// empty POST), so a client slower than these is stuck or hostile and must
// not hold a connection and its goroutine. The write timeout runs from the
// end of the request headers to the end of the response: /metrics of a
// large fleet (a few MB) must finish within it on a slow link.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 2 * time.Minute
)

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
	}
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Handler routes every endpoint, under the route prefix.
func (s *Server) Handler() http.Handler {
	return s.opts.Web.mount(s.routes())
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	for _, path := range []string{"/-/healthy", "/healthz"} {
		mux.HandleFunc("GET "+path, s.healthy)
	}
	for _, path := range []string{"/-/ready", "/readyz"} {
		mux.HandleFunc("GET "+path, s.ready)
	}
	mux.HandleFunc("GET /api/v1/alerts", s.prometheusAlerts)
	mux.HandleFunc("GET /api/v1/watchdog/alerts", s.alerts)
	mux.HandleFunc("GET /api/v1/targets", s.prometheusTargets)
	mux.HandleFunc("GET /api/v1/watchdog/targets", s.targets)
	mux.HandleFunc("GET /api/v2/alerts", s.alertmanagerAlerts)
	mux.HandleFunc("GET /api/v1/slos", s.slos)
	// A browser on another site must not be able to make an operator's
	// browser reload the daemon: cross-origin requests (Sec-Fetch-Site,
	// Origin against Host) are refused with 403.
	mux.Handle("POST /-/reload", http.NewCrossOriginProtection().Handler(http.HandlerFunc(s.reload)))
	if s.opts.Runbooks != nil {
		mux.Handle("GET /runbooks/", s.opts.Runbooks)
	}
	s.routeSilences(mux)
	if s.opts.Pprof {
		routePprof(mux)
	}
	if s.opts.Incidents != nil {
		for _, pattern := range incident.Routes {
			mux.Handle(pattern, s.opts.Incidents)
		}
	}
	if s.opts.Workspace != nil {
		for _, pattern := range s.opts.Workspace.Patterns() {
			mux.Handle(pattern, s.opts.Workspace)
		}
		return mux
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("sglang-watchdog\n\n/api/v1/alerts\n/api/v1/watchdog/alerts\n/api/v1/targets\n/api/v1/watchdog/targets\n/api/v2/alerts\n/metrics\n/-/healthy\n/-/ready\n/runbooks/\n"))
	})
	return mux
}

// routePprof mounts net/http/pprof's handlers, all but Cmdline: the
// daemon's command line is nobody's business over HTTP (Index answers
// /debug/pprof/cmdline 404, as no runtime profile has that name). A CPU
// profile or trace may last longer than the server's write timeout: pprof
// moves the connection's deadline by the duration asked for.
func routePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index) // and every named profile: heap, goroutine, allocs…
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

func (s *Server) reload(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Reload == nil {
		http.Error(w, "the lifecycle API is not enabled: start the daemon with --web.enable-lifecycle, or send it SIGHUP", http.StatusForbidden)
		return
	}
	if err := s.opts.Reload(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Write([]byte("reloaded\n"))
}

// Run serves until ctx is done, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.opts.Web.serve(s.ln, s.srv, s.opts.Logger) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	close(s.stopping)
	// A fresh context: the parent is already cancelled, and Shutdown must
	// get time to finish in-flight requests.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// stalled says why the evaluation loop counts as stuck: no round completed
// within StaleAfter (counted from start-up before the first round). "" when
// it is not.
func (s *Server) stalled() string {
	if s.opts.Alerts == nil || s.opts.StaleAfter <= 0 {
		return ""
	}
	last, limit := s.opts.Alerts.LastEvaluation(), s.opts.StaleAfter
	if last.IsZero() {
		last, limit = s.started, limit+s.opts.StartGrace
	}
	if age := s.opts.Now().Sub(last); age > limit {
		return fmt.Sprintf("evaluation loop stalled: no round completed for %s (limit %s)", age.Truncate(time.Second), limit)
	}
	return ""
}

// healthy is the liveness probe: the process serves and its evaluation
// loop completes rounds.
func (s *Server) healthy(w http.ResponseWriter, _ *http.Request) {
	if why := s.stalled(); why != "" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n"))
}

// ready is the readiness probe: the first evaluation round has completed,
// the loop has not stalled since, and the daemon is not shutting down.
func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-s.stopping:
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	default:
	}
	detail := ""
	if s.opts.Notices != nil {
		for _, n := range s.opts.Notices() {
			detail += "\nwarning: " + n
		}
	}
	if s.opts.Alerts != nil {
		select {
		case <-s.opts.Alerts.Ready():
		default:
			http.Error(w, "waiting for the first evaluation round"+detail, http.StatusServiceUnavailable)
			return
		}
	}
	if why := s.stalled(); why != "" {
		http.Error(w, why+detail, http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready" + detail + "\n"))
}

// apiAlert is the JSON shape of an alert.
type apiAlert struct {
	Fingerprint string            `json:"fingerprint"`
	State       alert.State       `json:"state"`
	Class       detect.Class      `json:"class"`
	Severity    detect.Severity   `json:"severity"`
	Replica     string            `json:"replica"`
	Model       string            `json:"model,omitempty"`
	Layer       detect.Layer      `json:"layer,omitempty"`
	Summary     string            `json:"summary"`
	Diagnosis   string            `json:"diagnosis"`
	Evidence    []detect.Evidence `json:"evidence"`
	Emergency   []string          `json:"emergency_steps"`
	RootCause   []string          `json:"root_cause_steps"`
	Runbook     string            `json:"runbook"`
	ExplainedBy []detect.Class    `json:"explained_by,omitempty"`
	Explains    []detect.Class    `json:"explains,omitempty"`
	ActiveAt    time.Time         `json:"active_at"`
	FiredAt     time.Time         `json:"fired_at,omitzero"`
	ResolvedAt  time.Time         `json:"resolved_at,omitzero"`
	LastSeen    time.Time         `json:"last_seen"`
	// SilencedBy are the silences muting the alert: nothing is sent for it.
	SilencedBy []string `json:"silenced_by,omitempty"`
	// Draining: the cause (class) has cleared and what it brought about
	// is still seen; summary to steps are then that, as the pages say.
	Draining bool `json:"draining,omitempty"`
	// Failing is what failing users see, when requests fail and the
	// failures are not the cause: the pages lead with it.
	Failing string `json:"failing,omitempty"`
}

func (s *Server) alerts(w http.ResponseWriter, r *http.Request) {
	fp, state := r.URL.Query().Get("fingerprint"), r.URL.Query().Get("state")
	out := struct {
		EvaluatedAt time.Time  `json:"evaluated_at,omitzero"`
		Alerts      []apiAlert `json:"alerts"`
	}{EvaluatedAt: s.opts.Alerts.LastEvaluation(), Alerts: []apiAlert{}}
	for _, a := range s.opts.Alerts.Alerts() {
		if (fp != "" && a.Fingerprint != fp) || (state != "" && string(a.State) != state) {
			continue
		}
		f := a.Finding
		out.Alerts = append(out.Alerts, apiAlert{
			Fingerprint: a.Fingerprint, State: a.State, Class: a.Class, Severity: a.Severity, Replica: a.Replica,
			Model: f.Model, Layer: f.Layer, Summary: f.Summary, Diagnosis: f.Diagnosis, Evidence: f.Evidence,
			Emergency: f.Emergency, RootCause: f.RootCause, Runbook: f.Runbook, ExplainedBy: a.ExplainedBy, Explains: a.Explains,
			Draining: a.Draining, Failing: a.Failing, ActiveAt: a.ActiveAt, FiredAt: a.FiredAt, ResolvedAt: a.ResolvedAt, LastSeen: a.LastSeen, SilencedBy: a.SilencedBy,
		})
	}
	writeJSON(w, out)
}

// apiTarget is the JSON shape of a replica's health and key values.
type apiTarget struct {
	Replica             string              `json:"replica"`
	Target              string              `json:"target"`
	Kind                string              `json:"kind"`
	Model               string              `json:"model,omitempty"`
	EngineType          string              `json:"engine_type,omitempty"`
	Up                  bool                `json:"up"`
	LastScrape          time.Time           `json:"last_scrape,omitzero"`
	LastSuccess         time.Time           `json:"last_success,omitzero"`
	Reason              string              `json:"last_failure_reason,omitempty"`
	LastError           string              `json:"last_error,omitempty"`
	ConsecutiveFailures int                 `json:"consecutive_failures"`
	Snapshot            assess.Snapshot     `json:"snapshot"`
	Recent              assess.Snapshot     `json:"recent"`
	Triage              detect.TriageResult `json:"triage"`
	Findings            []apiFinding        `json:"findings"`
}

type apiFinding struct {
	detect.Finding
	Severity string `json:"severity"`
}

// targets renders the last evaluation round: the same snapshot, triage and
// findings the pages were decided from.
func (s *Server) targets(w http.ResponseWriter, _ *http.Request) {
	round := s.opts.Alerts.Round()
	out := struct {
		EvaluatedAt time.Time   `json:"evaluated_at,omitzero"`
		Targets     []apiTarget `json:"targets"`
	}{EvaluatedAt: round.At, Targets: []apiTarget{}}
	for _, r := range round.Replicas {
		st := r.Scrape
		t := apiTarget{Replica: r.Replica.Name, Target: r.Replica.Target, Kind: r.Replica.Kind, Model: r.Replica.Model, EngineType: r.Replica.EngineType,
			Up: st.Up, LastScrape: st.LastAttempt, LastSuccess: st.LastSuccess, Reason: string(st.Reason), LastError: st.Error,
			ConsecutiveFailures: st.ConsecutiveFailures, Snapshot: r.Snapshot, Recent: r.Recent, Triage: r.Triage, Findings: []apiFinding{}}
		for _, f := range r.Findings {
			t.Findings = append(t.Findings, apiFinding{Finding: f, Severity: f.Severity.String()})
		}
		out.Targets = append(out.Targets, t)
	}
	writeJSON(w, out)
}

// apiSLO is an objective on a model as the last round assessed it.
type apiSLO struct {
	slo.Status
	// Severity is the most severe rule firing: "critical" (a page rule),
	// "warning", or "" when none fires.
	Severity string `json:"severity,omitempty"`
}

// slos renders the last round's objectives per model: the SLI, burn rates
// and budget left the burn pages were decided from.
func (s *Server) slos(w http.ResponseWriter, _ *http.Request) {
	round := s.opts.Alerts.Round()
	out := struct {
		EvaluatedAt time.Time `json:"evaluated_at,omitzero"`
		SLOs        []apiSLO  `json:"slos"`
	}{EvaluatedAt: round.At, SLOs: []apiSLO{}}
	for _, st := range round.SLOs {
		a := apiSLO{Status: st}
		if st.Burning() {
			a.Severity = st.Severity.String()
		}
		out.SLOs = append(out.SLOs, a)
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) { writeStatusJSON(w, http.StatusOK, v) }

func writeJSONBody(w http.ResponseWriter, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// promAlert is an alert in the shape of Prometheus' GET /api/v1/alerts,
// so Grafana, Karma and scripts written for Prometheus read it. The
// watchdog's own view, with evidence and steps, is /api/v1/watchdog/alerts.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// prometheusAlerts serves the pending and firing alerts as Prometheus
// does: {"status":"success","data":{"alerts":[...]}}. Resolved alerts are
// not active and are left out, as Prometheus leaves them out.
func (s *Server) prometheusAlerts(w http.ResponseWriter, _ *http.Request) {
	alerts := []promAlert{}
	for _, a := range s.opts.Alerts.Alerts() {
		if a.State != alert.StatePending && a.State != alert.StateFiring {
			continue
		}
		f := a.Finding
		labels := map[string]string{"alertname": string(a.Class), "severity": a.Severity.String(), "replica": a.Replica, "fingerprint": a.Fingerprint}
		if a.Model != "" {
			labels["model"] = a.Model
		}
		if f.Layer != "" {
			labels["layer"] = string(f.Layer)
		}
		annotations := alertAnnotations(a)
		// The value is the first evidence number, the one the headline leads
		// with, formatted as Prometheus formats sample values.
		value := ""
		if len(f.Evidence) > 0 {
			value = strconv.FormatFloat(f.Evidence[0].Value, 'e', -1, 64)
		}
		alerts = append(alerts, promAlert{Labels: labels, Annotations: annotations, State: string(a.State), ActiveAt: a.ActiveAt, Value: value})
	}
	type data struct {
		Alerts []promAlert `json:"alerts"`
	}
	writeJSON(w, struct {
		Status string `json:"status"`
		Data   data   `json:"data"`
	}{Status: "success", Data: data{Alerts: alerts}})
}
