package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAlertmanagerConfigParses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "watchdog.yaml")
	yaml := `
targets:
  - name: a
    url: http://127.0.0.1:30000
notify:
  alertmanager:
    urls: ["http://am-0:9093", "https://am-1.example:9093/prefix"]
    resend_interval: 30s
    http_client:
      basic_auth: {username: watchdog, password: hunter2}
      tls_config: {insecure_skip_verify: true}
  routes:
    - matchers: ['team="inference"', 'namespace=~"llm-.*"']
      integrations: [alertmanager]
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Default(), map[string]string{"WATCHDOG_CONFIG": file})
	if err != nil {
		t.Fatal(err)
	}
	am := cfg.Notify.Alertmanager
	if !am.Enabled() || len(am.URLs) != 2 || am.ResendInterval != 30*time.Second {
		t.Errorf("alertmanager %+v", am)
	}
	if am.HTTPClient.BasicAuth == nil || am.HTTPClient.BasicAuth.Username != "watchdog" || string(am.HTTPClient.BasicAuth.Password) != "hunter2" ||
		!am.HTTPClient.TLSConfig.InsecureSkipVerify || !am.HTTPClient.FollowRedirects {
		t.Errorf("http_client %+v", am.HTTPClient)
	}
	if strings.Contains(am.HTTPClient.String(), "hunter2") {
		t.Errorf("the printed http_client holds the password")
	}
	if r := cfg.Notify.Routes; len(r) != 1 || len(r[0].Matchers) != 2 {
		t.Errorf("routes %+v", r)
	}

	def := Default().Notify.Alertmanager
	if def.Enabled() || def.ResendInterval != time.Minute {
		t.Errorf("default %+v: want off, resend every minute", def)
	}
}

func TestBadAlertmanagerConfigReportsEveryProblemWithItsPath(t *testing.T) {
	for file, want := range map[string][]string{
		"bad-alertmanager.yaml": {
			"notify.alertmanager.urls[1]:", "notify.alertmanager.urls[2]: must not hold credentials",
			"notify.alertmanager.resend_interval:", "notify.alertmanager.http_client:",
			"notify.routes[0].matchers[1]:",
		},
		"bad-alertmanager-unknown-key.yaml": {"pasword"},
	} {
		t.Run(file, func(t *testing.T) {
			_, err := Load(Default(), map[string]string{"WATCHDOG_CONFIG": filepath.Join("testdata", file)})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error repeats a password: %v", err)
			}
		})
	}
}
