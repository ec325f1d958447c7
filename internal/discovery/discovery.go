// Package discovery finds the targets to scrape beside the static list:
// DNS names (A/AAAA or SRV records of a headless Service, re-resolved
// periodically), Kubernetes pods (watched through client-go informers) and
// files in Prometheus' file_sd format (re-read periodically).
// A Discoverer merges them with the static targets, optionally keeps one
// shard of the fleet, and hands the full sorted list to a callback
// whenever it changes; the daemon passes it to the scraper, which stops the
// loops of removed targets and frees their windows, and retires their
// alerts (see Removed) so a scale-down resolves them as "target removed"
// instead of paging.
//
// Configuration, embedded in the main config as `discovery:` (every key is
// optional; the values shown are the defaults unless noted):
//
//	discovery:
//	  dns:
//	    - names: [sglang-headless.llm.svc.cluster.local]   # A/AAAA: pod IPs (required)
//	      port: 30000                # for A/AAAA names
//	      name_prefix: ""            # e.g. "llama-"; targets are <prefix><ip>:<port>
//	      scheme: http
//	      path: /metrics
//	      kind: engine               # or gateway
//	      labels: {model: llama-3-70b}   # no default; put on every target
//	      refresh_interval: 30s
//	    - names: [_http._tcp.sglang.llm.svc.cluster.local] # SRV: host and port from the record;
//	                                 # targets are <prefix><first label of the host>:<port>
//	  kubernetes:                    # present (even as `kubernetes: {}`) = enabled
//	    kubeconfig: ""               # empty: in-cluster service account
//	    namespaces: []               # empty: the watchdog's own namespace
//	    label_selector: ""           # e.g. app.kubernetes.io/name=sglang
//	    port: "30000"                # or a container port name, e.g. http
//	    scheme: http
//	    path: /metrics
//	    kind: engine
//	    copy_labels: [app.kubernetes.io/name, model, role]
//	    model_label: model           # pod label copied as the target's "model"
//	    include_not_ready: true      # keep pods that are not Ready (cold starts, crash loops)
//	    watch_nodes: true            # read the pods' nodes (conditions, cordon); needs a ClusterRole
//	    http_client: {}              # no default: the scrape section's client settings
//	  file_sd:
//	    - files: [/etc/watchdog/targets/*.json, /etc/watchdog/targets/*.yaml]  # globs (required)
//	      refresh_interval: 30s      # files listed and read again; changed content parsed anew
//	      name_prefix: ""            # targets are <prefix><host>:<port>
//	      scheme: http               # a group's __scheme__ label overrides it
//	      path: /metrics             # a group's __metrics_path__ label overrides it
//	      kind: engine               # a group's kind label overrides it
//	      http_client:               # no default: the scrape section's client settings
//	        basic_auth: {username: watchdog, password_file: /run/secrets/sglang-password}
//	  shard:
//	    total: 0                     # 0 or 1: no sharding
//	    index: 0                     # 0 <= index < total
//	    by: target                   # or model: every replica of a model in one shard
//
// Target names: "<namespace>.<pod>" for pods (target names hold no '/',
// which separates target and worker in replica names downstream), the
// name prefix then "<ip>:<port>" for A/AAAA records, the name prefix then
// "<first label of the host>:<port>" for SRV records, and the name prefix
// then the "<host>:<port>" of the file for file_sd targets. When two
// sources yield the same name, static wins over Kubernetes, which wins
// over file_sd, which wins over DNS.
//
// Client settings: every source takes an http_client block (Prometheus'
// HTTP client configuration: tls_config, basic_auth, authorization, ...)
// that replaces the scrape section's settings, whole, for its targets.
//
// file_sd: each file is a JSON or YAML list of groups
// {targets: [host:port, ...], labels: {...}}, as Prometheus reads them.
// Labels are copied onto the group's targets ("model" and "role" mean what
// they mean for the other sources), except kind (engine or gateway),
// __scheme__ and __metrics_path__, which set the group's endpoint; other
// labels starting with "__" are dropped. A file that cannot be read or
// parsed, or holds a bad target or label, keeps its last good targets; it
// is counted in watchdog_discovery_refresh_failures_total{source="file_sd"}
// on every refresh and logged once per distinct error. A file the globs no
// longer match (deleted, renamed) takes its targets with it.
//
// Pods: terminating pods (deletionTimestamp set) and pods that completed
// are dropped, since a scale-down is not an outage; failed pods (evicted,
// exited for good) stay targets, marked failed and never scraped, because
// a replica lost that way is an outage; pods without an IP are skipped
// until they have one; pods that are not Ready stay targets unless
// include_not_ready is false. Every target carries its pod's status
// (phase, readiness, restarts, last termination) for the detectors: a
// status change is published without restarting the target's scrapes. Kubernetes discovery needs list and
// watch on pods and events (core API group) in each watched namespace (a
// Role and RoleBinding per namespace), and, with watch_nodes, on nodes (a
// ClusterRole: nodes are cluster-scoped). Events and nodes add the pods'
// warnings and node conditions to their status, for the pages.
//
// DNS: a failed lookup (including NXDOMAIN, which is what a headless
// Service answers when every pod is unready) keeps that name's last known
// targets, so a resolver hiccup or an outage never drops the fleet; it is
// counted every time and logged once per distinct error.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/sglang-watchdog/sglang-watchdog/internal/promreg"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// Source names, the values of the source label of the metrics.
const (
	SourceStatic     = "static"
	SourceDNS        = "dns"
	SourceKubernetes = "kubernetes"
	SourceFileSD     = "file_sd"
)

// Timing of updates.
const (
	// DefaultMinUpdateInterval coalesces bursts (a rollout churning pods)
	// into at most one update per interval; a change waits at most this
	// long to be published.
	DefaultMinUpdateInterval = time.Second
	// DefaultInitialSyncTimeout bounds the wait for every source's first
	// answer before the first update: an API server that cannot be
	// reached (or RBAC that forbids the watch) must not keep the static
	// and DNS targets unwatched. A late source is published when it syncs.
	DefaultInitialSyncTimeout = 30 * time.Second
)

// Discoverer merges static, DNS and Kubernetes targets.
type Discoverer struct {
	static  []scrape.Target
	dns     []*dnsSource
	kube    *kubeSource
	files   []*fileSource
	shard   ShardConfig
	logger  *zap.Logger
	metrics *metrics

	minInterval time.Duration
	syncTimeout time.Duration

	kick    chan struct{} // a source changed; capacity 1, never blocks
	synced  chan string   // a source finished its first pass; one slot per source
	running atomic.Bool

	// State of Run's loop.
	last    []scrape.Target
	dups    map[string]bool   // names dropped as duplicates, logged once
	skipped map[string]string // pods skipped for a configuration problem, logged once
}

// options are the knobs tests turn.
type options struct {
	saNamespaceFile string
	minInterval     time.Duration
	syncTimeout     time.Duration
}

// New validates cfg and builds the sources; it starts nothing. static are
// the targets of the main config (URLs normalized), which win over
// discovered targets of the same name. kube may be nil unless
// cfg.Kubernetes is set; a nil resolver uses net.DefaultResolver. Metrics
// are registered on reg (nil: not registered); a later New with the same
// reg (a config reload) reuses them.
func New(cfg Config, static []scrape.Target, kube kubernetes.Interface, resolver Resolver,
	reg prometheus.Registerer, logger *zap.Logger) (*Discoverer, error) {
	return newDiscoverer(cfg, static, kube, resolver, reg, logger, options{
		saNamespaceFile: serviceAccountNamespace,
		minInterval:     DefaultMinUpdateInterval,
		syncTimeout:     DefaultInitialSyncTimeout,
	})
}

func newDiscoverer(cfg Config, static []scrape.Target, kube kubernetes.Interface, resolver Resolver,
	reg prometheus.Registerer, logger *zap.Logger, opts options) (*Discoverer, error) {
	if err := cfg.Validate("discovery"); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if cfg.Kubernetes != nil && kube == nil {
		return nil, errors.New("discovery.kubernetes: configured but no Kubernetes client was given")
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	d := &Discoverer{
		static:      slices.Clone(static),
		shard:       cfg.Shard,
		logger:      logger,
		metrics:     newMetrics(reg),
		minInterval: opts.minInterval,
		syncTimeout: opts.syncTimeout,
		kick:        make(chan struct{}, 1),
	}
	sources := len(cfg.DNS)
	for _, dc := range cfg.DNS {
		dc.Labels = maps.Clone(dc.Labels)
		d.dns = append(d.dns, newDNSSource(dc, resolver, d.metrics.failures.WithLabelValues(SourceDNS), d.signal,
			logger.With(zap.String("source", SourceDNS))))
	}
	for _, fc := range cfg.FileSD {
		d.files = append(d.files, newFileSource(fc, d.metrics.failures.WithLabelValues(SourceFileSD), d.signal,
			logger.With(zap.String("source", SourceFileSD))))
		sources++
	}
	if kc := cfg.Kubernetes; kc != nil {
		namespaces := kc.Namespaces
		if len(namespaces) == 0 {
			namespaces = []string{ownNamespace(kc.Kubeconfig, opts.saNamespaceFile)}
		}
		ks, err := newKubeSource(*kc, namespaces, kube, d.metrics.failures.WithLabelValues(SourceKubernetes), d.signal,
			logger.With(zap.String("source", SourceKubernetes)))
		if err != nil {
			return nil, fmt.Errorf("discovery.kubernetes: %w", err)
		}
		d.kube = ks
		sources++
	}
	d.synced = make(chan string, sources)
	return d, nil
}

// signal notes that a source changed. It never blocks: one pending signal
// stands for any number of changes.
func (d *Discoverer) signal() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Run runs the sources and calls update, from Run's goroutine, with the
// full sorted target list (static and discovered, deduplicated, sharded):
// once as soon as every source has answered (or DefaultInitialSyncTimeout
// passed), then whenever the list changes, at most once per
// DefaultMinUpdateInterval. update owns the slice it is given. Run returns
// nil when ctx is done, once every goroutine it started has exited. It may
// be called once.
func (d *Discoverer) Run(ctx context.Context, update func(targets []scrape.Target)) error {
	if update == nil {
		return errors.New("discovery: nil update function")
	}
	if !d.running.CompareAndSwap(false, true) {
		return errors.New("discovery: Run called twice")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before wg.Wait: stops the sources

	pending := map[string]bool{}
	for i, s := range d.dns {
		name := fmt.Sprintf("dns[%d]", i)
		pending[name] = true
		wg.Go(func() { s.run(ctx, func() { d.synced <- name }) })
	}
	for i, s := range d.files {
		name := fmt.Sprintf("file_sd[%d]", i)
		pending[name] = true
		wg.Go(func() { s.run(ctx, func() { d.synced <- name }) })
	}
	if d.kube != nil {
		pending[SourceKubernetes] = true
		wg.Go(func() { d.kube.run(ctx, func() { d.synced <- SourceKubernetes }) })
	}

	deadline := time.NewTimer(d.syncTimeout)
	defer deadline.Stop()
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			return nil
		case name := <-d.synced:
			delete(pending, name)
		case <-deadline.C:
			d.logger.Warn("discovery sources not synced in time; publishing the targets known so far",
				zap.Strings("pending", slices.Sorted(maps.Keys(pending))), zap.Duration("waited", d.syncTimeout))
			clear(pending)
		}
	}
	select { // the first update covers every change so far
	case <-d.kick:
	default:
	}
	d.publish(update, true)

	var due <-chan time.Time // armed while a change waits to be published
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.synced: // a source that missed the deadline
		case <-d.kick:
		case <-due:
			due = nil
			d.publish(update, false)
			continue
		}
		if due == nil {
			due = time.After(d.minInterval)
		}
	}
}

// publish computes the target list and hands it to update if it changed
// (or first is set).
func (d *Discoverer) publish(update func([]scrape.Target), first bool) {
	targets := d.collect()
	if !first && slices.EqualFunc(targets, d.last, sameTarget) {
		return
	}
	removed := Removed(d.last, targets)
	added := Removed(targets, d.last)
	d.last = targets
	d.metrics.updates.Inc()
	log := d.logger.Info
	if len(removed)+len(added) == 0 && !first {
		log = d.logger.Debug // only pod status changed (readiness, restarts)
	}
	log("targets updated", zap.Int("targets", len(targets)),
		zap.Int("added", len(added)), zap.Int("removed", len(removed)), zap.Strings("removed_names", removed))
	update(slices.Clone(targets))
}

// sameTarget reports whether two targets are equal including their pod
// status: a status change is published (the scraper takes it without
// restarting the loop).
func sameTarget(a, b scrape.Target) bool {
	return a.Equal(b) && a.Pod.Equal(b.Pod)
}

// collect merges the sources (first name wins: static, Kubernetes, files,
// DNS), applies the shard and sorts by name.
func (d *Discoverer) collect() []scrape.Target {
	var pods []scrape.Target
	var skipped map[string]string
	if d.kube != nil {
		pods, skipped = d.kube.targets()
	}
	var byFile, byDNS []scrape.Target
	for _, s := range d.files {
		byFile = append(byFile, s.targets()...)
	}
	for _, s := range d.dns {
		byDNS = append(byDNS, s.targets()...)
	}
	d.metrics.targets.WithLabelValues(SourceStatic).Set(float64(len(d.static)))
	d.metrics.targets.WithLabelValues(SourceKubernetes).Set(float64(len(pods)))
	d.metrics.targets.WithLabelValues(SourceFileSD).Set(float64(len(byFile)))
	d.metrics.targets.WithLabelValues(SourceDNS).Set(float64(len(byDNS)))
	d.logSkipped(skipped)

	n := len(d.static) + len(pods) + len(byFile) + len(byDNS)
	seen := make(map[string]bool, n)
	dups := map[string]bool{}
	merged := make([]scrape.Target, 0, n)
	for _, list := range [][]scrape.Target{d.static, pods, byFile, byDNS} {
		for _, t := range list {
			if seen[t.Name] {
				dups[t.Name] = true
				continue
			}
			seen[t.Name] = true
			merged = append(merged, t)
		}
	}
	for name := range dups {
		if !d.dups[name] {
			d.logger.Warn("two sources yield the same target name; keeping the first (static, then kubernetes, then file_sd, then dns)",
				zap.String("target", name))
		}
	}
	d.dups = dups

	out := Shard(merged, d.shard)
	slices.SortFunc(out, func(a, b scrape.Target) int { return strings.Compare(a.Name, b.Name) })
	d.metrics.selected.Set(float64(len(out)))
	return out
}

// logSkipped logs a pod skipped for a configuration problem when it is new
// or its reason changed, not on every pass.
func (d *Discoverer) logSkipped(skipped map[string]string) {
	for name, reason := range skipped {
		if d.skipped[name] != reason {
			d.logger.Warn("pod is not a target", zap.String("pod", name), zap.String("reason", reason))
		}
	}
	d.skipped = skipped
}

// Removed returns the names of the targets in prev that are not in next,
// sorted: the replicas to retire (their alerts resolve as "target
// removed") after an update.
func Removed(prev, next []scrape.Target) []string {
	keep := make(map[string]bool, len(next))
	for _, t := range next {
		keep[t.Name] = true
	}
	var gone []string
	for _, t := range prev {
		if !keep[t.Name] {
			gone = append(gone, t.Name)
		}
	}
	slices.Sort(gone)
	return slices.Compact(gone)
}

type metrics struct {
	targets  *prometheus.GaugeVec
	selected prometheus.Gauge
	failures *prometheus.CounterVec
	updates  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		targets: promreg.Reuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_discovery_targets",
			Help: "Targets each discovery source currently yields, before deduplication and sharding.",
		}, []string{"source"})),
		selected: promreg.Reuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "watchdog_discovery_selected_targets",
			Help: "Targets this watchdog scrapes: every source merged, deduplicated and sharded.",
		})),
		failures: promreg.Reuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_discovery_refresh_failures_total",
			Help: "Failed DNS lookups, Kubernetes list/watch calls and file_sd reads of a bad or unreadable file; the last known targets are kept.",
		}, []string{"source"})),
		updates: promreg.Reuse(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_discovery_updates_total",
			Help: "Target lists handed to the scraper.",
		})),
	}
	for _, s := range []string{SourceDNS, SourceKubernetes, SourceFileSD} {
		m.failures.WithLabelValues(s)
	}
	return m
}
