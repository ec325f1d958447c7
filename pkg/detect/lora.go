package detect

import (
	"fmt"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// LoraThrash is the class of a LoRA adapter pool that thrashes.
const LoraThrash Class = "lora_thrash"

// LoraThrashDetector pages, on replicas serving LoRA adapters, when every
// adapter slot is taken and decode turns jittery: adapters are swapped in
// and out, switching breaks CUDA graph replay (more decode passes run
// without a graph), and the inter-token latency's tail or spread rises.
// SGLang exposes no swap counter; the pool's occupancy, the graph fallback
// share and the latency together are the fingerprint. Replicas without the
// LoRA pool families are not looked at.
type LoraThrashDetector struct {
	cfg    LoraThrashConfig
	triage TriageConfig
}

// Class implements Detector.
func (d *LoraThrashDetector) Class() Class { return LoraThrash }

var _ PeerObserver = (*LoraThrashDetector)(nil)

// Baselines keys of lora_thrash.
const (
	loraITLP99   = "itl_p99"
	loraSpread   = "itl_spread"
	loraITLMean  = "itl_mean"
	loraFallback = "graph_fallback_share"
)

func (d *LoraThrashDetector) ready(w Window, p periods) bool {
	c := d.cfg
	return p.baselineReady(w, c.BaselineCoverage, Sel(series.InterTokenLatency+"_count"), p.baselineTraffic(c.BaselineCoverage, c.MinTokens))
}

// servesLoRA reports whether the replica exposes its adapter pool: the
// detector looks at no other.
func servesLoRA(w Window) bool { return w.Has(series.LoraPoolUtilization) || w.Has(loraPoolSlotsUsed) }

// NeedsPeers implements PeerObserver: an adapter pool full for the whole
// range, with enough inter-token observations.
func (d *LoraThrashDetector) NeedsPeers(w Window, now time.Time) bool {
	c := d.cfg
	if !servesLoRA(w) {
		return false
	}
	p := newPeriods(now, c.Range, c.Baseline)
	if _, full := d.poolFull(w, p); !full {
		return false
	}
	n, ok := w.Observations(series.InterTokenLatency, nil, p.rangeStart, now)
	return ok && n >= c.MinTokens && !d.ready(w, p)
}

// Levels implements PeerObserver: the inter-token latency's mean over the
// range and the share of decode passes without a CUDA graph, when the
// range holds MinTokens observations. Not the tail or its spread: one
// replica's few-minute tail against another's is noise.
func (d *LoraThrashDetector) Levels(w Window, now time.Time) map[string]float64 {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	if !servesLoRA(w) {
		return nil
	}
	if n, ok := w.Observations(series.InterTokenLatency, nil, p.rangeStart, now); !ok || n < c.MinTokens {
		return nil
	}
	l := levelSet{}
	mean, ok := histMean(w, series.InterTokenLatency, nil, p.rangeStart, now)
	l.level(loraITLMean, mean, ok)
	l.now(loraFallback, graphFallbacks(p, w))
	return l.orNil()
}

// latency is the inter-token latency's p99, spread (p99/p50) and mean.
func (d *LoraThrashDetector) latency(w Window, p periods) (p99, spread, mean measure) {
	p99 = p.quantile(w, 0.99, series.InterTokenLatency)
	p50 := p.quantile(w, 0.5, series.InterTokenLatency)
	if p99.nowOK && p50.nowOK {
		spread.now, spread.nowOK = ratio(p99.now, p50.now)
	}
	if p99.baseOK && p50.baseOK {
		spread.base, spread.baseOK = ratio(p99.base, p50.base)
	}
	return p99, spread, p.histMean(w, series.InterTokenLatency)
}

// loraPool is the adapter pool's lowest occupancy over a range.
type loraPool struct {
	lowest float64
	source string
}

// poolFull reads the pool's occupancy over p's range (the utilization
// gauge, or used/total slots, covering the range) and reports whether it
// stayed at FullUtilization.
func (d *LoraThrashDetector) poolFull(w Window, p periods) (loraPool, bool) {
	util := Selector{Name: series.LoraPoolUtilization, Combine: CombineMax}
	lowest, ok := w.Min(util, p.rangeStart, p.now)
	if ok && !covers(w, util, p.rangeStart, p.now) {
		return loraPool{}, false
	}
	pool := loraPool{lowest: lowest, source: "lora_pool_utilization"}
	if !ok {
		total, okT := w.Last(Sel(loraPoolSlotsTotal))
		used, okU := w.Min(Sel(loraPoolSlotsUsed), p.rangeStart, p.now)
		if !okT || !okU || total <= 0 || !covers(w, Sel(loraPoolSlotsUsed), p.rangeStart, p.now) {
			return loraPool{}, false
		}
		pool = loraPool{lowest: used / total, source: "lora_pool_slots_used / lora_pool_slots_total"}
	}
	return pool, pool.lowest >= d.cfg.FullUtilization
}

// graphFallbacks is the share of decode passes run without a CUDA graph.
func graphFallbacks(p periods, w Window) measure {
	return p.perUnit(w, Sel(cudaGraphPassesTotal, "mode", "decode_none"), Sel(cudaGraphPassesTotal, "mode", "decode_none|decode_cuda_graph"))
}

// Detect implements Detector.
//
// Clear rule while frozen: an incident's finding persists while its onset
// rule holds against the levels frozen at its onset: the pool still full
// (the absolute condition), the latency's p99, spread or mean still
// LatencyRatio times the frozen one, and, where CUDA graph passes are
// counted, their fallback share still FallbackShareRise above the frozen
// share. Against its healthy peers (no ready baseline of its own) the
// same rule uses the peers' mean and fallback share.
func (d *LoraThrashDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	pool, full := d.poolFull(w, p)
	if !full {
		return nil
	}
	lowest, source := pool.lowest, pool.source

	n, ok := w.Observations(series.InterTokenLatency, nil, p.rangeStart, now)
	if !ok || n < c.MinTokens {
		return nil
	}
	p99, spread, mean := d.latency(w, p)
	cmp := comparisonOf(w, LoraThrash)
	keys := []string{loraITLP99, loraSpread, loraITLMean}
	replaced := cmp.frozen(keys...)
	if !replaced && !d.ready(w, p) {
		forgetBaseline(&p99, &spread, &mean) // a warm-up or a trickle is no reference
		replaced = cmp.peers(loraITLMean)
	}
	if replaced {
		cmp.onto(loraITLP99, &p99)
		cmp.onto(loraSpread, &spread)
		cmp.onto(loraITLMean, &mean)
	}
	g99, ok99 := p99.growth()
	gSpread, okSpread := spread.growth()
	gMean, okMean := mean.growth()
	if !(ok99 && g99 >= c.LatencyRatio) && !(okSpread && gSpread >= c.LatencyRatio) && !(okMean && gMean >= c.LatencyRatio) {
		return nil
	}

	// CUDA graph fallbacks: share of decode passes run without a graph.
	share := measure{}
	graphs := present(w, cudaGraphPassesTotal, p.baseStart, now)
	if graphs {
		share = graphFallbacks(p, w)
		if replaced {
			cmp.onto(loraFallback, &share)
		}
		if !share.nowOK || !share.baseOK || share.now-share.base < c.FallbackShareRise {
			return nil // graphs replay as before: the jitter is not the adapters'
		}
	}

	f := finding(LoraThrash, w, Warning, LayerDecode)
	kept := levelSet{}
	kept.base(loraITLP99, p99)
	kept.base(loraSpread, spread)
	kept.base(loraITLMean, mean)
	kept.base(loraFallback, share)
	f.Baselines = kept.orNil()
	f.Evidence = append(f.Evidence,
		Evidence{Name: "LoRA adapter pool utilization, lowest in range (" + source + ")", Value: lowest, Unit: "ratio",
			Threshold: ">= " + pct(c.FullUtilization), Limit: c.FullUtilization, HasLimit: true},
		p99.evidence("inter-token latency p99", "s", fmt.Sprintf("p99, p99/p50 or mean >= %sx baseline", num(c.LatencyRatio))),
	)
	if mean.nowOK {
		f.Evidence = append(f.Evidence, mean.evidence("inter-token latency mean", "s", ""))
	}
	if spread.nowOK {
		// A multiple of the median, not a share: printed as a plain number.
		f.Evidence = append(f.Evidence, spread.evidence("inter-token latency spread (p99/p50)", "", ""))
	}
	if graphs {
		f.Evidence = append(f.Evidence, share.evidence("decode passes without CUDA graph (share)", "ratio",
			fmt.Sprintf("rise >= %s", pctPoints(c.FallbackShareRise))))
	}
	if total, ok := w.Last(Sel(loraPoolSlotsTotal)); ok {
		f.Evidence = append(f.Evidence, Evidence{Name: "LoRA adapter slots", Value: total})
	}

	f.Summary = fmt.Sprintf("LoRA thrash: adapter pool full, inter-token latency p99 %s s (baseline %s s)", num(p99.now), num(p99.base))
	if !p99.baseOK && mean.baseOK {
		f.Summary = fmt.Sprintf("LoRA thrash: adapter pool full, inter-token latency mean %s s (baseline %s s)", num(mean.now), num(mean.base))
	}
	graphText := "This release does not expose sglang:cuda_graph_passes_total, so CUDA graph fallbacks cannot be confirmed from metrics."
	if graphs {
		graphText = fmt.Sprintf("The share of decode passes run without a CUDA graph rose to %s: adapter switches break graph replay.", pctVsBaseline(share))
	}
	f.Diagnosis = sentence(
		fmt.Sprintf("Decode layer: every LoRA adapter slot has been taken for the whole range (lowest utilization %s), so requests for adapters not in the pool wait for a slot and adapters are swapped in and out.", pct(lowest)),
		graphText,
		fmt.Sprintf("Decode turns slow and jittery: inter-token latency p99 %s, spread p99/p50 %s.", vsBaseline(p99, "s"), vsBaseline(spread, "")),
		"Causes: more distinct adapters in the traffic than the pool holds (--max-loras-per-batch), adapter switching breaking CUDA graphs, or adapters that are not loaded correctly.")
	f.Emergency = []string{
		"Reduce the number of adapters served concurrently by this replica: route requests by adapter (sticky routing) so each replica sees a few hot adapters.",
		"Raise --max-loras-per-batch (and the GPU memory for adapters) if memory allows.",
		"Compare with a canary serving the base model alone (started without --enable-lora and --lora-paths) under the same traffic: a 5-15% cost of LoRA is expected, more than about 30% is a configuration problem or a bug.",
	}
	f.RootCause = []string{
		"Pin the hot adapters so they are never evicted; send the long tail to dedicated replicas.",
		"Use a LoRA backend whose kernels keep CUDA graphs usable across adapters, and keep adapter ranks modest.",
		"Consolidate adapters with the product teams (fewer, merged adapters).",
	}
	d.triage.Classify(w, now, LatencyHigh).annotate(&f)
	return []Finding{f}
}

// LoraThrashConfig tunes the LoRA adapter pool thrash detector.
type LoraThrashConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window the pool and latency are read over.
	Range time.Duration `yaml:"range" doc:"recent window the pool and latency are read over"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline" doc:"the \"normal\" window just before it"`
	// FullUtilization is "every adapter slot taken" (0-1): the pool's
	// lowest utilization in Range must reach it.
	FullUtilization float64 `yaml:"full_utilization" doc:"the pool's lowest utilization in range: every slot taken"`
	// LatencyRatio: inter-token p99, its spread (p99/p50) or its mean at
	// least this many times the baseline.
	LatencyRatio float64 `yaml:"latency_ratio" doc:"inter-token p99, spread (p99/p50) or mean this many times the baseline"`
	// MinTokens is the fewest inter-token observations in Range.
	MinTokens float64 `yaml:"min_tokens" doc:"fewer inter-token observations in range: no verdict"`
	// FallbackShareRise: where cuda_graph_passes_total is exposed, the share
	// of decode passes run without a CUDA graph must have risen by at least
	// this much (adapter switches break graph replay).
	FallbackShareRise float64 `yaml:"fallback_share_rise" doc:"rise of the share of decode passes run without a CUDA graph (where exposed)"`
	// BaselineCoverage is what the baseline must hold before a ratio to
	// it counts (see BaselineCoverage).
	BaselineCoverage BaselineCoverage `yaml:"baseline_coverage" doc:"before any ratio to the baseline counts, the baseline"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (LoraThrashConfig) defaults() LoraThrashConfig {
	return LoraThrashConfig{
		Enabled:           true,
		Range:             2 * time.Minute,
		Baseline:          time.Hour,
		FullUtilization:   0.99,
		LatencyRatio:      1.5,
		MinTokens:         1000,
		FallbackShareRise: 0.1,
		BaselineCoverage:  DefaultBaselineCoverage(),
	}
}

// The methods below make LoraThrashConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c LoraThrashConfig) class() Class               { return LoraThrash }
func (c LoraThrashConfig) enabled() bool              { return c.Enabled }
func (c LoraThrashConfig) disabled() LoraThrashConfig { c.Enabled = false; return c }
func (c LoraThrashConfig) usesTriage() bool           { return true }
func (c LoraThrashConfig) needs() []need {
	return nil // LoRA families exist only with LoRA on, so they are never a core need
}
func (c LoraThrashConfig) reads() []string {
	return []string{series.LoraPoolUtilization, loraPoolSlotsUsed, loraPoolSlotsTotal, cudaGraphPassesTotal,
		series.InterTokenLatency}
}
func (c LoraThrashConfig) lookback() time.Duration {
	return c.Range + c.Baseline
}

func (c LoraThrashConfig) build(env buildEnv) Detector {
	return &LoraThrashDetector{cfg: c, triage: env.triage}
}

func (c LoraThrashConfig) oneShot(lookback time.Duration, samples int) (LoraThrashConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	return c, OneShot{Judged: false, Note: "needs history: latency jitter is compared with its baseline"}
}

func (c LoraThrashConfig) validate(e *configErrors) {
	c.BaselineCoverage.validate(e)
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.fraction("full_utilization", c.FullUtilization)
	e.check(c.LatencyRatio > 1, "latency_ratio", "must be greater than 1, got %v", c.LatencyRatio)
	e.positive("min_tokens", c.MinTokens)
	e.fraction("fallback_share_rise", c.FallbackShareRise)
}

// severities lists what its findings can carry; its runbook describes each.
func (c LoraThrashConfig) severities() []Severity { return []Severity{Warning} }

// position: off the chain, a LoRA pool that thrashes slows decode and
// first tokens, and the retries and failures that follow.
func (c LoraThrashConfig) position(Finding) position {
	return position{explains: []Class{QueueLatency, DecodeSlowdown, RetryAvalanche, ErrorRate}}
}

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c LoraThrashConfig) doc() doc {
	return doc{
		name:     "LoRA thrash",
		means:    "LoRA adapter pool thrash",
		signals:  "`sglang:lora_pool_*`, CUDA graph fallbacks",
		settings: "LoRA adapter pool pinned full with latency up and CUDA graph fallbacks.",
	}
}
