package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	zaplogfmt "github.com/jsternberg/zap-logfmt"
	oklog "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	promversion "github.com/prometheus/common/version"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/kubernetes"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/diagnose"
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
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
	"github.com/sglang-watchdog/sglang-watchdog/internal/ui"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// version is set at build time (-ldflags "-X main.version=..."); main
// hands it to prometheus/common/version, which --version and
// watchdog_build_info read (with the revision, branch and build date set
// there by -X github.com/prometheus/common/version.Revision=... etc.).
var version = "dev"

func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	if errors.Is(err, diagnose.ErrIncident) {
		return 3 // diagnose found an incident: scripts can tell it from a failure
	}
	return 1
}

func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

// daemonIO carries the process streams, the command-line settings that
// are not configuration, and test hooks.
type daemonIO struct {
	stdout, stderr io.Writer
	// flags are the configuration settings given as flags (over the
	// environment and the file).
	flags config.Flags
	// lifecycle enables POST /-/reload (--web.enable-lifecycle).
	lifecycle bool
	// pprof serves /debug/pprof/ (--web.enable-pprof).
	pprof bool
	// configFile is watched for changes every watchInterval (0: not
	// watched); a change reloads as SIGHUP does. "" for none.
	configFile    string
	watchInterval time.Duration
	// alertsOut receives the human-readable block of every notification
	// (the log integration); nil: stderr with --log.format=console, else
	// none (one structured record per notification).
	alertsOut io.Writer
	// started, when set, gets the bound listen address once serving.
	started func(addr string)
	// extraIntegrations are added to the configured ones (the demo's
	// dry-run printers).
	extraIntegrations []notify.Integration
	// load reads the configuration again for a reload (SIGHUP, POST
	// /-/reload); nil disables reloading.
	load func() (config.Config, error)
	// dial and listen replace the operating system's network for every
	// connection the daemon opens (through httpClient) or accepts: a test
	// passes an in-memory network to run the daemon in a testing/synctest
	// bubble, where sockets would stop the fake clock. nil: the real network.
	dial   func(ctx context.Context, network, address string) (net.Conn, error)
	listen func(network, address string) (net.Listener, error)
	// record, when set, makes the run watchdog record's: nothing is sent,
	// and every scrape and round is written to a recording.
	record *recordingRun
}

// newLogger writes one record per line to w in format (config.LogFormats).
func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey, encCfg.EncodeTime = "ts", zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case config.LogFormatJSON:
		enc = zapcore.NewJSONEncoder(encCfg)
	case config.LogFormatLogfmt:
		enc = zaplogfmt.NewEncoder(encCfg)
	case config.LogFormatConsole:
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		encCfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05")
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("log format %q is not one of %s", format, strings.Join(config.LogFormats, ", "))
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}

// loopStaleAfter is how long the evaluation loop may go without a round
// before the daemon counts it as stuck: a few intervals, plus room for a
// slow round on a large fleet.
func loopStaleAfter(interval time.Duration) time.Duration {
	return 3*interval + time.Minute
}

// daemon wires the pipeline scrape -> window -> detect -> alert -> notify
// and runs it until ctx is done.
func daemon(ctx context.Context, cfg config.Config, dio daemonIO) error {
	if dio.record != nil {
		cfg = dio.record.restrict(cfg)
	}
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat, dio.stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	now := time.Now()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("watchdog"), // watchdog_build_info
	)

	stateDir, err := state.Open(cfg.StateDir)
	if err != nil {
		return err
	}
	// The notification and alert state: the local directory, or in HA mode
	// a ConfigMap the leader writes and a new leader reloads.
	var stateStore interface {
		notify.Store
		eval.Persister
	} = stateDir
	var kstore *kubestore.Store
	var elector *leader.Elector
	if cfg.HA.Enabled {
		if !leader.InCluster() {
			return errors.New("ha.enabled needs to run in Kubernetes with a service account")
		}
		ha, err := cfg.HA.Resolve()
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
		if kstore, err = kubestore.New(stateClient, kubestore.Options{Namespace: ha.Namespace, Name: ha.StateConfigMap, ReadOnly: true, Logger: logger.Named("kubestore")}, reg); err != nil {
			return err
		}
		stateStore = kstore
		if elector, err = leader.New(ha, leaseClient, ha.Identity, reg, logger.Named("leader")); err != nil {
			return err
		}
	}

	store, err := window.New(window.Options{
		Retention:           cfg.Detectors.MaxLookback() + 2*cfg.Scrape.Interval,
		MaxSeriesPerReplica: cfg.Scrape.MaxSeries,
		MaxBytesPerReplica:  cfg.Scrape.MaxWindowBytes,
		ScrapeInterval:      cfg.Scrape.Interval,
	}, reg)
	if err != nil {
		return fmt.Errorf("window: %w", err)
	}

	hist, err := newHistory(cfg, dio, store, store.Options().Retention, reg, logger.Named("history"))
	if err != nil {
		return err
	}

	var appender scrape.Appender = store
	var rounds eval.RoundObserver
	if dio.record != nil {
		if appender, rounds, err = dio.record.start(cfg, store, now); err != nil {
			return err
		}
	}

	targets, err := scrapeTargets(cfg.Targets)
	if err != nil {
		return err
	}
	probe := cfg.Scrape.HealthProbe
	if !probe.Enabled {
		probe = config.HealthProbe{} // a zero interval turns probing off
	}
	scraper, err := scrape.New(targets, scrape.Options{
		Interval:     cfg.Scrape.Interval,
		Timeout:      cfg.Scrape.Timeout,
		MaxBodyBytes: cfg.Scrape.MaxBodyBytes,
		MaxSeries:    cfg.Scrape.MaxSeries,
		KeepFamilies: keptFamilies(cfg),
		AcceptGzip:   cfg.Scrape.AcceptGzip,
		Client:       scrape.NewClient(dio.dial),
		// /health_generate of engine targets, so a hang with nothing in
		// flight is seen.
		HealthProbeInterval:    probe.Interval,
		HealthProbeTimeout:     probe.Timeout,
		HealthProbeConcurrency: probe.MaxConcurrent,
	}, appender, reg, logger.Named("scrape"))
	if err != nil {
		return fmt.Errorf("scrape: %w", err)
	}

	detectors, err := detect.New(cfg.Detectors)
	if err != nil {
		return fmt.Errorf("detectors: %w", err)
	}

	integrations, err := buildIntegrations(cfg, dio, logger)
	if err != nil {
		return err
	}
	integrations = append(integrations, dio.extraIntegrations...)
	// Production logs are structured records only; the multi-line block
	// is for a terminal.
	alertsOut := dio.alertsOut
	if alertsOut == nil && cfg.LogFormat == config.LogFormatConsole {
		alertsOut = dio.stderr
	}
	// Nothing on the evaluation or delivery path waits for the store.
	writers := newStateWriters(stateStore, stateDir, reg, logger.Named("state"))
	journal := incident.New(journalOptions(cfg, stateDir, writers.journal, logger.Named("incidents")), reg, now)
	dispatcher, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: integrations,
		Routes:       notify.RouteConfig{Routes: cfg.Notify.Routes},
		Store:        writers.state,
		Standby:      cfg.HA.Enabled,
		Logger:       logger.Named("notify"),
		Registerer:   reg,
		LogWriter:    alertsOut,
		OnAttempt:    journal.RecordAttempt,

		Queue: cfg.Notify.QueueOptions(),
	}, now)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}

	// Page links are set once the listen address is bound (pipeline.links).
	tracker := alert.NewTracker(cfg.Alerts)
	var saved []alert.Incident
	if err := stateStore.Load(eval.AlertsDocument, &saved, now); err != nil {
		logger.Error("alert state unreadable; starting without it", zap.Error(err))
	}
	tracker.Restore(saved, now)
	fromNotifiers := tracker.RestoreIncidents(dispatcher.OpenIncidents(), now)
	if len(saved)+fromNotifiers > 0 {
		logger.Info("restored open incidents; they resolve unless seen again", zap.Int("alerts", len(saved)),
			zap.Int("from_notifier_records", fromNotifiers), zap.Duration("grace", cfg.Alerts.RestoreGrace))
	}

	silences, standby := startSilences(stateStore, elector, now, reg, logger)
	loop := eval.New(eval.Options{
		Interval:  cfg.Evaluation.Interval,
		Assessor:  assess.New(detectors, assess.Config{Triage: cfg.Detectors.Triage, Correlation: cfg.Correlation}),
		Tracker:   tracker,
		Windows:   store,
		Sender:    dispatcher,
		Persister: writers.state,
		Silences:  silences,
		Logger:    logger.Named("eval"),
		Observer:  rounds,
		Journal:   journal,
	}, reg)

	// The runbooks state the detectors' thresholds as configured; a reload
	// re-renders them (pipeline.apply).
	book, err := runbook.New(cfg.Detectors)
	if err != nil {
		return err
	}
	p := &pipeline{scraper: scraper, loop: loop, dispatcher: dispatcher, book: book, logger: logger.Named("reload"), discovered: cfg.Discovery.Enabled() || cfg.Discovery.Shard.Total > 1}
	p.pages = slices.ContainsFunc(dispatcher.Integrations(), func(n string) bool {
		return n == notify.IntegrationSlack || n == notify.IntegrationPagerDuty
	})
	var disc *discovery.Discoverer
	if p.discovered {
		var kube kubernetes.Interface
		if k := cfg.Discovery.Kubernetes; k != nil {
			if kube, err = discovery.NewClient(k.Kubeconfig); err != nil {
				return fmt.Errorf("kubernetes discovery: %w", err)
			}
		}
		if disc, err = discovery.New(cfg.Discovery, targets, kube, nil, reg, logger.Named("discovery")); err != nil {
			return fmt.Errorf("discovery: %w", err)
		}
	}
	var reloader *reload.Reloader[config.Config]
	var reloadFn, lifecycleReload func() error
	if dio.load != nil {
		reloader = reload.New(cfg, dio.load, p.apply, now, reg, logger.Named("reload"))
		reloadFn = func() error { return reloader.Reload(time.Now()) }
		if dio.lifecycle {
			lifecycleReload = reloadFn
		}
	}
	workspace, err := ui.New(ui.Options{Alerts: loop, Windows: store, Incidents: journal, MinStep: 3 * cfg.Scrape.Interval})
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	srv, err := server.New(cfg.ListenAddress, server.Options{
		Gatherer: reg, Alerts: loop, Runbooks: book, Logger: logger.Named("http"), Now: time.Now, Reload: lifecycleReload, Notices: p.notices,
		StaleAfter: loopStaleAfter(cfg.Evaluation.Interval), Listen: dio.listen,
		Incidents: incident.Handler(journal, book.Markdown), Workspace: workspace,
		Silences: silence.NewHandler(silence.HandlerOptions{Store: silences, Token: string(cfg.API.Token), Standby: standby, Now: time.Now, Logger: logger.Named("silences")}),
		Pprof:    dio.pprof,
	})
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.ListenAddress, err)
	}
	p.listen = srv.Addr()
	loop.SetLinks(p.links(cfg, logger)) // before the first round
	logger.Info("watchdog started", zap.String("version", promversion.Version), zap.String("revision", promversion.GetRevision()), zap.String("listen", srv.Addr()),
		zap.Int("targets", len(targets)), zap.Int("detectors", len(detectors)), zap.Strings("integrations", dispatcher.Integrations()),
		zap.String("state_dir", stateDir.Path()))
	if dio.started != nil {
		dio.started(srv.Addr())
	}

	// Stop order: scraping and evaluation stop first; the dispatcher then
	// drains what is queued (resolves included); the HTTP server goes last
	// so /metrics shows the drain.
	hist.backfill(ctx, store, time.Now(), store.Options().Retention)
	var g oklog.Group
	pipeCtx, stopPipe := context.WithCancel(context.Background())
	notifyCtx, stopNotify := context.WithCancel(context.Background())
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	notifyDone, loopDone := make(chan struct{}), make(chan struct{})
	runCtx, stopRun := context.WithCancel(ctx)
	g.Add(func() error { <-runCtx.Done(); return nil }, func(error) { stopRun() })
	feed := hist.run(scraper.Run)
	g.Add(func() error { return feed(pipeCtx) }, func(error) { stopPipe() })
	if disc != nil {
		current := targets
		g.Add(func() error {
			return disc.Run(pipeCtx, func(ts []scrape.Target) {
				if err := scraper.SetTargets(ts); err != nil {
					logger.Error("discovered targets rejected", zap.Error(err))
					return
				}
				p.retire(discovery.Removed(current, ts), time.Now())
				current = ts
			})
		}, func(error) { stopPipe() })
	}
	if reloader != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		g.Add(func() error {
			for {
				select {
				case <-pipeCtx.Done():
					return nil
				case <-hup:
					reloadFn() // the reloader logs and counts the outcome
				}
			}
		}, func(error) { stopPipe() })
		if dio.configFile != "" && dio.watchInterval > 0 {
			watcher := reload.NewFileWatcher(dio.configFile, dio.watchInterval, func() { reloadFn() }, logger.Named("reload"))
			g.Add(func() error { return watcher.Run(pipeCtx) }, func(error) { stopPipe() })
		}
	}
	g.Add(func() error { defer close(loopDone); return loop.Run(pipeCtx) }, func(error) { stopPipe() })
	g.Add(func() error { defer close(notifyDone); return dispatcher.Run(notifyCtx) }, func(error) { stopPipe(); stopNotify() })
	// The state is written to the end: what the last round and the drain saved.
	stopWriting := func() { stopPipe(); stopNotify(); <-notifyDone; <-loopDone; writers.stop() }
	g.Add(writers.run, func(error) { stopWriting() })
	g.Add(func() error { return srv.Run(httpCtx) }, func(error) {
		stopPipe()
		stopNotify()
		<-notifyDone
		stopHTTP()
	})
	// The heartbeat pings only while evaluation runs and, in HA mode, only
	// from the leader: its silence must mean "nobody is watching".
	hb, err := heartbeat.New(cfg.Heartbeat, dio.httpClient("heartbeat", 0), func() bool {
		last := loop.LastEvaluation()
		fresh := !last.IsZero() && time.Since(last) < loopStaleAfter(cfg.Evaluation.Interval)
		return fresh && (elector == nil || elector.IsLeader())
	}, reg, logger.Named("heartbeat"))
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	g.Add(func() error { return hb.Run(pipeCtx) }, func(error) { stopPipe() })
	if elector != nil {
		g.Add(func() error {
			return silences.Follow(pipeCtx, cfg.Evaluation.Interval, standby, func(err error) { logger.Warn("follower could not reload the silences", zap.Error(err)) })
		}, func(error) { stopPipe() })
		failover, err := ha.New(ha.Options{Elector: elector, Store: writers.state, Dispatcher: dispatcher, Evaluator: loop, Now: time.Now, Logger: logger.Named("ha")})
		if err != nil {
			return err
		}
		electorCtx, stopElector := context.WithCancel(context.Background())
		// The lease is released only after the notification drain and the
		// state's last write, so the next leader does not start while this
		// one still delivers, and reads what it delivered.
		g.Add(func() error { return failover.Run(electorCtx) }, func(error) { stopWriting(); <-writers.done; stopElector() })
	}
	err = g.Run()
	logger.Info("watchdog stopped")
	return err
}

func scrapeTargets(ts []config.Target) ([]scrape.Target, error) {
	out := make([]scrape.Target, 0, len(ts))
	for _, t := range ts {
		u, err := config.MetricsURL(t.URL)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", t.Name, err)
		}
		kind := t.Kind
		if kind == "" {
			kind = "engine"
		}
		out = append(out, scrape.Target{Name: t.Name, URL: u, Kind: kind, Labels: t.Labels})
	}
	return out, nil
}

// pipeline holds the running components a reload reconfigures.
type pipeline struct {
	dispatcher *notify.Dispatcher
	discovered bool // a discoverer owns the target list
	scraper    *scrape.Manager
	loop       *eval.Loop
	book       *runbook.Book
	logger     *zap.Logger

	listen string // the bound listen address, a source of page links
	pages  bool   // Slack or PagerDuty is configured
	// linkWarning is the page-link notice for /readyz ("" for none).
	linkWarning atomic.Pointer[string]
}

// apply makes the running pipeline use next. Everything is validated
// before anything changes, so a rejected configuration leaves the daemon as
// it was. Targets, detector thresholds (and the runbooks that state them),
// correlation, alert timing and runbook links change live, keeping windows and alert state; settings
// bound at start-up are reported as needing a restart.
func (p *pipeline) apply(old, next config.Config) error {
	targets, err := scrapeTargets(next.Targets)
	if err != nil {
		return err
	}
	detectors, err := detect.New(next.Detectors)
	if err != nil {
		return err
	}
	// Rendered now, served with the detectors they describe.
	runbooks, err := p.book.Prepare(next.Detectors)
	if err != nil {
		return fmt.Errorf("runbooks: %w", err)
	}
	routes := notify.RouteConfig{Routes: next.Notify.Routes}
	if err := routes.Validate(); err != nil {
		return err
	}
	if p.discovered {
		// The discoverer owns the target list (static targets included).
		if fmt.Sprint(old.Targets, old.Discovery) != fmt.Sprint(next.Targets, next.Discovery) {
			p.logger.Warn("with discovery on, target and discovery changes take effect after a restart")
		}
	} else {
		if err := p.scraper.SetTargets(targets); err != nil {
			return fmt.Errorf("targets: %w", err)
		}
		p.retire(removedNames(old.Targets, next.Targets), time.Now())
	}
	p.loop.Reconfigure(assess.New(detectors, assess.Config{Triage: next.Detectors.Triage, Correlation: next.Correlation}), next.Alerts, p.links(next, p.logger))
	p.book.Publish(runbooks)
	p.dispatcher.SetRoutes(routes) // validated above

	if restart := restartOnly(old, next); len(restart) > 0 {
		p.logger.Warn("some changed settings take effect only after a restart", zap.Strings("settings", restart))
	}
	return nil
}

// links are the URLs pages carry: external_url, or an address of this
// daemon derived from where it listens (config.PageLinkBase). When Slack or
// PagerDuty would send links nobody configured, it is said loudly (logged
// when it starts or changes, and in /readyz).
func (p *pipeline) links(cfg config.Config, logger *zap.Logger) alert.Links {
	base := cfg.PageLinkBase(p.listen, os.Hostname)
	warning := ""
	if p.pages {
		warning = base.Warning()
	}
	if old := p.linkWarning.Swap(&warning); warning != "" && (old == nil || *old != warning) {
		logger.Warn(warning, zap.String("links_base", base.URL), zap.String("derived_from", string(base.Source)))
	}
	return alert.Links{ExternalURL: base.URL, Runbooks: cfg.Runbooks}
}

// notices are the operator warnings /readyz shows.
func (p *pipeline) notices() []string {
	if w := p.linkWarning.Load(); w != nil && *w != "" {
		return []string{*w}
	}
	return nil
}

func removedNames(old, next []config.Target) []string {
	keep := map[string]bool{}
	for _, t := range next {
		keep[t.Name] = true
	}
	var out []string
	for _, t := range old {
		if !keep[t.Name] {
			out = append(out, t.Name)
		}
	}
	return out
}

// retire resolves the alerts of targets that are gone ("target removed"):
// a scale-down is not an outage, and an open page for a replica that no
// longer exists would never resolve.
func (p *pipeline) retire(names []string, now time.Time) {
	if len(names) == 0 {
		return
	}
	removed := map[string]bool{}
	for _, n := range names {
		removed[n] = true
	}
	p.loop.Retire(func(replica string) bool {
		target, _, _ := strings.Cut(replica, "/")
		return removed[target] || removed[replica]
	}, "target removed", now)
}

// restartOnly lists the changed settings that are bound at start-up.
func restartOnly(old, next config.Config) []string {
	var out []string
	check := func(name string, changed bool) {
		if changed {
			out = append(out, name)
		}
	}
	check("listen_address", old.ListenAddress != next.ListenAddress)
	check("state_dir", old.StateDir != next.StateDir)
	check("log_level", old.LogLevel != next.LogLevel)
	check("log_format", old.LogFormat != next.LogFormat)
	check("scrape", old.Scrape != next.Scrape)
	check("evaluation", old.Evaluation != next.Evaluation)
	check("ha", old.HA != next.HA)
	check("heartbeat", old.Heartbeat != next.Heartbeat)
	check("notify", !notifyEqual(old.Notify, next.Notify))
	check("source", old.Source != next.Source)
	check("history", !reflect.DeepEqual(old.History, next.History))
	check("incidents", old.Incidents != next.Incidents)
	check("api", old.API.TokenFile != next.API.TokenFile || old.API.Token != next.API.Token)
	return out
}

func notifyEqual(a, b config.Notify) bool {
	return a.Slack == b.Slack && a.PagerDuty == b.PagerDuty && reflect.DeepEqual(a.Alertmanager, b.Alertmanager) &&
		a.QueueOptions() == b.QueueOptions() // routes reload live
}
