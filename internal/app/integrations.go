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
	return out, errors.Join(errs...)
}
