package detect

import (
	"fmt"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// QueueLatency is the class of a time-to-first-token tail far above its
// baseline.
const QueueLatency Class = "queue_latency"

// QueueLatencyDetector pages when the time to first token rises far above
// its baseline, and splits it the way the runbook does: if most of the TTFT
// is spent in the waiting queue (queue_time_seconds against
// time_to_first_token_seconds), the fix is on the scheduling side —
// admission, --max-running-requests, more replicas — not the GPU; if the
// queue wait is small, prefill itself is slow (long prompts, lost prefix
// hits, chunked prefill), and per-stage timings then a profile are next.
// Releases before the queue-time histogram (2025-03) fall back to the
// queue depth.
type QueueLatencyDetector struct {
	cfg    QueueLatencyConfig
	triage TriageConfig
}

// Class implements Detector.
func (d *QueueLatencyDetector) Class() Class { return QueueLatency }

func (d *QueueLatencyDetector) ready(w Window, p periods) bool {
	c := d.cfg
	return p.baselineReady(w, c.BaselineCoverage, Sel(series.TTFTSeconds+"_count"), p.baselineTraffic(c.BaselineCoverage, c.MinRequests))
}

// Detect implements Detector.
//
// Clear rule while frozen: an incident's finding persists while the TTFT
// p99 stays at least RecoveredRatio times the p99 frozen at its onset and
// at least MinTTFTSeconds, or the mean RecoveredRatio times the frozen
// mean and at least MinMeanTTFTSeconds; it clears once both are back
// within RecoveredRatio of the frozen levels or under those floors.
// It takes no peers' reference: a replica's time to first token is its own
// queue's, which routing and bursts set apart from its peers' at the same
// moment (near saturation one healthy replica's tail swings several-fold
// against another's), so a young replica is judged by the absolute floors
// of error_rate and by the detectors whose signals its peers share.
func (d *QueueLatencyDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	n, ok := w.Observations(series.TTFTSeconds, nil, p.rangeStart, now)
	if !ok || n < c.MinRequests {
		return nil
	}
	// The p99 catches a tail that rises; the mean keeps the verdict once
	// the incident has lasted long enough to lift the baseline's p99 (a
	// percent of slow requests in the baseline hour does that).
	ttft := p.quantile(w, 0.99, series.TTFTSeconds)
	ttftMean := p.histMean(w, series.TTFTSeconds)
	cmp := comparisonOf(w, QueueLatency)
	frozen := cmp.frozen("ttft_p99", "ttft_mean")
	switch {
	case frozen:
		cmp.onto("ttft_p99", &ttft)
		cmp.onto("ttft_mean", &ttftMean)
	case !d.ready(w, p):
		forgetBaseline(&ttft, &ttftMean) // a warm-up or a trickle is no reference
	}
	g99, ok99 := ttft.growth()
	gMean, okMean := ttftMean.growth()
	g := max(g99, gMean)
	if frozen {
		byP99 := ok99 && g99 >= c.RecoveredRatio && ttft.now >= c.MinTTFTSeconds
		byMean := okMean && gMean >= c.RecoveredRatio && ttftMean.now >= c.MinMeanTTFTSeconds
		if !ttft.nowOK || !(byP99 || byMean) {
			return nil
		}
	} else {
		byP99 := ok99 && g99 >= c.TTFTRatio
		byMean := okMean && gMean >= c.TTFTRatio && ttftMean.now >= c.MinMeanTTFTSeconds
		if !ok99 || ttft.now < c.MinTTFTSeconds || !(byP99 || byMean) {
			return nil
		}
	}
	kept := levelSet{}
	kept.base("ttft_p99", ttft)
	kept.base("ttft_mean", ttftMean)
	queueMean := p.histMean(w, series.QueueTimeSeconds)
	queue99 := p.quantile(w, 0.99, series.QueueTimeSeconds)
	queued := p.avg(w, Sel(series.NumQueueReqs))
	cmp.context(kept, "queue_wait_mean", &queueMean)
	cmp.context(kept, "queue_wait_p99", &queue99)
	cmp.context(kept, "queued_requests", &queued)
	tr := d.triage.Classify(w, now, LatencyHigh)

	// Where the first token's time goes.
	var share float64
	shareOK := false
	if queueMean.nowOK && ttftMean.nowOK {
		share, shareOK = ratio(queueMean.now, ttftMean.now)
		share = min(share, 1) // different populations (queue time is observed at admission) can overshoot
	}
	var scheduling bool
	how := ""
	switch {
	case shareOK:
		scheduling = share >= c.QueueShare
		how = fmt.Sprintf("mean queue wait %s s of mean TTFT %s s (%s)", num(queueMean.now), num(ttftMean.now), pct(share))
	default:
		// No queue-time histogram: judge by the queue itself.
		scheduling = tr.Verdict == TriageAdmission || tr.Verdict == TriageSaturated
		how = "this release has no queue-time histogram (sglang:queue_time_seconds, 2025-03 onwards); judged from the queue depth"
		if queued.nowOK {
			how += " (" + vsBaseline(queued, " queued") + ")"
		}
	}

	sev := Warning
	if g >= c.CriticalTTFTRatio {
		sev = Critical
	}
	layer := LayerPrefill
	if scheduling {
		layer = LayerQueue
	}
	f := finding(QueueLatency, w, sev, layer)
	f.Baselines = kept.orNil()
	rule := fmt.Sprintf(">= %sx baseline and >= %s s (or the mean >= %sx and >= %s s)",
		num(c.TTFTRatio), num(c.MinTTFTSeconds), num(c.TTFTRatio), num(c.MinMeanTTFTSeconds))
	if frozen {
		rule = fmt.Sprintf("open until < %sx the baseline frozen at onset or < %s s (and the mean < %sx or < %s s)",
			num(c.RecoveredRatio), num(c.MinTTFTSeconds), num(c.RecoveredRatio), num(c.MinMeanTTFTSeconds))
	}
	f.Evidence = append(f.Evidence,
		ttft.evidence("TTFT p99", "s", rule),
		Evidence{Name: "first tokens in range", Value: n, Threshold: ">= " + num(c.MinRequests), SampleSize: true}.WithLimit(c.MinRequests),
	)
	if ttftMean.nowOK {
		f.Evidence = append(f.Evidence, ttftMean.evidence("TTFT mean", "s", ""))
	}
	if queueMean.nowOK {
		f.Evidence = append(f.Evidence, queueMean.evidence("queue wait mean (queue_time_seconds)", "s", ""))
	}
	if queue99.nowOK {
		f.Evidence = append(f.Evidence, queue99.evidence("queue wait p99", "s", ""))
	}
	if shareOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "share of TTFT spent queueing", Value: share, Unit: "ratio",
			Threshold: fmt.Sprintf(">= %s is the scheduling side", pct(c.QueueShare))})
	}
	if queued.nowOK {
		f.Evidence = append(f.Evidence, queued.evidence(p.avgOver("queued requests"), "", ""))
	}

	side := "prefill itself is slow"
	if scheduling {
		side = "the time goes into the waiting queue"
	}
	f.Summary = fmt.Sprintf("TTFT p99 %s s (baseline %s s): %s", num(ttft.now), num(ttft.base), side)
	if shareOK {
		f.Summary += fmt.Sprintf(" (%s s of %s s mean TTFT is queue wait)", num(queueMean.now), num(ttftMean.now))
	}

	if scheduling {
		f.Diagnosis = sentence(
			fmt.Sprintf("Queue layer: time to first token p99 is %s, and %s.", vsBaseline(ttft, "s"), how),
			"Requests spend most of their wait before prefill starts, queued for admission; prefill itself is not the problem and the GPU is not slow. The fix is on the scheduling side — admission, memory, capacity — not the GPU or kernels; profiling would show nothing useful.",
			admissionHold(tr))
		f.Emergency = []string{
			"Add replicas or shift traffic to less loaded ones; at the router, cap concurrency per replica and answer the excess with a fast 503 so clients do not wait into timeouts (and retry).",
		}
		if step := admissionStep(tr); step != "" {
			f.Emergency = append(f.Emergency, step)
		}
		f.Emergency = append(f.Emergency,
			"Shed or defer low-priority and offline traffic at the gateway, or move it to a separate pool.")
		f.RootCause = []string{
			"Capacity: size replicas and autoscaling on queue time (sglang:queue_time_seconds p99) and num_queue_reqs, not on GPU utilization.",
		}
		if tr.KVFull {
			f.RootCause = append(f.RootCause,
				"Memory: size the KV pool for the real prompt and output mix at the target concurrency (see kv_saturation); bound requests that hold KV for long (no max_tokens).")
		} else {
			f.RootCause = append(f.RootCause,
				"Scheduling: review --max-prefill-tokens and --chunked-prefill-size against the prompt lengths you serve, --schedule-policy (e.g. lpm for shared prefixes) and priority scheduling for the traffic mix.")
		}
		f.RootCause = append(f.RootCause,
			"Smooth the arrivals: rate limits per tenant and client backoff keep bursts from becoming queues.")
	} else {
		prompts := p.perUnit(w, Sel(series.PromptTokensTotal), Sel(series.NumRequestsTotal))
		cmp.context(kept, "prompt_tokens_per_request", &prompts)
		if prompts.nowOK {
			f.Evidence = append(f.Evidence, prompts.evidence("prompt tokens per finished request", "tokens", ""))
		}
		prefill := measure{}
		stage := []Match{{Label: "stage", Value: "prefill_forward"}}
		prefill.now, prefill.nowOK = w.Quantile(0.99, perStageLatency, stage, p.rangeStart, now)
		prefill.base, prefill.baseOK = w.Quantile(0.99, perStageLatency, stage, p.baseStart, p.rangeStart)
		cmp.context(kept, "prefill_forward_p99", &prefill)
		if prefill.nowOK {
			f.Evidence = append(f.Evidence, prefill.evidence("prefill forward p99 (per_stage_req_latency_seconds)", "s", ""))
		}
		var causes []string
		if pg, ok := prompts.growth(); ok && pg >= 1.5 {
			causes = append(causes, fmt.Sprintf("prompts got longer: %s tokens per request (baseline %s)", num(prompts.now), num(prompts.base)))
		}
		f.Diagnosis = sentence(
			fmt.Sprintf("Prefill layer: time to first token p99 is %s, but %s — the wait in the queue is small, so processing the prompt itself takes longer.", vsBaseline(ttft, "s"), how),
			joinCauses(causes),
			"Usual causes: longer prompts, a lost prefix-cache hit rate (more tokens to compute; see cache_collapse), a chunked-prefill size that splits prompts into many steps, prefill competing with a large decode batch, or a slower GPU.",
			"Next step: pick slow requests by rid in the request log and split their timeline (sglang:per_stage_req_latency_seconds, stage prefill_forward); only then profile the prefill (torch profiler via /start_profile, nsys).")
		f.Emergency = []string{
			"Check the prefix hit rate and prompt lengths of this replica (cache_collapse finding, sglang:prompt_tokens_histogram): a prompt-template change is the usual trigger; roll it back if so.",
			"Cap prompt length at the router if a few very long prompts dominate.",
			"If users are hurt now, add replicas: prefill capacity scales with them.",
		}
		f.RootCause = []string{
			"Tune --chunked-prefill-size and --max-prefill-tokens for the prompt lengths you serve; consider prefill/decode disaggregation for long prompts.",
			"Profile a slow prefill (torch profiler, nsys) once the per-stage timings confirm prefill is the slow stage.",
			"Keep shared prefixes cacheable (stable system prompts, cache-aware routing).",
		}
	}
	tr.annotate(&f)
	return []Finding{f}
}

// admissionHold says what the triage's numbers show holds admission: a full
// KV pool, a batch at its cap, or neither.
func admissionHold(tr TriageResult) string {
	switch {
	case tr.Verdict == TriageUnknown:
		return "This replica does not expose the running and queued gauges: read them from /metrics to tell a batch at its cap from a full KV pool."
	case tr.KVFull:
		return fmt.Sprintf("The KV pool is full (usage up to %s): waiting requests cannot be admitted until memory frees, so the fix is what holds the memory, not the cap or the policy.", pct(tr.KVUsage))
	case tr.RunningHigh && tr.CapacityKnown:
		return fmt.Sprintf("The batch is at its cap (%s of %s) with requests waiting: the replica works at its limit and lacks capacity.", num(tr.Running), num(tr.Capacity))
	case tr.RunningHigh:
		return fmt.Sprintf("The batch runs at the most it ran (%s) with requests waiting: the replica works at its limit and lacks capacity.", num(tr.Running))
	case tr.Capacity == 0:
		return "The batch cap is not exposed: the layer triage below says where to read it."
	}
	return fmt.Sprintf("The batch runs below %s (%s of %s), so the cap is not what holds admission: the layer triage below says what to check.", capName(tr), num(tr.Running), num(tr.Capacity))
}

// admissionStep is the emergency step the numbers allow beyond adding
// capacity: none for a batch at its cap, the memory pages for a full pool,
// and for a batch below its cap what holds admission instead.
func admissionStep(tr TriageResult) string {
	prompts := "cap prompt length at the router if long prompts keep prefill batches from forming (a larger --max-prefill-tokens or --chunked-prefill-size needs a restart: see the root-cause fixes)"
	switch {
	case tr.Verdict == TriageUnknown:
		return ""
	case tr.KVFull:
		return "Follow kv_saturation, preempt_storm or cache_collapse on this replica for what holds the KV memory; do not raise --max-running-requests into a full pool."
	case tr.RunningHigh:
		return ""
	case tr.Capacity == 0:
		return "Read --max-running-requests from " + ServerInfo + ": a batch at it means the replica lacks capacity (the step above); below it, " + prompts + "."
	case !tr.CapacityKnown:
		return fmt.Sprintf("Read the current --max-running-requests from %s: if it is below the %s this replica ran before, it was lowered and the replica is at it; if not, %s.", ServerInfo, num(tr.Capacity), prompts)
	}
	return fmt.Sprintf("The batch runs below its cap of %s, so the cap is not what holds admission: %s.", num(tr.Capacity), prompts)
}

// capName is what the triage compares the batch with.
func capName(tr TriageResult) string {
	if tr.CapacityKnown {
		return "its cap"
	}
	return "the most it ran"
}

// joinCauses renders "Observed: a; b." or "".
func joinCauses(cs []string) string {
	if len(cs) == 0 {
		return ""
	}
	s := "Observed: " + cs[0]
	for _, c := range cs[1:] {
		s += "; " + c
	}
	return s + "."
}

// QueueLatencyConfig tunes the time-to-first-token (queue vs prefill)
// detector.
type QueueLatencyConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window TTFT and queue time are read over.
	Range time.Duration `yaml:"range" doc:"recent window TTFT and queue time are read over"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline" doc:"the \"normal\" window just before it"`
	// MinRequests is the fewest first tokens (TTFT observations) in Range
	// for a verdict; a p99 of a handful of requests is noise.
	MinRequests float64 `yaml:"min_requests" doc:"fewer first tokens in range: no verdict"`
	// TTFTRatio: TTFT p99 (or mean) now at least this many times its
	// baseline ...
	TTFTRatio float64 `yaml:"ttft_ratio" doc:"TTFT p99 (or mean) this many times its baseline ..."`
	// MinTTFTSeconds: ... and at least this long (nobody is paged for
	// 50 ms -> 120 ms).
	MinTTFTSeconds float64 `yaml:"min_ttft_seconds" doc:"... and the p99 at least this long"`
	// MinMeanTTFTSeconds: the mean TTFT at TTFTRatio times its baseline
	// also counts (it keeps the verdict once a lasting incident has lifted
	// the baseline's p99), but only at or above this mean: near saturation
	// a healthy replica's mean swings several-fold while staying well
	// under a second.
	MinMeanTTFTSeconds float64 `yaml:"min_mean_ttft_seconds" doc:"the mean counts only at or above this"`
	// QueueShare splits the diagnosis: mean queue time over mean TTFT at or
	// above it means the time goes into waiting for admission (scheduling
	// side); below it, prefill itself is slow.
	QueueShare float64 `yaml:"queue_share" doc:"queue wait share of TTFT that means \"scheduling side\""`
	// CriticalTTFTRatio makes the finding critical.
	CriticalTTFTRatio float64 `yaml:"critical_ttft_ratio" doc:"TTFT p99 or mean this many times its baseline: critical"`
	// RecoveredRatio: an incident's finding, compared with the TTFT frozen
	// at its onset, persists while the p99 (or the mean) stays at least
	// this many times the frozen level and above its floor.
	RecoveredRatio float64 `yaml:"recovered_ratio" doc:"open incident: clears within this many times its frozen TTFT"`
	// BaselineCoverage is what the baseline must hold before a ratio to
	// it counts (see BaselineCoverage).
	BaselineCoverage BaselineCoverage `yaml:"baseline_coverage" doc:"before any ratio to the baseline counts, the baseline"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (QueueLatencyConfig) defaults() QueueLatencyConfig {
	return QueueLatencyConfig{
		Enabled: true,
		// A TTFT tail is bursty near saturation (a healthy replica at
		// 90% load swings its 2-minute p99 by nearly 3x): 5 minutes
		// and 3x keep such bursts quiet.
		Range:              5 * time.Minute,
		Baseline:           time.Hour,
		MinRequests:        60, // 0.2 requests/s over 5 minutes
		TTFTRatio:          3,
		MinTTFTSeconds:     1,
		MinMeanTTFTSeconds: 2,
		QueueShare:         0.5,
		CriticalTTFTRatio:  6,
		RecoveredRatio:     1.5,
		BaselineCoverage:   DefaultBaselineCoverage(),
	}
}

// The methods below make QueueLatencyConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c QueueLatencyConfig) class() Class                 { return QueueLatency }
func (c QueueLatencyConfig) enabled() bool                { return c.Enabled }
func (c QueueLatencyConfig) disabled() QueueLatencyConfig { c.Enabled = false; return c }
func (c QueueLatencyConfig) usesTriage() bool             { return true }
func (c QueueLatencyConfig) needs() []need {
	return []need{{class: QueueLatency, what: "the time-to-first-token histogram",
		anyOf: [][]string{{series.TTFTSeconds + "_count"}}, skip: []string{"prefill", "decode"}, afterTraffic: true}}
}
func (c QueueLatencyConfig) reads() []string {
	return []string{series.TTFTSeconds, series.QueueTimeSeconds, perStageLatency, series.NumQueueReqs,
		series.NumRequestsTotal, series.PromptTokensTotal}
}
func (c QueueLatencyConfig) lookback() time.Duration {
	return c.Range + c.Baseline
}

func (c QueueLatencyConfig) build(env buildEnv) Detector {
	return &QueueLatencyDetector{cfg: c, triage: env.triage}
}

func (c QueueLatencyConfig) oneShot(lookback time.Duration, samples int) (QueueLatencyConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	return c, OneShot{Judged: false, Note: "needs history: TTFT p99 is compared with its baseline — the TTFT and queue wait above, and the layer verdict, show where the time goes"}
}

func (c QueueLatencyConfig) validate(e *configErrors) {
	c.BaselineCoverage.validate(e)
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.positive("min_requests", c.MinRequests)
	e.check(c.TTFTRatio > 1, "ttft_ratio", "must be greater than 1, got %v", c.TTFTRatio)
	e.positive("min_ttft_seconds", c.MinTTFTSeconds)
	e.positive("min_mean_ttft_seconds", c.MinMeanTTFTSeconds)
	e.check(c.QueueShare > 0 && c.QueueShare < 1, "queue_share", "must be in (0,1), got %v", c.QueueShare)
	e.check(c.CriticalTTFTRatio >= c.TTFTRatio, "critical_ttft_ratio", "must be at least ttft_ratio (%v), got %v", c.TTFTRatio, c.CriticalTTFTRatio)
	e.check(c.RecoveredRatio > 1, "recovered_ratio", "must be greater than 1, got %v", c.RecoveredRatio)
	if c.TTFTRatio > 1 {
		e.check(c.RecoveredRatio <= c.TTFTRatio, "recovered_ratio", "must be at most ttft_ratio (%v), got %v", c.TTFTRatio, c.RecoveredRatio)
	}
}

// severities lists what its findings can carry; its runbook describes each.
func (c QueueLatencyConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: on the mechanism chain, queue growth and latency, after
// everything that fills the queue.
func (c QueueLatencyConfig) position(Finding) position { return position{stage: 50} }

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c QueueLatencyConfig) doc() doc {
	return doc{
		name:     "Queue latency",
		means:    "TTFT tail up",
		signals:  "queue wait dominating (fix scheduling) vs prefill itself slow (profile next)",
		settings: "Time-to-first-token tail up: queue wait (scheduling side) vs prefill.",
	}
}
