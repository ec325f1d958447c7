// Package app is the daemon: it builds the pipeline
//
//	source (scrape or Prometheus) -> window -> assess -> alert -> notify
//
// with its state, HTTP surface, discovery, reload, heartbeat and HA
// failover from one configuration, runs it, and stops it in a fixed order
// (stages.go). LoadAndRun first waits, serving its probes, for a
// configuration it can use (wait.go). cmd/watchdog turns flags and the
// environment into a configuration and Options and handles signals;
// everything else that makes the daemon is here.
package app

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/discovery"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/ha"
	"github.com/sglang-watchdog/sglang-watchdog/internal/heartbeat"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore"
	"github.com/sglang-watchdog/sglang-watchdog/internal/leader"
	"github.com/sglang-watchdog/sglang-watchdog/internal/reload"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/server"
	"github.com/sglang-watchdog/sglang-watchdog/internal/silence"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Options are what the daemon takes besides its configuration: where it
// writes, the command-line settings that are not configuration, and the
// hooks of the demo, of watchdog record and of tests.
type Options struct {
	// Log receives the daemon's log records.
	Log io.Writer
	// AlertsOut receives the human-readable block of every notification
	// (the log integration); nil: Log with log_format console, else none
	// (one structured record per notification).
	AlertsOut io.Writer
	// Lifecycle enables POST /-/reload (--web.enable-lifecycle); Pprof
	// serves /debug/pprof/ (--web.enable-pprof).
	Lifecycle, Pprof bool
	// WebConfigFile is --web.config.file: TLS and basic auth of the
	// listener (server.Web); "" for none.
	WebConfigFile string
	// Load reads the configuration again for a reload; nil: the daemon
	// does not reload. LoadAndRun also loads the first one with it.
	Load func() (config.Config, error)
	// Reload asks for a reload on each receive (main forwards SIGHUP).
	Reload <-chan struct{}
	// ConfigFile is re-read when its content changes, every WatchInterval
	// (0: not watched), as a reload. "" for none.
	ConfigFile    string
	WatchInterval time.Duration
	// Started, when set, gets the bound listen address once serving: with
	// LoadAndRun, that of the server waiting for a usable configuration
	// first, if it waits, then the daemon's.
	Started func(addr string)
	// ExtraIntegrations are added to the configured ones (the demo's
	// dry-run printers).
	ExtraIntegrations []notify.Integration
	// Dial and Listen replace the operating system's network for every
	// connection the daemon opens or accepts: a test passes an in-memory
	// network to run the daemon in a testing/synctest bubble, where
	// sockets would stop the fake clock. nil: the real network.
	Dial   func(ctx context.Context, network, address string) (net.Conn, error)
	Listen func(network, address string) (net.Listener, error)
	// Recorder, when set, makes the run a recording one (watchdog record).
	Recorder Recorder
	// Registry is where the daemon registers its own metrics; nil: a new
	// one holding the Go, process and build-info collectors too.
	Registry *prometheus.Registry
}

// Recorder turns a run into a recording: it restricts the configuration
// so that nothing is sent, taps what is appended to the windows and
// observes the evaluation rounds.
type Recorder interface {
	Restrict(config.Config) config.Config
	Start(cfg config.Config, windows scrape.Appender, now time.Time) (scrape.Appender, eval.RoundObserver, error)
}

// Run builds the daemon from cfg and runs it until ctx is done.
func Run(ctx context.Context, cfg config.Config, opts Options) error {
	d, err := newDaemon(cfg, opts, time.Now())
	if err != nil {
		return err
	}
	defer d.logger.Sync()
	err = runStages(ctx, d.stages(), d.logger)
	d.logger.Info("watchdog stopped")
	return err
}

// daemon is the built pipeline, nothing running yet.
type daemon struct {
	cfg    config.Config
	opts   Options
	logger *zap.Logger
	reg    *prometheus.Registry

	stateDir   *state.Dir
	stateStore persistStore
	kstore     *kubestore.Store
	elector    *leader.Elector
	writers    *stateWriters

	windows *window.Store
	history *history
	// slos is the memory of the objectives' events per model: it lives
	// as long as the daemon, across reloads.
	slos *slo.Book
	// rounds observes the evaluation rounds (a recording's).
	rounds    eval.RoundObserver
	targets   []scrape.Target
	scraper   *scrape.Manager
	disc      *discovery.Discoverer
	journal   *incident.Journal
	detectors int
	notify    *notify.Dispatcher
	silences  *silence.Store
	standby   func() bool
	loop      *eval.Loop
	pipeline  *pipeline
	reloader  *reload.Reloader[config.Config]
	server    *server.Server
	beat      *heartbeat.Heartbeat
	failover  *ha.Failover
}

// newDaemon builds every component, in the order they depend on each
// other; it starts nothing.
func newDaemon(cfg config.Config, opts Options, now time.Time) (*daemon, error) {
	if opts.Recorder != nil {
		cfg = opts.Recorder.Restrict(cfg)
	}
	d := &daemon{cfg: cfg, opts: opts}
	for _, step := range []func(time.Time) error{
		d.openLog,
		d.openState,
		d.openWindows,
		d.buildScraper,
		d.buildDelivery,
		d.buildEvaluation,
		d.buildReload,
		d.buildServer,
		d.buildHeartbeat,
		d.buildFailover,
	} {
		if err := step(now); err != nil {
			return nil, err
		}
	}
	d.loop.SetLinks(d.pipeline.links(cfg, d.logger)) // before the first round
	d.logStart()
	if opts.Started != nil {
		opts.Started(d.server.Addr())
	}
	return d, nil
}
