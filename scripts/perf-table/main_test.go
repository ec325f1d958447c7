package main

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fleetbench"
)

// stampPattern turns one of the stamp's format lines into a regexp that
// captures its values.
func stampPattern(format string) *regexp.Regexp {
	q := regexp.QuoteMeta(format)
	q = strings.NewReplacer("%s", "(.+)", "%d", `(\d+)`, "%\\.2f", `([0-9.]+)`).Replace(q)
	return regexp.MustCompile("(?m)^" + q + "$")
}

// readStamp finds every stamp line in doc.
func readStamp(t *testing.T, doc string) stamp {
	t.Helper()
	get := func(format string) []string {
		ms := stampPattern(format).FindAllStringSubmatch(doc, -1)
		if len(ms) != 1 {
			t.Fatalf("docs/performance.md has %d lines of the form %q, want 1", len(ms), format)
		}
		return ms[0][1:]
	}
	var s stamp
	s.Commit = get(stampCommit)[0]
	s.Date = get(stampDate)[0]
	s.Go = get(stampGo)[0]
	m := get(stampMachine)
	s.CPU = m[0]
	s.Cores, _ = strconv.Atoi(m[1])
	s.Load, _ = strconv.ParseFloat(m[2], 64)
	s.Command = get(stampCommand)[0]
	s.Fleet = get(stampFleet)[0]
	return s
}

// skeleton keeps what the generator decides in the document and drops the
// numbers it measured: the cost, allocs and ratio cells of the table.
func skeleton(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		cells := strings.Split(strings.TrimSuffix(line, "\n"), " | ")
		if strings.HasPrefix(line, "| ") && len(cells) == 6 && line != header+"\n" {
			line = strings.Join([]string{cells[0], cells[1], "…", cells[3], "…", "… |"}, " | ") + "\n"
		}
		b.WriteString(line)
	}
	return b.String()
}

// syntheticResults has every benchmark the table reads, each value the
// given number, and the fleet run a report beside Prometheus.
func syntheticResults(v float64) (map[string]map[string]result, fleetRun) {
	results := map[string]map[string]result{}
	for _, br := range benchRows {
		if results[br.pkg] == nil {
			results[br.pkg] = map[string]result{}
		}
		res := results[br.pkg][br.name]
		if res == nil {
			res = result{"ns/op": {v * 100}, "allocs/op": {v}}
			results[br.pkg][br.name] = res
		}
		if br.metric != "ns/op" {
			res[br.metric] = []float64{v}
		}
	}
	wd := fleetbench.Measurement{CPUCores: 0.1, RSSBytes: 100 << 20, MillicoresPerReplica: 0.5, RSSBytesPerReplica: 400 << 10,
		Daemon: &fleetbench.DaemonTimings{ScrapeP50: fleetbench.Quantile{Seconds: 0.002}, ScrapeP99: fleetbench.Quantile{Seconds: 0.01}, RoundMeanSeconds: 0.02, WindowBytes: 200 * 50 << 10}}
	prom := fleetbench.Measurement{CPUCores: 0.2, RSSBytes: 300 << 20}
	return results, fleetRun{report: &fleetbench.Report{Replicas: 200, Watchdog: wd, Prometheus: &prom, Ratios: &fleetbench.Ratios{CPU: 0.5, RSS: 1.0 / 3}}}
}

// The checked-in docs/performance.md is this program's output: its stamp
// (commit, date, Go, machine, command, fleet run), the header, every row's
// description and unit, and the text around the table are what render
// writes today. Only the measured numbers are left out of the comparison.
func TestDocIsTheGeneratorsOutput(t *testing.T) {
	b, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	s := readStamp(t, doc)
	if !regexp.MustCompile(`^[0-9a-f]{7,40}$`).MatchString(s.Commit) {
		t.Errorf("commit %q: want the short hash of a clean checkout", s.Commit)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\d$`).MatchString(s.Date) || !strings.HasPrefix(s.Go, "go1.") || s.Cores < 1 || s.CPU == "" {
		t.Errorf("stamp %+v: want a date, a Go version, a CPU model and its cores", s)
	}
	if !strings.HasPrefix(s.Command, "go run ./scripts/perf-table") {
		t.Errorf("command %q: want the command that writes the file", s.Command)
	}
	results, fleet := syntheticResults(1000)
	rows, err := tableRows(results, fleet)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := render(&want, s, rows); err != nil {
		t.Fatal(err)
	}
	if got, w := skeleton(doc), skeleton(want.String()); got != w {
		gl, wl := strings.Split(got, "\n"), strings.Split(w, "\n")
		for i := range max(len(gl), len(wl)) {
			g, x := "", ""
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				x = wl[i]
			}
			if g != x {
				t.Fatalf("docs/performance.md is not what scripts/perf-table writes (run go run ./scripts/perf-table); line %d:\n have %q\n want %q", i+1, g, x)
			}
		}
	}
	for _, r := range rows {
		if !strings.Contains(doc, "| "+r.what+" | ") {
			t.Errorf("docs/performance.md lacks the row %q", r.what)
		}
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/sglang-watchdog/sglang-watchdog/internal/eval
cpu: Oxide Virtual Turin-like Processor
BenchmarkStageParse-2                            	    1840	    849386 ns/op	       477.0 samples	    1494 B/op	       8 allocs/op
BenchmarkStageParse-2                            	    1900	    800000 ns/op	       477.0 samples	    1494 B/op	       9 allocs/op
BenchmarkStageParse-2                            	    1700	    900000 ns/op	       477.0 samples	    1494 B/op	      10 allocs/op
BenchmarkStageRoundFleetMoving-2   	     120	  38904449 ns/op	    405255 ns/replica	    198570 window-B/replica	  456122 B/op	    9638 allocs/op
BenchmarkScrapeOverHTTP/identity-2         	    9072	    146862 ns/op	 479.04 MB/s	    7481 B/op	      85 allocs/op
BenchmarkLoneCPU 	    10	    100 ns/op
PASS
ok  	github.com/sglang-watchdog/sglang-watchdog/internal/eval	35.902s
`
	got, err := parseBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, unit string
		want       float64
	}{
		{"BenchmarkStageParse", "ns/op", 849386},
		{"BenchmarkStageParse", "allocs/op", 9},
		{"BenchmarkStageParse", "samples", 477},
		{"BenchmarkStageRoundFleetMoving", "ns/replica", 405255},
		{"BenchmarkStageRoundFleetMoving", "window-B/replica", 198570},
		{"BenchmarkScrapeOverHTTP/identity", "MB/s", 479.04},
		{"BenchmarkLoneCPU", "ns/op", 100},
	} {
		if v, ok := got[c.name].median(c.unit); !ok || v != c.want {
			t.Errorf("%s %s: %v (%v), want %v", c.name, c.unit, v, ok, c.want)
		}
	}
	if m := cpuLine.FindStringSubmatch(out); m == nil || m[1] != "Oxide Virtual Turin-like Processor" {
		t.Errorf("the cpu line: %q", m)
	}
	if n := len(got["BenchmarkStageParse"]["ns/op"]); n != 3 {
		t.Errorf("BenchmarkStageParse: %d repetitions, want 3", n)
	}
	if _, err := parseBench(strings.NewReader("BenchmarkOdd-2 	 10 	 100 ns/op 	 7\n")); err == nil {
		t.Error("a line with a value but no unit was accepted")
	}
}

// One go test per package, the benchmark that needs a whole cycle apart.
func TestBenchRuns(t *testing.T) {
	runs := benchRuns(benchRows)
	seen := map[string]bool{}
	for _, r := range runs {
		key := r.pkg + " " + r.benchtime
		if seen[key] {
			t.Errorf("two runs of %s", key)
		}
		seen[key] = true
		args := strings.Join(r.args(3), " ")
		if !strings.Contains(args, "-run ^$ -bench ^(") || !strings.Contains(args, "-benchmem -count 3") || !strings.HasSuffix(args, r.pkg) {
			t.Errorf("go %s", args)
		}
		moving := slices.Contains(r.names, "BenchmarkStageRoundFleetMoving")
		if moving != (r.benchtime == movingBenchtime) || (moving && len(r.names) != 1) {
			t.Errorf("run %+v: BenchmarkStageRoundFleetMoving runs alone with -benchtime %s", r, movingBenchtime)
		}
	}
	for _, br := range benchRows {
		top, _, _ := strings.Cut(br.name, "/")
		found := false
		for _, r := range runs {
			found = found || (r.pkg == br.pkg && slices.Contains(r.names, top))
		}
		if !found {
			t.Errorf("no run has %s %s", br.pkg, top)
		}
	}
}

// Ratios divide by the named row of the same run; a round over a fleet
// reports its allocations per replica; a replay per round.
func TestTableRows(t *testing.T) {
	results, fleet := syntheticResults(1)
	eval := results["./internal/eval"]
	eval[textparse] = result{"ns/op": {1000, 1100, 900}, "allocs/op": {1281}}
	eval["BenchmarkStageParseFilter"] = result{"ns/op": {130, 120, 140}, "allocs/op": {3}}
	eval["BenchmarkStageRoundFleet"] = result{"ns/op": {5_000_000}, "ns/replica": {50_000}, "allocs/op": {14_400}}
	results["./internal/backtest"]["BenchmarkBacktestHour"] = result{"ns/op": {721 * 2e6}, "allocs/op": {721 * 150}}
	rows, err := tableRows(results, fleet)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]row{}
	for _, r := range rows {
		byName[r.by] = r
	}
	for _, c := range []struct {
		by                  string
		cost, allocs, ratio string
	}{
		{"`BenchmarkStageBareTextparse` (`./internal/eval`)", "1.00 µs", "1,281", "1.00× textparse"},
		{"`BenchmarkStageParseFilter` (`./internal/eval`)", "130 ns", "3", "0.13× textparse"},
		{"`BenchmarkStageRoundFleet` (`./internal/eval`)", "50.0 µs", "144", "50.00× textparse"},
		{"`BenchmarkBacktestHour` (`./internal/backtest`)", "2.00 ms", "150", "—"},
	} {
		r := byName[c.by]
		if r.cost != c.cost || r.allocs != c.allocs || r.ratio != c.ratio {
			t.Errorf("%s: cost %q, allocs %q, ratio %q; want %q, %q, %q", c.by, r.cost, r.allocs, r.ratio, c.cost, c.allocs, c.ratio)
		}
	}
	delete(eval, "BenchmarkStageView")
	if _, err := tableRows(results, fleet); err == nil || !strings.Contains(err.Error(), "BenchmarkStageView: no result") {
		t.Errorf("a missing benchmark: %v", err)
	}
}

func TestFleetRows(t *testing.T) {
	_, fleet := syntheticResults(1)
	rows := fleetRows(fleet)
	if rows[0].cost != "0.500 millicores" || rows[0].ratio != "0.50× Prometheus" || rows[1].cost != "400.0 KiB" || rows[1].ratio != "0.33× Prometheus" ||
		rows[2].cost != "50.0 KiB" || rows[3].cost != "2.00 ms / 10.0 ms" || rows[4].cost != "100 µs" {
		t.Errorf("fleet rows %+v", rows)
	}
	alone := *fleet.report
	alone.Prometheus, alone.Ratios = nil, nil
	if rows := fleetRows(fleetRun{report: &alone}); rows[0].ratio != "no Prometheus" {
		t.Errorf("without Prometheus: %+v", rows[0])
	}
	for _, r := range fleetRows(fleetRun{skipped: "not run"}) {
		if r.cost != "not run" {
			t.Errorf("skipped fleet run: %+v", r)
		}
	}
}

func TestFormatting(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{duration(359_000), "359 µs"}, {duration(46_400), "46.4 µs"}, {duration(1_307_000), "1.31 ms"},
		{duration(1.5e9), "1.50 s"}, {duration(85), "85.0 ns"}, {decimal(1281, 0), "1,281"},
		{decimal(1234567.891, 1), "1,234,567.9"}, {decimal(-1234, 0), "-1,234"},
		{secs(60), "1m"}, {secs(150), "2m30s"}, {secs(15), "15s"}, {secs(3600), "1h"}, {secs(3630), "1h0m30s"},
		{quoteArgs([]string{"-o", "docs/performance.md", "-prometheus", "/usr/bin/prom etheus"}), " -o docs/performance.md -prometheus '/usr/bin/prom etheus'"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

func TestOptions(t *testing.T) {
	o, err := parseOptions(nil, &bytes.Buffer{})
	if err != nil || o.out != "docs/performance.md" || o.count != 3 || !o.fleet || o.prometheus != "auto" {
		t.Errorf("defaults %+v, %v", o, err)
	}
	for _, args := range [][]string{{"-count", "0"}, {"extra"}, {"-replicas", "x"}} {
		if _, err := parseOptions(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
