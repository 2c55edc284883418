#!/bin/sh
# Builds prefixd (release) and runs the demo: a prefixd on a private socket,
# then several inference processes that share one long prompt prefix (a
# "system prompt") and ask different questions. The first computes the
# prefix and publishes it; the others attach it from shared memory and
# compute only their question. Prints each process's time to first token
# and cache use, an uncached run for comparison, and the daemon's counters.
set -eu
cd "$(dirname "$0")/.."
[ -d build ] || meson setup build -Dbuildtype=release >/dev/null
ninja -C build >/dev/null
bin=$PWD/build
tmp=$(mktemp -d /tmp/prefixd-demo-XXXXXX)
daemon=
cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

PREFIX=${PREFIX:-1024}
QUESTION=${QUESTION:-32}
PROCESSES=${PROCESSES:-4}

echo "Writing a random-weight Llama checkpoint (the demo shape) to $tmp/model"
"$bin/tools/prefix-run/prefix-run" random-model --out "$tmp/model"

sock=$tmp/prefixd.sock
"$bin/daemon/prefixd" --socket "$sock" --memory 512M 2>"$tmp/prefixd.log" &
daemon=$!
i=0
while [ ! -S "$sock" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
echo "prefixd is listening on $sock (pid $daemon)"

# Token ids from a small LCG: one shared prefix, one question per process.
tokens() { # count seed
	awk -v n="$1" -v x="$2" 'BEGIN { for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%d ", x % 16384 } }'
}
tokens "$PREFIX" 1 >"$tmp/prefix"

run() { # label file [prefix-run options...]
	label=$1 file=$2
	shift 2
	"$bin/tools/prefix-run/prefix-run" generate --model "$tmp/model" --tokens @"$file" --max-new 8 \
		"$@" >"$tmp/out" 2>"$tmp/err"
	ttft=$(sed -n 's/.*time to first token \([0-9.]*\) ms.*/\1/p' "$tmp/err")
	att=$(sed -n 's/.*: \([0-9]*\) attached from the cache, \([0-9]*\) computed.*/\1 \2/p' "$tmp/err")
	[ -n "$att" ] || att="- $(($(wc -w <"$file")))"
	set -- $att
	printf '%-22s %9s ms %10s %10s   %s\n' "$label" "$ttft" "$1" "$2" "$(cat "$tmp/out")"
}

echo
echo "$PROCESSES processes, each a $PREFIX-token shared prefix + its own $QUESTION-token question:"
printf '%-22s %12s %10s %10s   %s\n' process "first token" attached computed "generated ids"
p=1
while [ $p -le "$PROCESSES" ]; do
	{ cat "$tmp/prefix"; tokens "$QUESTION" $((100 + p)); } >"$tmp/q$p"
	if [ $p -eq 1 ]; then label="1 (cold, publishes)"; else label="$p (warm, attaches)"; fi
	run "$label" "$tmp/q$p" --socket "$sock"
	p=$((p + 1))
done
run "$PROCESSES again, no cache" "$tmp/q$PROCESSES" --no-cache

echo
echo "prefixctl stats:"
"$bin/tools/prefixctl/prefixctl" --socket "$sock" stats
