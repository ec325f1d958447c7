#!/usr/bin/env bash
# Run by .ci/history-e2e.sh (HISTORY_E2E_AFTER) while its Prometheus still
# serves: `watchdog backtest --prometheus` over the scenario's range must
# find the incident the live demo daemon paged — same class, same replica,
# the same incident fingerprint, first paged within one evaluation interval plus one scrape interval of the
# live page (Prometheus scraped the replicas at other instants than the
# daemon did) plus the 1 s the live time was observed with.
#
# Environment (from incident.env): WATCHDOG, WORKDIR, PROMETHEUS_URL,
# SCENARIO_FROM, SCENARIO_TO, INCIDENT_CLASS, INCIDENT_REPLICA,
# INCIDENT_FINGERPRINT, LIVE_PAGED_AT.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v jq >/dev/null; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends jq >/dev/null ||
		{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends jq >/dev/null; }
fi

# The demo's settings (compressed time: 1 s scrapes and rounds), read from
# this Prometheus by the replica label the scrape config set.
{
	cat configs/demo.yaml
	cat <<EOF2
history:
  url: $PROMETHEUS_URL
  replica_label: replica
  selector: job="sglang"
  step: 1s
EOF2
} >"$WORKDIR/backtest.yaml"

# The range runs 15 s past the moment both watchdogs had paged: the live
# page may be the update that re-titled the incident to its cause, which a
# range ending at that second can miss (Prometheus' last scrape of it may
# not be stored yet). Wait until Prometheus holds those seconds.
to_s=$((SCENARIO_TO + 15))
while (($(date +%s) < to_s + 3)); do sleep 1; done
from=$(date -u -d "@$SCENARIO_FROM" +%Y-%m-%dT%H:%M:%SZ)
to=$(date -u -d "@$to_s" +%Y-%m-%dT%H:%M:%SZ)
"$WATCHDOG" backtest --prometheus "$PROMETHEUS_URL" --from "$from" --to "$to" \
	--config "$WORKDIR/backtest.yaml" --output json >"$WORKDIR/backtest.json"
"$WATCHDOG" backtest --prometheus "$PROMETHEUS_URL" --from "$from" --to "$to" \
	--config "$WORKDIR/backtest.yaml" | tee "$WORKDIR/backtest.txt" | head -n 20

first=$(jq -r --arg c "$INCIDENT_CLASS" --arg r "$INCIDENT_REPLICA" \
	'[.events[] | select((.kind == "trigger" or .kind == "update") and .class == $c and .replica == $r)][0] // empty | "\(.at) \(.fingerprint)"' \
	"$WORKDIR/backtest.json")
if [[ -z $first ]]; then
	echo "FAIL: the backtest over Prometheus did not page $INCIDENT_CLASS on $INCIDENT_REPLICA" >&2
	jq -c '.events[] | {at, kind, class, replica, headline}' "$WORKDIR/backtest.json" >&2
	exit 1
fi
read -r at fingerprint <<<"$first"
at_s=$(date -u -d "$at" +%s)
scrape=$(awk '/^scrape:/{s=1} s && /interval:/{print $2; exit}' configs/demo.yaml)
eval_i=$(awk '/^evaluation:/{s=1} s && /interval:/{print $2; exit}' configs/demo.yaml)
tolerance=$((${scrape%s} + ${eval_i%s} + 1))
delta=$((at_s - LIVE_PAGED_AT))
echo "backtest paged $INCIDENT_CLASS on $INCIDENT_REPLICA at $at (fingerprint $fingerprint; live: $INCIDENT_FINGERPRINT): ${delta}s from the live page, tolerance ${tolerance}s"
if [[ $fingerprint != "$INCIDENT_FINGERPRINT" ]]; then
	echo "FAIL: the backtest paged another incident (fingerprint $fingerprint, live $INCIDENT_FINGERPRINT)" >&2
	exit 1
fi
if ((delta < -tolerance || delta > tolerance)); then
	echo "FAIL: the backtest's page is ${delta}s from the live one" >&2
	exit 1
fi
