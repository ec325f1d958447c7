package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
)

// syncBuffer is a log the test reads while the daemon writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitRun is LoadAndRun on an in-memory network inside a synctest bubble,
// with one engine serving a captured exposition.
type waitRun struct {
	t       *testing.T
	network *memnet.Network
	client  *http.Client
	path    string // the configuration file
	engine  string // the engine's URL
	log     *syncBuffer
	reload  chan struct{}
	started chan string
	cancel  func()
	done    chan error
}

func startWaitRun(t *testing.T, file string, lifecycle bool, watch time.Duration) *waitRun {
	t.Helper()
	body, err := fixture.SGLang("sglang-current-full.prom")
	if err != nil {
		t.Fatal(err)
	}
	r := &waitRun{t: t, network: memnet.New(), path: filepath.Join(t.TempDir(), "watchdog.yaml"), log: &syncBuffer{},
		reload: make(chan struct{}, 1), started: make(chan string, 2), done: make(chan error, 1)}
	r.client = &http.Client{Transport: &http.Transport{DialContext: r.network.DialContext}}
	ln, err := r.network.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	engine := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write(body)
	})}
	go engine.Serve(ln)
	r.engine = "http://" + ln.Addr().String()
	r.write(file)
	env := map[string]string{"WATCHDOG_CONFIG": r.path}
	load := func() (config.Config, error) { return config.Load(config.Default(), env) }
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		r.done <- LoadAndRun(ctx, config.Fallback(config.Default(), env, config.Flags{}), Options{
			Log: r.log, Load: load, Reload: r.reload, Lifecycle: lifecycle, ConfigFile: r.path, WatchInterval: watch,
			Started: func(addr string) { r.started <- addr }, Dial: r.network.DialContext, Listen: r.network.Listen,
		})
	}()
	r.cancel = func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("LoadAndRun: %v", err)
		}
		r.client.CloseIdleConnections()
		engine.Close()
		r.network.Close()
	}
	return r
}

// write replaces the configuration file; ENGINE stands for the engine's URL.
func (r *waitRun) write(yaml string) {
	r.t.Helper()
	if err := os.WriteFile(r.path, []byte(strings.ReplaceAll(yaml, "ENGINE", r.engine)), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// serving returns the address the next server to start listens on.
func (r *waitRun) serving() string {
	r.t.Helper()
	select {
	case addr := <-r.started:
		return addr
	case err := <-r.done:
		r.t.Fatalf("LoadAndRun returned %v before serving\n%s", err, r.log.String())
	}
	return ""
}

func (r *waitRun) do(method, url string) (int, string) {
	r.t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// expect fails unless GET path answers status with every want in its body.
func (r *waitRun) expect(base, path string, status int, want ...string) string {
	r.t.Helper()
	code, body := r.do("GET", base+path)
	if code != status {
		r.t.Errorf("GET %s: %d, want %d: %s", path, code, status, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			r.t.Errorf("GET %s lacks %q:\n%s", path, w, body)
		}
	}
	return body
}

const (
	// unparsable has an unknown key; its listen address is still read.
	unparsable = "listen_address: 127.0.0.1:9402\nscrape: {intervall: 1s}\ntargets: [{name: r0, url: ENGINE}]\n"
	// invalid parses, but a value is out of range.
	invalid = "listen_address: 127.0.0.1:9402\nalerts: {for: -1s}\ntargets: [{name: r0, url: ENGINE}]\n"
	// usable watches the engine, a round a second.
	usable = "listen_address: 127.0.0.1:9402\nscrape: {interval: 1s}\nevaluation: {interval: 1s}\ntargets: [{name: r0, url: ENGINE}]\n"
)

// A configuration that cannot be used at start leaves the daemon alive and
// not ready, saying why; fixed, it loads on SIGHUP, on POST /-/reload or at
// the periodic re-check, and the daemon starts in the same process on the
// same address and evaluates.
func TestUnusableConfigAtStartWaitsThenRuns(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lifecycle bool
		watch     time.Duration
		trigger   func(r *waitRun, base string)
	}{
		{"SIGHUP", false, 10 * time.Second, func(r *waitRun, _ string) { r.reload <- struct{}{} }},
		{"POST /-/reload", true, 10 * time.Second, func(r *waitRun, base string) {
			if code, body := r.do("POST", base+"/-/reload"); code != 200 {
				r.t.Errorf("POST /-/reload of the fixed file: %d %s", code, body)
			}
		}},
		{"re-check of an unwatched file every 30 s", false, 0, func(*waitRun, string) { time.Sleep(30 * time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := startWaitRun(t, unparsable, tc.lifecycle, tc.watch)
				defer r.cancel()
				addr := r.serving()
				if addr != "127.0.0.1:9402" {
					t.Errorf("waiting on %s, want the file's listen_address although the file does not load", addr)
				}
				base := "http://" + addr
				r.expect(base, "/-/healthy", 200)
				r.expect(base, "/-/ready", 503, "intervall", "reason: parse")
				r.expect(base, "/", 503, "intervall", "watches nothing")
				metrics := r.expect(base, "/metrics", 200, "watchdog_config_last_reload_successful 0",
					`watchdog_config_last_error_info{reason="parse"} 1`, "watchdog_build_info")
				if strings.Contains(metrics, "watchdog_evaluations_total") {
					t.Error("evaluating without a configuration")
				}
				if tc.lifecycle {
					if code, body := r.do("POST", base+"/-/reload"); code != 400 || !strings.Contains(body, "intervall") {
						t.Errorf("POST /-/reload of the broken file: %d %s", code, body)
					}
				}

				// Still broken, the other way: the reason follows.
				r.write(invalid)
				// Past the re-check due at 30 s, so it has run.
				time.Sleep(30*time.Second + time.Millisecond)
				r.expect(base, "/metrics", 200, `watchdog_config_last_error_info{reason="validate"} 1`)
				r.expect(base, "/-/ready", 503, "alerts.for")
				if n := strings.Count(r.log.String(), "configuration cannot be used"); n != 2 {
					t.Errorf("%d error lines for two distinct errors, retried every %s:\n%s", n, tc.watch, r.log.String())
				}

				r.write(usable)
				tc.trigger(r, base)
				if addr := r.serving(); addr != "127.0.0.1:9402" {
					t.Errorf("the daemon listens on %s, want 127.0.0.1:9402", addr)
				}
				time.Sleep(3 * time.Second) // rounds every second
				r.expect(base, "/-/ready", 200)
				r.expect(base, "/api/v1/watchdog/targets", 200, `"replica": "r0"`, `"up": true`)
				metrics = r.expect(base, "/metrics", 200, "watchdog_config_last_reload_successful 1",
					`watchdog_config_reloads_total{result="success"} 1`, "watchdog_evaluations_total")
				if strings.Contains(metrics, "watchdog_config_last_error_info{") {
					t.Errorf("an error reason after the configuration loaded:\n%s", metrics)
				}
				for _, line := range []string{"watchdog waiting for a usable configuration", "configuration loaded; starting the daemon", "watchdog started"} {
					if !strings.Contains(r.log.String(), line) {
						t.Errorf("log lacks %q:\n%s", line, r.log.String())
					}
				}
			})
		})
	}
}

// An environment variable the daemon cannot use waits too, and says that
// only a restart reads the environment again; the error is logged with the
// variable's name and shown without a URL's credentials.
func TestUnusableEnvironmentSaysToRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := memnet.New()
		defer network.Close()
		client := &http.Client{Transport: &http.Transport{DialContext: network.DialContext}}
		defer client.CloseIdleConnections()
		env := map[string]string{"WATCHDOG_TARGETS": "r0=http://u:s3cr3t@10.0.0.5:30000/,::x", "WATCHDOG_EXTERNAL_URL": "ftp://u:s3cr3t@example.com"}
		log := &syncBuffer{}
		started := make(chan string, 1)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- LoadAndRun(ctx, config.Fallback(config.Default(), env, config.Flags{}), Options{
				Log: log, Load: func() (config.Config, error) { return config.Load(config.Default(), env) },
				Started: func(addr string) { started <- addr }, Dial: network.DialContext, Listen: network.Listen,
			})
		}()
		addr := <-started
		if addr != config.DefaultListenAddress {
			t.Errorf("waiting on %s, want the default %s", addr, config.DefaultListenAddress)
		}
		resp, err := client.Get("http://" + addr + "/-/ready")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{"WATCHDOG_TARGETS", "reason: env", "restart"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/-/ready lacks %q:\n%s", want, body)
			}
		}
		time.Sleep(time.Minute)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("LoadAndRun: %v", err)
		}
		for what, text := range map[string]string{"/-/ready": string(body), "log": log.String()} {
			if strings.Contains(text, "s3cr3t") {
				t.Errorf("%s shows a credential:\n%s", what, text)
			}
		}
		if !strings.Contains(log.String(), "WATCHDOG_TARGETS") || !strings.Contains(log.String(), "watchdog stopped") {
			t.Errorf("log:\n%s", log.String())
		}
	})
}
