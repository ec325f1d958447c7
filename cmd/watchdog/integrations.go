package main

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/alertmanager"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagerduty"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/slack"
)

// buildIntegrations constructs the configured paging integrations, each with
// its own HTTP client so one provider's slowness cannot exhaust another's
// connections. The log integration is always added by the dispatcher.
func buildIntegrations(cfg config.Config, logger *zap.Logger) ([]notify.Integration, error) {
	var out []notify.Integration
	var errs []error
	client := func() *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	sc := slack.Config{
		BotToken:   cfg.Notify.Slack.BotToken,
		Channel:    cfg.Notify.Slack.Channel,
		APIURL:     cfg.Notify.Slack.APIURL,
		WebhookURL: cfg.Notify.Slack.WebhookURL,
	}
	if sc.Enabled() {
		n, err := slack.New(sc, client(), logger.Named("slack"))
		if err != nil {
			errs = append(errs, fmt.Errorf("slack: %w", err))
		} else {
			out = append(out, notify.Integration{Name: notify.IntegrationSlack, Notifier: n})
		}
	}
	pc := pagerduty.Config{RoutingKey: cfg.Notify.PagerDuty.RoutingKey, EventsURL: cfg.Notify.PagerDuty.EventsURL}
	if pc.Enabled() {
		n, err := pagerduty.New(pc, client(), logger.Named("pagerduty"))
		if err != nil {
			errs = append(errs, fmt.Errorf("pagerduty: %w", err))
		} else {
			out = append(out, notify.Integration{Name: notify.IntegrationPagerDuty, Notifier: n})
		}
	}
	if am := cfg.Notify.Alertmanager; am.Enabled() {
		n, err := alertmanager.New(am, logger.Named("alertmanager"))
		if err != nil {
			errs = append(errs, fmt.Errorf("alertmanager: %w", err))
		} else {
			out = append(out, notify.Integration{Name: alertmanager.Name, Notifier: n})
		}
	}
	return out, errors.Join(errs...)
}
