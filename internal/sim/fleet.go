package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// Step is the fixed sub-step of the simulation. 100 ms is several decode
// iterations: fine enough for 1 s scrapes, coarse enough to be cheap.
const Step = 100 * time.Millisecond

const dt = 0.1 // Step in seconds

// ErrReplicaDown is returned by WriteMetrics while the replica's process is
// dead.
var ErrReplicaDown = errors.New("sim: replica process is down")

// FleetConfig configures NewFleet. The zero value is a usable 3-replica
// fleet under HealthyScenario.
type FleetConfig struct {
	Replicas int    // number of replicas, named sim-0, sim-1, ...; default 3
	Model    string // served model name; default "Qwen/Qwen3-8B"
	Seed     uint64
	// Start is scenario time zero. If zero, the first Advance sets it.
	Start    time.Time
	Scenario Scenario     // default HealthyScenario()
	Server   ServerConfig // default DefaultServerConfig()
	// Release is the SGLang release whose /metrics every replica speaks;
	// the zero value is the current one.
	Release Release
	// Warmup is simulated (inside NewFleet, instantly) under the first
	// phase before Start, so the fleet starts with warm caches, a full batch
	// and non-zero counters, as a server that has been up for a while.
	Warmup time.Duration
	// GPU describes the GPUs under the replicas and their dcgm-exporter.
	GPU GPUConfig
}

// Fleet is a set of simulated SGLang replicas driven by one Scenario. All
// methods are safe for concurrent use.
type Fleet struct {
	mu       sync.Mutex
	scenario Scenario
	start    time.Time
	started  bool
	k        int64 // index of the next sub-step; sim time of its start = k*dt
	phase    int   // index of the phase currently applied
	replicas []*replica
	// gateway is the model gateway in front of the replicas (gateway.go).
	gateway *gateway
	// expositions answers /metrics requests (Handler).
	expositions ExpositionWriter
	gpuCfg      GPUConfig
}

// NewFleet builds the fleet and simulates its warm-up. It starts nothing.
func NewFleet(cfg FleetConfig) *Fleet {
	if cfg.Replicas <= 0 {
		cfg.Replicas = 3
	}
	if cfg.Model == "" {
		cfg.Model = "Qwen/Qwen3-8B"
	}
	if len(cfg.Scenario.Phases) == 0 {
		cfg.Scenario = HealthyScenario()
	}
	if cfg.Scenario.Base == (Load{}) {
		cfg.Scenario.Base = DefaultLoad()
	}
	if cfg.Server == (ServerConfig{}) {
		cfg.Server = DefaultServerConfig()
	}
	if cfg.GPU.Model == "" {
		cfg.GPU.Model = "NVIDIA H100 80GB HBM3"
	}
	if cfg.GPU.DriverVersion == "" {
		cfg.GPU.DriverVersion = "580.95.05"
	}
	if cfg.GPU.Namespace == "" {
		cfg.GPU.Namespace = "llm"
	}
	if cfg.GPU.Container == "" {
		cfg.GPU.Container = "sglang"
	}
	if cfg.GPU.Pod == nil {
		cfg.GPU.Pod = func(i int) string { return fmt.Sprintf("sim-%d", i) }
	}
	f := &Fleet{scenario: cfg.Scenario, start: cfg.Start, started: !cfg.Start.IsZero(), phase: -1, gpuCfg: cfg.GPU}
	warm := int64(cfg.Warmup / Step)
	f.k = -warm
	for i := range cfg.Replicas {
		r := &replica{
			name:    fmt.Sprintf("sim-%d", i),
			model:   cfg.Model,
			index:   i,
			cfg:     cfg.Server,
			release: cfg.Release,
			// One PCG stream per replica: replicas are independent and each
			// is reproducible from the seed alone.
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)),
			gpu: newGPU(cfg.Seed, i),
		}
		r.engine = newEngine(r.cfg, float64(f.k)*dt, r.pid(), 58.6)
		r.engine.ready = float64(f.k) * dt // it has been up for a while
		f.replicas = append(f.replicas, r)
	}
	f.gateway = newGateway(len(f.replicas))
	for f.k < 0 {
		f.step()
	}
	return f
}

// Replicas returns the replica names, in index order.
func (f *Fleet) Replicas() []string {
	names := make([]string, len(f.replicas))
	for i, r := range f.replicas {
		names[i] = r.name
	}
	return names
}

// Advance simulates every replica up to now, in fixed sub-steps, so the
// outcome depends only on the seed and now, not on how often it is called.
// A now earlier than the last one is ignored.
func (f *Fleet) Advance(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started {
		f.start, f.started = now, true
	}
	target := int64(now.Sub(f.start) / Step)
	for f.k < target {
		f.step()
	}
}

// Phase names the scenario phase in force at now.
func (f *Fleet) Phase(now time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var off time.Duration
	if f.started {
		off = now.Sub(f.start)
	}
	p, _ := f.scenario.PhaseAt(off)
	return p.Name
}

// Up reports whether replica i's process is alive (it may still be starting).
func (f *Fleet) Up(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replicas[i].engine != nil
}

// WriteMetrics writes replica i's /metrics exposition as it is now, or
// returns ErrReplicaDown while its process is dead.
func (f *Fleet) WriteMetrics(w io.Writer, i int) error {
	var b bytes.Buffer
	f.mu.Lock()
	r := f.replicas[i]
	if r.engine == nil {
		f.mu.Unlock()
		return ErrReplicaDown
	}
	r.render(&b)
	f.mu.Unlock()
	_, err := w.Write(b.Bytes())
	return err
}

// step simulates sub-step k for every replica, entering a new phase first
// when the scenario says so.
func (f *Fleet) step() {
	t0 := float64(f.k) * dt
	_, idx := f.scenario.PhaseAt(time.Duration(f.k) * Step)
	if idx != f.phase {
		f.enter(idx, t0)
	}
	for _, r := range f.replicas {
		busy := r.step(t0, t0+dt)
		r.gpu.step(r.engine, busy)
	}
	f.gateway.step(f.replicas, t0, t0+dt)
	f.k++
}

func (f *Fleet) enter(idx int, t float64) {
	f.phase = idx
	p := f.scenario.Phases[idx]
	for _, r := range f.replicas {
		r.load = f.scenario.Base
		r.nextDocs = t // a batch job starts with a wave
		r.gpuSlowdown = 1
		r.gpu.imposed, r.gpu.offBus, r.gpu.replayRate = 0, false, 0
		if !p.affects(r.index) {
			continue
		}
		r.gpu.imposed, r.gpu.replayRate = p.GPUThrottle, p.GPUPCIeReplays
		r.gpuSlowdown = throttleSlowdown(p.GPUThrottle)
		if p.GPUSlowdown > 1 {
			r.gpuSlowdown = p.GPUSlowdown
		}
		if p.Change != nil {
			p.Change(&r.load)
		}
		if p.Crash > 0 {
			r.crash(t, p.Crash.Seconds())
		}
		if p.GPUXid != 0 {
			r.gpu.recordXid(p.GPUXid)
		}
		if r.gpu.offBus {
			// Every process on the GPU dies with it; the replica comes
			// back when the GPU does, at the end of the phase.
			down := math.Inf(1)
			if idx < len(f.scenario.Phases)-1 {
				down = p.Duration.Seconds()
			}
			r.crash(t, down)
		}
	}
}

// replica is one simulated server and the clients that talk to it.
type replica struct {
	name, model string
	index       int
	cfg         ServerConfig
	release     Release // whose exposition it renders
	rng         *rand.Rand
	load        Load
	engine      *engine // nil while the process is dead
	crashedAt   float64
	downUntil   float64
	restarts    int
	nextContent uint64
	retries     []pendingRetry // client-side: attempts waiting out their backoff
	nextDocs    float64        // when the batch job submits its next wave
	gpu         *gpu           // the GPU it runs on; it outlives the process
	// gpuSlowdown is how many times longer each GPU iteration takes than
	// the cost model says (1: full speed). It belongs to the hardware, so
	// a restarted process keeps it.
	gpuSlowdown float64
}

type pendingRetry struct {
	at  float64
	req *request
}

func (r *replica) pid() int { return 11593 + 1000*r.index + 211*r.restarts }

// step simulates [t0, t1): client timeouts and retries, new arrivals, then
// the scheduler loop. It returns the GPU-seconds of the iterations run.
func (r *replica) step(t0, t1 float64) float64 {
	if r.engine == nil {
		if t0 < r.downUntil {
			return 0
		}
		r.restart(t0)
	}
	e := r.engine
	for _, q := range e.expireClients(t0, r.rng) {
		if q.attempt < r.load.MaxRetries {
			backoff := r.load.RetryBackoff.Seconds() * (0.5 + r.rng.Float64())
			r.retries = append(r.retries, pendingRetry{at: q.deadline + backoff, req: q.retry()})
		}
	}
	if t0 >= e.ready {
		// While Starting the router keeps traffic away; so do we.
		r.arrive(t0, t1)
	}
	e.c.cpu += 0.02 * dt // the tokenizer's event loop, idle or not
	e.slowdown = r.gpuSlowdown
	busy := e.busy
	e.run(t1)
	return e.busy - busy
}

// arrive admits this sub-step's new requests and due retries through the
// HTTP layer, in arrival order.
func (r *replica) arrive(t0, t1 float64) {
	var in []*request
	for range poisson(r.rng, r.load.Rate*dt) {
		in = append(in, r.newRequest(t0+r.rng.Float64()*dt, false))
	}
	if r.load.DocBatch > 0 && t0 >= r.nextDocs {
		r.nextDocs = math.Inf(1)
		if r.load.DocEvery > 0 {
			r.nextDocs = t0 + r.load.DocEvery.Seconds()
		}
		for range r.load.DocBatch {
			in = append(in, r.newRequest(t0+r.rng.Float64()*dt, true))
		}
	}
	kept := r.retries[:0]
	for _, p := range r.retries {
		if p.at < t1 {
			p.req.arrived = max(p.at, t0)
			in = append(in, p.req)
		} else {
			kept = append(kept, p)
		}
	}
	clear(r.retries[len(kept):])
	r.retries = kept
	sort.SliceStable(in, func(i, j int) bool { return in[i].arrived < in[j].arrived })
	timeout := math.Inf(1)
	if r.load.ClientTimeout > 0 {
		timeout = r.load.ClientTimeout.Seconds()
	}
	for _, q := range in {
		if q.deadline == 0 {
			q.deadline = q.arrived + timeout
		}
		r.engine.accept(q)
	}
}

func (r *replica) newRequest(t float64, doc bool) *request {
	l, rng := r.load, r.rng
	r.nextContent++
	q := &request{contentID: r.nextContent, arrived: t, maxNew: max(l.MaxNewTokens, 1)}
	user := lognormal(rng, float64(l.UserPromptTokens), 0.5)
	outMean, outSpread := float64(l.OutputTokens), l.OutputSpread
	if doc {
		user = lognormal(rng, float64(l.DocPromptTokens), 0.35)
		outMean, outSpread = float64(l.DocOutputTokens), 0.15
		q.maxNew = max(q.maxNew, 2*l.DocOutputTokens) // the job asks for room to answer
		q.deadline = math.Inf(1)                      // and waits as long as it takes
	}
	q.prefixLen = l.SystemPromptTokens
	if q.prefixLen > 0 && !l.TimestampedSystemPrompt {
		q.prefixKey = 1<<63 | uint64(rng.IntN(max(l.SystemPrompts, 1)))
	}
	// SGLang rejects prompts that cannot fit the context with max_tokens.
	limit := min(r.cfg.ContextLen, r.cfg.MaxTotalTokens/2) - q.maxNew
	q.promptLen = min(q.prefixLen+max(1, int(user)), limit)
	q.outputLen = min(max(1, int(lognormal(rng, outMean, outSpread))), q.maxNew)
	q.streaming = rng.Float64() < l.StreamingFraction
	return q
}

// retry is the client re-sending the same body: same content, a new request.
func (q *request) retry() *request {
	return &request{
		contentID: q.contentID, attempt: q.attempt + 1, streaming: q.streaming,
		prefixKey: q.prefixKey, prefixLen: q.prefixLen, promptLen: q.promptLen,
		outputLen: q.outputLen, maxNew: q.maxNew,
	}
}

// crash kills the process: every request, the KV pool, the cache and all
// counters are gone; clients of in-flight requests see a connection reset
// (they, and their pending retries, go elsewhere -- not modelled).
func (r *replica) crash(t, down float64) {
	r.engine = nil
	r.crashedAt, r.downUntil = t, t+down
	r.retries = nil
}

// restart brings up a new process: new pid, counters from zero, cold cache,
// Starting for cfg.Startup. Its startup_time_seconds are the time it really
// took: the whole outage plus the Starting period.
func (r *replica) restart(t float64) {
	r.restarts++
	r.engine = newEngine(r.cfg, t, r.pid(), t-r.crashedAt+r.cfg.Startup.Seconds())
}
