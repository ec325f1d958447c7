// Package config loads the watchdog's configuration: defaults, then a YAML
// file decoded strictly (unknown keys are errors), then environment
// overrides, then one validation pass that reports every problem at once,
// each with its YAML path. Secrets are held in Secret values that print as
// <secret>, so a config can be logged or served without leaking them.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/discovery"
	"github.com/sglang-watchdog/sglang-watchdog/internal/heartbeat"
	"github.com/sglang-watchdog/sglang-watchdog/internal/leader"
	"github.com/sglang-watchdog/sglang-watchdog/internal/promsource"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/alertmanager"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// Config is the whole configuration.
type Config struct {
	// ListenAddress of the daemon's own HTTP server (/metrics, /api, /runbooks).
	ListenAddress string `yaml:"listen_address"`
	// ExternalURL is how people reach the daemon; it makes links in pages
	// absolute. Empty derives one from this daemon's address (PageLinkBase).
	ExternalURL string `yaml:"external_url"`
	// RoutePrefix is the path the server mounts every endpoint under;
	// empty takes external_url's path (Prefixes).
	RoutePrefix string `yaml:"route_prefix"`
	LogLevel    string `yaml:"log_level"`
	LogFormat   string `yaml:"log_format"` // LogFormats
	// StateDir keeps incidents and delivery state across restarts; empty
	// keeps them in memory only.
	StateDir string `yaml:"state_dir"`

	Scrape     Scrape     `yaml:"scrape"`
	Evaluation Evaluation `yaml:"evaluation"`
	Targets    []Target   `yaml:"targets"`
	// Discovery adds targets from DNS or Kubernetes and can shard the fleet.
	Discovery discovery.Config `yaml:"discovery"`
	Detectors detect.Config    `yaml:"detectors"`
	Alerts    alert.Config     `yaml:"alerts"`
	// Correlation groups cause-and-effect findings and fleet-wide incidents.
	Correlation correlate.Config `yaml:"correlation"`
	// HA runs several copies with Kubernetes leader election: only the
	// leader pages; incident records live in a ConfigMap.
	HA leader.Config `yaml:"ha"`
	// Heartbeat is a dead man's switch: a periodic ping to an external
	// monitor so the watchdog's own death is noticed.
	Heartbeat heartbeat.Config `yaml:"heartbeat"`
	Notify    Notify           `yaml:"notify"`
	// Runbooks overrides the runbook link of a class (a team's own wiki).
	Runbooks map[string]string `yaml:"runbooks"`
	// Source is where samples come from: scrape (default) or prometheus
	// (history.url's API).
	Source string `yaml:"source"`
	// History is a Prometheus-compatible API that fills the windows at
	// start and, with source: prometheus, replaces scraping.
	History promsource.Config `yaml:"history"`
	// Incidents bounds the incident journal (incidents.go).
	Incidents Incidents `yaml:"incidents"`
	// API guards the mutating HTTP endpoints (api.go).
	API API `yaml:"api"`
	// SLOs are the service level objectives per model and the burn-rate
	// policy that pages on them (internal/slo).
	SLOs slo.Config `yaml:"slos"`
	// PodIP is this pod's IP (POD_IP, from the downward API), one source of
	// a derived external URL (PageLinkBase); not a YAML setting.
	PodIP string `yaml:"-"`
}

// minWindowBytes is the smallest scrape.max_window_bytes: below it a
// replica's window cannot hold the families the detectors read for the
// minutes their ranges span.
const minWindowBytes = 64 << 10

// Scrape settings shared by every target.
type Scrape struct {
	Interval     time.Duration `yaml:"interval"`
	Timeout      time.Duration `yaml:"timeout"` // 0: 80% of the interval
	MaxBodyBytes int64         `yaml:"max_body_bytes"`
	MaxSeries    int           `yaml:"max_series"`
	// MaxWindowBytes bounds the memory of one replica's window (the store's
	// own accounting of its chunks, label sets and indexes).
	MaxWindowBytes int `yaml:"max_window_bytes"`
	// HealthProbe asks every engine target's /health_generate to generate
	// one token, so an engine that hangs while nobody calls it is seen.
	HealthProbe HealthProbe `yaml:"health_probe"`
	// KeepAllFamilies keeps every family a target exposes, for
	// investigation; by default the scraper keeps only what the detectors,
	// the triage and the snapshot read (assess.Reads).
	KeepAllFamilies bool `yaml:"keep_all_families"`
	// FilterFamilies asks engine targets for the kept families only
	// (prometheus_client's name[] query parameters); a target whose
	// filtered answer lacks a family it showed in full is scraped in full
	// and asked again after scrape.DefaultFilterRecheck. No effect with
	// keep_all_families; gateways and GPU exporters are always scraped in
	// full.
	FilterFamilies bool `yaml:"filter_families"`
	// AcceptGzip asks targets for a gzip-compressed exposition (about a
	// tenth of the bytes, for a target's server a level-9 compression per
	// scrape, for the watchdog an inflate). Off: identity is asked for; a
	// target that compresses anyway is still read.
	AcceptGzip bool `yaml:"accept_gzip"`
	// HTTPClient is Prometheus' HTTP client block, as in a scrape_config
	// (tls_config, basic_auth, authorization, oauth2, bearer_token_file,
	// proxy_url, follow_redirects, http_headers...), for the scrapes and
	// health probes of every target without an http_client of its own.
	HTTPClient scrape.HTTPClientConfig `yaml:",inline"`
}

// HealthProbe settings: the active /health_generate probe of engine
// targets (gateways are never probed).
type HealthProbe struct {
	Enabled  bool          `yaml:"enabled"`
	Interval time.Duration `yaml:"interval"`
	// Timeout of one probe; above SGLang's own 20 s health-check timeout,
	// so a stuck engine's 503 arrives before the watchdog gives up.
	Timeout time.Duration `yaml:"timeout"`
	// MaxConcurrent bounds the probes in flight across all targets.
	MaxConcurrent int `yaml:"max_concurrent"`
}

// Evaluation settings.
type Evaluation struct {
	// Interval between detector rounds over every replica. Default 15 s,
	// three scrapes at the default scrape interval: a round reads ranges
	// of minutes and a finding must hold for minutes before it pages
	// (alerts.for), so a round every scrape bought a page at most 10 s
	// sooner for three times the rounds' CPU.
	Interval time.Duration `yaml:"interval"`
}

// Target is one replica (or gateway) to scrape.
type Target struct {
	Name string `yaml:"name"`
	// URL is a base (http://host:30000, /metrics is appended) or the full
	// metrics URL.
	URL  string `yaml:"url"`
	Kind string `yaml:"kind"` // engine (default), gateway or gpu (a dcgm-exporter)
	// Labels are copied onto the replica; "model" names the model when the
	// exposition does not, and feeds sharding by model.
	Labels map[string]string `yaml:"labels"`
	// HTTPClient replaces the scrape section's client settings, whole,
	// for this target; nil takes them.
	HTTPClient *scrape.HTTPClientConfig `yaml:"http_client"`
}

// Notify holds the paging settings.
type Notify struct {
	// Routes pick receivers by severity, class and labels: a tree, the
	// first match wins unless it continues (notify.Route).
	Routes []notify.Route `yaml:"routes"`
	// Receivers are named destinations for routes beside the default
	// ones, slack, pagerduty and alertmanager, that the sections below
	// configure (receivers.go).
	Receivers []Receiver `yaml:"receivers"`
	Slack     Slack      `yaml:"slack"`
	PagerDuty PagerDuty  `yaml:"pagerduty"`
	// Alertmanager posts incidents to Prometheus Alertmanager (alertmanager.go).
	Alertmanager Alertmanager `yaml:"alertmanager"`
	// MaxRetryAfter caps the wait a provider's Retry-After imposes on
	// every notification of its integration (also a wait restored after a
	// restart), so one bad header cannot silence paging for hours.
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
	// MaxPending bounds each integration's outbox of undelivered
	// notifications; beyond it the oldest update, then the oldest trigger
	// is dropped (loudly), never a resolve.
	MaxPending int `yaml:"max_pending"`
	// MaxRecords caps the incident records each integration keeps to
	// update and resolve what it paged.
	MaxRecords int `yaml:"max_records"`
	// NoticeRetention is how long a delivery-failure notice stays open
	// while the failing integration delivers nothing.
	NoticeRetention time.Duration `yaml:"notice_retention"`
	// ResolvedRetention is how long a resolved incident's record is kept
	// to recognise a duplicate resolve.
	ResolvedRetention time.Duration `yaml:"resolved_retention"`
}

// QueueOptions are the queue options every integration is given.
func (n Notify) QueueOptions() notify.QueueOptions {
	return notify.QueueOptions{
		MaxRetryAfter:     n.MaxRetryAfter,
		MaxPending:        n.MaxPending,
		MaxRecords:        n.MaxRecords,
		NoticeRetention:   n.NoticeRetention,
		ResolvedRetention: n.ResolvedRetention,
	}
}

// Slack settings. Bot-token mode (token + channel) updates messages in
// place; webhook mode is a degraded fallback.
type Slack struct {
	BotToken       notify.Secret `yaml:"bot_token"`
	BotTokenFile   string        `yaml:"bot_token_file"`
	Channel        string        `yaml:"channel"`
	APIURL         string        `yaml:"api_url"`
	WebhookURL     notify.Secret `yaml:"webhook_url"`
	WebhookURLFile string        `yaml:"webhook_url_file"`
}

// PagerDuty settings (Events API v2).
type PagerDuty struct {
	RoutingKey     notify.Secret `yaml:"routing_key"`
	RoutingKeyFile string        `yaml:"routing_key_file"`
	EventsURL      string        `yaml:"events_url"`
}

// Defaults.
const (
	DefaultListenAddress = ":9402"
	DefaultSlackAPIURL   = "https://slack.com/api"
	DefaultPagerDutyURL  = "https://events.pagerduty.com/v2/enqueue"
	// DefaultEvaluationInterval is evaluation.interval's (Evaluation).
	DefaultEvaluationInterval = 15 * time.Second
)

// Default returns the production defaults.
func Default() Config {
	queue := notify.DefaultQueueOptions()
	return Config{
		ListenAddress: DefaultListenAddress,
		LogLevel:      "info",
		LogFormat:     LogFormatJSON,
		Scrape: Scrape{
			Interval:       5 * time.Second,
			MaxBodyBytes:   16 << 20,
			MaxSeries:      20000,
			MaxWindowBytes: 4 << 20,
			FilterFamilies: true,
			HealthProbe: HealthProbe{
				Enabled:       true,
				Interval:      30 * time.Second,
				Timeout:       25 * time.Second,
				MaxConcurrent: 32,
			},
			HTTPClient: scrape.DefaultHTTPClientConfig(),
		},
		Evaluation:  Evaluation{Interval: DefaultEvaluationInterval},
		Detectors:   detect.DefaultConfig(),
		Alerts:      alert.DefaultConfig(),
		Correlation: correlate.DefaultConfig(),
		HA:          leader.DefaultConfig(),
		Heartbeat:   heartbeat.DefaultConfig(),
		Source:      SourceScrape,
		History:     promsource.DefaultConfig(),
		Incidents:   DefaultIncidents(),
		SLOs:        slo.DefaultConfig(),
		Notify: Notify{
			Routes:    notify.DefaultRoutes().Routes,
			Slack:     Slack{APIURL: DefaultSlackAPIURL},
			PagerDuty: PagerDuty{EventsURL: DefaultPagerDutyURL},

			Alertmanager: alertmanager.DefaultConfig(),

			MaxRetryAfter:     queue.MaxRetryAfter,
			MaxPending:        queue.MaxPending,
			MaxRecords:        queue.MaxRecords,
			NoticeRetention:   queue.NoticeRetention,
			ResolvedRetention: queue.ResolvedRetention,
		},
	}
}

// envVars are the environment overrides. Pointers tell "unset" from
// "empty": only variables that are present override the file.
type envVars struct {
	Config         *string        `env:"WATCHDOG_CONFIG"`
	Targets        *string        `env:"WATCHDOG_TARGETS"`
	ListenAddress  *string        `env:"WATCHDOG_LISTEN_ADDRESS"`
	ScrapeInterval *time.Duration `env:"WATCHDOG_SCRAPE_INTERVAL"`
	LogLevel       *string        `env:"WATCHDOG_LOG_LEVEL"`
	LogFormat      *string        `env:"WATCHDOG_LOG_FORMAT"`
	StateDir       *string        `env:"WATCHDOG_STATE_DIR"`
	ExternalURL    *string        `env:"WATCHDOG_EXTERNAL_URL"`
	RoutePrefix    *string        `env:"WATCHDOG_ROUTE_PREFIX"`
	PodIP          *string        `env:"POD_IP"`

	SlackBotToken      *string `env:"SLACK_BOT_TOKEN"`
	SlackBotTokenFile  *string `env:"SLACK_BOT_TOKEN_FILE"`
	SlackChannel       *string `env:"SLACK_CHANNEL"`
	SlackAPIURL        *string `env:"SLACK_API_URL"`
	SlackWebhookURL    *string `env:"SLACK_WEBHOOK_URL"`
	SlackWebhookFile   *string `env:"SLACK_WEBHOOK_URL_FILE"`
	PagerDutyKey       *string `env:"PAGERDUTY_ROUTING_KEY"`
	PagerDutyKeyFile   *string `env:"PAGERDUTY_ROUTING_KEY_FILE"`
	PagerDutyEventsURL *string `env:"PAGERDUTY_EVENTS_URL"`
}

// Load builds the configuration from the environment (a map, so tests never
// touch the process environment). base is the starting point (Default() for
// the daemon, a demo config for the demo); the file named by
// WATCHDOG_CONFIG, if any, is decoded over it.
func Load(base Config, environ map[string]string) (Config, error) {
	return LoadWithFlags(base, environ, Flags{})
}

// LoadWithFlags is Load with command-line flags, which win over the
// environment, which wins over the file.
func LoadWithFlags(base Config, environ map[string]string, flags Flags) (Config, error) {
	var ev envVars
	if err := env.ParseWithOptions(&ev, env.Options{Environment: environ}); err != nil {
		return Config{}, failed(ReasonEnv, envError(err))
	}
	cfg := base
	if path, source := flags.configFile(ev.Config); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, failed(ReasonRead, fmt.Errorf("%s: %w", source, err))
		}
		if cfg, err = Parse(base, data); err != nil {
			return Config{}, failed(ReasonParse, fmt.Errorf("%s: %w", path, err))
		}
	}
	var errs []error
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&cfg.ListenAddress, ev.ListenAddress)
	set(&cfg.LogLevel, ev.LogLevel)
	set(&cfg.LogFormat, ev.LogFormat)
	set(&cfg.StateDir, ev.StateDir)
	set(&cfg.ExternalURL, ev.ExternalURL)
	set(&cfg.RoutePrefix, ev.RoutePrefix)
	set(&cfg.PodIP, ev.PodIP)
	if ev.ScrapeInterval != nil {
		cfg.Scrape.Interval = *ev.ScrapeInterval
	}
	if ev.Targets != nil {
		ts, err := ParseTargets(*ev.Targets)
		if err != nil {
			errs = append(errs, failed(ReasonEnv, fmt.Errorf("WATCHDOG_TARGETS: %w", err)))
		}
		cfg.Targets = ts // the environment replaces the file's list
	}
	set(&cfg.Notify.Slack.Channel, ev.SlackChannel)
	set(&cfg.Notify.Slack.APIURL, ev.SlackAPIURL)
	set(&cfg.Notify.PagerDuty.EventsURL, ev.PagerDutyEventsURL)
	secret := func(name string, dst *notify.Secret, dstFile *string, v, file *string) {
		if v != nil && file != nil {
			errs = append(errs, failed(ReasonEnv, fmt.Errorf("%s and %s_FILE are both set; set one", name, name)))
			return
		}
		if v != nil {
			*dst, *dstFile = notify.Secret(*v), ""
		}
		if file != nil {
			*dst, *dstFile = "", *file
		}
	}
	secret("SLACK_BOT_TOKEN", &cfg.Notify.Slack.BotToken, &cfg.Notify.Slack.BotTokenFile, ev.SlackBotToken, ev.SlackBotTokenFile)
	secret("SLACK_WEBHOOK_URL", &cfg.Notify.Slack.WebhookURL, &cfg.Notify.Slack.WebhookURLFile, ev.SlackWebhookURL, ev.SlackWebhookFile)
	secret("PAGERDUTY_ROUTING_KEY", &cfg.Notify.PagerDuty.RoutingKey, &cfg.Notify.PagerDuty.RoutingKeyFile, ev.PagerDutyKey, ev.PagerDutyKeyFile)

	// Secrets given as files are read now, so an unreadable mount fails at
	// start-up, not at the first page. A file that does not exist leaves the
	// integration unconfigured: the manifests mount Secret keys as optional,
	// so a key left out of the Secret must not keep the watchdog (or, as a
	// sidecar, the serving pod) from starting.
	readSecret := func(path string, file string, dst *notify.Secret) {
		if file == "" {
			return
		}
		b, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err != nil {
			errs = append(errs, failed(ReasonRead, fmt.Errorf("%s: %w", path, err)))
			return
		}
		*dst = notify.Secret(strings.TrimSpace(string(b)))
	}
	readSecret("notify.slack.bot_token_file", cfg.Notify.Slack.BotTokenFile, &cfg.Notify.Slack.BotToken)
	readSecret("notify.slack.webhook_url_file", cfg.Notify.Slack.WebhookURLFile, &cfg.Notify.Slack.WebhookURL)
	readSecret("notify.pagerduty.routing_key_file", cfg.Notify.PagerDuty.RoutingKeyFile, &cfg.Notify.PagerDuty.RoutingKey)
	if err := cfg.Notify.readReceiverSecrets(); err != nil {
		errs = append(errs, failed(ReasonRead, err))
	}
	if err := cfg.resolveAPI(environ); err != nil {
		errs = append(errs, failed(ReasonRead, err))
	}
	flags.apply(&cfg)

	if err := cfg.Validate(); err != nil {
		errs = append(errs, failed(ReasonValidate, err))
	}
	if err := cfg.Notify.checkRouteReceivers(); err != nil {
		errs = append(errs, failed(ReasonValidate, err))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// envError names the variable of each value that does not parse: the
// library names the struct field, which nobody setting the environment
// knows.
func envError(err error) error {
	var errs []error
	for _, e := range unwrapAll(err) {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if f, ok := reflect.TypeFor[envVars]().FieldByName(pe.Name); ok {
				errs = append(errs, fmt.Errorf("%s: %w", f.Tag.Get("env"), pe.Err))
				continue
			}
		}
		errs = append(errs, fmt.Errorf("environment: %w", e))
	}
	return errors.Join(errs...)
}

// unwrapAll lists the errors an aggregate holds, or err alone.
func unwrapAll(err error) []error {
	if agg, ok := err.(interface{ Unwrap() []error }); ok {
		return agg.Unwrap()
	}
	return []error{err}
}

// Parse decodes YAML over base, strictly: an unknown key is an error.
func Parse(base Config, data []byte) (Config, error) {
	cfg := base
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, explained(err, data) // the decoder's errors already begin "yaml: "
	}
	return cfg, nil
}

// ParseTargets reads WATCHDOG_TARGETS: comma-separated name=url or bare url
// (the name is then host:port).
func ParseTargets(s string) ([]Target, error) {
	var out []Target
	var errs []error
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		t := Target{Kind: "engine"}
		if name, u, ok := strings.Cut(item, "="); ok && !strings.Contains(name, "/") {
			t.Name, t.URL = strings.TrimSpace(name), strings.TrimSpace(u)
		} else {
			t.URL = item
		}
		if t.Name == "" {
			u, err := url.Parse(t.URL)
			if err != nil || u.Host == "" {
				errs = append(errs, fmt.Errorf("item %d: %q is not name=url or a URL", i+1, redact.URL(item)))
				continue
			}
			t.Name = u.Host
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}

// MetricsURL turns a target URL into the URL to scrape: a base URL (no path,
// or "/") gets /metrics appended; any other path is used as given.
func MetricsURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid URL %q", redact.URL(raw))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("URL %q: scheme must be http or https", redact.URL(raw))
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("URL %q has no host", redact.URL(raw))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return u.String(), nil
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil {
		add("listen_address: %q is not host:port", c.ListenAddress)
	}
	if !slices.Contains(logLevels, c.LogLevel) {
		add("log_level: %q is not one of %s", c.LogLevel, strings.Join(logLevels, ", "))
	}
	if !slices.Contains(LogFormats, c.LogFormat) {
		add("log_format: %q is not one of %s", c.LogFormat, strings.Join(LogFormats, ", "))
	}
	if !validExternalURL(c.ExternalURL) {
		add("external_url: %q is not an absolute http(s) URL", c.ExternalURL)
	}
	if !validPrefix(c.RoutePrefix) {
		add("route_prefix: %q is not a URL path", c.RoutePrefix)
	}
	if c.Scrape.Interval <= 0 {
		add("scrape.interval: must be positive, got %s", c.Scrape.Interval)
	}
	if c.Scrape.Timeout < 0 || (c.Scrape.Interval > 0 && c.Scrape.Timeout >= c.Scrape.Interval) {
		add("scrape.timeout: must be below scrape.interval (%s), got %s", c.Scrape.Interval, c.Scrape.Timeout)
	}
	if c.Scrape.MaxBodyBytes <= 0 {
		add("scrape.max_body_bytes: must be positive")
	}
	if c.Scrape.MaxSeries <= 0 {
		add("scrape.max_series: must be positive")
	}
	if c.Scrape.MaxWindowBytes < minWindowBytes {
		add("scrape.max_window_bytes: must be at least %d (64 KiB), got %d", minWindowBytes, c.Scrape.MaxWindowBytes)
	}
	if hp := c.Scrape.HealthProbe; hp.Enabled {
		if hp.Interval <= 0 {
			add("scrape.health_probe.interval: must be positive, got %s", hp.Interval)
		}
		if hp.Timeout <= 0 || (hp.Interval > 0 && hp.Timeout >= hp.Interval) {
			add("scrape.health_probe.timeout: must be positive and below scrape.health_probe.interval (%s), got %s", hp.Interval, hp.Timeout)
		}
		if hp.MaxConcurrent <= 0 {
			add("scrape.health_probe.max_concurrent: must be positive, got %d", hp.MaxConcurrent)
		}
	}
	if err := c.Scrape.HTTPClient.Validate(); err != nil {
		add("scrape: %v", err)
	}
	if c.Evaluation.Interval <= 0 {
		add("evaluation.interval: must be positive, got %s", c.Evaluation.Interval)
	}
	if len(c.Targets) == 0 && !c.Discovery.Enabled() && !c.FromPrometheus() {
		add("targets: no targets; set WATCHDOG_TARGETS, targets in the config file, or discovery")
	}
	if err := c.Discovery.Validate("discovery"); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]int{}
	for i, t := range c.Targets {
		path := fmt.Sprintf("targets[%d]", i)
		if t.Name == "" {
			add("%s.name: required", path)
		} else if j, dup := seen[t.Name]; dup {
			add("%s.name: %q duplicates targets[%d]", path, t.Name, j)
		} else {
			seen[t.Name] = i
		}
		if strings.ContainsAny(t.Name, "/ \t\n") {
			add("%s.name: %q must not contain '/' or spaces", path, t.Name)
		}
		if _, err := MetricsURL(t.URL); err != nil {
			add("%s.url: %v", path, err)
		}
		if t.Kind != "" && !slices.Contains(scrape.Kinds(), t.Kind) {
			add("%s.kind: %q is not one of %s", path, t.Kind, strings.Join(scrape.Kinds(), ", "))
		}
		if t.HTTPClient != nil {
			if err := t.HTTPClient.Validate(); err != nil {
				add("%s.http_client: %v", path, err)
			}
		}
	}
	if err := c.Detectors.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateSource(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Heartbeat.Validate("heartbeat"); err != nil {
		errs = append(errs, err)
	}
	if err := c.HA.Validate("ha"); err != nil {
		errs = append(errs, err)
	}
	if err := c.Correlation.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !c.Discovery.Enabled() && !c.FromPrometheus() {
		// Static targets only: a mapping must name one of the engines.
		for i, m := range c.Correlation.GPUTargets {
			if j, ok := seen[m.Target]; m.Target != "" && (!ok || (c.Targets[j].Kind != "" && c.Targets[j].Kind != scrape.KindEngine)) {
				add("correlation.gpu_targets[%d].target: %q is no engine target of targets", i, m.Target)
			}
		}
	}
	if err := c.Alerts.Validate("alerts"); err != nil {
		errs = append(errs, err)
	}
	if err := c.Incidents.Validate("incidents"); err != nil {
		errs = append(errs, err)
	}
	if err := c.SLOs.Validate("slos"); err != nil {
		errs = append(errs, err)
	}
	if err := (notify.RouteConfig{Routes: c.Notify.Routes}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("notify.%w", err))
	}
	if err := c.Notify.validateReceivers(); err != nil {
		errs = append(errs, err)
	}
	if err := validateAlertmanager(c.Notify.Alertmanager); err != nil {
		errs = append(errs, err)
	}
	n := c.Notify
	for _, b := range []struct {
		key string
		v   any
		ok  bool
	}{
		{"max_retry_after", n.MaxRetryAfter, n.MaxRetryAfter > 0},
		{"max_pending", n.MaxPending, n.MaxPending > 0},
		{"max_records", n.MaxRecords, n.MaxRecords > 0},
		{"notice_retention", n.NoticeRetention, n.NoticeRetention > 0},
		{"resolved_retention", n.ResolvedRetention, n.ResolvedRetention > 0},
	} {
		if !b.ok {
			add("notify.%s: must be positive, got %v", b.key, b.v)
		}
	}
	s := c.Notify.Slack
	if s.BotToken != "" && s.Channel == "" {
		add("notify.slack.channel: required with a bot token (SLACK_CHANNEL)")
	}
	for path, raw := range map[string]string{"notify.slack.api_url": s.APIURL, "notify.pagerduty.events_url": c.Notify.PagerDuty.EventsURL} {
		if u, err := url.Parse(raw); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			add("%s: %q is not an absolute http(s) URL", path, redact.URL(raw))
		}
	}
	if s.WebhookURL != "" {
		if u, err := url.Parse(string(s.WebhookURL)); err != nil || u.Host == "" {
			add("notify.slack.webhook_url: not an absolute URL")
		}
	}
	for class := range c.Runbooks {
		if _, err := url.Parse(c.Runbooks[class]); err != nil {
			add("runbooks.%s: invalid URL", class)
		}
	}
	return errors.Join(errs...)
}
