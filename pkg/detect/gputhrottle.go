package detect

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// GPUThrottled is the class of a GPU whose clocks the hardware or the
// driver holds down for heat or power over most of a range.
const GPUThrottled Class = "gpu_throttled"

// GPUThrottledDetector reads one GPU of a dcgm-exporter (a replica of kind
// gpu): the clock-event reasons bitmask (DCGM_FI_DEV_CLOCKS_EVENT_REASONS,
// or its older name DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, which the scraper
// reads as it). A hardware slowdown (0x8), hardware thermal slowdown
// (0x40) or hardware power brake (0x80) in most scrapes of the range is a
// warning: the hardware protects itself, clocks fall far and decode slows.
// A software thermal slowdown (0x20) alone is info. The software power cap
// (0x4) is a GPU at its power limit under full load, normal for LLM
// serving, and idle, application clocks, sync boost and display clocks
// are no reason at all: none of them is a finding. The SM clock against
// its highest in the baseline and the GPU temperature are evidence where
// exported. Any other replica gets nil.
type GPUThrottledDetector struct{ cfg GPUThrottledConfig }

// Class implements Detector.
func (d *GPUThrottledDetector) Class() Class { return GPUThrottled }

// clockReason is one bit of the clock-event reasons (NVML).
type clockReason struct {
	bit      uint64
	name     string
	severity Severity
	meaning  string
}

// throttleReasons are the bits that are a finding, severe first.
func throttleReasons() []clockReason {
	return []clockReason{
		{0x40, "HW thermal slowdown (0x40)", Warning, "the hardware's thermal protection: the GPU is too hot, a cooling fault (fans, airflow, liquid cooling, a blocked inlet)"},
		{0x80, "HW power brake slowdown (0x80)", Warning, "an external power brake: the power supply or the rack asked the GPU to slow down"},
		{0x8, "HW slowdown (0x8)", Warning, "hardware protection (thermal or power brake) holds the clocks down"},
		{0x20, "SW thermal slowdown (0x20)", Info, "the driver cools the GPU by lowering its clocks: it runs hot"},
	}
}

// Detect implements Detector.
func (d *GPUThrottledDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	r := w.Replica()
	if r.Kind != KindGPU || !w.Scrape().Up {
		return nil
	}
	counter, ok := w.(ScrapeCounter)
	sel := Sel(series.DCGMClockEventReasons)
	from := now.Add(-c.Range)
	if !ok || !covers(w, sel, from, now) {
		return nil
	}
	var held []clockReason
	var shares []float64
	for _, reason := range throttleReasons() {
		set, scrapes := counter.CountWhere(sel, func(v float64) bool { return hasBit(v, reason.bit) }, from, now)
		if scrapes < c.MinScrapes {
			return nil
		}
		if share := float64(set) / float64(scrapes); share >= c.MinShare {
			if reason.bit == 0x8 && len(held) > 0 {
				continue // NVML sets HW slowdown with either of its causes, held already
			}
			held = append(held, reason)
			shares = append(shares, share)
		}
	}
	if len(held) == 0 {
		return nil
	}
	worst := held[0]
	for _, h := range held {
		worst.severity = max(worst.severity, h.severity)
	}
	f := finding(GPUThrottled, w, worst.severity, LayerGPU)
	gpu := GPUDescription(r)
	var names, meanings []string
	for i, h := range held {
		names = append(names, h.name)
		meanings = append(meanings, h.name+": "+h.meaning)
		f.Evidence = append(f.Evidence, Evidence{Name: "scrapes with " + h.name + " in the last " + ShortDuration(c.Range),
			Value: 100 * shares[i], Unit: "%", Threshold: ">= " + pct(c.MinShare)}.WithLimit(100*c.MinShare))
	}
	clock := ""
	if now, ok := w.Avg(Sel(series.DCGMSMClock), from, now); ok {
		e := Evidence{Name: "SM clock (mean over the range)", Value: now, Unit: "MHz", LowerWorse: true}
		if usual, ok := w.Max(Sel(series.DCGMSMClock), from.Add(-c.Baseline), from); ok && usual > 0 {
			e.Baseline, e.HasBaseline = usual, true
			e.Name = "SM clock (mean over the range; baseline: its highest in the " + ShortDuration(c.Baseline) + " before)"
			clock = fmt.Sprintf(" The SM clock averaged %s MHz against %s MHz at its highest in the %s before (%s of it).",
				num(math.Round(now)), num(usual), ShortDuration(c.Baseline), pct(now/usual))
		}
		f.Evidence = append(f.Evidence, e)
	}
	if temp, ok := w.Max(Sel(series.DCGMGPUTemp), from, now); ok {
		f.Evidence = append(f.Evidence, Evidence{Name: "GPU temperature (highest in the range)", Value: temp, Unit: "°C"})
	}
	f.Summary = fmt.Sprintf("GPU throttled: %s on %s for %s of the last %s", strings.Join(names, ", "), GPUName(r), pct(shares[0]), ShortDuration(c.Range))
	f.Diagnosis = sentence(
		fmt.Sprintf("GPU layer: %s held its clocks down in most scrapes of the last %s: %s.", gpu, ShortDuration(c.Range), strings.Join(meanings, "; ")),
		strings.TrimSpace(clock),
		"Every kernel on this GPU runs slower, so the replica that holds it produces tokens more slowly (inter-token latency up) and, with tensor parallelism, holds back its peer GPUs at every collective.",
		holder(r))
	f.Emergency = []string{
		"Take the replica that holds this GPU out of rotation at the router (or lower its weight) if the model's other replicas have headroom (queue, KV usage): it stays slow until the GPU is cooled or its power restored.",
		"Check the GPU on " + nodeOf(r) + ": nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER shows the active clock-event reasons, the temperature and the power limit.",
		"If other GPUs of the node are throttled too, the node's cooling or power is at fault: cordon and drain the node and call the datacenter team.",
	}
	f.RootCause = []string{
		"Thermal: check fans, airflow and the inlet temperature (a failed fan, a blocked rack door, a hot aisle); for liquid cooling, the coolant flow.",
		"Power brake: check the PSUs and the rack's power budget (a failed PSU, a rack over its limit).",
		"If only this GPU throttles with cooling fine, its thermal interface may be degraded: run dcgmi diag -r 3 and open a hardware ticket.",
	}
	return []Finding{f}
}

// hasBit reports whether a bitmask value has bit set; a value that is no
// bitmask (negative, fractional, NaN) has none.
func hasBit(v float64, bit uint64) bool {
	if !(v >= 0) || v > 1<<32 || v != math.Trunc(v) {
		return false
	}
	return uint64(v)&bit != 0
}

// GPUThrottledConfig tunes the GPU throttle detector (dcgm-exporter
// targets).
type GPUThrottledConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is how long the GPU must be throttled.
	Range time.Duration `yaml:"range" doc:"how long the GPU must be throttled"`
	// MinShare is the share of the range's scrapes that must carry the
	// reason: most of the range, not one scrape.
	MinShare float64 `yaml:"min_share" doc:"share of the range's scrapes that must carry the reason"`
	// MinScrapes is the fewest scrapes of the bitmask in the range.
	MinScrapes int `yaml:"min_scrapes" doc:"fewer scrapes of the reasons in range: no verdict"`
	// Baseline is the span before the range whose highest SM clock is the
	// GPU's usual one (evidence only).
	Baseline time.Duration `yaml:"baseline" doc:"span before the range whose highest SM clock is the usual one (evidence only)"`
}

func (GPUThrottledConfig) defaults() GPUThrottledConfig {
	return GPUThrottledConfig{Enabled: true, Range: 2 * time.Minute, MinShare: 0.8, MinScrapes: 6, Baseline: time.Hour}
}

// The methods below make GPUThrottledConfig a registry entry (settings, in
// registry.go).
func (c GPUThrottledConfig) class() Class                 { return GPUThrottled }
func (c GPUThrottledConfig) enabled() bool                { return c.Enabled }
func (c GPUThrottledConfig) disabled() GPUThrottledConfig { c.Enabled = false; return c }
func (c GPUThrottledConfig) usesTriage() bool             { return false }

// needs: none; a GPU whose exporter lacks the bitmask is not judged.
func (c GPUThrottledConfig) needs() []need { return nil }
func (c GPUThrottledConfig) reads() []string {
	return []string{series.DCGMClockEventReasons, series.DCGMSMClock, series.DCGMGPUTemp}
}
func (c GPUThrottledConfig) lookback() time.Duration { return c.Range + c.Baseline }

func (c GPUThrottledConfig) build(buildEnv) Detector { return &GPUThrottledDetector{cfg: c} }

func (c GPUThrottledConfig) oneShot(lookback time.Duration, samples int) (GPUThrottledConfig, OneShot) {
	c.Range, c.MinScrapes = lookback, max(1, min(c.MinScrapes, samples))
	return c, OneShot{Judged: true, Note: "judged over the observation: the clock-event reasons of its few scrapes; the SM clock has no baseline"}
}

func (c GPUThrottledConfig) validate(e *configErrors) {
	e.positiveDuration("range", c.Range)
	e.fraction("min_share", c.MinShare)
	e.check(c.MinScrapes >= 1, "min_scrapes", "must be at least 1, got %d", c.MinScrapes)
	e.positiveDuration("baseline", c.Baseline)
}

// severities: info for the driver's own thermal slowdown, warning for the
// hardware's protections; the replica's own slowdown, folded in by
// correlation, makes the incident as severe as it is.
func (c GPUThrottledConfig) severities() []Severity { return []Severity{Info, Warning} }

// position: off the chain, a throttled GPU slows every token of the replica
// that holds it.
func (c GPUThrottledConfig) position(Finding) position {
	return position{explains: []Class{DecodeSlowdown, QueueLatency, ErrorRate}}
}

func (c GPUThrottledConfig) doc() doc {
	return doc{
		name:     "GPU throttled",
		means:    "a GPU's clocks held down for heat or power",
		signals:  "dcgm-exporter: `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` bits 0x8/0x40/0x80 (0x20: info) in most scrapes",
		settings: "A GPU's clocks held down for heat or power over most of the range (targets of kind gpu).",
	}
}
