package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// writeConfig writes a watchdog.yaml for one test and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "watchdog.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runDaemon runs `watchdog run args...` with env (listening on a free
// loopback port unless env says otherwise) until the test ends, and returns
// its stdout and stderr as lines. The daemon must stop without an error.
func runDaemon(t *testing.T, env map[string]string, args ...string) (out, logs *lines) {
	t.Helper()
	if _, ok := env["WATCHDOG_LISTEN_ADDRESS"]; !ok {
		env["WATCHDOG_LISTEN_ADDRESS"] = "127.0.0.1:0"
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	out, logs = collect(outR), collect(errR)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"run"}, args...), env, outW, errW)
		outW.Close()
		errW.Close()
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	})
	return out, logs
}
