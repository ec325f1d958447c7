// Command watchdog watches a fleet of SGLang replicas and pages people with
// a diagnosis. main only handles signals and the exit code; run does the
// wiring so tests can call it in-process.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	promversion "github.com/prometheus/common/version"
)

func main() {
	if promversion.Version == "" {
		promversion.Version = buildVersion()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], environ(), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "watchdog:", err)
		os.Exit(exitCode(err))
	}
}

func environ() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
