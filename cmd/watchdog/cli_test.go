package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
)

// launch runs `watchdog args...` with env in the background: its log
// lines, the cancel that stops it, and where run's error arrives.
func launch(args []string, env map[string]string) (*lines, context.CancelFunc, <-chan error) {
	errR, errW := io.Pipe()
	logs := collect(errR)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, env, io.Discard, errW)
		errW.Close()
		done <- err
	}()
	return logs, cancel, done
}

// startRun runs the daemon with args and env until it logs that it
// started, then stops it, and returns its stderr up to then and the
// address it listened on.
func startRun(t *testing.T, args []string, env map[string]string) (stderr, listen string) {
	t.Helper()
	logs, cancel, done := launch(args, env)
	started := make(chan string, 1)
	go func() {
		for s := range logs.ch {
			if strings.Contains(s, "watchdog started") {
				started <- s
				return
			}
		}
		close(started)
	}()
	select {
	case line, ok := <-started:
		if !ok {
			t.Fatalf("the daemon stopped before it started: %v\n%s", <-done, logs.text())
		}
		// The address is the only 127.0.0.1:port in the start line, in
		// whichever format it is written.
		if i := strings.Index(line, "127.0.0.1:"); i >= 0 {
			listen = strings.FieldsFunc(line[i:], func(r rune) bool { return r == '"' || r == ' ' || r == '\t' || r == ',' })[0]
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no start line within 30s")
	}
	if listen != "" {
		_, metrics := get(t, "http://"+listen+"/metrics")
		stderr = metrics // checked by the caller through buildInfo
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	logs.end(t)
	return logs.text() + "\n" + stderr, listen
}

// Flags win over environment variables, which win over the file: each
// layer sets the log format (seen in how the daemon writes its log) and
// the listen address (each layer below the winner is one the daemon could
// not start with).
func TestFlagsOverEnvironmentOverFile(t *testing.T) {
	file := writeConfig(t, `
listen_address: "file-is-not-host-port"
log_format: console
targets: [{name: r0, url: "http://127.0.0.1:1"}]
`)
	fileOnly := writeConfig(t, `
listen_address: "127.0.0.1:0"
log_format: console
targets: [{name: r0, url: "http://127.0.0.1:1"}]
`)
	isJSON := func(line string) bool { var m map[string]any; return json.Unmarshal([]byte(line), &m) == nil }
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		// format checks the start line.
		format func(line string) bool
	}{
		{"file", nil, map[string]string{"WATCHDOG_CONFIG": fileOnly},
			func(l string) bool { return strings.Contains(l, "INFO") && strings.Contains(l, "\twatchdog started\t") }},
		{"environment over file", nil, map[string]string{"WATCHDOG_CONFIG": file, "WATCHDOG_LISTEN_ADDRESS": "127.0.0.1:0", "WATCHDOG_LOG_FORMAT": "logfmt"},
			func(l string) bool {
				return strings.Contains(l, "level=info") && strings.Contains(l, `msg="watchdog started"`)
			}},
		{"flags over environment", []string{"--config.file=" + file, "--web.listen-address=127.0.0.1:0", "--log.format=json"},
			map[string]string{"WATCHDOG_CONFIG": "/nonexistent/watchdog.yaml", "WATCHDOG_LISTEN_ADDRESS": "env-is-not-host-port", "WATCHDOG_LOG_FORMAT": "logfmt"},
			func(l string) bool { return isJSON(l) && strings.Contains(l, `"msg":"watchdog started"`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, listen := startRun(t, tc.args, tc.env)
			if listen == "" {
				t.Fatalf("no listen address in the start line:\n%s", out)
			}
			var start string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "watchdog started") {
					start = l
				}
			}
			if !tc.format(start) {
				t.Errorf("start line in the wrong format: %q", start)
			}
			// watchdog_build_info carries prometheus/common/version's labels.
			for _, label := range []string{"version=", "revision=", "branch=", "goversion="} {
				if !strings.Contains(out, "watchdog_build_info{") || !strings.Contains(out[strings.Index(out, "watchdog_build_info{"):], label) {
					t.Errorf("watchdog_build_info lacks %s", label)
					break
				}
			}
		})
	}
	// A bad value is reported with the layer it came from; the daemon
	// waits for a configuration it can use instead of exiting.
	for _, tc := range []struct {
		args       []string
		env        map[string]string
		want, step string
	}{
		{[]string{"--config.file=/nonexistent/watchdog.yaml"}, map[string]string{}, "--config.file: open /nonexistent/watchdog.yaml", "read"},
		{[]string{"--log.format=xml"}, map[string]string{"WATCHDOG_TARGETS": "http://127.0.0.1:1"}, "log_format", "validate"},
	} {
		logs := waitingDaemon(t, tc.args, tc.env)
		if !strings.Contains(logs, tc.want) || !strings.Contains(logs, `"reason":"`+tc.step+`"`) {
			t.Errorf("%v: the log does not say %q at step %s:\n%s", tc.args, tc.want, tc.step, logs)
		}
	}
}

// waitingDaemon runs `watchdog args...` with env (listening on a free
// loopback port) until it says that it waits for a usable configuration,
// then stops it, and returns its log. The daemon must neither exit on its
// own nor fail to stop.
func waitingDaemon(t *testing.T, args []string, env map[string]string) string {
	t.Helper()
	env["WATCHDOG_LISTEN_ADDRESS"] = "127.0.0.1:0"
	logs, cancel, done := launch(args, env)
	logs.waitFor(t, "the wait for a usable configuration", func(s string) bool {
		return strings.Contains(s, "watchdog waiting for a usable configuration")
	})
	select {
	case err := <-done:
		t.Fatalf("the daemon exited (%v) instead of waiting:\n%s", err, logs.text())
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	logs.end(t)
	return logs.text()
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}, {"run", "--version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, map[string]string{}, &out, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, want := range []string{"watchdog, version", "revision:", "branch:", "build date:", "go version:"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out.String())
			}
		}
	}
}

// Every subcommand answers -h with its usage and exit status 0.
func TestHelpOnEverySubcommand(t *testing.T) {
	for _, c := range commands() {
		for _, h := range []string{"-h", "--help"} {
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{c.name, h}, map[string]string{}, &out, &errOut)
			if err != nil || !strings.Contains(out.String()+errOut.String(), "usage: watchdog") {
				t.Errorf("%s %s: err %v, output %q", c.name, h, err, out.String()+errOut.String())
			}
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, map[string]string{}, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "config.file") || !strings.Contains(out.String(), "check     check config FILE...") {
		t.Errorf("watchdog --help: %v %q", err, out.String())
	}
}

// The benchmark harness is its own binary (cmd/watchdog-bench): the paging
// daemon neither offers nor mentions it.
func TestNoBenchCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help"}, map[string]string{}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "bench") {
		t.Errorf("watchdog help mentions bench:\n%s", out.String())
	}
	err := run(context.Background(), []string{"bench", "fleet"}, map[string]string{}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `unknown command "bench"`) {
		t.Errorf("watchdog bench fleet: %v, want an unknown command", err)
	}
}

func TestCheckConfig(t *testing.T) {
	valid := writeConfig(t, "scrape: {interval: 10s}\n")
	invalid := writeConfig(t, "scrape: {interval: -1s}\ntargets: [{name: a, url: 'ftp://x'}]\n")
	unknownKey := writeConfig(t, "scrape: {intervall: 1s}\n")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	shipped, _ := filepath.Glob("../../configs/*.yaml")
	if len(shipped) == 0 {
		t.Fatal("no shipped configs found")
	}
	for _, tc := range []struct {
		name string
		args []string
		exit int
		// each string must appear in the output (stdout and stderr).
		want []string
	}{
		{"shipped configs", append([]string{"check", "config"}, shipped...), 0, []string{"SUCCESS"}},
		{"valid", []string{"check", "config", valid}, 0, []string{valid + ": SUCCESS"}},
		{"invalid values", []string{"check", "config", valid, invalid}, 1,
			[]string{valid + ": SUCCESS", invalid + ": FAILED", "scrape.interval: must be positive", "targets[0].url"}},
		{"unknown key", []string{"check", "config", unknownKey}, 1, []string{unknownKey + ": FAILED", "intervall"}},
		{"missing file", []string{"check", "config", missing}, 1, []string{missing + ": FAILED"}},
		{"no files", []string{"check", "config"}, 2, []string{"usage: watchdog check config"}},
		{"no subject", []string{"check"}, 2, []string{"usage: watchdog check config"}},
		{"bad flag", []string{"check", "--frobnicate", "config", valid}, 2, []string{"usage: watchdog check config"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, map[string]string{}, &out, &errOut)
			exit := 0
			if err != nil {
				exit = exitCode(err)
			}
			text := out.String() + errOut.String()
			if exit != tc.exit {
				t.Errorf("exit %d (%v), want %d; output:\n%s", exit, err, tc.exit, text)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("output lacks %q:\n%s", w, text)
				}
			}
		})
	}
}

// check ready asks a watchdog's /-/ready, as the chart's helm test does:
// 0 when it answers 200, 1 with its answer when not or when nothing
// answers, 2 for a URL that is not one.
func TestCheckReady(t *testing.T) {
	answer := func(code int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/-/ready" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(code)
			fmt.Fprintln(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	ready, waiting := answer(200, "ready"), answer(503, "not ready: no evaluation round yet")
	closed := httptest.NewServer(http.NotFoundHandler())
	gone := closed.URL
	closed.Close()
	for _, tc := range []struct {
		name string
		args []string
		exit int
		want string
	}{
		{"ready", []string{"check", "ready", ready}, 0, "/-/ready: ready"},
		{"ready under a path prefix", []string{"check", "ready", ready + "/"}, 0, "ready"},
		{"not ready", []string{"check", "ready", waiting}, 1, "answered 503: not ready: no evaluation round yet"},
		{"nothing answers", []string{"check", "--timeout", "1s", "ready", gone}, 1, "not ready"},
		{"not a URL", []string{"check", "ready", "watchdog:9402"}, 2, "not an http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, map[string]string{}, &out, &errOut)
			exit := 0
			if err != nil {
				exit = exitCode(err)
			}
			text := out.String() + errOut.String() + fmt.Sprint(err)
			if exit != tc.exit || !strings.Contains(text, tc.want) {
				t.Errorf("exit %d, output %q; want exit %d and %q", exit, text, tc.exit, tc.want)
			}
		})
	}
}

// The daemon re-reads its configuration file when the file's content
// changes, as a SIGHUP would: here a second target appears without a
// restart; a write of the same content reloads nothing. The lifecycle
// endpoint is off unless enabled, and the probes answer once rounds run.
func TestConfigFileChangeReloads(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		network := memnet.New()
		var urls []string
		for range 2 {
			ln, err := network.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: newFakeEngine("m", healthyLoad()), ReadHeaderTimeout: 5 * time.Second}
			go srv.Serve(ln)
			defer srv.Close()
			urls = append(urls, "http://"+ln.Addr().String())
		}
		path := filepath.Join(t.TempDir(), "watchdog.yaml")
		write := func(targets ...string) {
			var b strings.Builder
			b.WriteString("listen_address: 127.0.0.1:0\nscrape: {interval: 1s}\nevaluation: {interval: 1s}\ntargets:\n")
			for i, u := range targets {
				b.WriteString("  - {name: r" + string(rune('0'+i)) + ", url: " + u + "}\n")
			}
			if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write(urls[0])

		var stderr lockedBuffer
		listening := make(chan string, 1)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- runCommand(ctx, []string{"run", "--config.file=" + path, "--config.watch-interval=10s"}, map[string]string{}, daemonIO{
				stdout: io.Discard, stderr: &stderr, dial: network.DialContext, listen: network.Listen,
				started: func(addr string) { listening <- addr },
			})
		}()
		var base string
		select {
		case addr := <-listening:
			base = "http://" + addr
		case err := <-done:
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
		client := &http.Client{Transport: &http.Transport{DialContext: network.DialContext}}
		defer client.CloseIdleConnections()
		request := func(method, path string) (int, string) {
			req, _ := http.NewRequest(method, base+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		targets := func() []string {
			_, body := request("GET", "/api/v1/watchdog/targets")
			var v struct{ Targets []struct{ Replica string } }
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("targets: %v: %s", err, body)
			}
			var out []string
			for _, tg := range v.Targets {
				out = append(out, tg.Replica)
			}
			return out
		}

		time.Sleep(3 * time.Second)
		for _, p := range []string{"/-/healthy", "/-/ready", "/healthz", "/readyz"} {
			if code, body := request("GET", p); code != 200 {
				t.Errorf("GET %s: %d %s", p, code, body)
			}
		}
		if code, body := request("POST", "/-/reload"); code != http.StatusForbidden || !strings.Contains(body, "--web.enable-lifecycle") {
			t.Errorf("POST /-/reload without --web.enable-lifecycle: %d %q", code, body)
		}
		if got := targets(); strings.Join(got, ",") != "r0" {
			t.Fatalf("targets before the change: %v", got)
		}

		write(urls[0]) // the same content: nothing to reload
		time.Sleep(12 * time.Second)
		if strings.Contains(stderr.String(), "configuration reloaded") {
			t.Fatalf("rewriting the same content reloaded:\n%s", stderr.String())
		}
		write(urls[0], urls[1])
		time.Sleep(12 * time.Second) // one watch interval, and a round
		if got := targets(); strings.Join(got, ",") != "r0,r1" {
			t.Errorf("targets after the file changed: %v\n%s", got, stderr.String())
		}
		if n := strings.Count(stderr.String(), "configuration reloaded"); n != 1 {
			t.Errorf("%d reloads, want 1:\n%s", n, stderr.String())
		}
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
		network.Close()
	})
}
