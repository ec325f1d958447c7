// Package series is the shared vocabulary of the pipeline: a normalized sample
// as the scraper produces it and the window stores it, and the canonical names
// of the SGLang metric families the detectors read.
//
// Names are canonical: the scraper maps every exposition variant (the
// gateway's "sglang_" re-rendering, renamed families, legacy router names)
// onto the names below, so nothing downstream knows about versions.
package series

import (
	"net"
	"net/url"
	"slices"
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
	GatewayBreakerOutcomesTotal  = "smg_worker_cb_outcomes_total"
	GatewayWorkerHealth          = "smg_worker_health"
	GatewayRateLimitTotal        = "smg_http_rate_limit_total"
)

// Scrape is the normalized outcome of one scrape of one target: either
// samples (grouped per replica the target exposes) or a failure reason. A
// failed scrape is data: the window records it as up=0 with the reason.
type Scrape struct {
	Target string            // configured target name
	Kind   string            // "engine", "gateway" or "gpu" (a dcgm-exporter)
	Labels map[string]string // target metadata from discovery (e.g. pod labels: model, role); nil when none
	// Address is where the target serves, as a gateway names its workers
	// (WorkerAddress of the target URL's scheme and host): it joins a
	// gateway's per-worker series to this target. "" when unknown.
	Address  string
	At       time.Time     // when the scrape started
	Duration time.Duration // how long it took
	Reason   ScrapeFailure // "" on success; else why it failed
	Status   int           // HTTP status of the answer; 0 when there was none
	Error    string        // human text of the failure; never holds secrets
	Groups   []Group       // one per replica behind the target; usually exactly one
	// Pod is what Kubernetes says about the pod behind the target at the
	// time of the scrape; nil for targets not discovered from Kubernetes.
	// Read-only once handed over.
	Pod *Pod
	// ProbeUp is, on a failed scrape, whether the health probe taken
	// beside it answered (/health_generate 200); nil when none was taken.
	// A successful scrape carries its probe as samples instead.
	ProbeUp *bool
}

// ScrapeFailure is why a scrape failed. Decisions downstream switch on it
// (and on the HTTP status), never on the failure text.
type ScrapeFailure string

// Scrape failure reasons; the values are also the result label of
// watchdog_scrapes_total.
const (
	// FailureRefused: the connection was refused, reset or dropped, or the
	// host is unreachable — nothing serves at the address.
	FailureRefused ScrapeFailure = "refused"
	// FailureTimeout: no complete answer within the scrape timeout.
	FailureTimeout ScrapeFailure = "timeout"
	// FailureDNS: the target's host name does not resolve.
	FailureDNS ScrapeFailure = "dns"
	// FailureHTTPStatus: the server answered with a non-2xx status.
	FailureHTTPStatus ScrapeFailure = "http_status"
	// FailureNotMetrics: a 2xx answer that is not a metrics exposition
	// (an HTML login or error page of a proxy in front of the target).
	FailureNotMetrics ScrapeFailure = "not_metrics"
	// FailureParse: the exposition is malformed or truncated.
	FailureParse ScrapeFailure = "parse_error"
	// FailureTooLarge: the answer exceeds the body size limit.
	FailureTooLarge ScrapeFailure = "too_large"
	// FailureTooManySeries: the exposition exceeds the series limit.
	FailureTooManySeries ScrapeFailure = "too_many_series"
	// FailureRedirect: the answer redirects to another host (never
	// followed) or redirects too often.
	FailureRedirect ScrapeFailure = "redirect"
	// FailurePodFailed: the pod behind the target has failed (evicted,
	// exited for good); its address is not scraped, as it may already
	// belong to another pod.
	FailurePodFailed ScrapeFailure = "pod_failed"
	// FailureError: any other failure (TLS, a bad URL).
	FailureError ScrapeFailure = "error"
	// FailureAbsent: read from a Prometheus-compatible API instead of
	// scraped, the replica has no recent samples there, or its up is 0
	// (Prometheus could not scrape it).
	FailureAbsent ScrapeFailure = "absent"
)

// ScrapeFailures lists every failure reason.
var ScrapeFailures = []ScrapeFailure{
	FailureRefused, FailureTimeout, FailureDNS, FailureHTTPStatus, FailureNotMetrics, FailureParse,
	FailureTooLarge, FailureTooManySeries, FailureRedirect, FailurePodFailed, FailureError, FailureAbsent,
}

// Unreachable reports whether the failure means the server process cannot
// be reached at all (nothing listens, it does not answer, its name does not
// resolve). Every other failure is an answer from something: the server or
// a proxy serves, only its metrics are unusable.
func (f ScrapeFailure) Unreachable() bool {
	switch f {
	case FailureRefused, FailureTimeout, FailureDNS, FailurePodFailed, FailureAbsent:
		return true
	}
	return false
}

// Pod is the Kubernetes status of the pod behind a target, as discovery
// last saw it.
type Pod struct {
	Namespace, Name string
	Phase           string    // Pending, Running, Succeeded, Failed, Unknown
	Reason          string    // the pod's status reason, e.g. Evicted
	Message         string    // the pod's status message (an eviction says which resource ran out)
	Ready           bool      // the Ready condition is true
	Created         time.Time // the pod's creation time
	Started         time.Time // when the serving container last started; zero when not running
	Restarts        int       // container restarts, summed over the pod's containers
	// Waiting is the reason a container waits (CrashLoopBackOff,
	// ImagePullBackOff, ContainerCreating); "" when none waits.
	Waiting string
	// LastTermination is the newest previous termination of a container
	// (the one a restart followed); zero when none restarted.
	LastTermination Termination
	// WaitingMessage is the waiting container's message (an image pull's
	// error); Image is that container's image. Both "" when none waits.
	WaitingMessage string `json:",omitempty"`
	Image          string `json:",omitempty"`
	// Unschedulable is the scheduler's message while it cannot place the
	// pod (condition PodScheduled False, reason Unschedulable), e.g.
	// "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."; "" once
	// scheduled.
	Unschedulable string `json:",omitempty"`
	// Node is the node the pod is bound to; nil when it is not bound or
	// the node is not known (not listed yet, or nodes may not be read).
	Node *Node `json:",omitempty"`
	// Events are the newest warning events about the pod, newest first, at
	// most MaxPodEvents. They may be old: readers compare Last with their
	// own time range.
	Events []PodEvent `json:",omitempty"`
}

// MaxPodEvents is how many warning events a Pod keeps.
const MaxPodEvents = 5

// MaxKubeMessage is the longest Kubernetes message (event, condition,
// waiting reason) a Pod keeps, in bytes; longer ones end in "…".
const MaxKubeMessage = 240

// Node is what Kubernetes says about a pod's node.
type Node struct {
	Name string
	// Cordoned: spec.unschedulable is set (kubectl cordon, a drain).
	Cordoned bool
	// Conditions are the node conditions in an unhealthy state — Ready
	// not True (False or Unknown: the node controller lost the kubelet),
	// MemoryPressure, DiskPressure or PIDPressure True — in that order;
	// empty on a healthy node.
	Conditions []NodeCondition `json:",omitempty"`
}

// Node condition types a Node reports.
const (
	NodeReady          = "Ready"
	NodeMemoryPressure = "MemoryPressure"
	NodeDiskPressure   = "DiskPressure"
	NodePIDPressure    = "PIDPressure"
)

// NodeCondition is one unhealthy node condition.
type NodeCondition struct {
	Type    string    // NodeReady, NodeMemoryPressure, NodeDiskPressure, NodePIDPressure
	Status  string    // True, False, Unknown
	Reason  string    // e.g. KubeletNotReady, NodeStatusUnknown
	Message string    // truncated to MaxKubeMessage
	Since   time.Time // the condition's last transition
}

// PodEvent is one warning event about a pod, aggregated as Kubernetes
// does (the same reason and message seen Count times).
type PodEvent struct {
	Reason  string // FailedScheduling, Evicted, BackOff, Unhealthy, FailedMount, Failed...
	Message string // truncated to MaxKubeMessage
	Count   int
	Last    time.Time // when it was last seen
}

// Equal reports whether two pod statuses are the same; nil equals only
// nil.
func (p *Pod) Equal(q *Pod) bool {
	if p == nil || q == nil {
		return p == q
	}
	return p.Namespace == q.Namespace && p.Name == q.Name && p.Phase == q.Phase && p.Reason == q.Reason &&
		p.Message == q.Message && p.Ready == q.Ready && p.Created.Equal(q.Created) && p.Started.Equal(q.Started) &&
		p.Restarts == q.Restarts && p.Waiting == q.Waiting && p.LastTermination == q.LastTermination &&
		p.WaitingMessage == q.WaitingMessage && p.Image == q.Image && p.Unschedulable == q.Unschedulable &&
		p.Node.equal(q.Node) && slices.Equal(p.Events, q.Events)
}

func (n *Node) equal(o *Node) bool {
	if n == nil || o == nil {
		return n == o
	}
	return n.Name == o.Name && n.Cordoned == o.Cordoned && slices.Equal(n.Conditions, o.Conditions)
}

// Termination is how a container last ended.
type Termination struct {
	Reason   string // OOMKilled, Error, Completed...
	ExitCode int
	Finished time.Time
}

// Group is the samples of one replica behind a target. A target usually is
// one replica (Worker ""); a gateway's /engine_metrics merges several
// engines, told apart by their worker_addr label, each its own group; a
// dcgm-exporter exposes every GPU of its node, each its own group (Worker
// "gpu<index>").
type Group struct {
	Worker     string // "" for the target itself, else the worker address
	Model      string // served model name from model_name (or the legacy name) label
	EngineType string // unified, prefill, decode; "" when not exposed
	// Labels describe the replica itself where the target's labels do not:
	// a GPU's identity and the pod that holds it (GPUNode...). Nil for
	// every other group. Read-only once handed over.
	Labels  map[string]string
	Samples []Sample
}

// ReplicaName is the replica a group belongs to: the target name, or
// target/worker for a worker behind a gateway.
func ReplicaName(target, worker string) string {
	if worker == "" {
		return target
	}
	return target + "/" + worker
}

// WorkerAddress is the name a worker behind a gateway goes by, and the
// address that joins a gateway's per-worker series to the engine target
// serving there: the worker URL without scheme, credentials or default port, so that
// "http://10.0.0.1:30000" becomes "10.0.0.1:30000" and the replica
// "gateway/10.0.0.1:30000". An address that is not a URL is kept as it is.
func WorkerAddress(addr string) string {
	if addr == "" {
		return ""
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return addr
	}
	host := strings.ToLower(u.Hostname())
	if port := u.Port(); port != "" && !(u.Scheme == "http" && port == "80") && !(u.Scheme == "https" && port == "443") {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]" // IPv6 without a port keeps its brackets
	}
	return host + strings.TrimRight(u.EscapedPath(), "/")
}

// NVIDIA dcgm-exporter families (one exporter per GPU node), by their DCGM
// field names; ../shared/reference/gpu-telemetry.md describes them.
const (
	// DCGMXIDErrors is the code of the last Xid the GPU recorded, not a
	// count: a new series or a changed value is the event.
	DCGMXIDErrors = "DCGM_FI_DEV_XID_ERRORS"
	// DCGMClockEventReasons is the bitmask of why the GPU's clocks are held
	// down; older releases call it DCGM_FI_DEV_CLOCK_THROTTLE_REASONS
	// (the scraper reads that name as this one).
	DCGMClockEventReasons = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
	DCGMSMClock           = "DCGM_FI_DEV_SM_CLOCK"    // MHz
	DCGMGPUTemp           = "DCGM_FI_DEV_GPU_TEMP"    // °C
	DCGMGPUUtil           = "DCGM_FI_DEV_GPU_UTIL"    // % of time a kernel ran
	DCGMPowerUsage        = "DCGM_FI_DEV_POWER_USAGE" // W
	// DCGMECCDBEVolatile counts uncorrectable (double-bit) ECC errors since
	// the last driver load.
	DCGMECCDBEVolatile         = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
	DCGMRowRemapFailure        = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
	DCGMUncorrectableRemapRows = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
	// NVLink error counters, each summed over the GPU's links.
	DCGMNVLinkCRCFlitErrors  = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
	DCGMNVLinkCRCDataErrors  = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
	DCGMNVLinkReplayErrors   = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
	DCGMNVLinkRecoveryErrors = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
	// DCGMClockThrottleReasons is DCGMClockEventReasons' older name.
	DCGMClockThrottleReasons = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
)

// DCGMFamilies are every dcgm-exporter family above, under each of its
// names: what a reader of a Prometheus API asks for.
func DCGMFamilies() []string {
	return []string{DCGMXIDErrors, DCGMClockEventReasons, DCGMClockThrottleReasons, DCGMSMClock, DCGMGPUTemp,
		DCGMGPUUtil, DCGMPowerUsage, DCGMECCDBEVolatile, DCGMRowRemapFailure, DCGMUncorrectableRemapRows,
		DCGMNVLinkCRCFlitErrors, DCGMNVLinkCRCDataErrors, DCGMNVLinkReplayErrors, DCGMNVLinkRecoveryErrors}
}

// Labels of a GPU replica (Group.Labels of a dcgm-exporter target): the
// GPU's identity and the pod that holds it. A GPU no pod holds has no
// GPUNamespace, GPUPod or GPUContainer.
const (
	GPUNode      = "node"      // the exporter's Hostname (or node / nodename)
	GPUIndex     = "gpu"       // the GPU's index on its node
	GPUUUID      = "uuid"      // the GPU's UUID, its identity across exporters
	GPUModel     = "gpu_model" // e.g. NVIDIA H100 80GB HBM3
	GPUPCIBusID  = "pci_bus_id"
	GPUNamespace = "namespace" // of the pod that holds the GPU
	GPUPod       = "pod"
	GPUContainer = "container"
)
