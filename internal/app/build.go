package app

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	promversion "github.com/prometheus/common/version"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/discovery"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/ha"
	"github.com/sglang-watchdog/sglang-watchdog/internal/heartbeat"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore"
	"github.com/sglang-watchdog/sglang-watchdog/internal/leader"
	"github.com/sglang-watchdog/sglang-watchdog/internal/reload"
	"github.com/sglang-watchdog/sglang-watchdog/internal/runbook"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/server"
	"github.com/sglang-watchdog/sglang-watchdog/internal/silence"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
	"github.com/sglang-watchdog/sglang-watchdog/internal/ui"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// persistStore is the paging state's store: the state directory, or in HA
// mode the ConfigMap the leader writes and a new leader reloads.
type persistStore interface {
	notify.Store
	eval.Persister
}

func (d *daemon) openLog(time.Time) error {
	logger, err := NewLogger(d.cfg.LogLevel, d.cfg.LogFormat, d.opts.Log)
	if err != nil {
		return err
	}
	d.logger = logger
	d.reg = d.opts.Registry
	if d.reg == nil {
		d.reg = newRegistry()
	}
	return nil
}

// newRegistry is the daemon's own registry, with the Go, process and
// build-info collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("watchdog"), // watchdog_build_info
	)
	return reg
}

// openState opens the state directory and, in HA mode, the shared
// ConfigMap and the leader election; the writers keep every write off the
// evaluation and delivery paths.
func (d *daemon) openState(time.Time) error {
	var err error
	if d.stateDir, err = state.Open(d.cfg.StateDir); err != nil {
		return err
	}
	d.stateStore = d.stateDir
	if d.cfg.HA.Enabled {
		if !leader.InCluster() {
			return errors.New("ha.enabled needs to run in Kubernetes with a service account")
		}
		haCfg, err := d.cfg.HA.Resolve()
		if err != nil {
			return err
		}
		leaseClient, err := leader.NewInClusterClient("sglang-watchdog/leader-election")
		if err != nil {
			return err
		}
		// A separate client, so state writes never delay a lease renewal.
		stateClient, err := leader.NewInClusterClient("sglang-watchdog/state")
		if err != nil {
			return err
		}
		if d.kstore, err = kubestore.New(stateClient, kubestore.Options{Namespace: haCfg.Namespace, Name: haCfg.StateConfigMap,
			ReadOnly: true, Logger: d.logger.Named("kubestore")}, d.reg); err != nil {
			return err
		}
		d.stateStore = d.kstore
		if d.elector, err = leader.New(haCfg, leaseClient, haCfg.Identity, d.reg, d.logger.Named("leader")); err != nil {
			return err
		}
	}
	d.writers = newStateWriters(d.stateStore, d.stateDir, d.reg, d.logger.Named("state"))
	return nil
}

// openWindows makes the windows and the history reader that backfills
// them (or replaces the scraper, source: prometheus).
func (d *daemon) openWindows(time.Time) error {
	var err error
	if d.windows, err = window.New(window.Options{
		Retention:           d.cfg.Detectors.MaxLookback() + 2*d.cfg.Scrape.Interval,
		MaxSeriesPerReplica: d.cfg.Scrape.MaxSeries,
		MaxBytesPerReplica:  d.cfg.Scrape.MaxWindowBytes,
		ScrapeInterval:      d.cfg.Scrape.Interval,
	}, d.reg); err != nil {
		return fmt.Errorf("window: %w", err)
	}
	d.history, err = newHistory(d.cfg, d.opts.Dial, d.windows, d.windows.Options().Retention, d.reg, d.logger.Named("history"))
	return err
}

// buildScraper makes the scraper of the configured targets and, when
// discovery owns the target list, the discoverer.
func (d *daemon) buildScraper(now time.Time) error {
	var appender scrape.Appender = d.windows
	var err error
	var rounds eval.RoundObserver
	if d.opts.Recorder != nil {
		if appender, rounds, err = d.opts.Recorder.Start(d.cfg, d.windows, now); err != nil {
			return err
		}
	}
	d.rounds = rounds
	if d.targets, err = scrapeTargets(d.cfg.Targets); err != nil {
		return err
	}
	probe := d.cfg.Scrape.HealthProbe
	if !probe.Enabled {
		probe = config.HealthProbe{} // a zero interval turns probing off
	}
	if d.scraper, err = scrape.New(d.targets, scrape.Options{
		Interval:       d.cfg.Scrape.Interval,
		Timeout:        d.cfg.Scrape.Timeout,
		MaxBodyBytes:   d.cfg.Scrape.MaxBodyBytes,
		MaxSeries:      d.cfg.Scrape.MaxSeries,
		KeepFamilies:   keptFamilies(d.cfg),
		FilterFamilies: d.cfg.Scrape.FilterFamilies,
		AcceptGzip:     d.cfg.Scrape.AcceptGzip,
		// The scrape section's client settings; a target's own replace them.
		HTTPClient: &d.cfg.Scrape.HTTPClient,
		Dial:       d.opts.Dial,
		// /health_generate of engine targets, so a hang with nothing in
		// flight is seen.
		HealthProbeInterval:    probe.Interval,
		HealthProbeTimeout:     probe.Timeout,
		HealthProbeConcurrency: probe.MaxConcurrent,
	}, appender, d.reg, d.logger.Named("scrape")); err != nil {
		return fmt.Errorf("scrape: %w", err)
	}
	if !d.cfg.Discovery.Enabled() && d.cfg.Discovery.Shard.Total <= 1 {
		return nil
	}
	var kube kubernetes.Interface
	if k := d.cfg.Discovery.Kubernetes; k != nil {
		if kube, err = discovery.NewClient(k.Kubeconfig); err != nil {
			return fmt.Errorf("kubernetes discovery: %w", err)
		}
	}
	if d.disc, err = discovery.New(d.cfg.Discovery, d.targets, kube, nil, d.reg, d.logger.Named("discovery")); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	return nil
}

// buildDelivery makes the integrations, the incident journal and the
// dispatcher that delivers to them.
func (d *daemon) buildDelivery(now time.Time) error {
	integrations, err := buildIntegrations(d.cfg, d.opts.Dial, d.logger)
	if err != nil {
		return err
	}
	integrations = append(integrations, d.opts.ExtraIntegrations...)
	// Production logs are structured records only; the multi-line block
	// is for a terminal.
	alertsOut := d.opts.AlertsOut
	if alertsOut == nil && d.cfg.LogFormat == config.LogFormatConsole {
		alertsOut = d.opts.Log
	}
	d.journal = incident.New(journalOptions(d.cfg, d.stateDir, d.writers.journal, d.logger.Named("incidents")), d.reg, now)
	if d.notify, err = notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: integrations,
		Routes:       notify.RouteConfig{Routes: d.cfg.Notify.Routes},
		Store:        d.writers.state,
		Standby:      d.cfg.HA.Enabled,
		Logger:       d.logger.Named("notify"),
		Registerer:   d.reg,
		LogWriter:    alertsOut,
		OnAttempt:    d.journal.RecordAttempt,
		Queue:        d.cfg.Notify.QueueOptions(),
	}, now); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// buildEvaluation makes the alert tracker, restoring the incidents open
// before a restart, the silences and the evaluation loop.
func (d *daemon) buildEvaluation(now time.Time) error {
	detectors, err := detect.New(d.cfg.Detectors)
	if err != nil {
		return fmt.Errorf("detectors: %w", err)
	}
	d.detectors = len(detectors)
	tracker := alert.NewTracker(d.cfg.Alerts)
	var saved []alert.Incident
	if err := d.stateStore.Load(eval.AlertsDocument, &saved, now); err != nil {
		d.logger.Error("alert state unreadable; starting without it", zap.Error(err))
	}
	tracker.Restore(saved, now)
	fromNotifiers := tracker.RestoreIncidents(d.notify.OpenIncidents(), now)
	if len(saved)+fromNotifiers > 0 {
		d.logger.Info("restored open incidents; they resolve unless seen again", zap.Int("alerts", len(saved)),
			zap.Int("from_notifier_records", fromNotifiers), zap.Duration("grace", d.cfg.Alerts.RestoreGrace))
	}
	// Silences are saved as they change, by the API's handler and by the
	// sweep, neither on the evaluation path: a silence a user was told is
	// in place is on disk.
	opts := silence.DefaultOptions()
	opts.Persister = d.stateStore
	d.silences = silence.New(opts, d.reg)
	if err := d.silences.Load(now); err != nil {
		d.logger.Error("silences unreadable; starting without them", zap.Error(err))
	}
	d.standby = func() bool { return d.elector != nil && !d.elector.IsLeader() }
	d.slos = slo.NewBook(d.cfg.SLOs)
	d.loop = eval.New(eval.Options{
		Interval:  d.cfg.Evaluation.Interval,
		Assessor:  assess.New(detectors, assess.Config{Triage: d.cfg.Detectors.Triage, Correlation: d.cfg.Correlation, SLOs: d.slos}),
		Tracker:   tracker,
		Windows:   d.windows,
		Sender:    d.notify,
		Persister: d.writers.state,
		Silences:  d.silences,
		Logger:    d.logger.Named("eval"),
		Observer:  d.rounds,
		Journal:   d.journal,
	}, d.reg)
	return nil
}

// buildReload makes what a reload reconfigures (the runbooks state the
// detectors' thresholds as configured, so a reload re-renders them).
func (d *daemon) buildReload(now time.Time) error {
	book, err := runbook.New(d.cfg.Detectors)
	if err != nil {
		return err
	}
	d.pipeline = &pipeline{scraper: d.scraper, loop: d.loop, dispatcher: d.notify, book: book, slos: d.slos, logger: d.logger.Named("reload"), discovered: d.disc != nil}
	d.pipeline.pages = slices.ContainsFunc(d.notify.Integrations(), func(n string) bool {
		return n == notify.IntegrationSlack || n == notify.IntegrationPagerDuty
	})
	if d.opts.Load != nil {
		d.reloader = reload.New(d.cfg, d.opts.Load, d.pipeline.apply, now, d.reg, d.logger.Named("reload"))
	}
	return nil
}

// buildServer makes the HTTP surface: /metrics, the APIs, the workspace.
func (d *daemon) buildServer(time.Time) error {
	prefixes := d.cfg.Prefixes()
	workspace, err := ui.New(ui.Options{Alerts: d.loop, Windows: d.windows, Incidents: d.journal, MinStep: 3 * d.cfg.Scrape.Interval,
		PathPrefix: prefixes.Links})
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	var lifecycleReload func() error
	if d.reloader != nil && d.opts.Lifecycle {
		lifecycleReload = d.reload
	}
	book := d.pipeline.book
	if d.server, err = server.New(d.cfg.ListenAddress, server.Options{
		Gatherer: d.reg, Alerts: d.loop, Runbooks: book, Logger: d.logger.Named("http"), Now: time.Now, Reload: lifecycleReload,
		Notices: d.pipeline.notices, StaleAfter: loopStaleAfter(d.cfg.Evaluation.Interval), StartGrace: d.history.startupBudget(), Listen: d.opts.Listen,
		Incidents: incident.Handler(d.journal, book.Markdown), Workspace: workspace,
		Silences: silence.NewHandler(silence.HandlerOptions{Store: d.silences, Token: string(d.cfg.API.Token), Standby: d.standby,
			Now: time.Now, Logger: d.logger.Named("silences"), PathPrefix: prefixes.Links}),
		Pprof: d.opts.Pprof, Web: webOptions(d.cfg, d.opts),
	}); err != nil {
		return fmt.Errorf("listen %s: %w", d.cfg.ListenAddress, err)
	}
	d.pipeline.listen = d.server.Addr()
	return nil
}

// webOptions are where and how the server answers: under the route prefix,
// with the TLS and basic auth of --web.config.file. The daemon and the
// server waiting for a usable configuration take the same.
func webOptions(cfg config.Config, opts Options) server.Web {
	return server.Web{RoutePrefix: cfg.Prefixes().Routes, ConfigFile: opts.WebConfigFile}
}

// buildHeartbeat makes the dead man's switch: it pings only while
// evaluation runs and, in HA mode, only from the leader, so its silence
// means "nobody is watching".
func (d *daemon) buildHeartbeat(time.Time) error {
	var err error
	d.beat, err = heartbeat.New(d.cfg.Heartbeat, httpClient(d.opts.Dial, "heartbeat", 0), func() bool {
		last := d.loop.LastEvaluation()
		fresh := !last.IsZero() && time.Since(last) < loopStaleAfter(d.cfg.Evaluation.Interval)
		return fresh && (d.elector == nil || d.elector.IsLeader())
	}, d.reg, d.logger.Named("heartbeat"))
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// buildFailover makes the HA takeover sequence (internal/ha).
func (d *daemon) buildFailover(time.Time) error {
	if d.elector == nil {
		return nil
	}
	var err error
	d.failover, err = ha.New(ha.Options{Elector: d.elector, Store: d.writers.state, Dispatcher: d.notify, Evaluator: d.loop,
		Now: time.Now, Logger: d.logger.Named("ha")})
	return err
}

// reload re-reads the configuration and applies it; the reloader logs and
// counts the outcome.
func (d *daemon) reload() error { return d.reloader.Reload(time.Now()) }

func (d *daemon) logStart() {
	d.logger.Info("watchdog started", zap.String("version", promversion.Version), zap.String("revision", promversion.GetRevision()),
		zap.String("listen", d.server.Addr()), zap.Int("targets", len(d.targets)), zap.Int("detectors", d.detectors),
		zap.Strings("integrations", d.notify.Integrations()), zap.String("state_dir", d.stateDir.Path()))
}

// loopStaleAfter is how long the evaluation loop may go without a round
// before the daemon counts it as stuck: a few intervals, plus room for a
// slow round on a large fleet.
func loopStaleAfter(interval time.Duration) time.Duration {
	return 3*interval + time.Minute
}
