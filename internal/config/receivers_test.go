package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/alertmanager"
)

func TestNamedReceiversLoadWithDefaultsAndSecretFiles(t *testing.T) {
	cfg, err := Load(Default(), map[string]string{"WATCHDOG_CONFIG": filepath.Join("testdata", "good-receivers.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	rs := cfg.Notify.Receivers
	if len(rs) != 4 {
		t.Fatalf("%d receivers", len(rs))
	}
	if s := rs[0].Slack; s == nil || s.BotToken != "xoxb-inference" || s.Channel != "#inference-oncall" || s.APIURL != DefaultSlackAPIURL {
		t.Errorf("slack receiver %+v", rs[0].Slack)
	}
	if p := rs[1].PagerDuty; p == nil || p.RoutingKey != "R0UTINGKEY-inference" || p.EventsURL != DefaultPagerDutyURL {
		t.Errorf("pagerduty receiver %+v", rs[1].PagerDuty)
	}
	if w := rs[2].Webhook; w == nil || w.URL != "https://hooks.example/research/tok-1" || w.Secret != "whsec-research" {
		t.Errorf("webhook receiver %+v", rs[2].Webhook)
	}
	am := rs[3].Alertmanager
	if am == nil || am.ResendInterval != alertmanager.DefaultResendInterval || !am.HTTPClient.FollowRedirects || !am.HTTPClient.EnableHTTP2 || am.ExternalLabels["cluster"] != "eu-1" {
		t.Errorf("alertmanager receiver lost its defaults: %+v", am)
	}
	if got := (notify.RouteConfig{Routes: cfg.Notify.Routes}).Match(notify.Event{Severity: 2, Labels: map[string]string{"namespace": "llm-prod"}}); strings.Join(got, ",") != "pagerduty,inference-pager,inference-slack" {
		t.Errorf("a critical llm-prod event goes to %v", got)
	}
	// The default single-integration sections are untouched.
	if cfg.Notify.Slack.APIURL != DefaultSlackAPIURL || cfg.Notify.PagerDuty.RoutingKey.IsSet() {
		t.Errorf("default sections changed: %+v", cfg.Notify)
	}
	for _, secret := range []string{"xoxb-inference", "R0UTINGKEY-inference", "whsec-research", "tok-1"} {
		for _, shown := range []string{fmt.Sprintf("%+v", cfg.Notify), fmt.Sprintf("%+v %+v %+v", *rs[0].Slack, *rs[1].PagerDuty, *rs[2].Webhook),
			fmt.Sprintf("%#v %#v %#v", *rs[0].Slack, *rs[1].PagerDuty, *rs[2].Webhook)} {
			if strings.Contains(shown, secret) {
				t.Errorf("printing the config shows %s", secret)
			}
		}
	}
}

func TestAReceiverKeyIsStrict(t *testing.T) {
	_, err := Parse(Default(), []byte("notify:\n  receivers:\n    - name: x\n      pagerduty: {routing_kye: abc}\n"))
	if err == nil || !strings.Contains(err.Error(), "routing_kye") {
		t.Errorf("a misspelt receiver key was accepted: %v", err)
	}
}
