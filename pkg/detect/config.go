package detect

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config holds every detector's settings. It is the "detectors" section of
// the watchdog's YAML configuration; durations are Go durations ("2m").
type Config struct {
	PreemptStorm   PreemptStormConfig   `yaml:"preempt_storm"`
	RetryAvalanche RetryAvalancheConfig `yaml:"retry_avalanche"`
	CacheCollapse  CacheCollapseConfig  `yaml:"cache_collapse"`
	ReplicaDown    ReplicaDownConfig    `yaml:"replica_down"`
}

// PreemptStormConfig tunes the KV preemption (retraction) storm detector.
type PreemptStormConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window the retraction rate and KV usage are read
	// over. Long enough to hold a few dozen scrapes, short enough to page
	// while the cascade is still building.
	Range time.Duration `yaml:"range"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline"`
	// MinRetractionsPerSecond is the absolute floor: below it a handful of
	// retractions is routine scheduling, whatever the baseline was.
	MinRetractionsPerSecond float64 `yaml:"min_retractions_per_second"`
	// BaselineRatio: the current retraction rate must also be at least this
	// many times the baseline rate (a replica that always retracts a little
	// is not in a storm).
	BaselineRatio float64 `yaml:"baseline_ratio"`
	// KVUsageThreshold is "KV pool near full" (0-1): the highest KV usage
	// seen in Range must reach it when the replica exposes KV usage.
	KVUsageThreshold float64 `yaml:"kv_usage_threshold"`
	// CriticalRetractionsPerSecond makes the finding critical.
	CriticalRetractionsPerSecond float64 `yaml:"critical_retractions_per_second"`
	// LegacyMinScrapes applies to releases without the retraction counter:
	// the lossy gauge sglang:num_retracted_reqs must be non-zero in at least
	// this many scrapes of Range.
	LegacyMinScrapes int `yaml:"legacy_min_scrapes"`
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
	MinPromptTokens float64 `yaml:"min_prompt_tokens"`
	// MaxRatioToBaseline: the current hit rate must be at most this
	// fraction of the baseline hit rate ...
	MaxRatioToBaseline float64 `yaml:"max_ratio_to_baseline"`
	// MinAbsoluteDrop: ... and at least this much lower in absolute terms
	// (0.05 -> 0.02 halves, but nobody should be paged for it).
	MinAbsoluteDrop float64 `yaml:"min_absolute_drop"`
	// KVUsageThreshold splits the diagnosis: average KV usage in Range at or
	// above it means eviction pressure (memory chain); below it, the prompts
	// changed.
	KVUsageThreshold float64 `yaml:"kv_usage_threshold"`
	// RestartGrace: no verdict for this long after a restart — a restarted
	// replica starts with an empty cache and a low hit rate is expected.
	RestartGrace time.Duration `yaml:"restart_grace"`
	// CriticalTTFTRatio makes the finding critical when TTFT p99 in Range is
	// at least this many times its baseline (users feel it).
	CriticalTTFTRatio float64 `yaml:"critical_ttft_ratio"`
}

// ReplicaDownConfig tunes the scrape-failure and restart detector.
type ReplicaDownConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// FailuresToPage is how many consecutive failed scrapes make the replica
	// down (critical). One timeout under load is not an outage.
	FailuresToPage int `yaml:"failures_to_page"`
	// RestartLookback: a restart (counter reset) seen within it raises a
	// warning "restarted — possible crash/OOM".
	RestartLookback time.Duration `yaml:"restart_lookback"`
	// CrashLoopRestarts restarts within CrashLoopWindow are a crash loop
	// (critical).
	CrashLoopRestarts int           `yaml:"crash_loop_restarts"`
	CrashLoopWindow   time.Duration `yaml:"crash_loop_window"`
}

// DefaultConfig returns the production defaults, tuned for a 5 s scrape
// interval.
func DefaultConfig() Config {
	return Config{
		PreemptStorm: PreemptStormConfig{
			Enabled:                      true,
			Range:                        2 * time.Minute,
			Baseline:                     time.Hour,
			MinRetractionsPerSecond:      0.1, // 12 retractions in 2 minutes
			BaselineRatio:                5,
			KVUsageThreshold:             0.9,
			CriticalRetractionsPerSecond: 1,
			LegacyMinScrapes:             3,
		},
		RetryAvalanche: RetryAvalancheConfig{
			Enabled:  true,
			Range:    2 * time.Minute,
			Baseline: time.Hour,
			ArrivalEndpoints: "/generate|/v1/chat/completions|/v1/completions|/v1/responses|" +
				"/v1/embeddings|/v1/rerank|/v1/score|/v1/messages|/encode|/classify",
			MinRequests:          100,
			MinArrivalGrowth:     1.5,
			MinAmplification:     1.3,
			MinFailuresPerSecond: 0.2,
			FailureBaselineRatio: 3,
			BacklogGrowthRatio:   2,
			MinBacklog:           10,
		},
		CacheCollapse: CacheCollapseConfig{
			Enabled:            true,
			Range:              5 * time.Minute,
			Baseline:           time.Hour,
			MinPromptTokens:    20000,
			MaxRatioToBaseline: 0.5,
			MinAbsoluteDrop:    0.2,
			KVUsageThreshold:   0.85,
			RestartGrace:       15 * time.Minute,
			CriticalTTFTRatio:  2,
		},
		ReplicaDown: ReplicaDownConfig{
			Enabled:           true,
			FailuresToPage:    3,
			RestartLookback:   15 * time.Minute,
			CrashLoopRestarts: 3,
			CrashLoopWindow:   30 * time.Minute,
		},
	}
}

// configErrors collects validation problems, each prefixed with the YAML
// path of the offending field.
type configErrors struct {
	prefix string
	errs   []error
}

func (c *configErrors) check(ok bool, field, format string, args ...any) {
	if !ok {
		c.errs = append(c.errs, fmt.Errorf("%s.%s: %s", c.prefix, field, fmt.Sprintf(format, args...)))
	}
}

func (c *configErrors) positiveDuration(field string, d time.Duration) {
	c.check(d > 0, field, "must be a positive duration, got %s", d)
}

func (c *configErrors) fraction(field string, v float64) {
	c.check(v > 0 && v <= 1, field, "must be in (0,1], got %v", v)
}

func (c *configErrors) positive(field string, v float64) {
	c.check(v > 0, field, "must be positive, got %v", v)
}

func (c *configErrors) atLeastOne(field string, v float64) {
	c.check(v >= 1, field, "must be at least 1, got %v", v)
}

// Validate reports every invalid field at once (errors.Join), each error
// prefixed with its YAML path, e.g.
// "detectors.preempt_storm.kv_usage_threshold: must be in (0,1], got 1.5".
func (c Config) Validate() error {
	var errs []error

	p := &configErrors{prefix: "detectors.preempt_storm"}
	ps := c.PreemptStorm
	p.positiveDuration("range", ps.Range)
	p.positiveDuration("baseline", ps.Baseline)
	p.positive("min_retractions_per_second", ps.MinRetractionsPerSecond)
	p.atLeastOne("baseline_ratio", ps.BaselineRatio)
	p.fraction("kv_usage_threshold", ps.KVUsageThreshold)
	p.check(ps.CriticalRetractionsPerSecond >= ps.MinRetractionsPerSecond, "critical_retractions_per_second",
		"must be at least min_retractions_per_second (%v), got %v", ps.MinRetractionsPerSecond, ps.CriticalRetractionsPerSecond)
	p.check(ps.LegacyMinScrapes >= 1, "legacy_min_scrapes", "must be at least 1, got %d", ps.LegacyMinScrapes)
	errs = append(errs, p.errs...)

	r := &configErrors{prefix: "detectors.retry_avalanche"}
	ra := c.RetryAvalanche
	r.positiveDuration("range", ra.Range)
	r.positiveDuration("baseline", ra.Baseline)
	r.check(strings.Trim(ra.ArrivalEndpoints, "|") != "" && !strings.Contains(ra.ArrivalEndpoints, "||"),
		"arrival_endpoints", "must list endpoints separated by \"|\", without empty entries, got %q", ra.ArrivalEndpoints)
	r.positive("min_requests", ra.MinRequests)
	r.check(ra.MinArrivalGrowth > 1, "min_arrival_growth", "must be greater than 1, got %v", ra.MinArrivalGrowth)
	r.check(ra.MinAmplification > 1, "min_amplification", "must be greater than 1, got %v", ra.MinAmplification)
	r.positive("min_failures_per_second", ra.MinFailuresPerSecond)
	r.atLeastOne("failure_baseline_ratio", ra.FailureBaselineRatio)
	r.check(ra.BacklogGrowthRatio > 1, "backlog_growth_ratio", "must be greater than 1, got %v", ra.BacklogGrowthRatio)
	r.check(ra.MinBacklog >= 0, "min_backlog", "must not be negative, got %v", ra.MinBacklog)
	errs = append(errs, r.errs...)

	cc := &configErrors{prefix: "detectors.cache_collapse"}
	ca := c.CacheCollapse
	cc.positiveDuration("range", ca.Range)
	cc.positiveDuration("baseline", ca.Baseline)
	cc.positive("min_prompt_tokens", ca.MinPromptTokens)
	cc.check(ca.MaxRatioToBaseline > 0 && ca.MaxRatioToBaseline < 1, "max_ratio_to_baseline", "must be in (0,1), got %v", ca.MaxRatioToBaseline)
	cc.fraction("min_absolute_drop", ca.MinAbsoluteDrop)
	cc.fraction("kv_usage_threshold", ca.KVUsageThreshold)
	cc.check(ca.RestartGrace >= 0, "restart_grace", "must not be negative, got %s", ca.RestartGrace)
	cc.check(ca.CriticalTTFTRatio > 1, "critical_ttft_ratio", "must be greater than 1, got %v", ca.CriticalTTFTRatio)
	errs = append(errs, cc.errs...)

	d := &configErrors{prefix: "detectors.replica_down"}
	rd := c.ReplicaDown
	d.check(rd.FailuresToPage >= 1, "failures_to_page", "must be at least 1, got %d", rd.FailuresToPage)
	d.positiveDuration("restart_lookback", rd.RestartLookback)
	d.check(rd.CrashLoopRestarts >= 2, "crash_loop_restarts", "must be at least 2, got %d", rd.CrashLoopRestarts)
	d.positiveDuration("crash_loop_window", rd.CrashLoopWindow)
	errs = append(errs, d.errs...)

	return errors.Join(errs...)
}

// MaxLookback is the longest history any enabled detector reads back from
// now; the window's retention must be at least this long.
func (c Config) MaxLookback() time.Duration {
	var m time.Duration
	longest := func(ds ...time.Duration) {
		for _, d := range ds {
			m = max(m, d)
		}
	}
	if c.PreemptStorm.Enabled {
		longest(c.PreemptStorm.Range + c.PreemptStorm.Baseline)
	}
	if c.RetryAvalanche.Enabled {
		longest(c.RetryAvalanche.Range + c.RetryAvalanche.Baseline)
	}
	if c.CacheCollapse.Enabled {
		longest(c.CacheCollapse.Range+c.CacheCollapse.Baseline, c.CacheCollapse.RestartGrace)
	}
	if c.ReplicaDown.Enabled {
		longest(c.ReplicaDown.RestartLookback, c.ReplicaDown.CrashLoopWindow)
	}
	return m
}

// New validates cfg and builds the enabled detectors, in a fixed order.
func New(cfg Config) ([]Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var ds []Detector
	if cfg.ReplicaDown.Enabled {
		ds = append(ds, &ReplicaDownDetector{cfg: cfg.ReplicaDown})
	}
	if cfg.PreemptStorm.Enabled {
		ds = append(ds, &PreemptStormDetector{cfg: cfg.PreemptStorm})
	}
	if cfg.CacheCollapse.Enabled {
		ds = append(ds, &CacheCollapseDetector{cfg: cfg.CacheCollapse})
	}
	if cfg.RetryAvalanche.Enabled {
		ds = append(ds, &RetryAvalancheDetector{cfg: cfg.RetryAvalanche})
	}
	return ds, nil
}
