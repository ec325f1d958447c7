package detect

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// gatewayWorkerRequestsActive is the gateway's in-flight requests per worker,
// its closest thing to a queue.
const gatewayWorkerRequestsActive = "smg_worker_requests_active"

// RetryAvalanche is the class of client retries feeding on themselves.
const RetryAvalanche Class = "retry_avalanche"

// RetryAvalancheDetector pages when retries feed on themselves: the server
// slows, clients (or the gateway) time out or see errors and retry, the
// retries add load without adding completed work, the server slows
// further. Arrivals outgrowing completions is also what plain overload
// looks like — more traffic than the replica serves, shed with 503 or
// timing out — so the detector pages only with evidence of retries:
//
//   - behind the model gateway, the router's own retries
//     (smg_worker_retries_total) and its upstream attempts per client
//     request;
//   - on an engine, arrivals beyond the offered load: the highest rate of
//     fresh requests (arrivals minus failed requests) seen since arrivals
//     began to grow. A surge arrives before its failures and sets that
//     level; retries arrive after failures and exceed it.
//
// Without that evidence it is overload, and error_rate says so. A
// super-linear backlog means the loop has engaged: critical.
type RetryAvalancheDetector struct{ cfg RetryAvalancheConfig }

// Class implements Detector.
func (d *RetryAvalancheDetector) Class() Class { return RetryAvalanche }

// Baselines keys of retry_avalanche: on an engine the arrivals, the
// arrivals per completion and the client-visible failures; behind the
// gateway its retries and upstream attempts per client request. The keys
// after them are the context a page shows beside those, frozen alike so
// that no baseline on the page has absorbed the incident.
const (
	retryArrivals    = "arrivals_per_second"
	retryAmp         = "arrivals_per_completion"
	retryFailures    = "failures_per_second"
	retryRetries     = "retries_per_second"
	retryAttemptsAmp = "attempts_per_request"

	retryCompletions = "completions_per_second"
	retryE2EP99      = "e2e_latency_p99"
	retryClients     = "client_requests_per_second"
	retryAttempts    = "upstream_attempts_per_second"
	retryExhausted   = "exhausted_per_second"
)

// retryFailureParts are the keys of the client-visible failures' parts,
// in the order of clientTraffic.retriable.
var retryFailureParts = []string{"aborts_per_second", "error_responses_per_second"}

// Detect implements Detector.
//
// Clear rule while frozen: an incident's finding persists while its onset
// rule holds against the levels frozen at its onset. On an engine: the
// arrivals MinArrivalGrowth times the frozen arrivals, the arrivals per
// completion MinAmplification times the frozen ratio, the failures at
// MinFailuresPerSecond (the absolute floor) and FailureBaselineRatio times
// the frozen rate, and retries beyond the offered load (estimated from the
// frozen arrivals up). Behind the gateway: its retries at
// MinRetriesPerSecond and FailureBaselineRatio times the frozen rate, at
// MinAmplification attempts per client request (absolute); one its floor
// alone decided stays judged by the floor alone (NoBaseline). It has no
// peers' reference: a retry loop is a change in the replica's own
// traffic, which its peers' levels do not describe.
func (d *RetryAvalancheDetector) Detect(w Window, now time.Time) []Finding {
	t := trafficOf(w, d.cfg.ArrivalEndpoints)
	if t.gateway {
		return d.gateway(w, now, t)
	}
	return d.engine(w, now, t)
}

// backlog is the queue's growth over the range: its last quarter against
// the quarter ending half a range earlier.
type backlog struct {
	m       measure
	name    string
	growing bool // super-linear: the loop has engaged
}

func (d *RetryAvalancheDetector) backlog(w Window, now time.Time, sel Selector, name string) backlog {
	c := d.cfg
	b := backlog{name: name}
	b.m.now, b.m.nowOK = w.Avg(sel, now.Add(-c.Range/4), now)
	b.m.base, b.m.baseOK = w.Avg(sel, now.Add(-c.Range*3/4), now.Add(-c.Range/2))
	b.growing = b.m.nowOK && b.m.baseOK && b.m.now >= c.MinBacklog && b.m.now >= c.BacklogGrowthRatio*max(b.m.base, 1)
	return b
}

func (b backlog) evidence(c RetryAvalancheConfig) Evidence {
	return b.m.evidence(b.name+" (baseline: half a range earlier)", "",
		fmt.Sprintf(">= %sx and >= %s for critical", num(c.BacklogGrowthRatio), num(c.MinBacklog)))
}

// periods are the range and baseline ending at now, and whether the
// range saw enough client requests for ratios to mean something.
func (d *RetryAvalancheDetector) periods(w Window, now time.Time, t clientTraffic) (periods, bool) {
	p := newPeriods(now, d.cfg.Range, d.cfg.Baseline)
	count, ok := w.Increase(t.arrivals, p.rangeStart, now)
	return p, ok && count >= d.cfg.MinRequests
}

// engine judges an SGLang server from its own counters.
func (d *RetryAvalancheDetector) engine(w Window, now time.Time, t clientTraffic) []Finding {
	c := d.cfg
	p, ok := d.periods(w, now, t)
	if !ok {
		return nil
	}
	arrivals, frozen := c.engineArrivals(w, now, t)
	cmp := comparisonOf(w, RetryAvalanche)
	if !arrivals.nowOK || !arrivals.baseOK || !atLeastTimes(arrivals.now, arrivals.base, c.MinArrivalGrowth) {
		return nil
	}

	// Amplification: arrivals per completion now, against the baseline's.
	// Steady traffic sits near 1 (or whatever the mix makes it); retries
	// push it up because a retried request arrives twice but completes once.
	completions := p.rate(w, t.completions)
	context := levelSet{}
	cmp.context(context, retryCompletions, &completions)
	amp := measure{}
	baseAmp := 1.0
	if completions.nowOK {
		amp.now, amp.nowOK = arrivals.now/max(completions.now, 1e-9), true
		if completions.baseOK && completions.base > 0 {
			amp.base, amp.baseOK = arrivals.base/completions.base, true
		}
		if frozen {
			amp.base, amp.baseOK = cmp.level(retryAmp)
		}
		// No baseline completions: compare against balance (1 arrival per completion).
		if amp.baseOK {
			baseAmp = amp.base
		}
		if amp.now < c.MinAmplification*baseAmp {
			return nil
		}
		// Cap for display: a stalled server makes it unbounded.
		amp.now = min(amp.now, 1e6)
	}

	failureSels := t.retriable()
	failureNames := []string{"aborted requests/s", "5xx/408/429/499 responses/s"}
	var failureParts []measure
	for _, sel := range failureSels {
		failureParts = append(failureParts, p.rate(w, sel))
	}
	failures := sum(failureParts...)
	if frozen {
		cmp.onto(retryFailures, &failures)
	}
	for i := range failureParts {
		cmp.context(context, retryFailureParts[i], &failureParts[i])
	}
	if !failures.nowOK || failures.now < c.MinFailuresPerSecond {
		return nil
	}
	if failures.baseOK && !atLeastTimes(failures.now, failures.base, c.FailureBaselineRatio) {
		return nil
	}

	// Retry evidence: arrivals beyond the offered load since arrivals grew.
	offered := c.freshTraffic(w, now, t, arrivals.base)
	retried := arrivals.now - offered
	if retried < (c.MinAmplification-1)*offered {
		return nil // the growth is fresh traffic: overload, not a retry loop
	}

	bl := d.backlog(w, now, Sel(series.NumQueueReqs), "queued requests")
	if !w.Has(series.NumQueueReqs) {
		bl = d.backlog(w, now, t.active, "active HTTP requests")
	}
	sev := Warning
	if bl.growing || (amp.nowOK && amp.now >= c.CriticalAmplification*max(amp.base, 1)) {
		sev = Critical
	}
	e2e := p.quantile(w, 0.99, series.E2ERequestLatency)
	cmp.context(context, retryE2EP99, &e2e)
	f := finding(RetryAvalanche, w, sev, LayerClient)
	kept := levelSet{}
	kept.base(retryArrivals, arrivals)
	kept.base(retryAmp, amp)
	kept.base(retryFailures, failures)
	maps.Copy(kept, context)
	f.Baselines = kept.orNil()
	f.Evidence = append(f.Evidence,
		Evidence{Name: "retried arrivals/s (beyond the offered load)", Value: retried, Unit: "/s",
			Threshold: fmt.Sprintf(">= %s%% of the offered load", num(100*(c.MinAmplification-1))),
			Limit:     (c.MinAmplification - 1) * offered, HasLimit: true},
		Evidence{Name: "offered load/s (highest fresh arrivals since the growth began)", Value: offered, Unit: "/s"},
		arrivals.evidence("arrivals/s", "/s", fmt.Sprintf(">= %sx baseline", num(c.MinArrivalGrowth))).WithLimit(c.MinArrivalGrowth*arrivals.base),
	)
	if completions.nowOK {
		f.Evidence = append(f.Evidence,
			completions.evidence("completions/s", "/s", "").AsLowerWorse(),
			amp.evidence("arrivals per completion", "", fmt.Sprintf(">= %sx baseline (critical >= %sx)", num(c.MinAmplification), num(c.CriticalAmplification))).
				WithLimit(c.MinAmplification*baseAmp),
		)
	}
	f.Evidence = append(f.Evidence, failures.evidence("client-visible failures/s", "/s",
		fmt.Sprintf(">= %s/s and >= %sx baseline", num(c.MinFailuresPerSecond), num(c.FailureBaselineRatio))).
		WithLimit(floorOrTimesBase(failures, c.MinFailuresPerSecond, c.FailureBaselineRatio)))
	for i, part := range failureParts {
		if part.nowOK {
			f.Evidence = append(f.Evidence, part.evidence(failureNames[i], "/s", ""))
		}
	}
	if bl.m.nowOK {
		f.Evidence = append(f.Evidence, bl.evidence(c))
	}
	if e2e.nowOK {
		f.Evidence = append(f.Evidence, e2e.evidence("end-to-end latency p99", "s", ""))
	}

	f.Summary = fmt.Sprintf("Retry avalanche: %s of %s requests/s are clients retrying failed requests (fresh traffic about %s/s)",
		num(retried), num(arrivals.now), num(offered))
	if completions.nowOK {
		f.Summary += fmt.Sprintf("; only %s/s complete", num(completions.now))
	}
	var diag strings.Builder
	fmt.Fprintf(&diag, "Client layer: clients are timing out and retrying. Fresh traffic is about %s requests/s (%s), but %s/s arrive: the other %s/s are retries of the %s failed requests/s (aborts, timeouts, 5xx/429). ",
		num(offered), c.freshTrafficBasis(arrivals), num(arrivals.now), num(retried), num(failures.now))
	if completions.nowOK {
		fmt.Fprintf(&diag, "Arrivals per completion is %s: retried requests arrive again without adding finished work. ", vsBaseline(amp, ""))
	}
	if bl.growing {
		fmt.Fprintf(&diag, "The %s grew from %s to %s within half a range: the feedback loop has engaged (slower service -> more timeouts -> more retries). ",
			bl.name, num(bl.m.base), num(bl.m.now))
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

// engineArrivals is an engine's arrival rate over the range and over the
// baseline before it, the baseline frozen at the incident's onset while
// one is open (frozen).
func (c RetryAvalancheConfig) engineArrivals(w Window, now time.Time, t clientTraffic) (arrivals measure, frozen bool) {
	arrivals = newPeriods(now, c.Range, c.Baseline).rate(w, t.arrivals)
	cmp := comparisonOf(w, RetryAvalanche)
	if frozen = cmp.frozen(retryArrivals); frozen {
		cmp.onto(retryArrivals, &arrivals)
	}
	return arrivals, frozen
}

// freshTraffic is the offered load behind an engine's arrivals at now,
// given their baseline rate base (0: unknown): the highest rate of
// arrivals minus failed requests since the arrivals grew past
// MinArrivalGrowth times base, never below base. retry_avalanche pages on
// the arrivals beyond it, and error_rate reads the same figure to tell
// overload from retries, so the pages of one incident give one number.
func (c RetryAvalancheConfig) freshTraffic(w Window, now time.Time, t clientTraffic, base float64) float64 {
	return offeredLoad(w, now, t.arrivals, t.retriable(), c.Range/4, c.Baseline, c.MinArrivalGrowth*base, base)
}

// freshTrafficBasis says, for a page, how freshTraffic estimated the fresh
// traffic from arrivals measured by engineArrivals, with their baseline.
func (c RetryAvalancheConfig) freshTrafficBasis(arrivals measure) string {
	return "the highest rate of arrivals minus failed requests since arrivals began to grow; baseline " + num(arrivals.base) + "/s"
}

// offeredLoad estimates the fresh traffic behind the arrivals: the highest
// rate of arrivals minus failed requests over slices of step, walking back
// from now at most maxBack, stopping at the first slice whose arrivals fall
// below stopBelow (0: never), and never below floor. A failed request that
// is retried arrives again after its failure, so retries cannot raise the
// estimate; a surge of new traffic arrives before its failures do, and
// sets it.
func offeredLoad(w Window, now time.Time, arrivals Selector, failures []Selector, step, maxBack time.Duration, stopBelow, floor float64) float64 {
	offered := floor
	for end := now; now.Sub(end) < maxBack; end = end.Add(-step) {
		from := end.Add(-step)
		arr, ok := w.Rate(arrivals, from, end)
		if !ok || arr < stopBelow {
			break
		}
		var failed float64
		for _, sel := range failures {
			if v, ok := w.Rate(sel, from, end); ok {
				failed += v
			}
		}
		offered = max(offered, arr-failed)
	}
	return offered
}

// gateway judges the model gateway from the router's retry counters: its
// retries are the evidence, and the page leads with them.
func (d *RetryAvalancheDetector) gateway(w Window, now time.Time, t clientTraffic) []Finding {
	c := d.cfg
	p, ok := d.periods(w, now, t)
	if !ok {
		return nil
	}
	retries := p.rate(w, t.retries)
	cmp := comparisonOf(w, RetryAvalanche)
	frozen := cmp.frozen(retryRetries)
	switch {
	case cmp.floorOnly():
		forgetBaseline(&retries)
	case frozen:
		cmp.onto(retryRetries, &retries)
	}
	if !retries.nowOK || retries.now < c.MinRetriesPerSecond ||
		(retries.baseOK && !atLeastTimes(retries.now, retries.base, c.FailureBaselineRatio)) {
		return nil
	}
	clients := p.rate(w, t.arrivals)
	if !clients.nowOK || clients.now <= 0 {
		return nil
	}
	// Upstream attempts per client request: one when nothing is retried.
	attempts := p.rate(w, t.attempts)
	exhausted := p.rate(w, Sel(series.GatewayRetriesExhaustedTotal))
	amp, attemptsName := measure{}, "upstream attempts per client request"
	if attempts.nowOK && attempts.now > 0 {
		amp.now, amp.nowOK = attempts.now/clients.now, true
		if attempts.baseOK && clients.baseOK && clients.base > 0 {
			amp.base, amp.baseOK = attempts.base/clients.base, true
		}
	} else {
		attemptsName = "upstream attempts per client request (requests + retries)"
		amp.now, amp.nowOK = (clients.now+retries.now)/clients.now, true
		if clients.baseOK && retries.baseOK && clients.base > 0 {
			amp.base, amp.baseOK = (clients.base+retries.base)/clients.base, true
		}
	}
	if amp.now < c.MinAmplification {
		return nil
	}
	if frozen {
		amp.base, amp.baseOK = cmp.level(retryAttemptsAmp)
	}
	context := levelSet{}
	cmp.context(context, retryClients, &clients)
	cmp.context(context, retryAttempts, &attempts)
	cmp.context(context, retryExhausted, &exhausted)
	kept := levelSet{}
	kept.base(retryRetries, retries)
	kept.base(retryAttemptsAmp, amp)
	if _, ok := kept[retryRetries]; !ok {
		kept = levelSet{NoBaseline: 1}
	}
	maps.Copy(kept, context)
	openBreakers, okBreakers := w.Max(Selector{Name: series.GatewayCircuitBreakerState, Combine: CombineMax}, p.rangeStart, now)
	bl := d.backlog(w, now, t.active, "in-flight requests to workers")

	sev := Warning
	if bl.growing || amp.now >= c.CriticalAmplification {
		sev = Critical
	}
	f := finding(RetryAvalanche, w, sev, LayerClient)
	f.Baselines = kept.orNil()
	f.Evidence = append(f.Evidence,
		retries.evidence("router retries/s", "/s", fmt.Sprintf(">= %s/s and >= %sx baseline", num(c.MinRetriesPerSecond), num(c.FailureBaselineRatio))).
			WithLimit(floorOrTimesBase(retries, c.MinRetriesPerSecond, c.FailureBaselineRatio)),
		amp.evidence(attemptsName, "", fmt.Sprintf(">= %s (critical >= %s)", num(c.MinAmplification), num(c.CriticalAmplification))).WithLimit(c.MinAmplification),
		clients.evidence("client requests/s", "/s", ""),
	)
	if attempts.nowOK {
		f.Evidence = append(f.Evidence, attempts.evidence("upstream attempts/s", "/s", ""))
	}
	if exhausted.nowOK {
		f.Evidence = append(f.Evidence, exhausted.evidence("client requests failed after exhausting retries/s", "/s", ""))
	}
	if okBreakers && openBreakers > 0 {
		f.Evidence = append(f.Evidence, Evidence{Name: "circuit breaker open or half-open on some worker (0 closed, 1 open, 2 half-open)", Value: openBreakers})
	}
	if bl.m.nowOK {
		f.Evidence = append(f.Evidence, bl.evidence(c))
	}

	f.Summary = fmt.Sprintf("Router retries %s/s: %s upstream attempts per client request", num(retries.now), num(amp.now))
	if amp.baseOK {
		f.Summary += fmt.Sprintf(" (baseline %s)", num(amp.base))
	}
	if exhausted.nowOK && exhausted.now > 0 {
		f.Summary += fmt.Sprintf("; %s client requests/s fail after exhausting retries", num(exhausted.now))
	}
	var diag strings.Builder
	fmt.Fprintf(&diag, "Gateway layer: the router is retrying. %s client requests/s become %s upstream attempts per request (%s retries/s): every failed or timed-out attempt is sent again, so the workers see a multiple of the real traffic. ",
		num(clients.now), num(amp.now), num(retries.now))
	if exhausted.nowOK && exhausted.now > 0 {
		fmt.Fprintf(&diag, "%s requests/s still fail after the last retry. ", num(exhausted.now))
	}
	if okBreakers && openBreakers > 0 {
		diag.WriteString("Circuit breakers are open on some workers: their traffic lands on the rest. ")
	}
	if bl.growing {
		fmt.Fprintf(&diag, "In-flight requests to the workers grew from %s to %s within half a range: the loop has engaged. ", num(bl.m.base), num(bl.m.now))
	}
	diag.WriteString("The retries start where an upstream fails or slows: look at the workers' own pages (preemption storm, KV saturation, engine hang, overload) for the trigger. Adding workers alone does not end it while each failure is multiplied.")
	f.Diagnosis = diag.String()
	withUpstream(&f, readUpstream(w, p.rangeStart, now))
	f.Emergency = []string{
		"Cut the router's retries now: lower --retry-max-retries (default 5) or disable retries, so one client request is one upstream attempt again.",
		"Enforce a concurrency limit at the gateway and answer the excess at once with 429/503 and Retry-After.",
		"Then fix or add the upstream capacity that made the attempts fail.",
	}
	f.RootCause = []string{
		"A retry budget at the gateway (retries at most a small share of requests) with backoff and jitter (--retry-initial-backoff-ms, --retry-backoff-multiplier, --retry-jitter-factor).",
		"Circuit breakers tuned to take a failing worker out before retries pile on it (--cb-failure-threshold).",
		"Request-level timeouts at the router shorter than the clients' own, so abandoned attempts are cancelled upstream.",
	}
	return []Finding{f}
}

// RetryAvalancheConfig tunes the client retry avalanche detector.
type RetryAvalancheConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window rates are read over; backlog growth
	// compares its last quarter with the quarter ending half a Range ago.
	Range time.Duration `yaml:"range" doc:"recent window rates are read over"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline" doc:"the \"normal\" window just before it"`
	// ArrivalEndpoints are the endpoint (engine) or path (gateway) label
	// values that carry inference traffic, "|"-separated. Health checks,
	// /metrics and /v1/loads are excluded on purpose: the watchdog's own
	// polling must not count as arrivals.
	ArrivalEndpoints string `yaml:"arrival_endpoints" doc:"endpoint (engine) or path (gateway) values that carry inference traffic"`
	// MinRequests is the fewest arrivals in Range for a verdict; below it
	// ratios are noise.
	MinRequests float64 `yaml:"min_requests" doc:"fewer arrivals in range: no verdict"`
	// MinArrivalGrowth: arrivals per second now over baseline must reach
	// it — retries add load.
	MinArrivalGrowth float64 `yaml:"min_arrival_growth" doc:"arrivals/s now over baseline"`
	// MinAmplification: (arrivals/completions now) over (arrivals/
	// completions in the baseline) must reach it — retries add arrivals
	// without adding completed work. An organic surge raises both. On an
	// engine it also sets the retry evidence: arrivals must exceed the
	// offered load (the highest rate of arrivals minus failed requests
	// since the growth began) by MinAmplification-1 of it. On a gateway,
	// upstream attempts per client request must reach it.
	MinAmplification float64 `yaml:"min_amplification" doc:"(arrivals/completions) now over baseline"`
	// MinFailuresPerSecond is the absolute floor of client-visible failures
	// on an engine (aborted requests, 5xx/408/429/499 responses).
	MinFailuresPerSecond float64 `yaml:"min_failures_per_second" doc:"aborts / 5xx / 408 / 429 / 499 floor"`
	// FailureBaselineRatio: failures per second (gateway: router retries
	// per second) must also be at least this many times the baseline.
	FailureBaselineRatio float64 `yaml:"failure_baseline_ratio" doc:"and at least 3x the baseline"`
	// MinRetriesPerSecond is the floor of the gateway's retries
	// (smg_worker_retries_total, legacy sgl_router_retries_total).
	MinRetriesPerSecond float64 `yaml:"min_retries_per_second" doc:"gateway: router retries floor (and failure_baseline_ratio x baseline)"`
	// CriticalAmplification makes the finding critical: arrivals per
	// completion at least this many times the baseline's (engine), or
	// this many upstream attempts per client request (gateway).
	CriticalAmplification float64 `yaml:"critical_amplification" doc:"arrivals per completion vs baseline (engine), attempts per request (gateway): critical"`
	// BacklogGrowthRatio and MinBacklog make the finding critical: the
	// backlog (queued requests; in-flight requests on a gateway) in the last
	// quarter of Range is at least this many times what it was half a Range
	// earlier, and at least MinBacklog — the feedback loop has engaged.
	BacklogGrowthRatio float64 `yaml:"backlog_growth_ratio" doc:"backlog doubled within half a range ..."`
	MinBacklog         float64 `yaml:"min_backlog" doc:"... and at least this big: critical"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (RetryAvalancheConfig) defaults() RetryAvalancheConfig {
	return RetryAvalancheConfig{
		Enabled:               true,
		Range:                 2 * time.Minute,
		Baseline:              time.Hour,
		ArrivalEndpoints:      DefaultInferenceEndpoints,
		MinRequests:           100,
		MinArrivalGrowth:      1.5,
		MinAmplification:      1.3,
		MinFailuresPerSecond:  0.2,
		FailureBaselineRatio:  3,
		MinRetriesPerSecond:   0.5,
		CriticalAmplification: 2,
		BacklogGrowthRatio:    2,
		MinBacklog:            10,
	}
}

// The methods below make RetryAvalancheConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c RetryAvalancheConfig) class() Class                   { return RetryAvalanche }
func (c RetryAvalancheConfig) enabled() bool                  { return c.Enabled }
func (c RetryAvalancheConfig) disabled() RetryAvalancheConfig { c.Enabled = false; return c }
func (c RetryAvalancheConfig) usesTriage() bool               { return false }
func (c RetryAvalancheConfig) needs() []need {
	return []need{{class: RetryAvalanche, what: "the HTTP arrival counter",
		anyOf: [][]string{{series.HTTPRequestsTotal}}, afterTraffic: true}}
}
func (c RetryAvalancheConfig) reads() []string {
	return append(clientTrafficFamilies(), series.NumQueueReqs, series.E2ERequestLatency,
		series.GatewayRetriesExhaustedTotal, series.GatewayCircuitBreakerState)
}
func (c RetryAvalancheConfig) lookback() time.Duration {
	return c.Range + c.Baseline
}

func (c RetryAvalancheConfig) build(env buildEnv) Detector { return &RetryAvalancheDetector{cfg: c} }

func (c RetryAvalancheConfig) oneShot(lookback time.Duration, samples int) (RetryAvalancheConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	return c, OneShot{Judged: false, Note: "needs history: arrival growth, amplification and failure growth are all relative to a baseline — look at the aborts and HTTP in-flight above, or ask the daemon"}
}

func (c RetryAvalancheConfig) validate(e *configErrors) {
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.check(strings.Trim(c.ArrivalEndpoints, "|") != "" && !strings.Contains(c.ArrivalEndpoints, "||"),
		"arrival_endpoints", "must list endpoints separated by \"|\", without empty entries, got %q", c.ArrivalEndpoints)
	e.positive("min_requests", c.MinRequests)
	e.check(c.MinArrivalGrowth > 1, "min_arrival_growth", "must be greater than 1, got %v", c.MinArrivalGrowth)
	e.check(c.MinAmplification > 1, "min_amplification", "must be greater than 1, got %v", c.MinAmplification)
	e.positive("min_failures_per_second", c.MinFailuresPerSecond)
	e.atLeastOne("failure_baseline_ratio", c.FailureBaselineRatio)
	e.positive("min_retries_per_second", c.MinRetriesPerSecond)
	e.check(c.CriticalAmplification >= c.MinAmplification, "critical_amplification",
		"must be at least min_amplification (%v), got %v", c.MinAmplification, c.CriticalAmplification)
	e.check(c.BacklogGrowthRatio > 1, "backlog_growth_ratio", "must be greater than 1, got %v", c.BacklogGrowthRatio)
	e.check(c.MinBacklog >= 0, "min_backlog", "must not be negative, got %v", c.MinBacklog)
}

// severities lists what its findings can carry; its runbook describes each.
func (c RetryAvalancheConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: on the mechanism chain, before queue_latency: in a retry
// feedback loop the loop is what must be broken, and the queue latency it
// causes is listed under it, not the other way round.
// position: a retry loop feeds on itself once started (positive feedback),
// so it does not clear with its cause and keeps its own steps.
func (c RetryAvalancheConfig) position(Finding) position { return position{stage: 48, sustains: true} }

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c RetryAvalancheConfig) doc() doc {
	return doc{
		name:     "Retry avalanche",
		means:    "client retries feeding on themselves",
		signals:  "only with evidence of retries: the gateway's own retries and upstream attempts per client request (`smg_*`, legacy `sgl_router_*`, the page leads with the amplification), or engine arrivals beyond the offered load. A surge shed with 503 is overload (`error_rate`), not an avalanche",
		settings: "Client retry positive feedback: arrivals outgrow completions, failures and the backlog rise, with evidence of retries (gateway retries, or arrivals beyond the offered load). An organic surge (both up, few failures) is not one; overload without retries is error_rate's.",
	}
}
