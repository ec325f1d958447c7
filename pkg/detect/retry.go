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

// RetryAvalancheConfig tunes the client retry avalanche detector.
type RetryAvalancheConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window rates are read over; backlog growth
	// compares its last quarter with the quarter ending half a Range ago.
	Range time.Duration `yaml:"range"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline"`
	// ArrivalEndpoints are the endpoint (engine) or path (gateway) label
	// values that carry inference traffic, "|"-separated. Health checks,
	// /metrics and /v1/loads are excluded on purpose: the watchdog's own
	// polling must not count as arrivals.
	ArrivalEndpoints string `yaml:"arrival_endpoints"`
	// MinRequests is the fewest arrivals in Range for a verdict; below it
	// ratios are noise.
	MinRequests float64 `yaml:"min_requests"`
	// MinArrivalGrowth: arrivals per second now over baseline must reach
	// it — retries add load.
	MinArrivalGrowth float64 `yaml:"min_arrival_growth"`
	// MinAmplification: (arrivals/completions now) over (arrivals/
	// completions in the baseline) must reach it — retries add arrivals
	// without adding completed work. An organic surge raises both.
	MinAmplification float64 `yaml:"min_amplification"`
	// MinFailuresPerSecond is the absolute floor of client-visible failures
	// (engine: aborted requests, 5xx/408/429/499 responses; gateway: worker
	// retries and 5xx/408/429 responses).
	MinFailuresPerSecond float64 `yaml:"min_failures_per_second"`
	// FailureBaselineRatio: failures per second must also be at least this
	// many times the baseline.
	FailureBaselineRatio float64 `yaml:"failure_baseline_ratio"`
	// BacklogGrowthRatio and MinBacklog make the finding critical: the
	// backlog (queued requests; in-flight requests on a gateway) in the last
	// quarter of Range is at least this many times what it was half a Range
	// earlier, and at least MinBacklog — the feedback loop has engaged.
	BacklogGrowthRatio float64 `yaml:"backlog_growth_ratio"`
	MinBacklog         float64 `yaml:"min_backlog"`
}

// defaultRetryAvalanche returns the production settings, tuned for a 5 s scrape
// interval.
func defaultRetryAvalanche() RetryAvalancheConfig {
	return RetryAvalancheConfig{
		Enabled:              true,
		Range:                2 * time.Minute,
		Baseline:             time.Hour,
		ArrivalEndpoints:     defaultInferenceEndpoints,
		MinRequests:          100,
		MinArrivalGrowth:     1.5,
		MinAmplification:     1.3,
		MinFailuresPerSecond: 0.2,
		FailureBaselineRatio: 3,
		BacklogGrowthRatio:   2,
		MinBacklog:           10,
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
	e.check(c.BacklogGrowthRatio > 1, "backlog_growth_ratio", "must be greater than 1, got %v", c.BacklogGrowthRatio)
	e.check(c.MinBacklog >= 0, "min_backlog", "must not be negative, got %v", c.MinBacklog)
}
