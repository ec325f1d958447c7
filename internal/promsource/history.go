package promsource

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// RangeChunks reads [from, to] at step with query_range, in time chunks of
// Config.Chunk, at most Config.MaxConcurrent requests in flight, and calls
// yield with each chunk's scrapes in time order (chunks in order too): at
// each step, for each replica found, exactly what the scraper would have
// produced. A chunk that cannot be read is skipped and its error joined
// into the returned one; yield's error stops the read.
func (r *Reader) RangeChunks(ctx context.Context, from, to time.Time, step time.Duration, yield func([]series.Scrape) error) error {
	if step <= 0 {
		return fmt.Errorf("range step %s must be positive", step)
	}
	type result struct {
		from, to time.Time
		scrapes  []series.Scrape
		err      error
		held     bool // holds a semaphore slot until consumed
	}
	var spans [][2]time.Time
	for start := from; !start.After(to); {
		end := start.Add(r.cfg.Chunk)
		if end.After(to) {
			end = to
		}
		spans = append(spans, [2]time.Time{start, end})
		start = end.Add(step) // the next chunk starts on the next step
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Each chunk's result has its own channel, read in order; the
	// semaphore bounds requests (and results held) in flight.
	sem := make(chan struct{}, r.cfg.MaxConcurrent)
	results := make([]chan result, len(spans))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	go func() {
		for i, span := range spans {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] <- result{from: span[0], to: span[1], err: ctx.Err()}
				continue
			}
			go func(i int, span [2]time.Time) {
				scrapes, err := r.readRange(ctx, span[0], span[1], step)
				results[i] <- result{span[0], span[1], scrapes, err, true}
			}(i, span)
		}
	}()
	var errs []error
	for i := range spans {
		res := <-results[i]
		if res.held {
			<-sem
		}
		if res.err != nil {
			errs = append(errs, fmt.Errorf("%s to %s: %w", res.from.UTC().Format(time.RFC3339), res.to.UTC().Format(time.RFC3339), res.err))
			continue
		}
		if err := yield(res.scrapes); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	return errors.Join(errs...)
}

// Range is RangeChunks collected into one time-ordered slice, for short
// ranges (a backtest of a few replicas); a long range of a large fleet
// should use RangeChunks.
func (r *Reader) Range(ctx context.Context, from, to time.Time, step time.Duration) ([]series.Scrape, error) {
	var out []series.Scrape
	err := r.RangeChunks(ctx, from, to, step, func(c []series.Scrape) error { out = append(out, c...); return nil })
	return out, err
}

func (r *Reader) readRange(ctx context.Context, from, to time.Time, step time.Duration) ([]series.Scrape, error) {
	ans, err := r.query(ctx, "range", r.cfg.query(), time.Time{}, v1.Range{Start: from, End: to, Step: step})
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
