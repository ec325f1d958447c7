package sim

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// gpuScraped is one parsed dcgm-exporter exposition of one node.
type gpuScraped map[string]*dto.MetricFamily

func scrapeGPU(t *testing.T, f *Fleet, node int) gpuScraped {
	t.Helper()
	var b bytes.Buffer
	if err := f.WriteGPUMetrics(&b, node); err != nil {
		t.Fatal(err)
	}
	return parseExposition(t, b.Bytes())
}

// v is the value of the family's only series; NaN-free: a missing family
// fails the test.
func (s gpuScraped) v(t *testing.T, name string) float64 {
	t.Helper()
	ms := s[name].GetMetric()
	if len(ms) != 1 {
		t.Fatalf("%s: %d series, want 1", name, len(ms))
	}
	if g := ms[0].GetGauge(); g != nil {
		return g.GetValue()
	}
	return ms[0].GetCounter().GetValue()
}

func (s gpuScraped) label(name, label string) (string, bool) {
	for _, m := range s[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				return l.GetValue(), true
			}
		}
	}
	return "", false
}

func (s gpuScraped) reasons(t *testing.T) uint64 {
	t.Helper()
	return uint64(s.v(t, FieldClocksEventReasons))
}

// gpuFamilies are the fields the exporter renders and their types, as
// dcgm-exporter's counter CSVs declare them.
var gpuFamilies = map[string]dto.MetricType{
	"DCGM_FI_DEV_SM_CLOCK":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_MEM_CLOCK":                   dto.MetricType_GAUGE,
	FieldClocksEventReasons:                   dto.MetricType_GAUGE,
	"DCGM_FI_DEV_GPU_TEMP":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_POWER_USAGE":                 dto.MetricType_GAUGE,
	"DCGM_FI_DEV_PCIE_REPLAY_COUNTER":         dto.MetricType_COUNTER,
	"DCGM_FI_DEV_GPU_UTIL":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_XID_ERRORS":                  dto.MetricType_GAUGE,
	"DCGM_FI_DEV_FB_FREE":                     dto.MetricType_GAUGE,
	"DCGM_FI_DEV_FB_USED":                     dto.MetricType_GAUGE,
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": dto.MetricType_COUNTER,
	"DCGM_FI_DEV_ROW_REMAP_FAILURE":           dto.MetricType_GAUGE,
}

var uuidFormat = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// The exposition is dcgm-exporter's: every field with HELP and TYPE, the
// GPU's identity then its pod, values as DCGM prints them; it parses with
// both Prometheus parsers; each node's GPU has a UUID of its own that the
// seed alone decides.
func TestGPUExposition(t *testing.T) {
	f := NewFleet(FleetConfig{Seed: 3, Start: t0, Warmup: time.Minute})
	f.Advance(t0.Add(30 * time.Second))
	var uuids []string
	for node := range f.Nodes() {
		s := scrapeGPU(t, f, node)
		if len(s) != len(gpuFamilies) {
			t.Errorf("node %d: %d families, want %d", node, len(s), len(gpuFamilies))
		}
		for name, kind := range gpuFamilies {
			fam := s[name]
			if fam == nil {
				t.Errorf("node %d: no %s", node, name)
				continue
			}
			if fam.GetType() != kind || fam.GetHelp() == "" {
				t.Errorf("node %d: %s is a %v with HELP %q, want a %v with HELP", node, name, fam.GetType(), fam.GetHelp(), kind)
			}
			want := map[string]string{
				"gpu": "0", "pci_bus_id": "00000000:18:00.0", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3",
				"Hostname": f.Nodes()[node], "DCGM_FI_DRIVER_VERSION": "580.95.05",
				"namespace": "llm", "pod": f.Replicas()[node], "container": "sglang",
			}
			for l, v := range want {
				if got, _ := s.label(name, l); got != v {
					t.Errorf("node %d: %s{%s=%q}, want %q", node, name, l, got, v)
				}
			}
		}
		uuid, _ := s.label("DCGM_FI_DEV_GPU_UTIL", "UUID")
		if !uuidFormat.MatchString(uuid) {
			t.Errorf("node %d: UUID %q", node, uuid)
		}
		if got := f.GPUs(node); len(got) != 1 || got[0].UUID != uuid || got[0].Pod != f.Replicas()[node] {
			t.Errorf("node %d: GPUs() = %+v, want the exposition's GPU (UUID %s)", node, got, uuid)
		}
		uuids = append(uuids, uuid)
	}
	if slices.Sort(uuids); len(slices.Compact(slices.Clone(uuids))) != len(uuids) {
		t.Errorf("UUIDs %v are not distinct", uuids)
	}
	again := NewFleet(FleetConfig{Seed: 3, Start: t0})
	other := NewFleet(FleetConfig{Seed: 4, Start: t0})
	if a, b := again.GPUs(1)[0].UUID, other.GPUs(1)[0].UUID; a != f.GPUs(1)[0].UUID || a == b {
		t.Errorf("node 1's UUID: %s, %s with the same seed, %s with another; want it to follow the seed", f.GPUs(1)[0].UUID, a, b)
	}

	var b bytes.Buffer
	if err := f.WriteGPUMetrics(&b, 0); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	line := regexp.MustCompile(`(?m)^DCGM_FI_DEV_GPU_UTIL\{gpu="0",UUID="GPU-[-0-9a-f]+",pci_bus_id="00000000:18:00\.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="sim-node-0",DCGM_FI_DRIVER_VERSION="580\.95\.05",container="sglang",namespace="llm",pod="sim-0",pod_uid=""\} \d+$`)
	if !line.MatchString(text) {
		t.Errorf("no GPU_UTIL line in dcgm-exporter's label order and integer format:\n%s", text)
	}
	if !regexp.MustCompile(`(?m)^DCGM_FI_DEV_POWER_USAGE\{.*\} \d+\.\d{6}$`).MatchString(text) {
		t.Errorf("power not printed as dcgm-exporter prints a double (%%f):\n%s", text)
	}
	if !strings.Contains(text, "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n") {
		t.Errorf("Xid family's HELP/TYPE are not dcgm-exporter's:\n%s", text)
	}

	// Prometheus' own scrape parser reads it too, every series with the pod.
	p, err := textparse.New(b.Bytes(), "text/plain; version=0.0.4", labels.NewSymbolTable(), textparse.ParserOptions{})
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for {
		e, err := p.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("textparse: %v", err)
		}
		if e != textparse.EntrySeries {
			continue
		}
		var ls labels.Labels
		p.Labels(&ls)
		if ls.Get("pod") != "sim-0" || ls.Get("namespace") != "llm" {
			t.Errorf("series %s lacks the pod's labels", ls)
		}
		series++
	}
	if series != len(gpuFamilies) {
		t.Errorf("textparse read %d series, want %d", series, len(gpuFamilies))
	}
}

// gpuWindow is what a scraper of every node's dcgm-exporter, and of the
// replica on it, saw between two instants.
type gpuWindow struct {
	reasons            uint64 // every reason seen
	powerCapped        int    // samples with the SW power cap reason
	samples            int
	minClock, maxClock float64
	minTemp, maxTemp   float64
	minUtil, maxPower  float64
	maxXid             float64
	itl                float64 // the replica's mean inter-token latency, s
}

func (w gpuWindow) String() string {
	return fmt.Sprintf("reasons=%#x (power cap in %d/%d) sm=%.0f..%.0f MHz temp=%.0f..%.0f C util>=%.0f%% power<=%.1f W xid<=%.0f itl=%.4fs",
		w.reasons, w.powerCapped, w.samples, w.minClock, w.maxClock, w.minTemp, w.maxTemp, w.minUtil, w.maxPower, w.maxXid, w.itl)
}

// observeGPUs advances the fleet over [from, to) (offsets from t0), scraping
// every node's GPU every scrapeEvery, and returns each node's window.
func observeGPUs(t *testing.T, f *Fleet, from, to time.Duration) []gpuWindow {
	t.Helper()
	f.Advance(t0.Add(from))
	n := len(f.Nodes())
	first := make([]scraped, n)
	ws := make([]gpuWindow, n)
	for i := range n {
		first[i] = scrape(t, f, i)
		ws[i] = gpuWindow{minClock: 1e9, minTemp: 1e9, minUtil: 1e9}
	}
	for at := from + scrapeEvery; at <= to; at += scrapeEvery {
		f.Advance(t0.Add(at))
		for i := range n {
			s, w := scrapeGPU(t, f, i), &ws[i]
			w.samples++
			r := s.reasons(t)
			w.reasons |= r
			if r&ThrottleSWPowerCap != 0 {
				w.powerCapped++
			}
			w.minClock, w.maxClock = min(w.minClock, s.v(t, "DCGM_FI_DEV_SM_CLOCK")), max(w.maxClock, s.v(t, "DCGM_FI_DEV_SM_CLOCK"))
			w.minTemp, w.maxTemp = min(w.minTemp, s.v(t, "DCGM_FI_DEV_GPU_TEMP")), max(w.maxTemp, s.v(t, "DCGM_FI_DEV_GPU_TEMP"))
			w.minUtil = min(w.minUtil, s.v(t, "DCGM_FI_DEV_GPU_UTIL"))
			w.maxPower = max(w.maxPower, s.v(t, "DCGM_FI_DEV_POWER_USAGE"))
			w.maxXid = max(w.maxXid, s.v(t, "DCGM_FI_DEV_XID_ERRORS"))
		}
	}
	for i := range n {
		a, b := first[i], scrape(t, f, i)
		if a == nil || b == nil {
			continue
		}
		const itl = "sglang:inter_token_latency_seconds"
		ws[i].itl = (b.hsum(itl) - a.hsum(itl)) / (b.v(itl) - a.v(itl))
	}
	return ws
}

// Healthy heavy load on an H100: the batch keeps the GPU busy and asks for
// more power than the board allows, so SW power cap comes and goes -- and
// nothing else: no HW slowdown, no thermal reason, no Xid.
func TestGPUHealthyHeavyLoad(t *testing.T) {
	f := NewFleet(FleetConfig{Seed: 3, Start: t0, Warmup: time.Minute})
	for node, w := range observeGPUs(t, f, 0, 5*time.Minute) {
		t.Logf("sim-node-%d: %v", node, w)
		if w.reasons&^ThrottleSWPowerCap != 0 {
			t.Errorf("sim-node-%d: reasons %#x; healthy heavy load shows SW power cap (0x4) at most", node, w.reasons)
		}
		if w.powerCapped == 0 {
			t.Errorf("sim-node-%d: never power capped; a full batch on an H100 reaches its power limit", node)
		}
		if w.minUtil < 95 || w.maxPower > gpuPowerLimit || w.minClock < 1500 || w.maxTemp > 80 || w.minTemp < 50 {
			t.Errorf("sim-node-%d: %v; want a busy GPU at its power limit, clocks near boost, 50-80 C", node, w)
		}
		if w.maxXid != 0 {
			t.Errorf("sim-node-%d: Xid %.0f in healthy load", node, w.maxXid)
		}
		s := scrapeGPU(t, f, node)
		if code, _ := s.label("DCGM_FI_DEV_XID_ERRORS", "err_code"); code != "0" {
			t.Errorf("sim-node-%d: Xid err_code %q, want \"0\"", node, code)
		}
		if msg, _ := s.label("DCGM_FI_DEV_XID_ERRORS", "err_msg"); msg != "No Error" {
			t.Errorf("sim-node-%d: Xid err_msg %q, want \"No Error\"", node, msg)
		}
	}
}

// Light load keeps the GPU below its power limit, and an idle GPU says so.
func TestGPUFollowsTheLoad(t *testing.T) {
	light := DefaultLoad()
	light.Rate = 1
	idle := DefaultLoad()
	idle.Rate = 0
	sc := Scenario{Name: "light", Base: light, Phases: []Phase{
		{Name: "light", Duration: 2 * time.Minute},
		{Name: "idle", Change: func(l *Load) { *l = idle }},
	}}
	f := NewFleet(FleetConfig{Replicas: 1, Seed: 2, Start: t0, Scenario: sc, Warmup: time.Minute})
	lw := observeGPUs(t, f, time.Minute, 2*time.Minute)[0]
	iw := observeGPUs(t, f, 4*time.Minute, 5*time.Minute)[0]
	t.Logf("light: %v\nidle: %v", lw, iw)
	if lw.powerCapped != 0 || lw.maxPower > 0.9*gpuPowerLimit || lw.reasons&^(ThrottleGPUIdle) != 0 {
		t.Errorf("light load: %v; want below the power limit, no reason but idle", lw)
	}
	if iw.reasons != ThrottleGPUIdle || iw.maxClock > gpuIdleSMClock+30 || iw.maxPower > 100 || iw.maxTemp > 45 {
		t.Errorf("idle: %v; want the idle reason alone, idle clocks, idle power, cool", iw)
	}
}

// A HW thermal slowdown on sim-0's GPU: its reasons carry HW slowdown and
// HW thermal, its clocks drop, it runs hot, its decode slows -- and only
// sim-0's, only for the phase.
func TestGPUThermalScenario(t *testing.T) {
	sc := GPUThermalScenario(1)
	f := NewFleet(FleetConfig{Seed: 1, Start: t0, Scenario: sc, Warmup: time.Minute})
	at := func(name string) time.Duration { return phaseStart(t, sc, name) }
	s := time.Second
	before := observeGPUs(t, f, at("gpu_thermal")-time.Minute, at("gpu_thermal"))
	during := observeGPUs(t, f, at("gpu_thermal")+20*s, at("gpu_thermal")+80*s)
	observeGPUs(t, f, at("gpu_thermal")+80*s, at("recovery")+3*time.Minute)
	after := observeGPUs(t, f, at("recovery")+3*time.Minute, at("recovery")+4*time.Minute)
	for i := range before {
		t.Logf("sim-%d before: %v\nsim-%d during: %v\nsim-%d after: %v", i, before[i], i, during[i], i, after[i])
	}
	hw := ThrottleHWSlowdown | ThrottleHWThermal
	if w := during[0]; w.reasons&hw != hw || w.maxClock > 900 || w.minTemp < 90 {
		t.Errorf("sim-0 during the throttle: %v; want HW slowdown and HW thermal (0x48), SM clock under 900 MHz, at least 90 C", w)
	}
	if r := during[0].itl / before[0].itl; r < 2 || r > 3.5 {
		t.Errorf("sim-0 mean ITL %.4f s during the throttle, %.4f s before: %.1fx; want 2-3.5x", during[0].itl, before[0].itl, r)
	}
	for i := 1; i < len(during); i++ {
		if during[i].reasons&^ThrottleSWPowerCap != 0 {
			t.Errorf("sim-%d during sim-0's throttle: reasons %#x", i, during[i].reasons)
		}
		if r := during[i].itl / before[i].itl; r < 0.8 || r > 1.25 {
			t.Errorf("sim-%d mean ITL %.4f s during sim-0's throttle, %.4f s before: %.1fx; want unchanged", i, during[i].itl, before[i].itl, r)
		}
	}
	for i, w := range after {
		if w.reasons&^ThrottleSWPowerCap != 0 || w.minClock < 1500 || w.maxTemp > 80 || w.maxXid != 0 {
			t.Errorf("sim-%d after the recovery: %v; want healthy again", i, w)
		}
	}
	if r := after[0].itl / before[0].itl; r > 1.3 {
		t.Errorf("sim-0 mean ITL %.4f s after, %.4f s before: %.1fx; want back to normal", after[0].itl, before[0].itl, r)
	}
}

// Xid 79: the PCIe link retries first, then the GPU falls off the bus and
// takes sim-0 down; its exporter still says 79; when the GPU is back the
// replica restarts and the last Xid stays 79.
func TestGPUFallenOffBusScenario(t *testing.T) {
	sc := GPUFallenOffBusScenario(1)
	f := NewFleet(FleetConfig{Seed: 1, Start: t0, Scenario: sc, Warmup: time.Minute})
	at := func(name string) time.Duration { return phaseStart(t, sc, name) }
	s := time.Second
	replays := func(node int) float64 { return scrapeGPU(t, f, node).v(t, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER") }

	f.Advance(t0.Add(at("pcie_replays") - s))
	if replays(0) != 0 || replays(1) != 0 {
		t.Errorf("PCIe replays before the link fails: %v, %v; want 0", replays(0), replays(1))
	}
	f.Advance(t0.Add(at("gpu_off_bus") - s))
	if n := replays(0); n < 200 || n > 400 {
		t.Errorf("sim-node-0 PCIe replays after a minute of ~5/s: %v", n)
	}
	if replays(1) != 0 {
		t.Errorf("sim-node-1 PCIe replays %v; want 0", replays(1))
	}

	f.Advance(t0.Add(at("gpu_off_bus") + 5*s))
	if f.Up(0) || scrape(t, f, 0) != nil {
		t.Error("sim-0 should be down while its GPU is off the bus")
	}
	off := scrapeGPU(t, f, 0)
	if len(off) != 1 || off.v(t, "DCGM_FI_DEV_XID_ERRORS") != XidFallenOffTheBus {
		t.Errorf("sim-node-0 off the bus exports %d families, Xid %v; want the Xid alone, 79", len(off), off["DCGM_FI_DEV_XID_ERRORS"])
	}
	if code, _ := off.label("DCGM_FI_DEV_XID_ERRORS", "err_code"); code != "79" {
		t.Errorf("err_code %q, want \"79\"", code)
	}
	if msg, _ := off.label("DCGM_FI_DEV_XID_ERRORS", "err_msg"); msg != "GPU has fallen off the bus" {
		t.Errorf("err_msg %q", msg)
	}
	for i := 1; i < 3; i++ {
		if !f.Up(i) || scrapeGPU(t, f, i).v(t, "DCGM_FI_DEV_XID_ERRORS") != 0 {
			t.Errorf("sim-%d should be up with Xid 0 while sim-0's GPU is off the bus", i)
		}
	}
	f.Advance(t0.Add(at("recovery") - s))
	if f.Up(0) {
		t.Error("sim-0 came back before its GPU did")
	}

	w := observeGPUs(t, f, at("recovery")+30*s, at("recovery")+90*s)
	t.Logf("sim-0 after the reset: %v", w[0])
	if !f.Up(0) || scrape(t, f, 0).v("sglang:num_requests_total") == 0 {
		t.Error("sim-0 should serve again after its GPU is reset")
	}
	if back := scrapeGPU(t, f, 0); len(back) != len(gpuFamilies) || back.v(t, "DCGM_FI_DEV_XID_ERRORS") != XidFallenOffTheBus {
		t.Errorf("sim-node-0 after the reset: %d families, Xid %v; want every field back and the last Xid still 79", len(back), back.v(t, "DCGM_FI_DEV_XID_ERRORS"))
	}
	if w[0].minUtil < 90 || w[0].reasons&^ThrottleSWPowerCap != 0 {
		t.Errorf("sim-node-0 after the reset: %v; want busy and unthrottled", w[0])
	}
}

// The exporter's release and mode: the older throttle name, the Xid
// without err_code/err_msg, an Xid series only after the first Xid, no pod
// labels outside Kubernetes mode, and pods named as the deployment names
// them.
func TestGPUExporterShapes(t *testing.T) {
	xid := Scenario{Name: "xid", Phases: []Phase{
		{Name: "healthy", Duration: time.Minute},
		{Name: "xid", Replicas: []int{1}, GPUXid: 13},
	}}
	build := func(c GPUConfig) *Fleet {
		f := NewFleet(FleetConfig{Seed: 5, Start: t0, Scenario: xid, GPU: c})
		f.Advance(t0.Add(30 * time.Second))
		return f
	}
	has := func(s gpuScraped, labels ...string) []string {
		var found []string
		for _, fam := range s {
			for _, m := range fam.GetMetric() {
				for _, l := range m.GetLabel() {
					if slices.Contains(labels, l.GetName()) {
						found = append(found, fam.GetName()+"{"+l.GetName()+"}")
					}
				}
			}
		}
		return found
	}

	s := scrapeGPU(t, build(GPUConfig{NoPodLabels: true}), 0)
	if got := has(s, "namespace", "pod", "container", "pod_uid"); len(got) != 0 {
		t.Errorf("without pod labels: %v", got)
	}
	if len(s) != len(gpuFamilies) {
		t.Errorf("without pod labels: %d families, want %d", len(s), len(gpuFamilies))
	}

	old := build(GPUConfig{ThrottleReasonsLegacyName: true, XidLegacyLabels: true})
	s = scrapeGPU(t, old, 0)
	if s[FieldClockThrottleReasons] == nil || s[FieldClocksEventReasons] != nil {
		t.Errorf("legacy name: families %v; want %s and not %s", slices.Sorted(maps.Keys(s)), FieldClockThrottleReasons, FieldClocksEventReasons)
	}
	if got := has(s, "err_code", "err_msg", "pod_uid"); len(got) != 0 {
		t.Errorf("legacy Xid labels: %v", got)
	}
	if pod, _ := s.label("DCGM_FI_DEV_XID_ERRORS", "pod"); pod != "sim-0" {
		t.Errorf("legacy Xid labels: pod %q, want sim-0", pod)
	}

	lazy := build(GPUConfig{XidSeriesOnFirstError: true})
	if s := scrapeGPU(t, lazy, 1); s["DCGM_FI_DEV_XID_ERRORS"] != nil {
		t.Error("Xid series before the GPU's first Xid")
	}
	lazy.Advance(t0.Add(90 * time.Second))
	if s := scrapeGPU(t, lazy, 1); s.v(t, "DCGM_FI_DEV_XID_ERRORS") != 13 {
		t.Errorf("Xid %v after Xid 13, want 13", s["DCGM_FI_DEV_XID_ERRORS"])
	}
	if s := scrapeGPU(t, lazy, 0); s["DCGM_FI_DEV_XID_ERRORS"] != nil {
		t.Error("Xid series on a GPU that recorded none")
	}

	named := build(GPUConfig{Namespace: "prod", Container: "server", Pod: func(i int) string { return fmt.Sprintf("qwen3-8b-%d", i) }})
	s = scrapeGPU(t, named, 2)
	for l, want := range map[string]string{"namespace": "prod", "pod": "qwen3-8b-2", "container": "server"} {
		if got, _ := s.label("DCGM_FI_DEV_SM_CLOCK", l); got != want {
			t.Errorf("%s=%q, want %q", l, got, want)
		}
	}
}

// The exporter serves GET /metrics as dcgm-exporter does, and nothing else.
func TestGPUHandler(t *testing.T) {
	f := NewFleet(FleetConfig{Seed: 1, Start: t0})
	f.Advance(t0.Add(10 * time.Second))
	srv := httptest.NewServer(f.GPUHandler(2))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := f.WriteGPUMetrics(&want, 2); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want.Bytes()) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("GET /metrics: %d %q, body %d bytes, want 200 text/plain and node 2's exposition (%d bytes)", resp.StatusCode, resp.Header.Get("Content-Type"), len(body), want.Len())
	}
	for path, status := range map[string]int{"/": http.StatusNotFound, "/health": http.StatusNotFound} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, status)
		}
	}
	resp, err = http.Post(srv.URL+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
	}
}

// Same seed and times, same GPU expositions, however Advance is called; and
// the GPUs never change what the replicas do.
func TestGPUDeterminism(t *testing.T) {
	render := func(steps ...time.Duration) []byte {
		f := NewFleet(FleetConfig{Seed: 9, Start: t0, Scenario: GPUThermalScenario(0.2)})
		for _, d := range steps {
			f.Advance(t0.Add(d))
		}
		var out bytes.Buffer
		for node := range f.Nodes() {
			if err := f.WriteGPUMetrics(&out, node); err != nil {
				t.Fatal(err)
			}
		}
		return out.Bytes()
	}
	end := 50 * time.Second
	var chopped []time.Duration
	for d := time.Duration(0); d < end; d += 1700 * time.Millisecond {
		chopped = append(chopped, d)
	}
	if once := render(end); !bytes.Equal(once, render(append(chopped, end)...)) {
		t.Fatal("the GPU exposition depends on how often Advance is called")
	}
}
