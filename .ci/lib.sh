# Shared by the end-to-end scripts in .ci (source it). A script sets
# `logs` (an array of log files) before calling fail.

# pids are the background processes a script started (`pids+=($!)`);
# stop_started, trapped on EXIT, stops them and waits for them.
pids=()
stop_started() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
}

# fail MESSAGE: print it and the last lines of every non-empty log in
# `logs`, then exit 1.
fail() {
	echo "FAIL: $*" >&2
	local log
	for log in "${logs[@]}"; do
		if [[ -s $log ]]; then
			echo "--- last lines of $log" >&2
			tail -n 30 "$log" >&2
		fi
	done
	exit 1
}

# wait_until DESCRIPTION COMMAND...: run COMMAND every 0.5 s until it
# succeeds; fail if a process in `pids` exits first, or at the deadline:
# when SECONDS reaches `end` if the script set it (one budget for all its
# waits), else deadline_seconds after the call.
wait_until() {
	local what=$1 by=${end:-$((SECONDS + deadline_seconds))} pid
	shift
	until "$@"; do
		if ((SECONDS >= by)); then
			fail "timed out after ${deadline_seconds}s waiting for: $what"
		fi
		for pid in "${pids[@]}"; do
			kill -0 "$pid" 2>/dev/null || fail "process $pid exited while waiting for: $what"
		done
		sleep 0.5
	done
}

# free_port prints a TCP port nothing listens on (loopback), chosen below
# the kernel's ephemeral range: a port inside it can be taken between the
# probe and the bind by any outgoing connection (Prometheus scraping the
# simulated replicas does thousands), which is how a listener once failed
# with "address already in use".
free_port() {
	local low=32768 p
	if [[ -r /proc/sys/net/ipv4/ip_local_port_range ]]; then
		read -r low _ </proc/sys/net/ipv4/ip_local_port_range
	fi
	local base=10000 span=$((low - 10000))
	if ((span < 1000)); then
		base=1024 span=$((low - 1024))
	fi
	for _ in $(seq 1 50); do
		p=$((base + RANDOM % span))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# apt_install_service PACKAGE...: install Debian packages that ship a
# system service without starting it (a policy-rc.d that refuses every
# start while they install), so it does not take the port a test wants.
apt_install_service() {
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	local policy=""
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		policy=/usr/sbin/policy-rc.d
	fi
	local rc=0
	apt-get install -y -q --no-install-recommends "$@" || rc=$?
	[[ -n $policy ]] && rm -f "$policy"
	return "$rc"
}
