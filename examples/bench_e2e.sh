#!/usr/bin/env bash
# End-to-end benchmark (T2): the gateway in front of the bundled fake upstream,
# loaded from a separate process over loopback, compared in one run against
#   (a) the fake upstream called directly, and
#   (b) the same gateway with every layer off (--bare),
# for the in-memory and the Redis store, non-streaming and streaming; first at fixed
# concurrency (max requests/s), then at a fixed rate of half of (b)'s maximum (added
# latency at a load every target can carry; lines starting with `rate/`).
#
#   bash examples/bench_e2e.sh [REQUESTS] [CONCURRENCY]
#
# Needs redis-server on PATH (it starts its own on a free port). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
C=${2:-32}
cargo build --release -q -p portcullis-examples --example proxy --example load --example fake_upstream
BIN=target/release/examples
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

source examples/bench_ports.sh

FAKE=9100
$BIN/fake_upstream --port $FAKE > /dev/null 2>&1 & pids+=($!)
wait_port $FAKE
RPORT=$(free_port)
redis-server --port "$RPORT" --save "" --appendonly no --bind 127.0.0.1 > /dev/null 2>&1 & pids+=($!)
wait_port "$RPORT"

run() { # label url key extra-args...
  local label=$1 url=$2 key=$3; shift 3
  local out
  out=$($BIN/load --url "$url" --key "$key" --requests "$N" --concurrency "$C" "$@")
  echo "$label $out"
}

gateway() { # store bare(0/1) → starts a gateway: GW_PORT, GW_PID
  local store=$1 bare=$2 port
  port=$(free_port)
  local flags=(--config examples/bench.toml --listen 127.0.0.1:"$port" --store "$store")
  [ "$bare" = 1 ] && flags+=(--bare)
  RUST_LOG=error $BIN/proxy "${flags[@]}" > /dev/null 2>&1 &
  GW_PID=$!; pids+=($GW_PID)
  wait_port "$port"
  GW_PORT=$port
}

through() { # label store bare load-args...
  local label=$1 store=$2 bare=$3; shift 3
  gateway "$store" "$bare"
  run "$label" "http://127.0.0.1:$GW_PORT/v1/chat/completions" sk-bench "$@"
  kill "$GW_PID"; wait "$GW_PID" 2>/dev/null || true
}

for stream in "" "--stream"; do
  mode=${stream:+stream}; mode=${mode:-json}
  run "direct/$mode" "http://127.0.0.1:$FAKE/v1/chat/completions" sk-bench $stream
  bare=$(through "bare/$mode" memory 1 $stream); echo "$bare"
  through "memory/$mode" memory 0 $stream
  through "redis/$mode" "redis://127.0.0.1:$RPORT" 0 $stream
  # Half of the bare forwarder's maximum, on a fixed schedule.
  rate=$(echo "$bare" | sed -n 's/.*rps=\([0-9]*\).*/\1/p'); rate=$((rate / 2))
  # (later flags win over run()'s --requests / --concurrency)
  fixed=(--rate "$rate" --concurrency 512 --requests $((N / 2)))
  run "rate/direct/$mode@$rate" "http://127.0.0.1:$FAKE/v1/chat/completions" sk-bench $stream "${fixed[@]}"
  through "rate/bare/$mode@$rate" memory 1 $stream "${fixed[@]}"
  through "rate/memory/$mode@$rate" memory 0 $stream "${fixed[@]}"
  through "rate/redis/$mode@$rate" "redis://127.0.0.1:$RPORT" 0 $stream "${fixed[@]}"
done
