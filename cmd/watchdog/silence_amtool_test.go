package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/api/v2/models"
)

// amtool runs the real amtool against the daemon at base with args and
// returns its stdout; a failure is reported with stderr.
type amtool struct {
	path, base string
}

func (a amtool) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), a.path, append([]string{"--alertmanager.url=" + a.base}, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

func (a amtool) ok(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := a.run(t, args...)
	if err != nil {
		t.Fatalf("amtool %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	// amtool asks /api/v2/status for the version first; the daemon does not
	// serve it, and amtool must carry on without a word.
	if stderr != "" {
		t.Errorf("amtool %s wrote to stderr: %s", strings.Join(args, " "), stderr)
	}
	return out
}

// alertStatus returns the state of replica's preempt_storm alert in
// /api/v2/alerts and the silences muting it; "" when it is not there.
func alertStatus(t *testing.T, base, replica string) (string, []string) {
	t.Helper()
	var alerts models.GettableAlerts
	getJSON(t, base+"/api/v2/alerts", &alerts)
	for _, a := range alerts {
		if a.Labels["replica"] == replica && a.Labels["alertname"] == "preempt_storm" {
			return *a.Status.State, a.Status.SilencedBy
		}
	}
	return "", nil
}

// The real amtool (Debian's prometheus-alertmanager, installed by .ci/run)
// manages the running daemon's silences through its Alertmanager v2 API:
// add needs the token, which amtool sends from --http.config.file; the
// silence is stored, listed by query, mutes the replica's preempt storm in
// the real evaluation loop (alertname matches the class), is replaced by
// update and ends with expire.
func TestAmtoolManagesTheDaemonsSilences(t *testing.T) {
	path, err := exec.LookPath("amtool")
	if err != nil {
		t.Fatalf("amtool is needed (Debian's prometheus-alertmanager package; .ci/run installs it): %v", err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	httpConfig := filepath.Join(dir, "amtool-http.yml")
	if err := os.WriteFile(tokenFile, []byte(silenceTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(httpConfig, []byte("authorization:\n  credentials_file: "+tokenFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := newFakeReplica()
	srv := httptest.NewServer(rep)
	t.Cleanup(srv.Close)
	_, logs := runDaemon(t, map[string]string{"WATCHDOG_CONFIG": writeConfig(t, linksConfig), "WATCHDOG_TARGETS": "sglang-0=" + srv.URL,
		"WATCHDOG_API_TOKEN_FILE": tokenFile})
	startLine := logs.waitFor(t, "start log line", func(s string) bool { return strings.Contains(s, "watchdog started") })
	var started struct{ Listen string }
	if err := json.Unmarshal([]byte(startLine), &started); err != nil || started.Listen == "" {
		t.Fatalf("start line %q: %v", startLine, err)
	}
	base := "http://" + started.Listen
	am := amtool{path: path, base: base}
	auth := "--http.config.file=" + httpConfig
	add := []string{"silence", "add", "alertname=preempt_storm", "replica=sglang-0", "--comment=KV pool resize, OPS-123", "--duration=1h", "--author=ana"}

	if out, stderr, err := am.run(t, add...); err == nil || !strings.Contains(stderr, "401") {
		t.Errorf("amtool silence add without the token: %v\n%s%s, want a failure naming 401", err, out, stderr)
	}
	if got := am.ok(t, "silence", "query", "-o", "json", "--expired"); strings.TrimSpace(got) != "[]" {
		t.Fatalf("a refused add stored a silence: %s", got)
	}

	id := strings.TrimSpace(am.ok(t, append([]string{auth}, add...)...))
	var stored struct {
		Matchers  []string
		State     string
		CreatedBy string `json:"created_by"`
		Comment   string
		StartsAt  time.Time `json:"starts_at"`
		EndsAt    time.Time `json:"ends_at"`
	}
	getJSON(t, base+"/api/v1/silences/"+id, &stored)
	if !slices.Equal(stored.Matchers, []string{`alertname="preempt_storm"`, `replica="sglang-0"`}) || stored.State != "active" ||
		stored.CreatedBy != "ana" || stored.Comment != "KV pool resize, OPS-123" || stored.EndsAt.Sub(stored.StartsAt) != time.Hour {
		t.Fatalf("stored %+v, want the silence amtool added", stored)
	}

	var listed []models.GettableSilence
	if err := json.Unmarshal([]byte(am.ok(t, "silence", "query", "-o", "json")), &listed); err != nil || len(listed) != 1 {
		t.Fatalf("amtool silence query -o json: %v %+v", err, listed)
	}
	if s := listed[0]; *s.ID != id || *s.Status.State != "active" || len(s.Matchers) != 2 || *s.Matchers[0].Name != "alertname" || *s.Matchers[0].Value != "preempt_storm" {
		t.Errorf("queried %+v", s)
	}
	if got := strings.TrimSpace(am.ok(t, "silence", "query", "-q", "preempt_storm")); got != id {
		t.Errorf("amtool silence query -q preempt_storm = %q, want %s", got, id)
	}
	if got := strings.TrimSpace(am.ok(t, "silence", "query", "-q", "replica=sglang-1")); got != "" {
		t.Errorf("amtool silence query -q replica=sglang-1 = %q, want nothing", got)
	}

	rep.waitScrapes(t, 30)
	rep.setStorm(true)
	eventually(t, 30*time.Second, "the storm firing, suppressed by "+id, func() bool {
		state, by := alertStatus(t, base, "sglang-0")
		return state == "suppressed" && slices.Equal(by, []string{id})
	})

	// update replaces the silence, as Alertmanager does: the old one ends.
	// (-q would print the ID's address: amtool prints a *string.)
	var replaced []models.GettableSilence
	out := am.ok(t, auth, "-o", "json", "silence", "update", id, "--duration=2h")
	if err := json.Unmarshal([]byte(out), &replaced); err != nil || len(replaced) != 1 || *replaced[0].ID == id {
		t.Fatalf("amtool silence update printed %s (%v), want the silence with a new ID", out, err)
	}
	updated := *replaced[0].ID
	eventually(t, 30*time.Second, "the storm suppressed by the replacement "+updated, func() bool {
		state, by := alertStatus(t, base, "sglang-0")
		return state == "suppressed" && slices.Equal(by, []string{updated})
	})

	am.ok(t, auth, "silence", "expire", updated)
	getJSON(t, base+"/api/v1/silences/"+updated, &stored)
	if stored.State != "expired" {
		t.Fatalf("after amtool silence expire: %+v", stored)
	}
	if got := strings.TrimSpace(am.ok(t, "silence", "query", "-q")); got != "" {
		t.Errorf("amtool silence query after expire = %q, want nothing active", got)
	}
	if got := strings.Fields(am.ok(t, "silence", "query", "-q", "--expired")); !slices.Contains(got, id) || !slices.Contains(got, updated) {
		t.Errorf("amtool silence query --expired = %v, want %s and %s", got, id, updated)
	}
	eventually(t, 30*time.Second, "the storm active again", func() bool {
		state, _ := alertStatus(t, base, "sglang-0")
		return state == "active"
	})
	if strings.Contains(logs.text(), silenceTestToken) {
		t.Error("the API token is in the daemon's log")
	}
}
