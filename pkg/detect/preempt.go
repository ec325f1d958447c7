package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// PreemptStorm is the class of the KV retraction cascade: the scheduler keeps
// retracting running requests for KV room.
const PreemptStorm Class = "preempt_storm"

// PreemptStormDetector pages when the scheduler keeps retracting (preempting)
// running requests because the KV cache pool is full. Retracted requests go
// back to the queue and recompute their prompts later, which needs the very
// KV space that was missing: a cascade that shows as second-long inter-token
// latency, aborts and a growing queue.
type PreemptStormDetector struct {
	cfg    PreemptStormConfig
	triage TriageConfig
}

// Class implements Detector.
func (d *PreemptStormDetector) Class() Class { return PreemptStorm }

// Baselines keys of preempt_storm: the retraction rate, or on releases
// with the lossy gauge only, the share of scrapes that saw retractions.
const (
	preemptRate        = "retractions_per_second"
	preemptLegacyShare = "retraction_scrape_share"
)

// Detect implements Detector.
//
// Clear rule while frozen: an incident's finding persists while its onset
// rule holds against the level frozen at its onset — the retraction rate
// at its absolute floor (which scales with the finished requests) and
// BaselineRatio times the frozen rate, with the KV pool near full — and
// clears once the rate falls under the floor or within BaselineRatio of
// the frozen rate. A storm its floor alone decided (no baseline at its
// onset) stays judged by the floor alone (NoBaseline). A young replica is
// judged by the floor, never by its peers: a retraction storm is an
// absolute condition.
func (d *PreemptStormDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	cmp := comparisonOf(w, PreemptStorm)
	kept := levelSet{}

	var retractions Evidence
	var rateNow float64
	legacy, critical := false, false
	switch {
	case w.Has(series.RetractedRequestsTotal):
		rate := p.rate(w, Sel(series.RetractedRequestsTotal))
		// The floor scales with the requests the replica completes: a few
		// retractions per second are routine for a replica finishing
		// hundreds of requests, a storm for one finishing a few per minute.
		finished := p.rate(w, Sel(series.NumRequestsTotal))
		floor := c.MinRetractionsPerSecond
		rule := fmt.Sprintf(">= %s/s", num(floor))
		if finished.nowOK {
			floor = max(floor, c.MinRetractionShare*finished.now)
			rule = fmt.Sprintf(">= %s/s (the larger of %s/s and %s of the %s finished requests/s)",
				num(floor), num(c.MinRetractionsPerSecond), pct(c.MinRetractionShare), num(finished.now))
		}
		if !rate.nowOK || rate.now < floor {
			return nil
		}
		// Without a covered baseline (a young replica) the floor decides;
		// an incident's frozen baseline replaces the window's.
		switch {
		case cmp.floorOnly():
			forgetBaseline(&rate)
		case cmp.frozen(preemptRate):
			cmp.onto(preemptRate, &rate)
		case !p.requestBaselineReady(w, c.BaselineCoverage, Sel(series.RetractedRequestsTotal)):
			forgetBaseline(&rate)
		}
		if rate.baseOK && !atLeastTimes(rate.now, rate.base, c.BaselineRatio) {
			return nil
		}
		limit := floor
		if rate.baseOK {
			rule += fmt.Sprintf(" and >= %sx baseline", num(c.BaselineRatio))
			limit = max(floor, c.BaselineRatio*rate.base)
		}
		rateNow = rate.now
		kept.base(preemptRate, rate)
		if finished.nowOK {
			critical = rate.now >= c.CriticalRetractionShare*finished.now
		} else {
			critical = rate.now >= c.CriticalRetractionsPerSecond
		}
		retractions = rate.evidence("retracted requests/s", "/s", rule).WithLimit(limit)
	case w.Has(series.NumRetractedReqsGauge):
		// Releases before the retraction counter only have a gauge holding
		// the size of the last retraction event, reset at each report: it
		// can only say "retractions happened around this scrape".
		counter, ok := w.(ScrapeCounter)
		if !ok {
			return nil
		}
		gauge := Sel(series.NumRetractedReqsGauge)
		above, scrapes := counter.CountAbove(gauge, 0, p.rangeStart, now)
		if above < c.LegacyMinScrapes {
			return nil
		}
		nowShare := float64(above) / float64(scrapes)
		baseShare, baseOK := 0.0, false
		switch {
		case cmp.floorOnly():
		case cmp.frozen(preemptLegacyShare):
			baseShare, baseOK = cmp.level(preemptLegacyShare)
		default:
			baseAbove, baseScrapes := counter.CountAbove(gauge, 0, p.baseStart, p.rangeStart)
			if baseScrapes > 0 && p.requestBaselineReady(w, c.BaselineCoverage, gauge) {
				baseShare, baseOK = float64(baseAbove)/float64(baseScrapes), true
			}
		}
		if baseOK && !atLeastTimes(nowShare, baseShare, c.BaselineRatio) {
			return nil
		}
		kept.level(preemptLegacyShare, baseShare, baseOK)
		legacy = true
		retractions = Evidence{Name: "scrapes with retractions (legacy gauge sglang:num_retracted_reqs)",
			Value: float64(above), Threshold: fmt.Sprintf(">= %d scrapes in %s", c.LegacyMinScrapes, c.Range)}.WithLimit(float64(c.LegacyMinScrapes))
	default:
		return nil
	}

	kvMax, kvOK := kvUsage(w, w.Max, p.rangeStart, now)
	if kvOK && kvMax < c.KVUsageThreshold {
		// Retractions without a full pool are not this incident (e.g. a
		// forced retraction test, or a usage gauge from a stalled scheduler).
		return nil
	}

	sev := Warning
	if critical {
		sev = Critical
	}
	if len(kept) == 0 {
		kept[NoBaseline] = 1
	}
	cost := sum(p.rate(w, Sel(series.RetractedInputTokens)), p.rate(w, Sel(series.RetractedOutputTokens)))
	itl := p.quantile(w, 0.99, series.InterTokenLatency)
	aborts := p.rate(w, Sel(series.NumAbortedRequestsTotal))
	queue := p.avg(w, Sel(series.NumQueueReqs))
	cmp.context(kept, "retracted_tokens_per_second", &cost)
	cmp.context(kept, "itl_p99", &itl)
	cmp.context(kept, "aborts_per_second", &aborts)
	cmp.context(kept, "queued_requests", &queue)
	f := finding(PreemptStorm, w, sev, LayerMemory)
	f.Baselines = kept.orNil()
	f.Evidence = append(f.Evidence, retractions)
	kvText, poolText := "KV usage not exposed", "the pool is full (KV usage not exposed, implied by the retractions)"
	if kvOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "KV cache usage (max in range)", Value: kvMax, Unit: "ratio",
			Threshold: ">= " + pct(c.KVUsageThreshold)}.WithLimit(c.KVUsageThreshold))
		kvText = fmt.Sprintf("KV cache %.0f%% full", 100*kvMax)
		poolText = fmt.Sprintf("the pool is %.0f%% full", 100*kvMax)
	}
	if cost.nowOK {
		f.Evidence = append(f.Evidence, cost.evidence("retracted tokens/s (recompute cost)", "/s", ""))
	}
	// Retractions push inter-token latency up (recompute, smaller decode
	// steps between refills); an ITL that fell is no support for a storm
	// (fewer requests left running decode faster), so it is not offered.
	itlUp := itl.nowOK && (!itl.baseOK || itl.now > itl.base)
	if itlUp {
		f.Evidence = append(f.Evidence, itl.evidence("inter-token latency p99", "s", ""))
	}
	if aborts.nowOK {
		f.Evidence = append(f.Evidence, aborts.evidence("aborted requests/s", "/s", ""))
	}
	if queue.nowOK {
		f.Evidence = append(f.Evidence, queue.evidence(p.avgOver("queued requests"), "", ""))
	}

	if legacy {
		f.Summary = fmt.Sprintf("Preemption storm: retractions in %s of the last %s, %s",
			num(retractions.Value)+" scrapes", c.Range, kvText)
	} else {
		f.Summary = fmt.Sprintf("Preemption storm: %s retracted requests/s%s, %s",
			num(rateNow), baselineClause(retractions, "/s"), kvText)
	}
	var diag strings.Builder
	fmt.Fprintf(&diag, "KV cache layer: %s and the scheduler is retracting running requests to free KV slots. ", poolText)
	diag.WriteString("Retracted requests return to the queue and recompute their prompts later, which needs the same KV space again, so the pressure feeds itself (preemption cascade). ")
	if itlUp {
		fmt.Fprintf(&diag, "Inter-token latency p99 is %s. ", vsBaseline(itl, "s"))
	}
	if cost.nowOK {
		fmt.Fprintf(&diag, "Recompute cost: %s retracted tokens/s. ", num(cost.now))
	}
	diag.WriteString("Likely cause: prompts/outputs longer or more concurrent than --max-total-tokens allows (traffic mix change, requests without max_tokens). ")
	if legacy {
		diag.WriteString("This release only exposes the lossy gauge sglang:num_retracted_reqs; confirm with the log line \"KV cache pool is full. Retract requests.\" (older: \"Decode out of memory happened\").")
	}
	f.Diagnosis = strings.TrimSpace(diag.String())
	d.triage.Classify(w, now, highIf(itl.nowOK && itl.baseOK && itl.now > itl.base)).annotate(&f)
	f.Emergency = []string{
		"Stop feeding the storm without dropping work: if the other replicas of the model have headroom, take this replica out of rotation at the router/gateway (or lower its weight) so it works off what it holds; if they have none, shed the excess at the gateway (a concurrency limit answered with a fast 503).",
		"Cap prompt length and max_tokens at the router/gateway so single long requests cannot claim the pool.",
		"Add replicas (scale out) to spread the load if capacity allows.",
		"Then make the admitted batch fit the pool, with a restart that " + restartDrops(w) +
			": read the current --max-running-requests from " + ServerInfo + " and restart with about two thirds of it, or with a larger --schedule-conservativeness (default 1.0; a larger value admits fewer requests — SGLang's advice when requests are retracted frequently).",
	}
	f.RootCause = []string{
		"Compare the real prompt and output length distribution (sglang:prompt_tokens_histogram, sglang:generation_tokens_histogram) with the KV pool size (sglang:max_total_num_tokens / --max-total-tokens); raise --mem-fraction-static carefully or move to GPUs with more memory.",
		"Keep chunked prefill enabled (--chunked-prefill-size) so one long prompt cannot take the pool at once.",
		"Consider prefill/decode disaggregation so long prefills stop competing with decode for KV space.",
	}
	return []Finding{f}
}

// baselineClause is " (baseline X<unit>)", or " (no baseline yet)" when
// the baseline is unknown.
func baselineClause(e Evidence, unit string) string {
	if !e.HasBaseline {
		return " (no baseline yet)"
	}
	return " (baseline " + num(e.Baseline) + unit + ")"
}

// PreemptStormConfig tunes the KV preemption (retraction) storm detector.
type PreemptStormConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window the retraction rate and KV usage are read
	// over. Long enough to hold a few dozen scrapes, short enough to page
	// while the cascade is still building.
	Range time.Duration `yaml:"range" doc:"recent window read"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline" doc:"the \"normal\" window just before it"`
	// MinRetractionsPerSecond is the absolute floor: below it a handful of
	// retractions is routine scheduling, whatever the baseline was.
	MinRetractionsPerSecond float64 `yaml:"min_retractions_per_second" doc:"absolute floor (6 in 2 minutes) ..."`
	// BaselineRatio: the current retraction rate must also be at least this
	// many times the baseline rate (a replica that always retracts a little
	// is not in a storm).
	BaselineRatio float64 `yaml:"baseline_ratio" doc:"and at least 5x the baseline rate"`
	// KVUsageThreshold is "KV pool near full" (0-1): the highest KV usage
	// seen in Range must reach it when the replica exposes KV usage.
	KVUsageThreshold float64 `yaml:"kv_usage_threshold" doc:"KV usage counted as \"near full\""`
	// MinRetractionShare scales the floor with throughput: the retraction
	// rate must also reach this share of the finished requests per second
	// (sglang:num_requests_total), when the replica counts them.
	MinRetractionShare float64 `yaml:"min_retraction_share" doc:"... or 1% of the finished requests/s, the larger"`
	// CriticalRetractionShare makes the finding critical: retractions at
	// or above this share of the finished requests per second.
	CriticalRetractionShare float64 `yaml:"critical_retraction_share" doc:"10% of the finished requests retracted: critical"`
	// CriticalRetractionsPerSecond makes the finding critical on a replica
	// that does not count finished requests.
	CriticalRetractionsPerSecond float64 `yaml:"critical_retractions_per_second" doc:"critical when finished requests are not counted"`
	// LegacyMinScrapes applies to releases without the retraction counter:
	// the lossy gauge sglang:num_retracted_reqs must be non-zero in at least
	// this many scrapes of Range.
	LegacyMinScrapes int `yaml:"legacy_min_scrapes" doc:"old releases (gauge only): non-zero scrapes needed"`
	// BaselineCoverage is what the baseline must hold before a ratio to
	// it counts (see BaselineCoverage).
	BaselineCoverage BaselineCoverage `yaml:"baseline_coverage" doc:"before any ratio to the baseline counts, the baseline"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (PreemptStormConfig) defaults() PreemptStormConfig {
	return PreemptStormConfig{
		Enabled:                      true,
		Range:                        2 * time.Minute,
		Baseline:                     time.Hour,
		MinRetractionsPerSecond:      0.05, // 6 retractions in 2 minutes
		MinRetractionShare:           0.01, // 1 request in 100 retracted
		BaselineRatio:                5,
		KVUsageThreshold:             0.9,
		CriticalRetractionShare:      0.1, // 1 request in 10 retracted and recomputed
		CriticalRetractionsPerSecond: 1,
		LegacyMinScrapes:             3,
		BaselineCoverage:             DefaultBaselineCoverage(),
	}
}

// The methods below make PreemptStormConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c PreemptStormConfig) class() Class                 { return PreemptStorm }
func (c PreemptStormConfig) enabled() bool                { return c.Enabled }
func (c PreemptStormConfig) disabled() PreemptStormConfig { c.Enabled = false; return c }
func (c PreemptStormConfig) usesTriage() bool             { return true }
func (c PreemptStormConfig) needs() []need {
	return []need{{class: PreemptStorm, what: "a retraction counter or gauge",
		anyOf: [][]string{{series.RetractedRequestsTotal}, {series.NumRetractedReqsGauge}}, skip: []string{"prefill"}, afterTraffic: true}}
}
func (c PreemptStormConfig) reads() []string {
	return append(kvUsageFamilies(), series.RetractedRequestsTotal, series.NumRetractedReqsGauge, series.NumRequestsTotal,
		series.RetractedInputTokens, series.RetractedOutputTokens, series.InterTokenLatency,
		series.NumAbortedRequestsTotal, series.NumQueueReqs, series.NumRunningReqs)
}
func (c PreemptStormConfig) lookback() time.Duration {
	return c.Range + c.Baseline
}

func (c PreemptStormConfig) build(env buildEnv) Detector {
	return &PreemptStormDetector{cfg: c, triage: env.triage}
}

func (c PreemptStormConfig) oneShot(lookback time.Duration, samples int) (PreemptStormConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	// Releases without the retraction counter: the lossy gauge must be
	// non-zero in every scrape there is (at most the configured count).
	c.LegacyMinScrapes = max(1, min(c.LegacyMinScrapes, samples))
	return c, OneShot{Judged: true, Note: "judged on its absolute rule (retraction rate above the floor with a full KV pool); the baseline ratio needs history"}
}

func (c PreemptStormConfig) validate(e *configErrors) {
	c.BaselineCoverage.validate(e)
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.positive("min_retractions_per_second", c.MinRetractionsPerSecond)
	e.atLeastOne("baseline_ratio", c.BaselineRatio)
	e.fraction("kv_usage_threshold", c.KVUsageThreshold)
	e.check(c.MinRetractionShare >= 0 && c.MinRetractionShare <= 1, "min_retraction_share", "must be in [0,1], got %v", c.MinRetractionShare)
	e.check(c.CriticalRetractionShare > 0 && c.CriticalRetractionShare >= c.MinRetractionShare, "critical_retraction_share",
		"must be positive and at least min_retraction_share (%v), got %v", c.MinRetractionShare, c.CriticalRetractionShare)
	e.check(c.CriticalRetractionsPerSecond >= c.MinRetractionsPerSecond, "critical_retractions_per_second",
		"must be at least min_retractions_per_second (%v), got %v", c.MinRetractionsPerSecond, c.CriticalRetractionsPerSecond)
	e.check(c.LegacyMinScrapes >= 1, "legacy_min_scrapes", "must be at least 1, got %d", c.LegacyMinScrapes)
}

// severities lists what its findings can carry; its runbook describes each.
func (c PreemptStormConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: on the mechanism chain, before kv_saturation: a preempt storm
// is KV pressure with its mechanism named, so when both fire the page says
// "preempt storm" and lists the saturation under it, because the storm's
// steps are what relieves the pool.
func (c PreemptStormConfig) position(Finding) position { return position{stage: 20} }

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c PreemptStormConfig) doc() doc {
	return doc{
		name:     "Preemption storm",
		means:    "KV retraction cascade",
		signals:  "`rate(sglang:num_retracted_requests_total)` above max(absolute floor, 1% of finished requests/s) and 5× baseline, KV usage near full; critical at 10% of finished requests; lossy `sglang:num_retracted_reqs` gauge on old releases",
		settings: "KV retraction cascade: retraction rate far above its baseline while the KV pool is near full.",
	}
}
