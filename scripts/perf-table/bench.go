package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// benchRow is one row of the table backed by a Go benchmark.
type benchRow struct {
	pkg  string // ./internal/eval
	name string // BenchmarkStageParse, or BenchmarkScrapeOverHTTP/identity
	// metric is the unit of the number the row shows: ns/op, or a unit the
	// benchmark reports itself (ns/replica, window-B/replica).
	metric string
	what   string
	// ratioTo names the row of the same `go test` run this row is divided
	// by, and label says what that is ("textparse"); "" for no ratio.
	// ratioMetric is the unit of that row's number divided by ("" is
	// ns/op).
	ratioTo, ratioMetric, label string
	// per divides the number before it is shown (a replay of 721 rounds
	// shown per round); 0 or 1: as measured.
	per  float64
	unit string // what the shown number is per: "scrape", "round, per replica"
}

// benchRun is one `go test -bench` invocation: a package, the benchmarks
// it runs and its -benchtime ("" for the default).
type benchRun struct {
	pkg, benchtime string
	names          []string // top-level benchmark names
}

const textparse = "BenchmarkStageBareTextparse"

// benchRows are the benchmarks behind the performance claims, in the
// table's order.
var benchRows = []benchRow{
	{pkg: "./internal/eval", name: textparse, metric: "ns/op", unit: "scrape", ratioTo: textparse, label: "textparse",
		what: "Prometheus' textparse reading every sample with its labels: the reference the ratios divide by"},
	{pkg: "./internal/eval", name: "BenchmarkBareExpfmtParse", metric: "ns/op", unit: "scrape", ratioTo: textparse, label: "textparse",
		what: "Prometheus' expfmt text parser on the same body"},
	{pkg: "./internal/eval", name: "BenchmarkStageParse", metric: "ns/op", unit: "scrape", ratioTo: textparse, label: "textparse",
		what: "the watchdog's parser keeping every family (scrape.keep_all_families: true)"},
	{pkg: "./internal/eval", name: "BenchmarkStageParseFilter", metric: "ns/op", unit: "scrape", ratioTo: textparse, label: "textparse",
		what: "parse, keep only the families read, normalize: the default"},
	{pkg: "./internal/eval", name: "BenchmarkStageParseFilterFleet", metric: "ns/op", unit: "scrape", ratioTo: textparse, label: "textparse",
		what: "the same over eight simulated replicas whose values move, in turn"},
	{pkg: "./internal/eval", name: "BenchmarkStageIngest", metric: "ns/op", unit: "scrape", ratioTo: textparse, label: "textparse",
		what: "appending one scrape to the replica's full window"},
	{pkg: "./internal/eval", name: "BenchmarkReplicaScrapeParseIngestEvaluate", metric: "ns/op", unit: "scrape", ratioTo: textparse, label: "textparse",
		what: "the whole path for one replica: decode, ingest and an evaluation round"},
	{pkg: "./internal/eval", name: "BenchmarkSimReplicaScrapeParseIngestEvaluate", metric: "ns/op", unit: "scrape", ratioTo: textparse, label: "textparse",
		what: "the same on a simulated replica whose values move"},
	{pkg: "./internal/eval", name: "BenchmarkStageView", metric: "ns/op", unit: "round, per replica", ratioTo: textparse, label: "textparse",
		what: "the replica snapshot's queries over a full window"},
	{pkg: "./internal/eval", name: "BenchmarkStageDetectors", metric: "ns/op", unit: "round, per replica", ratioTo: textparse, label: "textparse",
		what: "every detector over a full window"},
	{pkg: "./internal/eval", name: "BenchmarkStageRound", metric: "ns/op", unit: "round, per replica", ratioTo: textparse, label: "textparse",
		what: "an evaluation round: detectors, triage, snapshot, correlation, alert state"},
	{pkg: "./internal/eval", name: "BenchmarkStageRoundFleet", metric: "ns/replica", unit: "round, per replica", ratioTo: textparse, label: "textparse",
		what: "a round over 100 full windows on every core"},
	{pkg: "./internal/eval", name: "BenchmarkStageRoundFleetMoving", metric: "ns/replica", unit: "round, per replica", ratioTo: textparse, label: "textparse",
		what: "a round over 96 windows whose values move, averaged over one cycle of 120 scrapes"},
	{pkg: "./internal/eval", name: "BenchmarkStageRoundFleetMoving", metric: "window-B/replica", unit: "replica",
		what: "one replica's window at full retention (65 min at 5 s), by the store's accounting, averaged over the same cycle"},
	{pkg: "./pkg/detect", name: "BenchmarkDetectAll", metric: "ns/op", unit: "round, per replica",
		what: "every default detector on a busy replica's 65-minute window"},
	{pkg: "./internal/scrape", name: "BenchmarkScrapeOverHTTP/identity", metric: "ns/op", unit: "scrape",
		what: "one scrape over loopback HTTP: request, body, parse, filter, normalize (default: uncompressed)"},
	{pkg: "./internal/scrape", name: "BenchmarkScrapeOverHTTP/gzip", metric: "ns/op", unit: "scrape", ratioTo: "BenchmarkScrapeOverHTTP/identity", label: "uncompressed",
		what: "the same with scrape.accept_gzip: true, the body inflated"},
	{pkg: "./internal/scrape", name: "BenchmarkFamilyFilter", metric: "full-ns/scrape", unit: "scrape",
		what: "one scrape over loopback HTTP of the full exposition, the families read kept (scrape.filter_families: false)"},
	{pkg: "./internal/scrape", name: "BenchmarkFamilyFilter", metric: "filtered-ns/scrape", unit: "scrape",
		ratioTo: "BenchmarkFamilyFilter", ratioMetric: "full-ns/scrape", label: "full exposition",
		what: "the same asked with name[] for the families read, the default (alternating with the full scrape)"},
	{pkg: "./internal/scrape", name: "BenchmarkFamilyFilter", metric: "full-body-B/scrape", unit: "scrape",
		what: "the body of a full scrape of the current release's capture"},
	{pkg: "./internal/scrape", name: "BenchmarkFamilyFilter", metric: "filtered-body-B/scrape", unit: "scrape",
		ratioTo: "BenchmarkFamilyFilter", ratioMetric: "full-body-B/scrape", label: "full exposition",
		what: "the body of a scrape asked with name[], as prometheus_client renders it"},
	{pkg: "./internal/sim", name: "BenchmarkCompressExposition/level9", metric: "ns/op", unit: "scrape",
		what: "what gzip at level 9 costs the replica's server, as SGLang answers a client that accepts gzip"},
	{pkg: "./internal/backtest", name: "BenchmarkBacktestHour", metric: "ns/op", unit: "round replayed", per: 721,
		what: "a backtest replaying one replica's hour (721 rounds at 5 s)"},
	{pkg: "./internal/ui", name: "BenchmarkReplicaHistory", metric: "ns/op", unit: "replica, per round",
		what: "one replica's 60-step plot history for the fleet page"},
}

// movingBenchtime times BenchmarkStageRoundFleetMoving over one whole
// cycle of the windows' chunks (120 scrapes), which it needs for an
// average rather than one moment of the cycle.
const movingBenchtime = "120x"

// benchRuns groups benchRows into `go test` invocations, in order of first
// appearance: one per package, and BenchmarkStageRoundFleetMoving apart
// for its -benchtime.
func benchRuns(rows []benchRow) []benchRun {
	var runs []benchRun
	find := func(pkg, benchtime string) *benchRun {
		for i := range runs {
			if runs[i].pkg == pkg && runs[i].benchtime == benchtime {
				return &runs[i]
			}
		}
		runs = append(runs, benchRun{pkg: pkg, benchtime: benchtime})
		return &runs[len(runs)-1]
	}
	for _, r := range rows {
		benchtime := ""
		if r.name == "BenchmarkStageRoundFleetMoving" {
			benchtime = movingBenchtime
		}
		top, _, _ := strings.Cut(r.name, "/")
		run := find(r.pkg, benchtime)
		if !slices.Contains(run.names, top) {
			run.names = append(run.names, top)
		}
	}
	return runs
}

// args is the `go test` command line of a run.
func (r benchRun) args(count int) []string {
	a := []string{"test", "-run", "^$", "-bench", "^(" + strings.Join(r.names, "|") + ")$", "-benchmem", "-count", strconv.Itoa(count)}
	if r.benchtime != "" {
		a = append(a, "-benchtime", r.benchtime)
	}
	return append(a, r.pkg)
}

// result is every measurement of one benchmark: unit -> one value per
// -count repetition.
type result map[string][]float64

// benchLine is a result line: the name (GOMAXPROCS suffix and all), the
// iterations, then value-unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parseBench reads `go test -bench` output: benchmark name -> result.
func parseBench(r io.Reader) (map[string]result, error) {
	out := map[string]result{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		fields := strings.Fields(m[2])
		if len(fields)%2 != 0 {
			return nil, fmt.Errorf("%s: odd value-unit pairs in %q", m[1], m[2])
		}
		res := out[m[1]]
		if res == nil {
			res = result{}
			out[m[1]] = res
		}
		for i := 0; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %v", m[1], fields[i], err)
			}
			res[fields[i+1]] = append(res[fields[i+1]], v)
		}
	}
	return out, sc.Err()
}

// median of the repetitions; ok false when there are none.
func (r result) median(unit string) (float64, bool) {
	vs := slices.Clone(r[unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2, true
	}
	return vs[len(vs)/2], true
}
