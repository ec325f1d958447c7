package sim

import "time"

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
