package diagnose

import (
	"fmt"
	"strings"
	"time"
)

// Layers of the triage verdict (Verdict.Layer).
const (
	LayerAdmission = "admission" // queued requests are not admitted: scheduling side
	LayerSaturated = "saturated" // the batch is full and a queue forms: load, not a fault
	LayerExecution = "execution" // few wait, yet single requests are slow: prefill or decode
	LayerStuck     = "stuck"     // requests held, no decode progress
	LayerHealthy   = "healthy"   // nothing queues, latency normal
	LayerIdle      = "idle"      // no traffic
	LayerDown      = "down"      // the last scrape failed
	LayerUnknown   = "unknown"   // running/queued not exposed (a gateway, or metrics missing)
	triageRunbook  = "/runbooks/triage"
)

// Thresholds are the absolute limits of the one-shot triage. Without
// history there is no baseline, so "high" means above these.
type Thresholds struct {
	QueueHigh  float64 // queued requests at which "queued is high"; default 10
	TTFTHigh   float64 // TTFT p99 seconds that count as high latency; default 2.5
	ITLHigh    float64 // inter-token latency p99 seconds that count as high; default 0.2
	KVFull     float64 // KV usage (0-1) that counts as a full pool; default 0.9
	QueueShare float64 // mean queue wait / mean TTFT at which the queue dominates; default 0.5
	// StuckMinSpan is the shortest observation over which a flat decode
	// counter with running requests means "stuck"; default 10s. SGLang
	// moves the counter every --decode-log-interval (40) decode steps, so
	// the span must also cover 40 inter-token p99s when those are known.
	StuckMinSpan time.Duration
}

// DefaultThresholds are conservative values for a one-shot.
func DefaultThresholds() Thresholds {
	return Thresholds{QueueHigh: 10, TTFTHigh: 2.5, ITLHigh: 0.2, KVFull: 0.9, QueueShare: 0.5, StuckMinSpan: 10 * time.Second}
}

// Verdict is the layer triage of one replica, following the runbook's
// table: running versus queued versus latency.
type Verdict struct {
	Layer   string `json:"layer"`
	Label   string `json:"label"`
	Reason  string `json:"reason"`    // the numbers that decided it
	Next    string `json:"next_step"` // what to look at next
	Runbook string `json:"runbook"`
}

func val(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

// Triage derives the layer from the state. The cap of the batch is
// max_running_requests when exposed (2024 releases only); otherwise a full
// KV pool says the batch is bound by memory and a pool with room says it
// is at --max-running-requests. It is deliberately simple and
// states its reason, so an engineer can overrule it:
//
//	running > 0, decode counter flat       stuck (no progress), over >= StuckMinSpan
//	queued high, batch below its cap       admission bottleneck
//	queued high, batch at its cap          saturated but working
//	latency high, queue wait dominates     admission bottleneck (scheduling side)
//	latency high otherwise                 single-request execution side
//	nothing running or queued              idle
//	else                                   healthy
func Triage(s State, th Thresholds) Verdict {
	running, okR := val(s.RunningRequests)
	queued, okQ := val(s.QueuedRequests)
	kv, okKV := val(s.KVUsage)
	v := Verdict{Runbook: triageRunbook}
	if !okR && !okQ {
		v.Layer, v.Label = LayerUnknown, "unknown"
		v.Reason = "neither sglang:num_running_reqs nor sglang:num_queue_reqs is exposed (a gateway, or the engine's scheduler metrics are missing)"
		v.Next = "triage each engine behind it directly"
		return v
	}

	var lat []string
	ttft, okT := val(s.TTFTP99)
	itl, okI := val(s.ITLP99)
	if okT && ttft >= th.TTFTHigh {
		lat = append(lat, fmt.Sprintf("TTFT p99 %s", secs(ttft)))
	}
	if okI && itl >= th.ITLHigh {
		lat = append(lat, fmt.Sprintf("inter-token p99 %s", secs(itl)))
	}
	latencyHigh := len(lat) > 0
	qMean, okQM := val(s.QueueTimeMean)
	tMean, okTM := val(s.TTFTMean)
	queueDominates := okQM && okTM && tMean > 0 && qMean >= th.QueueShare*tMean
	kvText := ""
	if okKV {
		kvText = fmt.Sprintf(", KV pool %.0f%% full", 100*kv)
	}
	counts := fmt.Sprintf("%s running, %s queued%s", count(s.RunningRequests), count(s.QueuedRequests), kvText)

	switch {
	case okR && running > 0 && s.DecodeProgress != nil && *s.DecodeProgress == 0 && longEnoughForStuck(s, th):
		v.Layer, v.Label = LayerStuck, "stuck (no progress)"
		v.Reason = counts + ", yet the decode token counter did not move between the scrapes: the scheduler gauges are frozen at their last values"
		v.Next = "probe /health_generate, dump every rank's stack (py-spy dump), look for NCCL waits (runbook: engine_hang)"
	case okQ && queued >= th.QueueHigh && !atCap(s, running, okKV && kv >= th.KVFull):
		v.Layer, v.Label = LayerAdmission, "admission bottleneck"
		v.Reason = counts + ": requests wait while the batch is below its cap"
		if okKV && kv >= th.KVFull {
			v.Reason += "; the KV pool is full, so admission waits for KV space (memory chain: evictions, retractions, a falling hit rate)"
			v.Next = "check retractions and the prefix hit rate; cap prompt length/max_tokens or lower --max-running-requests (runbooks: kv_saturation, preempt_storm)"
		} else {
			v.Reason += " with KV room to spare: the scheduler is not forming batches"
			v.Next = "check the prefill budget (--max-prefill-tokens, --chunked-prefill-size) and long prompts blocking admission (runbook: queue_latency)"
		}
		if queueDominates {
			v.Reason += fmt.Sprintf("; queue wait is %s of %s TTFT on average", secs(qMean), secs(tMean))
		}
	case okQ && queued >= th.QueueHigh:
		v.Layer, v.Label = LayerSaturated, "saturated but working"
		v.Reason = counts + ": the batch is at its cap"
		if s.MaxRunningRequests == nil {
			v.Reason += " (most likely --max-running-requests: the KV pool has room, so nothing else holds admission back)"
		}
		v.Reason += " and a queue forms — the replica does what it can"
		if queueDominates {
			v.Reason += fmt.Sprintf("; queue wait is %s of %s TTFT on average", secs(qMean), secs(tMean))
		}
		v.Next = "add capacity or shed load at the router; check for client retries feeding the load (runbook: retry_avalanche)"
	case latencyHigh && queueDominates:
		v.Layer, v.Label = LayerAdmission, "admission bottleneck"
		v.Reason = fmt.Sprintf("%s; %s, of which queue wait is %s of %s on average: the time goes into waiting, not prefill",
			counts, strings.Join(lat, ", "), secs(qMean), secs(tMean))
		v.Next = "fix the scheduling side, not the GPU: admission limits, priority, bursts (runbook: queue_latency)"
	case latencyHigh:
		v.Layer, v.Label = LayerExecution, "single-request execution side"
		v.Reason = fmt.Sprintf("%s; %s: requests do not wait, each is slow on its own", counts, strings.Join(lat, ", "))
		if okQM && okTM && tMean > 0 {
			v.Reason += fmt.Sprintf(" (queue wait %s of %s TTFT on average)", secs(qMean), secs(tMean))
		}
		v.Next = "find a slow request by rid in the request log, split its timeline (queue/prefill/decode), then profile that stage (runbooks: decode_slowdown, triage)"
	case okR && okQ && running == 0 && queued == 0:
		v.Layer, v.Label = LayerIdle, "idle"
		v.Reason = "nothing running or queued"
		v.Next = "if clients see errors, check the router sends traffic here"
	default:
		v.Layer, v.Label = LayerHealthy, "healthy"
		v.Reason = counts + ", latency within the one-shot limits"
		v.Next = "nothing to do here"
	}
	return v
}

// decodeLogInterval is SGLang's default --decode-log-interval: the decode
// counter and the scheduler gauges move once per this many decode steps.
const decodeLogInterval = 40

// longEnoughForStuck reports whether the observation is long enough for a
// flat decode counter to mean no progress rather than slow progress.
func longEnoughForStuck(s State, th Thresholds) bool {
	if s.ObservedSeconds < th.StuckMinSpan.Seconds() {
		return false
	}
	itl, ok := val(s.ITLP99)
	return !ok || s.ObservedSeconds >= decodeLogInterval*itl
}

// atCap reports whether the running batch is at its cap: near the
// exposed max_running_requests when there is one; otherwise inferred
// from the KV pool, the other thing that holds admission back — a full
// pool means the batch is bound by memory (below its cap), a pool with
// room means it is bound by the cap.
func atCap(s State, running float64, kvFull bool) bool {
	if c, ok := val(s.MaxRunningRequests); ok && c > 0 {
		return running >= 0.9*c
	}
	return !kvFull
}
