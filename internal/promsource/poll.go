package promsource

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Poller is `source: prometheus`: at every interval it reads the latest
// samples of the whole fleet with one query and appends, per replica, the
// newest scrape Prometheus holds that the window does not have yet.
// Replicas are discovered from the answer (Config.ReplicaLabel); no target
// list is needed. A replica known before and without a new sample for
// AbsentIntervals steps is appended as a failed scrape
// (series.FailureAbsent, "absent from Prometheus"), as is one whose up is
// 0. After a partial answer (warnings, isPartial) nobody is marked
// absent: missing data there is not a missing replica.
type Poller struct {
	reader   *Reader
	app      Appender
	interval time.Duration
	logger   *zap.Logger
	// keep, when set, says which replicas this daemon watches (sharding by
	// model); others are ignored.
	keep func(sc series.Scrape) bool

	last map[string]time.Time // replica -> newest sample appended
	seen map[string]time.Time // replica -> newest sample time seen in Prometheus
	// lookback > 0: a replica that appears after the first poll is
	// backfilled over it before its first live sample (the daemon's
	// start-up backfill covered those present at start).
	lookback time.Duration
	polled   bool
}

// BackfillNew makes the poller fill a replica that appears after its
// first poll with lookback of its history before the replica's first live
// sample, within Config.StartupBudget.
func (p *Poller) BackfillNew(lookback time.Duration) { p.lookback = lookback }

// NewPoller returns a poller appending to app every interval; keep (nil:
// all) filters replicas. It starts nothing.
func NewPoller(r *Reader, app Appender, interval time.Duration, keep func(series.Scrape) bool, logger *zap.Logger) *Poller {
	return &Poller{reader: r, app: app, interval: interval, keep: keep, logger: logger,
		last: map[string]time.Time{}, seen: map[string]time.Time{}}
}

// Run polls until ctx is done.
func (p *Poller) Run(ctx context.Context) error {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		if err := p.Poll(ctx, time.Now()); err != nil {
			p.logger.Error("reading the fleet from Prometheus failed; replicas keep their last state", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Poll reads the fleet at now and appends what is new. A failed query
// appends nothing (the API being down says nothing about the replicas).
func (p *Poller) Poll(ctx context.Context, now time.Time) error {
	step := p.reader.cfg.Step
	window := time.Duration(p.reader.cfg.AbsentIntervals) * step
	// A range selector in an instant query returns raw samples with the
	// times Prometheus scraped them (not the query time), so rates see
	// real intervals and a sample is never appended twice. Two steps hold
	// each series' newest sample; absence is judged from when a replica
	// was last seen, so the answer stays about two points per series.
	q := fmt.Sprintf("%s[%s]", p.reader.cfg.query(), promDuration(2*step))
	ans, err := p.reader.query(ctx, "latest", q, now, rangeNone)
	if err != nil {
		return err
	}
	fleet, err := p.reader.split(ans.value)
	if err != nil {
		return err
	}
	newest := map[string]series.Scrape{}
	for _, sc := range scrapesAt(fleet, scrape.NewNormalizer(p.reader.opts.MaxSeries)) {
		newest[sc.Target] = sc // time-ordered: the last one wins
	}
	var fresh []string
	for replica, sc := range newest {
		if p.keep != nil && !p.keep(sc) {
			continue
		}
		if _, known := p.seen[replica]; !known && p.polled && p.lookback > 0 {
			fresh = append(fresh, replica)
		}
		if sc.At.After(p.seen[replica]) {
			p.seen[replica] = sc.At
		}
	}
	if len(fresh) > 0 {
		p.backfill(ctx, fresh, newest)
	}
	for _, replica := range slices.Sorted(maps.Keys(newest)) {
		sc := newest[replica]
		if _, kept := p.seen[replica]; !kept || !sc.At.After(p.last[replica]) {
			continue
		}
		p.append(sc)
	}
	p.polled = true
	if ans.partial {
		return nil
	}
	for replica, seen := range p.seen {
		if now.Sub(seen) < window || !now.After(p.last[replica]) {
			continue
		}
		p.append(series.Scrape{Target: replica, At: now, Reason: series.FailureAbsent,
			Error: fmt.Sprintf("absent from Prometheus: no sample for %s (%d steps of %s)", now.Sub(seen).Round(time.Second), p.reader.cfg.AbsentIntervals, step)})
	}
	return nil
}

// backfill fills replicas that just appeared with their history up to the
// step before their newest sample; a failure is logged and they fill from
// live data.
func (p *Poller) backfill(ctx context.Context, replicas []string, newest map[string]series.Scrape) {
	slices.Sort(replicas)
	to := newest[replicas[0]].At
	for _, r := range replicas {
		to = minTime(to, newest[r].At)
	}
	step := p.reader.cfg.Step
	ctx, cancel := context.WithTimeout(ctx, p.reader.cfg.StartupBudget)
	defer cancel()
	n, samples := 0, 0
	err := p.reader.rangeChunks(ctx, to.Add(-p.lookback), to.Add(-step), step, p.reader.batch(replicas), func(chunk []series.Scrape) error {
		for _, sc := range chunk {
			if sc.At.After(p.last[sc.Target]) {
				p.append(sc)
				n++
				for _, g := range sc.Groups {
					samples += len(g.Samples)
				}
			}
		}
		return nil
	})
	p.reader.metrics.backfilled.Add(float64(samples))
	if err != nil {
		p.reader.metrics.failures.Inc()
		p.logger.Error("history of new replicas incomplete: they fill from live data", zap.Strings("replicas", replicas), zap.Error(err))
		return
	}
	p.logger.Info("new replicas backfilled", zap.Strings("replicas", replicas), zap.Int("scrapes", n))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (p *Poller) append(sc series.Scrape) {
	if err := p.app.Append(sc); err != nil {
		p.logger.Debug("scrape from Prometheus not kept", zap.String("replica", sc.Target), zap.Error(err))
	}
	p.last[sc.Target] = sc.At
}

// promDuration renders d the way PromQL reads durations (whole
// milliseconds).
func promDuration(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}
