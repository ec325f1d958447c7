package promsource

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Config is a Prometheus-compatible query API the watchdog reads (the
// `history:` section): Prometheus, Thanos Query, Mimir or VictoriaMetrics.
// Its zero URL turns reading off.
type Config struct {
	// URL is the API's base, e.g. http://prometheus:9090 or, for Mimir,
	// http://mimir/prometheus (the /api/v1/... paths are appended).
	URL string `yaml:"url"`
	// ReplicaLabel names the label whose value is the replica (the target
	// name downstream): instance, pod, ...
	ReplicaLabel string `yaml:"replica_label"`
	// Selector is extra label matchers every query carries, without braces:
	// job="sglang",namespace="llm".
	Selector string `yaml:"selector"`
	// TargetLabels are labels Prometheus attached when it scraped (not the
	// replica's own); they are dropped, and a replica label Prometheus
	// renamed to exported_<name> because of a clash gets its name back.
	TargetLabels []string `yaml:"target_labels"`
	// Step is the resolution of history read with query_range: the
	// interval Prometheus scrapes the replicas at. 0: scrape.interval.
	Step time.Duration `yaml:"step"`
	// Timeout bounds one request.
	Timeout time.Duration `yaml:"timeout"`
	// StartupBudget bounds the whole backfill at start: past it the daemon
	// starts with what was filled.
	StartupBudget time.Duration `yaml:"startup_budget"`
	// Chunk is the time span of one query_range request.
	Chunk time.Duration `yaml:"chunk"`
	// ReplicasPerQuery bounds the replicas one query_range request reads
	// (0: the whole fleet in each request), so a request's size is about
	// ReplicasPerQuery × series per replica × Chunk/Step points.
	ReplicasPerQuery int `yaml:"replicas_per_query"`
	// MaxConcurrent bounds the requests in flight.
	MaxConcurrent int `yaml:"max_concurrent"`
	// MaxResponseBytes bounds one response body; a larger one fails its
	// request (memory stays bounded by MaxConcurrent × this).
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// AbsentIntervals: with `source: prometheus`, a replica without a new
	// sample for this many steps is down ("absent from Prometheus").
	AbsentIntervals int `yaml:"absent_intervals"`

	// HTTPClient is Prometheus' own HTTP client block: basic_auth,
	// authorization, oauth2, bearer_token_file, tls_config, proxy_url,
	// http_headers...
	HTTPClient commoncfg.HTTPClientConfig `yaml:",inline"`
}

// DefaultConfig returns the defaults (reading off: no URL).
func DefaultConfig() Config {
	return Config{
		ReplicaLabel:     "instance",
		TargetLabels:     []string{"job", "instance", "namespace", "pod", "container", "service", "endpoint", "node"},
		Timeout:          30 * time.Second,
		StartupBudget:    30 * time.Second,
		Chunk:            10 * time.Minute,
		ReplicasPerQuery: 20,
		MaxConcurrent:    4,
		MaxResponseBytes: 64 << 20,
		AbsentIntervals:  3,
		HTTPClient:       commoncfg.DefaultHTTPClientConfig,
	}
}

// Enabled reports whether an API is configured.
func (c Config) Enabled() bool { return c.URL != "" }

// Validate reports every problem, each under path (the YAML key).
func (c Config) Validate(path string) error {
	if !c.Enabled() {
		return nil
	}
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(path+"."+format, a...)) }
	if u, err := url.Parse(c.URL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		add("url: not an absolute http(s) URL")
	} else if u.User != nil {
		add("url: put credentials in basic_auth or authorization, not in the URL")
	}
	if c.ReplicaLabel == "" {
		add("replica_label: required (e.g. instance or pod)")
	}
	// The API itself parses the matchers (a bad one fails the first
	// request with its message); braces here would nest a selector.
	if strings.ContainsAny(c.Selector, "{}") {
		add("selector: %q: give the label matchers without braces, e.g. job=\"sglang\"", c.Selector)
	}
	for name, d := range map[string]time.Duration{"step": c.Step} {
		if d < 0 {
			add("%s: must not be negative, got %s", name, d)
		}
	}
	for name, d := range map[string]time.Duration{"timeout": c.Timeout, "startup_budget": c.StartupBudget, "chunk": c.Chunk} {
		if d <= 0 {
			add("%s: must be positive, got %s", name, d)
		}
	}
	if c.ReplicasPerQuery < 0 {
		add("replicas_per_query: must not be negative, got %d", c.ReplicasPerQuery)
	}
	if c.MaxConcurrent <= 0 {
		add("max_concurrent: must be positive, got %d", c.MaxConcurrent)
	}
	if c.MaxResponseBytes <= 0 {
		add("max_response_bytes: must be positive, got %d", c.MaxResponseBytes)
	}
	if c.AbsentIntervals <= 0 {
		add("absent_intervals: must be positive, got %d", c.AbsentIntervals)
	}
	if err := c.HTTPClient.Validate(); err != nil {
		add("%v", err)
	}
	return errors.Join(errs...)
}

// families matches the metric families the watchdog reads: SGLang engines
// (both renderings of the prefix) and the model gateway, current and
// legacy names, the dcgm-exporter families it knows, plus up.
func families() string {
	return `sglang[:_].+|smg_.+|sgl_router_.+|` + strings.Join(series.DCGMFamilies(), "|") + `|up`
}

// query is the fleet's selector.
func (c Config) query() string {
	sel := `__name__=~"` + families() + `"`
	if s := strings.TrimSpace(c.Selector); s != "" {
		sel += "," + s
	}
	return "{" + sel + "}"
}
