#!/usr/bin/env bash
# Benchmarks, fuzz targets and the fleet cost report, each run briefly so
# they cannot rot (called by .ci/run after the Go tests). No thresholds:
# numbers on a shared CI machine are noise; what must hold is that
# everything runs and the report is printed.
#   1. every Go benchmark once (-benchtime 1x, without -race);
#   2. every Fuzz function of every package for FUZZTIME executions
#      (default 10000x), found with `go test -list`, so new ones are picked
#      up unasked. A count, not a duration: Go 1.26's coordinator can report
#      its own -fuzztime deadline as a failure ("context deadline exceeded",
#      no failing input; golang/go#75804, fixed in Go 1.27), and a count sets
#      no deadline. Minimizing is capped at 100 executions for the same
#      reason and because, uncapped, minimizing new coverage spent most of a
#      short run;
# Only packages whose test files declare a Benchmark or Fuzz function are
# built: compiling every test binary again, without -race, would take
# minutes.
#   3. `watchdog-bench fleet` on 100 loopback replicas for 30 s beside
#      Debian's Prometheus (installed here when missing).
#
# usage: .ci/bench-smoke.sh WORKDIR
#   WORKDIR  scratch directory (the built binaries and the logs)
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/lib.sh

work=${1:?usage: $0 WORKDIR}
fuzztime=${FUZZTIME:-10000x}
mkdir -p "$work"
work=$(cd "$work" && pwd)
logs=("$work/bench.log" "$work/fuzz.log" "$work/fleet.err")

# packages_declaring KIND: the packages (./dir) with a test file declaring
# a function named KIND...
packages_declaring() {
	git ls-files '*_test.go' | xargs grep -lE "^func $1[A-Z_a-z0-9]*\(" | xargs -r -n1 dirname | sort -u | sed 's|^|./|'
}

started=$SECONDS
echo "--- benchmarks, once each"
mapfile -t packages < <(packages_declaring Benchmark)
go test -run '^$' -bench . -benchtime 1x "${packages[@]}" >"$work/bench.log" 2>&1 || fail "a benchmark failed"
grep -E '^(Benchmark|ok|FAIL)' "$work/bench.log" | grep -v 'no test files' || true
echo "$(grep -c '^Benchmark' "$work/bench.log") benchmarks ran ($((SECONDS - started))s)"

started=$SECONDS
echo "--- fuzz targets, -fuzztime $fuzztime each"
# `go test -list` prints each package's matching names, then its "ok" line.
mapfile -t packages < <(packages_declaring Fuzz)
: >"$work/fuzz-list.txt"
if ((${#packages[@]} > 0)); then
	go test -list '^Fuzz' "${packages[@]}" >"$work/fuzz-list.txt" 2>"$work/fuzz.log" || fail "listing the fuzz targets failed"
fi
targets=0
names=()
while read -r first pkg _; do
	case $first in
	Fuzz*) names+=("$first") ;;
	ok)
		for name in "${names[@]}"; do
			echo "$pkg $name"
			go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 100x "$pkg" >>"$work/fuzz.log" 2>&1 ||
				fail "fuzzing $pkg $name failed (a failing input is saved under its testdata/fuzz/$name)"
			targets=$((targets + 1))
		done
		names=()
		;;
	esac
done <"$work/fuzz-list.txt"
echo "$targets fuzz targets ran ($((SECONDS - started))s)"

started=$SECONDS
echo "--- watchdog-bench fleet: 100 replicas beside Prometheus"
if ! command -v prometheus >/dev/null; then
	# Without starting a system Prometheus on :9090.
	apt_install_service prometheus
fi
go build -o "$work/watchdog" ./cmd/watchdog
go build -o "$work/watchdog-bench" ./cmd/watchdog-bench
"$work/watchdog-bench" fleet --watchdog "$work/watchdog" --replicas 100 --duration 30s --warmup 15s \
	--prometheus "$(command -v prometheus)" >"$work/fleet.txt" 2>"$work/fleet.err" ||
	fail "watchdog-bench fleet failed"
cat "$work/fleet.txt"
grep -q 'replicas scraped in the window' "$work/fleet.txt" || fail "the fleet report has no scrape coverage row"
echo "($((SECONDS - started))s)"
