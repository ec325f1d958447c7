package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/httpclient"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/alertmanager"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagerduty"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/slack"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/webhook"
)

// Dialer replaces the operating system's network (Options.Dial).
type Dialer = func(ctx context.Context, network, address string) (net.Conn, error)

// httpClient is an HTTP client of the daemon's, on its network (dial; nil:
// the operating system's); name labels its connections (pkg/httpclient).
func httpClient(dial Dialer, name string, timeout time.Duration) *http.Client {
	return httpclient.New(name, timeout, commoncfg.WithDialContextFunc(dial))
}

// buildIntegrations constructs the configured paging integrations, each with
// its own HTTP client so one provider's slowness cannot exhaust another's
// connections. The log integration is always added by the dispatcher.
func buildIntegrations(cfg config.Config, dial Dialer, logger *zap.Logger) ([]notify.Integration, error) {
	var out []notify.Integration
	var errs []error
	// A secret file named but absent (an optional Secret key left out) or
	// empty leaves its integration unconfigured; say so, since nothing will
	// page through it.
	for _, f := range []struct {
		integration, path, file string
		set                     bool
	}{
		{"slack", "notify.slack.bot_token_file", cfg.Notify.Slack.BotTokenFile, cfg.Notify.Slack.BotToken.IsSet()},
		{"slack", "notify.slack.webhook_url_file", cfg.Notify.Slack.WebhookURLFile, cfg.Notify.Slack.WebhookURL.IsSet()},
		{"pagerduty", "notify.pagerduty.routing_key_file", cfg.Notify.PagerDuty.RoutingKeyFile, cfg.Notify.PagerDuty.RoutingKey.IsSet()},
	} {
		if f.file != "" && !f.set {
			logger.Warn("secret file missing or empty: this credential is not configured", zap.String("integration", f.integration),
				zap.String("setting", f.path), zap.String("file", f.file))
		}
	}
	sc := slack.Config{
		BotToken:   cfg.Notify.Slack.BotToken,
		Channel:    cfg.Notify.Slack.Channel,
		APIURL:     cfg.Notify.Slack.APIURL,
		WebhookURL: cfg.Notify.Slack.WebhookURL,
	}
	if sc.Enabled() {
		n, err := slack.New(sc, httpClient(dial, notify.IntegrationSlack, 30*time.Second), logger.Named("slack"))
		if err != nil {
			errs = append(errs, fmt.Errorf("slack: %w", err))
		} else {
			out = append(out, notify.Integration{Name: notify.IntegrationSlack, Notifier: n})
		}
	}
	pc := pagerduty.Config{RoutingKey: cfg.Notify.PagerDuty.RoutingKey, EventsURL: cfg.Notify.PagerDuty.EventsURL}
	if pc.Enabled() {
		n, err := pagerduty.New(pc, httpClient(dial, notify.IntegrationPagerDuty, 30*time.Second), logger.Named("pagerduty"))
		if err != nil {
			errs = append(errs, fmt.Errorf("pagerduty: %w", err))
		} else {
			out = append(out, notify.Integration{Name: notify.IntegrationPagerDuty, Notifier: n})
		}
	}
	if am := cfg.Notify.Alertmanager; am.Enabled() {
		n, err := alertmanager.New(am, logger.Named("alertmanager"), commoncfg.WithDialContextFunc(dial))
		if err != nil {
			errs = append(errs, fmt.Errorf("alertmanager: %w", err))
		} else {
			out = append(out, notify.Integration{Name: alertmanager.Name, Notifier: n})
		}
	}
	named, err := buildReceivers(cfg.Notify.Receivers, dial, logger)
	return append(out, named...), errors.Join(append(errs, err)...)
}

// buildReceivers constructs the named receivers of notify.receivers (loaded
// and validated, their secrets read), each with its own HTTP client.
func buildReceivers(receivers []config.Receiver, dial Dialer, logger *zap.Logger) ([]notify.Integration, error) {
	var out []notify.Integration
	var errs []error
	for i, r := range receivers {
		log := logger.Named(r.Name)
		var n notify.Notifier
		var err error
		switch {
		case r.Slack != nil:
			n, err = slack.New(r.Slack.SlackConfig(), httpClient(dial, r.Name, 30*time.Second), log)
		case r.PagerDuty != nil:
			n, err = pagerduty.New(r.PagerDuty.PagerDutyConfig(), httpClient(dial, r.Name, 30*time.Second), log)
		case r.Alertmanager != nil:
			n, err = alertmanager.New(alertmanager.Config(*r.Alertmanager), log, commoncfg.WithDialContextFunc(dial))
		case r.Webhook != nil:
			n, err = webhook.New(r.Webhook.WebhookConfig(), httpClient(dial, r.Name, 30*time.Second), log)
		default:
			err = errors.New("no destination")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("notify.receivers[%d] (%s): %w", i, r.Name, err))
			continue
		}
		out = append(out, notify.Integration{Name: r.Name, Notifier: n})
	}
	return out, errors.Join(errs...)
}
