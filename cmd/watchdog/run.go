package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sglang-watchdog/sglang-watchdog/internal/app"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/diagnose"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/httpclient"
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
	// webConfigFile is --web.config.file: TLS and basic auth of the
	// listener (internal/server); "" for none.
	webConfigFile string
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
	// reload asks the daemon to reload on each receive (main forwards
	// SIGHUP); nil: only the file watcher and POST /-/reload reload.
	reload <-chan struct{}
}

// recorder is the daemon's app.Recorder: the recording run, if any.
func (dio daemonIO) recorder() app.Recorder {
	if dio.record == nil {
		return nil
	}
	return dio.record
}

// httpClient is an HTTP client on the daemon's network (a test's, or the
// operating system's); name labels its connections.
func (dio daemonIO) httpClient(name string, timeout time.Duration) *http.Client {
	return httpclient.New(name, timeout, commoncfg.WithDialContextFunc(dio.dial))
}

// daemon runs the watchdog with cfg until ctx is done (internal/app).
func daemon(ctx context.Context, cfg config.Config, dio daemonIO) error {
	return app.Run(ctx, cfg, dio.options())
}

// daemonWhenLoaded runs the watchdog with what dio.load loads, waiting
// while that cannot be used, on fallback's listen address
// (app.LoadAndRun).
func daemonWhenLoaded(ctx context.Context, fallback config.Config, dio daemonIO) error {
	return app.LoadAndRun(ctx, fallback, dio.options())
}

func (dio daemonIO) options() app.Options {
	return app.Options{
		Log: dio.stderr, AlertsOut: dio.alertsOut, Lifecycle: dio.lifecycle, Pprof: dio.pprof,
		Load: dio.load, Reload: dio.reload, ConfigFile: dio.configFile, WatchInterval: dio.watchInterval,
		Started: dio.started, ExtraIntegrations: dio.extraIntegrations, Dial: dio.dial, Listen: dio.listen,
		Recorder: dio.recorder(), WebConfigFile: dio.webConfigFile,
	}
}
