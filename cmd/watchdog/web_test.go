package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// TestDaemonBehindAnIngressPathWithBasicAuth runs the daemon as it runs
// behind https://ops.example.com/watchdog/ with basic auth: every endpoint
// answers under /watchdog/ and only with credentials, the pages link the
// external URL, and the workspace's own links stay under the prefix.
func TestDaemonBehindAnIngressPathWithBasicAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, []byte("basic_auth_users:\n  oncall: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pd := notifytest.NewPagerDutyServer()
	t.Cleanup(pd.Close)
	pdEvents := make(chan notifytest.Request, 100)
	pd.Respond(func(_ int, r notifytest.Request) notifytest.Response { pdEvents <- r; return notifytest.Response{} })
	rep := newFakeReplica()
	replica := httptest.NewServer(rep)
	t.Cleanup(replica.Close)
	const external = "https://ops.example.com/watchdog/"
	_, logs := runDaemon(t, map[string]string{"WATCHDOG_CONFIG": writeConfig(t, linksConfig), "WATCHDOG_TARGETS": "r0=" + replica.URL,
		"PAGERDUTY_ROUTING_KEY": secretKey, "PAGERDUTY_EVENTS_URL": pd.EventsURL()},
		"--web.external-url="+external, "--web.config.file="+webConfig)
	startLine := logs.waitFor(t, "start log line", func(s string) bool { return strings.Contains(s, "watchdog started") })
	var started struct{ Listen string }
	if err := json.Unmarshal([]byte(startLine), &started); err != nil || started.Listen == "" {
		t.Fatalf("start line %q: %v", startLine, err)
	}
	base := "http://" + started.Listen
	fetch := func(path string, auth bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if auth {
			req.SetBasicAuth("oncall", "s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	for _, path := range []string{"/watchdog/-/healthy", "/watchdog/metrics", "/watchdog/api/v1/targets", "/watchdog/"} {
		if code, _ := fetch(path, false); code != 401 {
			t.Errorf("GET %s without credentials: %d, want 401", path, code)
		}
	}
	if code, _ := fetch("/-/healthy", true); code != 404 {
		t.Errorf("GET /-/healthy outside the prefix: %d, want 404", code)
	}
	if code, body := fetch("/watchdog/metrics", true); code != 200 || !strings.Contains(body, "watchdog_build_info") {
		t.Errorf("GET /watchdog/metrics: %d", code)
	}
	for range 50 {
		if code, _ := fetch("/watchdog/-/ready", true); code == 200 {
			break
		}
		rep.waitScrapes(t, 1)
	}
	if code, body := fetch("/watchdog/-/ready", true); code != 200 || body != "ready\n" {
		t.Errorf("GET /watchdog/-/ready: %d %q, want ready with no link warning", code, body)
	}

	rep.waitScrapes(t, 30)
	rep.setStorm(true)
	ev := firstPagerDutyTrigger(t, pdEvents)
	incidentPath, ok := strings.CutPrefix(ev.ClientURL, strings.TrimSuffix(external, "/"))
	if !ok || !strings.HasPrefix(incidentPath, "/incidents/") {
		t.Fatalf("PagerDuty client_url %q, want %sincidents/...", ev.ClientURL, external)
	}
	if !ev.hrefs()[external+"runbooks/preempt_storm"] {
		t.Errorf("PagerDuty links %v lack %srunbooks/preempt_storm", ev.Links, external)
	}
	// What the Ingress forwards for the page's links answers.
	for _, path := range []string{"/watchdog" + incidentPath, "/watchdog/runbooks/preempt_storm"} {
		code, body := fetch(path, true)
		if code != 200 {
			t.Fatalf("GET %s: %d", path, code)
		}
		for _, m := range regexp.MustCompile(`(?:href|src|action)="(/[^"]*)"`).FindAllStringSubmatch(body, -1) {
			if !strings.HasPrefix(m[1], "/watchdog/") {
				t.Errorf("%s links %s, outside /watchdog/", path, m[1])
			}
		}
	}
}

// TestBadWebConfigFileStopsTheStart: a web configuration that does not
// load ends the daemon at once, naming the flag and the file.
func TestBadWebConfigFileStopsTheStart(t *testing.T) {
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, []byte("basic_auth_users:\n  oncall: not-a-bcrypt-hash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"WATCHDOG_TARGETS": "r0=http://127.0.0.1:1", "WATCHDOG_LISTEN_ADDRESS": "127.0.0.1:0"}
	err := run(context.Background(), []string{"run", "--web.config.file=" + webConfig}, env, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--web.config.file "+webConfig+": ") {
		t.Fatalf("run: %v, want the web configuration named", err)
	}
	if exitCode(err) != 1 {
		t.Errorf("exit code %d, want 1", exitCode(err))
	}
}
