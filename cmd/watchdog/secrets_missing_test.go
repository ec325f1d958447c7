package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The manifests mount every Secret key as optional: a key left out of the
// Secret is a *_FILE that does not exist. The daemon then starts without
// that integration, says which credential is not configured, and serves.
func TestMissingSecretFilesLeaveIntegrationsUnconfigured(t *testing.T) {
	dir := t.TempDir()
	rep, base, logs := linkDaemon(t, map[string]string{
		"SLACK_BOT_TOKEN_FILE":       filepath.Join(dir, "slack-bot-token"),
		"PAGERDUTY_ROUTING_KEY_FILE": filepath.Join(dir, "pagerduty-routing-key"),
	})
	// linkDaemon returned on the start line; the warnings come before it.
	var start string
	for _, line := range strings.Split(logs.text(), "\n") {
		if strings.Contains(line, "watchdog started") {
			start = line
		}
	}
	for _, setting := range []string{"notify.slack.bot_token_file", "notify.pagerduty.routing_key_file"} {
		if !slices.ContainsFunc(strings.Split(logs.text(), "\n"), func(s string) bool {
			return strings.Contains(s, "not configured") && strings.Contains(s, setting)
		}) {
			t.Errorf("no warning that %s is not configured in\n%s", setting, logs.text())
		}
	}
	var started struct{ Integrations []string }
	if err := json.Unmarshal([]byte(start), &started); err != nil {
		t.Fatalf("start line %q: %v", start, err)
	}
	if slices.Contains(started.Integrations, "slack") || slices.Contains(started.Integrations, "pagerduty") {
		t.Errorf("integrations %v: Slack or PagerDuty configured without credentials", started.Integrations)
	}
	readyBody(t, rep, base)
}
