package app

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/persist"
)

// stateOrder is the order in which the paging state is written: the
// outboxes before the held pages and the alert state saved after them in
// the same round, so that a crash never leaves alert state newer than the
// outboxes holding its events (see package persist).
var stateOrder = []string{notify.StateDocumentPrefix + "*", eval.HeldDocument, eval.AlertsDocument}

// stateWriters write the daemon's state documents off the evaluation and
// delivery paths (pkg/persist).
type stateWriters struct {
	// state holds the paging state: outboxes, alerts, held pages. Its
	// store is the state directory or, in HA, the ConfigMap the leader
	// writes; the HA failover switches it.
	state *persist.Writer
	// journal holds the incident journal, always in the local state
	// directory: in HA the shared ConfigMap keeps the paging state only.
	journal *persist.Writer
}

func newStateWriters(stateStore persist.Store, dir *state.Dir, reg prometheus.Registerer, logger *zap.Logger) *stateWriters {
	m := persist.NewMetrics(reg)
	w := &stateWriters{
		state: persist.New(stateStore, persist.Options{Order: stateOrder, Logger: logger, Metrics: m}),
	}
	w.journal = w.state
	if persist.Store(dir) != stateStore {
		w.journal = persist.New(dir, persist.Options{Logger: logger, Metrics: m})
	}
	return w
}

// run writes until ctx is done, then flushes (each writer bounded by its
// flush timeout) and returns.
func (w *stateWriters) run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.state.Run(ctx) })
	if w.journal != w.state {
		wg.Go(func() { _ = w.journal.Run(ctx) })
	}
	wg.Wait()
	return nil
}
