package detect

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// CacheCollapse is the class of a collapse of the prefix-cache hit rate.
const CacheCollapse Class = "cache_collapse"

// CacheCollapseDetector pages when the prefix (radix) cache hit rate, computed
// from token counters over a window, falls far below its baseline. Its
// diagnosis tells KV pressure (the cache is evicted to make room) from a
// prompt change (the cache has room but prompts stopped sharing prefixes).
// Releases without any hit-token counter (v0.4) expose only the
// sglang:cache_hit_rate gauge — the last prefill batch's rate, zeroed on
// decode logs, not a windowed rate. Averaged over the window it still
// follows the hit rate (the zeros dilute the range and the baseline
// alike), so it is a fallback of lower confidence: such a finding says so
// and is a warning at most.
type CacheCollapseDetector struct {
	cfg    CacheCollapseConfig
	triage TriageConfig
}

// Class implements Detector.
func (d *CacheCollapseDetector) Class() Class { return CacheCollapse }

var _ PeerObserver = (*CacheCollapseDetector)(nil)

// hitRateSource is one way to compute the hit rate: hit tokens over all
// prompt tokens.
type hitRateSource struct {
	family    string
	hit, all  Selector
	describes string
}

// hitRateSources in order of preference (see the reference §8).
var hitRateSources = []hitRateSource{
	{
		family:    series.PrefillEffectiveTokens,
		hit:       Selector{Name: series.PrefillEffectiveTokens, Match: []Match{{Label: "mode", Value: "_hit", Suffix: true}}},
		all:       Sel(series.PrefillEffectiveTokens),
		describes: "prefill_effective_tokens_total *_hit / all",
	},
	{
		family:    series.RealtimeTokensTotal,
		hit:       Sel(series.RealtimeTokensTotal, "mode", "prefill_cache"),
		all:       Sel(series.RealtimeTokensTotal, "mode", "prefill_cache|prefill_compute"),
		describes: "realtime_tokens_total prefill_cache / (prefill_cache + prefill_compute)",
	},
	{
		family:    series.CachedTokensTotal,
		hit:       Sel(series.CachedTokensTotal),
		all:       Sel(series.PromptTokensTotal),
		describes: "cached_tokens_total / prompt_tokens_total",
	},
}

// gaugeHitRateSource is the fallback of releases without hit-token
// counters: the per-batch gauge averaged over the window, resting on the
// prompt tokens counter for its traffic minimum.
var gaugeHitRateSource = hitRateSource{
	family:    series.CacheHitRateGauge,
	hit:       Selector{Name: series.CacheHitRateGauge, Combine: CombineMax},
	all:       Sel(series.PromptTokensTotal),
	describes: "from the per-batch gauge sglang:cache_hit_rate, window average, lower confidence",
}

// gaugeSamplesComparable reports whether the per-batch gauge has a finite
// value in about as many of the range's scrapes as of the baseline's. Its
// average mixes prefill batches' rates with the zeros of decode logs; when
// the prefill values go missing (NaN, Inf) the zeros left over are no hit
// rate, only the absence of one.
func gaugeSamplesComparable(w Window, p periods, src hitRateSource) bool {
	sc, ok := w.(ScrapeCounter)
	if !ok {
		return true
	}
	share := func(from, to time.Time) float64 {
		_, gauge := sc.CountAbove(src.hit, math.Inf(-1), from, to)
		_, all := sc.CountAbove(src.all, math.Inf(-1), from, to)
		if all == 0 {
			return 0
		}
		return float64(gauge) / float64(all)
	}
	return share(p.rangeStart, p.now) >= 0.75*share(p.baseStart, p.rangeStart)
}

// hitRate returns the windowed hit rate and the prompt tokens it rests on.
func hitRate(w Window, src hitRateSource, from, to time.Time) (rate, tokens float64, ok bool) {
	all, okAll := w.Increase(src.all, from, to)
	hit, okHit := w.Increase(src.hit, from, to)
	if !okAll || !okHit || all <= 0 {
		return 0, 0, false
	}
	return min(hit/all, 1), all, true
}

// hitRateKey is the Baselines key of the hit rate from the gauge or from
// counters: the gauge's window average is no counter rate, so a level of
// one is never compared with the other.
func hitRateKey(fromGauge bool) string {
	if fromGauge {
		return "gauge_hit_rate"
	}
	return "hit_rate"
}

// source picks the best hit-rate source the replica exposes.
func (d *CacheCollapseDetector) source(w Window) (src hitRateSource, fromGauge, ok bool) {
	for _, s := range hitRateSources {
		if w.Has(s.family) {
			return s, false, true
		}
	}
	if !w.Has(series.CacheHitRateGauge) || !w.Has(series.PromptTokensTotal) {
		return hitRateSource{}, false, false
	}
	return gaugeHitRateSource, true, true
}

// restarted reports whether the replica restarted within RestartGrace: its
// cache is cold, so no verdict and no level for its peers.
func (d *CacheCollapseDetector) restarted(w Window, now time.Time) bool {
	lr := w.LastRestart()
	return !lr.IsZero() && now.Sub(lr) < d.cfg.RestartGrace
}

// hitRates are the hit rate in the range and the baseline, and the prompt
// tokens each rests on.
func (d *CacheCollapseDetector) hitRates(w Window, p periods, src hitRateSource, fromGauge bool) (hr measure, tokensNow, tokensBase float64) {
	if fromGauge {
		hr = p.avg(w, src.hit)
		tokensNow, _ = w.Increase(src.all, p.rangeStart, p.now)
		tokensBase, _ = w.Increase(src.all, p.baseStart, p.rangeStart)
		return hr, tokensNow, tokensBase
	}
	hr.now, tokensNow, hr.nowOK = hitRate(w, src, p.rangeStart, p.now)
	hr.base, tokensBase, hr.baseOK = hitRate(w, src, p.baseStart, p.rangeStart)
	return hr, tokensNow, tokensBase
}

func (d *CacheCollapseDetector) ready(w Window, p periods, src hitRateSource) bool {
	c := d.cfg
	return p.baselineReady(w, c.BaselineCoverage, src.all, p.baselineTraffic(c.BaselineCoverage, c.MinPromptTokens))
}

// NeedsPeers implements PeerObserver: a hit rate low enough to be a
// collapse from any baseline, on enough prompt tokens.
func (d *CacheCollapseDetector) NeedsPeers(w Window, now time.Time) bool {
	c := d.cfg
	src, fromGauge, ok := d.source(w)
	if !ok || d.restarted(w, now) {
		return false
	}
	p := newPeriods(now, c.Range, c.Baseline)
	if tokens, ok := w.Increase(src.all, p.rangeStart, now); !ok || tokens < c.MinPromptTokens || d.ready(w, p, src) {
		return false
	}
	hr, _, _ := d.hitRates(w, p, src, fromGauge)
	return hr.nowOK && hr.now <= c.MaxRatioToBaseline
}

// Levels implements PeerObserver: the hit rate over the range (keyed by
// its source), when the range holds MinPromptTokens. Not the TTFT tail
// that makes a collapse critical: one replica's few-minute p99 against
// another's is noise.
func (d *CacheCollapseDetector) Levels(w Window, now time.Time) map[string]float64 {
	src, fromGauge, ok := d.source(w)
	if !ok || d.restarted(w, now) {
		return nil
	}
	p := newPeriods(now, d.cfg.Range, d.cfg.Baseline)
	if fromGauge && !gaugeSamplesComparable(w, p, src) {
		return nil
	}
	hr, tokensNow, _ := d.hitRates(w, p, src, fromGauge)
	if !hr.nowOK || tokensNow < d.cfg.MinPromptTokens {
		return nil
	}
	l := levelSet{}
	l.now(hitRateKey(fromGauge), hr)
	return l.orNil()
}

// Detect implements Detector.
//
// Clear rule while frozen: an incident's finding persists until the hit
// rate is back at RecoveredRatio of the frozen baseline, or at
// HealthyHitRate whatever the baseline was (a cache that serves most
// prompt tokens is healthy); its TTFT is compared with the frozen TTFT
// too. Against its healthy peers (no ready baseline of its own) the onset
// rule is the usual one, with the peers' hit rate as the baseline; such a
// collapse stays a warning (its TTFT has no baseline to be critical
// against; error_rate says when users fail).
func (d *CacheCollapseDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	if d.restarted(w, now) {
		// A restarted replica starts with an empty cache: a low hit rate is
		// expected until it warms up (replica_down reports the restart).
		return nil
	}
	p := newPeriods(now, c.Range, c.Baseline)
	src, fromGauge, found := d.source(w)
	if !found {
		return nil
	}
	if fromGauge && !gaugeSamplesComparable(w, p, src) {
		return nil
	}
	hr, tokensNow, tokensBase := d.hitRates(w, p, src, fromGauge)
	key := hitRateKey(fromGauge)
	cmp := comparisonOf(w, CacheCollapse)
	frozen, fromPeers := cmp.frozen(key), false
	switch {
	case frozen:
		cmp.onto(key, &hr)
	case !d.ready(w, p, src):
		hr.baseOK = false // a warm-up or a trickle is no reference
		if fromPeers = cmp.peers(key); fromPeers {
			cmp.onto(key, &hr)
		}
	}
	// A frozen or peers' level rests on traffic of its own: only the
	// window's baseline needs its prompt tokens counted.
	ownBase := !frozen && !fromPeers
	if !hr.nowOK || !hr.baseOK || tokensNow < c.MinPromptTokens || (ownBase && tokensBase < c.MinPromptTokens) {
		return nil
	}
	if frozen {
		if hr.now >= c.RecoveredRatio*hr.base || hr.now >= c.HealthyHitRate {
			return nil
		}
	} else if hr.now > c.MaxRatioToBaseline*hr.base || hr.base-hr.now < c.MinAbsoluteDrop {
		return nil
	}
	ttft99 := p.quantile(w, 0.99, series.TTFTSeconds)
	if !ownBase {
		cmp.onto("ttft_p99", &ttft99)
	}
	kept := levelSet{}
	kept.base(key, hr)
	kept.base("ttft_p99", ttft99)

	kv := p.kvUsageAvg(w)
	memory := kv.nowOK && kv.now >= c.KVUsageThreshold
	evictions := p.rate(w, Sel(series.EvictedTokensTotal))
	ttft50 := p.quantile(w, 0.5, series.TTFTSeconds)
	// Averages, as everywhere on a page: a last value beside the triage's
	// average would be a second number for the same quantity.
	queue := p.avg(w, Sel(series.NumQueueReqs))
	running := p.avg(w, Sel(series.NumRunningReqs))
	pageSize, pageSizeOK := w.Last(Selector{Name: series.PageSize, Combine: CombineMax})

	sev := Warning
	if !fromGauge && ttft99.nowOK && ttft99.baseOK && ttft99.base > 0 && ttft99.now >= c.CriticalTTFTRatio*ttft99.base {
		sev = Critical
	}
	layer := LayerPrefill
	if memory {
		layer = LayerMemory
	}
	f := finding(CacheCollapse, w, sev, layer)
	f.Baselines = kept.orNil()
	hitRule := hr.evidence("prefix cache hit rate ("+src.describes+")", "ratio",
		fmt.Sprintf("<= %sx baseline and >= %s below it", num(c.MaxRatioToBaseline), pctPoints(c.MinAbsoluteDrop))).
		WithLimit(min(c.MaxRatioToBaseline*hr.base, hr.base-c.MinAbsoluteDrop))
	if frozen {
		hitRule = hr.evidence("prefix cache hit rate ("+src.describes+")", "ratio",
			fmt.Sprintf("open until >= %sx the baseline frozen at onset, or >= %s", num(c.RecoveredRatio), pct(c.HealthyHitRate))).
			WithLimit(min(c.RecoveredRatio*hr.base, c.HealthyHitRate))
	}
	f.Evidence = append(f.Evidence, hitRule, Evidence{Name: "prompt tokens in range", Value: tokensNow, Baseline: tokensBase, HasBaseline: ownBase})
	if kv.nowOK {
		f.Evidence = append(f.Evidence, kv.evidence("KV cache usage (avg)", "ratio", ">= "+pct(c.KVUsageThreshold)+" means memory pressure"))
	}
	if evictions.nowOK {
		f.Evidence = append(f.Evidence, evictions.evidence("evicted tokens/s", "/s", ""))
	}
	if ttft99.nowOK {
		f.Evidence = append(f.Evidence, ttft99.evidence("TTFT p99", "s", fmt.Sprintf(">= %sx baseline for critical", num(c.CriticalTTFTRatio))))
	}
	if ttft50.nowOK {
		f.Evidence = append(f.Evidence, ttft50.evidence("TTFT p50", "s", ""))
	}
	if queue.nowOK {
		f.Evidence = append(f.Evidence, queue.evidence(p.avgOver("queued requests"), "", ""))
	}
	if running.nowOK {
		f.Evidence = append(f.Evidence, Evidence{Name: p.avgOver("running requests"), Value: running.now})
	}
	if pageSizeOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "KV page size", Value: pageSize, Unit: "tokens"})
	}

	f.Summary = fmt.Sprintf("Prefix cache hit rate collapsed to %s (baseline %s)", pct(hr.now), pct(hr.base))
	var diag strings.Builder
	if memory {
		f.Summary += fmt.Sprintf(" under KV memory pressure (usage %s)", pct(kv.now))
		fmt.Fprintf(&diag, "KV memory layer: the KV pool is near full — usage %s — so the radix cache evicts shared prefixes to make room", pctVsBaseline(kv))
		if evictions.nowOK {
			fmt.Fprintf(&diag, " (evictions %s)", vsBaseline(evictions, " tokens/s"))
		}
		diag.WriteString("; requests recompute prompts they used to reuse, prefill takes longer and batches refill slowly")
		if queue.nowOK {
			fmt.Fprintf(&diag, ", so the queue backs up (%s queued", num(queue.now))
			if running.nowOK {
				fmt.Fprintf(&diag, ", %s running", num(running.now))
			}
			diag.WriteString(")")
		}
		diag.WriteString(". This is a memory-pressure chain — KV pressure -> eviction -> lower hit rate -> queue backlog — not a GPU compute slowdown: fix memory/admission, not kernels. ")
		diag.WriteString("Check what fills the pool: longer prompts/outputs, requests without max_tokens, more concurrency. If several replicas of the model drop at once, suspect the traffic, not this replica.")
		f.Emergency = []string{
			"Relieve KV pressure: add replicas or shift traffic away from this replica.",
			"Cap prompt length and max_tokens at the router so running requests leave room for the cache.",
			"Do not flush the cache: the working set does not fit either way, flushing only adds recompute.",
			"If that is not enough, read the current --max-running-requests from " + ServerInfo + " and restart with a lower value; the restart " + restartDrops(w) + ".",
		}
		f.RootCause = []string{
			"Size the KV pool for the real prompt+output mix: --mem-fraction-static, GPUs with more memory, or hierarchical cache (--enable-hierarchical-cache) to keep prefixes in host memory.",
			"Route by prefix (cache-aware routing) so each replica's shared-prefix working set fits its pool.",
			"Find requests that hold KV for long (no max_tokens, runaway decode) and bound them.",
		}
	} else {
		if kv.nowOK {
			fmt.Fprintf(&diag, "Prefill layer: KV usage is %s, below the %s that means memory pressure, so prompts most likely stopped sharing prefixes. ", pctVsBaseline(kv), pct(c.KVUsageThreshold))
			// Usage does not count cached (evictable) tokens: rising
			// evictions fit unique prompts churning the cache, and eviction
			// pressure usage cannot show alike.
			if g, ok := evictions.growth(); ok && g >= evictionRise {
				fmt.Fprintf(&diag, "Evictions rose to %s: unique prompts fill the cache and push each other out, but if no prompt changed, the cache is being evicted under a pressure KV usage does not show (it does not count cached tokens). ", vsBaseline(evictions, " tokens/s"))
			}
		} else {
			diag.WriteString("Prefill layer: prompts stopped sharing prefixes (KV usage not exposed, so eviction pressure cannot be ruled out; see evictions). ")
		}
		diag.WriteString("Most often the prompt changed upstream: a timestamp, request id or user id in the system prompt makes every prompt unique. ")
		diag.WriteString("Other causes: chat template rendering (whitespace, newlines) after a client or tokenizer upgrade, different LoRA adapter ids (caches are not shared across adapters), a router no longer routing by prefix. ")
		diag.WriteString("Prefix matching happens only on page boundaries")
		if pageSizeOK {
			fmt.Fprintf(&diag, " (page size %s tokens)", num(pageSize))
		}
		diag.WriteString(": a change inside the first page, or a shared prefix shorter than a page, is not reused. ")
		if ttft99.nowOK {
			fmt.Fprintf(&diag, "Impact: TTFT p99 %s. ", vsBaseline(ttft99, "s"))
		}
		diag.WriteString("If several replicas of the model drop at once, the cause is the traffic, not this replica.")
		f.Emergency = []string{
			"Ask the business/application owners first: did a prompt template, system prompt or client release change in the last 24 hours? Roll it back if so.",
			"Check the router still routes by prefix (cache-aware policy) and that LoRA adapter ids did not change.",
			"If TTFT hurts users, add replicas temporarily; flushing the cache does not help against unique prompts.",
		}
		f.RootCause = []string{
			"Keep variable fields (timestamps, request/user ids) out of the prompt prefix; put them at the end.",
			"Add a cache-impact check to prompt/template release reviews (hit rate before/after in staging).",
			"Pin chat template and tokenizer versions so rendering stays byte-identical; keep shared prefixes longer than one KV page.",
		}
	}
	if fromGauge {
		diag.WriteString(" This hit rate is from the per-batch gauge, lower confidence: this release has no hit-token counters, so it is sglang:cache_hit_rate (each prefill batch's own rate, 0 on decode logs) averaged over the window; confirm with the scheduler log's #cached-token per prefill batch. A warning at most for that reason.")
	}
	f.Diagnosis = strings.TrimSpace(diag.String())
	d.triage.Classify(w, now, sev == Critical).annotate(&f)
	return []Finding{f}
}

// evictionRise is the growth of the eviction rate over its baseline a
// prompt-change diagnosis names as a possible hidden pressure.
const evictionRise = 2

// CacheCollapseConfig tunes the prefix-cache hit-rate collapse detector.
type CacheCollapseConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window the hit rate is computed over (from
	// counters: hit tokens / prompt tokens). Longer than the other
	// detectors' because hit rates of a few batches are noisy.
	Range time.Duration `yaml:"range"`
	// Baseline is the window just before Range the hit rate is compared to.
	Baseline time.Duration `yaml:"baseline"`
	// MinPromptTokens is the fewest prompt tokens in Range (and in Baseline)
	// for a verdict: a quiet replica's hit rate means nothing.
	MinPromptTokens float64 `yaml:"min_prompt_tokens" doc:"fewer prompt tokens in range or baseline: no verdict"`
	// MaxRatioToBaseline: the current hit rate must be at most this
	// fraction of the baseline hit rate ...
	MaxRatioToBaseline float64 `yaml:"max_ratio_to_baseline" doc:"hit rate now at most half the baseline ..."`
	// MinAbsoluteDrop: ... and at least this much lower in absolute terms
	// (0.05 -> 0.02 halves, but nobody should be paged for it).
	MinAbsoluteDrop float64 `yaml:"min_absolute_drop" doc:"... and at least 0.2 lower"`
	// KVUsageThreshold splits the diagnosis: average KV usage in Range at or
	// above it means eviction pressure (memory chain); below it, the prompts
	// changed.
	KVUsageThreshold float64 `yaml:"kv_usage_threshold" doc:"at or above: eviction pressure; below: prompts changed"`
	// RestartGrace: no verdict for this long after a restart — a restarted
	// replica starts with an empty cache and a low hit rate is expected.
	RestartGrace time.Duration `yaml:"restart_grace" doc:"a restarted replica's cache is cold: no verdict"`
	// CriticalTTFTRatio makes the finding critical when TTFT p99 in Range is
	// at least this many times its baseline (users feel it).
	CriticalTTFTRatio float64 `yaml:"critical_ttft_ratio" doc:"TTFT p99 this many times baseline: critical"`
	// RecoveredRatio: an incident's finding, compared with the baseline
	// frozen at its onset, persists until the hit rate is back at this
	// share of that baseline ...
	RecoveredRatio float64 `yaml:"recovered_ratio" doc:"open incident: clears at this share of its frozen baseline ..."`
	// HealthyHitRate: ... or at this hit rate, whatever the baseline was.
	HealthyHitRate float64 `yaml:"healthy_hit_rate" doc:"... or at this hit rate"`
	// BaselineCoverage is what the baseline must hold before a ratio to
	// it counts (see BaselineCoverage).
	BaselineCoverage BaselineCoverage `yaml:"baseline_coverage" doc:"before any ratio to the baseline counts, the baseline"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (CacheCollapseConfig) defaults() CacheCollapseConfig {
	return CacheCollapseConfig{
		Enabled:            true,
		Range:              5 * time.Minute,
		Baseline:           time.Hour,
		MinPromptTokens:    20000,
		MaxRatioToBaseline: 0.5,
		MinAbsoluteDrop:    0.2,
		KVUsageThreshold:   0.85,
		RestartGrace:       15 * time.Minute,
		CriticalTTFTRatio:  2,
		RecoveredRatio:     0.8,
		HealthyHitRate:     0.7,
		BaselineCoverage:   DefaultBaselineCoverage(),
	}
}

// The methods below make CacheCollapseConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c CacheCollapseConfig) class() Class                  { return CacheCollapse }
func (c CacheCollapseConfig) enabled() bool                 { return c.Enabled }
func (c CacheCollapseConfig) disabled() CacheCollapseConfig { c.Enabled = false; return c }
func (c CacheCollapseConfig) usesTriage() bool              { return true }
func (c CacheCollapseConfig) needs() []need {
	return []need{{class: CacheCollapse, what: "prefix-hit token counters",
		anyOf: [][]string{{series.PrefillEffectiveTokens}, {series.RealtimeTokensTotal}, {series.CachedTokensTotal, series.PromptTokensTotal},
			{series.CacheHitRateGauge, series.PromptTokensTotal}},
		skip: []string{"decode"}, afterTraffic: true}}
}
func (c CacheCollapseConfig) reads() []string {
	return append(append(hitRateFamilies(), kvUsageFamilies()...), series.EvictedTokensTotal, series.TTFTSeconds,
		series.NumQueueReqs, series.NumRunningReqs, series.PageSize, series.NumRequestsTotal)
}
func (c CacheCollapseConfig) lookback() time.Duration {
	return max(c.Range+c.Baseline, c.RestartGrace)
}

func (c CacheCollapseConfig) build(env buildEnv) Detector {
	return &CacheCollapseDetector{cfg: c, triage: env.triage}
}

func (c CacheCollapseConfig) oneShot(lookback time.Duration, samples int) (CacheCollapseConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	return c, OneShot{Judged: false, Note: "needs history: it compares the windowed hit rate with the same replica's hit rate before the drop — compare the hit rate above with what is normal for this model, or ask the daemon"}
}

func (c CacheCollapseConfig) validate(e *configErrors) {
	c.BaselineCoverage.validate(e)
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.positive("min_prompt_tokens", c.MinPromptTokens)
	e.check(c.MaxRatioToBaseline > 0 && c.MaxRatioToBaseline < 1, "max_ratio_to_baseline", "must be in (0,1), got %v", c.MaxRatioToBaseline)
	e.fraction("min_absolute_drop", c.MinAbsoluteDrop)
	e.fraction("kv_usage_threshold", c.KVUsageThreshold)
	e.check(c.RestartGrace >= 0, "restart_grace", "must not be negative, got %s", c.RestartGrace)
	e.check(c.CriticalTTFTRatio > 1, "critical_ttft_ratio", "must be greater than 1, got %v", c.CriticalTTFTRatio)
	e.check(c.RecoveredRatio > 0 && c.RecoveredRatio <= 1, "recovered_ratio", "must be in (0,1], got %v", c.RecoveredRatio)
	if c.MaxRatioToBaseline > 0 && c.MaxRatioToBaseline < 1 {
		// Clearing below the onset's level would page and clear at once.
		e.check(c.RecoveredRatio > c.MaxRatioToBaseline, "recovered_ratio", "must be above max_ratio_to_baseline (%v), got %v", c.MaxRatioToBaseline, c.RecoveredRatio)
	}
	e.check(c.HealthyHitRate > 0 && c.HealthyHitRate <= 1, "healthy_hit_rate", "must be in (0,1], got %v", c.HealthyHitRate)
}

// severities lists what its findings can carry; its runbook describes each.
func (c CacheCollapseConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: on the mechanism chain, at its start when the prompts changed;
// a collapse diagnosed as eviction under KV pressure (layer kv_memory)
// sits after the pressure (kv_saturation) and the retractions
// (preempt_storm): they explain it, not the other way round.
func (c CacheCollapseConfig) position(f Finding) position {
	if f.Layer == LayerMemory {
		return position{stage: 40}
	}
	return position{stage: 10}
}

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c CacheCollapseConfig) doc() doc {
	return doc{
		name:     "Prefix-cache collapse",
		means:    "prefix-cache hit rate collapse",
		signals:  "windowed hit rate from counters (`prefill_effective_tokens_total`, `realtime_tokens_total`, or `cached_tokens_total / prompt_tokens_total`); on v0.4 the per-batch `cache_hit_rate` gauge averaged, said to be lower confidence (warning at most); tells eviction pressure from a prompt change",
		settings: "Prefix-cache hit rate (from counters, never the per-batch gauge) far below its baseline.",
	}
}
