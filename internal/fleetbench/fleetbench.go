// Package fleetbench measures what watching a fleet costs: it serves a
// loopback fleet of simulated SGLang replicas, runs the real daemon (and,
// optionally, Prometheus) against it as child processes, and reports their
// CPU, memory and the daemon's own scrape and evaluation timings.
package fleetbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
)

// Clock is the time source of a run: when the warm-up and the measurement
// end, and the ticks that poll readiness and sample the children.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
	NewTicker(d time.Duration) (ticks <-chan time.Time, stop func())
}

// Options configures Run.
type Options struct {
	Replicas int           // 1..sim.MaxLoopbackReplicas
	Duration time.Duration // measured, after Warmup
	Warmup   time.Duration
	Interval time.Duration // scrape interval of both children
	// EvaluationInterval is the daemon's evaluation.interval: how often it
	// runs its detectors over every window (Prometheus evaluates nothing
	// here).
	EvaluationInterval time.Duration
	// Incident is an incident class the fleet's sources put one replica in
	// eight into, Warmup after the fleet starts ("": healthy throughout).
	Incident string
	// Watchdog is the daemon's executable, run as `Watchdog run
	// --config.file=<generated>`.
	Watchdog string
	// Prometheus is a Prometheus server executable to run beside it on the
	// same fleet ("": none).
	Prometheus string
	// ProfileDir, when set, receives the daemon's profiles: its CPU over
	// the measurement (CPUProfileFile) and its heap after a collection at
	// the end (HeapProfileFile). The daemon then runs with
	// --web.enable-pprof, and Go's profiler sampling it at 100 Hz costs it
	// a little CPU, which the report includes. Created when missing. A
	// profile that cannot be taken is said on Progress and missing from
	// Report.Profiles; the measurement stands.
	ProfileDir string
	// SampleEvery is how often the children's memory is sampled for the
	// growth rate; default 5 s.
	SampleEvery time.Duration
	// ReadyTimeout bounds the wait for the children to answer /-/ready;
	// default 2 min.
	ReadyTimeout time.Duration
	Clock        Clock
	// Progress gets one line per stage; nil: discarded.
	Progress io.Writer
}

// The profiles Run writes into Options.ProfileDir, for go tool pprof.
const (
	CPUProfileFile  = "watchdog-cpu.pb.gz"
	HeapProfileFile = "watchdog-heap.pb.gz"
)

// pollEvery is how often readiness and scrape coverage are checked.
const pollEvery = 100 * time.Millisecond

func (o *Options) validate() error {
	var errs []error
	if o.Replicas < 1 || o.Replicas > sim.MaxLoopbackReplicas {
		errs = append(errs, fmt.Errorf("--replicas %d: want 1 to %d", o.Replicas, sim.MaxLoopbackReplicas))
	}
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration %s: must be positive", o.Duration))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--warmup %s: must not be negative", o.Warmup))
	}
	if o.Interval < time.Second {
		errs = append(errs, fmt.Errorf("--interval %s: must be at least 1s", o.Interval))
	}
	if o.EvaluationInterval < time.Second {
		errs = append(errs, fmt.Errorf("--evaluation-interval %s: must be at least 1s", o.EvaluationInterval))
	}
	if o.Watchdog == "" {
		errs = append(errs, errors.New("no watchdog executable"))
	}
	if o.Clock == nil {
		errs = append(errs, errors.New("no clock"))
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return errors.Join(errs...)
}

// Run serves the fleet, starts the children, waits for the warm-up, measures
// for the duration and returns the report. Everything it started is stopped
// and its temporary directory removed before it returns.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.validate(); err != nil {
		return Report{}, err
	}
	if o.Prometheus != "" {
		if _, err := os.Stat(o.Prometheus); err != nil {
			return Report{}, fmt.Errorf("--prometheus: %w", err)
		}
	}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return Report{}, fmt.Errorf("--profile-dir: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	dir, err := os.MkdirTemp("", "watchdog-bench-")
	if err != nil {
		return Report{}, err
	}
	defer os.RemoveAll(dir)

	fleet, err := sim.NewLoopback(sim.LoopbackConfig{
		Replicas: o.Replicas, Seed: 1, Now: o.Clock.Now,
		Incident: o.Incident, IncidentAfter: o.Warmup,
		// In the order of children below, so that the fleet's scrape
		// counts k are child k's.
		UserAgents: []string{scrape.DefaultUserAgent, prometheusUserAgent},
	})
	if err != nil {
		return Report{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Report{}, fmt.Errorf("fleet listener: %w", err)
	}
	srv := &http.Server{Handler: fleet.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	fleetAddr := ln.Addr().String()
	fmt.Fprintf(o.Progress, "fleet: %d simulated replicas on http://%s/replicas/<i>/metrics\n", o.Replicas, fleetAddr)

	var children []*child
	defer func() {
		for _, c := range children {
			c.stop()
		}
	}()
	wd, err := startWatchdog(ctx, o, dir, fleetAddr)
	if err != nil {
		return Report{}, err
	}
	children = append(children, wd)
	var prom *child
	if o.Prometheus != "" {
		if prom, err = startPrometheus(ctx, o, dir, fleetAddr); err != nil {
			return Report{}, err
		}
		children = append(children, prom)
	}
	for _, c := range children {
		if err := c.waitReady(ctx, o); err != nil {
			return Report{}, err
		}
		fmt.Fprintf(o.Progress, "%s: ready (pid %d)\n", c.name, c.cmd.Process.Pid)
	}

	// The warm-up lasts at least Warmup and until every child has scraped
	// every replica: measuring a daemon that has not met its fleet yet
	// measures start-up.
	fmt.Fprintf(o.Progress, "warm-up: %s\n", o.Warmup)
	if err := waitFor(ctx, o, children, o.Clock.After(o.Warmup), nil, fleet); err != nil {
		return Report{}, err
	}

	begin, err := sampleAll(ctx, o, children)
	if err != nil {
		return Report{}, err
	}
	scrapesBefore := make([][]int64, len(children))
	for k := range children {
		scrapesBefore[k] = fleet.ScrapeCounts(k)
	}
	fmt.Fprintf(o.Progress, "measuring: %s\n", o.Duration)
	var cpuProfile chan error
	if o.ProfileDir != "" {
		// Whole seconds, at least the duration: the measurement lasts at
		// least that long.
		seconds := int64(math.Ceil(o.Duration.Seconds()))
		cpuProfile = make(chan error, 1)
		go func() {
			cpuProfile <- wd.profile(ctx, "/debug/pprof/profile?seconds="+strconv.FormatInt(seconds, 10), filepath.Join(o.ProfileDir, CPUProfileFile))
		}()
	}
	memory := make([][]memPoint, len(children))
	for i := range children {
		memory[i] = []memPoint{{begin[i].at, begin[i].rss}}
	}
	ticks, stopTicks := o.Clock.NewTicker(o.SampleEvery)
	defer stopTicks()
	sampleMemory := func() error {
		select {
		case <-ticks:
		default:
			return nil
		}
		for i, c := range children {
			u, err := c.usage(o.Clock.Now())
			if err != nil {
				return err
			}
			memory[i] = append(memory[i], memPoint{u.at, u.rss})
		}
		return nil
	}
	// The measurement lasts at least Duration and until every child has
	// scraped every replica again within it.
	if err := waitFor(ctx, o, children, o.Clock.After(o.Duration), sampleMemory, fleet); err != nil {
		return Report{}, err
	}
	end, err := sampleAll(ctx, o, children)
	if err != nil {
		return Report{}, err
	}
	// A profile that failed is said on Progress and left out: the
	// measurement stands without it.
	var profiles []string
	if cpuProfile != nil {
		if err := <-cpuProfile; err != nil {
			fmt.Fprintf(o.Progress, "no CPU profile: %v\n", err)
		} else {
			profiles = append(profiles, filepath.Join(o.ProfileDir, CPUProfileFile))
		}
		heap := filepath.Join(o.ProfileDir, HeapProfileFile)
		if err := wd.profile(ctx, "/debug/pprof/heap?gc=1", heap); err != nil {
			fmt.Fprintf(o.Progress, "no heap profile: %v\n", err)
		} else {
			profiles = append(profiles, heap)
		}
	}
	for i := range children {
		memory[i] = append(memory[i], memPoint{end[i].at, end[i].rss})
	}

	window := end[0].at.Sub(begin[0].at)
	r := Report{
		Replicas: o.Replicas, IntervalSeconds: o.Interval.Seconds(), EvaluationIntervalSeconds: o.EvaluationInterval.Seconds(),
		WarmupSeconds: o.Warmup.Seconds(),
		WindowSeconds: window.Seconds(), Incident: o.Incident, Profiles: profiles,
	}
	for k := range children {
		m, err := measure(o.Replicas, begin[k], end[k], memory[k])
		if err != nil {
			return Report{}, fmt.Errorf("%s: %w", children[k].name, err)
		}
		m.ReplicasScraped = sim.ReplicasGrown(scrapesBefore[k], fleet.ScrapeCounts(k))
		heap, err := gaugeSum(end[k].metrics, heapInuseMetric)
		if err != nil {
			return Report{}, fmt.Errorf("%s /metrics: %w", children[k].name, err)
		}
		m.HeapInuseBytes = uint64(heap)
		stacks, err := gaugeSum(end[k].metrics, stackInuseMetric)
		if err != nil {
			return Report{}, fmt.Errorf("%s /metrics: %w", children[k].name, err)
		}
		m.StackInuseBytes = uint64(stacks)
		switch children[k] {
		case wd:
			d, samples, err := daemonTimings(begin[k].metrics, end[k].metrics, window)
			if err != nil {
				return Report{}, fmt.Errorf("watchdog /metrics: %w", err)
			}
			m.Daemon, m.SamplesPerSecond = &d, samples
			r.Watchdog = m
		case prom:
			if m.SamplesPerSecond, err = counterRate(begin[k].metrics, end[k].metrics, "prometheus_tsdb_head_samples_appended_total", window); err != nil {
				return Report{}, fmt.Errorf("prometheus /metrics: %w", err)
			}
			r.Prometheus = &m
		}
	}
	r.HostCPUs = runtime.NumCPU()
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if load, err := fs.LoadAvg(); err == nil {
			r.HostLoad1m = load.Load1
		}
	}
	r.compare()
	return r, nil
}

// waitFor returns once deadline has fired and every child has scraped
// every replica since the call, or 3 intervals after the deadline if one
// has not (the report then shows which replicas were missed); poll runs on
// every check. It fails when a child exits or ctx ends.
func waitFor(ctx context.Context, o Options, children []*child, deadline <-chan time.Time, poll func() error, fleet *sim.Loopback) error {
	since := make([][]int64, len(children))
	for k := range children {
		since[k] = fleet.ScrapeCounts(k)
	}
	ticks, stop := o.Clock.NewTicker(pollEvery)
	defer stop()
	var elapsedAt time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			elapsedAt, deadline = o.Clock.Now(), nil
		case <-ticks:
		}
		for _, c := range children {
			if err := c.exited(); err != nil {
				return err
			}
		}
		if poll != nil {
			if err := poll(); err != nil {
				return err
			}
		}
		if elapsedAt.IsZero() {
			continue
		}
		covered := true
		for k := range children {
			if sim.ReplicasGrown(since[k], fleet.ScrapeCounts(k)) < o.Replicas {
				covered = false
			}
		}
		if covered || o.Clock.Now().Sub(elapsedAt) > 3*o.Interval {
			return nil
		}
	}
}

// freePort returns a loopback address nothing listens on, for a child to
// bind. It lies below the kernel's ephemeral range: a port from within it
// (as ":0" gives) can be taken by one of the fleet's many outgoing scrape
// connections between this check and the child's bind.
func freePort() (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	base := 10000
	if low-base < 1000 {
		base = 1024
	}
	span := max(low-base, 1000) // an odd range: some ports may then be ephemeral
	for range 50 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+rand.IntN(span)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		return addr, ln.Close()
	}
	return "", errors.New("no free loopback port below the ephemeral range after 50 tries")
}

func writeFile(dir, name string, b []byte) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, b, 0o600)
}

func replicaName(i int) string { return "replica-" + strconv.Itoa(i) }
