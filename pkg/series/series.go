// Package series is the shared vocabulary of the pipeline: a normalized sample
// as the scraper produces it and the window stores it, and the canonical names
// of the SGLang metric families the detectors read.
//
// Names are canonical: the scraper maps every exposition variant (the
// gateway's "sglang_" re-rendering, renamed families, legacy router names)
// onto the names below, so nothing downstream knows about versions.
package series

import (
	"sort"
	"strings"
	"time"
)

// Label is one name/value pair.
type Label struct {
	Name, Value string
}

// Labels is a set of labels sorted by name.
type Labels []Label

// Get returns the value of the label name, or "" when absent.
func (ls Labels) Get(name string) string {
	for _, l := range ls {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Sort orders the labels by name, in place, and returns them.
func (ls Labels) Sort() Labels {
	sort.Slice(ls, func(i, j int) bool { return ls[i].Name < ls[j].Name })
	return ls
}

// String renders the labels as {a="1",b="2"}; it is also the series key
// suffix, so equal label sets render equally.
func (ls Labels) String() string {
	if len(ls) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.Name)
		b.WriteString(`="`)
		b.WriteString(l.Value)
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// Sample is one normalized value of one series at one scrape. Histograms are
// flattened the Prometheus way: <name>_bucket with an "le" label, <name>_sum
// and <name>_count.
type Sample struct {
	Name   string
	Labels Labels
	Value  float64
}

// Key identifies the series of the sample: name plus rendered labels.
func (s Sample) Key() string { return s.Name + s.Labels.String() }

// Canonical SGLang engine families (see ../shared/reference/sglang-metrics.md).
const (
	NumRunningReqs          = "sglang:num_running_reqs"
	NumQueueReqs            = "sglang:num_queue_reqs"
	TokenUsage              = "sglang:token_usage"
	FullTokenUsage          = "sglang:full_token_usage"
	NumUsedTokens           = "sglang:num_used_tokens"
	MaxTotalNumTokens       = "sglang:max_total_num_tokens"
	KVAvailableTokens       = "sglang:kv_available_tokens"
	KVEvictableTokens       = "sglang:kv_evictable_tokens"
	KVUsedTokens            = "sglang:kv_used_tokens"
	GenThroughput           = "sglang:gen_throughput"
	CacheHitRateGauge       = "sglang:cache_hit_rate"
	NewTokenRatio           = "sglang:new_token_ratio"
	DecodeSumSeqLens        = "sglang:decode_sum_seq_lens"
	NumRetractedReqsGauge   = "sglang:num_retracted_reqs"
	RetractedRequestsTotal  = "sglang:num_retracted_requests_total"
	RetractedInputTokens    = "sglang:num_retracted_input_tokens_total"
	RetractedOutputTokens   = "sglang:num_retracted_output_tokens_total"
	NumRetractionsHistogram = "sglang:num_retractions"
	RealtimeTokensTotal     = "sglang:realtime_tokens_total" // mode: prefill_compute, prefill_cache, decode
	PrefillEffectiveTokens  = "sglang:prefill_effective_tokens_total"
	EvictedTokensTotal      = "sglang:evicted_tokens_total"
	PromptTokensTotal       = "sglang:prompt_tokens_total"
	GenerationTokensTotal   = "sglang:generation_tokens_total"
	CachedTokensTotal       = "sglang:cached_tokens_total"
	NumRequestsTotal        = "sglang:num_requests_total"
	NumAbortedRequestsTotal = "sglang:num_aborted_requests_total"
	TTFTSeconds             = "sglang:time_to_first_token_seconds"
	InterTokenLatency       = "sglang:inter_token_latency_seconds"
	E2ERequestLatency       = "sglang:e2e_request_latency_seconds"
	QueueTimeSeconds        = "sglang:queue_time_seconds"
	GenerationTokensHist    = "sglang:generation_tokens_histogram"
	HTTPRequestsTotal       = "sglang:http_requests_total"
	HTTPResponsesTotal      = "sglang:http_responses_total"
	HTTPRequestsActive      = "sglang:http_requests_active"
	ProcessCPUSecondsTotal  = "sglang:process_cpu_seconds_total"
	StartupTimeSeconds      = "sglang:startup_time_seconds"
	ContextLen              = "sglang:context_len"
	PageSize                = "sglang:page_size"
	LoraPoolUtilization     = "sglang:lora_pool_utilization"
	BootstrapFailedTotal    = "sglang:num_bootstrap_failed_reqs_total"
	TransferFailedTotal     = "sglang:num_transfer_failed_reqs_total"
)

// Canonical model-gateway (router) families.
const (
	GatewayHTTPRequestsTotal     = "smg_http_requests_total"
	GatewayHTTPResponsesTotal    = "smg_http_responses_total"
	GatewayUpstreamResponses     = "smg_router_upstream_responses_total"
	GatewayRetriesTotal          = "smg_worker_retries_total"
	GatewayRetriesExhaustedTotal = "smg_worker_retries_exhausted_total"
	GatewayCircuitBreakerState   = "smg_worker_cb_state"
	GatewayRateLimitTotal        = "smg_http_rate_limit_total"
)

// Scrape is the normalized outcome of one scrape of one target: either
// samples (grouped per replica the target exposes) or a failure reason. A
// failed scrape is data: the window records it as up=0 with the reason.
type Scrape struct {
	Target   string            // configured target name
	Kind     string            // "engine" or "gateway"
	Labels   map[string]string // target metadata from discovery (e.g. pod labels: model, role); nil when none
	At       time.Time         // when the scrape started
	Duration time.Duration     // how long it took
	Reason   string            // "" on success; else refused, timeout, http_status, parse_error, too_large, too_many_series, error
	Error    string            // human text of the failure; never holds secrets
	Groups   []Group           // one per replica behind the target; usually exactly one
}

// Group is the samples of one replica behind a target. A target usually is
// one replica (Worker ""); a gateway's /engine_metrics merges several
// engines, told apart by their worker_addr label, each its own group.
type Group struct {
	Worker     string // "" for the target itself, else the worker address
	Model      string // served model name from model_name (or the legacy name) label
	EngineType string // unified, prefill, decode; "" when not exposed
	Samples    []Sample
}

// ReplicaName is the replica a group belongs to: the target name, or
// target/worker for a worker behind a gateway.
func ReplicaName(target, worker string) string {
	if worker == "" {
		return target
	}
	return target + "/" + worker
}
