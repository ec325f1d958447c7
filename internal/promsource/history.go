package promsource

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// RangeChunks reads [from, to] at step with query_range and calls yield
// with the scrapes of one time chunk (Config.Chunk) at a time, in time
// order: at each step, for each replica found, exactly what the scraper
// would have produced. Each request covers one chunk and at most
// Config.ReplicasPerQuery replicas (listed first with one aggregating
// query), so its size does not grow with the fleet; at most
// Config.MaxConcurrent requests, and their answers, are held at once. A
// request that fails loses its chunk of its replicas, and its error is
// joined into the returned one; yield's error stops the read.
func (r *Reader) RangeChunks(ctx context.Context, from, to time.Time, step time.Duration, yield func([]series.Scrape) error) error {
	if step <= 0 {
		return fmt.Errorf("range step %s must be positive", step)
	}
	batches := [][]string{nil} // nil: the whole fleet in one request
	if r.cfg.ReplicasPerQuery > 0 {
		replicas, err := r.replicasBetween(ctx, from, to)
		if err != nil {
			return fmt.Errorf("listing the replicas: %w", err)
		}
		batches = r.batch(replicas)
	}
	return r.rangeChunks(ctx, from, to, step, batches, yield)
}

// batch splits replicas into groups of at most Config.ReplicasPerQuery.
func (r *Reader) batch(replicas []string) [][]string {
	size := r.cfg.ReplicasPerQuery
	if size <= 0 {
		size = len(replicas)
	}
	var out [][]string
	for len(replicas) > 0 {
		n := min(len(replicas), size)
		out = append(out, replicas[:n])
		replicas = replicas[n:]
	}
	return out
}

// rangeChunks is RangeChunks over the given replica batches (a nil batch:
// the whole fleet).
func (r *Reader) rangeChunks(ctx context.Context, from, to time.Time, step time.Duration, batches [][]string, yield func([]series.Scrape) error) error {
	type unit struct {
		chunk    int
		from, to time.Time
		replicas []string
	}
	type result struct {
		unit
		scrapes []series.Scrape
		err     error
		held    bool // holds a semaphore slot until consumed
	}
	var units []unit
	chunk := 0
	for start := from; !start.After(to); chunk++ {
		end := start.Add(r.cfg.Chunk)
		if end.After(to) {
			end = to
		}
		for _, b := range batches {
			units = append(units, unit{chunk, start, end, b})
		}
		start = end.Add(step) // the next chunk starts on the next step
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Each unit's result has its own channel, read in order; the
	// semaphore bounds requests (and answers held) in flight.
	sem := make(chan struct{}, r.cfg.MaxConcurrent)
	results := make([]chan result, len(units))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	go func() {
		for i, u := range units {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] <- result{unit: u, err: ctx.Err()}
				continue
			}
			go func(i int, u unit) {
				scrapes, err := r.readRange(ctx, u.from, u.to, step, u.replicas)
				results[i] <- result{u, scrapes, err, true}
			}(i, u)
		}
	}()
	var errs []error
	var pending []series.Scrape // the current chunk's scrapes, from all its batches
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		slices.SortStableFunc(pending, func(a, b series.Scrape) int {
			if c := a.At.Compare(b.At); c != 0 {
				return c
			}
			return strings.Compare(a.Target, b.Target)
		})
		err := yield(pending)
		pending = nil
		return err
	}
	for i := range units {
		res := <-results[i]
		if res.held {
			<-sem
		}
		if i > 0 && units[i-1].chunk != res.chunk {
			if err := flush(); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
		if res.err != nil {
			what := "the fleet"
			if res.replicas != nil {
				what = fmt.Sprintf("%d replicas from %s", len(res.replicas), res.replicas[0])
			}
			errs = append(errs, fmt.Errorf("%s to %s, %s: %w", res.from.UTC().Format(time.RFC3339), res.to.UTC().Format(time.RFC3339), what, res.err))
			continue
		}
		pending = append(pending, res.scrapes...)
	}
	if err := flush(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// replicasBetween lists the replicas with any sample in [from, to], with
// one aggregating query (one row per replica, whatever its series).
func (r *Reader) replicasBetween(ctx context.Context, from, to time.Time) ([]string, error) {
	label := r.cfg.ReplicaLabel
	q := fmt.Sprintf("count by (%s) (last_over_time(%s[%s]))", label, r.cfg.query(), promDuration(to.Sub(from)+r.cfg.Step))
	ans, err := r.query(ctx, "replicas", q, to, rangeNone)
	if err != nil {
		return nil, err
	}
	vec, ok := ans.value.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("unexpected result type %s", ans.value.Type())
	}
	var out []string
	for _, s := range vec {
		if v := string(s.Metric[model.LabelName(label)]); v != "" {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Range is RangeChunks collected into one time-ordered slice, for short
// ranges (a backtest of a few replicas); a long range of a large fleet
// should use RangeChunks.
func (r *Reader) Range(ctx context.Context, from, to time.Time, step time.Duration) ([]series.Scrape, error) {
	var out []series.Scrape
	err := r.RangeChunks(ctx, from, to, step, func(c []series.Scrape) error { out = append(out, c...); return nil })
	return out, err
}

// readRange reads one chunk of the given replicas (nil: all).
func (r *Reader) readRange(ctx context.Context, from, to time.Time, step time.Duration, replicas []string) ([]series.Scrape, error) {
	q := r.cfg.query()
	if replicas != nil {
		quoted := make([]string, len(replicas))
		for i, name := range replicas {
			quoted[i] = regexp.QuoteMeta(name)
		}
		q = strings.TrimSuffix(q, "}") + "," + r.cfg.ReplicaLabel + "=~" + strconv.Quote(strings.Join(quoted, "|")) + "}"
	}
	ans, err := r.query(ctx, "range", q, time.Time{}, v1.Range{Start: from, End: to, Step: step})
	if err != nil {
		return nil, err
	}
	fleet, err := r.split(ans.value)
	if err != nil {
		return nil, err
	}
	return scrapesAt(fleet, scrape.NewNormalizer(r.opts.MaxSeries)), nil
}

// Appender receives scrapes (the window store).
type Appender interface {
	Append(s series.Scrape) error
}

// BackfillResult says what a backfill did.
type BackfillResult struct {
	Scrapes, Samples int
	Replicas         map[string]bool
	Err              error // chunks that could not be read, or the budget ran out
}

// Backfill fills app with [now-lookback, now) read from the API, within
// Config.StartupBudget, so baselines are there at start instead of an hour
// later. Scrapes land in time order before any live scrape of the same
// replica (the window rejects out-of-order points, so nothing is counted
// twice); a counter that reset across the join is a reset like any other.
// It never fails the caller: what could not be read is in the result's Err
// and logged.
func (r *Reader) Backfill(ctx context.Context, app Appender, now time.Time, lookback time.Duration) BackfillResult {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartupBudget)
	defer cancel()
	step := r.cfg.Step
	from, to := now.Add(-lookback).Truncate(step), now.Add(-step).Truncate(step)
	res := BackfillResult{Replicas: map[string]bool{}}
	start := time.Now()
	res.Err = r.RangeChunks(ctx, from, to, step, func(chunk []series.Scrape) error {
		for _, sc := range chunk {
			if err := app.Append(sc); err != nil {
				r.logger.Debug("backfilled scrape not kept", zap.String("replica", sc.Target), zap.Error(err))
				continue
			}
			res.Scrapes++
			res.Replicas[sc.Target] = true
			for _, g := range sc.Groups {
				res.Samples += len(g.Samples)
			}
		}
		return nil
	})
	r.metrics.duration.Set(time.Since(start).Seconds())
	r.metrics.backfilled.Add(float64(res.Samples))
	if res.Err != nil {
		r.metrics.failures.Inc()
		r.logger.Error("history backfill incomplete: baselines fill from live data for what is missing",
			zap.Time("from", from), zap.Time("to", to), zap.Int("replicas", len(res.Replicas)), zap.Int("samples", res.Samples), zap.Error(res.Err))
	} else {
		r.logger.Info("history backfilled", zap.Time("from", from), zap.Time("to", to),
			zap.Int("replicas", len(res.Replicas)), zap.Int("samples", res.Samples))
	}
	return res
}
