// Command perf-table measures what the watchdog costs and writes
// docs/performance.md: one table of per-unit costs and ratios, from the Go
// benchmarks behind the performance claims and a short watchdog-bench fleet
// run beside Prometheus (when it is installed), stamped with the commit,
// date, Go version, machine and the command. Run it from the repository
// root:
//
//	go run ./scripts/perf-table
//
// It takes about 8 minutes on 2 cores with the defaults.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fleetbench"
)

const module = "github.com/sglang-watchdog/sglang-watchdog"

// options are the command line.
type options struct {
	out        string
	count      int
	fleet      bool
	prometheus string // a path, "auto" (on PATH) or "none"
	replicas   int
	warmup     time.Duration
	duration   time.Duration
}

func main() {
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "perf-table:", err)
		os.Exit(2)
	}
	if err := generate(o, "go run ./scripts/perf-table"+quoteArgs(os.Args[1:]), os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "perf-table:", err)
		os.Exit(1)
	}
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("perf-table", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "o", "docs/performance.md", "the file to write; - for stdout")
	fs.IntVar(&o.count, "count", 3, "repetitions of each benchmark; the table shows their median")
	fs.BoolVar(&o.fleet, "fleet", true, "run watchdog-bench fleet (false: its rows say not run)")
	fs.StringVar(&o.prometheus, "prometheus", "auto", "the Prometheus beside the fleet run: a path, auto (prometheus on PATH, if any) or none")
	fs.IntVar(&o.replicas, "replicas", 200, "replicas of the fleet run")
	fs.DurationVar(&o.warmup, "warmup", time.Minute, "warm-up of the fleet run")
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "measurement of the fleet run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.count < 1 {
		return o, fmt.Errorf("-count %d: want at least 1", o.count)
	}
	return o, nil
}

// generate measures and writes the document.
func generate(o options, command string, progress io.Writer) error {
	if b, err := os.ReadFile("go.mod"); err != nil || !bytes.Contains(b, []byte("module "+module+"\n")) {
		return errors.New("run it from the repository root (go run ./scripts/perf-table)")
	}
	s, err := machineStamp(command)
	if err != nil {
		return err
	}
	results := map[string]map[string]result{}
	for _, run := range benchRuns(benchRows) {
		args := run.args(o.count)
		fmt.Fprintf(progress, "go %s\n", strings.Join(args, " "))
		out, err := runGo(args...)
		if err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		parsed, err := parseBench(bytes.NewReader(out))
		if err != nil {
			return fmt.Errorf("%s: %w", run.pkg, err)
		}
		if m := cpuLine.FindSubmatch(out); m != nil {
			s.CPU = strings.Join(strings.Fields(string(m[1])), " ")
		}
		if results[run.pkg] == nil {
			results[run.pkg] = map[string]result{}
		}
		for name, res := range parsed {
			results[run.pkg][name] = res
		}
	}
	fleet, err := runFleet(o, &s, progress)
	if err != nil {
		return err
	}
	rows, err := tableRows(results, fleet)
	if err != nil {
		return err
	}
	var doc bytes.Buffer
	if err := render(&doc, s, rows); err != nil {
		return err
	}
	if o.out == "-" {
		_, err := os.Stdout.Write(doc.Bytes())
		return err
	}
	tmp := o.out + ".tmp"
	if err := os.WriteFile(tmp, doc.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, o.out)
}

// runFleet builds the watchdog and watchdog-bench from this checkout and
// runs a fleet measurement, beside Prometheus when one is found; it fills
// the stamp's fleet line.
func runFleet(o options, s *stamp, progress io.Writer) (fleetRun, error) {
	if !o.fleet {
		s.Fleet = "not run (-fleet=false)"
		return fleetRun{skipped: "not run"}, nil
	}
	prom := o.prometheus
	switch prom {
	case "none":
		prom = ""
	case "auto":
		prom, _ = exec.LookPath("prometheus")
	}
	dir, err := os.MkdirTemp("", "perf-table-")
	if err != nil {
		return fleetRun{}, err
	}
	defer os.RemoveAll(dir)
	watchdog, bench := filepath.Join(dir, "watchdog"), filepath.Join(dir, "watchdog-bench")
	for _, b := range [][2]string{{watchdog, "./cmd/watchdog"}, {bench, "./cmd/watchdog-bench"}} {
		if out, err := runGo("build", "-o", b[0], b[1]); err != nil {
			return fleetRun{}, fmt.Errorf("go build %s: %w\n%s", b[1], err, out)
		}
	}
	args := []string{"fleet", "--watchdog", watchdog, "--replicas", strconv.Itoa(o.replicas),
		"--warmup", o.warmup.String(), "--duration", o.duration.String(), "--output", "json"}
	beside := "without Prometheus (none found)"
	if prom != "" {
		args = append(args, "--prometheus", prom)
		beside = "beside " + prometheusVersion(prom)
	}
	fmt.Fprintf(progress, "watchdog-bench %s\n", strings.Join(args, " "))
	cmd := exec.Command(bench, args...)
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return fleetRun{}, fmt.Errorf("watchdog-bench fleet: %w", err)
	}
	var r fleetbench.Report
	if err := json.Unmarshal(out, &r); err != nil {
		return fleetRun{}, fmt.Errorf("watchdog-bench fleet: the report: %w", err)
	}
	s.Fleet = fmt.Sprintf("%d replicas at %s scrapes, evaluated every %s, %s warm-up, %s measured, %s; load average %.2f at its end",
		r.Replicas, secs(r.IntervalSeconds), secs(r.EvaluationIntervalSeconds), secs(r.WarmupSeconds), secs(r.WindowSeconds), beside, r.HostLoad1m)
	return fleetRun{report: &r}, nil
}

// secs renders seconds as a Go duration without zero units: 1m, 2m30s, 15s.
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second).String()
	if strings.HasSuffix(d, "m0s") {
		d = strings.TrimSuffix(d, "0s")
	}
	if strings.HasSuffix(d, "h0m") {
		d = strings.TrimSuffix(d, "0m")
	}
	return d
}

// prometheusVersion is the first line of `prometheus --version`, or the
// path when it says nothing usable.
func prometheusVersion(path string) string {
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return path
	}
	line, _, _ := strings.Cut(string(out), "\n")
	if f := strings.Fields(line); len(f) >= 3 && f[1] == "version" {
		return "Prometheus " + f[2]
	}
	return path
}

// machineStamp fills everything in the stamp but the fleet run.
func machineStamp(command string) (stamp, error) {
	s := stamp{Command: command, Cores: runtime.NumCPU(), Date: time.Now().UTC().Format(time.DateOnly), CPU: cpuModel()}
	commit, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return s, fmt.Errorf("git rev-parse --short HEAD: %w", err)
	}
	s.Commit = strings.TrimSpace(string(commit))
	if dirty, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(dirty)) > 0 {
		s.Commit += "+changes"
	}
	gover, err := runGo("env", "GOVERSION")
	if err != nil {
		return s, fmt.Errorf("go env GOVERSION: %w", err)
	}
	s.Go = strings.TrimSpace(string(gover))
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			s.Load, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return s, nil
}

// cpuLine is the processor `go test -bench` reports: the CPU's own brand
// string, which names the model more precisely than /proc/cpuinfo may.
var cpuLine = regexp.MustCompile(`(?m)^cpu: (.+)$`)

// cpuModel is the first "model name" of /proc/cpuinfo, else the
// architecture: the machine until a benchmark names its processor.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.Join(strings.Fields(v), " ")
			}
		}
	}
	return runtime.GOARCH
}

// runGo runs the go command and returns its combined output.
func runGo(args ...string) ([]byte, error) {
	return exec.Command("go", args...).CombinedOutput()
}

// quoteArgs renders args for a shell, each prefixed with a space.
func quoteArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteByte(' ')
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+", r))
		}) < 0 {
			b.WriteString(a)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}
