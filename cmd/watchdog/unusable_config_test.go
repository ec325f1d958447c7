package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
)

// TestInvalidConfigAtStartKeepsServingUntilFixed is issue 34's acceptance
// test: `watchdog run` started with an invalid configuration file (a
// sidecar's ConfigMap with a typo) keeps running instead of crash-looping
// the serving pod: alive, not ready, and its metrics say why. Once the file
// is fixed, SIGHUP makes it load, and the same process becomes ready and
// evaluates its target.
func TestInvalidConfigAtStartKeepsServingUntilFixed(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		network := memnet.New()
		ln, err := network.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		engine := &http.Server{Handler: newFakeEngine("m", healthyLoad()), ReadHeaderTimeout: 5 * time.Second}
		go engine.Serve(ln)
		defer engine.Close()
		path := filepath.Join(t.TempDir(), "watchdog.yaml")
		write := func(body string) {
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		target := "targets: [{name: r0, url: http://" + ln.Addr().String() + "}]\n"
		write("scrape: {interval: 1s}\nevaluation: {interval: 1s}\nalerts: {for: -2m}\n" + target)

		var stderr lockedBuffer
		listening := make(chan string, 2)
		hup := make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- runCommand(ctx, []string{"run", "--config.file=" + path, "--web.listen-address=127.0.0.1:9402"}, map[string]string{}, daemonIO{
				stdout: io.Discard, stderr: &stderr, dial: network.DialContext, listen: network.Listen,
				started: func(addr string) { listening <- addr }, reload: hup,
			})
		}()
		serving := func() string {
			t.Helper()
			select {
			case addr := <-listening:
				return "http://" + addr
			case err := <-done:
				t.Fatalf("run returned %v instead of serving:\n%s", err, stderr.String())
			}
			return ""
		}
		client := &http.Client{Transport: &http.Transport{DialContext: network.DialContext}}
		defer client.CloseIdleConnections()
		get := func(base, path string) (int, string) {
			t.Helper()
			resp, err := client.Get(base + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}

		base := serving()
		// Several re-checks of the unchanged file, and past the one due at
		// a minute, so none can load the fix before SIGHUP does.
		time.Sleep(time.Minute + time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("run exited on an invalid configuration: %v", err)
		default:
		}
		if code, body := get(base, "/-/healthy"); code != 200 {
			t.Errorf("/-/healthy: %d %s", code, body)
		}
		if code, body := get(base, "/-/ready"); code != 503 || !strings.Contains(body, "alerts.for") {
			t.Errorf("/-/ready: %d %s, want 503 saying what is wrong", code, body)
		}
		if code, body := get(base, "/"); code != 503 || !strings.Contains(body, "alerts.for") {
			t.Errorf("the workspace: %d %s, want 503 saying what is wrong", code, body)
		}
		_, metrics := get(base, "/metrics")
		for _, want := range []string{"watchdog_config_last_reload_successful 0", `watchdog_config_last_error_info{reason="validate"} 1`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if strings.Contains(metrics, "watchdog_evaluations_total") {
			t.Error("evaluating with an invalid configuration")
		}
		if n := strings.Count(stderr.String(), "configuration cannot be used"); n != 1 {
			t.Errorf("%d error records for one unchanged error:\n%s", n, stderr.String())
		}
		if !strings.Contains(stderr.String(), path) {
			t.Errorf("the log does not name the file:\n%s", stderr.String())
		}

		// Fixed, and SIGHUP (main forwards it on dio.reload).
		write("scrape: {interval: 1s}\nevaluation: {interval: 1s}\n" + target)
		hup <- struct{}{}
		if again := serving(); again != base {
			t.Errorf("the daemon serves on %s, the wait served on %s", again, base)
		}
		time.Sleep(3 * time.Second)
		if code, body := get(base, "/-/ready"); code != 200 {
			t.Errorf("/-/ready after the fix: %d %s", code, body)
		}
		_, body := get(base, "/api/v1/watchdog/targets")
		var targets struct {
			EvaluatedAt time.Time `json:"evaluated_at"`
			Targets     []struct {
				Replica string
				Up      bool
			}
		}
		if err := json.Unmarshal([]byte(body), &targets); err != nil || targets.EvaluatedAt.IsZero() ||
			len(targets.Targets) != 1 || targets.Targets[0].Replica != "r0" || !targets.Targets[0].Up {
			t.Errorf("not evaluating r0 after the fix (%v): %s", err, body)
		}
		_, metrics = get(base, "/metrics")
		for _, want := range []string{"watchdog_config_last_reload_successful 1", `watchdog_config_reloads_total{result="success"} 1`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics after the fix lacks %q", want)
			}
		}
		if strings.Contains(metrics, "watchdog_config_last_error_info{") {
			t.Error("an error reason after the fix")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		network.Close()
	})
}

// Only the long-running daemon waits for a usable configuration: the
// one-shot commands fail at once, saying what is wrong, with exit status 1.
func TestOneShotCommandsFailFastOnABadConfiguration(t *testing.T) {
	bad := writeConfig(t, "scrape: {intervall: 1s}\ntargets: [{name: r0, url: 'http://127.0.0.1:1'}]\n")
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"check", "config", bad}, map[string]string{}},
		{[]string{"diagnose", "http://127.0.0.1:1"}, map[string]string{"WATCHDOG_CONFIG": bad}},
		{[]string{"record", "--out", filepath.Join(t.TempDir(), "r.rec.gz"), "--duration", "1m"}, map[string]string{"WATCHDOG_CONFIG": bad}},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			err := run(ctx, tc.args, tc.env, &stdout, &stderr)
			if ctx.Err() != nil {
				t.Fatal("the command waited instead of failing")
			}
			if err == nil || exitCode(err) != 1 {
				t.Fatalf("err %v (exit %d), want exit 1", err, exitCode(err))
			}
			if !strings.Contains(err.Error()+stderr.String(), "intervall") {
				t.Errorf("does not say what is wrong: %v\n%s", err, stderr.String())
			}
		})
	}
}
