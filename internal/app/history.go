package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/discovery"
	"github.com/sglang-watchdog/sglang-watchdog/internal/promsource"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// history is what history: and source: prometheus add to the daemon: the
// backfill at start and, for source: prometheus, the poller that replaces
// the scraper. A nil *history does nothing.
type history struct {
	reader *promsource.Reader
	keep   func(series.Scrape) bool // this shard's replicas; nil: all
	poller *promsource.Poller       // nil: the scraper feeds the windows
	budget time.Duration            // history.startup_budget
}

// newHistory builds the reader when history.url is set; nil otherwise.
// lookback is how much history a window holds (what a backfill reads).
func newHistory(cfg config.Config, dial Dialer, app promsource.Appender, lookback time.Duration, reg prometheus.Registerer, logger *zap.Logger) (*history, error) {
	if !cfg.History.Enabled() {
		return nil, nil
	}
	reader, err := promsource.New(cfg.History, cfg.Scrape.Interval, promsource.Options{Dial: dial, MaxSeries: cfg.Scrape.MaxSeries}, reg, logger)
	if err != nil {
		return nil, err
	}
	h := &history{reader: reader, budget: cfg.History.StartupBudget}
	if shard := cfg.Discovery.Shard; shard.Total > 1 {
		// Sharding by model applies to replicas found in Prometheus as to
		// discovered targets: the model is the one the samples name.
		h.keep = func(sc series.Scrape) bool {
			t := scrape.Target{Name: sc.Target}
			if len(sc.Groups) > 0 && sc.Groups[0].Model != "" {
				t.Labels = map[string]string{"model": sc.Groups[0].Model}
			}
			return len(discovery.Shard([]scrape.Target{t}, shard)) == 1
		}
	}
	if cfg.FromPrometheus() {
		// Every step, not every round: a poll appends the newest sample
		// Prometheus holds of each replica, so polling less often than
		// Prometheus scrapes would drop samples from the windows.
		h.poller = promsource.NewPoller(reader, app, reader.Step(), h.keep, logger)
		h.poller.BackfillNew(lookback)
	}
	return h, nil
}

// backfill fills the windows with lookback of history before the first
// scrape, within history.startup_budget; what it could not fill is logged
// and the daemon goes on anyway.
func (h *history) backfill(ctx context.Context, app promsource.Appender, now time.Time, lookback time.Duration) {
	if h == nil {
		return
	}
	if h.keep != nil {
		app = keepAppender{app, h.keep}
	}
	h.reader.Backfill(ctx, app, now, lookback)
}

// startupBudget is how long the backfill may hold back the first round.
func (h *history) startupBudget() time.Duration {
	if h == nil {
		return 0
	}
	return h.budget
}

// run is the pipeline's source goroutine: the poller, or else feed (the
// scraper).
func (h *history) run(feed func(context.Context) error) func(context.Context) error {
	if h == nil || h.poller == nil {
		return feed
	}
	return h.poller.Run
}

type keepAppender struct {
	promsource.Appender
	keep func(series.Scrape) bool
}

func (k keepAppender) Append(sc series.Scrape) error {
	if !k.keep(sc) {
		return nil
	}
	return k.Appender.Append(sc)
}
