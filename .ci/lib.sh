# Shared by the end-to-end scripts in .ci (source it). A script sets
# `logs` (an array of log files) before calling fail.

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

# free_port prints a TCP port nothing listens on (loopback).
free_port() {
	local p
	for _ in $(seq 1 50); do
		p=$((20000 + RANDOM % 20000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}
