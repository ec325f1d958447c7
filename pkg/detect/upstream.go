package detect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Upstream is what a gateway's per-worker series say about the workers
// behind it over a finding's range: how many it routes to, and which of
// them its failures come from. Correlation folds the gateway's finding
// into the incident of such a worker when that worker has its own.
type Upstream struct {
	// Workers is how many workers the gateway reports.
	Workers int `json:"workers"`
	// Failing are the workers the gateway took out of rotation or whose
	// attempts fail, by address.
	Failing []UpstreamWorker `json:"failing,omitempty"`
}

// UpstreamWorker is one worker the gateway's failures come from.
type UpstreamWorker struct {
	// Worker is its address as the gateway names it, made readable
	// (series.WorkerAddress): "10.0.0.1:30000".
	Worker string `json:"worker"`
	// Breaker is the gateway's circuit breaker for it: "open" or
	// "half-open" now, "opened" when it opened in the range and is closed
	// again; "" when it stayed closed or is not exported.
	Breaker string `json:"breaker,omitempty"`
	// Unhealthy: the gateway's health check failed it in the range.
	Unhealthy bool `json:"unhealthy,omitempty"`
	// FailuresPerSecond are the attempts to it that failed (the breaker's
	// failure outcomes), per second over the range.
	FailuresPerSecond float64 `json:"failures_per_second,omitempty"`
}

// OutOfRotation reports whether the gateway stopped sending to it.
func (u UpstreamWorker) OutOfRotation() bool {
	return u.Breaker == "open" || u.Breaker == "half-open" || u.Unhealthy
}

// String is the worker and what the gateway says of it:
// "10.0.0.1:30000 (breaker open, 12 failed attempts/s)".
func (u UpstreamWorker) String() string {
	var what []string
	if u.Breaker != "" {
		what = append(what, "breaker "+u.Breaker)
	}
	if u.Unhealthy {
		what = append(what, "failing health checks")
	}
	if u.FailuresPerSecond > 0 {
		what = append(what, num(u.FailuresPerSecond)+" failed attempts/s")
	}
	if len(what) == 0 {
		return u.Worker
	}
	return u.Worker + " (" + strings.Join(what, ", ") + ")"
}

// minUpstreamFailures is the failed attempts per second to one worker,
// outnumbering its successes, that name it as a source of the failures
// while its breaker stays closed: below it a worker's failures are noise.
const minUpstreamFailures = 0.1

// readUpstream reads the gateway's per-worker series over (from, now]:
// the circuit breaker state, the health check and the breaker's outcomes,
// per worker URL. Nil when the gateway exports none of those series.
func readUpstream(w Window, from, now time.Time) *Upstream {
	var workers []string
	for _, fam := range []string{series.GatewayCircuitBreakerState, series.GatewayWorkerHealth,
		series.GatewayBreakerOutcomesTotal, gatewayWorkerRequestsActive} {
		for _, v := range w.LabelValues(fam, "worker") {
			if !slices.Contains(workers, v) {
				workers = append(workers, v)
			}
		}
	}
	if len(workers) == 0 {
		return nil
	}
	u := &Upstream{Workers: len(workers)}
	for _, url := range workers {
		m := []Match{{Label: "worker", Value: url}}
		st := UpstreamWorker{Worker: series.WorkerAddress(url)}
		if peak, ok := w.Max(Selector{Name: series.GatewayCircuitBreakerState, Match: m}, from, now); ok && peak >= 1 {
			st.Breaker = "opened"
			if last, ok := w.Last(Selector{Name: series.GatewayCircuitBreakerState, Match: m}); ok {
				st.Breaker = breakerState(last, st.Breaker)
			}
		}
		if low, ok := w.Min(Selector{Name: series.GatewayWorkerHealth, Match: m}, from, now); ok && low == 0 {
			st.Unhealthy = true
		}
		outcome := func(o string) (float64, bool) {
			return w.Rate(Selector{Name: series.GatewayBreakerOutcomesTotal, Match: append(m, Match{Label: "outcome", Value: o})}, from, now)
		}
		failed, okF := outcome("failure")
		succeeded, _ := outcome("success")
		if okF && failed >= minUpstreamFailures && failed >= succeeded {
			st.FailuresPerSecond = failed
		}
		if st.Breaker != "" || st.Unhealthy || st.FailuresPerSecond > 0 {
			u.Failing = append(u.Failing, st)
		}
	}
	return u
}

// breakerState names the gateway's breaker gauge (0 closed, 1 open,
// 2 half-open); closed names it closed again after opening.
func breakerState(v float64, closed string) string {
	switch v {
	case 1:
		return "open"
	case 2:
		return "half-open"
	}
	return closed
}

// withUpstream attaches what the gateway says of its workers to f, a
// finding on the gateway, with a sentence naming the workers its failures
// come from.
func withUpstream(f *Finding, u *Upstream) {
	f.Upstream = u
	if u == nil || len(u.Failing) == 0 {
		return
	}
	names := make([]string, len(u.Failing))
	out := 0
	for i, x := range u.Failing {
		names[i] = x.String()
		if x.OutOfRotation() {
			out++
		}
	}
	f.Evidence = append(f.Evidence, Evidence{Name: fmt.Sprintf("workers failing behind the gateway (of %d)", u.Workers), Value: float64(len(u.Failing))})
	f.Diagnosis = strings.TrimSpace(f.Diagnosis + fmt.Sprintf(" The failures come from %d of the %d workers behind the gateway: %s.",
		len(u.Failing), u.Workers, strings.Join(names, "; ")))
	if out > 0 && out < u.Workers {
		f.Diagnosis += fmt.Sprintf(" The gateway took %d of them out of rotation; the other workers carry their traffic.", out)
	}
}
