package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fleetbench"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
)

const benchUsage = `usage: watchdog bench fleet [flags]

Measure what watching a fleet costs. Serves --replicas simulated SGLang
replicas from one loopback listener (http://127.0.0.1:<port>/replicas/<i>/metrics),
runs this daemon against them as a child process (production defaults, the
given intervals), optionally Prometheus beside it on the same fleet, and after
the warm-up reports their CPU and memory from /proc and the daemon's own scrape
latency, evaluation round time and samples ingested per second. With
--profile-dir it also saves the daemon's CPU profile over the measurement and
its heap profile at the end, for go tool pprof.

flags:
`

func benchCmd(ctx context.Context, args []string, _ map[string]string, dio daemonIO) error {
	if len(args) == 0 || args[0] != "fleet" {
		if err := parseFlags(newFlagSet("bench", benchUsage, dio), args, dio, false); err != nil {
			return err // -h, or a flag bench does not have
		}
		fmt.Fprint(dio.stderr, benchUsage)
		return fmt.Errorf("%w: bench: want `bench fleet`", errUsage)
	}
	fs := newFlagSet("bench fleet", benchUsage, dio)
	replicas := fs.Int("replicas", 1000, fmt.Sprintf("simulated replicas to watch, 1 to %d", sim.MaxLoopbackReplicas))
	duration := fs.Duration("duration", 2*time.Minute, "how long to measure, after the warm-up")
	warmup := fs.Duration("warmup", time.Minute, "how long to run before measuring (at least until every replica was scraped)")
	interval := fs.Duration("interval", 5*time.Second, "scrape interval of the daemon and of Prometheus")
	evaluation := fs.Duration("evaluation-interval", config.DefaultEvaluationInterval, "the daemon's evaluation interval (evaluation.interval)")
	prometheus := fs.String("prometheus", "", "a Prometheus executable to run on the same fleet for comparison, e.g. /usr/bin/prometheus")
	incident := fs.String("incident", "", "put one replica in eight into this incident, --warmup after the fleet starts: "+
		sim.ClassPreemptStorm+", "+sim.ClassCacheCollapse+", "+sim.ClassRetryAvalanche+" or "+sim.ClassCrash)
	output := fs.String("output", fleetbench.FormatText, "report format: text, markdown or json")
	profileDir := fs.String("profile-dir", "", "a directory (created when missing) for the daemon's profiles: "+fleetbench.CPUProfileFile+
		" over the measurement and "+fleetbench.HeapProfileFile+" at the end; the daemon then runs with --web.enable-pprof")
	if err := parseFlags(fs, args[1:], dio, false); err != nil {
		return err
	}
	if err := fleetbench.CheckFormat(*output); err != nil {
		fs.Usage()
		return fmt.Errorf("%w: bench fleet: --output: %v", errUsage, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: the daemon's executable: %w", err)
	}
	r, err := fleetbench.Run(ctx, fleetbench.Options{
		Replicas: *replicas, Duration: *duration, Warmup: *warmup, Interval: *interval, EvaluationInterval: *evaluation,
		Incident: *incident, Watchdog: exe, Prometheus: *prometheus, ProfileDir: *profileDir,
		Clock: systemClock{}, Progress: dio.stderr,
	})
	if err != nil {
		return fmt.Errorf("bench fleet: %w", err)
	}
	return r.Write(dio.stdout, *output)
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (systemClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
