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
	"sort"
	"time"
)

// ServerConfig is the launch configuration of one simulated SGLang server.
// The defaults describe Qwen3-8B (bf16, TP=1) on one 48 GB L40S-class GPU:
// ~29 GB left for KV at 144 KiB per token gives a 200k-token pool. (The
// reference capture's 80 GB H100 has 438k; a smaller card lets a realistic
// burst of long requests exhaust the pool within a demo phase.)
type ServerConfig struct {
	MaxRunningRequests int // --max-running-requests
	// MaxQueuedRequests is --max-queued-requests (0: unbounded): a request
	// arriving at a full waiting queue is rejected at once ("The request
	// queue is full."), a 503 for a JSON request and, for a stream, an
	// error event on an HTTP 200. A rejection is neither a finished nor an
	// aborted request: SGLang counts only client/API aborts as aborted.
	// Its client does not retry it.
	MaxQueuedRequests  int
	MaxTotalTokens     int // KV pool size in tokens (sglang:max_total_num_tokens)
	ChunkedPrefillSize int // --chunked-prefill-size
	MaxPrefillTokens   int // --max-prefill-tokens
	ContextLen         int // model context length (sglang:context_len)
	DecodeLogInterval  int // --decode-log-interval: gauges refresh every N decode steps

	// Startup is how long a restarted server answers /metrics but fails
	// /health_generate (server_status Starting) before taking traffic.
	Startup time.Duration

	// GPU cost model, in seconds. A decode step costs a fixed launch/sampling
	// overhead, a per-sequence cost, and an attention cost proportional to the
	// KV tokens the batch reads; a prefill batch costs an overhead plus a
	// per-computed-token cost (cached prefix tokens are almost free). The
	// defaults give ~25 ms inter-token latency for a full batch of short chats
	// and ~50k prompt tokens/s of prefill, typical of an 8B model on an H100.
	DecodeBase, DecodePerSeq, DecodePerKVToken  float64
	PrefillBase, PrefillPerToken, PrefillCached float64
}

// DefaultServerConfig returns the configuration described on ServerConfig.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		MaxRunningRequests: 64,
		MaxTotalTokens:     200000, // sglang:max_total_num_tokens
		ChunkedPrefillSize: 8192,
		MaxPrefillTokens:   16384,
		ContextLen:         40960,
		DecodeLogInterval:  40,
		Startup:            4 * time.Second,
		DecodeBase:         0.008,
		DecodePerSeq:       0.00012,
		DecodePerKVToken:   0.08e-6,
		PrefillBase:        0.006,
		PrefillPerToken:    0.02e-3,
		PrefillCached:      0.5e-6,
	}
}

// Load describes the clients of one replica. Phases of a Scenario change it.
type Load struct {
	Rate float64 // new requests per second (Poisson); retries come on top

	// Prompts are a shared system prompt (one of SystemPrompts variants, the
	// part the radix cache can share) followed by a per-request user part.
	SystemPromptTokens int
	SystemPrompts      int
	// TimestampedSystemPrompt puts a per-request timestamp at the head of the
	// system prompt: every prompt is unique from its first token, so nothing
	// is shared any more (the classic cache-collapse root cause).
	TimestampedSystemPrompt bool
	UserPromptTokens        int // mean of the user part (log-normal)

	// A batch job submits DocBatch long-document requests at once when the
	// load takes effect and then every DocEvery (0: once): DocPromptTokens
	// of document each (log-normal), asking for answers of DocOutputTokens
	// (narrow spread: "summarise in ~N words"). It never times out. Each wave
	// is admitted together and grows together.
	DocBatch        int
	DocEvery        time.Duration
	DocPromptTokens int
	DocOutputTokens int

	OutputTokens      int     // mean generated tokens before EOS (log-normal)
	OutputSpread      float64 // σ of log(output length); small: answers of similar length
	MaxNewTokens      int     // max_tokens the clients send (the scheduler reserves against it)
	StreamingFraction float64 // share of stream=true requests

	// ClientTimeout is how long a client waits for the whole response before
	// disconnecting (0: forever). A disconnected request is re-sent after
	// RetryBackoff (±50% jitter) up to MaxRetries times.
	ClientTimeout time.Duration
	MaxRetries    int
	RetryBackoff  time.Duration
}

// DefaultLoad is heavy but healthy chat traffic for one replica with the
// default server: the batch sits near --max-running-requests, the queue is
// short, the KV pool is far from full and ~80% of prompt tokens hit the
// cache (a 1.5k-token system prompt -- instructions and tool definitions --
// shared by three applications, then ~350 tokens of conversation).
func DefaultLoad() Load {
	return Load{
		Rate:               9,
		SystemPromptTokens: 1500,
		SystemPrompts:      3,
		UserPromptTokens:   350,
		DocPromptTokens:    2500,
		DocOutputTokens:    1500,
		OutputTokens:       220,
		OutputSpread:       0.7,
		MaxNewTokens:       1024,
		StreamingFraction:  0.75,
		ClientTimeout:      60 * time.Second,
		RetryBackoff:       time.Second,
	}
}

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

func (e *engine) reserve(r *request) float64 {
	return float64(min(max(r.maxNew-r.generated, 0), clipMaxNewTokens)) * e.newTokenRatio
}

// iterate runs one scheduler iteration starting at e.clock: a prefill batch
// if anything can be admitted (SGLang prefers prefill), else a decode step.
// It reports false when there is nothing to do.
func (e *engine) iterate() bool {
	if batch := e.admit(); len(batch) > 0 {
		e.prefill(batch)
		return true
	}
	if len(e.running) > 0 {
		e.decode()
		return true
	}
	return false
}

// admit is SGLang's PrefillAdder: take waiting requests in order while the
// batch has room under --max-running-requests, --chunked-prefill-size and
// the token budget. The budget is free + evictable tokens minus what running
// requests are expected to still generate (remaining max_new_tokens scaled by
// new_token_ratio); a request fits only if its uncached input plus its whole
// remaining max_new_tokens fits. Once running, a request only holds
// ratio·max_new in reserve, and the ratio decays to ~0.1: the scheduler
// overcommits the pool by design. That is harmless while completions keep
// freeing KV, and forces retractions when a batch of long answers all keep
// growing at once.
func (e *engine) admit() []*request {
	now := e.clock
	if len(e.waiting) == 0 || len(e.running) >= e.cfg.MaxRunningRequests {
		return nil
	}
	remTotal := float64(e.available() + e.cache.evictable)
	for _, r := range e.running {
		remTotal -= e.reserve(r)
	}
	remInput, remChunk := e.cfg.MaxPrefillTokens, e.cfg.ChunkedPrefillSize
	var batch []*request
	for _, r := range e.waiting {
		if r.queued > now || len(e.running)+len(batch) >= e.cfg.MaxRunningRequests {
			break
		}
		// Radix match: the shared system prompt, then the request's own
		// earlier KV below it (left by an aborted attempt of the same
		// content). A retracted request's KV was freed, not cached.
		var pre, tail *entry
		if r.prefixKey != 0 {
			pre = e.cache.get(r.prefixKey)
		}
		if pre != nil || r.prefixKey == 0 {
			tail = e.cache.get(r.contentID)
		}
		input := r.promptLen + r.generated
		base := 0
		if pre != nil {
			base = r.prefixLen
		}
		hit := base
		if tail != nil {
			hit += min(tail.tokens, input-base)
		}
		extend := input - hit
		newTok := min(max(r.maxNew-r.generated, 0), clipMaxNewTokens)
		if float64(extend+newTok) >= remTotal {
			break // NO_TOKEN: the head of the queue does not fit; wait
		}
		if len(batch) > 0 && (extend >= remInput || extend > remChunk) {
			break // next batch (a chunk-sized prompt runs alone)
		}
		// Lock what matched, then allocate; undo if eviction cannot help.
		if pre != nil {
			e.cache.lock(pre)
		}
		if tail != nil {
			e.cache.remove(tail)
		}
		if !e.alloc(extend) {
			if pre != nil {
				e.cache.unlock(pre)
			}
			if tail != nil {
				e.cache.insert(tail.key, tail.tokens)
			}
			break
		}
		if pre == nil && r.prefixKey != 0 {
			// First sight of this system prompt: its KV, computed now,
			// becomes a shared node of the tree, locked by this request.
			pre = e.cache.insert(r.prefixKey, r.prefixLen)
			e.cache.lock(pre)
			base = r.prefixLen
		}
		r.prefix = pre
		r.private = input - base
		e.private += r.private
		r.state = stRunning
		r.batchCompute, r.batchHit = extend, hit
		if !r.admitted {
			// Queue time, cached_tokens and the "effective" prefill counters
			// are per request, not per recompute after a retraction.
			r.admitted = true
			r.cached = hit
			e.h.queueTime.observe(now-r.queued, 1)
			e.c.effInput += float64(extend)
			e.c.effDeviceHit += float64(hit)
		}
		e.c.rtPrefillCompute += float64(extend)
		e.c.rtPrefillCache += float64(hit)
		remTotal -= float64(extend + newTok) // in-batch: the full clipped max_new_tokens
		remInput -= extend
		remChunk -= extend
		batch = append(batch, r)
	}
	e.waiting = e.waiting[len(batch):]
	return batch
}

// prefill runs one prefill batch; each request gets its next token at the
// end (its first token, unless it is recomputing after a retraction).
func (e *engine) prefill(batch []*request) {
	compute, hit := 0, 0
	for _, r := range batch {
		compute += r.batchCompute
		hit += r.batchHit
	}
	e.clock += e.cfg.PrefillBase + float64(compute)*e.cfg.PrefillPerToken + float64(hit)*e.cfg.PrefillCached
	end := e.clock
	for _, r := range batch {
		e.running = append(e.running, r)
		r.generated++
		if r.firstTok == 0 {
			r.firstTok = end
			e.h.ttft[b2i(r.streaming)].observe(end-r.arrived, 1)
		} else {
			e.h.itl.observe(end-r.lastTok, 1)
		}
		r.lastTok = end
	}
	e.finishDone(end)
	rate := 0.0
	if compute+hit > 0 {
		rate = float64(hit) / float64(compute+hit)
	}
	e.report(end, reportPrefill, rate)
}

// decode runs one decode step: every running request needs one more KV slot;
// if eviction cannot free enough, requests are retracted first.
func (e *engine) decode() {
	if !e.alloc(len(e.running)) {
		e.retract()
		if len(e.running) == 0 {
			return
		}
	}
	sum := 0
	for _, r := range e.running {
		sum += r.promptLen + r.generated
	}
	n := len(e.running)
	e.clock += e.cfg.DecodeBase + float64(n)*e.cfg.DecodePerSeq + float64(sum)*e.cfg.DecodePerKVToken
	end := e.clock
	for _, r := range e.running {
		r.generated++
		r.private++
		e.h.itl.observe(end-r.lastTok, 1)
		r.lastTok = end
	}
	e.private += n
	e.decodeTokens += n
	e.c.rtDecode += float64(n)
	e.newTokenRatio = max(e.newTokenRatio-newTokenRatioDecay, minNewTokenRatio)
	e.finishDone(end)
	e.decodeSteps++
	if e.decodeSteps%e.cfg.DecodeLogInterval == 0 {
		e.report(end, reportDecode, 0)
	}
}

// retract is SGLang's retract_decode: order the batch by (output length,
// -input length) and retract from the end -- the requests with the least
// output, longest prompt first -- until one decode step fits. Their KV is
// freed (not cached), they go back to the head of the waiting queue and
// will recompute prompt + output so far. new_token_ratio is re-estimated
// from what the remaining batch has decoded, so admission turns cautious.
// Like SGLang it frees room for retract_decode_steps (20) more steps of the
// remaining batch, so one retraction buys a few seconds, not one step.
func (e *engine) retract() {
	sort.SliceStable(e.running, func(i, j int) bool {
		a, b := e.running[i], e.running[j]
		if a.generated != b.generated {
			return a.generated > b.generated
		}
		return a.promptLen < b.promptLen
	})
	var out []*request
	for len(e.running) > 0 {
		last := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		e.release(last, false)
		e.c.retractedReqs++
		e.c.retractedIn += float64(last.promptLen)
		e.c.retractedOut += float64(last.generated)
		last.state, last.retracted, last.queued = stWaiting, true, e.clock
		out = append(out, last)
		if e.alloc(retractDecodeSteps * len(e.running)) {
			break
		}
	}
	e.waiting = append(out, e.waiting...)
	e.lastRetractEvent = len(out)
	decoded, maxNew := 0, 0
	for _, r := range e.running {
		decoded += r.generated
		maxNew += r.maxNew
	}
	if maxNew > 0 {
		e.newTokenRatio = min(1, float64(decoded+retractDecodeSteps*len(e.running))/float64(maxNew))
	}
}

// release frees a request's KV: into the radix cache as an evictable node
// (finished or aborted requests, as cache_finished_req does) or straight
// back to the pool (retraction).
func (e *engine) release(r *request, cache bool) {
	e.private -= r.private
	if cache && r.private > 0 {
		e.cache.insert(r.contentID, r.private)
	}
	r.private = 0
	if r.prefix != nil {
		e.cache.unlock(r.prefix)
		r.prefix = nil
	}
}

// finishDone completes the running requests that reached EOS at time t.
func (e *engine) finishDone(t float64) {
	kept := e.running[:0]
	for _, r := range e.running {
		if r.generated < r.outputLen {
			kept = append(kept, r)
			continue
		}
		e.release(r, true)
		r.state = stDone
		s := b2i(r.streaming)
		e.c.requests[s]++
		e.c.prompt[s] += float64(r.promptLen)
		e.c.generation[s] += float64(r.generated)
		e.c.cached += float64(r.cached)
		e.h.e2e[s].observe(t-r.arrived, 1)
		e.h.promptLen.observe(float64(r.promptLen), 1)
		e.h.genLen.observe(float64(r.generated), 1)
		e.h.uncache.observe(float64(r.promptLen-r.cached), 1)
		e.respond(epChat, 0)
	}
	clear(e.running[len(kept):])
	e.running = kept
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

type reportKind uint8

const (
	reportPrefill reportKind = iota
	reportDecode
	reportIdle
)

// report refreshes the scheduler gauges the way SGLang's metrics reporter
// does: cache_hit_rate is the last prefill batch's (0 on decode logs),
// gen_throughput is decode tokens over the last decode-log window, and
// num_retracted_reqs is the size of the last retraction since the previous
// report, then reset.
func (e *engine) report(t float64, kind reportKind, hitRate float64) {
	g := &e.g
	g.running, g.queue = len(e.running), len(e.waiting)
	g.used, g.evictable, g.available = e.used(), e.cache.evictable, e.available()
	g.tokenUsage = float64(g.used) / float64(e.cfg.MaxTotalTokens)
	g.sumSeqLen = 0
	for _, r := range e.running {
		g.sumSeqLen += r.promptLen + r.generated
	}
	g.hitRate = hitRate
	g.newTokenRatio = e.newTokenRatio
	switch kind {
	case reportDecode:
		if dt := t - e.lastDecodeLog; dt > 0 {
			g.genThroughput = float64(e.decodeTokens) / dt
		}
		e.decodeTokens = 0
		e.lastDecodeLog = t
	case reportIdle:
		g.genThroughput = 0
	}
	g.retracted = e.lastRetractEvent
	e.lastRetractEvent = 0
	e.lastReport = t
}

// run advances the engine to t1: scheduler iterations back to back while
// there is work, idle otherwise. Iterations may overrun t1 (a long prefill);
// the next call starts where the GPU actually is.
func (e *engine) run(t1 float64) {
	for e.clock < t1 {
		if e.iterate() {
			continue
		}
		next := t1
		for _, r := range e.waiting {
			if r.queued > e.clock && r.queued < next {
				next = r.queued
			}
			break
		}
		e.clock = next
		if len(e.running) == 0 && e.clock-e.lastReport >= idleReportInterval {
			e.report(e.clock, reportIdle, 0)
		}
	}
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

// radixCache models SGLang's RadixCache at the granularity that matters for
// the metrics: shared system-prompt nodes (keyed by prompt variant) and one
// leaf per finished/aborted request (keyed by content, so a retry of the same
// body can reuse it). Nodes referenced by running requests are locked;
// unlocked ones are evictable, least recently used first. Request leaves
// are touched once and so age out before the hot system prompts do.
type radixCache struct {
	nodes     map[uint64]*entry
	lru       entry // sentinel: lru.next is the most recent
	locked    int   // tokens in nodes with refs > 0
	evictable int   // tokens in nodes with refs == 0
}

type entry struct {
	key        uint64
	tokens     int
	refs       int
	prev, next *entry
}

func newRadixCache() *radixCache {
	c := &radixCache{nodes: map[uint64]*entry{}}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

func (c *radixCache) get(key uint64) *entry { return c.nodes[key] }

func (c *radixCache) unlink(e *entry) { e.prev.next, e.next.prev = e.next, e.prev }

func (c *radixCache) pushFront(e *entry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

func (c *radixCache) insert(key uint64, tokens int) *entry {
	if old := c.nodes[key]; old != nil {
		if old.refs > 0 || old.tokens >= tokens {
			return old
		}
		c.remove(old)
	}
	e := &entry{key: key, tokens: tokens}
	c.nodes[key] = e
	c.pushFront(e)
	c.evictable += tokens
	return e
}

func (c *radixCache) remove(e *entry) {
	c.unlink(e)
	delete(c.nodes, e.key)
	c.evictable -= e.tokens
}

func (c *radixCache) lock(e *entry) {
	if e.refs == 0 {
		c.evictable -= e.tokens
		c.locked += e.tokens
	}
	e.refs++
	c.unlink(e)
	c.pushFront(e)
}

func (c *radixCache) unlock(e *entry) {
	e.refs--
	if e.refs == 0 {
		c.locked -= e.tokens
		c.evictable += e.tokens
	}
}

// evict frees at least n tokens if it can, oldest unlocked nodes first.
func (c *radixCache) evict(n int) int {
	freed := 0
	for e := c.lru.prev; e != &c.lru && freed < n; {
		prev := e.prev
		if e.refs == 0 {
			freed += e.tokens
			c.remove(e)
		}
		e = prev
	}
	return freed
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
