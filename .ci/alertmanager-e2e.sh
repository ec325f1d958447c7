#!/usr/bin/env bash
# End-to-end check with a real Alertmanager (called by .ci/run):
#   1. install Debian's prometheus-alertmanager (and amtool) when missing,
#      without letting the package start its own service,
#   2. start it on a free loopback port with a routing tree that sends
#      team="inference" to a webhook receiver (amtool check-config first),
#   3. run TestRealAlertmanagerRoundTrip against it: the watchdog's
#      dispatcher, queue and Alertmanager notifier post an incident, the
#      webhook (served by the test) receives it through the team route, an
#      amtool silence suppresses it, and its resolve reaches the webhook.
# Alertmanager is always stopped (trap). Bounded waits only.
#
# usage: .ci/alertmanager-e2e.sh WORKDIR
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
source .ci/lib.sh

work=${1:?usage: $0 WORKDIR}
mkdir -p "$work"

if ! command -v prometheus-alertmanager >/dev/null || ! command -v amtool >/dev/null; then
	# Without starting a system Alertmanager on :9093.
	apt_install_service prometheus-alertmanager
fi
prometheus-alertmanager --version 2>&1 | head -n 1

trap stop_started EXIT
logs=("$work/alertmanager.log")

am_port=$(free_port) || fail "no free port"
hook_port=$(free_port) || fail "no free port"
while [[ $hook_port == "$am_port" ]]; do hook_port=$(free_port) || fail "no free port"; done

cat >"$work/alertmanager.yml" <<YAML
route:
  receiver: blackhole
  group_by: [alertname, replica]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['team="inference"']
      receiver: team-webhook
receivers:
  - name: blackhole
  - name: team-webhook
    webhook_configs:
      - url: http://127.0.0.1:$hook_port/hook
        send_resolved: true
YAML
amtool check-config "$work/alertmanager.yml"

echo "--- start: alertmanager on 127.0.0.1:$am_port (webhook receiver 127.0.0.1:$hook_port)"
prometheus-alertmanager --config.file="$work/alertmanager.yml" --storage.path="$work/data" \
	--web.listen-address="127.0.0.1:$am_port" --cluster.listen-address= --log.level=warn \
	>"$work/alertmanager.log" 2>&1 &
pids+=($!)
deadline_seconds=30
wait_until "Alertmanager ready" curl -fs -o /dev/null "http://127.0.0.1:$am_port/-/ready"

echo "--- round trip: watchdog notifier -> Alertmanager -> webhook, amtool silence, resolve"
if ! ALERTMANAGER_URL="http://127.0.0.1:$am_port" ALERTMANAGER_WEBHOOK_ADDR="127.0.0.1:$hook_port" \
	go test -count=1 -race -run '^TestRealAlertmanagerRoundTrip$' -v ./pkg/notify/alertmanager/ >"$work/test.log" 2>&1; then
	cat "$work/test.log"
	fail "the Alertmanager round trip failed"
fi
grep -E '^(=== RUN|--- |ok|\s+realam_test)' "$work/test.log"
grep -q -- '--- PASS: TestRealAlertmanagerRoundTrip' "$work/test.log" || fail "the round trip test did not run"
