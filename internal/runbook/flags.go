package runbook

import (
	"regexp"
	"slices"
)

// Flag is a command-line flag a runbook page or a page's text may name:
// the tool it belongs to and where it was verified to exist.
type Flag struct {
	Name   string // "--max-running-requests"
	Tool   string // whose flag it is
	Source string // where it was read: repository, path, commit and field
}

// Where the flags were read.
const (
	sglangServerArgs = "sgl-project/sglang python/sglang/srt/server_args.py @ 001067fffe33427bee0ed2f007fb7551a1d76b44"
	smgMain          = "lightseekorg/smg model_gateway/src/main.rs @ 73da68ca9472bbc0ff5f63d31a8a21fbb8696359"
)

// sglang is an SGLang server flag: a ServerArgs field `name: A[...]`
// becomes --name-with-dashes.
func sglang(name, where string) Flag {
	return Flag{Name: name, Tool: "SGLang server (python -m sglang.launch_server)", Source: sglangServerArgs + ": " + where}
}

// gateway is a flag of SGLang's model gateway (the router).
func gateway(name, field string) Flag {
	return Flag{Name: name, Tool: "SGLang model gateway (smg, formerly sgl-router)", Source: smgMain + ": CliArgs." + field}
}

// Flags lists every command-line flag the runbooks and the detectors'
// texts may name. A step that names a flag nobody verified sends on-call
// to a command that fails (SGLang has no --disable-lora), so the pages'
// test fails on any flag not listed here; add one only with its source.
func Flags() []Flag {
	return []Flag{
		// SGLang server: ServerArgs fields.
		sglang("--chunked-prefill-size", "ServerArgs.chunked_prefill_size"),
		sglang("--crash-dump-folder", "ServerArgs.crash_dump_folder"),
		sglang("--disaggregation-bootstrap-port", "ServerArgs.disaggregation_bootstrap_port"),
		sglang("--disaggregation-ib-device", "ServerArgs.disaggregation_ib_device"),
		sglang("--disaggregation-transfer-backend", "ServerArgs.disaggregation_transfer_backend"),
		sglang("--enable-hierarchical-cache", "ServerArgs.enable_hierarchical_cache"),
		sglang("--enable-lora", "ServerArgs.enable_lora"),
		sglang("--enable-metrics", "ServerArgs.enable_metrics"),
		sglang("--enable-metrics-for-all-schedulers", "ServerArgs.enable_metrics_for_all_schedulers"),
		sglang("--enable-priority-scheduling", "ServerArgs.enable_priority_scheduling"),
		sglang("--log-requests", "ServerArgs.log_requests"),
		sglang("--log-requests-level", "ServerArgs.log_requests_level"),
		sglang("--lora-backend", "ServerArgs.lora_backend"),
		sglang("--lora-paths", "ServerArgs.lora_paths"),
		sglang("--max-loaded-loras", "ServerArgs.max_loaded_loras"),
		sglang("--max-lora-rank", "ServerArgs.max_lora_rank"),
		sglang("--max-loras-per-batch", "ServerArgs.max_loras_per_batch (default 8)"),
		sglang("--max-prefill-tokens", "ServerArgs.max_prefill_tokens"),
		sglang("--max-queued-requests", "ServerArgs.max_queued_requests"),
		sglang("--max-running-requests", "ServerArgs.max_running_requests"),
		sglang("--max-total-tokens", "ServerArgs.max_total_tokens"),
		sglang("--mem-fraction-static", "ServerArgs.mem_fraction_static"),
		sglang("--page-size", "ServerArgs.page_size"),
		sglang("--port", "ServerArgs.port (default 30000)"),
		sglang("--schedule-conservativeness", "ServerArgs.schedule_conservativeness (default 1.0; \"Use a larger value if you see requests being retracted frequently.\")"),
		sglang("--schedule-policy", "ServerArgs.schedule_policy"),
		sglang("--soft-watchdog-timeout", "ServerArgs.soft_watchdog_timeout"),
		sglang("--watchdog-timeout", "ServerArgs.watchdog_timeout (default 300: \"If a forward batch takes longer than this, the server will crash to prevent hanging.\")"),
		sglang("--cuda-graph-bs-decode", "ServerArgs.cuda_graph_bs_decode"),
		sglang("--cuda-graph-max-bs-decode", "ServerArgs.cuda_graph_max_bs_decode"),
		// SGLang server: aliases and deprecated names registered in add_cli_args.
		sglang("--grpc-http-sidecar-port", "alias of ServerArgs.smg_http_sidecar_port"),
		sglang("--cuda-graph-bs", "add_cli_args: deprecated alias of --cuda-graph-bs-decode"),
		sglang("--cuda-graph-max-bs", "add_cli_args: deprecated alias of --cuda-graph-max-bs-decode"),
		sglang("--collect-tokens-histogram", "add_cli_args: deprecated (token histograms are collected with --enable-metrics); needed on older releases"),

		// The model gateway.
		gateway("--cb-failure-threshold", "cb_failure_threshold (default 10)"),
		gateway("--max-concurrent-requests", "max_concurrent_requests (default -1: no limit)"),
		gateway("--prometheus-port", "prometheus_port (default 29000)"),
		gateway("--retry-backoff-multiplier", "retry_backoff_multiplier (default 1.5)"),
		gateway("--retry-initial-backoff-ms", "retry_initial_backoff_ms (default 50)"),
		gateway("--retry-jitter-factor", "retry_jitter_factor (default 0.2)"),
		gateway("--retry-max-retries", "retry_max_retries (default 5)"),

		// Other tools.
		{Name: "--previous", Tool: "kubectl logs",
			Source: "https://kubernetes.io/docs/reference/kubectl/generated/kubectl_logs (-p, --previous: print the logs for the previous instance of the container)"},
		{Name: "--ignore-daemonsets", Tool: "kubectl drain",
			Source: "k8s.io/kubectl v0.37.2 pkg/cmd/drain/drain.go: --ignore-daemonsets (Ignore DaemonSet-managed pods; without it a node running the GPU device plugin cannot be drained)"},
		{Name: "--delete-emptydir-data", Tool: "kubectl drain",
			Source: "k8s.io/kubectl v0.37.2 pkg/cmd/drain/drain.go: --delete-emptydir-data (Continue even if there are pods using emptyDir)"},
		{Name: "--pid", Tool: "py-spy dump",
			Source: "benfred/py-spy README (https://pypi.org/project/py-spy): py-spy record|top|dump --pid <pid>"},
		{Name: "--status", Tool: "nvidia-smi nvlink",
			Source: "nvidia-smi nvlink --help: [-s | --status] display link state (active/inactive)"},
	}
}

// flagPattern is a long flag as text names it: two dashes and a word,
// not inside another word ("KV pressure -> eviction" and "---" are not).
var flagPattern = regexp.MustCompile(`(?:^|[^\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)

// UnknownFlags lists, once each and in order, the long flags text names
// that Flags does not list.
func UnknownFlags(text string) []string {
	known := map[string]bool{}
	for _, f := range Flags() {
		known[f.Name] = true
	}
	var out []string
	for _, m := range flagPattern.FindAllStringSubmatch(text, -1) {
		if name := m[1]; !known[name] && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// KnownFlag reports whether name ("--max-running-requests") is on Flags.
func KnownFlag(name string) bool {
	return slices.ContainsFunc(Flags(), func(f Flag) bool { return f.Name == name })
}
