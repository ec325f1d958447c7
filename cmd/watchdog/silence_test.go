package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/internal/silence"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

const silenceTestToken = "tok-for-silences-0123"

// silenceConfig is flipConfig with a state directory, so silences and
// held pages outlive one daemon run.
func silenceConfig(stateDir string) string {
	return fmt.Sprintf(flipConfig, "1s") + "state_dir: " + stateDir + "\n"
}

func withAPIToken(_ *memnet.Network, cfg *config.Config) {
	cfg.API.Token = notify.Secret(silenceTestToken)
}

// apiCall sends method path with body (JSON) and the token to the daemon.
func (r *daemonRun) apiCall(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, "http://"+r.addr+path, rd)
	req.Header.Set("Authorization", "Bearer "+silenceTestToken)
	resp, err := r.api.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

// silencedBy returns the silences the daemon's API shows muting replica's
// open alerts.
func (r *daemonRun) silencedBy(t *testing.T, replica string) []string {
	t.Helper()
	code, body := r.apiCall(t, http.MethodGet, "/api/v1/watchdog/alerts", nil)
	if code != http.StatusOK {
		t.Fatalf("GET alerts: %d %s", code, body)
	}
	var resp struct {
		Alerts []struct {
			Replica, State string
			SilencedBy     []string `json:"silenced_by"`
		}
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("alerts: %v: %s", err, body)
	}
	var out []string
	for _, a := range resp.Alerts {
		if a.Replica == replica && a.State == "firing" {
			out = append(out, a.SilencedBy...)
		}
	}
	return out
}

// TestDaemonSilenceSurvivesRestartMutesThenPagesWhenExpired: a silence
// set through the API is persisted in the state dir and still mutes after
// a restart; the incident it covers is tracked and shown silenced while
// Slack and PagerDuty get nothing; expired early, the page goes out at the
// next round.
func TestDaemonSilenceSurvivesRestartMutesThenPagesWhenExpired(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	stateDir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		engines := map[string]*fakeEngine{"r0": newFakeEngine("org/model", healthyLoad())}
		first := startDaemonWith(t, silenceConfig(stateDir), engines, withAPIToken)
		code, body := first.apiCall(t, http.MethodPost, "/api/v1/silences", silence.Request{
			Matchers: []string{`replica="r0"`}, EndsAt: first.start.Add(time.Hour), CreatedBy: "ana", Comment: "cache rebuild"})
		if code != http.StatusCreated {
			t.Fatalf("POST silence: %d %s", code, body)
		}
		var created silence.Status
		json.Unmarshal(body, &created)
		time.Sleep(5 * time.Second)
		if err := first.stop(); err != nil {
			t.Fatal(err)
		}

		run := startDaemonWith(t, silenceConfig(stateDir), engines, withAPIToken)
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		defer func() {
			if t.Failed() || testing.Verbose() {
				t.Logf("timeline:\n%s\nlog:\n%s", run.timeline(s.marks), run.stderr.String())
			}
		}()
		onset := flipWarmup + 500*time.Millisecond
		s.at(onset, "r0 prefix cache collapses (silenced)", func() { engines["r0"].set(withHitRate(0.05)) })
		s.at(onset+50*time.Second, "", nil)
		checkFindings(t, run, "collapse on r0", map[string]bool{"r0": true})
		if got := run.silencedBy(t, "r0"); !slices.Contains(got, created.ID) {
			t.Fatalf("after a restart the firing alert is not shown silenced by %s: %v", created.ID, got)
		}
		if evs := run.events(); len(evs) != 0 {
			t.Fatalf("silenced incident reached the integrations: %d events", len(evs))
		}

		expired := onset + 60*time.Second
		s.at(expired, "silence expired through the API", func() {
			if code, body := run.apiCall(t, http.MethodDelete, "/api/v1/silences/"+created.ID, nil); code != http.StatusOK {
				t.Fatalf("DELETE silence: %d %s", code, body)
			}
		})
		s.at(expired+5*time.Second, "", nil)
		if err := run.stop(); err != nil {
			t.Fatal(err)
		}
		evs := run.events()
		if len(evs) != 1 || evs[0].Kind != notify.KindTrigger || evs[0].Replica != "r0" {
			t.Fatalf("after the silence ended: %d events, want r0's trigger", len(evs))
		}
		if at := evs[0].At.Sub(run.start); at < expired || at > expired+2*time.Second {
			t.Errorf("trigger at t+%s, want the first round after the silence ended at t+%s", clock(at), clock(expired))
		}
		if strings.Contains(run.stderr.String(), silenceTestToken) {
			t.Error("the API token is in the daemon's log")
		}
	})
}

// silenceAPI is a daemon's silences endpoint for the CLI to talk to.
func silenceAPI(t *testing.T) (*httptest.Server, *silence.Store, string) {
	t.Helper()
	store := silence.New(silence.DefaultOptions(), prometheus.NewRegistry())
	srv := httptest.NewServer(silence.NewHandler(silence.HandlerOptions{Store: store, Token: silenceTestToken, Now: time.Now, Logger: zap.NewNop()}))
	t.Cleanup(srv.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(silenceTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, store, tokenFile
}

func runCLI(env map[string]string, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, env, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestSilenceCLI(t *testing.T) {
	srv, store, tokenFile := silenceAPI(t)
	env := map[string]string{"USER": "ana"}

	out, stderr, err := runCLI(env, "silence", "add", "--url", srv.URL, "--token-file", tokenFile,
		"-m", `replica="sim-0"`, "-m", `class=~"preempt.*"`, "--duration", "2h", "--comment", "kernel upgrade")
	if err != nil {
		t.Fatalf("add: %v\n%s", err, stderr)
	}
	id := strings.TrimSpace(out)
	got, ok := store.Get(id, time.Now())
	if !ok || got.CreatedBy != "ana" || got.Comment != "kernel upgrade" || len(got.Matchers) != 2 || got.State != silence.StateActive {
		t.Fatalf("stored %+v (ok %v)", got, ok)
	}

	out, _, err = runCLI(env, "silence", "ls", "--url", srv.URL)
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "active") || !strings.Contains(out, `class=~"preempt.*"`) {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	out, _, err = runCLI(env, "silence", "ls", "--url", srv.URL, "--output", "json")
	var list []silence.Status
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("ls json: %v\n%s", err, out)
	}

	if _, _, err := runCLI(env, "silence", "expire", "--url", srv.URL, "--token-file", tokenFile, id); err != nil {
		t.Fatalf("expire: %v", err)
	}
	if got, _ := store.Get(id, time.Now()); got.State != silence.StateExpired {
		t.Errorf("after expire: %s", got.State)
	}

	// The daemon refuses: exit 1 with its reason.
	_, _, err = runCLI(env, "silence", "add", "--url", srv.URL, "--token-file", tokenFile, "-m", `replica=~"(("`, "--duration", "1h")
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "is not a matcher") {
		t.Errorf("bad matcher: %v (exit %d), want exit 1 with the daemon's 400", err, exitCode(err))
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	os.WriteFile(wrong, []byte("nope"), 0o600)
	_, _, err = runCLI(env, "silence", "add", "--url", srv.URL, "--token-file", wrong, "-m", `replica="x"`, "--duration", "1h")
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token: %v", err)
	}

	// Usage errors: exit 2, nothing sent.
	for _, args := range [][]string{
		{"silence"},
		{"silence", "mute"},
		{"silence", "add", "--url", srv.URL, "--token-file", tokenFile, "--duration", "1h"},
		{"silence", "add", "--url", srv.URL, "--token-file", tokenFile, "-m", `replica="x"`},
		{"silence", "add", "--url", srv.URL, "--token-file", tokenFile, "-m", `replica="x"`, "--duration", "1h", "--end", "2030-01-01T00:00:00Z"},
		{"silence", "add", "--url", srv.URL, "-m", `replica="x"`, "--duration", "1h"},
		{"silence", "expire", "--url", srv.URL, "--token-file", tokenFile},
		{"silence", "ls", "--url", srv.URL, "--output", "yaml"},
	} {
		if _, _, err := runCLI(env, args...); exitCode(err) != 2 {
			t.Errorf("%q: %v (exit %d), want usage error", args, err, exitCode(err))
		}
	}
	if n := len(store.List(time.Now())); n != 1 {
		t.Errorf("%d silences stored, want the one added", n)
	}
}
