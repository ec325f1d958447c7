#!/usr/bin/env bash
# End-to-end check with real Prometheus tooling (called by .ci/run):
#   1. start the watchdog demo (a simulated SGLang fleet and the real daemon),
#   2. `promtool check metrics` on its /metrics,
#   3. start a real Prometheus scraping it every second, with the watchdog's
#      own alert rules loaded, and wait until the samples arrive, every rule
#      evaluates without error, and none of them fires on a healthy watchdog.
# Both processes are always stopped (trap). Bounded waits only: no sleeps
# for synchronisation beyond a short poll interval.
#
# usage: .ci/prometheus-e2e.sh WORKDIR RULES_FILE
#   WORKDIR    scratch directory (binary, logs, TSDB)
#   RULES_FILE plain Prometheus rule file (extracted from the PrometheusRule)
set -euo pipefail
cd "$(dirname "$0")/.."

work=${1:?usage: $0 WORKDIR RULES_FILE}
rules=${2:?usage: $0 WORKDIR RULES_FILE}
deadline_seconds=${E2E_DEADLINE_SECONDS:-60}
mkdir -p "$work"

. .ci/lib.sh
trap stop_started EXIT
logs=("$work/demo.log" "$work/prometheus.log")

echo "--- build the watchdog"
go build -o "$work/watchdog" ./cmd/watchdog

wport=$(free_port) || fail "no free port"
echo "--- start: watchdog demo on 127.0.0.1:$wport"
WATCHDOG_LISTEN_ADDRESS="127.0.0.1:$wport" "$work/watchdog" demo >"$work/demo.log" 2>&1 &
pids+=($!)
wait_until "watchdog /readyz" curl -fs -o /dev/null "http://127.0.0.1:$wport/readyz"

echo "--- promtool check metrics"
curl -fsS "http://127.0.0.1:$wport/metrics" >"$work/metrics.txt"
echo "$(grep -c '^watchdog_' "$work/metrics.txt") watchdog_* samples in $(wc -c <"$work/metrics.txt") bytes"
if ! promtool check metrics <"$work/metrics.txt" >"$work/check-metrics.txt" 2>&1; then
	cat "$work/check-metrics.txt"
	fail "promtool check metrics found problems in the watchdog's /metrics"
fi
cat "$work/check-metrics.txt"

pport=$(free_port) || fail "no free port"
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - $rules
scrape_configs:
  - job_name: sglang-watchdog
    static_configs:
      - targets: ["127.0.0.1:$wport"]
EOF
promtool check config "$work/prometheus.yml"

echo "--- start: prometheus on 127.0.0.1:$pport"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
	--web.listen-address="127.0.0.1:$pport" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
api="http://127.0.0.1:$pport/api/v1"

# has_sample QUERY: the instant query returns at least one sample.
has_sample() {
	curl -fsS -G "$api/query" --data-urlencode "query=$1" 2>/dev/null | grep -q '"result":\[{'
}
wait_until "Prometheus ready" curl -fs -o /dev/null "http://127.0.0.1:$pport/-/ready"
wait_until 'up{job="sglang-watchdog"} == 1' has_sample 'up{job="sglang-watchdog"} == 1'
wait_until "watchdog_build_info samples" has_sample 'watchdog_build_info{job="sglang-watchdog"}'
wait_until "watchdog_scrapes_total samples" has_sample 'watchdog_scrapes_total{job="sglang-watchdog"}'
wait_until "successful scrapes of the simulated replicas" has_sample 'sum(watchdog_scrapes_total{job="sglang-watchdog",result="ok"}) > 0'
wait_until "evaluations counted" has_sample 'watchdog_evaluations_total{job="sglang-watchdog"} > 0'
echo "samples arrived: up, watchdog_build_info, watchdog_scrapes_total, watchdog_evaluations_total"

# Every rule has been evaluated (health ok) and none errs: a rule that
# errs on real data (e.g. many-to-many matching) would never fire.
want_rules=$(grep -c '^ *- alert:' "$rules")
rules_ok() {
	local body
	body=$(curl -fsS "$api/rules") || return 1
	if grep -q '"health":"err"' <<<"$body"; then
		fail "a rule fails to evaluate: $(grep -o '"lastError":"[^"]*"' <<<"$body" | sort -u | head -5)"
	fi
	[[ $(grep -o '"health":"ok"' <<<"$body" | wc -l) -ge $want_rules ]]
}
wait_until "all $want_rules rules evaluated without error" rules_ok
echo "all $want_rules alert rules evaluate without error"

# A healthy watchdog fires none of its own alerts. (Pending is fine: the
# "for" clauses have not elapsed; nothing should even be pending, but a
# short CI run cannot prove the absence of slow conditions.)
firing=$(curl -fsS -G "$api/query" --data-urlencode 'query=ALERTS{alertstate="firing"}')
if grep -q '"result":\[{' <<<"$firing"; then
	fail "alerts fire on a healthy watchdog: $firing"
fi
echo "no alert fires on the healthy demo"
