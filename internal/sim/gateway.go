package sim

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// Circuit breaker and retry settings of the simulated gateway: smg's
// defaults (--cb-failure-threshold 10, --cb-success-threshold 3, open 60 s,
// --retry-max-retries 5).
const (
	gatewayBreakerFailures  = 10
	gatewayBreakerSuccesses = 3
	gatewayBreakerOpen      = 60.0 // seconds
)

// gateway is a simulated model gateway (smg) in front of the fleet, seen
// through its /metrics: what its clients sent and got, its attempts and
// retries upstream, and per worker its circuit breaker, health check and
// in-flight requests. Each replica keeps its own clients: the gateway
// counts their requests and the engines' answers, passes 503s through,
// and, for a worker that does not answer (its process down), fails the
// requests it held with 502, retries new attempts on another worker until
// its breaker opens and routes the worker's clients elsewhere while it is
// open. What those clients then cost the other workers is not simulated:
// their load stays their own clients'.
type gateway struct {
	arrived, ok, shed, badGateway float64 // client requests and their answers
	attemptsOK, attemptsFailed    float64 // upstream attempts by outcome
	retries                       float64
	workers                       []gatewayWorker
}

// gatewayWorker is the gateway's view of one replica.
type gatewayWorker struct {
	eng                  *engine // the process last seen; a new one restarted
	requests, ok, shed   float64 // that process's counters when last seen
	breaker              int     // 0 closed, 1 open, 2 half-open
	openedAt             float64
	failures, successes  int // consecutive, as the breaker counts them
	success, failure     float64
	healthy              bool
	active               float64
	heldAtCrash, pending float64
}

func newGateway(n int) *gateway {
	g := &gateway{workers: make([]gatewayWorker, n)}
	for i := range g.workers {
		g.workers[i].healthy = true
	}
	return g
}

// step accounts [t0, t1) after every replica has stepped through it.
func (g *gateway) step(replicas []*replica, t0, t1 float64) {
	for i, r := range replicas {
		w := &g.workers[i]
		e := r.engine
		if w.breaker == 1 && t1-w.openedAt >= gatewayBreakerOpen {
			w.breaker = 2 // half-open: the next attempt probes the worker
		}
		if e == nil {
			g.unreachable(w, r, t0, t1)
			continue
		}
		if e != w.eng {
			// A new process: its counters start again.
			w.eng, w.requests, w.ok, w.shed = e, 0, 0, 0
		}
		chat := e.http[epChat]
		dReq, dOK, dShed := chat.requests-w.requests, chat.responses[0]-w.ok, chat.responses[2]-w.shed
		w.requests, w.ok, w.shed = chat.requests, chat.responses[0], chat.responses[2]
		w.healthy = t1 >= e.ready
		w.active = float64(len(e.running) + len(e.waiting))
		g.arrived += dReq
		g.ok += dOK
		g.shed += dShed
		g.attemptsOK += dOK
		g.attemptsFailed += dShed
		w.success += dOK
		w.failure += dShed
		if w.healthy && dOK > 0 && w.breaker != 0 {
			if w.successes += int(dOK); w.successes >= gatewayBreakerSuccesses {
				w.breaker, w.failures, w.successes = 0, 0, 0
			}
		}
	}
}

// unreachable accounts a worker whose process is down: the requests it
// held fail with 502 once; new attempts fail and are retried elsewhere
// until its breaker opens, and a half-open breaker's probe fails again.
func (g *gateway) unreachable(w *gatewayWorker, r *replica, t0, t1 float64) {
	if w.eng != nil {
		held := w.active
		g.badGateway += held
		g.arrived += held
		g.attemptsFailed += held
		w.failure += held
		w.failures += int(held)
		w.eng = nil
	}
	w.healthy, w.active = false, 0
	clients := r.load.Rate * (t1 - t0)
	g.arrived += clients
	g.ok += clients // served by another worker
	g.attemptsOK += clients
	if w.breaker == 1 {
		return
	}
	// Closed or half-open: attempts reach the dead worker and fail.
	w.pending += clients
	for w.pending >= 1 {
		w.pending--
		g.attemptsFailed++
		g.retries++
		w.failure++
		w.failures++
		if w.breaker == 2 || w.failures >= gatewayBreakerFailures {
			w.breaker, w.openedAt, w.successes = 1, t1, 0
			w.pending = 0
			return
		}
	}
}

// WriteGatewayMetrics renders the simulated gateway's /metrics in smg's
// current names; workerURL gives the URL the gateway knows replica i by.
func (f *Fleet) WriteGatewayMetrics(out io.Writer, workerURL func(i int) string) error {
	var b bytes.Buffer
	f.mu.Lock()
	g := f.gateway
	w := &writer{b: &b}
	const path = "/v1/chat/completions"
	gatewayFamily(&b, "smg_http_requests_total")
	w.sample("smg_http_requests_total", []string{"method", "POST", "path", path}, g.arrived)
	gatewayFamily(&b, "smg_http_responses_total")
	w.sample("smg_http_responses_total", []string{"path", path, "status_code", "200", "error_code", ""}, g.ok)
	w.sample("smg_http_responses_total", []string{"path", path, "status_code", "502", "error_code", "bad_gateway"}, g.badGateway)
	w.sample("smg_http_responses_total", []string{"path", path, "status_code", "503", "error_code", "service_unavailable"}, g.shed)
	gatewayFamily(&b, "smg_router_upstream_responses_total")
	w.sample("smg_router_upstream_responses_total", []string{"router_type", "http", "status_code", "200", "error_code", ""}, g.attemptsOK)
	w.sample("smg_router_upstream_responses_total", []string{"router_type", "http", "status_code", "503", "error_code", "service_unavailable"}, g.attemptsFailed)
	gatewayFamily(&b, "smg_worker_retries_total")
	w.sample("smg_worker_retries_total", []string{"worker_type", "regular", "endpoint", "chat"}, g.retries)
	gatewayFamily(&b, "smg_worker_cb_state")
	for i, x := range g.workers {
		w.sample("smg_worker_cb_state", []string{"worker", workerURL(i)}, float64(x.breaker))
	}
	gatewayFamily(&b, "smg_worker_cb_outcomes_total")
	for i, x := range g.workers {
		w.sample("smg_worker_cb_outcomes_total", []string{"worker", workerURL(i), "outcome", "success"}, x.success)
		w.sample("smg_worker_cb_outcomes_total", []string{"worker", workerURL(i), "outcome", "failure"}, x.failure)
	}
	gatewayFamily(&b, "smg_worker_health")
	for i, x := range g.workers {
		h := 0.0
		if x.healthy {
			h = 1
		}
		w.sample("smg_worker_health", []string{"worker", workerURL(i)}, h)
	}
	gatewayFamily(&b, "smg_worker_requests_active")
	for i, x := range g.workers {
		w.sample("smg_worker_requests_active", []string{"worker", workerURL(i)}, x.active)
	}
	f.mu.Unlock()
	_, err := out.Write(b.Bytes())
	return err
}

// gatewayFamilies are the HELP and TYPE of the families the gateway
// renders, as smg writes them.
var gatewayFamilies = map[string][2]string{
	"smg_http_requests_total":             {"counter", "Total HTTP requests by method and path"},
	"smg_http_responses_total":            {"counter", "Total HTTP responses by path, status_code and error_code"},
	"smg_router_upstream_responses_total": {"counter", "Upstream backend HTTP responses by router_type, status_code, error_code"},
	"smg_worker_retries_total":            {"counter", "Total retry attempts by worker_type and endpoint"},
	"smg_worker_cb_state":                 {"gauge", "Circuit breaker state per worker (0=closed, 1=open, 2=half_open)"},
	"smg_worker_cb_outcomes_total":        {"counter", "Circuit breaker outcomes per worker (success, failure)"},
	"smg_worker_health":                   {"gauge", "Worker health per worker (1 healthy, 0 unhealthy)"},
	"smg_worker_requests_active":          {"gauge", "Currently running requests per worker"},
}

func gatewayFamily(b *bytes.Buffer, name string) {
	f := gatewayFamilies[name]
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, f[1], name, f[0])
}

// GatewayHandler serves the simulated gateway's /metrics; workerURL gives
// the URL the gateway knows replica i by (where it is served).
func (f *Fleet) GatewayHandler(workerURL func(i int) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		var b bytes.Buffer
		if err := f.WriteGatewayMetrics(&b, workerURL); err != nil {
			http.Error(w, fmt.Sprint(err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(b.Bytes())
	})
}
