// Command watchdog watches a fleet of SGLang replicas and pages people with
// a diagnosis. main handles signals (SIGINT and SIGTERM stop, SIGHUP
// reloads) and the exit code; run turns arguments and the environment into
// a configuration and internal/app's options, so tests can call it
// in-process.
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
	err := runCommand(ctx, os.Args[1:], environ(), daemonIO{stdout: os.Stdout, stderr: os.Stderr, reload: reloads(ctx)})
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

// reloads turns every SIGHUP into a reload request until ctx is done.
func reloads(ctx context.Context) <-chan struct{} {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	out := make(chan struct{}, 1)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				select {
				case out <- struct{}{}:
				default: // one already pending
				}
			}
		}
	}()
	return out
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
