#!/usr/bin/env bash
# End-to-end check of reading the fleet from a real Prometheus (called by
# .ci/run), with Debian's prometheus:
#   1. start the watchdog demo: a simulated SGLang fleet on loopback and the
#      live daemon scraping it; its first incident is a preempt storm on
#      sim-0, paged about a minute in;
#   2. start a real Prometheus scraping the same simulated replicas every
#      second (job "sglang", each target labelled replica=<name>);
#   3. start a second watchdog with `source: prometheus` and `history:`
#      pointing at that Prometheus: it scrapes nothing and must page the
#      same incident (class, replica, fingerprint) from what Prometheus holds.
# Every process is stopped on exit (trap). Bounded waits only.
#
# usage: .ci/history-e2e.sh WORKDIR
#   WORKDIR  scratch directory (binary, logs, the Prometheus TSDB in
#            WORKDIR/prometheus-data)
# When both pages arrived, WORKDIR/incident.env holds WATCHDOG (the built
# binary), WORKDIR, PROMETHEUS_URL,
# SCENARIO_FROM / SCENARIO_TO (unix seconds), INCIDENT_CLASS,
# INCIDENT_REPLICA, INCIDENT_FINGERPRINT, LIVE_PAGED_AT and SOURCE_PAGED_AT
# (unix seconds, as observed), and if HISTORY_E2E_AFTER names a script it runs with those
# variables in its environment while Prometheus still serves (the place for
# a backtest against this Prometheus).
set -euo pipefail
cd "$(dirname "$0")/.."

work=${1:?usage: $0 WORKDIR}
deadline_seconds=${E2E_DEADLINE_SECONDS:-150}
mkdir -p "$work"
work=$(cd "$work" && pwd)

. .ci/lib.sh
trap stop_started EXIT
logs=("$work/demo.log" "$work/prometheus.log" "$work/source.log")

echo "--- build the watchdog"
go build -o "$work/watchdog" ./cmd/watchdog

# One deadline for the whole scenario: wait_until reads end.
end=$((SECONDS + deadline_seconds))
scenario_from=$(date +%s)
dport=$(free_port) || fail "no free port"
echo "--- start: watchdog demo on 127.0.0.1:$dport"
WATCHDOG_LISTEN_ADDRESS="127.0.0.1:$dport" "$work/watchdog" demo >"$work/demo.log" 2>&1 &
pids+=($!)
wait_until "demo /readyz" curl -fs -o /dev/null "http://127.0.0.1:$dport/readyz"

# The demo prints each simulated replica's address: "  sim-0  http://127.0.0.1:PORT/metrics".
targets=$(awk '$1 ~ /^sim-[0-9]+$/ && $2 ~ /^http:\/\// { sub("^http://", "", $2); sub("/metrics$", "", $2); print $1, $2 }' "$work/demo.log")
[[ -n $targets ]] || fail "no simulated replica addresses in the demo's output"
echo "simulated replicas:"
echo "$targets"

pport=$(free_port) || fail "no free port"
{
	cat <<EOF2
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: sglang
    static_configs:
EOF2
	while read -r name addr; do
		printf '      - targets: ["%s"]\n        labels: {replica: "%s"}\n' "$addr" "$name"
	done <<<"$targets"
} >"$work/prometheus.yml"
promtool check config "$work/prometheus.yml" >/dev/null

echo "--- start: prometheus on 127.0.0.1:$pport"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prometheus-data" \
	--web.listen-address="127.0.0.1:$pport" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
prom="http://127.0.0.1:$pport"
wait_until "Prometheus ready" curl -fs -o /dev/null "$prom/-/ready"
has_sample() {
	curl -fsS -G "$prom/api/v1/query" --data-urlencode "query=$1" 2>/dev/null | grep -q '"result":\[{'
}
wait_until 'sglang samples in Prometheus' has_sample 'sglang:num_running_reqs{job="sglang",replica="sim-0"}'

# The demo's settings (compressed time), reading from Prometheus instead of
# scraping: replicas are named by the replica label.
sport=$(free_port) || fail "no free port"
{
	cat configs/demo.yaml
	cat <<EOF2
source: prometheus
history:
  url: $prom
  replica_label: replica
  selector: job="sglang"
  step: 1s
  absent_intervals: 5
  startup_budget: 10s
EOF2
} >"$work/source.yaml"

echo "--- start: watchdog with source: prometheus on 127.0.0.1:$sport"
WATCHDOG_CONFIG="$work/source.yaml" WATCHDOG_LISTEN_ADDRESS="127.0.0.1:$sport" WATCHDOG_LOG_LEVEL=info WATCHDOG_LOG_FORMAT=json \
	"$work/watchdog" run >"$work/source.out" 2>"$work/source.log" &
pids+=($!)
wait_until "source watchdog /readyz" curl -fs -o /dev/null "http://127.0.0.1:$sport/readyz"

# The incident is one page whose class is, or becomes, preempt_storm (a
# page may open as the collapse the storm causes and be re-titled when the
# cause is found). Both watchdogs must name it with the same fingerprint:
# the same incident identity, decided by the same code.
class=preempt_storm
replica=sim-0
live_at="" source_at="" live_key="" source_key=""
both_paged() {
	local line
	if [[ -z $live_at ]]; then
		line=$(grep -E "\] (trigger|update) [a-z]+ $class on $replica " "$work/demo.log" | head -n 1) || true
		if [[ -n $line ]]; then
			live_at=$(date +%s)
			live_key=$(sed -E 's/.*dedup key ([0-9a-f]+).*/\1/' <<<"$line")
			echo "the live demo daemon paged $class on $replica: $line"
		fi
	fi
	if [[ -z $source_at ]]; then
		line=$(grep '"msg":"notification"' "$work/source.log" | grep -E '"kind":"(trigger|update)"' |
			grep "\"class\":\"$class\"" | grep "\"replica\":\"$replica\"" | head -n 1) || true
		if [[ -n $line ]]; then
			source_at=$(date +%s)
			source_key=$(sed -E 's/.*"fingerprint":"([0-9a-f]+)".*/\1/' <<<"$line")
			echo "the source: prometheus watchdog paged $class on $replica: $line"
		fi
	fi
	[[ -n $live_at && -n $source_at ]]
}
wait_until "$class on $replica paged by both watchdogs" both_paged
[[ $live_key == "$source_key" ]] || fail "the two watchdogs paged different incidents: fingerprint $live_key (live) and $source_key (source: prometheus)"
echo "paged: live demo at +$((live_at - scenario_from))s, source: prometheus at +$((source_at - scenario_from))s"
# Prometheus stayed healthy: no query failed and no replica went missing.
if grep -e '"class":"replica_down"' -e 'reading the fleet from Prometheus failed' "$work/source.log"; then
	fail "the source: prometheus watchdog lost replicas or queries while Prometheus was healthy"
fi

cat >"$work/incident.env" <<EOF2
WATCHDOG=$work/watchdog
WORKDIR=$work
PROMETHEUS_URL=$prom
SCENARIO_FROM=$scenario_from
SCENARIO_TO=$(date +%s)
INCIDENT_CLASS=$class
INCIDENT_REPLICA=$replica
LIVE_PAGED_AT=$live_at
SOURCE_PAGED_AT=$source_at
INCIDENT_FINGERPRINT=$live_key
EOF2
if [[ -n ${HISTORY_E2E_AFTER:-} ]]; then
	echo "--- $HISTORY_E2E_AFTER"
	(set -a && . "$work/incident.env" && bash "$HISTORY_E2E_AFTER")
fi
