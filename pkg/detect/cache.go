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
// diagnosis tells KV pressure (shared prefixes evicted to make room) from
// a prompt change (prompts stopped sharing prefixes) by KV usage and the
// eviction counter (see evictionCheck).
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
	evictions := p.rate(w, Sel(series.EvictedTokensTotal))
	ev := d.evictionCheck(w, p, hr, kv, tokensNow, tokensBase, ownBase)
	ttft50 := p.quantile(w, 0.5, series.TTFTSeconds)
	// Averages, as everywhere on a page: a last value beside the triage's
	// average would be a second number for the same quantity.
	queue := p.avg(w, Sel(series.NumQueueReqs))
	running := p.avg(w, Sel(series.NumRunningReqs))
	// A one-token page matches prefixes at any length: no boundary to explain.
	pageSize, pageSizeOK := w.Last(Selector{Name: series.PageSize, Combine: CombineMax})
	pagedMatch := !pageSizeOK || pageSize > 1

	sev := Warning
	if !fromGauge && ttft99.nowOK && ttft99.baseOK && ttft99.base > 0 && ttft99.now >= c.CriticalTTFTRatio*ttft99.base && ttft99.now >= c.CriticalMinTTFT.Seconds() {
		sev = Critical
	}
	layer := LayerPrefill
	if ev.cause.memory() {
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
	f.Evidence = append(f.Evidence, hitRule, Evidence{Name: "prompt tokens in range", Value: tokensNow, Baseline: tokensBase, HasBaseline: ownBase, SampleSize: true})
	if kv.nowOK {
		f.Evidence = append(f.Evidence, kv.evidence("KV cache usage (avg)", "ratio", ">= "+pct(c.KVUsageThreshold)+" means memory pressure; cached prefixes are not counted"))
	}
	if evictions.nowOK {
		f.Evidence = append(f.Evidence, evictions.evidence("evicted tokens/s", "/s", ""))
	}
	if ev.perPrompt.nowOK {
		f.Evidence = append(f.Evidence, ev.perPrompt.evidence("evicted tokens per prompt token", "ratio",
			fmt.Sprintf(">= %s of the prompt tokens computed anew (%s now) means the cache is full", pct(cacheFullEvictionShare), pct(1-hr.now))))
	}
	if ev.kvPerRequest.nowOK && ev.kvExpectedOK {
		f.Evidence = append(f.Evidence, ev.kvPerRequest.evidence("KV tokens held per running request", "tokens",
			fmt.Sprintf(">= %sx the %s tokens the lost hits explain means memory pressure", num(unexplainedKVGrowth), num(ev.kvExpected))))
	}
	if ttft99.nowOK {
		f.Evidence = append(f.Evidence, ttft99.evidence("TTFT p99", "s", fmt.Sprintf(">= %sx baseline and >= %s s for critical", num(c.CriticalTTFTRatio), num(c.CriticalMinTTFT.Seconds()))))
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
	if pageSizeOK && pagedMatch {
		f.Evidence = append(f.Evidence, Evidence{Name: "KV page size", Value: pageSize, Unit: "tokens"})
	}

	f.Summary = fmt.Sprintf("Prefix cache hit rate collapsed to %s (baseline %s)", pct(hr.now), pct(hr.base))
	var diag strings.Builder
	switch ev.cause {
	case causeKVFull:
		f.Summary += fmt.Sprintf(" under KV memory pressure (usage %s)", pct(kv.now))
		fmt.Fprintf(&diag, "KV memory layer: the KV pool is near full — usage %s — so the radix cache evicts shared prefixes to make room", pctVsBaseline(kv))
		// An eviction rate below its baseline is no support for the claim
		// (a full pool admits fewer new prompts to evict for): it stays in
		// the evidence, not in the reasoning.
		if evictions.nowOK && !(evictions.baseOK && evictions.now < evictions.base) {
			fmt.Fprintf(&diag, " (evictions %s)", vsBaseline(evictions, " tokens/s"))
		}
		diag.WriteString("; ")
	case causeEvicted:
		f.Summary += fmt.Sprintf(": shared prefixes evicted under memory pressure (%s evicted tokens/s)", num(evictions.now))
		fmt.Fprintf(&diag, "KV memory layer: the radix cache is full and churns — %s evicted tokens/s, %s of the prompt tokens%s — so shared prefixes are evicted under memory pressure before they are reused. ",
			num(evictions.now), pct(ev.perPrompt.now), baselinePct(ev.perPrompt))
		if kv.nowOK {
			fmt.Fprintf(&diag, "KV usage %s counts only what running requests hold, not cached prefixes: ", pctVsBaseline(kv))
		}
		diag.WriteString(ev.pressure())
		diag.WriteString(" — less room is left for cached prefixes; ")
	case causePromptsCacheRoom:
		fmt.Fprintf(&diag, "Prefill layer: the cache had room, so prompts most likely stopped sharing prefixes: %s evicted tokens/s are %s of the prompt tokens while %s were computed anew — the pool evicts only when full, and once full every newly computed token evicts a cached one — so no memory pressure pushed the shared prefixes out",
			num(evictions.now), pct(ev.perPrompt.now), pct(1-hr.now))
		if kv.nowOK {
			fmt.Fprintf(&diag, " (KV usage %s)", pctVsBaseline(kv))
		}
		diag.WriteString(". ")
	case causePromptsLikely:
		fmt.Fprintf(&diag, "Prefill layer: prompts most likely stopped sharing prefixes. The cache is full and churns — %s evicted tokens/s, %s of the prompt tokens%s — but no more than the lost hits add: once the cache is full every newly computed token evicts a cached one. ",
			num(evictions.now), pct(ev.perPrompt.now), baselinePct(ev.perPrompt))
		fmt.Fprintf(&diag, "KV usage %s rose no more than the lost hits explain (each running request now holds the prompt it used to share: %s tokens each, %s expected, baseline %s) and prompt traffic is steady (%s tokens/s, baseline %s). ",
			pctVsBaseline(kv), num(ev.kvPerRequest.now), num(ev.kvExpected), num(ev.kvPerRequest.base), num(ev.promptRate.now), num(ev.promptRate.base))
		diag.WriteString("What the metrics cannot tell apart: more distinct shared prefixes than the cache holds (new tenants, system prompts or adapters) looks the same; if no prompt changed, compare the number of distinct system prompts before and after. ")
	default:
		diag.WriteString("Prefill layer: ")
		if kv.nowOK {
			fmt.Fprintf(&diag, "KV usage is %s, below the %s that means memory pressure, but it does not count cached prefixes; ", pctVsBaseline(kv), pct(c.KVUsageThreshold))
		}
		diag.WriteString(ev.unknownReason())
		diag.WriteString(", so the metrics cannot tell prompts that stopped sharing prefixes from shared prefixes evicted under memory pressure. ")
		diag.WriteString("Check the prompts first (below); if none changed, treat it as eviction pressure: compare the KV each running request holds (sglang:num_used_tokens / num_running_reqs) and the prompt and output lengths with an hour ago. ")
	}
	if ev.cause.memory() {
		diag.WriteString("requests recompute prompts they used to reuse, prefill takes longer and batches refill slowly")
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
			"If that is not enough, read the current --max-running-requests and --mem-fraction-static from " + ServerInfo + " and restart with fewer running requests, or a higher mem-fraction-static if the GPU has memory to spare; the restart " + restartDrops(w) + ".",
		}
		f.RootCause = []string{
			"Size the KV pool for the real prompt+output mix: --mem-fraction-static, GPUs with more memory, or hierarchical cache (--enable-hierarchical-cache) to keep prefixes in host memory.",
			"Route by prefix (cache-aware routing) so each replica's shared-prefix working set fits its pool.",
			"Find requests that hold KV for long (no max_tokens, runaway decode) and bound them.",
		}
	} else {
		diag.WriteString("Most often the prompt changed upstream: a timestamp, request id or user id in the system prompt makes every prompt unique. ")
		diag.WriteString("Other causes: chat template rendering (whitespace, newlines) after a client or tokenizer upgrade, different LoRA adapter ids (caches are not shared across adapters), a router no longer routing by prefix. ")
		if pagedMatch {
			diag.WriteString("Prefix matching happens only on page boundaries")
			if pageSizeOK {
				fmt.Fprintf(&diag, " (page size %s tokens)", num(pageSize))
			}
			diag.WriteString(": a change inside the first page, or a shared prefix shorter than a page, is not reused. ")
		}
		if ttft99.nowOK {
			fmt.Fprintf(&diag, "Impact: TTFT p99 %s. ", vsBaseline(ttft99, "s"))
		}
		diag.WriteString("If several replicas of the model drop at once, the cause is the traffic, not this replica.")
		f.Emergency = []string{
			"Ask the business/application owners first: did a prompt template, system prompt or client release change in the last 24 hours? Roll it back if so.",
			"Check the router still routes by prefix (cache-aware policy) and that LoRA adapter ids did not change.",
			"If TTFT hurts users, add replicas temporarily; flushing the cache does not help against unique prompts.",
		}
		if ev.cause == causeUnknown {
			f.Emergency = append(f.Emergency, "If no prompt, template or routing changed, treat it as eviction pressure: shift traffic away or cap prompt length and max_tokens at the router so running requests leave room for the cache.")
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
	d.triage.Classify(w, now, highIf(sev == Critical)).annotate(&f)
	return []Finding{f}
}

// collapseCause is what a collapse's diagnosis blames.
type collapseCause int

const (
	// causeKVFull: KV usage at or above KVUsageThreshold.
	causeKVFull collapseCause = iota
	// causeEvicted: the cache churns and running requests hold more KV,
	// or prompt traffic grew, beyond what the lost hits explain.
	causeEvicted
	// causePromptsCacheRoom: evictions fall short of the tokens computed
	// anew, so the cache had room.
	causePromptsCacheRoom
	// causePromptsLikely: the cache churns, no more than the lost hits
	// explain.
	causePromptsLikely
	// causeUnknown: the eviction counter, or what the churn must be
	// weighed against, is missing.
	causeUnknown
)

func (c collapseCause) memory() bool { return c == causeKVFull || c == causeEvicted }

// Thresholds of the cause decision (see evictionCheck).
const (
	// cacheFullEvictionShare: evictions of at least this share of the
	// prompt tokens computed anew mean the cache is full.
	cacheFullEvictionShare = 0.5
	// unexplainedKVGrowth: KV per running request this many times what
	// the lost hits explain means memory pressure.
	unexplainedKVGrowth = 1.25
	// promptTrafficGrowth: prompt tokens/s this many times the baseline's
	// insert that much faster and hold that much more KV.
	promptTrafficGrowth = 1.5
)

// collapseEvictions is the eviction side of a collapse and the cause it
// points at.
type collapseEvictions struct {
	cause collapseCause
	// perPrompt is evicted tokens per prompt token.
	perPrompt measure
	// kvPerRequest is KV tokens held per running request (usage x pool /
	// running); kvExpected what the baseline's plus the lost hits give.
	kvPerRequest measure
	kvExpected   float64
	kvExpectedOK bool
	// promptRate is prompt tokens/s.
	promptRate       measure
	noEvictionSeries bool
}

// evictionCheck decides the cause of a collapse below KVUsageThreshold.
//
// Physics: the radix cache keeps every finished request's KV until the
// pool needs the room, so after warm-up the pool is full and every newly
// computed token (a prompt token that missed, a generated token) evicts a
// cached one. Evicted tokens per prompt token are then about the miss
// share plus generated per prompt token — in a prompt change as much as
// under memory pressure: a prompt change raises evictions exactly by the
// lost hits, and KV usage (which does not count cached tokens) rises too,
// because each running request now holds privately the prompt it used to
// share (the simulator's timestamped system prompt: hit 81% -> 0%,
// evictions 31% -> 112% of the prompt tokens, usage 15% -> 65%). So the
// churn alone tells only whether the cache was full:
//   - evictions below cacheFullEvictionShare of the tokens computed anew:
//     the cache had room, nothing forced the prefixes out — the prompts
//     stopped sharing them;
//   - a full, churning cache: memory pressure only if something other
//     than the lost hits took the room — KV held per running request
//     above its baseline plus the prompt tokens the lost hits add
//     (longer prompts or outputs), or more prompt traffic. A prompt
//     change meets its expected KV within a few percent (2031 vs 2103
//     tokens in that scenario); a neighbour's long documents double it.
//
// More distinct prefixes than the cache holds, with the same traffic,
// stays indistinguishable from a prompt change; the page says so.
func (d *CacheCollapseDetector) evictionCheck(w Window, p periods, hr, kv measure, tokensNow, tokensBase float64, ownBase bool) collapseEvictions {
	var ev collapseEvictions
	if kv.nowOK && kv.now >= d.cfg.KVUsageThreshold {
		ev.cause = causeKVFull
		return ev
	}
	ev.cause = causeUnknown
	evicted := p.increase(w, Sel(series.EvictedTokensTotal))
	if !evicted.nowOK {
		ev.noEvictionSeries = !w.Has(series.EvictedTokensTotal)
		return ev
	}
	ev.perPrompt.now, ev.perPrompt.nowOK = ratio(evicted.now, tokensNow)
	if evicted.baseOK && ownBase {
		ev.perPrompt.base, ev.perPrompt.baseOK = ratio(evicted.base, tokensBase)
	}
	if !ev.perPrompt.nowOK {
		return ev
	}
	if ev.perPrompt.now < cacheFullEvictionShare*(1-hr.now) {
		ev.cause = causePromptsCacheRoom
		return ev
	}
	if !ownBase || !kv.nowOK || !kv.baseOK {
		return ev
	}
	rangeSecs, baseSecs := p.now.Sub(p.rangeStart).Seconds(), p.rangeStart.Sub(p.baseStart).Seconds()
	ev.promptRate = measure{now: tokensNow / rangeSecs, base: tokensBase / baseSecs, nowOK: true, baseOK: true}
	running := p.avg(w, Sel(series.NumRunningReqs))
	requests := p.increase(w, Sel(series.NumRequestsTotal))
	pool, poolOK := w.Last(Selector{Name: series.MaxTotalNumTokens, Combine: CombineMax})
	promptPerRequest, lenOK := ratio(tokensBase, requests.base)
	if !running.nowOK || !running.baseOK || !requests.baseOK || !poolOK || !lenOK {
		return ev
	}
	ev.kvPerRequest.now, ev.kvPerRequest.nowOK = ratio(kv.now*pool, running.now)
	ev.kvPerRequest.base, ev.kvPerRequest.baseOK = ratio(kv.base*pool, running.base)
	if !ev.kvPerRequest.nowOK || !ev.kvPerRequest.baseOK {
		return ev
	}
	ev.kvExpected = ev.kvPerRequest.base + promptPerRequest*max(hr.base-hr.now, 0)
	ev.kvExpectedOK = true
	if ev.kvPerRequest.now >= unexplainedKVGrowth*ev.kvExpected || ev.promptRate.now >= promptTrafficGrowth*ev.promptRate.base {
		ev.cause = causeEvicted
	} else {
		ev.cause = causePromptsLikely
	}
	return ev
}

// pressure names what took the room from the cache.
func (ev collapseEvictions) pressure() string {
	var why []string
	if ev.kvPerRequest.now >= unexplainedKVGrowth*ev.kvExpected {
		why = append(why, fmt.Sprintf("each running request holds %s KV tokens (baseline %s), more than the %s the lost hits explain — longer prompts or outputs", num(ev.kvPerRequest.now), num(ev.kvPerRequest.base), num(ev.kvExpected)))
	}
	if ev.promptRate.now >= promptTrafficGrowth*ev.promptRate.base {
		why = append(why, fmt.Sprintf("prompt traffic rose to %s tokens/s (baseline %s)", num(ev.promptRate.now), num(ev.promptRate.base)))
	}
	return strings.Join(why, ", and ")
}

// unknownReason says why the cause is undecided.
func (ev collapseEvictions) unknownReason() string {
	switch {
	case ev.noEvictionSeries:
		return "this release does not export the eviction counter (sglang:evicted_tokens_total)"
	case ev.perPrompt.nowOK:
		return fmt.Sprintf("the cache is full and churns (evicted tokens %s of the prompt tokens), which both causes produce, and the KV held per running request or its baseline is not available to weigh it", pct(ev.perPrompt.now))
	default:
		return "the eviction counter has no rate over the range"
	}
}

// CacheCollapseConfig tunes the prefix-cache hit-rate collapse detector.
type CacheCollapseConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window the hit rate is computed over (from
	// counters: hit tokens / prompt tokens). Longer than the other
	// detectors' because hit rates of a few batches are noisy.
	Range time.Duration `yaml:"range" doc:"recent window the hit rate is read over (from counters)"`
	// Baseline is the window just before Range the hit rate is compared to.
	Baseline time.Duration `yaml:"baseline" doc:"the \"normal\" window just before it"`
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
	// above it means eviction pressure (memory chain); below it, the
	// eviction counter decides (evictionCheck).
	KVUsageThreshold float64 `yaml:"kv_usage_threshold" doc:"at or above: eviction pressure; below it, the eviction counter decides"`
	// RestartGrace: no verdict for this long after a restart — a restarted
	// replica starts with an empty cache and a low hit rate is expected.
	RestartGrace time.Duration `yaml:"restart_grace" doc:"a restarted replica's cache is cold: no verdict"`
	// CriticalTTFTRatio and CriticalMinTTFT make it critical: TTFT p99 this
	// many times its baseline and this long (users feel 2 s, not 0.2 s).
	CriticalTTFTRatio float64       `yaml:"critical_ttft_ratio" doc:"TTFT p99 this many times baseline ..."`
	CriticalMinTTFT   time.Duration `yaml:"critical_min_ttft" doc:"... and at least this long: critical"`
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
		CriticalMinTTFT:    time.Second,
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
func (c CacheCollapseConfig) lookback() time.Duration { return max(c.Range+c.Baseline, c.RestartGrace) }
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
	e.positiveDuration("critical_min_ttft", c.CriticalMinTTFT)
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
