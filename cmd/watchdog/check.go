package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

const checkUsage = `usage: watchdog check config FILE...
       watchdog check [--timeout D] ready URL

check config: validate configuration files as the daemon loads them: strict YAML (an
unknown key is an error) over the defaults, then every setting, each problem printed with
its path. Environment overrides and *_file secrets are not applied, and a file without
targets is valid (WATCHDOG_TARGETS may supply them).

check ready: ask a running watchdog at URL (e.g. http://sglang-watchdog:9402) whether it
is ready (GET URL/-/ready); the chart's helm test runs it.

Exit status: 0 every file is valid / the watchdog is ready, 1 a file is invalid or
unreadable / the watchdog is not ready or not reachable, 2 usage error.
`

// errNotReady is returned when check ready gets no 200 (exit 1).
var errNotReady = errors.New("not ready")

// errInvalidConfig is returned when a checked file is invalid (exit 1).
var errInvalidConfig = errors.New("invalid configuration")

func checkCmd(ctx context.Context, args []string, _ map[string]string, dio daemonIO) error {
	fs := newFlagSet("check", checkUsage, dio)
	timeout := fs.Duration("timeout", 10*time.Second, "check ready: how long to wait for the answer")
	if err := parseFlags(fs, args, dio, true); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 2 && rest[0] == "ready" {
		return checkReady(ctx, rest[1], *timeout, dio)
	}
	if len(rest) == 0 || rest[0] != "config" {
		fs.Usage()
		return fmt.Errorf("%w: check: want `check config FILE...` or `check ready URL`", errUsage)
	}
	files := rest[1:]
	if len(files) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: check config: no files given", errUsage)
	}
	invalid := 0
	for _, path := range files {
		if err := config.CheckFile(path); err != nil {
			invalid++
			fmt.Fprintf(dio.stderr, "%s: FAILED:\n  %s\n", path, strings.ReplaceAll(err.Error(), "\n", "\n  "))
			continue
		}
		fmt.Fprintf(dio.stdout, "%s: SUCCESS\n", path)
	}
	if invalid > 0 {
		return fmt.Errorf("%w: %d of %d files", errInvalidConfig, invalid, len(files))
	}
	return nil
}

// checkReady asks the watchdog at base whether it is ready and prints its
// answer.
func checkReady(ctx context.Context, base string, timeout time.Duration, dio daemonIO) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: check ready: %q is not an http(s) URL", errUsage, redact.URL(base))
	}
	u = u.JoinPath("/-/ready")
	client, err := commoncfg.NewClientFromConfig(commoncfg.DefaultHTTPClientConfig, "watchdog-check")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errNotReady, redact.URL(u.String()), redact.Secrets{URLs: []string{base}}.Error(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	answer := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s answered %d: %s", errNotReady, redact.URL(u.String()), resp.StatusCode, answer)
	}
	fmt.Fprintf(dio.stdout, "%s: %s\n", redact.URL(u.String()), answer)
	return nil
}
