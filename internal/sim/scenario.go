package sim

import (
	"fmt"
	"time"
)

// Incident classes a phase can provoke. The names are the watchdog's
// detector classes.
const (
	ClassPreemptStorm   = "preempt_storm"
	ClassCacheCollapse  = "cache_collapse"
	ClassRetryAvalanche = "retry_avalanche"
	ClassCrash          = "crash"
	ClassDecodeSlowdown = "decode_slowdown"
	// ClassGPUThermal is a GPU's cooling fault (a HW thermal throttle).
	ClassGPUThermal = "gpu_thermal"
)

// Phase is a stretch of a Scenario: for Duration, the replicas listed (all
// when nil) run the scenario's base load with Change applied; the others
// run the base load. Phases do not accumulate: a phase without Change is a
// recovery.
type Phase struct {
	Name     string
	Class    string        // incident class this phase provokes; "" when healthy
	Duration time.Duration // ignored for the last phase, which lasts forever
	Replicas []int
	Change   func(*Load)
	// Crash > 0 kills the listed replicas' processes when the phase starts;
	// they stay unreachable this long, then restart from zero.
	Crash time.Duration
	// GPUSlowdown > 1 makes the listed replicas' GPUs that many times
	// slower for the phase (thermal or power throttling, a noisy
	// neighbour): every prefill and decode iteration costs that much more
	// GPU time. 0 or 1: full speed. The load is unchanged; what the slower
	// GPU does to it (a longer batch, clients timing out) emerges.
	GPUSlowdown float64
	// GPUThrottle is a mask of NVML clock-event reasons (Throttle*) the
	// listed replicas' GPUs report for the phase, on top of what their load
	// causes (SW power cap under a full batch, idle). A reason that holds
	// the clocks down also slows the GPU unless GPUSlowdown says otherwise:
	// HW slowdown or HW thermal 2x (SM clock at 40%), HW power brake 3x
	// (25%), SW thermal 1.3x (75%).
	// The clocks, power and temperature follow. A HW thermal slowdown sets
	// both ThrottleHWSlowdown and ThrottleHWThermal, as NVML reports it.
	GPUThrottle uint64
	// GPUXid, when not 0, is an Xid the listed replicas' GPUs record when
	// the phase starts; DCGM_FI_DEV_XID_ERRORS reports the last one for
	// good. XidFallenOffTheBus (79) also takes the GPU off the bus and
	// kills its replica's process for the phase; both come back when it
	// ends (the GPU reset).
	GPUXid int
	// GPUPCIeReplays is the rate (per second) at which the listed
	// replicas' GPUs retry PCIe transfers during the phase, counted in
	// DCGM_FI_DEV_PCIE_REPLAY_COUNTER: a failing link, Xid 79's precursor.
	GPUPCIeReplays float64
}

func (p Phase) affects(i int) bool {
	if p.Replicas == nil {
		return true
	}
	for _, r := range p.Replicas {
		if r == i {
			return true
		}
	}
	return false
}

// Scenario is a timeline of phases over a base load.
type Scenario struct {
	Name   string
	Base   Load // zero: DefaultLoad()
	Phases []Phase
}

// PhaseAt returns the phase in force at offset from the scenario start and
// its index. Offsets before the start (warm-up) are in the first phase; the
// last phase never ends.
func (s Scenario) PhaseAt(offset time.Duration) (Phase, int) {
	var end time.Duration
	for i, p := range s.Phases {
		end += p.Duration
		if offset < end || i == len(s.Phases)-1 {
			return p, i
		}
	}
	return Phase{}, -1
}

// Start returns the offset at which the first phase called name begins.
func (s Scenario) Start(name string) (time.Duration, bool) {
	var at time.Duration
	for _, p := range s.Phases {
		if p.Name == name {
			return at, true
		}
		at += p.Duration
	}
	return 0, false
}

// Incident changes, each a plausible production cause rather than a metric.

// longPromptSurge: a batch job starts summarising documents: it submits
// 64 requests at once, each ~2.5k prompt tokens -- seven times
// a chat prompt -- asking for ~1.5k-token answers. The wave is admitted as
// one cohort while new_token_ratio is low (SGLang overcommits the pool on
// purpose, betting on early EOS), its members grow in lockstep and none
// finishes for a minute, so the pool runs dry: the scheduler retracts
// request after request, each to be recomputed later, chats pile up behind
// the wave, and inter-token latency rises with the KV the batch reads.
func longPromptSurge(l *Load) {
	l.DocBatch = 64
}

// timestampedSystemPrompt: a deploy renders "Current time: ...ms" at the top
// of the system prompt. Every prompt is now unique from its first token.
func timestampedSystemPrompt(l *Load) { l.TimestampedSystemPrompt = true }

// aggressiveRetries: clients time out after 8 s (below the longest healthy
// responses) and re-send almost at once, up to 4 times.
func aggressiveRetries(l *Load) {
	l.ClientTimeout = 8 * time.Second
	l.MaxRetries = 4
	l.RetryBackoff = 200 * time.Millisecond
}

// latencyBlip: a short burst of traffic (a cron job) pushes latencies past
// the aggressive clients' timeout, which starts the retry feedback loop.
func latencyBlip(l *Load) {
	aggressiveRetries(l)
	l.Rate *= 1.5
}

// HealthyScenario is steady heavy-but-healthy load on every replica forever:
// the batch near --max-running-requests, a short stable queue, ~75% of
// prompt tokens from the cache, no retractions, no timeouts.
func HealthyScenario() Scenario {
	return Scenario{Name: "healthy", Base: DefaultLoad(), Phases: []Phase{{Name: "healthy"}}}
}

// DemoScenario walks a 3-replica fleet through the three core incident
// classes, a crash and a GPU cooling fault in about seven minutes at scale
// 1 (durations are multiplied by scale). Each incident hits one replica so the others stay a
// healthy reference:
//
//	healthy          0:00  45s  all
//	preempt_storm    0:45  60s  sim-0  a batch job submits a wave of long documents
//	recovery         1:45  30s
//	cache_collapse   2:15  45s  sim-1  system prompt gets a timestamp
//	recovery         3:00  30s
//	latency_blip     3:30   5s  sim-2  burst + clients with 8 s timeout, 4 fast retries
//	retry_avalanche  3:35  45s  sim-2  same clients, normal traffic
//	recovery         4:20  30s
//	crash            4:50  30s  sim-0  process dies, unreachable 25 s, restarts from zero
//	recovery         5:20  30s
//	gpu_thermal      5:50  60s  sim-1  its GPU's cooling fails: HW thermal throttle, 2x slower
//	healthy          6:50  ...
//
// The base load is a little lighter than HealthyScenario's (ρ≈0.75 instead
// of ≈0.9) and clients give up after 30 s, so a replica drains the backlog
// an incident leaves within a recovery phase.
func DemoScenario(scale float64) Scenario {
	d := seconds(scale)
	return Scenario{
		Name: "demo",
		Base: demoLoad(),
		Phases: []Phase{
			{Name: "healthy", Duration: d(45)},
			{Name: ClassPreemptStorm, Class: ClassPreemptStorm, Duration: d(60), Replicas: []int{0}, Change: longPromptSurge},
			{Name: "recovery", Duration: d(30)},
			{Name: ClassCacheCollapse, Class: ClassCacheCollapse, Duration: d(45), Replicas: []int{1}, Change: timestampedSystemPrompt},
			{Name: "recovery", Duration: d(30)},
			{Name: "latency_blip", Class: ClassRetryAvalanche, Duration: d(5), Replicas: []int{2}, Change: latencyBlip},
			{Name: ClassRetryAvalanche, Class: ClassRetryAvalanche, Duration: d(45), Replicas: []int{2}, Change: aggressiveRetries},
			{Name: "recovery", Duration: d(30)},
			{Name: ClassCrash, Class: ClassCrash, Duration: d(30), Replicas: []int{0}, Crash: d(25)},
			{Name: "recovery", Duration: d(30)},
			{Name: ClassGPUThermal, Class: ClassGPUThermal, Duration: d(60), Replicas: []int{1}, GPUThrottle: throttleHWThermalFault},
			{Name: "healthy"},
		},
	}
}

// seconds converts a scenario's seconds into durations scaled by scale.
func seconds(scale float64) func(s float64) time.Duration {
	return func(s float64) time.Duration { return time.Duration(s * scale * float64(time.Second)) }
}

func demoLoad() Load {
	l := DefaultLoad()
	l.Rate = 7.5
	l.ClientTimeout = 30 * time.Second
	return l
}

// GPUSlowdownScenario is a GPU slowdown that starts a client retry loop
// which outlives it, on sim-0 of the fleet (durations are multiplied by
// scale). The clients time out after 25 s, above every healthy response,
// and re-send at once up to 4 times: harmless while the replica is
// healthy, positive feedback once responses pass the timeout.
//
//	healthy        0:00  3m    all    the demo's load, clients as above
//	gpu_slowdown   3:00  1m    sim-0  its GPU runs 4x slower (throttling)
//	retry_loop     4:00  1m30  sim-0  the GPU is back at full speed; the
//	                                  retries keep the queue full
//	retries_off    5:30  ...   all    the clients stop retrying (what
//	                                  on-call does first); the queue drains
func GPUSlowdownScenario(scale float64) Scenario {
	d := seconds(scale)
	base := demoLoad()
	base.ClientTimeout = 25 * time.Second
	base.MaxRetries = 4
	base.RetryBackoff = 200 * time.Millisecond
	return Scenario{
		Name: "gpu_slowdown",
		Base: base,
		Phases: []Phase{
			{Name: "healthy", Duration: d(180)},
			{Name: "gpu_slowdown", Class: ClassDecodeSlowdown, Duration: d(60), Replicas: []int{0}, GPUSlowdown: 4},
			{Name: "retry_loop", Class: ClassRetryAvalanche, Duration: d(90), Replicas: []int{0}},
			{Name: "retries_off", Change: func(l *Load) { l.MaxRetries = 0 }},
		},
	}
}

// IncidentBaseline is how long IncidentScenario runs healthy before the
// incident starts: enough for a 1-3 minute detector baseline.
const IncidentBaseline = 3 * time.Minute

// IncidentScenario runs IncidentBaseline of healthy load, then puts
// replica 0 (sim-0) into the given incident class for good; the other
// replicas stay healthy. It is for one-shot checks such as a `diagnose`
// test: build a fleet, Advance it to IncidentBaseline + 45 s with synthetic
// times, and scrape. For ClassCrash sim-0 is unreachable from
// IncidentBaseline for 90 s and then restarts with counters from zero.
func IncidentScenario(class string) (Scenario, error) {
	incident := Phase{Name: class, Class: class, Replicas: []int{0}}
	switch class {
	case ClassPreemptStorm:
		incident.Change = longPromptSurge
	case ClassCacheCollapse:
		incident.Change = timestampedSystemPrompt
	case ClassRetryAvalanche:
		// The blip then the sustained loop, as in the demo.
		blip := Phase{Name: "latency_blip", Class: class, Duration: 5 * time.Second, Replicas: []int{0}, Change: latencyBlip}
		incident.Change = aggressiveRetries
		return Scenario{Name: class, Base: DefaultLoad(), Phases: []Phase{
			{Name: "healthy", Duration: IncidentBaseline}, blip, incident}}, nil
	case ClassCrash:
		incident.Crash = 90 * time.Second // long enough to be seen by a one-shot check
	default:
		return Scenario{}, fmt.Errorf("sim: unknown incident class %q (want %s, %s, %s or %s)",
			class, ClassPreemptStorm, ClassCacheCollapse, ClassRetryAvalanche, ClassCrash)
	}
	return Scenario{Name: class, Base: DefaultLoad(), Phases: []Phase{
		{Name: "healthy", Duration: IncidentBaseline}, incident}}, nil
}

// GPUThermalPhases are a HW thermal throttle on replica for d (its GPU
// reports HW slowdown and HW thermal slowdown, runs 2x slower, hot at
// 90-94 °C with its SM clock near 790 MHz) followed by recovery, a healthy
// phase of length recovery: the pieces a scenario (the demo's, say)
// splices in before its last phase to add a thermal-throttle incident.
func GPUThermalPhases(replica int, d, recovery time.Duration) []Phase {
	return []Phase{
		{Name: ClassGPUThermal, Class: ClassGPUThermal, Duration: d, Replicas: []int{replica}, GPUThrottle: throttleHWThermalFault},
		{Name: "recovery", Duration: recovery},
	}
}

// GPUThermalScenario is a cooling fault on sim-0's GPU under the demo's
// load (durations are multiplied by scale):
//
//	healthy       0:00  3m   all    SW power cap at times under a full batch
//	gpu_thermal   3:00  3m   sim-0  HW thermal slowdown (reasons 0x48):
//	                                each iteration 2x slower, the queue grows
//	recovery      6:00  ...  all    the GPU is cooled; the backlog drains
func GPUThermalScenario(scale float64) Scenario {
	d := seconds(scale)
	thermal := GPUThermalPhases(0, d(180), 0)
	return Scenario{
		Name:   "gpu_thermal",
		Base:   demoLoad(),
		Phases: []Phase{{Name: "healthy", Duration: d(180)}, thermal[0], thermal[1]},
	}
}

// GPUFallenOffBusScenario is Xid 79 on sim-0's GPU under the demo's load
// (durations are multiplied by scale):
//
//	healthy        0:00  3m   all
//	pcie_replays   3:00  1m   sim-0  the PCIe link retries ~5 transfers/s
//	gpu_off_bus    4:00  2m   sim-0  Xid 79: the GPU falls off the bus and
//	                                 the replica's process dies with it;
//	                                 dcgm-exporter exports only the Xid
//	recovery       6:00  ...  all    the GPU is reset, the replica restarts
//	                                 with counters from zero; the last Xid
//	                                 stays 79 (it is the last code seen)
func GPUFallenOffBusScenario(scale float64) Scenario {
	d := seconds(scale)
	return Scenario{
		Name: "gpu_off_bus",
		Base: demoLoad(),
		Phases: []Phase{
			{Name: "healthy", Duration: d(180)},
			{Name: "pcie_replays", Duration: d(60), Replicas: []int{0}, GPUPCIeReplays: 5},
			{Name: "gpu_off_bus", Class: ClassCrash, Duration: d(120), Replicas: []int{0}, GPUXid: XidFallenOffTheBus},
			{Name: "recovery"},
		},
	}
}
