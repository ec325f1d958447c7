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

	KVSaturation      KVSaturationConfig      `yaml:"kv_saturation"`
	EngineHang        EngineHangConfig        `yaml:"engine_hang"`
	QueueLatency      QueueLatencyConfig      `yaml:"queue_latency"`
	DecodeSlowdown    DecodeSlowdownConfig    `yaml:"decode_slowdown"`
	ColdStart         ColdStartConfig         `yaml:"cold_start"`
	LoraThrash        LoraThrashConfig        `yaml:"lora_thrash"`
	PDTransferFailure PDTransferFailureConfig `yaml:"pd_transfer_failure"`
	MetricsBlind      MetricsBlindConfig      `yaml:"metrics_blind"`

	// Triage tunes the layer triage attached to latency-type findings.
	Triage TriageConfig `yaml:"triage"`
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

// KVSaturationConfig tunes the KV-pool saturation (OOM risk) detector.
type KVSaturationConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is how long KV usage must stay pinned: its lowest value in
	// Range must reach UsageThreshold.
	Range time.Duration `yaml:"range"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline"`
	// UsageThreshold is "pinned near full" (0-1).
	UsageThreshold float64 `yaml:"usage_threshold"`
	// MinRise: without a runaway-decode signal, the baseline's average usage
	// must be at least this far below the pinned level. SGLang fills its
	// pool by design under load; a replica that has sat near full for the
	// whole baseline is in its steady state, not in a new incident.
	MinRise float64 `yaml:"min_rise"`
	// CriticalUsage makes the finding critical (no headroom at all) unless
	// retractions are already running (preempt_storm pages for those).
	CriticalUsage float64 `yaml:"critical_usage"`
	// OutputLengthRatio: output tokens per finished request at least this
	// many times the baseline is runaway decode.
	OutputLengthRatio float64 `yaml:"output_length_ratio"`
	// MinRequests is the fewest finished requests in Range (and Baseline)
	// for an output-length comparison.
	MinRequests float64 `yaml:"min_requests"`
	// SeqLenRatio: the decode batch's summed sequence length per running
	// request at least this many times the baseline, at a running count
	// within RunningTolerance of it, is runaway decode too (sequences grow
	// while the batch does not).
	SeqLenRatio      float64 `yaml:"seq_len_ratio"`
	RunningTolerance float64 `yaml:"running_tolerance"`
	// RetentionHitRate: a windowed prefix hit rate at or above it means the
	// radix cache keeps prefixes on purpose (deliberate retention).
	RetentionHitRate float64 `yaml:"retention_hit_rate"`
	// RetractionsPerSecond: at or above it the pool is already retracting;
	// preempt_storm covers the acute effect and this finding stays a
	// warning.
	RetractionsPerSecond float64 `yaml:"retractions_per_second"`
}

// EngineHangConfig tunes the engine hang (e.g. NCCL) detector.
type EngineHangConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is how long the progress counter must stay flat while requests
	// are in flight. Longer than SGLang's own 20 s health-check timeout.
	Range time.Duration `yaml:"range"`
	// FallbackRange applies to releases without realtime_tokens_total:
	// their counters move only when requests finish, so a long generation
	// can look flat for a while; the fallback needs a longer silence and a
	// second signal (frozen gauges, failing probe or a flat CPU counter).
	FallbackRange time.Duration `yaml:"fallback_range"`
	// InferenceEndpoints are the endpoint label values whose in-flight
	// requests count (the watchdog's own /metrics and /health_generate
	// requests do not), "|"-separated.
	InferenceEndpoints string `yaml:"inference_endpoints"`
	// MinInFlight is the fewest requests that must stay in flight over the
	// range (active HTTP requests, or the running batch).
	MinInFlight float64 `yaml:"min_in_flight"`
	// MaxProgressTokens is how many tokens may still be processed in the
	// range for it to count as flat.
	MaxProgressTokens float64 `yaml:"max_progress_tokens"`
	// MinProbes is the fewest failed /health_generate probes in the range
	// for the probe to count as failing.
	MinProbes int `yaml:"min_probes"`
	// FreshRequests: a process that finished at most this many requests
	// since it started and made no progress is still starting (cold_start),
	// not hung.
	FreshRequests float64 `yaml:"fresh_requests"`
}

// QueueLatencyConfig tunes the time-to-first-token (queue vs prefill)
// detector.
type QueueLatencyConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window TTFT and queue time are read over.
	Range time.Duration `yaml:"range"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline"`
	// MinRequests is the fewest first tokens (TTFT observations) in Range
	// for a verdict; a p99 of a handful of requests is noise.
	MinRequests float64 `yaml:"min_requests"`
	// TTFTRatio: TTFT p99 (or mean) now at least this many times its
	// baseline ...
	TTFTRatio float64 `yaml:"ttft_ratio"`
	// MinTTFTSeconds: ... and at least this long (nobody is paged for
	// 50 ms -> 120 ms).
	MinTTFTSeconds float64 `yaml:"min_ttft_seconds"`
	// MinMeanTTFTSeconds: the mean TTFT at TTFTRatio times its baseline
	// also counts (it keeps the verdict once a lasting incident has lifted
	// the baseline's p99), but only at or above this mean: near saturation
	// a healthy replica's mean swings several-fold while staying well
	// under a second.
	MinMeanTTFTSeconds float64 `yaml:"min_mean_ttft_seconds"`
	// QueueShare splits the diagnosis: mean queue time over mean TTFT at or
	// above it means the time goes into waiting for admission (scheduling
	// side); below it, prefill itself is slow.
	QueueShare float64 `yaml:"queue_share"`
	// CriticalTTFTRatio makes the finding critical.
	CriticalTTFTRatio float64 `yaml:"critical_ttft_ratio"`
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

// ColdStartConfig tunes the slow-startup detector.
type ColdStartConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// StartupBudget is how long a replica may take from its (re)start to
	// serving. Large models load for minutes; CUDA graph capture adds up to
	// a minute.
	StartupBudget time.Duration `yaml:"startup_budget"`
	// CriticalAfter makes the finding critical.
	CriticalAfter time.Duration `yaml:"critical_after"`
	// DemandRange: requests must have been waiting (queued or in flight)
	// over this whole recent range to count as demand that is not served.
	DemandRange time.Duration `yaml:"demand_range"`
	// InferenceEndpoints are the endpoint label values whose in-flight
	// requests count as demand, "|"-separated.
	InferenceEndpoints string `yaml:"inference_endpoints"`
	// MinProbes is the fewest /health_generate probes since the start, all
	// failed, for the probe to say "not ready".
	MinProbes int `yaml:"min_probes"`
	// FreshRequests: at most this many finished requests since the start
	// (the warm-up) still counts as a fresh process.
	FreshRequests float64 `yaml:"fresh_requests"`
}

// LoraThrashConfig tunes the LoRA adapter pool thrash detector.
type LoraThrashConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window the pool and latency are read over.
	Range time.Duration `yaml:"range"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline"`
	// FullUtilization is "every adapter slot taken" (0-1): the pool's
	// lowest utilization in Range must reach it.
	FullUtilization float64 `yaml:"full_utilization"`
	// LatencyRatio: inter-token p99, its spread (p99/p50) or its mean at
	// least this many times the baseline.
	LatencyRatio float64 `yaml:"latency_ratio"`
	// MinTokens is the fewest inter-token observations in Range.
	MinTokens float64 `yaml:"min_tokens"`
	// FallbackShareRise: where cuda_graph_passes_total is exposed, the share
	// of decode passes run without a CUDA graph must have risen by at least
	// this much (adapter switches break graph replay).
	FallbackShareRise float64 `yaml:"fallback_share_rise"`
}

// PDTransferFailureConfig tunes the PD-disaggregation KV transfer failure
// detector.
type PDTransferFailureConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window failure rates are read over.
	Range time.Duration `yaml:"range"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline"`
	// MinFailuresPerSecond is the absolute floor (bootstrap + transfer
	// failures).
	MinFailuresPerSecond float64 `yaml:"min_failures_per_second"`
	// BaselineRatio: failures per second at least this many times the
	// baseline.
	BaselineRatio float64 `yaml:"baseline_ratio"`
	// CriticalFailureShare: failures over (failures + finished requests)
	// at or above it make the finding critical.
	CriticalFailureShare float64 `yaml:"critical_failure_share"`
}

// MetricsBlindConfig tunes the detector of targets whose exposition lacks
// what the detectors need.
type MetricsBlindConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Grace after a replica is first seen or restarts: a starting server's
	// first scrapes may be partial.
	Grace time.Duration `yaml:"grace"`
	// Range: a family counts as missing when it had no value in the whole
	// range (or since the start, when younger).
	Range time.Duration `yaml:"range"`
	// FailuresToReport is how many consecutive 404s on /metrics make the
	// target blind.
	FailuresToReport int `yaml:"failures_to_report"`
}

// TriageConfig tunes the layer triage (running vs waiting vs latency).
type TriageConfig struct {
	// Range is the recent window running and queued requests are averaged
	// over.
	Range time.Duration `yaml:"range"`
	// CapacityLookback: without max_running_requests exposed, the running
	// batch is compared with its highest value in this lookback.
	CapacityLookback time.Duration `yaml:"capacity_lookback"`
	// RunningHighFraction of the capacity is "running high".
	RunningHighFraction float64 `yaml:"running_high_fraction"`
	// MinRunning: fewer running requests are never "high".
	MinRunning float64 `yaml:"min_running"`
	// MinQueued and QueuedToRunning: "waiting high" is at least MinQueued
	// queued requests and at least QueuedToRunning per running one.
	MinQueued       float64 `yaml:"min_queued"`
	QueuedToRunning float64 `yaml:"queued_to_running"`
	// KVFullUsage: KV usage at or above it means admission is bound by
	// memory.
	KVFullUsage float64 `yaml:"kv_full_usage"`
	// LatencyRatio and LatencyBaseline: for a triage on its own (not
	// attached to a latency finding), latency is "high" when a p99 (TTFT,
	// inter-token, end-to-end) over Range is at least LatencyRatio times
	// its value in the LatencyBaseline before.
	LatencyRatio    float64       `yaml:"latency_ratio"`
	LatencyBaseline time.Duration `yaml:"latency_baseline"`
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
		KVSaturation: KVSaturationConfig{
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
			RetentionHitRate:     0.8, // the runbook's "> 0.8"
			RetractionsPerSecond: 0.1, // preempt_storm's floor
		},
		EngineHang: EngineHangConfig{
			Enabled:            true,
			Range:              2 * time.Minute, // six times SGLang's 20 s health-check timeout
			FallbackRange:      5 * time.Minute,
			InferenceEndpoints: defaultInferenceEndpoints,
			MinInFlight:        1,
			MaxProgressTokens:  0, // any token processed is progress
			MinProbes:          2,
			FreshRequests:      10,
		},
		QueueLatency: QueueLatencyConfig{
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
		},
		DecodeSlowdown: DecodeSlowdownConfig{
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
		},
		ColdStart: ColdStartConfig{
			Enabled:            true,
			StartupBudget:      10 * time.Minute, // the runbook: new replicas take 5-10 minutes when slow
			CriticalAfter:      20 * time.Minute,
			DemandRange:        2 * time.Minute,
			InferenceEndpoints: defaultInferenceEndpoints,
			MinProbes:          2,
			FreshRequests:      10,
		},
		LoraThrash: LoraThrashConfig{
			Enabled:           true,
			Range:             2 * time.Minute,
			Baseline:          time.Hour,
			FullUtilization:   0.99,
			LatencyRatio:      1.5,
			MinTokens:         1000,
			FallbackShareRise: 0.1,
		},
		PDTransferFailure: PDTransferFailureConfig{
			Enabled:              true,
			Range:                2 * time.Minute,
			Baseline:             time.Hour,
			MinFailuresPerSecond: 0.05, // 6 failed hand-overs in 2 minutes
			BaselineRatio:        3,
			CriticalFailureShare: 0.1,
		},
		MetricsBlind: MetricsBlindConfig{
			Enabled:          true,
			Grace:            2 * time.Minute,
			Range:            10 * time.Minute,
			FailuresToReport: 2,
		},
		Triage: TriageConfig{
			Range:               time.Minute,
			CapacityLookback:    time.Hour,
			RunningHighFraction: 0.8,
			MinRunning:          4,
			MinQueued:           5,
			QueuedToRunning:     0.25,
			KVFullUsage:         0.9,
			LatencyRatio:        1.5,
			LatencyBaseline:     time.Hour,
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

func (c *configErrors) endpoints(field, v string) {
	c.check(strings.Trim(v, "|") != "" && !strings.Contains(v, "||"),
		field, "must list endpoints separated by \"|\", without empty entries, got %q", v)
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

	ks := &configErrors{prefix: "detectors.kv_saturation"}
	kv := c.KVSaturation
	ks.positiveDuration("range", kv.Range)
	ks.positiveDuration("baseline", kv.Baseline)
	ks.fraction("usage_threshold", kv.UsageThreshold)
	ks.check(kv.MinRise >= 0 && kv.MinRise < 1, "min_rise", "must be in [0,1), got %v", kv.MinRise)
	ks.fraction("critical_usage", kv.CriticalUsage)
	ks.check(kv.CriticalUsage >= kv.UsageThreshold, "critical_usage", "must be at least usage_threshold (%v), got %v", kv.UsageThreshold, kv.CriticalUsage)
	ks.check(kv.OutputLengthRatio > 1, "output_length_ratio", "must be greater than 1, got %v", kv.OutputLengthRatio)
	ks.positive("min_requests", kv.MinRequests)
	ks.check(kv.SeqLenRatio > 1, "seq_len_ratio", "must be greater than 1, got %v", kv.SeqLenRatio)
	ks.fraction("running_tolerance", kv.RunningTolerance)
	ks.fraction("retention_hit_rate", kv.RetentionHitRate)
	ks.positive("retractions_per_second", kv.RetractionsPerSecond)
	errs = append(errs, ks.errs...)

	eh := &configErrors{prefix: "detectors.engine_hang"}
	h := c.EngineHang
	eh.positiveDuration("range", h.Range)
	eh.check(h.FallbackRange >= h.Range, "fallback_range", "must be at least range (%s), got %s", h.Range, h.FallbackRange)
	eh.endpoints("inference_endpoints", h.InferenceEndpoints)
	eh.positive("min_in_flight", h.MinInFlight)
	eh.check(h.MaxProgressTokens >= 0, "max_progress_tokens", "must not be negative, got %v", h.MaxProgressTokens)
	eh.check(h.MinProbes >= 1, "min_probes", "must be at least 1, got %d", h.MinProbes)
	eh.check(h.FreshRequests >= 0, "fresh_requests", "must not be negative, got %v", h.FreshRequests)
	errs = append(errs, eh.errs...)

	ql := &configErrors{prefix: "detectors.queue_latency"}
	q := c.QueueLatency
	ql.positiveDuration("range", q.Range)
	ql.positiveDuration("baseline", q.Baseline)
	ql.positive("min_requests", q.MinRequests)
	ql.check(q.TTFTRatio > 1, "ttft_ratio", "must be greater than 1, got %v", q.TTFTRatio)
	ql.positive("min_ttft_seconds", q.MinTTFTSeconds)
	ql.positive("min_mean_ttft_seconds", q.MinMeanTTFTSeconds)
	ql.check(q.QueueShare > 0 && q.QueueShare < 1, "queue_share", "must be in (0,1), got %v", q.QueueShare)
	ql.check(q.CriticalTTFTRatio >= q.TTFTRatio, "critical_ttft_ratio", "must be at least ttft_ratio (%v), got %v", q.TTFTRatio, q.CriticalTTFTRatio)
	errs = append(errs, ql.errs...)

	ds := &configErrors{prefix: "detectors.decode_slowdown"}
	dc := c.DecodeSlowdown
	ds.positiveDuration("range", dc.Range)
	ds.positiveDuration("baseline", dc.Baseline)
	ds.positive("min_tokens", dc.MinTokens)
	ds.check(dc.ITLRatio > 1, "itl_ratio", "must be greater than 1, got %v", dc.ITLRatio)
	ds.positive("min_itl_seconds", dc.MinITLSeconds)
	ds.fraction("batch_tolerance", dc.BatchTolerance)
	ds.endpoints("arrival_endpoints", dc.ArrivalEndpoints)
	ds.positive("retractions_per_second", dc.RetractionsPerSecond)
	ds.check(dc.CriticalITLRatio >= dc.ITLRatio, "critical_itl_ratio", "must be at least itl_ratio (%v), got %v", dc.ITLRatio, dc.CriticalITLRatio)
	errs = append(errs, ds.errs...)

	cs := &configErrors{prefix: "detectors.cold_start"}
	cst := c.ColdStart
	cs.positiveDuration("startup_budget", cst.StartupBudget)
	cs.check(cst.CriticalAfter >= cst.StartupBudget, "critical_after", "must be at least startup_budget (%s), got %s", cst.StartupBudget, cst.CriticalAfter)
	cs.positiveDuration("demand_range", cst.DemandRange)
	cs.endpoints("inference_endpoints", cst.InferenceEndpoints)
	cs.check(cst.MinProbes >= 1, "min_probes", "must be at least 1, got %d", cst.MinProbes)
	cs.check(cst.FreshRequests >= 0, "fresh_requests", "must not be negative, got %v", cst.FreshRequests)
	errs = append(errs, cs.errs...)

	lt := &configErrors{prefix: "detectors.lora_thrash"}
	lc := c.LoraThrash
	lt.positiveDuration("range", lc.Range)
	lt.positiveDuration("baseline", lc.Baseline)
	lt.fraction("full_utilization", lc.FullUtilization)
	lt.check(lc.LatencyRatio > 1, "latency_ratio", "must be greater than 1, got %v", lc.LatencyRatio)
	lt.positive("min_tokens", lc.MinTokens)
	lt.fraction("fallback_share_rise", lc.FallbackShareRise)
	errs = append(errs, lt.errs...)

	pd := &configErrors{prefix: "detectors.pd_transfer_failure"}
	pc := c.PDTransferFailure
	pd.positiveDuration("range", pc.Range)
	pd.positiveDuration("baseline", pc.Baseline)
	pd.positive("min_failures_per_second", pc.MinFailuresPerSecond)
	pd.atLeastOne("baseline_ratio", pc.BaselineRatio)
	pd.fraction("critical_failure_share", pc.CriticalFailureShare)
	errs = append(errs, pd.errs...)

	mb := &configErrors{prefix: "detectors.metrics_blind"}
	mc := c.MetricsBlind
	mb.check(mc.Grace >= 0, "grace", "must not be negative, got %s", mc.Grace)
	mb.positiveDuration("range", mc.Range)
	mb.check(mc.FailuresToReport >= 1, "failures_to_report", "must be at least 1, got %d", mc.FailuresToReport)
	errs = append(errs, mb.errs...)

	tr := &configErrors{prefix: "detectors.triage"}
	tc := c.Triage
	tr.positiveDuration("range", tc.Range)
	tr.positiveDuration("capacity_lookback", tc.CapacityLookback)
	tr.fraction("running_high_fraction", tc.RunningHighFraction)
	tr.check(tc.MinRunning >= 0, "min_running", "must not be negative, got %v", tc.MinRunning)
	tr.positive("min_queued", tc.MinQueued)
	tr.check(tc.QueuedToRunning >= 0, "queued_to_running", "must not be negative, got %v", tc.QueuedToRunning)
	tr.fraction("kv_full_usage", tc.KVFullUsage)
	tr.check(tc.LatencyRatio > 1, "latency_ratio", "must be greater than 1, got %v", tc.LatencyRatio)
	tr.positiveDuration("latency_baseline", tc.LatencyBaseline)
	errs = append(errs, tr.errs...)

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
	if c.KVSaturation.Enabled {
		longest(c.KVSaturation.Range + c.KVSaturation.Baseline)
	}
	if c.EngineHang.Enabled {
		longest(c.EngineHang.FallbackRange)
	}
	if c.QueueLatency.Enabled {
		longest(c.QueueLatency.Range + c.QueueLatency.Baseline)
	}
	if c.DecodeSlowdown.Enabled {
		longest(c.DecodeSlowdown.Range + c.DecodeSlowdown.Baseline)
	}
	if c.ColdStart.Enabled {
		// It reads back to the replica's start; past CriticalAfter the
		// verdict no longer changes.
		longest(c.ColdStart.CriticalAfter, c.ColdStart.DemandRange)
	}
	if c.LoraThrash.Enabled {
		longest(c.LoraThrash.Range + c.LoraThrash.Baseline)
	}
	if c.PDTransferFailure.Enabled {
		longest(c.PDTransferFailure.Range + c.PDTransferFailure.Baseline)
	}
	if c.MetricsBlind.Enabled {
		longest(c.MetricsBlind.Range)
	}
	if c.triageUsed() {
		longest(c.Triage.CapacityLookback, c.Triage.Range+c.Triage.LatencyBaseline)
	}
	return m
}

// triageUsed reports whether an enabled detector attaches the triage.
func (c Config) triageUsed() bool {
	return c.PreemptStorm.Enabled || c.CacheCollapse.Enabled || c.KVSaturation.Enabled ||
		c.QueueLatency.Enabled || c.DecodeSlowdown.Enabled || c.LoraThrash.Enabled
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
		ds = append(ds, &PreemptStormDetector{cfg: cfg.PreemptStorm, triage: cfg.Triage})
	}
	if cfg.CacheCollapse.Enabled {
		ds = append(ds, &CacheCollapseDetector{cfg: cfg.CacheCollapse, triage: cfg.Triage})
	}
	if cfg.RetryAvalanche.Enabled {
		ds = append(ds, &RetryAvalancheDetector{cfg: cfg.RetryAvalanche})
	}
	if cfg.KVSaturation.Enabled {
		ds = append(ds, &KVSaturationDetector{cfg: cfg.KVSaturation, triage: cfg.Triage})
	}
	if cfg.EngineHang.Enabled {
		ds = append(ds, &EngineHangDetector{cfg: cfg.EngineHang})
	}
	if cfg.QueueLatency.Enabled {
		ds = append(ds, &QueueLatencyDetector{cfg: cfg.QueueLatency, triage: cfg.Triage})
	}
	if cfg.DecodeSlowdown.Enabled {
		ds = append(ds, &DecodeSlowdownDetector{cfg: cfg.DecodeSlowdown, triage: cfg.Triage})
	}
	if cfg.ColdStart.Enabled {
		ds = append(ds, &ColdStartDetector{cfg: cfg.ColdStart})
	}
	if cfg.LoraThrash.Enabled {
		ds = append(ds, &LoraThrashDetector{cfg: cfg.LoraThrash, triage: cfg.Triage})
	}
	if cfg.PDTransferFailure.Enabled {
		ds = append(ds, &PDTransferFailureDetector{cfg: cfg.PDTransferFailure})
	}
	if cfg.MetricsBlind.Enabled {
		ds = append(ds, &MetricsBlindDetector{cfg: cfg.MetricsBlind, needs: cfg.needs()})
	}
	return ds, nil
}
