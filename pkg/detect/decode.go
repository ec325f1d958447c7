package detect

import (
	"fmt"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// DecodeSlowdownDetector pages when the inter-token latency rises far
// above its baseline while the batch is the same size — the same work
// takes longer per step, which points at the GPU side: thermal or power
// throttling, a noisy neighbour on the GPU, a degraded interconnect, a bad
// node. A batch that grew with the arrivals (more concurrent requests) or
// with longer contexts is load, not a slowdown; a batch that grew while the
// arrivals did not is the backlog the slowdown itself builds (each request
// takes longer, so more of them overlap) and still pages. More prefill work
// interleaved with decode (a collapsed prefix hit rate, longer prompts) is
// load too. Retraction storms are preempt_storm's, a collapsed speculative
// acceptance is named as such.
type DecodeSlowdownDetector struct {
	cfg    DecodeSlowdownConfig
	triage TriageConfig
}

// Class implements Detector.
func (d *DecodeSlowdownDetector) Class() Class { return DecodeSlowdown }

// Detect implements Detector.
func (d *DecodeSlowdownDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	n, ok := w.Observations(series.InterTokenLatency, nil, p.rangeStart, now)
	if !ok || n < c.MinTokens {
		return nil
	}
	p99 := p.quantile(w, 0.99, series.InterTokenLatency)
	mean := p.histMean(w, series.InterTokenLatency)
	g99, ok99 := p99.growth()
	gMean, okMean := mean.growth()
	if !ok99 || p99.now < c.MinITLSeconds || !((ok99 && g99 >= c.ITLRatio) || (okMean && gMean >= c.ITLRatio)) {
		return nil
	}
	growth := g99
	if okMean {
		growth = max(growth, gMean)
	}

	// Preemption storms slow decode too; they page on their own.
	if r := p.rate(w, Sel(series.RetractedRequestsTotal)); r.nowOK && r.now >= c.RetractionsPerSecond {
		return nil
	}

	// Same work? Running requests, the batch's summed sequence length, the
	// arrivals.
	within := func(m measure) (g float64, steady, grew, known bool) {
		g, known = m.growth()
		return g, known && g <= 1+c.BatchTolerance, known && g > 1+c.BatchTolerance, known
	}
	running := p.avg(w, Sel(series.NumRunningReqs))
	seqs := p.avg(w, Sel(series.DecodeSumSeqLens))
	perReq := p.gaugeRatio(w, Sel(series.DecodeSumSeqLens), Sel(series.NumRunningReqs))
	arrivals := p.rate(w, inference(series.HTTPRequestsTotal, c.ArrivalEndpoints))
	if !arrivals.nowOK {
		arrivals = p.rate(w, Sel(series.NumRequestsTotal))
	}
	_, _, runGrew, runKnown := within(running)
	_, _, seqGrew, _ := within(seqs)
	_, arrSteady, _, _ := within(arrivals)
	_, _, perReqGrew, _ := within(perReq)
	if !runKnown {
		return nil // without the batch size there is no telling load from slowdown
	}
	backlog := false
	if runGrew || seqGrew {
		// Grown batch: load, unless the arrivals and the per-request context
		// are unchanged — then the slowdown built the backlog itself.
		if !arrSteady || perReqGrew {
			return nil
		}
		backlog = true
	}

	// Decode steps share the GPU with prefill chunks: more prompt tokens to
	// compute (a collapsed prefix hit rate, longer prompts) slows every
	// step without any GPU fault. That is load, and the finding that
	// explains it is cache_collapse or queue_latency.
	if g, ok := prefillWork(p, w).growth(); ok && g > 1+c.BatchTolerance {
		return nil
	}

	spec := p.avg(w, Selector{Name: specAcceptLength, Combine: CombineMax})
	specDrop := spec.nowOK && spec.baseOK && spec.base > 1 && spec.now <= spec.base*(1-c.BatchTolerance)
	loraFull := false
	if u, ok := w.Min(Selector{Name: series.LoraPoolUtilization, Combine: CombineMax}, p.rangeStart, now); ok && u >= 0.99 {
		loraFull = true
	}

	sev := Warning
	if growth >= c.CriticalITLRatio {
		sev = Critical
	}
	f := finding(DecodeSlowdown, w, sev, LayerDecode)
	f.Evidence = append(f.Evidence, p99.evidence("inter-token latency p99", "s",
		fmt.Sprintf("p99 or mean >= %sx baseline, p99 >= %ss", num(c.ITLRatio), num(c.MinITLSeconds))))
	if mean.nowOK {
		f.Evidence = append(f.Evidence, mean.evidence("inter-token latency mean", "s", ""))
	}
	f.Evidence = append(f.Evidence, running.evidence("running requests (avg)", "", fmt.Sprintf("within +%s of baseline is the same batch", pct(c.BatchTolerance))))
	if seqs.nowOK {
		f.Evidence = append(f.Evidence, seqs.evidence("decode batch summed sequence length (avg)", "tokens", ""))
	}
	if arrivals.nowOK {
		f.Evidence = append(f.Evidence, arrivals.evidence("arrivals/s", "/s", ""))
	}
	if tp := p.avg(w, Sel(series.GenThroughput)); tp.nowOK {
		f.Evidence = append(f.Evidence, tp.evidence("generation throughput (avg)", "tokens/s", ""))
	}
	if spec.nowOK {
		f.Evidence = append(f.Evidence, spec.evidence("speculative accept length (avg)", "tokens", ""))
	}

	f.Summary = fmt.Sprintf("Decode slowdown: inter-token latency p99 %ss (baseline %ss) at an unchanged batch", num(p99.now), num(p99.base))
	batch := fmt.Sprintf("the batch is the same size (%s running, baseline %s", num(running.now), num(running.base))
	if seqs.nowOK && seqs.baseOK {
		batch += fmt.Sprintf("; %s tokens in the batch, baseline %s", num(seqs.now), num(seqs.base))
	}
	batch += ")"
	if backlog {
		f.Summary = fmt.Sprintf("Decode slowdown: inter-token latency p99 %ss (baseline %ss) at unchanged arrivals", num(p99.now), num(p99.base))
		batch = fmt.Sprintf("the arrivals are unchanged (%s) and so is the context per request; the batch grew to %s running (baseline %s) only because each request now takes longer",
			vsBaseline(arrivals, "/s"), num(running.now), num(running.base))
	}
	head := fmt.Sprintf("Decode layer: inter-token latency p99 is %s", vsBaseline(p99, "s"))
	if mean.nowOK {
		head += fmt.Sprintf(", mean %s", vsBaseline(mean, "s"))
	}
	head += ", while " + batch + ". The same work takes longer per decode step."
	var cause string
	switch {
	case specDrop:
		cause = fmt.Sprintf("Speculative decoding accepts far fewer draft tokens (accept length %s): each step yields fewer tokens, so the time per token rises. Check the draft model and the traffic mix (a new domain the draft model predicts badly) before suspecting the GPU.", vsBaseline(spec, ""))
	case loraFull:
		cause = "The LoRA adapter pool is full: adapter switching may break CUDA graph replay (see lora_thrash on this replica) before the GPU is to blame."
	default:
		cause = "This points at the GPU side, not the load: thermal or power throttling, a noisy neighbour on the same GPU, a degraded NVLink/PCIe link, or a bad node. If only this replica slowed, suspect its node; if every replica of the model did, suspect a software or driver rollout."
	}
	f.Diagnosis = sentence(head, cause)
	f.Emergency = []string{
		"Compare with the other replicas of the model: if only this one slowed, drain it (take it out of rotation) and let the others carry the traffic.",
		"Check the GPUs: nvidia-smi -q -d PERFORMANCE,CLOCK (clock throttle reasons: thermal, power cap), nvidia-smi for other processes on the GPU (noisy neighbour), dmesg for Xid errors.",
		"Check the interconnect: nvidia-smi nvlink -s (inactive links, errors) and nvidia-smi topo -m against the expected topology.",
	}
	f.RootCause = []string{
		"Thermal or power throttling: fix cooling, power capping or the node's power profile; have the node replaced if it recurs.",
		"Noisy neighbour: enforce exclusive GPU allocation (no other workloads, MIG or MPS sharing) for serving nodes.",
		"Degraded interconnect or bad node: run the vendor diagnostics (DCGM) and cordon the node until it passes.",
		"Once the GPU is ruled out, profile a decode step (torch profiler, nsys) to find the slow kernel.",
	}
	d.triage.Classify(w, now, true).annotate(&f)
	return []Finding{f}
}

// prefillWork is the rate of prompt tokens actually computed (not served
// from the prefix cache), from the best source the release exposes.
func prefillWork(p periods, w Window) measure {
	if m := p.rate(w, Sel(series.RealtimeTokensTotal, "mode", "prefill_compute")); m.nowOK {
		return m
	}
	if m := p.rate(w, Sel(series.PrefillEffectiveTokens, "mode", "input")); m.nowOK {
		return m
	}
	prompt, cached := p.rate(w, Sel(series.PromptTokensTotal)), p.rate(w, Sel(series.CachedTokensTotal))
	if !prompt.nowOK || !cached.nowOK {
		return measure{}
	}
	return measure{now: prompt.now - cached.now, nowOK: true,
		base: prompt.base - cached.base, baseOK: prompt.baseOK && cached.baseOK}
}

// DecodeSlowdownConfig tunes the inter-token latency detector.
type DecodeSlowdownConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window inter-token latency is read over.
	Range time.Duration `yaml:"range"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline"`
	// MinTokens is the fewest inter-token observations in Range.
	MinTokens float64 `yaml:"min_tokens"`
	// ITLRatio: inter-token latency (p99 or mean) at least this many times
	// its baseline ...
	ITLRatio float64 `yaml:"itl_ratio"`
	// MinITLSeconds: ... with the p99 at least this long.
	MinITLSeconds float64 `yaml:"min_itl_seconds"`
	// BatchTolerance is "roughly unchanged": running requests and the
	// batch's summed sequence length within this fraction of the baseline.
	// A batch that grew with the arrivals is load, not a slowdown.
	BatchTolerance float64 `yaml:"batch_tolerance"`
	// ArrivalEndpoints are the endpoints whose arrivals tell load growth
	// from a backlog that the slowdown itself built, "|"-separated.
	ArrivalEndpoints string `yaml:"arrival_endpoints"`
	// RetractionsPerSecond: at or above it the slowdown is a preemption
	// storm's (preempt_storm pages), not the GPU's.
	RetractionsPerSecond float64 `yaml:"retractions_per_second"`
	// CriticalITLRatio makes the finding critical.
	CriticalITLRatio float64 `yaml:"critical_itl_ratio"`
}

// defaultDecodeSlowdown returns the production settings, tuned for a 5 s scrape
// interval.
func defaultDecodeSlowdown() DecodeSlowdownConfig {
	return DecodeSlowdownConfig{
		Enabled:              true,
		Range:                2 * time.Minute,
		Baseline:             time.Hour,
		MinTokens:            1000,
		ITLRatio:             2,
		MinITLSeconds:        0.05, // 20 tokens/s per request
		BatchTolerance:       0.25,
		ArrivalEndpoints:     defaultInferenceEndpoints,
		RetractionsPerSecond: 0.1,
		CriticalITLRatio:     4,
	}
}

// The methods below make DecodeSlowdownConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c DecodeSlowdownConfig) class() Class                   { return DecodeSlowdown }
func (c DecodeSlowdownConfig) enabled() bool                  { return c.Enabled }
func (c DecodeSlowdownConfig) disabled() DecodeSlowdownConfig { c.Enabled = false; return c }
func (c DecodeSlowdownConfig) usesTriage() bool               { return true }
func (c DecodeSlowdownConfig) needs() []need {
	return []need{{class: DecodeSlowdown, what: "the inter-token latency histogram and the running batch",
		anyOf: [][]string{{series.InterTokenLatency + "_count", series.NumRunningReqs}}, skip: []string{"prefill"}, afterTraffic: true}}
}
func (c DecodeSlowdownConfig) lookback() time.Duration {
	return c.Range + c.Baseline
}

func (c DecodeSlowdownConfig) build(env buildEnv) Detector {
	return &DecodeSlowdownDetector{cfg: c, triage: env.triage}
}

func (c DecodeSlowdownConfig) oneShot(lookback time.Duration, samples int) (DecodeSlowdownConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	return c, OneShot{Judged: false, Note: "needs history: inter-token latency is compared with its baseline at the same batch size — see the inter-token p99 above"}
}

func (c DecodeSlowdownConfig) validate(e *configErrors) {
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.positive("min_tokens", c.MinTokens)
	e.check(c.ITLRatio > 1, "itl_ratio", "must be greater than 1, got %v", c.ITLRatio)
	e.positive("min_itl_seconds", c.MinITLSeconds)
	e.fraction("batch_tolerance", c.BatchTolerance)
	e.endpoints("arrival_endpoints", c.ArrivalEndpoints)
	e.positive("retractions_per_second", c.RetractionsPerSecond)
	e.check(c.CriticalITLRatio >= c.ITLRatio, "critical_itl_ratio", "must be at least itl_ratio (%v), got %v", c.ITLRatio, c.CriticalITLRatio)
}

// severities lists what its findings can carry; its runbook describes each.
func (c DecodeSlowdownConfig) severities() []Severity { return []Severity{Warning, Critical} }
