package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/reload"
	"github.com/sglang-watchdog/sglang-watchdog/internal/server"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// unwatchedRetryInterval is how often a daemon without a usable
// configuration reads it again when its file is not watched
// (WatchInterval 0): it must come back by itself once the file is fixed.
const unwatchedRetryInterval = 30 * time.Second

// LoadAndRun loads the configuration with opts.Load and runs the daemon
// with it (Run). A configuration that cannot be used at start does not end
// the process: in sidecar mode a container that exits makes the serving
// pod NotReady, so a typo would take a healthy replica out of its Service.
// Until a configuration loads, the daemon evaluates nothing and serves on
// fallback.ListenAddress (config.Fallback) a liveness probe that answers
// 200, a readiness probe that answers 503 with the error, and /metrics
// with watchdog_config_last_reload_successful 0 and
// watchdog_config_last_error_info naming the step that failed. It reads
// the configuration again on every opts.Reload, on POST /-/reload with
// opts.Lifecycle, and every opts.WatchInterval (every 30 s when the file
// is not watched); the first that loads starts the daemon in the same
// process. It returns when ctx is done, or Run's error.
func LoadAndRun(ctx context.Context, fallback config.Config, opts Options) error {
	if opts.Load == nil {
		return errors.New("app: LoadAndRun needs Options.Load")
	}
	if opts.Registry == nil {
		// One registry for the wait and the daemon, so the configuration's
		// series continue across the start.
		opts.Registry = newRegistry()
	}
	cfg, err := opts.Load()
	if err != nil {
		var loaded bool
		if cfg, loaded, err = waitForConfig(ctx, fallback, opts, err); err != nil || !loaded {
			return err
		}
	}
	return Run(ctx, cfg, opts)
}

// waiter is the daemon while its configuration cannot be used.
type waiter struct {
	opts   Options
	logger *zap.Logger
	status *reload.Status
	retry  time.Duration

	mu sync.Mutex
	// problem is the last load error as shown (URLs redacted), reason the
	// step it failed at.
	problem, reason string
	// loaded receives the configuration that loaded, once.
	loaded chan config.Config
	done   bool
}

// waitForConfig serves and retries until a configuration loads (true) or
// ctx is done (false). first is the error of the first load.
func waitForConfig(ctx context.Context, fallback config.Config, opts Options, first error) (config.Config, bool, error) {
	logger, err := NewLogger(fallback.LogLevel, fallback.LogFormat, opts.Log)
	if err != nil {
		return config.Config{}, false, errors.Join(first, err)
	}
	defer logger.Sync()
	w := &waiter{opts: opts, logger: logger, status: reload.NewStatus(opts.Registry), retry: opts.WatchInterval,
		loaded: make(chan config.Config, 1)}
	if w.retry <= 0 {
		w.retry = unwatchedRetryInterval
	}
	w.failed(first)
	var lifecycle func() error
	if opts.Lifecycle {
		lifecycle = func() error { return w.attempt(time.Now()) }
	}
	srv, err := server.NewWaiting(fallback.ListenAddress, server.WaitingOptions{
		Gatherer: opts.Registry, Problem: w.page, Reload: lifecycle, Listen: opts.Listen,
		Web: webOptions(fallback, opts), Logger: logger.Named("http"),
	})
	if err != nil {
		logger.Error("cannot listen while waiting for a usable configuration", zap.String("listen", fallback.ListenAddress), zap.Error(err))
		return config.Config{}, false, fmt.Errorf("listen %s: %w", fallback.ListenAddress, err)
	}
	logger.Info("watchdog waiting for a usable configuration; not evaluating", zap.String("listen", srv.Addr()),
		zap.Duration("retry_interval", w.retry))
	if opts.Started != nil {
		opts.Started(srv.Addr())
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- srv.Run(sctx) }()
	// The daemon binds the same address: the waiting server must have let
	// it go first.
	shutdown := func() {
		stop()
		if err := <-served; err != nil {
			logger.Warn("the waiting server did not stop cleanly", zap.Error(err))
		}
	}

	ticker := time.NewTicker(w.retry)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			shutdown()
			logger.Info("watchdog stopped")
			return config.Config{}, false, nil
		case err := <-served:
			stop()
			return config.Config{}, false, fmt.Errorf("waiting server: %w", err)
		case cfg := <-w.loaded:
			shutdown()
			return cfg, true, nil
		case <-opts.Reload:
			w.attempt(time.Now())
		case now := <-ticker.C:
			w.attempt(now)
		}
	}
}

// attempt loads the configuration; one that loads is handed to the loop.
// The error, URLs redacted, says why not.
func (w *waiter) attempt(now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil
	}
	cfg, err := w.opts.Load()
	if err != nil {
		w.failed(err)
		return errors.New(w.problem)
	}
	w.done = true
	w.status.Succeeded(now)
	w.logger.Info("configuration loaded; starting the daemon")
	w.loaded <- cfg
	return nil
}

// failed records a load that failed; it logs at error level only when the
// error differs from the last one, so retrying an unchanged file does not
// flood the log.
func (w *waiter) failed(err error) {
	reason := reload.ReasonOf(err)
	w.status.Failed(reason)
	text := redact.URLs(err.Error())
	if text == w.problem {
		w.logger.Debug("configuration still cannot be used", zap.String("reason", reason))
		return
	}
	w.problem, w.reason = text, reason
	fields := []zap.Field{zap.String("reason", reason), zap.String("error", text), zap.Duration("retry_interval", w.retry)}
	if w.opts.ConfigFile != "" {
		fields = append(fields, zap.String("file", w.opts.ConfigFile))
	}
	w.logger.Error("configuration cannot be used; the daemon evaluates nothing until it can", fields...)
}

// page is what the waiting server shows on every path but liveness and
// /metrics.
func (w *waiter) page() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	b.WriteString(w.problem)
	b.WriteString("\n\nThe watchdog is running but watches nothing until its configuration loads (reason: " + w.reason + ").")
	if w.reason == string(config.ReasonEnv) {
		// A process cannot be given a new environment.
		b.WriteString(" The environment and the flags are read at start only: fix the variable or flag named above and restart the watchdog.\n")
		return b.String()
	}
	fmt.Fprintf(&b, " The configuration is read again every %s and on SIGHUP; once it loads, the daemon starts without a restart.\n", w.retry)
	return b.String()
}
