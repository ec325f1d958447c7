package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// gatewayWorkerRequestsActive is the gateway's in-flight requests per worker,
// its closest thing to a queue.
const gatewayWorkerRequestsActive = "smg_worker_requests_active"

// RetryAvalancheDetector pages when clients' retries feed on themselves:
// the server slows, clients time out and retry, the retries add load
// without adding completed work, the server slows further. Its fingerprint
// is arrivals outgrowing completions (relative to the baseline) together
// with rising client-visible failures; a super-linear backlog means the
// loop has engaged. An organic surge raises arrivals and completions alike
// with few failures, and is not paged.
type RetryAvalancheDetector struct{ cfg RetryAvalancheConfig }

// Class implements Detector.
func (d *RetryAvalancheDetector) Class() Class { return RetryAvalanche }

// trafficSignals are the series one kind of replica exposes for the
// avalanche fingerprint.
type trafficSignals struct {
	arrivals, completions Selector
	failures              []Selector
	failureNames          []string
	backlog               Selector
	backlogName           string
}

func (d *RetryAvalancheDetector) signals(w Window) trafficSignals {
	// Decide by what the replica exposes, not by the target's kind: the
	// engines behind a gateway's /engine_metrics are engines.
	if w.Has(series.GatewayHTTPRequestsTotal) {
		paths := []Match{{Label: "path", Value: d.cfg.ArrivalEndpoints}}
		return trafficSignals{
			arrivals:    Selector{Name: series.GatewayHTTPRequestsTotal, Match: paths},
			completions: Selector{Name: series.GatewayHTTPResponsesTotal, Match: paths},
			failures: []Selector{
				Sel(series.GatewayRetriesTotal),
				{Name: series.GatewayHTTPResponsesTotal, Match: append(paths[:1:1], Match{Label: "status_code", Value: "5|408|429", Prefix: true})},
			},
			failureNames: []string{"worker retries/s", "5xx/408/429 responses/s"},
			backlog:      Sel(gatewayWorkerRequestsActive),
			backlogName:  "in-flight requests to workers",
		}
	}
	endpoints := []Match{{Label: "endpoint", Value: d.cfg.ArrivalEndpoints}}
	s := trafficSignals{
		arrivals:    Selector{Name: series.HTTPRequestsTotal, Match: endpoints},
		completions: Sel(series.NumRequestsTotal),
		failures: []Selector{
			Sel(series.NumAbortedRequestsTotal),
			{Name: series.HTTPResponsesTotal, Match: append(endpoints[:1:1], Match{Label: "status_code", Value: "5|408|429|499", Prefix: true})},
		},
		failureNames: []string{"aborted requests/s", "5xx/408/429/499 responses/s"},
		backlog:      Sel(series.NumQueueReqs),
		backlogName:  "queued requests",
	}
	if !w.Has(series.NumQueueReqs) {
		s.backlog, s.backlogName = Selector{Name: series.HTTPRequestsActive, Match: endpoints}, "active HTTP requests"
	}
	return s
}

// Detect implements Detector.
func (d *RetryAvalancheDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	sig := d.signals(w)

	// Enough traffic for ratios to mean something.
	count, ok := w.Increase(sig.arrivals, p.rangeStart, now)
	if !ok || count < c.MinRequests {
		return nil
	}
	arrivals := p.rate(w, sig.arrivals)
	if !arrivals.nowOK || !arrivals.baseOK || !atLeastTimes(arrivals.now, arrivals.base, c.MinArrivalGrowth) {
		return nil
	}

	// Amplification: arrivals per completion now, against the baseline's.
	// Steady traffic sits near 1 (or whatever the mix makes it); retries
	// push it up because a retried request arrives twice but completes once.
	completions := p.rate(w, sig.completions)
	amp := measure{}
	if completions.nowOK {
		amp.now, amp.nowOK = arrivals.now/max(completions.now, 1e-9), true
		if completions.baseOK && completions.base > 0 {
			amp.base, amp.baseOK = arrivals.base/completions.base, true
		}
		// No baseline completions: compare against balance (1 arrival per completion).
		baseAmp := 1.0
		if amp.baseOK {
			baseAmp = amp.base
		}
		if amp.now < c.MinAmplification*baseAmp {
			return nil
		}
		// Cap for display: a stalled server makes it unbounded.
		amp.now = min(amp.now, 1e6)
	}

	var failureParts []measure
	for _, sel := range sig.failures {
		failureParts = append(failureParts, p.rate(w, sel))
	}
	failures := sum(failureParts...)
	if !failures.nowOK || failures.now < c.MinFailuresPerSecond {
		return nil
	}
	if failures.baseOK && !atLeastTimes(failures.now, failures.base, c.FailureBaselineRatio) {
		return nil
	}

	// Backlog growth: the last quarter of the range against the quarter
	// ending half a range earlier. Super-linear growth means the loop has
	// engaged and the finding is critical.
	backlog := measure{}
	backlog.now, backlog.nowOK = w.Avg(sig.backlog, now.Add(-c.Range/4), now)
	backlog.base, backlog.baseOK = w.Avg(sig.backlog, now.Add(-c.Range*3/4), now.Add(-c.Range/2))
	growing := backlog.nowOK && backlog.baseOK && backlog.now >= c.MinBacklog &&
		backlog.now >= c.BacklogGrowthRatio*max(backlog.base, 1)

	sev := Warning
	if growing {
		sev = Critical
	}
	f := finding(RetryAvalanche, w, sev, LayerClient)
	f.Evidence = append(f.Evidence,
		arrivals.evidence("arrivals/s", "/s", fmt.Sprintf(">= %sx baseline", num(c.MinArrivalGrowth))),
	)
	if completions.nowOK {
		f.Evidence = append(f.Evidence,
			completions.evidence("completions/s", "/s", ""),
			amp.evidence("arrivals per completion", "ratio", fmt.Sprintf(">= %sx baseline", num(c.MinAmplification))),
		)
	}
	f.Evidence = append(f.Evidence, failures.evidence("client-visible failures/s", "/s",
		fmt.Sprintf(">= %s/s and >= %sx baseline", num(c.MinFailuresPerSecond), num(c.FailureBaselineRatio))))
	for i, part := range failureParts {
		if part.nowOK {
			f.Evidence = append(f.Evidence, part.evidence(sig.failureNames[i], "/s", ""))
		}
	}
	if backlog.nowOK {
		e := backlog.evidence(sig.backlogName+" (baseline: half a range earlier)", "",
			fmt.Sprintf(">= %sx and >= %s for critical", num(c.BacklogGrowthRatio), num(c.MinBacklog)))
		f.Evidence = append(f.Evidence, e)
	}
	e2e := p.quantile(w, 0.99, series.E2ERequestLatency)
	if e2e.nowOK {
		f.Evidence = append(f.Evidence, e2e.evidence("end-to-end latency p99", "s", ""))
	}

	f.Summary = fmt.Sprintf("Retry avalanche: arrivals %s/s (baseline %s/s) outgrow completions, %s client-visible failures/s",
		num(arrivals.now), num(arrivals.base), num(failures.now))
	if completions.nowOK {
		f.Summary = fmt.Sprintf("Retry avalanche: arrivals %s/s (baseline %s/s) outgrow completions (%s/s), %s client-visible failures/s",
			num(arrivals.now), num(arrivals.base), num(completions.now), num(failures.now))
	}
	var diag strings.Builder
	diag.WriteString("Client layer: clients are timing out and retrying. ")
	if completions.nowOK {
		fmt.Fprintf(&diag, "Arrivals per completion is %s: retried requests arrive again without adding finished work. ", vsBaseline(amp, ""))
	}
	fmt.Fprintf(&diag, "Client-visible failures (aborts, timeouts, 5xx/429) run at %s. ", vsBaseline(failures, "/s"))
	if growing {
		fmt.Fprintf(&diag, "The %s grew from %s to %s within half a range: the feedback loop has engaged (slower service -> more timeouts -> more retries). ",
			sig.backlogName, num(backlog.base), num(backlog.now))
	}
	diag.WriteString("The trigger is usually an upstream latency rise (prefix-cache collapse, preemption storm, a slow deploy); check those findings on the same replica. Adding replicas alone does not end it: every timeout turns into more than one new request, so load multiplies faster than capacity arrives, and new replicas start already overloaded — the retry rate itself must come down.")
	f.Diagnosis = diag.String()
	f.Emergency = []string{
		"At the router/gateway, enforce a strict max concurrency per replica and answer the excess with a fast 503 (with Retry-After) so clients fail fast instead of waiting into a timeout.",
		"Have the client owners stop or back off retries now (disable automatic retries, or switch to exponential backoff).",
		"Then add capacity (replicas) to drain the backlog.",
	}
	f.RootCause = []string{
		"Clients: exponential backoff with jitter and a cap, plus a retry budget (e.g. retries at most 10% of requests).",
		"Add a circuit breaker at the gateway/clients so a struggling replica is shed instead of hammered.",
		"Set request-level timeouts at the router so abandoned requests are cancelled on the server, not computed for nobody.",
	}
	return []Finding{f}
}
