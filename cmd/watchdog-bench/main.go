// Command watchdog-bench measures what watching a fleet costs: `fleet`
// serves a loopback fleet of simulated SGLang replicas, runs a watchdog
// binary against it as a child process (and Prometheus beside it, when
// given) and reports their CPU and memory. It is a separate binary so that
// the paging daemon does not carry the harness.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fleetbench"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, errHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "watchdog-bench:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errUsage marks command-line mistakes (exit status 2); errHelp ends a
// command that printed its help (exit status 0).
var (
	errUsage = errors.New("usage")
	errHelp  = errors.New("help printed")
)

const usage = `usage: watchdog-bench fleet [flags]

Measure what watching a fleet costs. Serves --replicas simulated SGLang
replicas from one loopback listener (http://127.0.0.1:<port>/replicas/<i>/metrics),
runs a watchdog binary against them as a child process (production defaults, the
given intervals), optionally Prometheus beside it on the same fleet, and after
the warm-up reports their CPU and memory from /proc and the daemon's own scrape
latency, evaluation round time and samples ingested per second. With
--profile-dir it also saves the daemon's CPU profile over the measurement and
its heap profile at the end, for go tool pprof.

The watchdog binary is --watchdog, else a file named watchdog beside this
executable, else watchdog on PATH (go build -o watchdog ./cmd/watchdog).

flags:
`

// run is the whole program minus signal handling and the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "fleet" {
		if err := parse(newFlagSet("watchdog-bench", stdout, stderr), args, stdout); err != nil {
			return err // -h, or a flag
		}
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: want `watchdog-bench fleet`", errUsage)
	}
	fs := newFlagSet("fleet", stdout, stderr)
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
	watchdog := fs.String("watchdog", "", "the watchdog executable to measure (default: watchdog beside this executable, else on PATH)")
	if err := parse(fs, args[1:], stdout); err != nil {
		return err
	}
	if err := fleetbench.CheckFormat(*output); err != nil {
		fs.Usage()
		return fmt.Errorf("%w: fleet: --output: %v", errUsage, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("fleet: this executable: %w", err)
	}
	daemon, err := watchdogExecutable(*watchdog, exe, exec.LookPath)
	if err != nil {
		return fmt.Errorf("%w: fleet: %v", errUsage, err)
	}
	r, err := fleetbench.Run(ctx, fleetbench.Options{
		Replicas: *replicas, Duration: *duration, Warmup: *warmup, Interval: *interval, EvaluationInterval: *evaluation,
		Incident: *incident, Watchdog: daemon, Prometheus: *prometheus, ProfileDir: *profileDir,
		Clock: systemClock{}, Progress: stderr,
	})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return r.Write(stdout, *output)
}

// watchdogExecutable picks the daemon to measure: the flag's path, else a
// file named watchdog in self's directory, else watchdog on PATH.
func watchdogExecutable(flagged, self string, lookPath func(string) (string, error)) (string, error) {
	if flagged != "" {
		if _, err := os.Stat(flagged); err != nil {
			return "", fmt.Errorf("--watchdog: %w", err)
		}
		return flagged, nil
	}
	beside := filepath.Join(filepath.Dir(self), "watchdog")
	if fi, err := os.Stat(beside); err == nil && !fi.IsDir() {
		return beside, nil
	}
	if p, err := lookPath("watchdog"); err == nil {
		return p, nil
	}
	return "", errors.New("no watchdog executable beside this one or on PATH: build one (go build -o watchdog ./cmd/watchdog) and pass --watchdog PATH")
}

func newFlagSet(name string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args: errHelp after printing the usage to stdout for -h, a
// usage error for a bad flag or for arguments where none are taken.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	stderr := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return errHelp
	}
	fs.SetOutput(stderr)
	if err != nil {
		fs.Usage()
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("%w: %s: unexpected arguments %q", errUsage, fs.Name(), fs.Args())
	}
	return nil
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (systemClock) NewTicker(d time.Duration) (ticks <-chan time.Time, stop func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
