#!/usr/bin/env bash
# A stalled Redis under load (D4, D8, T5): the gateway with every layer on
# (examples/bench.toml, the shipped store defaults: quota and billing blocks) on one
# redis-server, in front of the bundled fake upstream. RATE requests a second on a fixed
# schedule over CONNS connections, for STALL + 3 seconds; one second in, Redis is frozen
# (SIGSTOP) for STALL seconds, then thawed.
# Reports the slowest request, p99, the statuses (billing fails closed: 503 while Redis
# cannot be asked) and the store failures the gateway counted — the bound to check is
# the slowest request: a store call waits at most two deadlines (20 ms each) for a
# silent Redis, a request makes at most three calls in a row, and the breaker fails the
# rest fast.
#
#   bash examples/bench_stall.sh [RATE] [CONNS] [STALL]
#   BUSY=4 bash examples/bench_stall.sh          # on a host loaded to twice its cores
#
# Needs redis-server on PATH; starts its own on a free loopback port and stops
# everything on exit. Bounded by RATE × (STALL + 3) requests and 60 s.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-4000}
C=${2:-8}
STALL=${3:-3}
N=$((RATE * (STALL + 3)))
cargo build --release -q -p portcullis-examples --example proxy --example load --example fake_upstream
BIN=target/release/examples
pids=()
dirs=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  for d in "${dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT

source examples/bench_ports.sh

for _ in $(seq 1 "${BUSY:-0}"); do
  bash -c 'while :; do :; done' & pids+=($!)
done

FAKE=$(free_port)
$BIN/fake_upstream --port "$FAKE" > /dev/null 2>&1 & pids+=($!)
wait_port "$FAKE"
CONFIG=$(mktemp --suffix .toml); dirs+=("$CONFIG")
sed "s#http://127.0.0.1:9100#http://127.0.0.1:$FAKE#" examples/bench.toml > "$CONFIG"

RPORT=$(free_port)
RDIR=$(mktemp -d); dirs+=("$RDIR")
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$RDIR" \
  > /dev/null 2>&1 & rpid=$!; pids+=($rpid)
wait_port "$RPORT"

PORT=$(free_port)
RUST_LOG=error $BIN/proxy --config "$CONFIG" --listen 127.0.0.1:"$PORT" \
  --store "redis://127.0.0.1:$RPORT" > /dev/null 2>&1 & pids+=($!)
wait_port "$PORT"
$BIN/load --url "http://127.0.0.1:$PORT/v1/chat/completions" --key sk-bench \
  --requests 500 --concurrency "$C" > /dev/null

( sleep 1; kill -STOP "$rpid"; sleep "$STALL"; kill -CONT "$rpid" ) & stall=$!
out=$($BIN/load --url "http://127.0.0.1:$PORT/v1/chat/completions" --key sk-bench \
  --requests "$N" --concurrency "$C" --rate "$RATE" --seconds 60)
wait "$stall"
failures=$(curl -s "http://127.0.0.1:$PORT/metrics" \
  | awk '/^portcullis_store_failures_total/ { s += $2 } END { print s+0 }')
echo "busy=${BUSY:-0} connections=$C stall=${STALL}s $out store_failures=$failures"
