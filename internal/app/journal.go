package app

import (
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
)

// journalOptions are the incident journal's settings. It is saved through
// store, the writer of the local state directory dir, and only when dir is
// on disk: in HA mode the shared ConfigMap (1 MiB) holds the paging state,
// and each copy keeps its own journal.
func journalOptions(cfg config.Config, dir *state.Dir, store incident.Store, logger *zap.Logger) incident.Options {
	opts := incident.Options{
		Retention:    time.Duration(cfg.Incidents.Retention),
		MaxIncidents: cfg.Incidents.MaxIncidents,
		MaxPoints:    cfg.Incidents.MaxPointsPerSignal,
		Logger:       logger,
	}
	if dir.Path() != "" {
		opts.Store = store
	}
	return opts
}
