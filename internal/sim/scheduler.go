package sim

import "sort"

// The engine's scheduler, after SGLang's: each iteration is a prefill
// batch of admitted requests or one decode step of the running batch,
// retracting requests when the KV pool runs dry, with the scheduler
// gauges refreshed as SGLang's metrics reporter does.

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
	e.clock += e.gpuTime(e.cfg.PrefillBase + float64(compute)*e.cfg.PrefillPerToken + float64(hit)*e.cfg.PrefillCached)
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
	e.clock += e.gpuTime(e.cfg.DecodeBase + float64(n)*e.cfg.DecodePerSeq + float64(sum)*e.cfg.DecodePerKVToken)
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
		start := e.clock
		if e.iterate() {
			e.busy += e.clock - start
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
