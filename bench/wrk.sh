#!/bin/sh
# wrk against the standalone, a bare net/http handler and the minimal pipeline, in turn, in one run:
# webhook echo over 1000 instances, 64 connections, one wrk thread.
#
#   bench/wrk.sh [ROUNDS [SECONDS]]        # defaults: 3 rounds of 10 s, each after a 2 s warm-up
#
# STANDALONE and BENCH name prebuilt binaries (default: built here from this module); with
# STANDALONE_B, a second standalone (another build) is loaded in each round too, after the first,
# with STANDALONE_B_ENV (NAME=VALUE ...) added to its environment: STANDALONE_B=same and
# STANDALONE_B_ENV=AGENTBUS_MEMORY_LIMIT=1GiB compare a setting on one build. Every
# server listens on 127.0.0.1 only; everything started is stopped at the end. The standalone runs
# without its default per-key rate limit (AGENTBUS_RATE_LIMIT=0).
set -eu
rounds=${1:-3}
secs=${2:-10}
conns=${CONNS:-64}
dir=$(mktemp -d /tmp/agentbus-wrk.XXXXXX)
cd "$(dirname "$0")/.."
# Binaries go to bin/: the phases' directories below are named after them.
if [ -z "${STANDALONE:-}" ]; then STANDALONE=$dir/bin/standalone; go build -o "$STANDALONE" ./services/standalone; fi
if [ -z "${BENCH:-}" ]; then BENCH=$dir/bin/bench; go build -o "$BENCH" ./bench; fi
pids=""
cleanup() { for p in $pids; do kill -INT "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT INT TERM

# The standalone, on its own data directory, with a dev key.
key=devkey-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
port=${PORT:-18080}
AGENTBUS_RATE_LIMIT=0 AGENTBUS_DEV_API_KEY=$key "$STANDALONE" -data-dir "$dir/data" -http-addr 127.0.0.1:$port -nats-listen "" >"$dir/standalone.log" 2>&1 &
pids="$pids $!"
phases="bare pipeline standalone"
if [ -n "${STANDALONE_B:-}" ]; then
	if [ "$STANDALONE_B" = same ]; then STANDALONE_B=$STANDALONE; fi
	# shellcheck disable=SC2086 # STANDALONE_B_ENV is a list of NAME=VALUE words
	env AGENTBUS_RATE_LIMIT=0 AGENTBUS_DEV_API_KEY=$key ${STANDALONE_B_ENV:-} "$STANDALONE_B" -data-dir "$dir/data-b" -http-addr 127.0.0.1:$((port + 1)) -nats-listen "" >"$dir/standalone-b.log" 2>&1 &
	pids="$pids $!"
	phases="$phases standalone-b"
fi
# bare and pipeline, each in a process of its own.
for phase in bare pipeline; do
	mkdir -p "$dir/$phase"
	"$BENCH" -serve "$dir/$phase" -phase $phase >"$dir/$phase.log" 2>&1 &
	pids="$pids $!"
done
i=0
until curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && { [ -z "${STANDALONE_B:-}" ] || curl -sf -o /dev/null "http://127.0.0.1:$((port + 1))/readyz"; } &&
	grep -q serving "$dir/bare.log" && grep -q serving "$dir/pipeline.log"; do
	i=$((i + 1)); [ $i -lt 600 ] || { echo "servers did not start" >&2; cat "$dir"/*.log >&2; exit 1; }
	sleep 0.1
done
# The standalone's request targets: the bench's instances, its key.
mkdir -p "$dir/standalone"
cp "$dir/bare/body" "$dir/standalone/body"
n=0
while [ $n -lt 1000 ]; do
	printf '/api/user/webhooks/default%%3AEcho%%3ASupervisor%%20Workflow%%3Abench-%d/echo?apikey=%s&n=1\n' $n "$key"
	n=$((n + 1))
done >"$dir/standalone/standalone.paths"
mkdir -p "$dir/standalone-b"
cp "$dir/bare/body" "$dir/standalone-b/body"
cp "$dir/standalone/standalone.paths" "$dir/standalone-b/standalone-b.paths"

base() { awk -v p="$1" '$1 == p { print $2 }' "$dir/$1.log"; }
run() { # phase dir url duration
	BENCH_DIR=$2 BENCH_PHASE=$1 wrk -t1 -c"$conns" -d"$4" -s bench/wrk.lua --latency "$3" | grep -E "^$1:"
}
url_of() {
	case $1 in standalone) echo http://127.0.0.1:$port ;; standalone-b) echo http://127.0.0.1:$((port + 1)) ;; *) base "$1" ;; esac
}
for phase in $phases; do # start every instance's run, warm up
	url=$(url_of $phase)
	run $phase "$dir/$phase" "$url" 3s >/dev/null
done
r=1
while [ $r -le "$rounds" ]; do
	echo "round $r"
	for phase in $phases; do
		url=$(url_of $phase)
		run $phase "$dir/$phase" "$url" 2s >/dev/null
		run $phase "$dir/$phase" "$url" "${secs}s"
	done
	r=$((r + 1))
done
