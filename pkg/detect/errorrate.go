package detect

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ErrorRate is the availability class: users are getting errors.
const ErrorRate Class = "error_rate"

// ErrorRateDetector pages when a share of the requests users send fails,
// against an absolute objective and whatever the cause: a server error, a
// request shed with 429/503 (--max-queued-requests, a gateway limit) or a
// request aborted because its client gave up. Every other incident class
// ends here, so when one of them fires on the same replica this finding is
// listed under it (Explains); alone, it is usually plain overload, and
// the diagnosis says so when arrivals outgrow completions without any
// sign of client retries.
type ErrorRateDetector struct {
	cfg ErrorRateConfig
	// retry is retry_avalanche's settings: an engine's fresh traffic is
	// estimated by its rule, so both pages give one figure.
	retry RetryAvalancheConfig
}

// Class implements Detector.
func (d *ErrorRateDetector) Class() Class { return ErrorRate }

// clientTraffic are the series that say what users asked a replica for and
// what they got, on an engine or on the model gateway.
type clientTraffic struct {
	gateway bool
	// arrivals are requests received on the inference endpoints.
	arrivals Selector
	// answered are the responses on the inference endpoints, any status.
	answered Selector
	// hasAnswered: the replica exposes per-status responses; without them
	// (releases before the HTTP middleware counters) answered requests are
	// completions plus aborts and only aborts count as failures.
	hasAnswered bool
	// completions are requests served to the end (engine: finished
	// requests; gateway: 2xx responses).
	completions Selector
	// aborts are requests abandoned by their clients (engine only; zero
	// Name on a gateway).
	aborts Selector
	// retries are the gateway's retries of upstream attempts (zero Name on
	// an engine).
	retries Selector
	// attempts are the gateway's upstream attempts, one per try.
	attempts Selector
	// active are the requests in flight (engine: in the HTTP layer;
	// gateway: sent to workers).
	active Selector
}

// trafficOf picks the replica's client-facing series by what it exposes,
// not by the target's kind: the engines behind a gateway's /engine_metrics
// are engines.
func trafficOf(w Window, endpoints string) clientTraffic {
	if w.Has(series.GatewayHTTPRequestsTotal) || w.Has(series.GatewayHTTPResponsesTotal) {
		// The trailing empty alternative admits series without a path:
		// the legacy gateway's client-facing counters carry none.
		paths := []Match{{Label: "path", Value: endpoints + "|"}}
		answered := Selector{Name: series.GatewayHTTPResponsesTotal, Match: paths}
		return clientTraffic{
			gateway:     true,
			arrivals:    Selector{Name: series.GatewayHTTPRequestsTotal, Match: paths},
			answered:    answered,
			hasAnswered: w.Has(series.GatewayHTTPResponsesTotal),
			completions: withStatus(answered, "2", true),
			retries:     Sel(series.GatewayRetriesTotal),
			attempts:    Sel(series.GatewayUpstreamResponses),
			active:      Sel(gatewayWorkerRequestsActive),
		}
	}
	return clientTraffic{
		arrivals:    inference(series.HTTPRequestsTotal, endpoints),
		answered:    inference(series.HTTPResponsesTotal, endpoints),
		hasAnswered: w.Has(series.HTTPResponsesTotal),
		completions: Sel(series.NumRequestsTotal),
		aborts:      Sel(series.NumAbortedRequestsTotal),
		active:      inference(series.HTTPRequestsActive, endpoints),
	}
}

// retriable are the failed requests a client or gateway may send again:
// aborts (timeouts) and error responses.
func (t clientTraffic) retriable() []Selector {
	if t.gateway {
		return []Selector{withStatus(t.answered, "5|408|429", true)}
	}
	return []Selector{t.aborts, withStatus(t.answered, "5|408|429|499", true)}
}

// withStatus narrows a responses selector to status codes.
func withStatus(sel Selector, codes string, prefix bool) Selector {
	out := sel
	out.Match = append(append([]Match(nil), sel.Match...), Match{Label: "status_code", Value: codes, Prefix: prefix})
	return out
}

// failures is what went wrong with the requests of one window, in requests.
type failures struct {
	answered     float64 // requests answered (denominator)
	serverErrors float64 // 5xx other than 503
	sheds        float64 // 429 and 503: refused for lack of capacity
	aborts       float64 // abandoned by their clients
}

func (f failures) failed() float64 { return f.serverErrors + f.sheds + f.aborts }

// share is the failed fraction of the answered requests, at most 1.
func (f failures) share() float64 { return min(f.failed()/f.answered, 1) }

// countFailures reads the failures of (from, to] with read (Window.Increase
// for requests, Window.Rate for requests per second); ok is false when the
// replica exposes no answered requests there.
func countFailures(t clientTraffic, read func(Selector, time.Time, time.Time) (float64, bool), from, to time.Time) (failures, bool) {
	inc := func(sel Selector) float64 {
		if sel.Name == "" {
			return 0
		}
		v, ok := read(sel, from, to)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0
		}
		return v
	}
	var f failures
	f.aborts = inc(t.aborts)
	if !t.hasAnswered {
		done, ok := read(t.completions, from, to)
		if !ok || math.IsInf(done, 0) {
			return f, false
		}
		f.answered = done + f.aborts
		return f, f.answered > 0
	}
	answered, ok := read(t.answered, from, to)
	if !ok || !(answered > 0) || math.IsInf(answered, 0) {
		return f, false
	}
	f.answered = answered
	shed503 := inc(withStatus(t.answered, "503", false))
	f.sheds = shed503 + inc(withStatus(t.answered, "429", false))
	f.serverErrors = max(inc(withStatus(t.answered, "5", true))-shed503, 0)
	// An aborted request is usually answered too (the middleware records
	// its status), so the denominator already holds it; where aborts
	// outnumber what the middleware recorded, the requests are at least
	// the successful ones plus the failed ones, or the share would read
	// 100% beside requests that completed. A 2xx is no success by itself:
	// a stream answers 200 before it ends, so a stream aborted later is a
	// 2xx and an abort at once. Where the replica counts the requests it
	// finished, no more of the 2xx succeeded than that.
	succeeded := inc(withStatus(t.answered, "2", true))
	if done, ok := read(t.completions, from, to); ok && done >= 0 && !math.IsInf(done, 0) {
		succeeded = min(succeeded, done)
	}
	f.answered = max(f.answered, succeeded+f.failed())
	return f, true
}

// AnsweredRequests are the inference requests a replica answered over
// (from, to] and how many of them failed (5xx, shed with 429/503, aborted),
// counted exactly as the error rate detector counts them, on an engine or
// a gateway. read is how a counter's increase over a range is taken
// (Window.Increase, or a caller's own partition of time); ok is false when
// the replica exposes no answered requests there.
func AnsweredRequests(w Window, endpoints string, read func(Selector, time.Time, time.Time) (float64, bool), from, to time.Time) (answered, failed float64, ok bool) {
	f, ok := countFailures(trafficOf(w, endpoints), read, from, to)
	if !ok {
		return 0, 0, false
	}
	return f.answered, min(f.failed(), f.answered), true
}

// Detect implements Detector.
func (d *ErrorRateDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	from := now.Add(-c.Range)
	t := trafficOf(w, c.InferenceEndpoints)
	f, ok := countFailures(t, w.Increase, from, now)
	if !ok || f.answered < c.MinRequests || f.failed() < c.MinFailedRequests {
		return nil
	}
	// The same per second, for people.
	perSec, ok := countFailures(t, w.Rate, from, now)
	if !ok {
		return nil
	}
	share := f.share()
	if math.IsNaN(share) || share < c.WarningRatio {
		return nil
	}
	sev := Warning
	if share >= c.CriticalRatio {
		sev = Critical
	}
	layer := LayerProcess
	switch failed := f.failed(); {
	case f.sheds >= failed/2:
		layer = LayerQueue
	case f.aborts >= failed/2:
		layer = LayerClient
	}

	arrivals, okArr := w.Rate(t.arrivals, from, now)
	completions, okDone := w.Rate(t.completions, from, now)
	// Retries: the gateway counts its own; on an engine, arrivals beyond
	// the offered load are retried requests.
	var retries, offered float64
	var base measure // the engine's arrivals against their baseline
	retrying, retriesUnknown := false, false
	switch {
	case !okArr || arrivals <= 0:
	case t.gateway:
		retries, _ = w.Rate(t.retries, from, now)
		retrying = retries > 0 && retries >= (c.RetriedArrivalRatio-1)*arrivals
	default:
		base, _ = d.retry.engineArrivals(w, now, t)
		// Without the arrivals' baseline the fresh-traffic estimate has no
		// floor, and the failures of a backlog that queued before the
		// range (a storm's aborts) take it to about zero: every arrival
		// would look retried.
		retriesUnknown = !base.baseOK
		if !retriesUnknown {
			offered = d.retry.freshTraffic(w, now, t, base.base)
			retrying = arrivals >= c.RetriedArrivalRatio*offered
		}
	}
	overload := okArr && okDone && arrivals > 0 && arrivals >= c.OverloadArrivalRatio*completions &&
		f.sheds+f.aborts >= f.serverErrors && !retrying

	res := finding(ErrorRate, w, sev, layer)
	pct := func(v float64) float64 { return 100 * v }
	res.Evidence = append(res.Evidence,
		Evidence{Name: "failed share of requests", Value: share, Unit: "ratio",
			Threshold: fmt.Sprintf(">= %s%% (critical >= %s%%), with at least %s answered and %s failed requests in %s",
				num(pct(c.WarningRatio)), num(pct(c.CriticalRatio)), num(c.MinRequests), num(c.MinFailedRequests), ShortDuration(c.Range)),
			Limit: c.WarningRatio, HasLimit: true},
		Evidence{Name: "answered requests/s", Value: perSec.answered, Unit: "/s", SampleSize: true},
		Evidence{Name: "shed requests/s (429/503)", Value: perSec.sheds, Unit: "/s"},
		Evidence{Name: "server errors/s (5xx except 503)", Value: perSec.serverErrors, Unit: "/s"},
	)
	if !t.gateway {
		res.Evidence = append(res.Evidence, Evidence{Name: "aborted requests/s (clients gave up)", Value: perSec.aborts, Unit: "/s"})
	}
	if okArr && okDone {
		res.Evidence = append(res.Evidence,
			Evidence{Name: "arrivals/s", Value: arrivals, Unit: "/s"},
			Evidence{Name: "completions/s", Value: completions, Unit: "/s", LowerWorse: true})
	}
	if t.gateway && retries > 0 {
		res.Evidence = append(res.Evidence, Evidence{Name: "gateway retries/s", Value: retries, Unit: "/s"})
	}
	if !t.gateway && retrying {
		res.Evidence = append(res.Evidence, Evidence{Name: "offered load/s (highest fresh arrivals since the growth began)", Value: offered, Unit: "/s",
			Threshold: fmt.Sprintf("arrivals >= %sx it are retries", num(c.RetriedArrivalRatio))})
	}
	queued, okQueue := w.Avg(Sel(series.NumQueueReqs), now.Add(-c.Range), now)

	kinds := failureKinds(perSec)
	res.Summary = fmt.Sprintf("%s%% of requests failing over %s (%s)", num(pct(share)), ShortDuration(c.Range), kinds)
	var diag []string
	const lowerMaxTokens = "Lower max_tokens for the heaviest clients or routes: shorter answers free batch slots and KV sooner, so more requests complete."
	queueLine := func() {
		if okQueue {
			diag = append(diag, fmt.Sprintf("The waiting queue averaged %s requests over the last %s.", num(queued), ShortDuration(c.Range)))
			// In the evidence too, so the headline gives this queue, the
			// one the diagnosis cites, not the triage's over another span.
			res.Evidence = append(res.Evidence, Evidence{Name: avgOver("queued requests", c.Range), Value: queued})
		}
	}
	switch {
	case overload && retriesUnknown:
		// More arrive than complete, but fresh traffic cannot be told
		// from retries: the steps lead with what helps both.
		res.Summary += fmt.Sprintf(" — %s requests/s arrive, %s/s complete (retries not known)", num(arrivals), num(completions))
		diag = append(diag, fmt.Sprintf("Users are failing: %s%% of the requests of the last %s failed (%s), while requests arrive at %s/s and complete at %s/s.",
			num(pct(share)), ShortDuration(c.Range), kinds, num(arrivals), num(completions)))
		queueLine()
		diag = append(diag, "Whether that is more traffic than the replica can serve or clients retrying is not known: the arrivals have no baseline yet to weigh the fresh traffic against. Ask the calling services (or the gateway) whether they retry on timeout: a retry loop ends when clients fail fast and back off, not with capacity alone (the retry avalanche runbook).")
		res.Emergency = []string{
			"Shed at the gateway: a concurrency limit that answers the excess at once with 429/503 and Retry-After, so clients fail fast instead of waiting into a timeout; it breaks a retry loop and protects an overloaded replica alike.",
			"If the callers do not retry, scale out: add replicas, or move traffic to replicas with headroom.",
			lowerMaxTokens,
		}
	case overload:
		res.Summary += fmt.Sprintf(" — overload: %s requests/s arrive, %s/s complete", num(arrivals), num(completions))
		diag = append(diag, fmt.Sprintf("Overload: users are failing because capacity is short. %s%% of the requests of the last %s failed (%s), while requests arrive at %s/s and complete at %s/s.",
			num(pct(share)), ShortDuration(c.Range), kinds, num(arrivals), num(completions)))
		queueLine()
		// Overload may well have grown the arrivals: what tells it from
		// a retry loop is that they are fresh traffic.
		if t.gateway {
			diag = append(diag, fmt.Sprintf("No retries are visible (the gateway retries %s/s): this is more traffic than the workers can serve, not a retry loop.", num(retries)))
		} else {
			diag = append(diag, fmt.Sprintf("No client retries are visible: the fresh traffic is about %s/s (%s), and retried requests would lift the arrivals to %sx that or more; they are at %s/s. So far this is more traffic than the replica can serve, not a retry loop.",
				num(offered), d.retry.freshTrafficBasis(base), num(c.RetriedArrivalRatio), num(arrivals)))
		}
		if !t.gateway && f.sheds > 0 {
			diag = append(diag, "A streamed request the engine sheds gets its error as an event on an HTTP 200, so the 503 count understates the sheds; arrivals minus completions is the better measure of what is not served.")
		}
		res.Emergency = []string{
			"Scale out: add replicas, or move traffic to replicas with headroom.",
			"Shed at the gateway instead of the engine: a concurrency or rate limit at the router answers the excess at once with 429 and Retry-After, before it queues.",
			lowerMaxTokens,
		}
	case retrying && t.gateway:
		res.Summary += fmt.Sprintf(" — the gateway retries %s/s of %s client requests/s", num(retries), num(arrivals))
		diag = append(diag, fmt.Sprintf("Users are failing, and the gateway is retrying: %s retries/s against %s client requests/s. Retries multiply the load on the workers: this is a retry loop, and the retry avalanche runbook says how to break it.",
			num(retries), num(arrivals)))
		res.Emergency = []string{
			"Follow the retry avalanche runbook: cap retries at the gateway (--retry-max-retries) and enforce a concurrency limit so the excess fails fast.",
			"Then add capacity for the real traffic.",
		}
	case retrying:
		res.Summary += fmt.Sprintf(" — clients retrying: %s requests/s arrive for about %s/s of fresh traffic", num(arrivals), num(offered))
		diag = append(diag, fmt.Sprintf("Users are failing, and clients are retrying: %s requests/s arrive for about %s/s of fresh traffic (%s); the rest are failed requests sent again. This is a retry loop, and the retry avalanche runbook says how to break it.",
			num(arrivals), num(offered), d.retry.freshTrafficBasis(base)))
		res.Emergency = []string{
			"Follow the retry avalanche runbook: make clients fail fast (a concurrency limit at the gateway answering 429/503 with Retry-After) and have them back off.",
			"Then add capacity for the real traffic.",
		}
	case f.serverErrors >= f.sheds+f.aborts:
		diag = append(diag, fmt.Sprintf("Server errors: %s%% of the requests of the last %s failed (%s), mostly with 5xx other than 503 — the server fails requests it accepted.",
			num(pct(share)), ShortDuration(c.Range), kinds))
		res.Emergency = []string{
			"Look for a cause page on the same replica (engine hang, replica down, KV saturation, PD transfer failure) and follow it.",
			"Otherwise read the server log around the errors for tracebacks; if it keeps failing, take it out of rotation when the others can carry its traffic, then restart it (the restart " + restartDrops(w) + ").",
		}
	default:
		diag = append(diag, fmt.Sprintf("Users are failing: %s%% of the requests of the last %s failed (%s).", num(pct(share)), ShortDuration(c.Range), kinds))
		res.Emergency = []string{
			"Look for a cause page on the same replica (preemption storm, KV saturation, cache collapse, engine hang, retry avalanche) and follow its steps; this page resolves with it.",
			"If there is none, treat it as overload: add capacity, limit concurrency at the gateway, lower max_tokens.",
		}
	}
	if layer == LayerClient && !retrying {
		diag = append(diag, "Aborted requests are clients that disconnected before their answer, usually after waiting past their timeout.")
	}
	res.Diagnosis = sentence(diag...)
	if t.gateway {
		withUpstream(&res, readUpstream(w, now.Add(-c.Range), now))
	}
	res.RootCause = []string{
		"Size the fleet for peak arrivals with headroom, and autoscale on queue depth or arrival rate.",
		"Admission control at the gateway (concurrency and rate limits), with --max-queued-requests on the engine as the last line, so bursts are refused fast.",
		"A default and a ceiling for max_tokens on routes that do not need long answers.",
	}
	return []Finding{res}
}

// failureKinds says which kinds of failure the users see, from failures
// per second; a kind under a tenth of the failures is noise beside the
// others and left out.
func failureKinds(f failures) string {
	var parts []string
	some := func(v float64) bool { return v > 0 && v >= f.failed()/10 }
	if some(f.sheds) {
		parts = append(parts, num(f.sheds)+"/s shed with 429/503")
	}
	if some(f.serverErrors) {
		parts = append(parts, num(f.serverErrors)+"/s server errors")
	}
	if some(f.aborts) {
		parts = append(parts, num(f.aborts)+"/s aborted")
	}
	return strings.Join(parts, ", ")
}

// ErrorRateConfig tunes the error rate (availability) detector.
type ErrorRateConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the window the failed share is computed over.
	Range time.Duration `yaml:"range" doc:"window the failed share is computed over"`
	// InferenceEndpoints are the endpoint (engine) or path (gateway) label
	// values that carry inference traffic, "|"-separated; health checks
	// and /metrics are not users' requests.
	InferenceEndpoints string `yaml:"inference_endpoints" doc:"endpoint (engine) or path (gateway) values that carry inference traffic"`
	// MinRequests is the fewest answered requests in Range for a verdict:
	// on a quiet replica one failure is a large share and no outage.
	MinRequests float64 `yaml:"min_requests" doc:"fewer answered requests in range: no verdict"`
	// MinFailedRequests is the fewest failed requests in Range that page.
	MinFailedRequests float64 `yaml:"min_failed_requests" doc:"fewer failed requests in range: no verdict"`
	// WarningRatio and CriticalRatio are the failed shares (0-1) that make
	// the finding a warning and critical.
	WarningRatio  float64 `yaml:"warning_ratio" doc:"1% failing: warning"`
	CriticalRatio float64 `yaml:"critical_ratio" doc:"5% failing: critical"`
	// OverloadArrivalRatio: arrivals at least this many times completions,
	// with the failures being sheds or aborts and no retries seen, make
	// the diagnosis "overload".
	OverloadArrivalRatio float64 `yaml:"overload_arrival_ratio" doc:"arrivals/completions at or above, no retries: \"overload\""`
	// RetriedArrivalRatio tells retries from overload. On an engine,
	// arrivals at least this many times the offered load (estimated as
	// retry_avalanche estimates it, with its range and baseline) are
	// retries; on a gateway, retries at least (ratio-1) times the client
	// requests are.
	RetriedArrivalRatio float64 `yaml:"retried_arrival_ratio" doc:"arrivals this many times the offered load (retry_avalanche's estimate) are retries"`
}

// defaults are the production settings: an availability
// objective of 99% over two minutes, critical when one request in twenty
// fails, judged only with at least 60 requests (0.5/s) and 5 failures.
func (ErrorRateConfig) defaults() ErrorRateConfig {
	return ErrorRateConfig{
		Enabled:              true,
		Range:                2 * time.Minute,
		InferenceEndpoints:   DefaultInferenceEndpoints,
		MinRequests:          60,
		MinFailedRequests:    5,
		WarningRatio:         0.01,
		CriticalRatio:        0.05,
		OverloadArrivalRatio: 1.2,
		RetriedArrivalRatio:  1.3,
	}
}

func (c ErrorRateConfig) class() Class              { return ErrorRate }
func (c ErrorRateConfig) enabled() bool             { return c.Enabled }
func (c ErrorRateConfig) disabled() ErrorRateConfig { c.Enabled = false; return c }
func (c ErrorRateConfig) usesTriage() bool          { return false }
func (c ErrorRateConfig) lookback() time.Duration   { return c.Range }
func (c ErrorRateConfig) needs() []need {
	return []need{{class: ErrorRate, what: "responses by status",
		anyOf: [][]string{{series.HTTPResponsesTotal}, {series.NumRequestsTotal, series.NumAbortedRequestsTotal}}, afterTraffic: true}}
}
func (c ErrorRateConfig) reads() []string {
	return append(clientTrafficFamilies(), series.NumQueueReqs, series.NumRunningReqs)
}
func (c ErrorRateConfig) build(env buildEnv) Detector {
	return &ErrorRateDetector{cfg: c, retry: env.retryAvalanche}
}

// oneShot: the failed share needs no baseline, only enough requests in the
// few scrapes taken.
func (c ErrorRateConfig) oneShot(lookback time.Duration, samples int) (ErrorRateConfig, OneShot) {
	c.Range = lookback
	return c, OneShot{Judged: true, Note: "judged over the one-shot's span: the share of failed requests needs no history, only enough requests"}
}

func (c ErrorRateConfig) validate(e *configErrors) {
	e.positiveDuration("range", c.Range)
	e.endpoints("inference_endpoints", c.InferenceEndpoints)
	e.positive("min_requests", c.MinRequests)
	e.positive("min_failed_requests", c.MinFailedRequests)
	e.check(c.WarningRatio > 0 && c.WarningRatio < 1, "warning_ratio", "must be in (0,1), got %v", c.WarningRatio)
	e.check(c.CriticalRatio >= c.WarningRatio && c.CriticalRatio <= 1, "critical_ratio",
		"must be at least warning_ratio (%v) and at most 1, got %v", c.WarningRatio, c.CriticalRatio)
	e.check(c.OverloadArrivalRatio > 1, "overload_arrival_ratio", "must be greater than 1, got %v", c.OverloadArrivalRatio)
	e.check(c.RetriedArrivalRatio > 1, "retried_arrival_ratio", "must be greater than 1, got %v", c.RetriedArrivalRatio)
}

// severities lists what its findings can carry; its runbook describes each.
func (c ErrorRateConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: the last link of the mechanism chain: whatever went wrong
// above them, failed requests are what users feel. Every cause off the
// chain lists error_rate among what it explains.
func (c ErrorRateConfig) position(Finding) position { return position{stage: 60} }

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c ErrorRateConfig) doc() doc {
	return doc{
		name:     "Request failures",
		means:    "users failing, whatever the cause",
		signals:  "share of inference requests answered 5xx, shed with 429/503 or aborted over 2 min: warning ≥ 1%, critical ≥ 5%, with ≥ 60 requests and ≥ 5 failures; filed under whichever cause is firing; alone it says whether it is overload or clients retrying, and what to do",
		settings: "Users failing: the share of inference requests answered 5xx, shed with 429/503 or aborted, against an absolute objective. It is the consequence of any cause firing on the replica; alone, usually overload.",
	}
}
