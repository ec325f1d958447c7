package main

import (
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// buildIntegrations constructs the configured paging integrations; the log
// integration is always added by the dispatcher.
func buildIntegrations(cfg config.Config, logger *zap.Logger) ([]notify.Integration, error) {
	return nil, nil
}
