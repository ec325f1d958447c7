package app

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"
)

// stage is components that start together and stop together.
type stage struct {
	name string
	runs []func(ctx context.Context) error
}

// runStages runs every stage's components until ctx is done or one of them
// returns, then stops the stages one at a time in the order given, each
// only once every component of the stages before it has returned: the
// daemon stops evaluating before it drains its deliveries, writes its
// state after the drain, releases its lease after that write and closes
// its HTTP server last, so /metrics shows the drain. It returns the errors
// the components returned.
func runStages(ctx context.Context, stages []stage, logger *zap.Logger) error {
	type running struct {
		cancel context.CancelFunc
		done   sync.WaitGroup
	}
	rs := make([]*running, len(stages))
	var mu sync.Mutex
	var errs []error
	first := make(chan struct{})
	var once sync.Once
	for i, s := range stages {
		r := &running{}
		var sctx context.Context
		sctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
		for _, run := range s.runs {
			r.done.Go(func() {
				if err := run(sctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				once.Do(func() { close(first) })
			})
		}
		rs[i] = r
	}
	select {
	case <-ctx.Done():
	case <-first:
	}
	for i, s := range stages {
		logger.Debug("stopping", zap.String("stage", s.name))
		rs[i].cancel()
		rs[i].done.Wait()
	}
	return errors.Join(errs...)
}
