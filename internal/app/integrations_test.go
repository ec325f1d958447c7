package app

import (
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/alertmanager"
)

// Named receivers are built beside the default ones, each under its own
// name, so each gets its own queue and state document.
func TestNamedReceiversAreBuiltUnderTheirNames(t *testing.T) {
	cfg := config.Default()
	cfg.Notify.PagerDuty.RoutingKey = "legacy-key"
	am := config.AlertmanagerReceiver(alertmanager.DefaultConfig())
	am.URLs = []string{"http://alertmanager-eu:9093"}
	cfg.Notify.Receivers = []config.Receiver{
		{Name: "inference-slack", Slack: &config.SlackReceiver{WebhookURL: "https://hooks.slack.com/services/T/B/x", APIURL: config.DefaultSlackAPIURL}},
		{Name: "inference-pager", PagerDuty: &config.PagerDutyReceiver{RoutingKey: "k2", EventsURL: config.DefaultPagerDutyURL}},
		{Name: "platform-pager", PagerDuty: &config.PagerDutyReceiver{RoutingKey: "k3", EventsURL: config.DefaultPagerDutyURL}},
		{Name: "am-eu", Alertmanager: &am},
		{Name: "research-hook", Webhook: &config.WebhookReceiver{URL: "https://hooks.example/r", Secret: "s"}},
	}
	got, err := buildIntegrations(cfg, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range got {
		names = append(names, in.Name)
	}
	if strings.Join(names, ",") != "pagerduty,inference-slack,inference-pager,platform-pager,am-eu,research-hook" {
		t.Errorf("integrations %v", names)
	}
}
