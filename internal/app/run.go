package app

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/discovery"
	"github.com/sglang-watchdog/sglang-watchdog/internal/reload"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/tick"
)

// stages are the daemon's running components, in the order they stop:
// evaluation (the sources feeding the windows, discovery, reloads, the
// loop, the heartbeat) stops first; the deliveries then drain what is
// queued, resolves included; the state writers write what the last round
// and the drain saved; the lease is released after that write, so the next
// leader reads what this one delivered; the HTTP server goes last, so
// /metrics shows the drain.
func (d *daemon) stages() []stage {
	// The backfill from history runs inside the evaluation stage, after the
	// HTTP server answers (probes and /metrics during a slow Prometheus);
	// the loop's first round, which readiness waits for, comes after it.
	filled := make(chan struct{})
	source := d.history.run(d.scraper.Run)
	feed := func(ctx context.Context) error {
		d.history.backfill(ctx, d.windows, time.Now(), d.windows.Options().Retention)
		d.history.backfillSLOs(ctx, d.slos, time.Now())
		close(filled)
		return source(ctx)
	}
	rounds := func(ctx context.Context) error {
		select {
		case <-filled:
		case <-ctx.Done():
			return nil
		}
		return d.loop.Run(ctx)
	}
	evaluation := []func(context.Context) error{feed, rounds, d.beat.Run, d.maintainSilences}
	if d.disc != nil {
		evaluation = append(evaluation, d.runDiscovery)
	}
	if d.reloader != nil {
		evaluation = append(evaluation, d.runReloads)
		if d.opts.ConfigFile != "" && d.opts.WatchInterval > 0 {
			watcher := reload.NewFileWatcher(d.opts.ConfigFile, d.opts.WatchInterval, func() { d.reload() }, d.logger.Named("reload"))
			evaluation = append(evaluation, watcher.Run)
		}
	}
	var lease []func(context.Context) error
	if d.failover != nil {
		evaluation = append(evaluation, func(ctx context.Context) error {
			return d.silences.Follow(ctx, d.cfg.Evaluation.Interval, d.standby,
				func(err error) { d.logger.Warn("follower could not reload the silences", zap.Error(err)) })
		})
		lease = append(lease, d.failover.Run)
	}
	return []stage{
		{"evaluation", evaluation},
		{"deliveries", []func(context.Context) error{d.notify.Run}},
		{"state", []func(context.Context) error{d.writers.run}},
		{"lease", lease},
		{"http", []func(context.Context) error{d.server.Run}},
	}
}

// runDiscovery keeps the scraper's targets those discovered, and resolves
// the incidents of the targets that went away.
func (d *daemon) runDiscovery(ctx context.Context) error {
	current := d.targets
	return d.disc.Run(ctx, func(ts []scrape.Target) {
		if err := d.scraper.SetTargets(ts); err != nil {
			d.logger.Error("discovered targets rejected", zap.Error(err))
			return
		}
		d.pipeline.retire(discovery.Removed(current, ts), time.Now())
		current = ts
	})
}

// runReloads reloads on each request (SIGHUP, forwarded by main).
func (d *daemon) runReloads(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.opts.Reload:
			d.reload()
		}
	}
}

// maintainSilences forgets long-expired silences and refreshes their
// gauges every evaluation interval, apart from the evaluation rounds.
func (d *daemon) maintainSilences(ctx context.Context) error {
	tick.Every(ctx, d.cfg.Evaluation.Interval, d.silences.Sweep)
	return nil
}
