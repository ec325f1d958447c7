package detect

import (
	"fmt"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// DecodeSlowdown is the class of inter-token latency up at an unchanged batch
// size.
const DecodeSlowdown Class = "decode_slowdown"

// DecodeSlowdownDetector pages when the inter-token latency rises far
// above its baseline while the batch is the same size — the same work
// takes longer per step, which points at the GPU side: thermal or power
// throttling, a noisy neighbour on the GPU, a degraded interconnect, a bad
// node. A batch that grew with the arrivals (more concurrent requests) or
// with longer contexts is load, not a slowdown; a batch that grew while the
// arrivals did not is the backlog the slowdown itself builds (each request
// takes longer, so more of them overlap) and still pages. More prefill work
// interleaved with decode (a collapsed prefix hit rate, longer prompts) is
// load too. Retraction storms are preempt_storm's, a collapsed speculative
// acceptance is named as such.
type DecodeSlowdownDetector struct {
	cfg    DecodeSlowdownConfig
	triage TriageConfig
}

// Class implements Detector.
func (d *DecodeSlowdownDetector) Class() Class { return DecodeSlowdown }

var _ PeerObserver = (*DecodeSlowdownDetector)(nil)

// Baselines keys of decode_slowdown: the latency and the work it ran at.
const (
	decodeITLP99     = "itl_p99"
	decodeITLMean    = "itl_mean"
	decodeRunning    = "running"
	decodeSeqLens    = "seq_lens"
	decodeArrivals   = "arrivals_per_second"
	decodePrefill    = "prefill_tokens_per_second"
	decodeThroughput = "gen_throughput"
	decodeSpecAccept = "spec_accept_length"
)

// Detect implements Detector.
//
// Clear rule while frozen: an incident's finding persists while the
// inter-token latency p99 (or mean) stays at least RecoveredRatio times
// the level frozen at its onset, with the p99 at least MinITLSeconds,
// whatever the batch does since (the backlog a slowdown builds is no
// recovery). Without a frozen reference the same rule holds a slowdown
// whose onset at unchanged work is still in the window (held). Against
// its healthy peers (no ready baseline of its own) the onset rule is the
// mean's: at least ITLRatio times the peers' mean at the peers' batch.
func (d *DecodeSlowdownDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	n, ok := w.Observations(series.InterTokenLatency, nil, p.rangeStart, now)
	if !ok || n < c.MinTokens {
		return nil
	}
	cmp := comparisonOf(w, DecodeSlowdown)
	if cmp.frozen(decodeITLP99, decodeITLMean) {
		if h, ok := d.frozenHold(w, now, cmp); ok {
			return []Finding{d.report(w, now, h.now, &h)}
		}
		return nil
	}
	if ev, ok := d.onset(w, p, true, cmp); ok {
		return []Finding{d.report(w, now, ev, nil)}
	}
	if h, ok := d.held(w, now); ok {
		return []Finding{d.report(w, now, h.now, &h)}
	}
	return nil
}

func (d *DecodeSlowdownDetector) ready(w Window, p periods) bool {
	c := d.cfg
	return p.baselineReady(w, c.BaselineCoverage, Sel(series.InterTokenLatency+"_count"), p.baselineTraffic(c.BaselineCoverage, c.MinTokens))
}

// NeedsPeers implements PeerObserver: enough inter-token observations,
// with the p99 at its floor.
func (d *DecodeSlowdownDetector) NeedsPeers(w Window, now time.Time) bool {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	if n, ok := w.Observations(series.InterTokenLatency, nil, p.rangeStart, now); !ok || n < c.MinTokens || d.ready(w, p) {
		return false
	}
	p99, ok := w.Quantile(0.99, series.InterTokenLatency, nil, p.rangeStart, now)
	return ok && p99 >= c.MinITLSeconds
}

// Levels implements PeerObserver: the inter-token latency's mean and the
// work it ran at over the range, when it holds MinTokens observations.
// Not the p99: one replica's few-minute tail against another's is noise,
// so only the mean compares replicas.
func (d *DecodeSlowdownDetector) Levels(w Window, now time.Time) map[string]float64 {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	if n, ok := w.Observations(series.InterTokenLatency, nil, p.rangeStart, now); !ok || n < c.MinTokens {
		return nil
	}
	l := levelSet{}
	mean, ok := histMean(w, series.InterTokenLatency, nil, p.rangeStart, now)
	l.level(decodeITLMean, mean, ok)
	running, ok := w.Avg(Sel(series.NumRunningReqs), p.rangeStart, now)
	l.level(decodeRunning, running, ok)
	seqs, ok := w.Avg(Sel(series.DecodeSumSeqLens), p.rangeStart, now)
	l.level(decodeSeqLens, seqs, ok)
	l.now(decodeArrivals, d.arrivals(w, p))
	l.now(decodePrefill, prefillWork(p, w))
	tp, ok := w.Avg(Sel(series.GenThroughput), p.rangeStart, now)
	l.level(decodeThroughput, tp, ok)
	spec, ok := w.Avg(Selector{Name: specAcceptLength, Combine: CombineMax}, p.rangeStart, now)
	l.level(decodeSpecAccept, spec, ok)
	return l.orNil()
}

// arrivals is the arrival rate, from the HTTP layer or else the finished
// requests.
func (d *DecodeSlowdownDetector) arrivals(w Window, p periods) measure {
	if m := p.rate(w, inference(series.HTTPRequestsTotal, d.cfg.ArrivalEndpoints)); m.nowOK {
		return m
	}
	return p.rate(w, Sel(series.NumRequestsTotal))
}

// decodeEval is what one evaluation at a time saw: the latency now and in
// its baseline, and the batch it ran.
type decodeEval struct {
	p          periods
	p99, mean  measure
	growth     float64
	running    measure
	seqs       measure
	arrivals   measure
	throughput measure
	prefill    measure // prompt tokens computed per second
	backlog    bool    // the batch grew, but only because each request takes longer
	specDrop   bool
	spec       measure
	loraFull   bool
}

// onset evaluates the onset condition at p.now: the inter-token latency
// far above a covered baseline at the same work — the same batch, or a
// batch grown only by the backlog the slowdown builds. Without withBaseP99
// the baseline's tail is not computed and the ratio is judged by the mean
// (the look-back scan of held: an hour's quantile per step is the costly
// part). cmp's peers' levels stand in for a baseline that is not ready.
func (d *DecodeSlowdownDetector) onset(w Window, p periods, withBaseP99 bool, cmp comparison) (decodeEval, bool) {
	c := d.cfg
	ev := decodeEval{p: p}
	itlCount := Sel(series.InterTokenLatency + "_count")
	if n, ok := w.Increase(itlCount, p.rangeStart, p.now); !ok || n < c.MinTokens {
		return ev, false
	}
	// Peers decide only for a replica whose own baseline is not ready: a
	// rare case, so readiness is asked first only then.
	peers := withBaseP99 && cmp.peers(decodeITLMean) && !d.ready(w, p)
	ev.mean = p.histMean(w, series.InterTokenLatency)
	if peers {
		cmp.onto(decodeITLMean, &ev.mean)
	}
	gMean, okMean := ev.mean.growth()
	if !withBaseP99 && !(okMean && gMean >= c.ITLRatio) {
		// Without the baseline's tail only the mean can show the rise:
		// held's look-back scan stops here at most of its steps, before
		// the costlier questions below.
		return ev, false
	}
	if withBaseP99 {
		ev.p99 = p.quantile(w, 0.99, series.InterTokenLatency)
		if peers {
			cmp.onto(decodeITLP99, &ev.p99)
		}
	} else {
		ev.p99.now, ev.p99.nowOK = w.Quantile(0.99, series.InterTokenLatency, nil, p.rangeStart, p.now)
	}
	if !ev.p99.nowOK || ev.p99.now < c.MinITLSeconds || (withBaseP99 && !peers && !ev.p99.baseOK) {
		return ev, false
	}
	g99, ok99 := ev.p99.growth()
	if !((ok99 && g99 >= c.ITLRatio) || (okMean && gMean >= c.ITLRatio)) {
		return ev, false
	}
	if !peers && !d.ready(w, p) {
		return ev, false // a baseline that saw only a warm-up or a trickle is no reference
	}
	ev.growth = g99
	if okMean {
		ev.growth = max(ev.growth, gMean)
	}

	// Preemption storms slow decode too; they page on their own.
	if r := p.rate(w, Sel(series.RetractedRequestsTotal)); r.nowOK && r.now >= c.RetractionsPerSecond {
		return ev, false
	}

	// Same work? Running requests, the batch's summed sequence length, the
	// arrivals.
	within := func(m measure) (steady, grew, known bool) {
		g, known := m.growth()
		return known && g <= 1+c.BatchTolerance, known && g > 1+c.BatchTolerance, known
	}
	ev.running = p.avg(w, Sel(series.NumRunningReqs))
	ev.seqs = p.avg(w, Sel(series.DecodeSumSeqLens))
	ev.arrivals = d.arrivals(w, p)
	if peers {
		cmp.onto(decodeRunning, &ev.running)
		cmp.onto(decodeSeqLens, &ev.seqs)
		cmp.onto(decodeArrivals, &ev.arrivals)
	}
	perReq := measure{}
	perReq.now, perReq.nowOK = ratio(ev.seqs.now, ev.running.now)
	perReq.base, perReq.baseOK = ratio(ev.seqs.base, ev.running.base)
	perReq.nowOK = perReq.nowOK && ev.seqs.nowOK && ev.running.nowOK
	perReq.baseOK = perReq.baseOK && ev.seqs.baseOK && ev.running.baseOK
	_, runGrew, runKnown := within(ev.running)
	_, seqGrew, _ := within(ev.seqs)
	arrSteady, _, _ := within(ev.arrivals)
	_, perReqGrew, _ := within(perReq)
	if !runKnown {
		return ev, false // without the batch size there is no telling load from slowdown
	}
	if runGrew || seqGrew {
		// Grown batch: load, unless the arrivals and the per-request context
		// are unchanged — then the slowdown built the backlog itself.
		if !arrSteady || perReqGrew {
			return ev, false
		}
		ev.backlog = true
	}

	// Decode steps share the GPU with prefill chunks: more prompt tokens to
	// compute (a collapsed prefix hit rate, longer prompts) slows every
	// step without any GPU fault. That is load, and the finding that
	// explains it is cache_collapse or queue_latency.
	ev.prefill = prefillWork(p, w)
	if peers {
		cmp.onto(decodePrefill, &ev.prefill)
	}
	if g, ok := ev.prefill.growth(); ok && g > 1+c.BatchTolerance {
		return ev, false
	}

	ev.spec = p.avg(w, Selector{Name: specAcceptLength, Combine: CombineMax})
	if peers {
		cmp.onto(decodeSpecAccept, &ev.spec)
	}
	ev.throughput = p.avg(w, Sel(series.GenThroughput))
	if peers {
		cmp.onto(decodeThroughput, &ev.throughput)
	}
	ev.specDrop = ev.spec.nowOK && ev.spec.baseOK && ev.spec.base > 1 && ev.spec.now <= ev.spec.base*(1-c.BatchTolerance)
	if u, ok := w.Min(Selector{Name: series.LoraPoolUtilization, Combine: CombineMax}, p.rangeStart, p.now); ok && u >= 0.99 {
		ev.loraFull = true
	}
	return ev, true
}

// decodeHold is a slowdown that was established earlier and still holds.
type decodeHold struct {
	since time.Time  // when the onset condition held, the earliest in the look-back
	onset decodeEval // the evaluation at since (its baseline is the pre-slowdown one)
	now   decodeEval // the latency now against the onset's baseline, and the batch now
	// frozen: the onset is an incident's, its baseline frozen then; the
	// onset's own batch (onset.running.now) is not known.
	frozen bool
}

// held looks for a slowdown that is established but no longer has the
// onset's shape. A slowdown builds a backlog: the batch fills, the queue
// grows, clients time out and retry (more arrivals, more prompts to
// prefill) — and the onset's "same work" condition stops holding although
// nothing recovered. The batch condition only guards the onset (a bigger
// batch must not page as a slowdown); once an onset at unchanged work was
// seen within the look-back, the slowdown holds while the inter-token
// latency stays ITLRatio above the baseline it had before the onset.
//
// The look-back reaches as far as the onset's own baseline can still be
// covered by the window (1 - MinSpanShare of the baseline), scanned oldest
// first in steps of half the range, so the baseline that is kept is the
// least touched by the slowdown.
func (d *DecodeSlowdownDetector) held(w Window, now time.Time) (decodeHold, bool) {
	c := d.cfg
	var h decodeHold
	p := newPeriods(now, c.Range, c.Baseline)
	p99, mean, ok := d.latencyNow(w, p)
	if !ok {
		return h, false
	}
	step := max(c.Range/2, time.Second)
	horizon := time.Duration((1 - c.BaselineCoverage.MinSpanShare) * float64(c.Baseline))
	found := false
	for t := now.Add(-horizon); t.Before(now); t = t.Add(step) {
		if ev, ok := d.onset(w, newPeriods(t, c.Range, c.Baseline), false, comparison{}); ok {
			h.since, h.onset, found = t, ev, true
			break
		}
	}
	if !found {
		return h, false
	}
	op := h.onset.p
	h.onset.p99.base, h.onset.p99.baseOK = w.Quantile(0.99, series.InterTokenLatency, nil, op.baseStart, op.rangeStart)
	return d.holds(w, p, h, p99, mean)
}

// frozenHold is held with an incident's onset: the baseline frozen when
// it began stands for the onset's.
func (d *DecodeSlowdownDetector) frozenHold(w Window, now time.Time, cmp comparison) (decodeHold, bool) {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	p99, mean, ok := d.latencyNow(w, p)
	if !ok {
		return decodeHold{}, false
	}
	h := decodeHold{since: cmp.ref.Since, frozen: true}
	on := &h.onset
	cmp.onto(decodeITLP99, &on.p99)
	cmp.onto(decodeITLMean, &on.mean)
	cmp.onto(decodeRunning, &on.running)
	cmp.onto(decodeSeqLens, &on.seqs)
	cmp.onto(decodeArrivals, &on.arrivals)
	cmp.onto(decodePrefill, &on.prefill)
	cmp.onto(decodeThroughput, &on.throughput)
	cmp.onto(decodeSpecAccept, &on.spec)
	h, ok = d.holds(w, p, h, p99, mean)
	if ok {
		// What the onset saw is not kept: the speculative acceptance and
		// the LoRA pool are read now.
		spec := &h.now.spec
		spec.now, spec.nowOK = w.Avg(Selector{Name: specAcceptLength, Combine: CombineMax}, p.rangeStart, now)
		h.now.specDrop = spec.nowOK && spec.baseOK && spec.base > 1 && spec.now <= spec.base*(1-c.BatchTolerance)
		u, full := w.Min(Selector{Name: series.LoraPoolUtilization, Combine: CombineMax}, p.rangeStart, now)
		h.now.loraFull = full && u >= 0.99
	}
	return h, ok
}

// latencyNow is the inter-token latency over p's range; ok when a
// slowdown can hold: no retraction storm (preempt_storm's), the p99 at its
// floor.
func (d *DecodeSlowdownDetector) latencyNow(w Window, p periods) (p99, mean measure, ok bool) {
	c := d.cfg
	if r := p.rate(w, Sel(series.RetractedRequestsTotal)); r.nowOK && r.now >= c.RetractionsPerSecond {
		return p99, mean, false
	}
	p99.now, p99.nowOK = w.Quantile(0.99, series.InterTokenLatency, nil, p.rangeStart, p.now)
	mean.now, mean.nowOK = histMean(w, series.InterTokenLatency, nil, p.rangeStart, p.now)
	return p99, mean, p99.nowOK && p99.now >= c.MinITLSeconds
}

// holds reports whether the slowdown of h holds at p.now: the latency
// (p99, mean) at least RecoveredRatio times the onset's baseline, whatever
// the batch does since. h.now is the evaluation now against that baseline.
func (d *DecodeSlowdownDetector) holds(w Window, p periods, h decodeHold, p99, mean measure) (decodeHold, bool) {
	c := d.cfg
	on := h.onset
	ev := decodeEval{p: p}
	ev.p99 = measure{now: p99.now, nowOK: p99.nowOK, base: on.p99.base, baseOK: on.p99.baseOK}
	ev.mean = measure{now: mean.now, nowOK: mean.nowOK, base: on.mean.base, baseOK: on.mean.baseOK}
	g99, okG99 := ev.p99.growth()
	gMean, okGMean := ev.mean.growth()
	if !(okG99 && g99 >= c.RecoveredRatio) && !(okGMean && gMean >= c.RecoveredRatio) {
		return h, false // the latency came back: the slowdown is over, whatever the batch does
	}
	if okG99 {
		ev.growth = g99
	}
	if okGMean {
		ev.growth = max(ev.growth, gMean)
	}
	// The batch now, against the onset's baseline: what the slowdown built.
	now := p.now
	ev.running = measure{base: on.running.base, baseOK: on.running.baseOK}
	ev.running.now, ev.running.nowOK = w.Avg(Sel(series.NumRunningReqs), p.rangeStart, now)
	ev.arrivals = measure{base: on.arrivals.base, baseOK: on.arrivals.baseOK}
	ev.arrivals.now, ev.arrivals.nowOK = w.Rate(inference(series.HTTPRequestsTotal, c.ArrivalEndpoints), p.rangeStart, now)
	if !ev.arrivals.nowOK {
		ev.arrivals.now, ev.arrivals.nowOK = w.Rate(Sel(series.NumRequestsTotal), p.rangeStart, now)
	}
	ev.seqs = measure{base: on.seqs.base, baseOK: on.seqs.baseOK}
	ev.seqs.now, ev.seqs.nowOK = w.Avg(Sel(series.DecodeSumSeqLens), p.rangeStart, now)
	ev.throughput = measure{base: on.throughput.base, baseOK: on.throughput.baseOK}
	ev.throughput.now, ev.throughput.nowOK = w.Avg(Sel(series.GenThroughput), p.rangeStart, now)
	ev.prefill = measure{base: on.prefill.base, baseOK: on.prefill.baseOK}
	ev.spec, ev.specDrop, ev.loraFull = on.spec, on.specDrop, on.loraFull
	h.now = ev
	return h, true
}

// report builds the finding of an onset (hold nil) or of a held slowdown.
func (d *DecodeSlowdownDetector) report(w Window, now time.Time, ev decodeEval, hold *decodeHold) Finding {
	c := d.cfg
	sev := Warning
	if ev.growth >= c.CriticalITLRatio {
		sev = Critical
	}
	f := finding(DecodeSlowdown, w, sev, LayerDecode)
	kept := levelSet{}
	kept.base(decodeITLP99, ev.p99)
	kept.base(decodeITLMean, ev.mean)
	kept.base(decodeRunning, ev.running)
	kept.base(decodeSeqLens, ev.seqs)
	kept.base(decodeArrivals, ev.arrivals)
	kept.base(decodePrefill, ev.prefill)
	kept.base(decodeThroughput, ev.throughput)
	kept.base(decodeSpecAccept, ev.spec)
	f.Baselines = kept.orNil()
	rule := fmt.Sprintf("p99 or mean >= %sx baseline, p99 >= %s s", num(c.ITLRatio), num(c.MinITLSeconds))
	if hold != nil {
		rule = fmt.Sprintf("open until p99 and mean < %sx the baseline before the slowdown, or p99 < %s s", num(c.RecoveredRatio), num(c.MinITLSeconds))
	}
	f.Evidence = append(f.Evidence, ev.p99.evidence("inter-token latency p99", "s", rule))
	if ev.mean.nowOK {
		f.Evidence = append(f.Evidence, ev.mean.evidence("inter-token latency mean", "s", ""))
	}
	batchRule := fmt.Sprintf("within +%s of baseline is the same batch", pct(c.BatchTolerance))
	if hold != nil {
		batchRule = "checked at the onset only: the backlog a slowdown builds is no recovery"
	}
	f.Evidence = append(f.Evidence, ev.running.evidence(ev.p.avgOver("running requests"), "", batchRule))
	if ev.seqs.nowOK {
		f.Evidence = append(f.Evidence, ev.seqs.evidence("decode batch summed sequence length (avg)", "tokens", ""))
	}
	if ev.arrivals.nowOK {
		f.Evidence = append(f.Evidence, ev.arrivals.evidence("arrivals/s", "/s", ""))
	}
	if ev.throughput.nowOK {
		f.Evidence = append(f.Evidence, ev.throughput.evidence("generation throughput (avg)", "tokens/s", "").AsLowerWorse())
	}
	if ev.spec.nowOK {
		f.Evidence = append(f.Evidence, ev.spec.evidence("speculative accept length (avg)", "tokens", "").AsLowerWorse())
	}

	var head string
	switch {
	case hold != nil:
		since := hold.since.UTC().Format("15:04 UTC")
		shown := itlShown(ev)
		f.Summary = fmt.Sprintf("Decode slowdown since %s: inter-token latency %s %s s (%sx its %s s before the slowdown)",
			since, shown.name, num(shown.m.now), num(ev.growth), num(shown.m.base))
		work := fmt.Sprintf("%s running, baseline %s", num(hold.onset.running.now), num(hold.onset.running.base))
		if hold.frozen {
			work = fmt.Sprintf("baseline %s running", num(hold.onset.running.base))
		}
		head = fmt.Sprintf("Decode layer: the slowdown was established at %s at unchanged work (%s), and the inter-token latency is still p99 %s",
			since, work, vsBaseline(ev.p99, "s"))
		if ev.mean.nowOK {
			head += fmt.Sprintf(", mean %s", vsBaseline(ev.mean, "s"))
		}
		head += " — baselines from before the slowdown."
		built := fmt.Sprintf(" Since then the batch went to %s running", num(ev.running.now))
		what := "the backlog a slower GPU builds (each request takes longer, so more of them overlap)"
		if g, ok := ev.arrivals.growth(); ok && g > 1+c.BatchTolerance {
			built += fmt.Sprintf(" and the arrivals to %s/s (baseline %s/s)", num(ev.arrivals.now), num(ev.arrivals.base))
			what = "the backlog and the client retries a slower GPU builds (each request takes longer, so more of them overlap and time out)"
		}
		head += built + ": " + what + ". A batch that changed shape is not a recovery."
	default:
		shown := itlShown(ev)
		f.Summary = fmt.Sprintf("Decode slowdown: inter-token latency %s %s s (baseline %s s) at an unchanged batch", shown.name, num(shown.m.now), num(shown.m.base))
		batch := fmt.Sprintf("the batch is the same size (%s running, baseline %s", num(ev.running.now), num(ev.running.base))
		if ev.seqs.nowOK && ev.seqs.baseOK {
			batch += fmt.Sprintf("; %s tokens in the batch, baseline %s", num(ev.seqs.now), num(ev.seqs.base))
		}
		batch += ")"
		if ev.backlog {
			f.Summary = fmt.Sprintf("Decode slowdown: inter-token latency %s %s s (baseline %s s) at unchanged arrivals", shown.name, num(shown.m.now), num(shown.m.base))
			batch = fmt.Sprintf("the arrivals are unchanged (%s) and so is the context per request; the batch grew to %s running (baseline %s) only because each request now takes longer",
				vsBaseline(ev.arrivals, "/s"), num(ev.running.now), num(ev.running.base))
		}
		head = fmt.Sprintf("Decode layer: inter-token latency p99 is %s", vsBaseline(ev.p99, "s"))
		if ev.mean.nowOK {
			head += fmt.Sprintf(", mean %s", vsBaseline(ev.mean, "s"))
		}
		head += ", while " + batch + ". The same work takes longer per decode step."
	}
	var cause string
	switch {
	case ev.specDrop:
		cause = fmt.Sprintf("Speculative decoding accepts far fewer draft tokens (accept length %s): each step yields fewer tokens, so the time per token rises. Check the draft model and the traffic mix (a new domain the draft model predicts badly) before suspecting the GPU.", vsBaseline(ev.spec, ""))
	case ev.loraFull:
		cause = "The LoRA adapter pool is full: adapter switching may break CUDA graph replay (see lora_thrash on this replica) before the GPU is to blame."
	default:
		cause = "This points at the GPU side, not the load: thermal or power throttling, a noisy neighbour on the same GPU, a degraded NVLink/PCIe link, or a bad node. If only this replica slowed, suspect its node; if every replica of the model did, suspect a software or driver rollout."
	}
	f.Diagnosis = sentence(head, cause)
	f.Emergency = []string{
		"Compare with the other replicas of the model: if only this one slowed, drain it (take it out of rotation) and let the others carry the traffic.",
		"Check the GPUs: nvidia-smi -q -d PERFORMANCE,CLOCK (clock throttle reasons: thermal, power cap), nvidia-smi for other processes on the GPU (noisy neighbour), dmesg for Xid errors.",
		"Check the interconnect: nvidia-smi nvlink -s (inactive links, errors) and nvidia-smi topo -m against the expected topology.",
	}
	f.RootCause = []string{
		"Thermal or power throttling: fix cooling, power capping or the node's power profile; have the node replaced if it recurs.",
		"Noisy neighbour: enforce exclusive GPU allocation (no other workloads, MIG or MPS sharing) for serving nodes.",
		"Degraded interconnect or bad node: run the vendor diagnostics (DCGM) and cordon the node until it passes.",
		"Once the GPU is ruled out, profile a decode step (torch profiler, nsys) to find the slow kernel.",
	}
	d.triage.Classify(w, now, DecodeSlower).annotate(&f)
	return f
}

// shownLatency is the inter-token latency a summary names: the p99, or
// the mean when only the mean has a baseline (healthy peers' levels, or
// an incident's frozen from them).
type shownLatency struct {
	name string
	m    measure
}

func itlShown(ev decodeEval) shownLatency {
	if !ev.p99.baseOK && ev.mean.baseOK {
		return shownLatency{"mean", ev.mean}
	}
	return shownLatency{"p99", ev.p99}
}

// prefillWork is the rate of prompt tokens actually computed (not served
// from the prefix cache), from the best source the release exposes.
func prefillWork(p periods, w Window) measure {
	if m := p.rate(w, Sel(series.RealtimeTokensTotal, "mode", "prefill_compute")); m.nowOK {
		return m
	}
	if m := p.rate(w, Sel(series.PrefillEffectiveTokens, "mode", "input")); m.nowOK {
		return m
	}
	prompt, cached := p.rate(w, Sel(series.PromptTokensTotal)), p.rate(w, Sel(series.CachedTokensTotal))
	if !prompt.nowOK || !cached.nowOK {
		return measure{}
	}
	return measure{now: prompt.now - cached.now, nowOK: true,
		base: prompt.base - cached.base, baseOK: prompt.baseOK && cached.baseOK}
}

// DecodeSlowdownConfig tunes the inter-token latency detector.
type DecodeSlowdownConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window inter-token latency is read over.
	Range time.Duration `yaml:"range" doc:"recent window inter-token latency is read over"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline" doc:"the \"normal\" window just before it"`
	// MinTokens is the fewest inter-token observations in Range.
	MinTokens float64 `yaml:"min_tokens" doc:"fewer inter-token observations in range: no verdict"`
	// ITLRatio: inter-token latency (p99 or mean) at least this many times
	// its baseline ...
	ITLRatio float64 `yaml:"itl_ratio" doc:"inter-token p99 or mean this many times its baseline ..."`
	// MinITLSeconds: ... with the p99 at least this long.
	MinITLSeconds float64 `yaml:"min_itl_seconds" doc:"... with the p99 at least this long"`
	// BatchTolerance is "roughly unchanged": running requests and the
	// batch's summed sequence length within this fraction of the baseline.
	// A batch that grew with the arrivals is load, not a slowdown.
	BatchTolerance float64 `yaml:"batch_tolerance" doc:"batch size change still counted as \"unchanged\""`
	// ArrivalEndpoints are the endpoints whose arrivals tell load growth
	// from a backlog that the slowdown itself built, "|"-separated.
	ArrivalEndpoints string `yaml:"arrival_endpoints" doc:"endpoints whose arrivals tell load growth from the backlog a slowdown builds"`
	// RetractionsPerSecond: at or above it the slowdown is a preemption
	// storm's (preempt_storm pages), not the GPU's.
	RetractionsPerSecond float64 `yaml:"retractions_per_second" doc:"at or above: the slowdown is a preemption storm's (preempt_storm pages)"`
	// CriticalITLRatio makes the finding critical.
	CriticalITLRatio float64 `yaml:"critical_itl_ratio" doc:"p99 or mean this many times its baseline: critical"`
	// RecoveredRatio: an established slowdown (an incident's, its baseline
	// frozen at onset, or one whose onset is still in the window) holds
	// while the p99 or the mean stays at least this many times the
	// baseline before it.
	RecoveredRatio float64 `yaml:"recovered_ratio" doc:"established slowdown: clears within this many times its baseline"`
	// BaselineCoverage is what the baseline must hold before a ratio to
	// it counts (see BaselineCoverage).
	BaselineCoverage BaselineCoverage `yaml:"baseline_coverage" doc:"before any ratio to the baseline counts, the baseline"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (DecodeSlowdownConfig) defaults() DecodeSlowdownConfig {
	return DecodeSlowdownConfig{
		Enabled:              true,
		Range:                2 * time.Minute,
		Baseline:             time.Hour,
		MinTokens:            1000,
		ITLRatio:             2,
		MinITLSeconds:        0.05, // 20 tokens/s per request
		BatchTolerance:       0.25,
		ArrivalEndpoints:     DefaultInferenceEndpoints,
		RetractionsPerSecond: 0.1,
		CriticalITLRatio:     4,
		RecoveredRatio:       1.5,
		BaselineCoverage:     DefaultBaselineCoverage(),
	}
}

// The methods below make DecodeSlowdownConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c DecodeSlowdownConfig) class() Class                   { return DecodeSlowdown }
func (c DecodeSlowdownConfig) enabled() bool                  { return c.Enabled }
func (c DecodeSlowdownConfig) disabled() DecodeSlowdownConfig { c.Enabled = false; return c }
func (c DecodeSlowdownConfig) usesTriage() bool               { return true }
func (c DecodeSlowdownConfig) needs() []need {
	return []need{{class: DecodeSlowdown, what: "the inter-token latency histogram and the running batch",
		anyOf: [][]string{{series.InterTokenLatency + "_count", series.NumRunningReqs}}, skip: []string{"prefill"}, afterTraffic: true}}
}
func (c DecodeSlowdownConfig) reads() []string {
	return []string{series.InterTokenLatency, series.NumRunningReqs, series.DecodeSumSeqLens, series.GenThroughput,
		series.RealtimeTokensTotal, series.PrefillEffectiveTokens, series.CachedTokensTotal, series.PromptTokensTotal,
		series.HTTPRequestsTotal, series.NumRequestsTotal, series.RetractedRequestsTotal, series.LoraPoolUtilization,
		specAcceptLength}
}
func (c DecodeSlowdownConfig) lookback() time.Duration {
	return c.Range + c.Baseline
}

func (c DecodeSlowdownConfig) build(env buildEnv) Detector {
	return &DecodeSlowdownDetector{cfg: c, triage: env.triage}
}

func (c DecodeSlowdownConfig) oneShot(lookback time.Duration, samples int) (DecodeSlowdownConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	return c, OneShot{Judged: false, Note: "needs history: inter-token latency is compared with its baseline at the same batch size — see the inter-token p99 above"}
}

func (c DecodeSlowdownConfig) validate(e *configErrors) {
	c.BaselineCoverage.validate(e)
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.positive("min_tokens", c.MinTokens)
	e.check(c.ITLRatio > 1, "itl_ratio", "must be greater than 1, got %v", c.ITLRatio)
	e.positive("min_itl_seconds", c.MinITLSeconds)
	e.fraction("batch_tolerance", c.BatchTolerance)
	e.endpoints("arrival_endpoints", c.ArrivalEndpoints)
	e.positive("retractions_per_second", c.RetractionsPerSecond)
	e.check(c.CriticalITLRatio >= c.ITLRatio, "critical_itl_ratio", "must be at least itl_ratio (%v), got %v", c.ITLRatio, c.CriticalITLRatio)
	e.check(c.RecoveredRatio > 1, "recovered_ratio", "must be greater than 1, got %v", c.RecoveredRatio)
	if c.ITLRatio > 1 {
		e.check(c.RecoveredRatio <= c.ITLRatio, "recovered_ratio", "must be at most itl_ratio (%v), got %v", c.ITLRatio, c.RecoveredRatio)
	}
}

// severities lists what its findings can carry; its runbook describes each.
func (c DecodeSlowdownConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: on the mechanism chain, after the KV pressure: slower decode
// holds slots longer, so the queue (queue_latency) grows.
func (c DecodeSlowdownConfig) position(Finding) position { return position{stage: 45} }

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c DecodeSlowdownConfig) doc() doc {
	return doc{
		name:     "Decode slowdown",
		means:    "inter-token latency up at the same batch size",
		signals:  "GPU side: throttling, noisy neighbour, interconnect; once established it holds while ITL stays above its level before the slowdown, even after the backlog changes the batch",
		settings: "Inter-token latency up at an unchanged batch size (GPU side).",
	}
}
