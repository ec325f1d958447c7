package detect

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// GPUFault is the class of a GPU that recorded a hardware or driver fault:
// an Xid, an uncorrectable ECC error, a failed HBM row remap, NVLink
// errors.
const GPUFault Class = "gpu_fault"

// GPUFaultDetector reads one GPU of a dcgm-exporter (a replica of kind
// gpu) and reports the faults it recorded:
//
//   - an Xid: DCGM_FI_DEV_XID_ERRORS holds the code of the last Xid, not
//     a count, so the event is a code that was not there before the
//     range (a changed value, or a series created by its first Xid on a
//     GPU watched since before the range); a code seen since the window
//     began is history, never an event;
//   - an uncorrectable ECC error: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL rose;
//   - a row-remap failure: DCGM_FI_DEV_ROW_REMAP_FAILURE is set (the GPU
//     needs service; it pages while it stays set), or rows were remapped
//     for uncorrectable errors (DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS
//     rose: a reset is pending);
//   - NVLink errors: a DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL rose.
//
// A field the exporter does not export (the default counter set leaves
// ECC and NVLink errors out) is judged by no one: no finding, and nothing
// is said about it. Any other replica gets nil.
type GPUFaultDetector struct{ cfg GPUFaultConfig }

// Class implements Detector.
func (d *GPUFaultDetector) Class() Class { return GPUFault }

// xidClass is what one Xid code means for on-call (gpu-telemetry.md's
// table of the codes an LLM-serving on-call meets most).
type xidClass struct {
	meaning, action string
	severity        Severity
}

// xidClasses are the Xid codes the page explains; another code is a
// warning with the catalog's pointer.
func xidClasses() map[int]xidClass {
	app := xidClass{"an engine exception or GPU memory fault, usually the application (a kernel bug, an illegal access)",
		"restart the SGLang process; if the same Xid repeats on this GPU only, suspect the hardware", Warning}
	ecc := xidClass{"a double-bit (uncorrectable) ECC error", "drain the node, reset the GPU, then check its row remapping", Critical}
	gsp := xidClass{"a GSP (GPU System Processor) timeout or error", "reset the GPU and check the driver version", Critical}
	return map[int]xidClass{
		13: app, 31: app, 43: app,
		45:  {"preemptive cleanup: a process on the GPU was killed, often after another Xid", "follow the Xid before it (the node's dmesg)", Warning},
		48:  ecc,
		63:  {"a row remap is pending", "reset the GPU when convenient to apply it", Warning},
		64:  {"a row remap failed", "the GPU needs service: drain it and open a hardware ticket", Critical},
		74:  {"an NVLink error", "tensor-parallel collectives fail or hang: check the NVLink fabric (nvidia-smi nvlink -s) and reset the GPU", Critical},
		79:  {"the GPU has fallen off the bus", "the GPU is gone and every process on it dies: cordon and drain the node, cold-reboot it, RMA the GPU if it repeats", Critical},
		92:  {"a high single-bit ECC error rate", "watch it and schedule service", Warning},
		94:  {"a contained ECC error", "the affected application restarts; others continue", Warning},
		95:  ecc.with("an uncontained ECC error", "reset the GPU; every process on it is affected"),
		119: gsp, 120: gsp,
	}
}

func (x xidClass) with(meaning, action string) xidClass {
	x.meaning, x.action = meaning, action
	return x
}

// fault is one fault the detector found on the GPU.
type fault struct {
	severity Severity
	name     string // e.g. "Xid 79"
	meaning  string
	action   string
	evidence Evidence
}

// nvlinkCounters are the NVLink error counters, recovery errors (a link
// went down and came back) first.
func nvlinkCounters() []struct {
	family, name string
	severity     Severity
} {
	return []struct {
		family, name string
		severity     Severity
	}{
		{series.DCGMNVLinkRecoveryErrors, "NVLink recovery errors", Critical},
		{series.DCGMNVLinkReplayErrors, "NVLink replay errors", Warning},
		{series.DCGMNVLinkCRCFlitErrors, "NVLink CRC flit errors", Warning},
		{series.DCGMNVLinkCRCDataErrors, "NVLink CRC data errors", Warning},
	}
}

// Detect implements Detector.
func (d *GPUFaultDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	r := w.Replica()
	st := w.Scrape()
	if r.Kind != KindGPU || !st.Up {
		return nil
	}
	from := now.Add(-c.Range)
	var faults []fault
	faults = append(faults, d.xids(w, from, now)...)
	rng := ShortDuration(c.Range)
	if inc, ok := risen(w, series.DCGMECCDBEVolatile, from, now); ok {
		faults = append(faults, fault{Critical, "uncorrectable ECC errors", "double-bit ECC errors in the GPU's memory",
			"drain the node, reset the GPU, then check its row remapping",
			Evidence{Name: "uncorrectable (double-bit) ECC errors in the last " + rng, Value: inc, Threshold: ">= 1"}.WithLimit(1)})
	}
	if v, ok := w.Last(Sel(series.DCGMRowRemapFailure)); ok && v >= 1 && !math.IsInf(v, 0) {
		faults = append(faults, fault{Critical, "row-remap failure", "the GPU could not remap a failing HBM row",
			"the GPU needs service: drain it and open a hardware ticket",
			Evidence{Name: "row remap failure flag", Value: v, Threshold: ">= 1"}.WithLimit(1)})
	}
	if inc, ok := risen(w, series.DCGMUncorrectableRemapRows, from, now); ok {
		faults = append(faults, fault{Warning, "rows remapped for uncorrectable errors", "HBM rows were remapped after uncorrectable errors; the remap takes effect at the next GPU reset",
			"reset the GPU when convenient (drain it first)",
			Evidence{Name: "rows remapped for uncorrectable errors in the last " + rng, Value: inc, Threshold: ">= 1"}.WithLimit(1)})
	}
	for _, n := range nvlinkCounters() {
		if inc, ok := risen(w, n.family, from, now); ok && inc >= c.MinNVLinkErrors {
			faults = append(faults, fault{n.severity, n.name, "errors on the GPU's NVLink links, which carry tensor-parallel collectives",
				"check the fabric (nvidia-smi nvlink -s, -e) and reset the GPU; collectives over a bad link slow down or hang",
				Evidence{Name: n.name + " in the last " + rng, Value: inc, Threshold: ">= " + num(c.MinNVLinkErrors)}.WithLimit(c.MinNVLinkErrors)})
		}
	}
	if len(faults) == 0 {
		return nil
	}
	slices.SortStableFunc(faults, func(a, b fault) int { return int(b.severity) - int(a.severity) })
	worst := faults[0]
	f := finding(GPUFault, w, worst.severity, LayerGPU)
	gpu := GPUDescription(r)
	var names, meanings []string
	for _, ft := range faults {
		names = append(names, ft.name)
		meanings = append(meanings, ft.name+": "+ft.meaning)
		f.Evidence = append(f.Evidence, ft.evidence)
	}
	f.Summary = fmt.Sprintf("GPU fault: %s on %s", strings.Join(names, ", "), GPUName(r))
	f.Diagnosis = sentence(
		fmt.Sprintf("GPU layer: %s recorded %s.", gpu, strings.Join(meanings, "; ")),
		"Whatever runs on this GPU is slowed, stalled or killed by it: the SGLang replica that holds it shows the effect (slower tokens, a hang, a crash), not the fault.",
		holder(r))
	for _, ft := range faults {
		f.Emergency = append(f.Emergency, ft.name+": "+ft.action+".")
	}
	f.Emergency = append(f.Emergency,
		"Take the replica that holds this GPU out of rotation at the router first, so no request waits on it.",
		"Read the node's kernel log for the fault's own line: dmesg -T | grep -i -E 'xid|nvrm' on "+nodeOf(r)+".")
	f.RootCause = []string{
		"A fault that repeats on one GPU is hardware: run the vendor diagnostics (dcgmi diag -r 3) and RMA it.",
		"A fault that follows the application across GPUs (Xid 13/31/43) is software: check the CUDA, driver and SGLang versions against each other.",
		"Keep dcgm-exporter's counter set exporting DCGM_FI_DEV_ECC_DBE_VOL_TOTAL and the NVLink error counters: without them such faults are not seen here.",
	}
	return []Finding{f}
}

// xids are the Xid codes the GPU recorded within (from, now]: codes not
// there before the range.
func (d *GPUFaultDetector) xids(w Window, from, now time.Time) []fault {
	sel := Sel(series.DCGMXIDErrors)
	if !present(w, series.DCGMXIDErrors, from, now) {
		return nil
	}
	watched := w.Scrape().FirstSeen
	if watched.IsZero() {
		return nil
	}
	// A code already there when watching began is history; a code seen
	// since, that the GPU did not show before the range (or, watched for
	// less than the range, at the first scrape), is the event.
	before := map[float64]bool{0: true}
	if watched.Before(from) {
		if lo, ok := w.Min(sel, from.Add(-d.cfg.Range), from); ok {
			hi, _ := w.Max(sel, from.Add(-d.cfg.Range), from)
			before[lo], before[hi] = true, true
		}
	} else if first, ok := w.Min(sel, watched.Add(-time.Nanosecond), watched); ok {
		before[first] = true
	} else {
		return nil // no value at the first scrape: nothing to compare with
	}
	var codes []float64
	for _, agg := range []func(Selector, time.Time, time.Time) (float64, bool){w.Max, w.Min} {
		if v, ok := agg(sel, from, now); ok && !before[v] && !slices.Contains(codes, v) && v > 0 && v == math.Trunc(v) && v < 1e6 {
			codes = append(codes, v)
		}
	}
	if v, ok := w.Last(sel); ok && !before[v] && !slices.Contains(codes, v) && v > 0 && v == math.Trunc(v) && v < 1e6 {
		codes = append(codes, v)
	}
	classes := xidClasses()
	var out []fault
	for _, code := range codes {
		x, known := classes[int(code)]
		if !known {
			x = xidClass{"an Xid this page does not describe", "look the code up in NVIDIA's Xid catalog", Warning}
		}
		out = append(out, fault{x.severity, "Xid " + num(code), x.meaning, x.action,
			Evidence{Name: "Xid code recorded in the last " + ShortDuration(d.cfg.Range) + " (last Xid, DCGM_FI_DEV_XID_ERRORS)", Value: code}})
	}
	return out
}

// risen is a counter's increase over (from, now] when it rose (by one
// error at least: the counters count errors) and the range is observed.
func risen(w Window, family string, from, now time.Time) (float64, bool) {
	inc, ok := w.Increase(Sel(family), from, now)
	if !ok || !(inc >= 1) || math.IsInf(inc, 0) || !covers(w, Sel(family), from, now) {
		return 0, false
	}
	return inc, true
}

// GPUName names a GPU replica in a headline: its index and node, which is
// where on-call goes; its UUID only when the exporter says neither.
func GPUName(r Replica) string {
	if s := gpuPlace(r.Labels); s != "GPU" {
		return s
	}
	if u := r.Labels[series.GPUUUID]; u != "" {
		return "GPU " + u
	}
	return "GPU " + r.Name
}

// GPUDescription names a GPU replica in a diagnosis: its index, node, model
// and UUID (what a hardware ticket needs), as far as the exporter says them.
func GPUDescription(r Replica) string {
	l := r.Labels
	var id []string
	if m := l[series.GPUModel]; m != "" {
		id = append(id, m)
	}
	if u := l[series.GPUUUID]; u != "" {
		id = append(id, u)
	}
	s := gpuPlace(l)
	if len(id) > 0 {
		return s + " (" + strings.Join(id, ", ") + ")"
	}
	if s == "GPU" {
		return "GPU " + r.Name
	}
	return s
}

// gpuPlace is "GPU <index> on node <node>", as far as the labels say them.
func gpuPlace(l map[string]string) string {
	s := "GPU"
	if i := l[series.GPUIndex]; i != "" {
		s += " " + i
	}
	if n := l[series.GPUNode]; n != "" {
		s += " on node " + n
	}
	return s
}

// GPUPod is the namespace/pod holding a GPU replica, "" when none.
func GPUPod(r Replica) string {
	if p := r.Labels[series.GPUPod]; p != "" {
		return r.Labels[series.GPUNamespace] + "/" + p
	}
	return ""
}

// holder says which pod the exporter says holds the GPU.
func holder(r Replica) string {
	if p := GPUPod(r); p != "" {
		return "dcgm-exporter says pod " + p + " holds this GPU."
	}
	return ""
}

func nodeOf(r Replica) string {
	if n := r.Labels[series.GPUNode]; n != "" {
		return "node " + n
	}
	return "the GPU's node"
}

// GPUFaultConfig tunes the GPU fault detector (dcgm-exporter targets).
type GPUFaultConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is how long a fault stays on the page after the GPU recorded
	// it (a row-remap failure stays while the flag is set); an Xid code is
	// an event when it was not there in the Range before it.
	Range time.Duration `yaml:"range" doc:"a fault stays on the page this long; an Xid code not seen in the range before is new"`
	// MinNVLinkErrors is the smallest rise of an NVLink error counter over
	// the range that counts.
	MinNVLinkErrors float64 `yaml:"min_nvlink_errors" doc:"smallest rise of an NVLink error counter over the range that counts"`
}

func (GPUFaultConfig) defaults() GPUFaultConfig {
	return GPUFaultConfig{Enabled: true, Range: 15 * time.Minute, MinNVLinkErrors: 1}
}

// The methods below make GPUFaultConfig a registry entry (settings, in
// registry.go).
func (c GPUFaultConfig) class() Class             { return GPUFault }
func (c GPUFaultConfig) enabled() bool            { return c.Enabled }
func (c GPUFaultConfig) disabled() GPUFaultConfig { c.Enabled = false; return c }
func (c GPUFaultConfig) usesTriage() bool         { return false }

// needs: none. Every field is optional (the counter set decides), and a
// field not exported is not judged.
func (c GPUFaultConfig) needs() []need { return nil }
func (c GPUFaultConfig) reads() []string {
	out := []string{series.DCGMXIDErrors, series.DCGMECCDBEVolatile, series.DCGMRowRemapFailure, series.DCGMUncorrectableRemapRows}
	for _, n := range nvlinkCounters() {
		out = append(out, n.family)
	}
	return out
}

// lookback: the range and the range before it (an Xid's previous code).
func (c GPUFaultConfig) lookback() time.Duration { return 2 * c.Range }

func (c GPUFaultConfig) build(buildEnv) Detector { return &GPUFaultDetector{cfg: c} }

func (c GPUFaultConfig) oneShot(lookback time.Duration, _ int) (GPUFaultConfig, OneShot) {
	c.Range = lookback
	return c, OneShot{Judged: true, Note: "judged over the observation only: an Xid counts when its code changes during it, an error counter when it rises; a row-remap failure is read as it stands"}
}

func (c GPUFaultConfig) validate(e *configErrors) {
	e.positiveDuration("range", c.Range)
	e.positive("min_nvlink_errors", c.MinNVLinkErrors)
}

// severities: warning for faults the application usually causes or that
// wait for a convenient reset, critical for a GPU that is gone, corrupts
// memory or needs service.
func (c GPUFaultConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: off the chain, a GPU fault slows, stalls or kills what runs on
// it; correlation projects it onto the replica that holds the GPU.
func (c GPUFaultConfig) position(Finding) position {
	return position{explains: []Class{DecodeSlowdown, EngineHang, ReplicaDown, ColdStart, ReplicaRestarted, QueueLatency, ErrorRate}}
}

func (c GPUFaultConfig) doc() doc {
	return doc{
		name:     "GPU fault",
		means:    "a GPU recorded an Xid, an uncorrectable ECC error, a failed row remap or NVLink errors (dcgm-exporter)",
		signals:  "`DCGM_FI_DEV_XID_ERRORS` (a new code), `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`, `DCGM_FI_DEV_ROW_REMAP_FAILURE`, `DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`, `DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL`",
		settings: "An Xid, uncorrectable ECC error, row-remap failure or NVLink errors on a GPU (targets of kind gpu).",
	}
}
