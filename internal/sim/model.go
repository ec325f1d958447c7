// Package sim is a small discrete-time model of a fleet of SGLang replicas
// that serves real-looking /metrics, so the watchdog can be seen detecting
// incidents with no GPU.
//
// Nothing here scripts metric values. Each replica is a queueing model of one
// SGLang server (HTTP/tokenizer layer, scheduler with a waiting queue and a
// running batch, a KV pool with a radix prefix cache, prefill and decode
// iterations that cost GPU time, retraction when the pool runs dry, client
// timeouts, client retries, crashes and restarts). A Scenario only changes
// parameters over time -- "long prompts surge", "the system prompt now carries
// a timestamp", "clients retry with short timeouts", "the process dies" --
// and the incidents emerge from the model.
//
// Time is simulated: Advance(now) steps every replica in fixed 100 ms
// sub-steps up to now, so the state depends only on the seed and the times
// passed in, never on how often Advance is called or on the wall clock.
package sim

import (
	"math"
	"math/rand/v2"
	"slices"
)

const (
	clipMaxNewTokens    = 4096 // CLIP_MAX_NEW_TOKENS in SGLang's schedule policy
	initNewTokenRatio   = 0.7  // SGLANG_INIT_NEW_TOKEN_RATIO
	minNewTokenRatio    = 0.7 * 0.14
	newTokenRatioDecay  = (initNewTokenRatio - minNewTokenRatio) / 600
	retractDecodeSteps  = 20   // used by SGLang to re-estimate new_token_ratio after a retraction
	idleReportInterval  = 30.0 // seconds; the scheduler refreshes gauges this often when idle
	abortDetectMaxDelay = 4.0  // the tokenizer polls is_disconnected every 4 s while waiting
)

type reqState uint8

const (
	stWaiting reqState = iota
	stRunning
	stDone
)

// request is one HTTP attempt. A client retry is a new request with the same
// content (same contentID, prompt and output length).
type request struct {
	contentID uint64
	attempt   int
	streaming bool
	prefixKey uint64 // shared system prompt, 0 when the prompt is unique
	prefixLen int
	promptLen int // whole prompt, system part included
	outputLen int // tokens the model generates before EOS (≤ maxNew)
	maxNew    int

	arrived      float64 // HTTP arrival of this attempt
	deadline     float64 // the client disconnects at this time
	disconnected bool
	noticeAt     float64 // the server notices the disconnect and aborts

	state     reqState
	queued    float64 // entered the waiting queue (again, after a retraction)
	admitted  bool    // first prefill done
	retracted bool    // waiting for a recompute after a retraction
	firstTok  float64
	lastTok   float64
	generated int
	cached    int    // prompt tokens served from the cache at the first prefill
	private   int    // KV tokens held by this request alone
	prefix    *entry // locked shared-prefix node

	batchCompute, batchHit int // split of the current prefill
}

// engine is one SGLang process: everything in it is lost on a crash.
type engine struct {
	cfg   ServerConfig
	pid   int
	clock float64 // GPU time: the end of the last iteration
	ready float64 // server_status leaves Starting at this time
	boot  float64 // simulated startup duration, for sglang:startup_time_seconds
	// slowdown multiplies the GPU cost of every iteration (a throttled
	// GPU); 0 or 1: the cost model as configured.
	slowdown float64
	busy     float64 // GPU-seconds spent in iterations, for utilization

	waiting  []*request
	running  []*request
	inflight []*request // every request the HTTP layer holds (for timeouts)
	cache    *radixCache
	private  int // Σ request.private over running requests

	newTokenRatio    float64
	decodeSteps      int
	decodeTokens     int // since the last decode log
	lastDecodeLog    float64
	lastReport       float64
	lastRetractEvent int
	g                gauges // scheduler gauges as of the last report

	c counters
	h histograms

	http []endpointStats
}

// gauges are the scheduler gauges. SGLang writes them only after a prefill
// batch, every DecodeLogInterval decode steps and every 30 s while idle, so
// between reports they are stale -- and so are ours.
type gauges struct {
	running, queue                        int
	used, available, evictable, sumSeqLen int
	tokenUsage, genThroughput, hitRate    float64
	newTokenRatio                         float64
	retracted                             int
}

type counters struct {
	retractedReqs, retractedIn, retractedOut   float64
	rtPrefillCompute, rtPrefillCache, rtDecode float64
	effInput, effDeviceHit                     float64
	evicted                                    float64
	prompt, generation, requests               [2]float64 // by is_streaming false/true
	cached, aborted, cpu                       float64
}

type histograms struct {
	queueTime, itl             *histogram
	promptLen, genLen, uncache *histogram
	ttft, e2e                  [2]*histogram
}

type endpointStats struct {
	endpoint, method string
	requests, active float64
	responses        [3]float64 // by statusCodes
}

var statusCodes = [3]string{"200", "400", "503"}

const (
	epChat = iota
	epMetrics
	epHealth
	epHealthGenerate
)

func newEngine(cfg ServerConfig, now float64, pid int, boot float64) *engine {
	e := &engine{
		cfg:           cfg,
		pid:           pid,
		clock:         now,
		ready:         now + cfg.Startup.Seconds(),
		boot:          boot,
		cache:         newRadixCache(),
		newTokenRatio: initNewTokenRatio,
		lastDecodeLog: now,
		lastReport:    now,
		http: []endpointStats{
			{endpoint: "/v1/chat/completions", method: "POST"},
			{endpoint: "/metrics", method: "GET"},
			{endpoint: "/health", method: "GET"},
			{endpoint: "/health_generate", method: "GET"},
		},
		h: histograms{
			queueTime: newHistogram(queueTimeBuckets),
			itl:       newHistogram(interTokenBuckets),
			promptLen: newHistogram(tokenBuckets),
			genLen:    newHistogram(tokenBuckets),
			uncache:   newHistogram(tokenBuckets),
			ttft:      [2]*histogram{newHistogram(ttftBuckets), newHistogram(ttftBuckets)},
			e2e:       [2]*histogram{newHistogram(e2eBuckets), newHistogram(e2eBuckets)},
		},
	}
	e.g.newTokenRatio = initNewTokenRatio
	e.g.available = cfg.MaxTotalTokens
	return e
}

// KV pool accounting. used = tokens of running requests + locked cache
// nodes; evictable = unlocked cache nodes; available = the rest. This is
// SGLang's split: token_usage counts only used, never evictable.
func (e *engine) used() int      { return e.private + e.cache.locked }
func (e *engine) available() int { return e.cfg.MaxTotalTokens - e.used() - e.cache.evictable }

// alloc makes n free slots, evicting unlocked cache nodes (LRU) if needed.
func (e *engine) alloc(n int) bool {
	if short := n - e.available(); short > 0 {
		freed := e.cache.evict(short)
		e.c.evicted += float64(freed)
	}
	return e.available() >= n
}

// gpuTime is cost seconds of the cost model on this engine's GPU as it is
// now: longer on a slowed-down GPU.
func (e *engine) gpuTime(cost float64) float64 {
	if e.slowdown > 1 {
		return cost * e.slowdown
	}
	return cost
}

func (e *engine) reserve(r *request) float64 {
	return float64(min(max(r.maxNew-r.generated, 0), clipMaxNewTokens)) * e.newTokenRatio
}

// abort handles a client disconnect the server has noticed: the request
// leaves the queue or the batch (its KV is cached, as on finish) and is
// counted as aborted -- not as a finished request. The middleware records
// the response the handler produced: a streaming response already sent its
// 200 headers, a non-streaming one ends in a 400 "Request is disconnected".
func (e *engine) abort(r *request) {
	switch r.state {
	case stWaiting:
		e.waiting = slices.DeleteFunc(e.waiting, func(x *request) bool { return x == r })
	case stRunning:
		e.running = slices.DeleteFunc(e.running, func(x *request) bool { return x == r })
		e.release(r, true)
	default:
		return
	}
	r.state = stDone
	e.c.aborted++
	if r.streaming {
		e.respond(epChat, 0)
	} else {
		e.respond(epChat, 1)
	}
}

func (e *engine) respond(ep, status int) {
	e.http[ep].responses[status]++
	e.http[ep].active--
}

// expireClients disconnects the requests whose client gave up by t and
// aborts those the server has noticed by t. It returns the disconnected
// requests so the client side can schedule retries.
func (e *engine) expireClients(t float64, rng *rand.Rand) (gone []*request) {
	kept := e.inflight[:0]
	for _, r := range e.inflight {
		if r.state == stDone {
			continue
		}
		if !r.disconnected && r.deadline <= t {
			r.disconnected = true
			gone = append(gone, r)
			// A streaming request that is already producing tokens fails its
			// next write at once; otherwise the tokenizer notices on its
			// 4-second poll. Until then the server keeps working for nobody.
			delay := rng.Float64() * abortDetectMaxDelay
			if r.streaming && r.firstTok > 0 {
				delay = 0
			}
			r.noticeAt = r.deadline + delay
		}
		if r.disconnected && r.noticeAt <= t {
			e.abort(r)
			continue
		}
		kept = append(kept, r)
	}
	clear(e.inflight[len(kept):])
	e.inflight = kept
	return gone
}

// accept hands a new HTTP request to the tokenizer and the scheduler.
func (e *engine) accept(r *request) {
	e.http[epChat].requests++
	e.http[epChat].active++
	if e.cfg.MaxQueuedRequests > 0 && len(e.waiting) >= e.cfg.MaxQueuedRequests {
		r.state = stDone
		if r.streaming {
			e.respond(epChat, 0)
		} else {
			e.respond(epChat, 2)
		}
		return
	}
	r.state, r.queued = stWaiting, r.arrived
	e.waiting = append(e.waiting, r)
	e.inflight = append(e.inflight, r)
	// Tokenizer CPU: a little per request (tokenize) on top of the idle loop.
	e.c.cpu += 0.002 + 4e-7*float64(r.promptLen)
}

// Sampling helpers. Lengths are log-normal: right-skewed like real prompt
// and completion lengths, with the requested mean.
func lognormal(rng *rand.Rand, mean, sigma float64) float64 {
	return mean * math.Exp(sigma*rng.NormFloat64()-sigma*sigma/2)
}

func poisson(rng *rand.Rand, lambda float64) int {
	if lambda <= 0 {
		return 0
	}
	if lambda > 30 {
		return max(0, int(math.Round(lambda+math.Sqrt(lambda)*rng.NormFloat64())))
	}
	limit, p, k := math.Exp(-lambda), 1.0, 0
	for {
		p *= rng.Float64()
		if p <= limit {
			return k
		}
		k++
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
