package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// TriageVerdict is the runbook's first cut of a latency problem: which side
// of the scheduler the time goes to, read from running vs waiting requests.
type TriageVerdict string

// Triage verdicts. The first three are the runbook's table; the others
// cover the remaining combinations honestly.
const (
	// TriageAdmission: few requests run while many wait — the scheduler
	// cannot admit (KV pool full, --max-running-requests, batches that
	// cannot form).
	TriageAdmission TriageVerdict = "admission_bottleneck"
	// TriageSaturated: the batch is at its cap and requests still wait —
	// working correctly, short of capacity.
	TriageSaturated TriageVerdict = "saturated"
	// TriageExecution: few running, few waiting, latency high — each
	// request is slow on its own (prefill or decode execution).
	TriageExecution TriageVerdict = "single_request_execution"
	// TriageFullBatch: the batch is full but nothing waits — per-request
	// latency comes from the batch size.
	TriageFullBatch TriageVerdict = "full_batch"
	// TriageNoPressure: few running, few waiting, latency normal.
	TriageNoPressure TriageVerdict = "no_pressure"
	// TriageStuck: requests are held but decoding makes no progress — a
	// hang (see engine_hang) or a stall.
	TriageStuck TriageVerdict = "stuck"
	// TriageUnknown: the replica does not expose the running/queued gauges.
	TriageUnknown TriageVerdict = "unknown"
)

// TriageResult is the layer triage of one replica at one time.
type TriageResult struct {
	Verdict TriageVerdict `json:"verdict"`
	// Layer is where the triage points; empty for the execution side,
	// where prefill vs decode is the latency detector's call.
	Layer Layer `json:"layer,omitempty"`
	// Running and Queued are num_running_reqs and num_queue_reqs averaged
	// over the triage range.
	Running  float64 `json:"running"`
	Queued   float64 `json:"queued"`
	QueuedOK bool    `json:"-"`
	// Capacity is what Running is compared with: max_running_requests
	// when exposed (CapacityKnown), else the highest num_running_reqs in
	// the lookback — the most the batch ran, not its configured cap.
	Capacity       float64 `json:"capacity,omitempty"`
	CapacitySource string  `json:"capacity_source,omitempty"`
	CapacityKnown  bool    `json:"capacity_known,omitempty"`
	// KVUsage is the highest KV cache usage (0-1) in the triage range, of
	// the fullest data-parallel rank: what the KV detectors' verdicts read.
	// KVFull is KVUsage at or above the configured "full".
	KVUsage   float64 `json:"kv_usage,omitempty"`
	KVUsageOK bool    `json:"-"`
	KVFull    bool    `json:"kv_full,omitempty"`
	// RunningHigh: the batch is at its cap — near the configured cap, or
	// near the most it ran while something shows it cannot grow (requests
	// wait, the KV pool is full).
	RunningHigh bool `json:"running_high"`
	// NearMost: near the most the batch ran, without anything showing it
	// cannot grow (a steady replica sits at its own maximum).
	NearMost bool `json:"near_most,omitempty"`
	// WaitingHigh: the queue is long against the batch (a count).
	WaitingHigh bool `json:"waiting_high"`
	LatencyHigh bool `json:"latency_high"`
	// QueueWaitShare is the mean queue wait over the mean time to first
	// token, when latency is high and the wait dominates it: requests wait
	// for admission even if the queue is short.
	QueueWaitShare float64 `json:"queue_wait_share,omitempty"`
	// Reason states the numbers behind the verdict; NextStep what to do.
	Reason   string `json:"reason"`
	NextStep string `json:"next_step"`
}

// Waiting reports whether requests wait for admission: a long queue, or a
// queue wait that dominates the time to first token.
func (t TriageResult) Waiting() bool { return t.WaitingHigh || t.QueueWaitShare > 0 }

// BelowCap reports whether the batch runs clearly below its cap (or below
// the most it ran, when the cap is not exposed).
func (t TriageResult) BelowCap() bool { return t.Capacity > 0 && !t.RunningHigh && !t.NearMost }

// RoomLeft reports whether the numbers show room the scheduler does not
// use: the batch below its cap and the KV pool known to have room.
func (t TriageResult) RoomLeft() bool { return t.BelowCap() && t.KVUsageOK && !t.KVFull }

// verdictName is the verdict in words; Label adds the numbers' facts.
func verdictName(v TriageVerdict) (string, bool) {
	switch v {
	case TriageAdmission:
		return "admission bottleneck", true
	case TriageSaturated:
		return "saturated but working", true
	case TriageExecution:
		return "single-request execution side", true
	case TriageFullBatch:
		return "full batch", true
	case TriageNoPressure:
		return "no load pressure", true
	case TriageStuck:
		return "stuck (requests held, no decode progress)", true
	}
	return "", false
}

// Label is the verdict in words with the facts it rests on, each read from
// the numbers the triage line prints (Reason), so the two cannot disagree.
func (t TriageResult) Label() string {
	name, ok := verdictName(t.Verdict)
	if !ok {
		return "unknown (running/queued gauges not exposed)"
	}
	if t.Verdict == TriageStuck {
		return name
	}
	return name + " (" + strings.Join(t.facts(), ", ") + ")"
}

// facts are the triage's readings in words: the batch against its cap,
// the queue, the KV pool and, when they decided the verdict, latency and
// queue wait.
func (t TriageResult) facts() []string {
	var out []string
	switch {
	case t.Capacity <= 0:
		out = append(out, "batch cap unknown")
	case t.RunningHigh && t.CapacityKnown:
		out = append(out, "running at its cap")
	case t.RunningHigh:
		out = append(out, "running at the most it ran, cap not exposed")
	case t.NearMost:
		out = append(out, "running near the most it ran, cap not exposed")
	case t.CapacityKnown:
		out = append(out, "running below its cap")
	default:
		out = append(out, "running below the most it ran, cap not exposed")
	}
	switch {
	case t.WaitingHigh:
		out = append(out, "many waiting")
	case t.QueueWaitShare > 0:
		out = append(out, "requests wait "+pct(t.QueueWaitShare)+" of their time to first token")
	default:
		out = append(out, "few waiting")
	}
	switch {
	case t.KVFull:
		out = append(out, "KV pool full")
	case t.KVUsageOK:
		out = append(out, "KV room left")
	}
	if t.Verdict == TriageExecution || t.Verdict == TriageNoPressure {
		if t.LatencyHigh {
			out = append(out, "latency high")
		} else {
			out = append(out, "latency normal")
		}
	}
	return out
}

// String is the one line a page shows: verdict, numbers, next step.
func (t TriageResult) String() string {
	s := t.Label()
	if t.Reason != "" {
		s += ": " + t.Reason
	}
	if t.NextStep != "" {
		s += ". Next step: " + t.NextStep
	}
	return s
}

// Evidence renders the numbers the triage rests on.
func (t TriageResult) Evidence() []Evidence {
	if t.Verdict == TriageUnknown {
		return nil
	}
	e := []Evidence{{Name: "triage: running requests (avg)", Value: t.Running}}
	if t.Capacity > 0 {
		e[0].Baseline, e[0].HasBaseline = t.Capacity, true
		e[0].Threshold = "high when near " + t.CapacitySource
	}
	if t.QueuedOK {
		e = append(e, Evidence{Name: "triage: queued requests (avg)", Value: t.Queued})
	}
	return e
}

// Reads are the families the triage reads (every replica gets one each
// round, so they are always kept).
func (c TriageConfig) Reads() []string {
	return append(kvUsageFamilies(), series.NumRunningReqs, series.NumQueueReqs, maxRunningRequests,
		series.TTFTSeconds, series.QueueTimeSeconds, series.InterTokenLatency, series.E2ERequestLatency,
		series.RealtimeTokensTotal)
}

// KnownLatency is what the caller's detectors already established about
// a replica's latency, so the triage does not judge it a second way.
type KnownLatency int

const (
	// LatencyToJudge: nothing established; the triage judges latency
	// from the p99s and means.
	LatencyToJudge KnownLatency = iota
	// LatencyHigh: a latency finding (time to first token, a cache
	// collapse that slowed it, a storm that slowed the decode).
	LatencyHigh
	// DecodeSlower: the decode itself is slower at unchanged work
	// (decode_slowdown), which also makes arriving requests wait.
	DecodeSlower
)

// highIf is LatencyHigh when a detector's own numbers show latency up,
// else LatencyToJudge.
func highIf(up bool) KnownLatency {
	if up {
		return LatencyHigh
	}
	return LatencyToJudge
}

// Classify triages the replica at now, given what the caller knows of its
// latency; what it does not know is judged here from the p99s.
//
// Every verdict is defined by the facts its label prints: saturated is the
// batch at its cap with requests waiting; an admission bottleneck is
// requests waiting with the batch below its cap (or its cap unknown); a
// full batch is the batch at its cap with few waiting; the execution side
// and no pressure are neither, with latency high or normal. "At its cap"
// is near max_running_requests when the replica exposes it; otherwise near
// the most the batch ran in the capacity lookback, and only when waiting
// requests or a full KV pool show the batch cannot grow.
func (c TriageConfig) Classify(w Window, now time.Time, known KnownLatency) TriageResult {
	var t TriageResult
	from := now.Add(-c.Range)
	running, okR := w.Avg(Sel(series.NumRunningReqs), from, now)
	queued, okQ := w.Avg(Sel(series.NumQueueReqs), from, now)
	if !okR || !okQ {
		t.Verdict = TriageUnknown
		t.NextStep = "read num_running_reqs and num_queue_reqs on the replica (curl /metrics) and place it in the runbook's triage table by hand"
		return t
	}
	t.Running, t.Queued, t.QueuedOK = running, queued, true

	if v, ok := w.Last(Sel(maxRunningRequests)); ok && v > 0 {
		t.Capacity, t.CapacitySource, t.CapacityKnown = v, "max_running_requests", true
	} else if v, ok := w.Max(Sel(series.NumRunningReqs), now.Add(-c.CapacityLookback), now); ok && v > 0 && c.seenLongEnough(w, now) {
		t.Capacity, t.CapacitySource = v, "the most running in the last "+ShortDuration(c.CapacityLookback)
	}
	// KV usage is read as its highest value in the range, on the fullest
	// rank, the way preempt_storm reads "KV pool full". A pool that is full
	// blocks admission whenever it is full: between bursts of retractions
	// it drains for a moment, so an average over the range (0.545 where the
	// pool hit 100% every few scrapes) would call a memory-bound replica
	// "room left" and send on-call to --max-running-requests. The verdict
	// that claims unused room must only be given when the pool never filled.
	t.KVUsage, t.KVUsageOK = kvUsage(w, w.Max, from, now)
	t.KVFull = t.KVUsageOK && t.KVUsage >= c.KVFullUsage

	latencyHigh, slow := known >= LatencyHigh, ""
	if !latencyHigh {
		latencyHigh, slow = c.latencyUp(w, now)
	}
	t.LatencyHigh = latencyHigh
	t.WaitingHigh = queued >= c.MinQueued && queued >= c.QueuedToRunning*running
	queueWait, waitOK := c.queueWaitShare(w, from, now)
	// Slower decode steps hold every slot longer, so requests that arrive
	// wait. With few queued and room in the KV pool, their queue wait is
	// that backlog, not admission holding them, and the line says so
	// instead of sending on-call to the scheduler's settings.
	backlog := ""
	if latencyHigh && waitOK && queueWait.share >= c.QueueWaitShare {
		itl, slower := c.decodeSlower(w, now)
		if (slower || known == DecodeSlower) && !t.WaitingHigh && !t.KVFull {
			backlog = "the backlog of slower decode steps"
			// The decode detector's finding gives the inter-token
			// latency against the baseline before the slowdown on the
			// same page; a second baseline from the triage's own hour
			// would contradict it.
			if slower && known != DecodeSlower {
				backlog += " (" + itl + ")"
			}
		} else {
			t.QueueWaitShare = queueWait.share
		}
	}

	nearCap := t.Capacity > 0 && running >= c.RunningHighFraction*t.Capacity && running >= c.MinRunning
	// Without the configured cap, "at the most it ran" only means "at its
	// cap" when the batch evidently cannot grow: requests wait, or the KV
	// pool is full. A steady replica always sits at its own recent maximum.
	t.RunningHigh = nearCap && (t.CapacityKnown || t.Waiting() || t.KVFull)
	t.NearMost = nearCap && !t.RunningHigh

	// The counts are averages over the range (a page's headline may show
	// the last value), so the line says so.
	nums := fmt.Sprintf("%s running", num(running))
	switch {
	case t.CapacityKnown:
		nums += fmt.Sprintf(" (cap %s, from max_running_requests)", num(t.Capacity))
	case t.Capacity > 0:
		nums += fmt.Sprintf(" (the most in the last %s: %s; the cap is not exposed)", ShortDuration(c.CapacityLookback), num(t.Capacity))
	default:
		nums += " (the cap is not exposed)"
	}
	nums += fmt.Sprintf(", %s queued, both averaged over the last %s", num(queued), ShortDuration(c.Range))
	if t.KVUsageOK {
		nums += fmt.Sprintf(", KV cache usage up to %s%%", num(t.KVUsage*100))
	}
	if slow != "" {
		nums += ", " + slow
	}
	if backlog != "" {
		nums += fmt.Sprintf(", mean queue wait %s s of mean TTFT %s s over the last %s, %s",
			num(queueWait.wait), num(queueWait.ttft), ShortDuration(c.Range), backlog)
	}
	if t.QueueWaitShare > 0 {
		// Means over the range, not the tail a page's TTFT percentiles
		// give: the line names both so it does not read as contradicting them.
		nums += fmt.Sprintf(", mean queue wait %s s of mean TTFT %s s over the last %s", num(queueWait.wait), num(queueWait.ttft), ShortDuration(c.Range))
	}
	t.Reason = nums
	progress, progressOK := decodeProgress(w, from, now)

	switch {
	case progressOK && progress == 0 && running >= 1 && c.Range >= c.StuckMinRange:
		t.Verdict, t.Layer = TriageStuck, LayerProcess
		t.Reason = nums + fmt.Sprintf(", the decode progress counter did not move in %s", ShortDuration(c.Range))
		t.NextStep = "requests are held but nothing is generated: probe /health_generate, read the scheduler's last log lines and py-spy dump the scheduler process; a collective (NCCL) hang needs a restart of every rank (see engine_hang)"
	case t.RunningHigh && t.Waiting():
		t.Verdict, t.Layer = TriageSaturated, LayerQueue
		t.NextStep = "the replica works at its limit and requests wait for a slot: add replicas or shed load at the router (max concurrency with a fast 503)"
		if t.KVFull {
			t.NextStep = "the replica works at its limit and the KV pool is full, so requests wait for memory as much as for a slot: add replicas or shed load at the router (max concurrency with a fast 503); do not raise --max-running-requests, the pool has no room for more"
		}
	case t.Waiting() && t.KVFull:
		t.Verdict, t.Layer = TriageAdmission, LayerMemory
		t.NextStep = "admission is blocked by KV memory (the pool is full, waiting requests cannot be admitted): find what holds the KV — long outputs without max_new_tokens, a collapsed prefix hit rate, retractions (see kv_saturation, cache_collapse, preempt_storm)"
	case t.Waiting():
		t.Verdict, t.Layer = TriageAdmission, LayerQueue
		t.NextStep = c.admissionStep(t)
	case t.RunningHigh:
		t.Verdict, t.Layer = TriageFullBatch, LayerDecode
		t.NextStep = "every request shares a full batch, so per-request latency follows the batch size: if the latency target matters more than throughput, lower --max-running-requests (read the current value from " + ServerInfo + ") or add replicas"
		if t.KVFull && !t.CapacityKnown {
			t.NextStep = "the batch is as large as the KV pool allows and few wait yet: there is no headroom for a burst; per-request latency follows the batch size — add replicas before the queue starts to grow"
		}
	case t.LatencyHigh:
		t.Verdict = TriageExecution
		t.NextStep = "neither admission nor load explains the latency, the time goes into executing single requests: pick slow requests by rid in the request log, split their timeline (queue wait, prefill, decode; sglang:per_stage_req_latency_seconds), and only then profile the slow stage (torch profiler, nsys)"
	default:
		t.Verdict = TriageNoPressure
		t.NextStep = "nothing to triage: latency and load are normal"
	}
	return t
}

// ExplainedBy gives the execution-side verdict the cause a finding on the
// replica names (a thrashing LoRA pool, a slower decode, a collapsed prefix
// cache): with a cause on the page, splitting request timelines and then
// profiling is the wrong first move, so the step points at that finding's
// steps. The other verdicts keep their steps, which follow from the load.
func (t TriageResult) ExplainedBy(cause Class) TriageResult {
	if t.Verdict == TriageExecution && cause != "" {
		t.NextStep = "neither admission nor load explains the latency, the time goes into executing single requests, which this replica's " +
			Title(cause) + " finding explains: take its steps first, and split slow requests' timelines (sglang:per_stage_req_latency_seconds) only if the latency outlasts it"
	}
	return t
}

// admissionStep is the next step for requests waiting while the batch is
// not at its cap and the KV pool not full: what it says depends on what
// the numbers show of the cap and the pool.
func (c TriageConfig) admissionStep(t TriageResult) string {
	prefix := ""
	if t.QueueWaitShare > 0 && !t.WaitingHigh {
		prefix = "the time to first token goes to waiting for admission, the scheduling side: "
	}
	prefill := "check what keeps a prefill batch from forming: --max-prefill-tokens and --chunked-prefill-size against the prompt lengths, very long prompts (the scheduler's \"Prefill batch\" log lines) and the grammar queue (sglang:num_grammar_queue_reqs)"
	kv := ""
	if !t.KVUsageOK {
		kv = "; KV usage is not exposed: a full pool blocks admission too (token usage in the scheduler's \"Decode batch\" log lines)"
	}
	switch {
	case t.CapacityKnown:
		room := "below its cap"
		if t.RoomLeft() {
			room = "below its cap with KV room left: the scheduler leaves room unused, so"
		} else {
			room += ", so"
		}
		return prefix + "requests wait while the batch runs " + room + " the cap is not what holds them — " + prefill + kv
	case t.Capacity > 0:
		return prefix + "requests wait while the batch runs below the most it ran (" + num(t.Capacity) + "): read the current --max-running-requests from " + ServerInfo +
			" — if the batch sits at it, the cap was lowered and the replica is saturated at it (add replicas or shed load); if not, " + prefill + kv
	}
	return prefix + "the batch cap is not exposed: read --max-running-requests from " + ServerInfo +
		" — if the batch sits at it, the replica is saturated (add replicas or shed load); if not, " + prefill + kv
}

// seenLongEnough reports whether the window covers enough history for the
// highest running count to stand for the batch cap: ten triage ranges, or
// the whole capacity lookback if shorter. Over a few scrapes the batch
// always sits at its own maximum.
func (c TriageConfig) seenLongEnough(w Window, now time.Time) bool {
	first := w.Scrape().FirstSeen
	return !first.IsZero() && now.Sub(first) >= min(c.CapacityLookback, 10*c.Range)
}

// latencyUp judges latency on its own: the p99 or the mean of TTFT,
// inter-token or end-to-end latency over the triage range at least
// LatencyRatio times its baseline. The mean matters because the triage
// range is short: an incident that began before it has already put a few
// percent of slow requests into the baseline, enough to lift its p99 but
// not its mean. Where no baseline covers a family (a young replica, a
// one-shot), its p99 is compared with the absolute SlowTTFT or
// SlowInterToken instead, and slow names the number that was high.
func (c TriageConfig) latencyUp(w Window, now time.Time) (up bool, slow string) {
	p := newPeriods(now, c.Range, c.LatencyBaseline)
	for _, fam := range []string{series.TTFTSeconds, series.InterTokenLatency, series.E2ERequestLatency} {
		q := p.quantile(w, 0.99, fam)
		if g, ok := q.growth(); ok && g >= c.LatencyRatio {
			return true, ""
		}
		if g, ok := p.histMean(w, fam).growth(); ok && g >= c.LatencyRatio {
			return true, ""
		}
		if q.baseOK || !q.nowOK {
			continue
		}
		switch {
		case fam == series.TTFTSeconds && q.now >= c.SlowTTFT.Seconds():
			return true, fmt.Sprintf("time-to-first-token p99 %s s", num(q.now))
		case fam == series.InterTokenLatency && q.now >= c.SlowInterToken.Seconds():
			return true, fmt.Sprintf("inter-token p99 %s s", num(q.now))
		}
	}
	return false, ""
}

// decodeSlower reports whether the inter-token latency over the range is
// at least LatencyRatio times its baseline, by p99 or by mean (the mean
// because a baseline that already holds the start of the slowdown has a
// slow p99), and names the one that shows it.
func (c TriageConfig) decodeSlower(w Window, now time.Time) (string, bool) {
	p := newPeriods(now, c.Range, c.LatencyBaseline)
	for _, m := range []struct {
		name string
		m    measure
	}{{"p99", p.quantile(w, 0.99, series.InterTokenLatency)}, {"mean", p.histMean(w, series.InterTokenLatency)}} {
		if g, ok := m.m.growth(); ok && g >= c.LatencyRatio {
			return fmt.Sprintf("inter-token %s %s s, baseline %s s", m.name, num(m.m.now), num(m.m.base)), true
		}
	}
	return "", false
}

type queueWait struct{ wait, ttft, share float64 }

// queueWaitShare is the mean queue wait over the mean time to first token
// in (from, now].
func (c TriageConfig) queueWaitShare(w Window, from, now time.Time) (queueWait, bool) {
	mean := func(fam string) (float64, bool) {
		sumName, countName := histSeries(fam)
		n, okN := w.Increase(Sel(countName), from, now)
		sum, okS := w.Increase(Sel(sumName), from, now)
		if !okN || !okS || n <= 0 {
			return 0, false
		}
		return sum / n, true
	}
	wait, okW := mean(series.QueueTimeSeconds)
	ttft, okT := mean(series.TTFTSeconds)
	if !okW || !okT || ttft <= 0 {
		return queueWait{}, false
	}
	return queueWait{wait: wait, ttft: ttft, share: wait / ttft}, true
}

// decodeProgress is how far the realtime decode token counter moved in
// (from, now]. Older releases count generated tokens only when a request
// finishes, so a long generation looks flat there: no verdict from them.
func decodeProgress(w Window, from, now time.Time) (float64, bool) {
	if !w.Has(series.RealtimeTokensTotal) {
		return 0, false
	}
	return w.Increase(Sel(series.RealtimeTokensTotal, "mode", "decode"), from, now)
}

// annotate gives a finding the triage: the page line and the verdict.
// The line is not repeated in the diagnosis nor its numbers in the
// evidence: a page shows the triage once, and the assessment replaces it
// with the replica's one triage of the round.
func (t TriageResult) annotate(f *Finding) {
	f.Triage = t.String()
	f.TriageVerdict = t.Verdict
}
