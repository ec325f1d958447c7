#!/usr/bin/env bash
# The workspace pages in a real browser: Debian's chromium driven by
# chromedp loads the fleet, incident and replica pages of a daemon watching
# a simulated fleet with a live incident, and silences a pending incident
# from its page, then expires the silence (go test -tags browser). The
# silence test runs behind an Ingress-like proxy that forwards only
# /watchdog/..., with --web.external-url there: every link, stylesheet, form
# and redirect must stay under the prefix (the same run, no extra CI time).
#
#   bash .ci/browser.sh ARTIFACTS_DIR
#
# Screenshots are written to ARTIFACTS_DIR/screenshots.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/lib.sh

out=${1:?usage: browser.sh ARTIFACTS_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
logs=("$out/browser-test.log")

browser=/usr/bin/chromium
if [[ ! -x $browser ]]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends chromium >"$out/apt.log" 2>&1 ||
		{ logs=("$out/apt.log"); fail "installing chromium"; }
fi
"$browser" --version

# CI=true: a browser that cannot start fails the test instead of skipping it.
if ! CI=true WATCHDOG_BROWSER=$browser WATCHDOG_SCREENSHOTS="$out/screenshots" \
	go test -tags browser -race -count=1 -v -run 'InARealBrowser' ./cmd/watchdog/ >"$out/browser-test.log" 2>&1; then
	fail "real-browser tests"
fi
grep -E '^(ok|--- (PASS|SKIP|FAIL))' "$out/browser-test.log"
grep -q -- '--- PASS' "$out/browser-test.log" || fail "no real-browser test ran"
echo "screenshots in $out/screenshots:"
ls -l "$out/screenshots"
