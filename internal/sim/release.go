package sim

// Release is the SGLang release whose /metrics a simulated server speaks.
// The engine underneath is the same; only the exposition differs, as it
// does between releases of the same scheduler.
type Release uint8

const (
	// ReleaseCurrent is the current collector, as the reference capture
	// (sglang-current-full.prom) renders it.
	ReleaseCurrent Release = iota
	// ReleaseSep2025 is the collector of about September 2025, the v0.5.1
	// to v0.5.3 line ("C2", python/sglang/srt/metrics/collector.py at
	// 93d04878, in ../shared/reference/sglang-metrics.md). It has no
	// retraction counters: only the lossy gauge sglang:num_retracted_reqs,
	// the size of the last retraction reset at each report, says that
	// retractions happened. It lacks every family the reference dates
	// after it (realtime and effective prefill tokens, the KV slot gauges,
	// new_token_ratio, decode_sum_seq_lens, full_token_usage, evictions,
	// the constants, startup times, the tokenizer CPU), and the token
	// histograms, which it records only with --collect-tokens-histogram.
	// Its tokenizer families carry model_name only (no is_streaming, no
	// engine_type), cached_tokens_total no cache_source, its scheduler
	// families no moe_ep_rank (absent in a v0.5.1 capture), and its
	// queue-time buckets lack 1, 5, 10 and 50 ms. The HTTP middleware
	// families, whose first release the reference does not pin, are kept.
	ReleaseSep2025
)

// absentSep2025 are the families ReleaseSep2025 does not expose.
var absentSep2025 = map[string]bool{
	"sglang:num_retracted_requests_total":      true,
	"sglang:num_retracted_input_tokens_total":  true,
	"sglang:num_retracted_output_tokens_total": true,
	"sglang:realtime_tokens_total":             true,
	"sglang:prefill_effective_tokens_total":    true,
	"sglang:decode_sum_seq_lens":               true,
	"sglang:full_token_usage":                  true,
	"sglang:kv_available_tokens":               true,
	"sglang:kv_evictable_tokens":               true,
	"sglang:kv_used_tokens":                    true,
	"sglang:new_token_ratio":                   true,
	"sglang:evicted_tokens_total":              true,
	"sglang:max_total_num_tokens":              true,
	"sglang:context_len":                       true,
	"sglang:page_size":                         true,
	"sglang:num_pages":                         true,
	"sglang:startup_time_seconds":              true,
	"sglang:process_cpu_seconds_total":         true,
	"sglang:uncached_prompt_tokens_histogram":  true,
	"sglang:prompt_tokens_histogram":           true,
	"sglang:generation_tokens_histogram":       true,
}

// helpSep2025 are the HELP texts ReleaseSep2025 words differently (as a
// mid-2025 capture, pr7944-2025-07-pd-kv-transfer.prom, has them).
var helpSep2025 = map[string]string{
	"sglang:cached_tokens_total": "Number of cached prompt tokens.",
}

// exposes reports whether release rel has the family name.
func (rel Release) exposes(name string) bool {
	return rel != ReleaseSep2025 || !absentSep2025[name]
}

// help is the HELP text of family name in release rel.
func (rel Release) help(name string) string {
	if h, ok := helpSep2025[name]; ok && rel == ReleaseSep2025 {
		return h
	}
	return families[name][1]
}

// queueTimeBound reports whether release rel's queue-time histogram has
// the bucket bound b.
func (rel Release) queueTimeBound(b float64) bool {
	return rel != ReleaseSep2025 || (b != 0.001 && b != 0.005 && b != 0.01 && b != 0.05)
}

// coarser is h with only the bounds keep admits: the observations of a
// dropped bucket fall into the next kept one, as they would have been
// counted by a collector without that bound.
func coarser(h *histogram, keep func(float64) bool) *histogram {
	out := &histogram{sum: h.sum}
	var carry float64
	for i, n := range h.counts {
		carry += n
		if i < len(h.bounds) && !keep(h.bounds[i]) {
			continue
		}
		if i < len(h.bounds) {
			out.bounds = append(out.bounds, h.bounds[i])
		}
		out.counts = append(out.counts, carry)
		carry = 0
	}
	return out
}

// merged is the histograms' observations together (same bounds).
func merged(hs ...*histogram) *histogram {
	out := &histogram{bounds: hs[0].bounds, counts: make([]float64, len(hs[0].counts))}
	for _, h := range hs {
		for i, n := range h.counts {
			out.counts[i] += n
		}
		out.sum += h.sum
	}
	return out
}
