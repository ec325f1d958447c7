package sim

import (
	"bytes"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Histogram bucket bounds, exactly as the current SGLang collector's
// defaults (see ../shared/fixtures/sglang/sglang-current-full.prom).
var (
	ttftBuckets       = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	e2eBuckets        = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400}
	interTokenBuckets = []float64{0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8}
	queueTimeBuckets  = []float64{0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100,
		200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000}
	tokenBuckets = []float64{100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500, 15000,
		17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000, 300000, 400000, 600000, 800000, 1e6, 1.1e6}
)

// histogram is a Prometheus histogram: non-cumulative counts per bucket
// (the last one is +Inf) and a sum.
type histogram struct {
	bounds []float64
	counts []float64
	sum    float64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]float64, len(bounds)+1)}
}

// observe records n observations of v. (SGLang's inter-token histogram
// adds n tokens to one bucket and the interval once to the sum; with n=1, as
// here, both readings agree.)
func (h *histogram) observe(v, n float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)] += n
	h.sum += v * n
}

// families is the name, type and HELP text of every family rendered, copied
// from the reference capture of the current collector.
var families = map[string][2]string{
	"sglang:queue_time_seconds":                {"histogram", "Histogram of queueing time in seconds."},
	"sglang:prompt_tokens_histogram":           {"histogram", "Histogram of prompt token length."},
	"sglang:uncached_prompt_tokens_histogram":  {"histogram", "Histogram of uncached (compute) prompt token length."},
	"sglang:generation_tokens_histogram":       {"histogram", "Histogram of generation token length."},
	"sglang:time_to_first_token_seconds":       {"histogram", "Histogram of time to first token in seconds."},
	"sglang:inter_token_latency_seconds":       {"histogram", "Histogram of inter-token latency in seconds."},
	"sglang:e2e_request_latency_seconds":       {"histogram", "Histogram of End-to-end request latency in seconds"},
	"sglang:num_retracted_requests_total":      {"counter", "Total number of retracted requests."},
	"sglang:num_retracted_input_tokens_total":  {"counter", "Total number of retracted input tokens."},
	"sglang:num_retracted_output_tokens_total": {"counter", "Total number of retracted output tokens."},
	"sglang:realtime_tokens_total":             {"counter", "Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode."},
	"sglang:prefill_effective_tokens_total":    {"counter", "Effective prefill tokens with retracted-request re-counts excluded, updated on each log interval. mode: device_hit, host_hit, storage_hit, input. Windowed prefix cache hit rate = rate(sum of *_hit) / rate(sum of all modes); per-tier rate uses a single *_hit mode in the numerator."},
	"sglang:prompt_tokens_total":               {"counter", "Number of prefill tokens processed."},
	"sglang:generation_tokens_total":           {"counter", "Number of generation tokens processed."},
	"sglang:cached_tokens_total":               {"counter", "Number of cached prompt tokens by source (device/host/storage)."},
	"sglang:num_requests_total":                {"counter", "Number of requests processed."},
	"sglang:num_aborted_requests_total":        {"counter", "Number of requests aborted."},
	"sglang:http_requests_total":               {"counter", "Total number of HTTP requests by endpoint and method"},
	"sglang:http_responses_total":              {"counter", "Total number of HTTP responses by endpoint and status code"},
	"sglang:process_cpu_seconds_total":         {"counter", "Total CPU time consumed by this process (user + system)"},
	"sglang:evicted_tokens_total":              {"counter", "The number of device KV token slots freed by eviction, regardless of whether the data was backed up to host (see sglang:hicache_backup_tokens_total) or destroyed (see sglang:hicache_dropped_tokens_total)."},
	"sglang:http_requests_active":              {"gauge", "Number of currently active HTTP requests"},
	"sglang:num_running_reqs":                  {"gauge", "The number of running requests."},
	"sglang:num_queue_reqs":                    {"gauge", "The number of requests in the waiting queue."},
	"sglang:num_grammar_queue_reqs":            {"gauge", "The number of requests in the grammar waiting queue."},
	"sglang:gen_throughput":                    {"gauge", "The generation throughput (token/s)."},
	"sglang:cache_hit_rate":                    {"gauge", "The prefix cache hit rate."},
	"sglang:decode_sum_seq_lens":               {"gauge", "The sum of all sequence lengths in decode."},
	"sglang:token_usage":                       {"gauge", "The token usage."},
	"sglang:full_token_usage":                  {"gauge", "The token usage for full attention layers."},
	"sglang:num_used_tokens":                   {"gauge", "The number of used tokens."},
	"sglang:kv_available_tokens":               {"gauge", "Number of free token slots in the KV cache pool."},
	"sglang:kv_evictable_tokens":               {"gauge", "Number of evictable (radix-cached) token slots in the KV cache pool."},
	"sglang:kv_used_tokens":                    {"gauge", "Number of actively used token slots in the KV cache pool."},
	"sglang:new_token_ratio":                   {"gauge", "The new token ratio."},
	"sglang:max_total_num_tokens":              {"gauge", "Maximum total number of tokens in the KV cache pool."},
	"sglang:page_size":                         {"gauge", "KV cache page size in tokens."},
	"sglang:num_pages":                         {"gauge", "Number of KV cache pages."},
	"sglang:context_len":                       {"gauge", "Maximum context length."},
	"sglang:startup_time_seconds":              {"gauge", "Engine startup duration by phase in seconds."},
	"sglang:num_retracted_reqs":                {"gauge", "The number of retracted requests."},
}

// Label sets. Scheduler families carry the rank labels; tokenizer families
// carry model_name and engine_type; HTTP middleware families carry none of
// them. prometheus_client renders label names sorted; so does writer.
func (r *replica) schedLabels(extra ...string) []string {
	if r.release == ReleaseSep2025 {
		return append([]string{"engine_type", "unified", "model_name", r.model, "pp_rank", "0", "tp_rank", "0"}, extra...)
	}
	return append([]string{"engine_type", "unified", "model_name", r.model, "moe_ep_rank", "0", "pp_rank", "0", "tp_rank", "0"}, extra...)
}

func (r *replica) tokLabels(extra ...string) []string {
	if r.release == ReleaseSep2025 {
		return append([]string{"model_name", r.model}, extra...)
	}
	return append([]string{"engine_type", "unified", "model_name", r.model}, extra...)
}

var streamingValue = [2]string{"false", "true"}

// byStreaming are a tokenizer histogram's children by is_streaming, or
// the one child of a release without that label.
func (r *replica) byStreaming(hs [2]*histogram) []histChild {
	if r.release == ReleaseSep2025 {
		return []histChild{{r.tokLabels(), merged(hs[0], hs[1])}}
	}
	return []histChild{{r.tokLabels("is_streaming", "false"), hs[0]}, {r.tokLabels("is_streaming", "true"), hs[1]}}
}

// streamingCounter writes a tokenizer counter by is_streaming, or as one
// series on a release without that label.
func (r *replica) streamingCounter(w *writer, name string, v [2]float64) {
	w.family(name)
	if r.release == ReleaseSep2025 {
		w.sample(name, r.tokLabels(), v[0]+v[1])
		return
	}
	for s, x := range v {
		w.sample(name, r.tokLabels("is_streaming", streamingValue[s]), x)
	}
}

// render writes the exposition of a live engine in SGLang's text format,
// as the replica's release has it.
func (r *replica) render(b *bytes.Buffer) {
	e := r.engine
	w := &writer{b: b, release: r.release}

	queueTime := e.h.queueTime
	if r.release != ReleaseCurrent {
		queueTime = coarser(queueTime, r.release.queueTimeBound)
	}
	w.histograms("sglang:queue_time_seconds", []histChild{{r.schedLabels(), queueTime}})
	w.histograms("sglang:prompt_tokens_histogram", []histChild{{r.tokLabels(), e.h.promptLen}})
	w.histograms("sglang:uncached_prompt_tokens_histogram", []histChild{{r.tokLabels(), e.h.uncache}})
	w.histograms("sglang:generation_tokens_histogram", []histChild{{r.tokLabels(), e.h.genLen}})
	w.histograms("sglang:time_to_first_token_seconds", r.byStreaming(e.h.ttft))
	w.histograms("sglang:inter_token_latency_seconds", []histChild{{r.tokLabels(), e.h.itl}})
	w.histograms("sglang:e2e_request_latency_seconds", r.byStreaming(e.h.e2e))

	w.single("sglang:num_retracted_requests_total", r.schedLabels(), e.c.retractedReqs)
	w.single("sglang:num_retracted_input_tokens_total", r.schedLabels(), e.c.retractedIn)
	w.single("sglang:num_retracted_output_tokens_total", r.schedLabels(), e.c.retractedOut)
	w.family("sglang:realtime_tokens_total")
	w.sample("sglang:realtime_tokens_total", r.schedLabels("mode", "prefill_compute"), e.c.rtPrefillCompute)
	w.sample("sglang:realtime_tokens_total", r.schedLabels("mode", "prefill_cache"), e.c.rtPrefillCache)
	w.sample("sglang:realtime_tokens_total", r.schedLabels("mode", "decode"), e.c.rtDecode)
	w.family("sglang:prefill_effective_tokens_total")
	w.sample("sglang:prefill_effective_tokens_total", r.schedLabels("mode", "input"), e.c.effInput)
	w.sample("sglang:prefill_effective_tokens_total", r.schedLabels("mode", "device_hit"), e.c.effDeviceHit)
	w.sample("sglang:prefill_effective_tokens_total", r.schedLabels("mode", "host_hit"), 0)
	w.sample("sglang:prefill_effective_tokens_total", r.schedLabels("mode", "storage_hit"), 0)
	r.streamingCounter(w, "sglang:prompt_tokens_total", e.c.prompt)
	r.streamingCounter(w, "sglang:generation_tokens_total", e.c.generation)
	cached := r.tokLabels("cache_source", "device")
	if r.release == ReleaseSep2025 {
		cached = r.tokLabels()
	}
	w.single("sglang:cached_tokens_total", cached, e.c.cached)
	r.streamingCounter(w, "sglang:num_requests_total", e.c.requests)
	w.single("sglang:num_aborted_requests_total", r.tokLabels(), e.c.aborted)

	// HTTP middleware: a route shows up once it has been hit, as with
	// prometheus_client's lazily created children.
	w.family("sglang:http_requests_total")
	for _, ep := range e.http {
		if ep.requests > 0 {
			w.sample("sglang:http_requests_total", []string{"endpoint", ep.endpoint, "method", ep.method}, ep.requests)
		}
	}
	w.family("sglang:http_responses_total")
	for _, ep := range e.http {
		for i, n := range ep.responses {
			if n > 0 {
				w.sample("sglang:http_responses_total", []string{"endpoint", ep.endpoint, "method", ep.method, "status_code", statusCodes[i]}, n)
			}
		}
	}
	w.single("sglang:process_cpu_seconds_total", []string{"component", "tokenizer"}, e.c.cpu)
	w.single("sglang:evicted_tokens_total", []string{"cache_type", "RadixCache"}, e.c.evicted)
	w.family("sglang:http_requests_active")
	for _, ep := range e.http {
		if ep.requests > 0 {
			w.sample("sglang:http_requests_active", []string{"endpoint", ep.endpoint, "method", ep.method}, ep.active)
		}
	}

	g := e.g
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"sglang:num_running_reqs", float64(g.running)},
		{"sglang:num_queue_reqs", float64(g.queue)},
		{"sglang:num_grammar_queue_reqs", 0},
		{"sglang:gen_throughput", g.genThroughput},
		{"sglang:cache_hit_rate", g.hitRate},
		{"sglang:decode_sum_seq_lens", float64(g.sumSeqLen)},
		{"sglang:token_usage", g.tokenUsage},
		{"sglang:full_token_usage", g.tokenUsage},
		{"sglang:num_used_tokens", float64(g.used)},
		{"sglang:kv_available_tokens", float64(g.available)},
		{"sglang:kv_evictable_tokens", float64(g.evictable)},
		{"sglang:kv_used_tokens", float64(g.used)},
		{"sglang:new_token_ratio", g.newTokenRatio},
		{"sglang:max_total_num_tokens", float64(e.cfg.MaxTotalTokens)},
		{"sglang:page_size", 1},
		{"sglang:num_pages", float64(e.cfg.MaxTotalTokens)},
		{"sglang:context_len", float64(e.cfg.ContextLen)},
	} {
		w.single(f.name, r.schedLabels(), f.v)
	}
	// Startup phases of this process: weights and KV allocation are fixed
	// costs; the end-to-end times are how long the (simulated) start took.
	w.family("sglang:startup_time_seconds")
	for _, p := range []struct {
		phase string
		v     float64
	}{
		{"load_weight", 0.4 * e.boot}, {"kv_cache_allocation", 0.035 * e.boot},
		{"scheduler_e2e", 0.96 * e.boot}, {"tokenizer_e2e", e.boot},
	} {
		w.sample("sglang:startup_time_seconds", r.tokLabels("phase", p.phase), round2(p.v))
	}
	// Gauge without multiprocess_mode: prometheus_client's "all" mode adds pid.
	w.single("sglang:num_retracted_reqs", r.schedLabels("pid", strconv.Itoa(e.pid)), float64(g.retracted))
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

type histChild struct {
	labels []string
	h      *histogram
}

// writer renders the Prometheus text format the way prometheus_client does:
// HELP and TYPE lines, labels sorted by name, floats in Python's repr with
// Go-style exponents, histogram children as all _sum lines, then each
// child's _bucket lines (cumulative, le last +Inf) and _count. A family its
// release does not have is left out, with its samples.
type writer struct {
	b       *bytes.Buffer
	release Release
	absent  bool // the current family is not in the release: its samples are dropped
}

func (w *writer) family(name string) {
	f, ok := families[name]
	if !ok {
		panic("sim: unknown metric family " + name) // a programming error, caught by the tests
	}
	w.absent = !w.release.exposes(name)
	if w.absent {
		return
	}
	w.b.WriteString("# HELP " + name + " " + w.release.help(name) + "\n# TYPE " + name + " " + f[0] + "\n")
}

func (w *writer) single(name string, labels []string, v float64) {
	w.family(name)
	w.sample(name, labels, v)
}

func (w *writer) histograms(name string, children []histChild) {
	w.family(name)
	for _, c := range children {
		w.sample(name+"_sum", c.labels, c.h.sum)
	}
	for _, c := range children {
		cum := 0.0
		for i, n := range c.h.counts {
			cum += n
			le := "+Inf"
			if i < len(c.h.bounds) {
				le = formatFloat(c.h.bounds[i])
			}
			w.sample(name+"_bucket", append(c.labels[:len(c.labels):len(c.labels)], "le", le), cum)
		}
		w.sample(name+"_count", c.labels, cum)
	}
}

// sample writes one line; labels are name/value pairs in any order.
func (w *writer) sample(name string, labels []string, v float64) {
	if w.absent {
		return
	}
	idx := make([]int, len(labels)/2)
	for i := range idx {
		idx[i] = 2 * i
	}
	sort.Slice(idx, func(a, b int) bool { return labels[idx[a]] < labels[idx[b]] })
	w.b.WriteString(name)
	if len(idx) > 0 {
		w.b.WriteByte('{')
		for i, j := range idx {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.b.WriteString(labels[j])
			w.b.WriteString(`="`)
			w.b.WriteString(labelEscaper.Replace(labels[j+1]))
			w.b.WriteByte('"')
		}
		w.b.WriteByte('}')
	}
	w.b.WriteByte(' ')
	w.b.WriteString(formatFloat(v))
	w.b.WriteByte('\n')
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// formatFloat is prometheus_client's floatToGoString: Python's repr of the
// float ("7010.0", "0.41"), except that values with more than six integer
// digits switch to an exponent the way Go prints them ("1.1754535e+07",
// "1e+06").
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	var s string
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e16) {
		s = strconv.FormatFloat(v, 'e', -1, 64) // Python repr switches to exponents here too
	} else {
		s = strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
	}
	dot := strings.IndexByte(s, '.')
	if v > 0 && dot > 6 && !strings.Contains(s, "e") {
		mantissa := strings.TrimRight(s[:1]+"."+s[1:dot]+s[dot+1:], "0.")
		return mantissa + "e+0" + strconv.Itoa(dot-1)
	}
	return s
}
