// Command watchdog watches a fleet of SGLang replicas and pages people with
// a diagnosis. main only handles signals and the exit code; run does the
// wiring so tests can call it in-process.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	promversion "github.com/prometheus/common/version"
)

func main() {
	if promversion.Version == "" {
		promversion.Version = buildVersion()
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], environ(), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "watchdog:", err)
		os.Exit(exitCode(err))
	}
}

// defaultGCPercent is the garbage collector's target unless GOGC is set.
// Nearly all of the daemon's heap is windows kept for an hour, and each
// scrape leaves only a few kilobytes of garbage; Go's default of 100 lets
// the heap grow to twice what is live before collecting, so the resident
// memory was twice the windows for garbage that a collection every few
// seconds clears. At 25 it is a quarter more.
const defaultGCPercent = 25

func environ() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
