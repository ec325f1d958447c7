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
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
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
	logger *zap.Logger
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
	h := &history{reader: reader, budget: cfg.History.StartupBudget, logger: logger}
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

// backfillSLOs fills the SLO memory per model from history, over the
// longest of the policy's windows and each objective's period, so a
// restart keeps the budget and the burn rates; within
// history.startup_budget, after the windows' backfill. What it cannot
// read is logged; those objectives count from the first round on.
func (h *history) backfillSLOs(ctx context.Context, book *slo.Book, now time.Time) {
	if h == nil || book == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, h.budget)
	defer cancel()
	cfg := book.Config()
	step := slo.HistoryStep
	to := now.Truncate(step)
	for _, o := range cfg.Objectives {
		q, ok := o.HistoryQuery(h.reader.Selector(), promsource.PromDuration(step))
		if !ok {
			h.logger.Info("SLO not backfilled: its events are counted from the first round", zap.String("slo", o.Name), zap.String("kind", string(o.Kind)))
			continue
		}
		from := now.Add(-max(cfg.Policy.Longest(), o.Period)).Truncate(step)
		res, err := h.reader.QueryRange(ctx, "slo", q, from.Add(step), to, step)
		if err != nil {
			h.logger.Error("SLO backfill failed: its events are counted from the first round", zap.String("slo", o.Name), zap.Error(err))
			continue
		}
		var points []slo.HistoryPoint
		for _, rs := range res {
			for _, p := range rs.Points {
				points = append(points, slo.HistoryPoint{Labels: rs.Labels, At: p.At, Value: p.Value})
			}
		}
		samples := o.FromHistory(points)
		book.Backfill(to, step, samples)
		h.logger.Info("SLO backfilled", zap.String("slo", o.Name), zap.Time("from", from), zap.Time("to", to), zap.Int("steps", len(samples)))
	}
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
