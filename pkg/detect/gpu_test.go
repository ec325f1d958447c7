package detect_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

const gpuInterval = 10 * time.Second

// gpuRun feeds a dcgm-exporter exposition (edits(t) applied at each
// scrape, a failed scrape where fail(t)) through the keeping decoder and
// the window for span, then runs every default detector on every replica
// at the end. It returns the findings by replica and the replicas.
func gpuRun(t *testing.T, name string, span time.Duration, edits func(el time.Duration) []fixture.DCGMEdit,
	fail func(el time.Duration) bool) (map[string][]detect.Finding, []detect.Replica) {
	t.Helper()
	cfg := detect.DefaultConfig()
	store, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: gpuInterval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, e := range cfg.Catalog() {
		keep = append(keep, e.Reads(cfg)...)
	}
	dec := scrape.NewKeepingDecoder(keep)
	var now time.Time
	for el := time.Duration(0); el <= span; el += gpuInterval {
		now = start.Add(el)
		if fail != nil && fail(el) {
			if err := store.Append(series.Scrape{Target: "dcgm-a", Kind: scrape.KindGPU, At: now, Reason: series.FailureRefused, Error: "refused"}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var es []fixture.DCGMEdit
		if edits != nil {
			es = edits(el)
		}
		body, err := fixture.DCGMWith(name, es...)
		if err != nil {
			t.Fatal(err)
		}
		groups, err := dec.DecodeAs(scrape.KindGPU, body, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Append(series.Scrape{Target: "dcgm-a", Kind: scrape.KindGPU, At: now, Groups: groups}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]detect.Finding{}
	reps := store.Replicas()
	for _, r := range reps {
		store.View(r.Name, func(w detect.Window) {
			for _, d := range ds {
				out[r.Name] = append(out[r.Name], d.Detect(w, now)...)
			}
		})
	}
	return out, reps
}

func onlyGPU(t *testing.T, got map[string][]detect.Finding, replica string, class detect.Class) detect.Finding {
	t.Helper()
	for name, fs := range got {
		for _, f := range fs {
			if name != replica || f.Class != class {
				t.Errorf("unexpected %s on %s: %s", f.Class, name, f.Summary)
			}
		}
	}
	fs := got[replica]
	if len(fs) != 1 {
		t.Fatalf("%s: %d findings, want one %s: %+v", replica, len(fs), class, fs)
	}
	return fs[0]
}

func noGPU(t *testing.T, got map[string][]detect.Finding) {
	t.Helper()
	for name, fs := range got {
		for _, f := range fs {
			t.Errorf("%s on %s: %s", f.Class, name, f.Summary)
		}
	}
}

func after(el, at time.Duration, v string) string {
	if el >= at {
		return v
	}
	return ""
}

// Healthy exporters of both release shapes for 70 minutes — GPUs under full
// load at their power cap (0x4), an idle GPU (0x1), Xid 0 "No Error" —
// page nothing, from any detector.
func TestHealthyGPUExportersPageNothing(t *testing.T) {
	for _, name := range fixture.DCGMNames() {
		t.Run(name, func(t *testing.T) {
			got, reps := gpuRun(t, name, 70*time.Minute, nil, nil)
			if len(reps) < 2 {
				t.Fatalf("replicas %v", reps)
			}
			for _, r := range reps {
				if r.Kind != detect.KindGPU {
					t.Errorf("%s is %q", r.Name, r.Kind)
				}
			}
			noGPU(t, got)
		})
	}
}

// An exporter that stops answering, or never answered, is no SGLang
// replica down, cold start or blind one: no finding.
func TestAnUnreachableExporterIsNoReplicaIncident(t *testing.T) {
	got, _ := gpuRun(t, fixture.DCGMPods, 30*time.Minute, nil, func(el time.Duration) bool { return el > 20*time.Minute })
	noGPU(t, got)
	got, _ = gpuRun(t, fixture.DCGMPods, 30*time.Minute, nil, func(time.Duration) bool { return true })
	noGPU(t, got)
}

// Xid 79 in the newer shape (err_code/err_msg relabelled with the code):
// critical, named, with the GPU's identity; the other GPUs stay quiet.
func TestXid79IsACriticalGPUFault(t *testing.T) {
	got, _ := gpuRun(t, fixture.DCGMPods, 40*time.Minute, func(el time.Duration) []fixture.DCGMEdit {
		if el < 35*time.Minute {
			return nil
		}
		return []fixture.DCGMEdit{{Family: series.DCGMXIDErrors, GPU: "1", Value: "79", ErrMsg: "GPU has fallen off the bus"}}
	}, nil)
	f := onlyGPU(t, got, "dcgm-a/gpu1", detect.GPUFault)
	if f.Severity != detect.Critical || !strings.Contains(f.Summary, "Xid 79") ||
		!strings.HasSuffix(f.Summary, "on GPU 1 on node gpu-node-a") ||
		!strings.Contains(f.Diagnosis, "GPU 1 on node gpu-node-a (NVIDIA H100 80GB HBM3, GPU-9c3e2d14-77a0-41f9-b2c8-0e5d6a8f3b12)") ||
		!strings.Contains(f.Diagnosis, "fallen off the bus") || !strings.Contains(f.Diagnosis, "pod llm/llama-70b-0") ||
		!strings.Contains(strings.Join(f.Emergency, " "), "cordon and drain the node") {
		t.Errorf("%s %q\n%s\n%v", f.Severity, f.Summary, f.Diagnosis, f.Emergency)
	}
}

// The older shape: the Xid series appears only at the GPU's first Xid,
// without err labels; Xid 13 is usually the application: a warning.
func TestXidSeriesCreatedByItsFirstXid(t *testing.T) {
	got, _ := gpuRun(t, fixture.DCGMNoPods, 40*time.Minute, func(el time.Duration) []fixture.DCGMEdit {
		if el < 35*time.Minute {
			return []fixture.DCGMEdit{{Family: series.DCGMXIDErrors, GPU: "0", Drop: true}, {Family: series.DCGMXIDErrors, GPU: "1", Drop: true}}
		}
		return []fixture.DCGMEdit{{Family: series.DCGMXIDErrors, GPU: "0", Value: "13"}, {Family: series.DCGMXIDErrors, GPU: "1", Drop: true}}
	}, nil)
	f := onlyGPU(t, got, "dcgm-a/gpu0", detect.GPUFault)
	if f.Severity != detect.Warning || !strings.Contains(f.Summary, "Xid 13") || !strings.Contains(f.Diagnosis, "usually the application") {
		t.Errorf("%s %q %s", f.Severity, f.Summary, f.Diagnosis)
	}
	if strings.Contains(f.Diagnosis, "pod") {
		t.Errorf("a GPU without pod labels is said to be held: %s", f.Diagnosis)
	}
}

// A code already there when watching began, and one older than the range,
// are history: no finding.
func TestAnOldXidIsNoEvent(t *testing.T) {
	got, _ := gpuRun(t, fixture.DCGMPods, 40*time.Minute, func(time.Duration) []fixture.DCGMEdit {
		return []fixture.DCGMEdit{{Family: series.DCGMXIDErrors, GPU: "0", Value: "79", ErrMsg: "GPU has fallen off the bus"}}
	}, nil)
	noGPU(t, got)
	got, _ = gpuRun(t, fixture.DCGMPods, 60*time.Minute, func(el time.Duration) []fixture.DCGMEdit {
		return []fixture.DCGMEdit{{Family: series.DCGMXIDErrors, GPU: "0", Value: after(el, 10*time.Minute, "48"), ErrMsg: after(el, 10*time.Minute, "DBE")}}
	}, nil)
	noGPU(t, got)
}

// ECC, row remap and NVLink counters of the newer shape; the older shape
// exports none of ECC and NVLink, and its GPUs are not judged on them.
func TestECCRemapAndNVLinkFaults(t *testing.T) {
	got, _ := gpuRun(t, fixture.DCGMPods, 40*time.Minute, func(el time.Duration) []fixture.DCGMEdit {
		return []fixture.DCGMEdit{
			{Family: series.DCGMECCDBEVolatile, GPU: "0", Value: after(el, 35*time.Minute, "2")},
			{Family: series.DCGMNVLinkReplayErrors, GPU: "0", Value: after(el, 36*time.Minute, "40")},
			{Family: series.DCGMRowRemapFailure, GPU: "1", Value: after(el, 38*time.Minute, "1")},
		}
	}, nil)
	f0, f1 := only2(t, got, "dcgm-a/gpu0", "dcgm-a/gpu1")
	if f0.Severity != detect.Critical || !strings.HasPrefix(f0.Summary, "GPU fault: uncorrectable ECC errors, NVLink replay errors on GPU 0") {
		t.Errorf("gpu0: %s %q", f0.Severity, f0.Summary)
	}
	if f1.Severity != detect.Critical || !strings.Contains(f1.Summary, "row-remap failure") || !strings.Contains(strings.Join(f1.Emergency, " "), "needs service") {
		t.Errorf("gpu1: %s %q", f1.Severity, f1.Summary)
	}
}

func only2(t *testing.T, got map[string][]detect.Finding, a, b string) (detect.Finding, detect.Finding) {
	t.Helper()
	var fa, fb []detect.Finding
	for name, fs := range got {
		for _, f := range fs {
			switch {
			case name == a && f.Class == detect.GPUFault:
				fa = append(fa, f)
			case name == b && f.Class == detect.GPUFault:
				fb = append(fb, f)
			default:
				t.Errorf("unexpected %s on %s: %s", f.Class, name, f.Summary)
			}
		}
	}
	if len(fa) != 1 || len(fb) != 1 {
		t.Fatalf("%s: %v, %s: %v", a, fa, b, fb)
	}
	return fa[0], fb[0]
}

// HW thermal slowdown for the last 6 minutes in both names of the bitmask:
// a warning naming the reason, with the clock against its usual and the
// temperature; HW slowdown, set with it, is not named twice.
func TestHWThermalSlowdownIsThrottling(t *testing.T) {
	for name, throttle := range map[string]string{fixture.DCGMPods: series.DCGMClockEventReasons, fixture.DCGMNoPods: series.DCGMClockThrottleReasons} {
		t.Run(name, func(t *testing.T) {
			got, _ := gpuRun(t, name, 70*time.Minute, func(el time.Duration) []fixture.DCGMEdit {
				if el < 64*time.Minute {
					return nil
				}
				return []fixture.DCGMEdit{{Family: throttle, GPU: "0", Value: "76"}, // 0x40|0x8|0x4
					{Family: series.DCGMSMClock, GPU: "0", Value: "990"}, {Family: series.DCGMGPUTemp, GPU: "0", Value: "91"}}
			}, nil)
			f := onlyGPU(t, got, "dcgm-a/gpu0", detect.GPUThrottled)
			if f.Severity != detect.Warning || !strings.HasPrefix(f.Summary, "GPU throttled: HW thermal slowdown (0x40) on GPU 0 on node ") ||
				strings.Contains(f.Summary, "0x8") || !strings.Contains(f.Diagnosis, "cooling fault") ||
				!strings.Contains(f.Diagnosis, "The SM clock averaged 990 MHz against") {
				t.Errorf("%s %q\n%s", f.Severity, f.Summary, f.Diagnosis)
			}
			var temp bool
			for _, e := range f.Evidence {
				temp = temp || (e.Unit == "°C" && e.Value == 91)
			}
			if !temp {
				t.Errorf("no temperature evidence: %+v", f.Evidence)
			}
		})
	}
}

// The driver's thermal slowdown alone is info; a single throttled scrape,
// the software power cap at full load, sync boost, idle and a bitmask that
// is NaN are nothing.
func TestThrottleEdges(t *testing.T) {
	got, _ := gpuRun(t, fixture.DCGMPods, 70*time.Minute, func(el time.Duration) []fixture.DCGMEdit {
		return []fixture.DCGMEdit{{Family: series.DCGMClockEventReasons, GPU: "0", Value: after(el, 63*time.Minute, "36")}} // 0x20|0x4
	}, nil)
	if f := onlyGPU(t, got, "dcgm-a/gpu0", detect.GPUThrottled); f.Severity != detect.Info || !strings.Contains(f.Summary, "SW thermal slowdown (0x20)") {
		t.Errorf("%s %q", f.Severity, f.Summary)
	}
	for what, edit := range map[string]func(el time.Duration) string{
		"one scrape":                      func(el time.Duration) string { return after(el, 69*time.Minute+50*time.Second, "64") },
		"power cap at load":               func(time.Duration) string { return "4" },
		"sync boost, app clocks, display": func(time.Duration) string { return "274" }, // 0x100|0x10|0x2
		"idle":                            func(time.Duration) string { return "1" },
		"NaN":                             func(el time.Duration) string { return after(el, 60*time.Minute, "NaN") },
		"half the range":                  func(el time.Duration) string { return after(el, 69*time.Minute, "72") },
	} {
		t.Run(what, func(t *testing.T) {
			got, _ := gpuRun(t, fixture.DCGMPods, 70*time.Minute, func(el time.Duration) []fixture.DCGMEdit {
				return []fixture.DCGMEdit{{Family: series.DCGMClockEventReasons, GPU: "0", Value: edit(el)},
					{Family: series.DCGMGPUUtil, GPU: "0", Value: "100"}}
			}, nil)
			noGPU(t, got)
		})
	}
}

// GPU detectors read only GPUs: an SGLang engine's window is nil to them.
func TestGPUDetectorsIgnoreEngines(t *testing.T) {
	cfg := detect.DefaultConfig()
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := scrape.NewDecoder().Decode(body, 0)
	if err != nil {
		t.Fatal(err)
	}
	store, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: gpuInterval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Append(series.Scrape{Target: "e", Kind: "engine", At: start, Groups: groups}); err != nil {
		t.Fatal(err)
	}
	store.View("e", func(w detect.Window) {
		for _, d := range ds {
			if d.Class() == detect.GPUFault || d.Class() == detect.GPUThrottled {
				if fs := d.Detect(w, start); fs != nil {
					t.Errorf("%s on an engine: %v", d.Class(), fs)
				}
			}
		}
	})
}

// gpuScenario is one H100 under load held by pod llm/llama-70b-0, as
// dcgm-exporter reports it: Xid 0, the power cap bit, full clocks.
func gpuScenario(ms ...metric) *scenario {
	s := newScenario(
		gauge(series.DCGMXIDErrors, constant(0)),
		gauge(series.DCGMClockEventReasons, constant(4)),
		gauge(series.DCGMSMClock, constant(1980)),
		gauge(series.DCGMGPUTemp, constant(62)),
		gauge(series.DCGMGPUUtil, constant(88)),
		counter(series.DCGMECCDBEVolatile, constant(0)),
		gauge(series.DCGMRowRemapFailure, constant(0)),
	).with(ms...)
	s.target, s.kind, s.model = "dcgm-gpu-node-a/gpu1", detect.KindGPU, ""
	s.labels = map[string]string{series.GPUNode: "gpu-node-a", series.GPUIndex: "1", series.GPUUUID: "GPU-9c3e2d14-77a0-41f9-b2c8-0e5d6a8f3b12",
		series.GPUModel: "NVIDIA H100 80GB HBM3", series.GPUNamespace: "llm", series.GPUPod: "llama-70b-0", series.GPUContainer: "sglang"}
	return s
}

// GPUFault's golden page (checkPage): Xid 79.
func TestGoldenPageEventsGPUFault(t *testing.T) {
	checkPage(t, pageCase{class: detect.GPUFault, noSingleLimit: "an Xid is a new code, not a number crossing a limit",
		scenario: gpuScenario(gauge(series.DCGMXIDErrors, stepAt(incident-2*time.Minute, 0, 79)))})
}

// GPUThrottled's golden page (checkPage): HW thermal slowdown.
func TestGoldenPageEventsGPUThrottled(t *testing.T) {
	at := incident - 6*time.Minute
	checkPage(t, pageCase{class: detect.GPUThrottled, scenario: gpuScenario(
		gauge(series.DCGMClockEventReasons, stepAt(at, 4, 76)),
		gauge(series.DCGMSMClock, stepAt(at, 1980, 1035)),
		gauge(series.DCGMGPUTemp, stepAt(at, 62, 92)))})
}

// A headline names the GPU where on-call goes (index and node); its model
// and UUID, which a hardware ticket needs, stay in the diagnosis. Without
// index and node the UUID is the name, and without labels the target's.
func TestGPUNameIsWhereOnCallGoes(t *testing.T) {
	full := map[string]string{series.GPUIndex: "3", series.GPUNode: "n1", series.GPUModel: "NVIDIA H100", series.GPUUUID: "GPU-abc"}
	for _, c := range []struct {
		labels            map[string]string
		name, description string
	}{
		{full, "GPU 3 on node n1", "GPU 3 on node n1 (NVIDIA H100, GPU-abc)"},
		{map[string]string{series.GPUNode: "n1"}, "GPU on node n1", "GPU on node n1"},
		{map[string]string{series.GPUUUID: "GPU-abc"}, "GPU GPU-abc", "GPU (GPU-abc)"},
		{nil, "GPU dcgm/0", "GPU dcgm/0"},
	} {
		r := detect.Replica{Name: "dcgm/0", Labels: c.labels}
		if got := detect.GPUName(r); got != c.name {
			t.Errorf("GPUName(%v) = %q, want %q", c.labels, got, c.name)
		}
		if got := detect.GPUDescription(r); got != c.description {
			t.Errorf("GPUDescription(%v) = %q, want %q", c.labels, got, c.description)
		}
	}
}
