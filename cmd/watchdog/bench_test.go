package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fleetbench"
)

// benchChildEnv makes the test binary a child of `watchdog bench fleet`:
// given `run ...` it is the real daemon, given Prometheus' flags a small
// stand-in for Prometheus.
const benchChildEnv = "WATCHDOG_TEST_BENCH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(benchChildEnv) != "" {
		os.Exit(benchChild(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func benchChild(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(args) > 0 && args[0] == "run" {
		err = run(ctx, args, environ(), os.Stdout, os.Stderr)
	} else {
		err = prometheusStandIn(ctx, args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return exitCode(err)
	}
	return 0
}

// prometheusStandIn reads the scrape configuration `bench fleet` writes for
// Prometheus and scrapes every target at the interval, as Prometheus does,
// counting the samples in prometheus_tsdb_head_samples_appended_total.
func prometheusStandIn(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("prometheus", flag.ContinueOnError)
	configFile := fs.String("config.file", "", "")
	fs.String("storage.tsdb.path", "", "")
	listen := fs.String("web.listen-address", "", "")
	fs.String("log.level", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*configFile)
	if err != nil {
		return err
	}
	var cfg struct {
		Global struct {
			ScrapeInterval string `yaml:"scrape_interval"`
		} `yaml:"global"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return err
	}
	interval, err := time.ParseDuration(cfg.Global.ScrapeInterval)
	if err != nil {
		return err
	}
	var urls []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, g := range sc.StaticConfigs {
			for _, t := range g.Targets {
				urls = append(urls, "http://"+t+g.Labels["__metrics_path__"])
			}
		}
	}
	reg := prometheus.NewRegistry()
	appended := prometheus.NewCounter(prometheus.CounterOpts{Name: "prometheus_tsdb_head_samples_appended_total"})
	reg.MustRegister(appended, collectors.NewGoCollector()) // Prometheus is a Go program too
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /-/ready", func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for _, u := range urls {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			req.Header.Set("User-Agent", "Prometheus/fake")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue // as Prometheus: the target is down this time
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
					appended.Inc()
				}
			}
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// The whole path: a loopback fleet, this daemon as a child process and a
// stand-in Prometheus beside it; the report has the costs of both, and
// every replica was scraped by both in the measured window.
func TestBenchFleetMeasuresTheDaemonBesidePrometheus(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(benchChildEnv, "1")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	// Enough replicas that the stand-in's CPU over the window is several
	// of /proc's 10 ms ticks, not a coin toss between none and one.
	const replicas = 160
	profiles := filepath.Join(t.TempDir(), "profiles") // made by the run
	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"bench", "fleet", "--replicas", strconv.Itoa(replicas), "--interval", "1s", "--evaluation-interval", "1s",
		"--warmup", "1s", "--duration", "2s", "--prometheus", exe, "--output", "json", "--profile-dir", profiles}, map[string]string{}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench fleet: %v\nstderr:\n%s", err, stderr.String())
	}
	var r fleetbench.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}

	if r.Replicas != replicas || r.IntervalSeconds != 1 || r.EvaluationIntervalSeconds != 1 || r.WindowSeconds < 2 || r.HostCPUs < 1 {
		t.Errorf("replicas %d, interval %vs, evaluation %vs, window %vs; want %d, 1s, 1s, at least 2s", r.Replicas, r.IntervalSeconds, r.EvaluationIntervalSeconds, r.WindowSeconds, replicas)
	}
	w := r.Watchdog
	if w.CPUCores <= 0 || w.CPUCores > 2 || w.RSSBytes < 1<<20 || w.SamplesPerSecond <= 0 {
		t.Errorf("watchdog: %.3f cores, %d B RSS, %.0f samples/s: want sane, non-zero numbers", w.CPUCores, w.RSSBytes, w.SamplesPerSecond)
	}
	if w.HeapInuseBytes == 0 || w.HeapInuseBytes > w.RSSBytes {
		t.Errorf("watchdog Go heap in use %d B of %d B RSS", w.HeapInuseBytes, w.RSSBytes)
	}
	// A scrape loop per replica: at least 2 KiB of stack each.
	if w.StackInuseBytes < replicas*2<<10 || w.StackInuseBytes > w.RSSBytes {
		t.Errorf("watchdog goroutine stacks %d B of %d B RSS, want at least 2 KiB for each of %d replicas", w.StackInuseBytes, w.RSSBytes, replicas)
	}
	if w.RSSFileBytes == 0 || w.RSSFileBytes >= w.RSSBytes {
		t.Errorf("watchdog mapped files %d B of %d B RSS: its executable is mapped, and is not all of it", w.RSSFileBytes, w.RSSBytes)
	}
	if w.ReplicasScraped != replicas {
		t.Errorf("watchdog scraped %d of %d replicas in the window", w.ReplicasScraped, replicas)
	}
	if d := w.Daemon; d == nil || d.Scrapes < replicas || d.ScrapeP50.Seconds <= 0 || d.ScrapeP99.Seconds < d.ScrapeP50.Seconds ||
		d.Rounds < 1 || d.RoundMeanSeconds <= 0 || d.WindowBytes <= 0 {
		t.Errorf("daemon timings %+v: want at least %d scrapes and a round, with non-zero times", d, replicas)
	}
	p := r.Prometheus
	if p == nil {
		t.Fatal("no Prometheus measurement")
	}
	if p.CPUCores <= 0 || p.RSSBytes < 1<<20 || p.HeapInuseBytes == 0 || p.StackInuseBytes == 0 || p.RSSFileBytes == 0 ||
		p.SamplesPerSecond <= 0 || p.ReplicasScraped != replicas {
		t.Errorf("prometheus: %.3f cores, %d B RSS, %d B heap, %.0f samples/s, %d of %d replicas scraped", p.CPUCores, p.RSSBytes, p.HeapInuseBytes, p.SamplesPerSecond, p.ReplicasScraped, replicas)
	}
	t.Logf("over %.1f s: watchdog %.3f cores, stand-in %.3f cores", r.WindowSeconds, w.CPUCores, p.CPUCores)
	if r.Ratios == nil || r.Ratios.CPU != w.CPUCores/p.CPUCores || r.Ratios.RSS != float64(w.RSSBytes)/float64(p.RSSBytes) {
		t.Errorf("ratios %+v do not compare %v/%v cores, %v/%v bytes", r.Ratios, w.CPUCores, p.CPUCores, w.RSSBytes, p.RSSBytes)
	}
	// The daemon's profiles: its CPU over the 2 s measured, its heap at
	// the end. runtime/pprof dates a CPU profile from when its writer
	// goroutine first runs, which on a loaded machine is tens of
	// milliseconds after the profile started (1.965 s was seen in CI), so
	// 1.5 s tells the 2 s asked for from a second less.
	cpuFile, heapFile := filepath.Join(profiles, fleetbench.CPUProfileFile), filepath.Join(profiles, fleetbench.HeapProfileFile)
	if !slices.Equal(r.Profiles, []string{cpuFile, heapFile}) {
		t.Errorf("profiles %q, want %q and %q", r.Profiles, cpuFile, heapFile)
	}
	if cpu := readProfile(t, cpuFile); cpu != nil && (cpu.DurationNanos < 1.5e9 || !hasSampleType(cpu, "cpu")) {
		t.Errorf("CPU profile of %v over %s, want cpu samples over about 2 s, at least 1.5 s", sampleTypes(cpu), time.Duration(cpu.DurationNanos))
	}
	if heap := readProfile(t, heapFile); heap != nil && (!hasSampleType(heap, "inuse_space") || len(heap.Sample) == 0) {
		t.Errorf("heap profile of %v with %d samples, want inuse_space samples", sampleTypes(heap), len(heap.Sample))
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the run left %v in its temporary directory", left)
	}

	var md bytes.Buffer
	if err := r.Write(&md, fleetbench.FormatMarkdown); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| what | watchdog | prometheus | watchdog ÷ prometheus |", "| CPU, cores (average) |",
		"| RSS per replica, KiB |", fmt.Sprintf("| replicas scraped in the window | %d/%d | %d/%d |", replicas, replicas, replicas, replicas), "| scrape latency p50 / p99, ms |",
		"| Go heap in use, MiB (end) |", "| goroutine stacks, MiB (end) |", "| of RSS, mapped files, MiB (end) |",
		"| windows per replica, KiB (accounted, end) |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown report lacks %q:\n%s", want, md.String())
		}
	}
}

// readProfile parses a pprof profile file; nil after reporting why not.
func readProfile(t *testing.T, file string) *profile.Profile {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Errorf("%s: %v", file, err)
		return nil
	}
	return p
}

func hasSampleType(p *profile.Profile, typ string) bool {
	return slices.Contains(sampleTypes(p), typ)
}

func sampleTypes(p *profile.Profile) []string {
	types := make([]string, len(p.SampleType))
	for i, st := range p.SampleType {
		types[i] = st.Type
	}
	return types
}

func TestBenchFleetRefusesBadArguments(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "want `bench fleet`"},
		{[]string{"bench", "fleet", "--replicas", "0"}, "--replicas 0: want 1 to 20000"},
		{[]string{"bench", "fleet", "--replicas", "20001"}, "--replicas 20001: want 1 to 20000"},
		{[]string{"bench", "fleet", "--interval", "10ms"}, "--interval 10ms: must be at least 1s"},
		{[]string{"bench", "fleet", "--output", "yaml"}, `unknown output format "yaml"`},
		{[]string{"bench", "fleet", "--prometheus", "/nonexistent/prometheus"}, "--prometheus"},
		{[]string{"bench", "fleet", "--replicas", "2", "--incident", "meltdown"}, `unknown incident class "meltdown"`},
		{[]string{"bench", "fleet", "--replicas", "2", "--profile-dir", notADir}, "--profile-dir: mkdir " + notADir + ": not a directory"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), tc.args, map[string]string{}, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}
