package main

import (
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
)

// journalOptions are the incident journal's settings. It is saved in the
// local state directory only: in HA mode the shared ConfigMap (1 MiB)
// holds the paging state, and each copy keeps its own journal.
func journalOptions(cfg config.Config, dir *state.Dir, logger *zap.Logger) incident.Options {
	opts := incident.Options{
		Retention:    time.Duration(cfg.Incidents.Retention),
		MaxIncidents: cfg.Incidents.MaxIncidents,
		MaxPoints:    cfg.Incidents.MaxPointsPerSignal,
		Logger:       logger,
	}
	if dir.Path() != "" {
		opts.Store = dir
	}
	return opts
}
