package detect

import (
	"fmt"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// KVSaturation is the class of a KV cache pool pinned near full (OOM risk).
const KVSaturation Class = "kv_saturation"

// KVSaturationDetector pages when the KV cache pool stays pinned near full
// (OOM risk: no headroom left) and says why, following the runbook's OOM
// path: runaway decode (outputs far longer than normal — requests without
// an output cap finishing by length) or plain capacity.
//
// Every usage source it reads counts the radix cache's evictable tokens
// (cached prefixes no running request holds) as free: SGLang's used =
// total - available - evictable, in every release. A pool full by that
// measure is held by the running requests, so a high prefix hit rate is
// never the reason it is full ("deliberate retention" would show as
// evictable tokens, i.e. low usage).
//
// SGLang fills its pool by design under load, so a pool that has sat near
// full for the whole baseline is a steady state, not an incident: the
// detector needs the usage to have risen into saturation, or a runaway
// decode signal. Retractions are preempt_storm's; when they run, this
// finding stays a warning and says so.
type KVSaturationDetector struct {
	cfg    KVSaturationConfig
	triage TriageConfig
}

// Class implements Detector.
func (d *KVSaturationDetector) Class() Class { return KVSaturation }

// kvLevel is the KV usage over a range: its lowest and average value.
type kvLevel struct {
	min, avg float64
	ok       bool
	source   string
}

// kvLevels reads the KV usage over (from, to], from the same sources as
// kvUsage plus the absolute free/evictable slots of current releases. The
// series must cover the range: "pinned" needs both of its ends observed.
func kvLevels(w Window, from, to time.Time) kvLevel {
	for _, name := range []string{series.FullTokenUsage, series.TokenUsage} {
		sel := Selector{Name: name, Combine: CombineMax}
		lo, okLo := w.Min(sel, from, to)
		avg, okAvg := w.Avg(sel, from, to)
		if okLo && okAvg && covers(w, sel, from, to) {
			return kvLevel{min: lo, avg: avg, ok: true, source: name}
		}
	}
	total, ok := w.Last(Sel(series.MaxTotalNumTokens))
	if !ok || total <= 0 {
		return kvLevel{}
	}
	used := Sel(series.NumUsedTokens)
	if lo, ok := w.Min(used, from, to); ok && covers(w, used, from, to) {
		avg, _ := w.Avg(used, from, to)
		return kvLevel{min: lo / total, avg: avg / total, ok: true, source: "num_used_tokens / max_total_num_tokens"}
	}
	// Free = available + evictable. The highest free count of each family
	// bounds the free slots from above, so the lowest usage derived from it
	// never overstates how full the pool was.
	avail, evict := Sel(series.KVAvailableTokens), Sel(series.KVEvictableTokens)
	aMax, okA := w.Max(avail, from, to)
	eMax, okE := w.Max(evict, from, to)
	if okA && okE && covers(w, avail, from, to) {
		aAvg, _ := w.Avg(avail, from, to)
		eAvg, _ := w.Avg(evict, from, to)
		return kvLevel{min: max(0, 1-(aMax+eMax)/total), avg: max(0, 1-(aAvg+eAvg)/total), ok: true,
			source: "1 - (kv_available_tokens + kv_evictable_tokens) / max_total_num_tokens"}
	}
	return kvLevel{}
}

// kvCause is the diagnosis branch of the runbook's OOM path.
type kvCause int

const (
	kvCapacity kvCause = iota
	kvRunaway
)

var _ PeerObserver = (*KVSaturationDetector)(nil)

// Baselines keys of kv_saturation.
const (
	kvUsageKey   = "kv_usage"
	kvOutputKey  = "output_tokens_per_request"
	kvSeqKey     = "seq_len_per_request"
	kvRunningKey = "running"
)

func (d *KVSaturationDetector) ready(w Window, p periods) bool {
	c := d.cfg
	return p.baselineReady(w, c.BaselineCoverage, Sel(series.NumRunningReqs), 0) && (!w.Has(series.NumRequestsTotal) ||
		p.baselineReady(w, c.BaselineCoverage, Sel(series.NumRequestsTotal), p.baselineTraffic(c.BaselineCoverage, c.MinRequests)))
}

// NeedsPeers implements PeerObserver: a pool pinned for the whole range.
func (d *KVSaturationDetector) NeedsPeers(w Window, now time.Time) bool {
	p := newPeriods(now, d.cfg.Range, d.cfg.Baseline)
	lvl := kvLevels(w, p.rangeStart, now)
	return lvl.ok && lvl.min >= d.cfg.UsageThreshold && !d.ready(w, p)
}

// Levels implements PeerObserver: the average KV usage over the range,
// the running batch and its sequence length per request, and the output
// length when MinRequests finished in the range.
func (d *KVSaturationDetector) Levels(w Window, now time.Time) map[string]float64 {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	lvl := kvLevels(w, p.rangeStart, now)
	if !lvl.ok {
		return nil
	}
	l := levelSet{}
	l.level(kvUsageKey, lvl.avg, true)
	outLen, _, enough, _ := d.outputLength(w, p)
	if enough {
		l.now(kvOutputKey, outLen)
	}
	l.now(kvRunningKey, p.avg(w, Sel(series.NumRunningReqs)))
	l.now(kvSeqKey, p.gaugeRatio(w, Sel(series.DecodeSumSeqLens), Sel(series.NumRunningReqs)))
	return l.orNil()
}

// outputLength is the output tokens per finished request, its name, and
// whether the range and the baseline each saw MinRequests of them.
func (d *KVSaturationDetector) outputLength(w Window, p periods) (outLen measure, name string, nowEnough, baseEnough bool) {
	c := d.cfg
	outLen = p.perUnit(w, Sel(series.GenerationTokensTotal), Sel(series.NumRequestsTotal))
	finished := p.increase(w, Sel(series.NumRequestsTotal))
	name = "output tokens per finished request (generation_tokens_total / num_requests_total)"
	if outLen.nowOK && outLen.baseOK {
		return outLen, name, finished.nowOK && finished.now >= c.MinRequests, finished.baseOK && finished.base >= c.MinRequests
	}
	// Releases with only the per-request histogram.
	outLen = p.histMean(w, series.GenerationTokensHist)
	obs := measure{}
	obs.now, obs.nowOK = w.Observations(series.GenerationTokensHist, nil, p.rangeStart, p.now)
	obs.base, obs.baseOK = w.Observations(series.GenerationTokensHist, nil, p.baseStart, p.rangeStart)
	name = "output tokens per finished request (generation_tokens_histogram mean)"
	return outLen, name, obs.nowOK && obs.now >= c.MinRequests, obs.baseOK && obs.base >= c.MinRequests
}

// Detect implements Detector.
//
// Clear rule while frozen: an incident's finding persists while its onset
// rule holds against the levels frozen at its onset — the pool still
// pinned at UsageThreshold for the whole range (the absolute floor: below
// it the pool has headroom, whatever the baseline was) and risen MinRise
// above the frozen average usage, or outputs or sequences still
// OutputLengthRatio or SeqLenRatio above the frozen ones. Against its
// healthy peers (no ready baseline of its own) the same rule uses the
// peers' levels.
func (d *KVSaturationDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	lvl := kvLevels(w, p.rangeStart, now)
	if !lvl.ok || lvl.min < c.UsageThreshold {
		return nil
	}
	base := kvLevels(w, p.baseStart, p.rangeStart)
	// Runaway decode: outputs far longer than normal.
	outLen, outLenName, enough, baseEnough := d.outputLength(w, p)
	running := p.avg(w, Sel(series.NumRunningReqs))
	seqPerReq := p.gaugeRatio(w, Sel(series.DecodeSumSeqLens), Sel(series.NumRunningReqs))
	cmp := comparisonOf(w, KVSaturation)
	keys := []string{kvUsageKey, kvOutputKey, kvSeqKey}
	if cmp.frozen(keys...) || !d.ready(w, p) {
		// A warm-up or a trickle is no reference; a frozen or peers'
		// level, which rests on its own traffic, replaces it.
		base, baseEnough = kvLevel{}, true
		forgetBaseline(&outLen, &running, &seqPerReq)
		if cmp.frozen(keys...) || cmp.peers(keys...) {
			base.avg, base.ok = cmp.level(kvUsageKey)
			cmp.onto(kvOutputKey, &outLen)
			cmp.onto(kvRunningKey, &running)
			cmp.onto(kvSeqKey, &seqPerReq)
		}
	}
	risen := base.ok && base.avg <= lvl.min-c.MinRise
	g, ok := outLen.growth()
	longOutputs := ok && enough && baseEnough && g >= c.OutputLengthRatio

	rg, rok := running.growth()
	steadyBatch := rok && rg >= 1-c.RunningTolerance && rg <= 1+c.RunningTolerance
	sg, sok := seqPerReq.growth()
	growingSeqs := sok && steadyBatch && sg >= c.SeqLenRatio
	runaway := longOutputs || growingSeqs
	if !risen && !runaway {
		return nil
	}
	kept := levelSet{}
	kept.level(kvUsageKey, base.avg, base.ok)
	kept.base(kvOutputKey, outLen)
	kept.base(kvRunningKey, running)
	kept.base(kvSeqKey, seqPerReq)

	var hr measure
	hrName := ""
	for _, src := range hitRateSources {
		if w.Has(src.family) {
			hr.now, _, hr.nowOK = hitRate(w, src, p.rangeStart, now)
			hr.base, _, hr.baseOK = hitRate(w, src, p.baseStart, p.rangeStart)
			hrName = "prefix cache hit rate (" + src.describes + ")"
			break
		}
	}

	retractions := p.rate(w, Sel(series.RetractedRequestsTotal))
	storm := retractions.nowOK && retractions.now >= c.RetractionsPerSecond
	if sc, ok := w.(ScrapeCounter); ok && !retractions.nowOK {
		above, _ := sc.CountAbove(Sel(series.NumRetractedReqsGauge), 0, p.rangeStart, now)
		storm = above >= 3
	}

	cause := kvCapacity
	if runaway {
		cause = kvRunaway
	}

	sev := Warning
	if lvl.min >= c.CriticalUsage && !storm {
		sev = Critical
	}
	p90 := p.quantile(w, 0.9, series.GenerationTokensHist)
	cmp.context(kept, "output_length_p90", &p90)
	cmp.context(kept, "prefix_hit_rate", &hr)
	cmp.context(kept, "retractions_per_second", &retractions)
	f := finding(KVSaturation, w, sev, LayerMemory)
	f.Baselines = kept.orNil()
	usage := measure{now: lvl.min, nowOK: true, base: base.avg, baseOK: base.ok}
	f.Evidence = append(f.Evidence,
		usage.evidence("KV cache usage, lowest in range ("+lvl.source+"; baseline: average)", "ratio",
			fmt.Sprintf(">= %s for %s", pct(c.UsageThreshold), ShortDuration(c.Range))).WithLimit(c.UsageThreshold),
		Evidence{Name: "KV cache usage, average in range", Value: lvl.avg, Unit: "ratio"},
	)
	if total, ok := w.Last(Sel(series.MaxTotalNumTokens)); ok {
		f.Evidence = append(f.Evidence, Evidence{Name: "KV pool size (max_total_num_tokens)", Value: total, Unit: "tokens"})
	}
	if a, ok := w.Last(Sel(series.KVAvailableTokens)); ok {
		if e, ok := w.Last(Sel(series.KVEvictableTokens)); ok {
			f.Evidence = append(f.Evidence, Evidence{Name: "free KV slots now (available + evictable)", Value: a + e, Unit: "tokens"})
		}
	}
	if outLen.nowOK {
		f.Evidence = append(f.Evidence, outLen.evidence(outLenName, "tokens", fmt.Sprintf(">= %sx baseline is runaway decode", num(c.OutputLengthRatio))))
	}
	if p90.nowOK {
		f.Evidence = append(f.Evidence, p90.evidence("output length p90 (generation_tokens_histogram)", "tokens", ""))
	}
	if seqPerReq.nowOK {
		f.Evidence = append(f.Evidence, seqPerReq.evidence("decode sequence length per running request (decode_sum_seq_lens / num_running_reqs)", "tokens",
			fmt.Sprintf(">= %sx baseline at a steady batch is runaway decode", num(c.SeqLenRatio))))
	}
	if running.nowOK {
		f.Evidence = append(f.Evidence, running.evidence(p.avgOver("running requests"), "", ""))
	}
	if ctx, ok := w.Last(Selector{Name: series.ContextLen, Combine: CombineMax}); ok {
		f.Evidence = append(f.Evidence, Evidence{Name: "context length (ceiling of an uncapped output)", Value: ctx, Unit: "tokens"})
	}
	if hr.nowOK {
		f.Evidence = append(f.Evidence, hr.evidence(hrName, "ratio", ""))
	}
	if retractions.nowOK {
		f.Evidence = append(f.Evidence, retractions.evidence("retracted requests/s", "/s", ""))
	}

	level := fmt.Sprintf("KV cache pinned at >= %s for %s (lowest %s", pct(c.UsageThreshold), ShortDuration(c.Range), pct(lvl.min))
	if base.ok {
		level += fmt.Sprintf(", baseline average %s", pct(base.avg))
	}
	level += ")"
	var why, diag string
	switch cause {
	case kvRunaway:
		why = "runaway decode"
		if longOutputs {
			why += fmt.Sprintf(", outputs of %s tokens per request (baseline %s)", num(outLen.now), num(outLen.base))
		}
		diag = "Runaway decode: "
		if longOutputs {
			diag += fmt.Sprintf("finished requests now generate %s tokens each, %sx the baseline's %s", num(outLen.now), num(g), num(outLen.base))
			if p90.nowOK {
				diag += fmt.Sprintf(" (output length p90 %s)", vsBaseline(p90, " tokens"))
			}
			diag += ". "
		}
		if growingSeqs {
			diag += fmt.Sprintf("The decode batch's sequences keep growing: %s tokens per running request (baseline %s) at a steady %s running, so the same requests hold ever more KV instead of finishing. ",
				num(seqPerReq.now), num(seqPerReq.base), num(running.now))
		}
		diag += "The metrics cannot see finish_reason, but this is the signature of requests without max_new_tokens (max_tokens) decoding until they finish by length — the output cap or the context limit. " +
			"Check the request log's finish_reason: many finish_reason=length with long outputs confirms it. " +
			"This is a request-configuration problem (a missing output cap), not a GPU memory leak."
		f.Emergency = []string{
			"Enforce an output cap now: a default and a maximum max_new_tokens (max_tokens) at the router/gateway, or in the calling client.",
			"Find the callers: request log entries with finish_reason=length and long outputs, by rid and client; ask their owners to set max_tokens.",
			"If the pool must be relieved before that lands: shift traffic to other replicas at the router. A restart with a lower --max-running-requests than the current one, which " + ServerInfo + " shows, relieves it too, but " + restartDrops(w) + ".",
		}
		f.RootCause = []string{
			"Make an output cap mandatory (or defaulted) in the client SDK and the gateway; alert on the share of finish_reason=length.",
			"Compare sglang:generation_tokens_histogram before and after the last client or prompt release to find what changed.",
			"Where long outputs are legitimate, size for them: fewer concurrent requests per replica, or a KV pool (--mem-fraction-static, GPUs) that fits prompt + output at the target concurrency.",
		}
	default:
		why = "plain capacity"
		diag = "Plain capacity: output lengths are normal, so the traffic simply needs more KV than the pool holds"
		if running.nowOK {
			diag += fmt.Sprintf(" (%s running requests, baseline %s)", num(running.now), num(running.base))
		}
		diag += "."
		f.Emergency = []string{
			"Add replicas or shift traffic away from this replica.",
			"Cap prompt length and max_tokens at the router so single requests cannot claim the pool.",
			"Then make the admitted batch fit the pool with headroom, with a restart that " + restartDrops(w) + ": read the current --max-running-requests from " + ServerInfo + " and restart with a lower value.",
		}
		f.RootCause = []string{
			"Size the KV pool for the real prompt + output mix at the target concurrency: --mem-fraction-static (carefully: CUDA graphs and activations need room), GPUs with more memory, or more tensor parallelism.",
			"Plan capacity per replica: pool tokens (sglang:max_total_num_tokens) against concurrent requests × (prompt + output) tokens.",
		}
	}
	f.Summary = level + ": " + why

	var pressure string
	if storm {
		pressure = fmt.Sprintf("Retractions already run at %s/s: the preempt_storm finding covers the acute effect (running requests evicted and recomputed); this finding is the pressure underneath it.", num(retractions.now))
	} else {
		pressure = "No retractions yet: the scheduler still admits only what fits, but there is no headroom left — the next burst of long prompts or outputs means retractions (preempt_storm), and with a too high --mem-fraction-static a CUDA out-of-memory crash."
	}
	cache := ""
	if hr.nowOK {
		cache = fmt.Sprintf("The prefix hit rate is %s; cached prefixes no running request holds are evictable and this usage counts them as free, so the pool is held by the running requests themselves, not by the cache — flushing it frees nothing.", pct(hr.now))
	}
	f.Diagnosis = sentence("KV memory layer: "+level+".", diag, cache, pressure)
	d.triage.Classify(w, now, LatencyToJudge).annotate(&f)
	return []Finding{f}
}

// KVSaturationConfig tunes the KV-pool saturation (OOM risk) detector.
type KVSaturationConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is how long KV usage must stay pinned: its lowest value in
	// Range must reach UsageThreshold.
	Range time.Duration `yaml:"range" doc:"the lowest usage in range must reach usage_threshold"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline" doc:"the \"normal\" window just before it"`
	// UsageThreshold is "pinned near full" (0-1).
	UsageThreshold float64 `yaml:"usage_threshold" doc:"KV usage counted as pinned"`
	// MinRise: without a runaway-decode signal, the baseline's average usage
	// must be at least this far below the pinned level. SGLang fills its
	// pool by design under load; a replica that has sat near full for the
	// whole baseline is in its steady state, not in a new incident.
	MinRise float64 `yaml:"min_rise" doc:"above its baseline by at least this much"`
	// CriticalUsage makes the finding critical (no headroom at all) unless
	// retractions are already running (preempt_storm pages for those).
	CriticalUsage float64 `yaml:"critical_usage" doc:"critical, unless retractions already run (preempt_storm pages)"`
	// OutputLengthRatio: output tokens per finished request at least this
	// many times the baseline is runaway decode.
	OutputLengthRatio float64 `yaml:"output_length_ratio" doc:"generated tokens per request vs baseline: runaway decode"`
	// MinRequests is the fewest finished requests in Range (and Baseline)
	// for an output-length comparison.
	MinRequests float64 `yaml:"min_requests" doc:"finished requests in range and baseline for the output-length comparison"`
	// SeqLenRatio: the decode batch's summed sequence length per running
	// request at least this many times the baseline, at a running count
	// within RunningTolerance of it, is runaway decode too (sequences grow
	// while the batch does not).
	SeqLenRatio      float64 `yaml:"seq_len_ratio" doc:"decode sequence lengths vs baseline at the same batch size"`
	RunningTolerance float64 `yaml:"running_tolerance" doc:"running count within this of the baseline's for the seq_len_ratio comparison"`
	// RetractionsPerSecond: at or above it the pool is already retracting;
	// preempt_storm covers the acute effect and this finding stays a
	// warning.
	RetractionsPerSecond float64 `yaml:"retractions_per_second" doc:"at or above: preempt_storm covers it"`
	// BaselineCoverage is what the baseline must hold before a ratio to
	// it counts (see BaselineCoverage).
	BaselineCoverage BaselineCoverage `yaml:"baseline_coverage" doc:"before any ratio to the baseline counts, the baseline"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (KVSaturationConfig) defaults() KVSaturationConfig {
	return KVSaturationConfig{
		Enabled:              true,
		Range:                5 * time.Minute,
		Baseline:             time.Hour,
		UsageThreshold:       0.95,
		MinRise:              0.1,  // e.g. from 0.85 or less on average
		CriticalUsage:        0.99, // not one free slot in a hundred, for the whole range
		OutputLengthRatio:    2,
		MinRequests:          10,
		SeqLenRatio:          2,
		RunningTolerance:     0.25,
		RetractionsPerSecond: 0.1, // preempt_storm's floor
		BaselineCoverage:     DefaultBaselineCoverage(),
	}
}

// The methods below make KVSaturationConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c KVSaturationConfig) class() Class                 { return KVSaturation }
func (c KVSaturationConfig) enabled() bool                { return c.Enabled }
func (c KVSaturationConfig) disabled() KVSaturationConfig { c.Enabled = false; return c }
func (c KVSaturationConfig) usesTriage() bool             { return true }
func (c KVSaturationConfig) needs() []need {
	return []need{{class: KVSaturation, what: "KV cache usage",
		anyOf: [][]string{{series.FullTokenUsage}, {series.TokenUsage}, {series.NumUsedTokens, series.MaxTotalNumTokens},
			{series.KVAvailableTokens, series.KVEvictableTokens, series.MaxTotalNumTokens}}}}
}
func (c KVSaturationConfig) reads() []string {
	return append(append(kvUsageFamilies(), hitRateFamilies()...), series.KVAvailableTokens, series.KVEvictableTokens,
		series.ContextLen, series.DecodeSumSeqLens, series.GenerationTokensHist, series.GenerationTokensTotal,
		series.NumRequestsTotal, series.NumRetractedReqsGauge, series.RetractedRequestsTotal, series.NumRunningReqs, series.NumQueueReqs)
}
func (c KVSaturationConfig) lookback() time.Duration {
	return c.Range + c.Baseline
}

func (c KVSaturationConfig) build(env buildEnv) Detector {
	return &KVSaturationDetector{cfg: c, triage: env.triage}
}

func (c KVSaturationConfig) oneShot(lookback time.Duration, samples int) (KVSaturationConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	return c, OneShot{Judged: false, Note: "needs history: a pinned pool pages only if it rose from its baseline or outputs grew longer than before — the KV usage above shows the level"}
}

func (c KVSaturationConfig) validate(e *configErrors) {
	c.BaselineCoverage.validate(e)
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.fraction("usage_threshold", c.UsageThreshold)
	e.check(c.MinRise >= 0 && c.MinRise < 1, "min_rise", "must be in [0,1), got %v", c.MinRise)
	e.fraction("critical_usage", c.CriticalUsage)
	e.check(c.CriticalUsage >= c.UsageThreshold, "critical_usage", "must be at least usage_threshold (%v), got %v", c.UsageThreshold, c.CriticalUsage)
	e.check(c.OutputLengthRatio > 1, "output_length_ratio", "must be greater than 1, got %v", c.OutputLengthRatio)
	e.positive("min_requests", c.MinRequests)
	e.check(c.SeqLenRatio > 1, "seq_len_ratio", "must be greater than 1, got %v", c.SeqLenRatio)
	e.fraction("running_tolerance", c.RunningTolerance)
	e.positive("retractions_per_second", c.RetractionsPerSecond)
}

// severities lists what its findings can carry; its runbook describes each.
func (c KVSaturationConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: on the mechanism chain, the KV pressure that retractions
// (preempt_storm) come with and that drives queueing and latency.
func (c KVSaturationConfig) position(Finding) position { return position{stage: 30} }

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c KVSaturationConfig) doc() doc {
	return doc{
		name:     "KV cache saturation",
		means:    "OOM risk",
		signals:  "KV usage pinned near full (`token_usage` counts evictable prefixes as free): runaway decode (no `max_new_tokens`) or plain capacity",
		settings: "KV pool pinned near full (OOM risk): runaway decode or plain capacity.",
	}
}
