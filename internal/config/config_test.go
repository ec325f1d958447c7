package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

func TestBadConfigsReportEveryProblemWithItsPath(t *testing.T) {
	cases := []struct {
		file string
		want []string // substrings naming the offending paths
	}{
		{"bad-unknown-key.yaml", []string{"line 5: scrape.intervall: no such field (did you mean interval?)"}},
		// The decoder's words name Go types ("field pasword not found in
		// type config.plain"); the problems name the file's keys.
		{"bad-kinds.yaml", []string{"line 4: targets[0].lables: no such field (did you mean labels?)",
			`line 6: scrape.interval: "five" is not a duration (a number and a unit: ms, s, m or h)`,
			`line 7: scrape.max_series: "many" is not a whole number`,
			"line 12: notify.alertmanager.http_client.basic_auth.pasword: no such field (did you mean password?)",
			"line 14: slos: a list where a mapping of its fields is expected", "line 15: slack: no such field (did you mean notify.slack?)"}},
		{"bad-unknown-detector-key.yaml", []string{"line 7: detectors.preempt_storm.kv_usage_treshold",
			"line 8: detectors.queue_latancy", "line 11: detectors.triage.min_queud"}},
		{"bad-timeout-above-interval.yaml", []string{"scrape.timeout"}},
		{"bad-targets.yaml", []string{"targets[0].url", "targets[1].name", "targets[1].kind"}},
		{"bad-thresholds.yaml", []string{"detectors.preempt_storm.kv_usage_threshold", "alerts.for"}},
		{"bad-route.yaml", []string{"notify.routes[0].severities[0]"}},
		{"bad-syntax.yaml", []string{"yaml"}},
		{"bad-slack-without-channel.yaml", []string{"notify.slack.channel"}},
		{"bad-notify-max-retry-after.yaml", []string{"notify.max_retry_after"}},
		{"bad-notify-queue.yaml", []string{"notify.max_pending", "notify.max_records", "notify.notice_retention", "notify.resolved_retention"}},
		{"bad-window-bytes.yaml", []string{"scrape.max_window_bytes"}},
		{"bad-receivers.yaml", []string{
			"notify.receivers[0].pagerduty: no routing key",
			`notify.receivers[1].name: "inference-pager" duplicates notify.receivers[0]`,
			`notify.receivers[2].name: "slack" is the receiver of notify.slack`,
			"notify.receivers[3].webhook.secret: required",
			"notify.receivers[4]: sets slack and pagerduty",
			"notify.receivers[5].pagerduty.routing_key_file: testdata/secrets/does-not-exist does not exist",
			"notify.receivers[6].alertmanager.urls: at least one",
			"notify.receivers[6].alertmanager.resend_interval: must be positive",
			"notify.receivers[7].name: required",
			`notify.routes[0].routes[0].receivers[0]: "inference-pagr" is not a configured receiver`,
			`notify.routes[1].receivers[1]: "nobody" is not a configured receiver`,
		}},
		{"bad-incidents.yaml", []string{"incidents.retention", "incidents.max_incidents", "incidents.max_points_per_signal"}},
		{"bad-gpu-targets.yaml", []string{"correlation.gpu_targets[1].target: \"llama-1\" is no engine target",
			"correlation.gpu_targets[1].gpus[0]: GPU 1 of node \"node-a\" is mapped by gpu_targets[0]", "correlation.gpu_targets[1].gpus[1]",
			"correlation.gpu_targets[2].target: \"dcgm-node-a\" is no engine target", "correlation.gpu_targets[2].node: required",
			"correlation.gpu_targets[2].gpus: list at least one"}},
		{"bad-http-client.yaml", []string{"scrape: at most one of bearer_token & bearer_token_file", "targets[0].http_client: at most one of basic_auth",
			"targets[1].http_client: if proxy_connect_header is configured", "discovery.file_sd[0].files[0]:", "discovery.file_sd[0].http_client: at most one of basic_auth password"}},
		{"bad-slos.yaml", []string{`line 7: slos.objectives[0].period: "28d" is not a duration (a number and a unit: ms, s, m or h); days are written in hours: 672h`}},
		{"bad-slos-values.yaml", []string{"slos.policy.page[0].long", "slos.objectives[0].threshold", "slos.objectives[0].objective",
			"slos.objectives[1].name", "slos.objectives[1].kind"}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			_, err := Load(Default(), map[string]string{"WATCHDOG_CONFIG": filepath.Join("testdata", c.file)})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), ": yaml: yaml:") {
				t.Errorf("the decoder's prefix is given twice:\n%v", err)
			}
			if strings.Contains(err.Error(), "xoxb-not-printed") || strings.Contains(err.Error(), "hunter2") {
				t.Error("error prints a secret")
			}
		})
	}
}

// An unknown key gets a suggestion only when one is close: a typo of a
// key of the same mapping, or the one shallowest place a key of that name
// has. A key found at several places that deep gets none.
func TestUnknownKeySuggestsOnlyWhatIsClose(t *testing.T) {
	for path, want := range map[string]string{
		"scrape.intervall":                  "interval",
		"alerts.update_intervall":           "update_interval",
		"slack":                             "notify.slack",
		"triage":                            "detectors.triage",
		"interval":                          "", // scrape, evaluation, heartbeat, ...
		"scrape.zzz":                        "",
		"targets[0].lables":                 "labels",
		"notify.receivers[1].slak":          "slack",
		"notify.slack.webhok_url":           "webhook_url",
		"targets[0].http_client.tsl_config": "tls_config",
	} {
		if got := nearest(path); got != want {
			t.Errorf("nearest(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestGoodConfigAndEnvironmentOverrides(t *testing.T) {
	env := map[string]string{
		"WATCHDOG_CONFIG":          "testdata/good.yaml",
		"WATCHDOG_LISTEN_ADDRESS":  "127.0.0.1:9999",
		"WATCHDOG_SCRAPE_INTERVAL": "2s",
		"WATCHDOG_LOG_LEVEL":       "debug",
		"WATCHDOG_STATE_DIR":       "/tmp/wd",
		"SLACK_CHANNEL":            "#oncall",
		"SLACK_BOT_TOKEN":          "xoxb-123",
		"PAGERDUTY_EVENTS_URL":     "https://events.eu.pagerduty.com/v2/enqueue",
	}
	cfg, err := Load(Default(), env)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) != 2 || cfg.Targets[1].Kind != "gateway" {
		t.Errorf("targets from file: %+v", cfg.Targets)
	}
	if cfg.ListenAddress != "127.0.0.1:9999" || cfg.Scrape.Interval != 2*time.Second || cfg.LogLevel != "debug" || cfg.StateDir != "/tmp/wd" {
		t.Errorf("env overrides not applied: %+v", cfg)
	}
	if cfg.Notify.Slack.BotToken != "xoxb-123" || cfg.Notify.Slack.Channel != "#oncall" || cfg.Notify.PagerDuty.EventsURL != "https://events.eu.pagerduty.com/v2/enqueue" {
		t.Errorf("notify env: %+v", cfg.Notify)
	}
	// The file's defaults for what neither sets stay.
	if detect.Get[detect.PreemptStormConfig](cfg.Detectors).Range != detect.Get[detect.PreemptStormConfig](Default().Detectors).Range {
		t.Error("unset detector setting lost its default")
	}

	env["WATCHDOG_TARGETS"] = "http://10.1.1.1:30000, b=http://10.1.1.2:30000/custom/metrics"
	cfg, err = Load(Default(), env)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) != 2 || cfg.Targets[0].Name != "10.1.1.1:30000" || cfg.Targets[1].Name != "b" {
		t.Fatalf("WATCHDOG_TARGETS must replace the file's list: %+v", cfg.Targets)
	}
}

func TestMetricsURL(t *testing.T) {
	cases := map[string]string{
		"http://h:30000":                "http://h:30000/metrics",
		"http://h:30000/":               "http://h:30000/metrics",
		"http://h:29000/engine_metrics": "http://h:29000/engine_metrics",
		"https://h/metrics":             "https://h/metrics",
	}
	for in, want := range cases {
		if got, err := MetricsURL(in); err != nil || got != want {
			t.Errorf("MetricsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://h", "h:30000", "http://", "http://user:hunter2@:1"} {
		_, err := MetricsURL(bad)
		if err == nil {
			t.Errorf("MetricsURL(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error leaks a password: %v", err)
		}
	}
}

func TestSecretFilesAndConflicts(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("xoxb-from-file\n"), 0o600)
	base := map[string]string{"WATCHDOG_TARGETS": "http://127.0.0.1:30000", "SLACK_CHANNEL": "#c"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cfg, err := Load(Default(), with("SLACK_BOT_TOKEN_FILE", tok))
	if err != nil || cfg.Notify.Slack.BotToken != "xoxb-from-file" {
		t.Fatalf("token from file: %q, %v", cfg.Notify.Slack.BotToken, err)
	}
	// A Secret key mounted as optional and absent from the Secret is a file
	// that does not exist: that integration is not configured.
	cfg, err = Load(Default(), with("SLACK_BOT_TOKEN_FILE", filepath.Join(dir, "missing")))
	if err != nil || cfg.Notify.Slack.BotToken.IsSet() || cfg.Notify.Slack.BotTokenFile != filepath.Join(dir, "missing") {
		t.Errorf("missing token file: token set %v, file %q, %v; want Slack unconfigured", cfg.Notify.Slack.BotToken.IsSet(), cfg.Notify.Slack.BotTokenFile, err)
	}
	// Anything else that keeps the file from being read still fails.
	if _, err := Load(Default(), with("SLACK_BOT_TOKEN_FILE", dir)); err == nil || !strings.Contains(err.Error(), "notify.slack.bot_token_file") {
		t.Errorf("a secret file that is a directory: %v, want an error naming notify.slack.bot_token_file", err)
	}
	_, err = Load(Default(), with("PAGERDUTY_ROUTING_KEY", "k-secret-value", "PAGERDUTY_ROUTING_KEY_FILE", tok))
	if err == nil || !strings.Contains(err.Error(), "both set") || strings.Contains(err.Error(), "k-secret-value") {
		t.Errorf("conflict: %v", err)
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	cfg, err := Load(Default(), map[string]string{
		"WATCHDOG_TARGETS": "http://127.0.0.1:30000", "SLACK_CHANNEL": "#c",
		"SLACK_BOT_TOKEN": "xoxb-SECRET1", "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/SECRET2",
		"PAGERDUTY_ROUTING_KEY": "SECRET3",
	})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := yaml.Marshal(cfg)
	j, _ := json.Marshal(cfg)
	for _, out := range []string{string(y), string(j), fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg)} {
		for _, s := range []string{"SECRET1", "SECRET2", "SECRET3"} {
			if strings.Contains(out, s) {
				t.Fatalf("secret %s printed in %.200s", s, out)
			}
		}
	}
}

func TestNoTargetsIsAClearError(t *testing.T) {
	_, err := Load(Default(), map[string]string{})
	if err == nil || !strings.Contains(err.Error(), "WATCHDOG_TARGETS") {
		t.Fatalf("got %v", err)
	}
}

// The queue settings default to the notify package's own defaults and
// reach the queue options the dispatcher is given.
func TestNotifyQueueSettingsDefaultAndParse(t *testing.T) {
	if got, want := Default().Notify.QueueOptions(), notify.DefaultQueueOptions(); got.MaxPending != want.MaxPending ||
		got.MaxRecords != want.MaxRecords || got.NoticeRetention != want.NoticeRetention ||
		got.ResolvedRetention != want.ResolvedRetention || got.MaxRetryAfter != want.MaxRetryAfter {
		t.Errorf("defaults %+v differ from the notify package's %+v", got, want)
	}
	cfg, err := Parse(Default(), []byte(`targets: [{name: a, url: 'http://127.0.0.1:30000'}]
notify:
  max_retry_after: 2m
  max_pending: 200
  max_records: 300
  notice_retention: 6h
  resolved_retention: 48h
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid settings rejected: %v", err)
	}
	want := notify.QueueOptions{MaxRetryAfter: 2 * time.Minute, MaxPending: 200, MaxRecords: 300,
		NoticeRetention: 6 * time.Hour, ResolvedRetention: 48 * time.Hour}
	if got := cfg.Notify.QueueOptions(); got != want {
		t.Errorf("queue options %+v, want %+v", got, want)
	}
}

func TestNotifyMaxRetryAfterDefaultsAndParses(t *testing.T) {
	if got := Default().Notify.MaxRetryAfter; got != 5*time.Minute {
		t.Errorf("default max_retry_after = %s, want 5m", got)
	}
	cfg, err := Parse(Default(), []byte("targets: [{name: a, url: 'http://127.0.0.1:30000'}]\nnotify:\n  max_retry_after: 90s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Notify.MaxRetryAfter != 90*time.Second {
		t.Errorf("max_retry_after = %s, want 90s", cfg.Notify.MaxRetryAfter)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid setting rejected: %v", err)
	}
}

// Client settings at the scrape level, a target's own, and a discovery
// source's: decoded over Prometheus' defaults, and never printed with
// their secrets.
func TestHTTPClientSettings(t *testing.T) {
	cfg, err := Load(Default(), map[string]string{"WATCHDOG_CONFIG": "testdata/good-http-client.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.Scrape.HTTPClient
	if sc.TLSConfig.CertFile != "/etc/sglang/client.pem" || sc.BasicAuth == nil || string(sc.BasicAuth.Password) != "hunter2-scrape" ||
		!sc.FollowRedirects || !sc.EnableHTTP2 {
		t.Errorf("scrape settings %s", sc)
	}
	if cfg.Targets[0].HTTPClient != nil {
		t.Errorf("a target without http_client has settings of its own: %s", cfg.Targets[0].HTTPClient)
	}
	own := cfg.Targets[1].HTTPClient
	if own == nil || own.Authorization == nil || string(own.Authorization.Credentials) != "hunter2-target" || own.FollowRedirects || !own.EnableHTTP2 {
		t.Errorf("target settings %s", own)
	}
	if f := cfg.Discovery.FileSD; len(f) != 1 || f[0].HTTPClient == nil || f[0].HTTPClient.BearerTokenFile != "/run/secrets/sglang-token" {
		t.Errorf("file_sd %+v", f)
	}
	y, _ := yaml.Marshal(cfg)
	j, _ := json.Marshal(cfg)
	for _, out := range []string{string(y), string(j), fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg), fmt.Sprint(cfg.Targets), fmt.Sprintf("%#v", cfg.Targets)} {
		if strings.Contains(out, "hunter2") {
			t.Fatalf("a client secret printed in %.300s", out[strings.Index(out, "hunter2")-min(200, strings.Index(out, "hunter2")):])
		}
	}
	// The default keeps what the scraper did before settings existed:
	// redirects followed, HTTP/2, the environment's proxy.
	if d := Default().Scrape.HTTPClient; !d.FollowRedirects || !d.EnableHTTP2 || !d.ProxyFromEnvironment {
		t.Errorf("default scrape client %s", d)
	}
}
