package sim

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
)

// The GPUs under the fleet and the NVIDIA dcgm-exporter beside them. Each
// replica runs on a node of its own, sim-node-<i>, with one GPU (index 0,
// device nvidia0): the simulated servers are TP=1. A dcgm-exporter on every
// node serves that node's GPU as dcgm-exporter's text exposition
// (Fleet.WriteGPUMetrics, Fleet.GPUHandler).
//
// The GPU's readings follow the replica's work, not a script: utilization
// is the share of time the engine ran a prefill or decode iteration, the
// power it asks for grows with utilization and the size of the batch and
// is capped at the board limit (which sets the SW power cap reason, as a
// busy H100 does), the temperature follows the power, and the SM clock
// drops when power or a throttle holds it down. A Phase imposes faults on
// top: throttle reasons (Phase.GPUThrottle), which also slow the GPU, and
// an Xid (Phase.GPUXid); Xid 79 takes the GPU off the bus and its replica
// down for the phase.

// NVML clock-event (throttle) reasons, the bits of
// DCGM_FI_DEV_CLOCKS_EVENT_REASONS.
const (
	ThrottleGPUIdle       uint64 = 0x1
	ThrottleAppClocks     uint64 = 0x2
	ThrottleSWPowerCap    uint64 = 0x4
	ThrottleHWSlowdown    uint64 = 0x8
	ThrottleSyncBoost     uint64 = 0x10
	ThrottleSWThermal     uint64 = 0x20
	ThrottleHWThermal     uint64 = 0x40
	ThrottleHWPowerBrake  uint64 = 0x80
	ThrottleDisplayClocks uint64 = 0x100
)

// throttleHWThermalFault is how NVML reports a HW thermal slowdown: the
// HW slowdown bit and, as its cause, the HW thermal bit.
const throttleHWThermalFault = ThrottleHWSlowdown | ThrottleHWThermal

// XidFallenOffTheBus is Xid 79: the GPU has fallen off the bus. Every
// process on it dies; the GPU is unreachable until it is reset.
const XidFallenOffTheBus = 79

// GPUConfig describes the GPUs and the dcgm-exporter of a fleet. The zero
// value is an H100 per replica under a current dcgm-exporter in Kubernetes
// mode, its pod labels naming the replica's pod.
type GPUConfig struct {
	Model         string // modelName; default "NVIDIA H100 80GB HBM3"
	DriverVersion string // DCGM_FI_DRIVER_VERSION label; default "580.95.05"
	// Namespace, Pod and Container are the pod attribution labels of
	// replica i's GPU: default namespace "llm", pod the replica's name
	// (sim-<i>), container "sglang".
	Namespace string
	Pod       func(replica int) string
	Container string
	// NoPodLabels renders no namespace/pod/container labels, as
	// dcgm-exporter does outside Kubernetes mode.
	NoPodLabels bool
	// ThrottleReasonsLegacyName names the reasons field
	// DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, as DCGM releases before the
	// rename to DCGM_FI_DEV_CLOCKS_EVENT_REASONS do (same bitmask).
	ThrottleReasonsLegacyName bool
	// XidLegacyLabels renders DCGM_FI_DEV_XID_ERRORS without the err_code
	// and err_msg labels (and the GPU without pod_uid), as releases
	// before dcgm-exporter 4 do.
	XidLegacyLabels bool
	// XidSeriesOnFirstError leaves DCGM_FI_DEV_XID_ERRORS out until the
	// GPU records its first Xid, as some releases do; by default the
	// series exists from the start with value 0.
	XidSeriesOnFirstError bool
}

// H100 SXM5 80GB, as nvidia-smi and DCGM report it.
const (
	gpuMaxSMClock  = 1980.0 // MHz, max boost
	gpuIdleSMClock = 345.0  // MHz, idle
	gpuMemClock    = 2619.0 // MHz, HBM3
	gpuPowerLimit  = 700.0  // W, board power limit
	gpuIdlePower   = 72.0   // W
	gpuFBTotal     = 81559  // MiB
	gpuAmbient     = 30.0   // °C, inlet air
	gpuThermalTau  = 20.0   // s, how fast the die follows its power
	gpuUtilTau     = 1.0    // s, dcgm's utilization sample period
	// What a batch costs in power: a full batch of decodes draws more than
	// a handful (more of the SMs and HBM busy).
	gpuDynamicPower = 660.0 // W at full utilization and a full batch, before the cap
	// SGLang's memory on the GPU beside the KV pool: weights of an 8B
	// model in bf16 and the CUDA context, graphs and activations.
	gpuWeightsMiB  = 15640
	gpuOverheadMiB = 4096
	kvBytesPerTok  = 144 * 1024
)

// throttleEffect is what a set of reasons does to the GPU: the share of
// its boost clock the SM clock keeps, and how many times slower an
// iteration runs. HW slowdown cuts the clocks by half or more (NVML), a
// power brake further; SW thermal slowdown trims them. Decode reads HBM
// more than it computes and the memory clock is not cut, so an iteration
// slows less than the SM clock drops.
func throttleEffect(reasons uint64) (clockShare, slowdown float64) {
	switch {
	case reasons&ThrottleHWPowerBrake != 0:
		return 0.25, 3
	case reasons&(ThrottleHWSlowdown|ThrottleHWThermal) != 0:
		return 0.4, 2
	case reasons&ThrottleSWThermal != 0:
		return 0.75, 1.3
	}
	return 1, 1
}

// throttleSlowdown is how many times slower an iteration runs under reasons.
func throttleSlowdown(reasons uint64) float64 {
	_, slow := throttleEffect(reasons)
	return slow
}

// xidMessages are dcgm-exporter's err_msg values (after NVIDIA's Xid
// catalog) for the codes an LLM-serving GPU meets most.
var xidMessages = map[int]string{
	0:   "No Error",
	13:  "Graphics Engine Exception",
	31:  "GPU memory page fault",
	43:  "GPU stopped processing",
	45:  "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
	48:  "Double Bit ECC Error",
	63:  "ECC page retirement or row remapping recording event",
	64:  "ECC page retirement or row remapper recording failure",
	74:  "NVLINK Error",
	79:  "GPU has fallen off the bus",
	92:  "High single-bit ECC error rate",
	94:  "Contained ECC error",
	95:  "Uncontained ECC error",
	119: "GSP RPC Timeout",
	120: "GSP Error",
}

// gpu is one simulated GPU. It outlives its replica's process.
type gpu struct {
	uuid string
	rng  *rand.Rand // its own stream: the GPU never perturbs the replica's

	// Imposed by the phase in force.
	imposed    uint64  // throttle reasons
	offBus     bool    // Xid 79 until the phase ends
	replayRate float64 // PCIe retries per second

	xid     int  // the last Xid recorded
	xidSeen bool // any Xid recorded

	pending float64 // GPU seconds of iterations not yet accounted to a step
	util    float64 // [0,1], smoothed over gpuUtilTau
	temp    float64 // °C
	power   float64 // W
	smClock float64 // MHz
	reasons uint64  // as reported: imposed plus what the load causes
	fbUsed  float64 // MiB
	replays float64 // PCIe replay counter
}

func newGPU(seed uint64, i int) *gpu {
	g := &gpu{rng: rand.New(rand.NewPCG(seed, uint64(i)+1<<32))}
	a, b := g.rng.Uint64(), g.rng.Uint64()
	g.uuid = fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", a>>32, a>>16&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
	g.temp, g.power, g.smClock = gpuAmbient+6, gpuIdlePower, gpuIdleSMClock
	g.reasons = ThrottleGPUIdle
	return g
}

// step updates the GPU's readings for one sub-step in which its engine
// (nil: the process is dead) ran busy GPU-seconds of iterations.
func (g *gpu) step(e *engine, busy float64) {
	if g.offBus {
		g.pending, g.util = 0, 0
		return
	}
	g.replays += float64(poisson(g.rng, g.replayRate*dt))
	g.pending += busy
	used := min(g.pending, dt)
	g.pending -= used
	g.util += (used/dt - g.util) * dt / gpuUtilTau

	fill := 0.0
	g.fbUsed = 0
	if e != nil {
		fill = float64(len(e.running)) / float64(max(e.cfg.MaxRunningRequests, 1))
		g.fbUsed = gpuWeightsMiB + gpuOverheadMiB + float64(e.cfg.MaxTotalTokens)*kvBytesPerTok/(1<<20)
	} else {
		g.pending = 0
	}
	share, _ := throttleEffect(g.imposed)
	demand := gpuIdlePower + g.util*(0.6+0.5*fill)*gpuDynamicPower
	reasons := g.imposed
	clock := gpuMaxSMClock
	switch {
	case share < 1:
		// The throttle holds the clocks down; the power follows them.
		clock = gpuMaxSMClock * share
		demand = gpuIdlePower + (demand-gpuIdlePower)*share
	case demand > gpuPowerLimit:
		reasons |= ThrottleSWPowerCap
		clock = gpuMaxSMClock * math.Pow(gpuPowerLimit/demand, 0.7)
		demand = gpuPowerLimit
	}
	if g.util < 0.005 && share == 1 {
		reasons |= ThrottleGPUIdle
		clock = gpuIdleSMClock
	}
	g.reasons = reasons
	g.power = min(demand*(1+0.01*g.rng.NormFloat64()), gpuPowerLimit)
	// Clocks move in 15 MHz bins, never above the boost clock.
	g.smClock = min(15*math.Round((clock+15*g.rng.NormFloat64())/15), gpuMaxSMClock)
	// The die follows its power; a thermal slowdown engages at its
	// temperature, which a cooling fault holds the die at even at reduced
	// power.
	target, floor := gpuAmbient+0.058*g.power, 0.0
	switch {
	case g.imposed&ThrottleHWThermal != 0:
		target, floor = 94, 90
	case g.imposed&ThrottleSWThermal != 0:
		target, floor = 88, 85
	}
	g.temp = max(g.temp+(target-g.temp)*dt/gpuThermalTau, floor)
}

// recordXid is the driver reporting an Xid on the GPU.
func (g *gpu) recordXid(code int) {
	g.xid, g.xidSeen = code, true
	if code == XidFallenOffTheBus {
		g.offBus = true
	}
}

// Nodes returns the nodes' hostnames (dcgm-exporter's Hostname label),
// one per replica, in replica order: node i runs replica i.
func (f *Fleet) Nodes() []string {
	names := make([]string, len(f.replicas))
	for i := range f.replicas {
		names[i] = nodeName(i)
	}
	return names
}

func nodeName(i int) string { return "sim-node-" + strconv.Itoa(i) }

// GPU is what dcgm-exporter reports about one GPU, for tests and tools that
// need the truth beside the exposition.
type GPU struct {
	Node, UUID, Namespace, Pod, Container string
}

// GPUs returns node's GPUs (one, index 0: the replicas are TP=1); the pod
// labels are empty under GPUConfig.NoPodLabels.
func (f *Fleet) GPUs(node int) []GPU {
	r := f.replicas[node]
	ns, pod, ctr := f.gpuCfg.attribution(r)
	return []GPU{{Node: nodeName(node), UUID: r.gpu.uuid, Namespace: ns, Pod: pod, Container: ctr}}
}

func (c GPUConfig) attribution(r *replica) (ns, pod, container string) {
	if c.NoPodLabels {
		return "", "", ""
	}
	return c.Namespace, c.Pod(r.index), c.Container
}

// WriteGPUMetrics writes node's dcgm-exporter exposition as it is now:
// every field of the default counter set that explains serving incidents,
// plus the clock-event reasons. While the GPU is off the bus only the Xid
// is exported (DCGM reads every other field blank, and dcgm-exporter skips
// blank values).
func (f *Fleet) WriteGPUMetrics(w io.Writer, node int) error {
	var b bytes.Buffer
	f.mu.Lock()
	f.renderGPU(&b, node)
	f.mu.Unlock()
	_, err := w.Write(b.Bytes())
	return err
}

// GPUHandler serves node's dcgm-exporter: GET /metrics, the exposition
// (dcgm-exporter's default port is 9400). It renders the state as of the
// last Advance.
func (f *Fleet) GPUHandler(node int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/metrics" {
			http.NotFound(w, req)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var b bytes.Buffer
		f.mu.Lock()
		f.renderGPU(&b, node)
		f.mu.Unlock()
		w.Header().Set("Content-Type", ContentType)
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		_, _ = w.Write(b.Bytes()) // the scraper hung up; nothing to do
	})
}

// dcgmFamily is one field as dcgm-exporter's counter CSV declares it.
type dcgmFamily struct {
	name, kind, help string
	float            bool // a double field: printed with %f, as dcgm-exporter does
}

// Throttle reasons field names, before and after DCGM's rename.
const (
	FieldClocksEventReasons   = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
	FieldClockThrottleReasons = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
)

func (f *Fleet) renderGPU(b *bytes.Buffer, node int) {
	c := f.gpuCfg
	r := f.replicas[node]
	g := r.gpu
	ns, pod, ctr := c.attribution(r)
	identity := fmt.Sprintf(`gpu="0",UUID="%s",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="%s",Hostname="%s",DCGM_FI_DRIVER_VERSION="%s"`,
		g.uuid, labelEscaper.Replace(c.Model), nodeName(node), labelEscaper.Replace(c.DriverVersion))
	write := func(fam dcgmFamily, v float64, extra ...string) {
		b.WriteString("# HELP " + fam.name + " " + fam.help + "\n# TYPE " + fam.name + " " + fam.kind + "\n")
		b.WriteString(fam.name + "{" + identity)
		// dcgm-exporter writes the GPU's identity first, then its other
		// labels sorted by name.
		if !c.NoPodLabels {
			extra = append(extra, "container", ctr, "namespace", ns, "pod", pod)
			if !c.XidLegacyLabels {
				extra = append(extra, "pod_uid", "")
			}
		}
		idx := make([]int, len(extra)/2)
		for i := range idx {
			idx[i] = 2 * i
		}
		sort.Slice(idx, func(a, b int) bool { return extra[idx[a]] < extra[idx[b]] })
		for _, j := range idx {
			b.WriteString("," + extra[j] + `="` + labelEscaper.Replace(extra[j+1]) + `"`)
		}
		b.WriteString("} ")
		if fam.float {
			b.WriteString(strconv.FormatFloat(v, 'f', 6, 64))
		} else {
			b.WriteString(strconv.FormatInt(int64(math.Round(v)), 10))
		}
		b.WriteByte('\n')
	}
	xid := func() {
		if c.XidSeriesOnFirstError && !g.xidSeen {
			return
		}
		fam := dcgmFamily{name: "DCGM_FI_DEV_XID_ERRORS", kind: "gauge", help: "Value of the last XID error encountered."}
		if c.XidLegacyLabels {
			write(fam, float64(g.xid))
			return
		}
		msg, ok := xidMessages[g.xid]
		if !ok {
			msg = "Unknown Error"
		}
		write(fam, float64(g.xid), "err_code", strconv.Itoa(g.xid), "err_msg", msg)
	}
	if g.offBus {
		xid()
		return
	}
	reasons := dcgmFamily{name: FieldClocksEventReasons, kind: "gauge", help: "Current clock event reasons."}
	if c.ThrottleReasonsLegacyName {
		reasons = dcgmFamily{name: FieldClockThrottleReasons, kind: "gauge", help: "Current clock throttle reasons."}
	}
	write(dcgmFamily{name: "DCGM_FI_DEV_SM_CLOCK", kind: "gauge", help: "SM clock frequency (in MHz)."}, g.smClock)
	write(dcgmFamily{name: "DCGM_FI_DEV_MEM_CLOCK", kind: "gauge", help: "Memory clock frequency (in MHz)."}, gpuMemClock)
	write(reasons, float64(g.reasons))
	write(dcgmFamily{name: "DCGM_FI_DEV_GPU_TEMP", kind: "gauge", help: "GPU temperature (in C)."}, g.temp)
	write(dcgmFamily{name: "DCGM_FI_DEV_POWER_USAGE", kind: "gauge", help: "Power draw (in W).", float: true}, g.power)
	write(dcgmFamily{name: "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", kind: "counter", help: "Total number of PCIe retries."}, g.replays)
	write(dcgmFamily{name: "DCGM_FI_DEV_GPU_UTIL", kind: "gauge", help: "GPU utilization (in %)."}, 100*g.util)
	xid()
	write(dcgmFamily{name: "DCGM_FI_DEV_FB_FREE", kind: "gauge", help: "Framebuffer memory free (in MiB)."}, gpuFBTotal-g.fbUsed)
	write(dcgmFamily{name: "DCGM_FI_DEV_FB_USED", kind: "gauge", help: "Framebuffer memory used (in MiB)."}, g.fbUsed)
	write(dcgmFamily{name: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", kind: "counter", help: "Number of remapped rows for uncorrectable errors"}, 0)
	write(dcgmFamily{name: "DCGM_FI_DEV_ROW_REMAP_FAILURE", kind: "gauge", help: "Whether remapping of rows has failed"}, 0)
}
