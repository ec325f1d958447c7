package discovery

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// Config is the dynamic part of target discovery, embedded in the main
// configuration as `discovery:`. The static list stays in the main config
// (targets / WATCHDOG_TARGETS). A zero field takes its default (see
// WithDefaults), so a section decoded from YAML needs no custom
// unmarshaller and strict decoding keeps rejecting unknown keys.
type Config struct {
	// DNS entries are re-resolved every refresh_interval.
	DNS []DNSConfig `yaml:"dns"`
	// Kubernetes, when present (even as `kubernetes: {}`), watches pods.
	Kubernetes *KubernetesConfig `yaml:"kubernetes"`
	// FileSD entries read target files in Prometheus' file_sd format.
	FileSD []FileSDConfig `yaml:"file_sd"`
	// Shard keeps a slice of the fleet; a zero total keeps all of it.
	Shard ShardConfig `yaml:"shard"`
}

// DNSConfig discovers the replicas behind DNS names: A/AAAA records (a
// headless Service's pod IPs) scraped on Port, or SRV records (names that
// start with '_', e.g. _http._tcp.sglang.llm.svc.cluster.local) that carry
// their own host and port.
type DNSConfig struct {
	// NamePrefix is put before every target name of this entry, to keep
	// entries apart (e.g. "llama-").
	NamePrefix string   `yaml:"name_prefix"`
	Names      []string `yaml:"names"`
	Port       int      `yaml:"port"` // for A/AAAA names; default 30000
	Scheme     string   `yaml:"scheme"`
	Path       string   `yaml:"path"`
	Kind       string   `yaml:"kind"`
	// Labels are put on every target of the entry; "model" names the
	// served model (sharding by model, and the replica's model when the
	// exposition lacks model_name).
	Labels          map[string]string `yaml:"labels"`
	RefreshInterval time.Duration     `yaml:"refresh_interval"`
	// HTTPClient replaces the scrape-level client settings for the
	// entry's targets (nil: the scrape level's).
	HTTPClient *scrape.HTTPClientConfig `yaml:"http_client"`
}

// FileSDConfig reads targets from files in Prometheus' file_sd format: a
// JSON (.json) or YAML (.yml, .yaml) list of groups, each
// {targets: [host:port, ...], labels: {name: value, ...}}.
type FileSDConfig struct {
	// Files are paths or globs (filepath.Match patterns in the last path
	// element and any directory) ending in .json, .yml or .yaml.
	Files []string `yaml:"files"`
	// RefreshInterval is how often the files are listed and read again; a
	// file whose content changed is parsed anew.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// NamePrefix is put before every target name of this entry
	// (<prefix><host>:<port>).
	NamePrefix string `yaml:"name_prefix"`
	// Scheme, Path and Kind are the entry's; a group's __scheme__,
	// __metrics_path__ and kind labels override them for its targets.
	Scheme string `yaml:"scheme"`
	Path   string `yaml:"path"`
	Kind   string `yaml:"kind"`
	// HTTPClient replaces the scrape-level client settings for the
	// entry's targets (nil: the scrape level's).
	HTTPClient *scrape.HTTPClientConfig `yaml:"http_client"`
}

// KubernetesConfig discovers SGLang pods through the Kubernetes API.
type KubernetesConfig struct {
	// Kubeconfig is a kubeconfig file for running outside the cluster;
	// empty uses the in-cluster service account (see NewClient).
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespaces to watch; empty watches the watchdog's own namespace
	// (from the service account), or "default" outside a cluster.
	Namespaces    []string `yaml:"namespaces"`
	LabelSelector string   `yaml:"label_selector"`
	// Port is a container port name ("http") looked up in the pod's
	// containers, or a number; default 30000.
	Port   string `yaml:"port"`
	Scheme string `yaml:"scheme"`
	Path   string `yaml:"path"`
	Kind   string `yaml:"kind"`
	// CopyLabels are pod label keys copied onto the target (and from it
	// onto the replica and its alerts). Nil takes DefaultCopyLabels(); an
	// explicit empty list copies none.
	CopyLabels []string `yaml:"copy_labels"`
	// ModelLabel is the pod label whose value becomes the target's "model"
	// label (the replica's model when the exposition lacks model_name, and
	// the key of sharding by model); default "model".
	ModelLabel string `yaml:"model_label"`
	// IncludeNotReady keeps pods that are not Ready as targets, so cold
	// starts and crash loops are seen; default true. Pods without an IP
	// and terminating pods are never targets.
	IncludeNotReady *bool `yaml:"include_not_ready"`
	// HTTPClient replaces the scrape-level client settings for the pods'
	// targets (nil: the scrape level's).
	HTTPClient *scrape.HTTPClientConfig `yaml:"http_client"`
	// WatchNodes reads the nodes the watched pods run on (their
	// conditions and cordon), so a page can name a node NotReady or under
	// pressure; default true. It needs get/list/watch on nodes, a
	// cluster-scoped permission (ClusterRole): false when it is not
	// granted.
	WatchNodes *bool `yaml:"watch_nodes"`
}

// ShardConfig splits the fleet between several watchdogs: each keeps the
// targets whose shard is its index.
type ShardConfig struct {
	Total int `yaml:"total"` // 0 or 1: no sharding
	Index int `yaml:"index"` // 0 <= index < total
	// By is "target" (default: hash of the target name) or "model" (hash
	// of the target's "model" label, so fleet-wide correlation stays
	// within one watchdog; targets without a model fall back to their name).
	By string `yaml:"by"`
}

// Shard keys.
const (
	ShardByTarget = "target"
	ShardByModel  = "model"
)

// Defaults.
const (
	DefaultPort            = 30000 // SGLang's default HTTP port
	DefaultGPUPort         = 9400  // dcgm-exporter's default port (kind gpu)
	DefaultScheme          = "http"
	DefaultPath            = "/metrics"
	DefaultRefreshInterval = 30 * time.Second
	DefaultModelLabel      = "model"
	// LabelModel is the target label that names the served model: the
	// window store reads it when the exposition lacks model_name, and
	// sharding by model hashes it.
	LabelModel = "model"
	// LabelNamespace is the target label Kubernetes discovery sets to the
	// pod's namespace; routes match it and Alertmanager receives it.
	LabelNamespace = "namespace"
)

// DefaultCopyLabels returns the pod labels copied onto targets by default.
func DefaultCopyLabels() []string { return []string{"app.kubernetes.io/name", "model", "role"} }

// Enabled reports whether any dynamic source is configured.
func (c Config) Enabled() bool { return len(c.DNS) > 0 || c.Kubernetes != nil || len(c.FileSD) > 0 }

// WithDefaults returns c with every zero field set to its default. It does
// not validate.
func (c Config) WithDefaults() Config {
	dns := make([]DNSConfig, len(c.DNS))
	for i, d := range c.DNS {
		dns[i] = d.withDefaults()
	}
	c.DNS = dns
	if c.Kubernetes != nil {
		k := c.Kubernetes.withDefaults()
		c.Kubernetes = &k
	}
	files := make([]FileSDConfig, len(c.FileSD))
	for i, f := range c.FileSD {
		files[i] = f.withDefaults()
	}
	c.FileSD = files
	if c.Shard.By == "" {
		c.Shard.By = ShardByTarget
	}
	return c
}

func (d DNSConfig) withDefaults() DNSConfig {
	if d.Port == 0 {
		d.Port = defaultPort(d.Kind)
	}
	d.Scheme, d.Path, d.Kind = defaultEndpoint(d.Scheme, d.Path, d.Kind)
	if d.RefreshInterval == 0 {
		d.RefreshInterval = DefaultRefreshInterval
	}
	return d
}

func (f FileSDConfig) withDefaults() FileSDConfig {
	f.Scheme, f.Path, f.Kind = defaultEndpoint(f.Scheme, f.Path, f.Kind)
	if f.RefreshInterval == 0 {
		f.RefreshInterval = DefaultRefreshInterval
	}
	return f
}

func (k KubernetesConfig) withDefaults() KubernetesConfig {
	if k.Port == "" {
		k.Port = strconv.Itoa(defaultPort(k.Kind))
	}
	k.Scheme, k.Path, k.Kind = defaultEndpoint(k.Scheme, k.Path, k.Kind)
	if k.CopyLabels == nil {
		k.CopyLabels = DefaultCopyLabels()
	}
	if k.ModelLabel == "" {
		k.ModelLabel = DefaultModelLabel
	}
	if k.IncludeNotReady == nil {
		yes := true
		k.IncludeNotReady = &yes
	}
	if k.WatchNodes == nil {
		yes := true
		k.WatchNodes = &yes
	}
	return k
}

// defaultPort is SGLang's port, or dcgm-exporter's for kind gpu.
func defaultPort(kind string) int {
	if kind == scrape.KindGPU {
		return DefaultGPUPort
	}
	return DefaultPort
}

func defaultEndpoint(scheme, path, kind string) (string, string, string) {
	if scheme == "" {
		scheme = DefaultScheme
	}
	if path == "" {
		path = DefaultPath
	}
	if kind == "" {
		kind = scrape.KindEngine
	}
	return scheme, path, kind
}

// Validate reports every problem at once, each with its YAML path under
// prefix (the key the section is embedded at, e.g. "discovery"). Zero
// fields are valid: they take their defaults.
func (c Config) Validate(prefix string) error {
	var errs []error
	add := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", prefix, path, fmt.Sprintf(format, a...)))
	}
	for i, d := range c.DNS {
		d.validate(fmt.Sprintf("dns[%d]", i), add)
	}
	if c.Kubernetes != nil {
		c.Kubernetes.validate("kubernetes", add)
	}
	for i, f := range c.FileSD {
		f.validate(fmt.Sprintf("file_sd[%d]", i), add)
	}
	c.Shard.validate("shard", add)
	return errors.Join(errs...)
}

type addFunc func(path, format string, a ...any)

func (d DNSConfig) validate(path string, add addFunc) {
	if len(d.Names) == 0 {
		add(path+".names", "at least one DNS name is required")
	}
	seen := map[string]int{}
	for i, name := range d.Names {
		p := fmt.Sprintf("%s.names[%d]", path, i)
		host := strings.TrimSuffix(name, ".")
		switch {
		case host == "":
			add(p, "empty name")
		case strings.Contains(host, "://") || strings.ContainsAny(host, "/:@ \t\n"):
			add(p, "%q must be a bare DNS name (no scheme, port or path)", name)
		default:
			if j, dup := seen[host]; dup {
				add(p, "%q duplicates names[%d]", name, j)
			}
			seen[host] = i
		}
	}
	checkName(path+".name_prefix", d.NamePrefix, add)
	if d.Port < 0 || d.Port > 65535 {
		add(path+".port", "%d is not a port number (1-65535)", d.Port)
	}
	checkEndpoint(path, d.Scheme, d.Path, d.Kind, add)
	for k := range d.Labels {
		if k == "" {
			add(path+".labels", "empty label name")
		}
	}
	checkRefresh(path, d.RefreshInterval, add)
	checkHTTPClient(path, d.HTTPClient, add)
}

func (f FileSDConfig) validate(path string, add addFunc) {
	if len(f.Files) == 0 {
		add(path+".files", "at least one file or glob is required")
	}
	for i, pattern := range f.Files {
		p := fmt.Sprintf("%s.files[%d]", path, i)
		if _, err := filepath.Match(pattern, ""); err != nil {
			add(p, "%q is not a glob: %v", pattern, err)
		} else if !fileSDFormat.MatchString(pattern) {
			add(p, "%q must end in .json, .yml or .yaml", pattern)
		}
	}
	checkName(path+".name_prefix", f.NamePrefix, add)
	checkEndpoint(path, f.Scheme, f.Path, f.Kind, add)
	checkRefresh(path, f.RefreshInterval, add)
	checkHTTPClient(path, f.HTTPClient, add)
}

// fileSDFormat matches the names file_sd reads, as Prometheus does: the
// extension tells JSON from YAML.
var fileSDFormat = regexp.MustCompile(`^[^*]*(\*[^/]*)?\.(json|yml|yaml|JSON|YML|YAML)$`)

func checkRefresh(path string, d time.Duration, add addFunc) {
	if d < 0 || (d > 0 && d < time.Second) {
		add(path+".refresh_interval", "must be at least 1s, got %s", d)
	}
}

func checkHTTPClient(path string, c *scrape.HTTPClientConfig, add addFunc) {
	if c == nil {
		return
	}
	if err := c.Validate(); err != nil {
		add(path+".http_client", "%v", err)
	}
}

func (k KubernetesConfig) validate(path string, add addFunc) {
	seen := map[string]int{}
	for i, ns := range k.Namespaces {
		p := fmt.Sprintf("%s.namespaces[%d]", path, i)
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			add(p, "%q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
		} else if j, dup := seen[ns]; dup {
			add(p, "%q duplicates namespaces[%d]", ns, j)
		}
		seen[ns] = i
	}
	if _, err := labels.Parse(k.LabelSelector); err != nil {
		add(path+".label_selector", "%v", err)
	}
	if k.Port != "" {
		if n, err := strconv.Atoi(k.Port); err == nil {
			if n < 1 || n > 65535 {
				add(path+".port", "%d is not a port number (1-65535)", n)
			}
		} else if msgs := validation.IsValidPortName(k.Port); len(msgs) > 0 {
			add(path+".port", "%q is neither a port number nor a container port name: %s", k.Port, strings.Join(msgs, "; "))
		}
	}
	checkEndpoint(path, k.Scheme, k.Path, k.Kind, add)
	for i, key := range k.CopyLabels {
		if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
			add(fmt.Sprintf("%s.copy_labels[%d]", path, i), "%q is not a label key: %s", key, strings.Join(msgs, "; "))
		}
	}
	if k.ModelLabel != "" {
		if msgs := validation.IsQualifiedName(k.ModelLabel); len(msgs) > 0 {
			add(path+".model_label", "%q is not a label key: %s", k.ModelLabel, strings.Join(msgs, "; "))
		}
	}
	checkHTTPClient(path, k.HTTPClient, add)
}

func (s ShardConfig) validate(path string, add addFunc) {
	switch s.By {
	case "", ShardByTarget, ShardByModel:
	default:
		add(path+".by", "%q is neither %q nor %q", s.By, ShardByTarget, ShardByModel)
	}
	switch {
	case s.Total < 0:
		add(path+".total", "must not be negative, got %d", s.Total)
	case s.Total == 0 && s.Index != 0:
		add(path+".index", "set without shard.total")
	case s.Total > 0 && (s.Index < 0 || s.Index >= s.Total):
		add(path+".index", "must be in [0, %d) for total %d, got %d", s.Total, s.Total, s.Index)
	}
}

func checkEndpoint(path, scheme, urlPath, kind string, add addFunc) {
	switch scheme {
	case "", "http", "https":
	default:
		add(path+".scheme", "%q is neither http nor https", scheme)
	}
	if urlPath != "" && (!strings.HasPrefix(urlPath, "/") || strings.ContainsAny(urlPath, "?# \t\n")) {
		add(path+".path", "%q must be an absolute path without query, e.g. /metrics", urlPath)
	}
	if kind != "" && !slices.Contains(scrape.Kinds(), kind) {
		add(path+".kind", "%q is not one of %s", kind, strings.Join(scrape.Kinds(), ", "))
	}
}

// checkName applies the rule of config.Target names: a replica name is
// target or target/worker downstream, so a target name holds no '/'.
func checkName(path, name string, add addFunc) {
	if strings.ContainsAny(name, "/ \t\n") {
		add(path, "%q must not contain '/' or spaces", name)
	}
}
