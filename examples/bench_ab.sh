#!/usr/bin/env bash
# Two builds of the gateway side by side (T2): the bare forwarder (`--bare`) and
# the full stack (examples/bench.toml, in-memory store) of build A and of build B, in
# front of one fake upstream, at 16 and 64 connections, interleaved A, B, A, B so that a
# noisy host hits both alike. Prints requests/s and the full stack's share of its own
# build's bare forwarder for every round, then the median share per build and
# connection count: on a shared 2-core host one round's share moves by ±15 points, the
# median of several much less.
#
#   bash examples/bench_ab.sh DIR_A DIR_B [REQUESTS] [ROUNDS]
#
# DIR_A / DIR_B hold `proxy`, `load` and `fake_upstream` release binaries (for example
# `target/release/examples` of two checkouts). Loopback only; bounded by REQUESTS
# (default 20000) per line.
#
# WORKERS=N runs every gateway with N tokio worker threads (TOKIO_WORKER_THREADS; the
# default is one per core). On a 2-core host that also runs the load generator and the
# fake upstream, WORKERS=1 leaves them a core: see the benchmarks guide, "End to end".
set -euo pipefail
A=$1; B=$2; N=${3:-20000}; ROUNDS=${4:-5}
cd "$(dirname "$0")/.."
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
source examples/bench_ports.sh
FAKE=$(free_port)
"$A/fake_upstream" --port "$FAKE" > /dev/null 2>&1 & pids+=($!)
wait_port "$FAKE"
D=$(mktemp -d); trap 'cleanup; rm -rf "$D"' EXIT
sed "s#http://127.0.0.1:9100#http://127.0.0.1:$FAKE#" examples/bench.toml > "$D/bench.toml"
rps() { # dir bare(0/1) connections
  local dir=$1 bare=$2 c=$3 port flags gw out
  port=$(free_port)
  flags=(--config "$D/bench.toml" --listen 127.0.0.1:"$port" --store memory)
  [ "$bare" = 1 ] && flags+=(--bare)
  env ${WORKERS:+TOKIO_WORKER_THREADS=$WORKERS} RUST_LOG=error "$dir/proxy" "${flags[@]}" > /dev/null 2>&1 & gw=$!; pids+=($gw)
  wait_port "$port"
  "$A/load" --url "http://127.0.0.1:$port/v1/chat/completions" --key sk-bench --requests 1000 --concurrency "$c" > /dev/null
  out=$("$A/load" --url "http://127.0.0.1:$port/v1/chat/completions" --key sk-bench --requests "$N" --concurrency "$c")
  kill "$gw"; wait "$gw" 2>/dev/null || true
  echo "$out" | sed -n 's/.*rps=\([0-9]*\).*/\1/p'
}
printf '%-6s %5s %10s %10s %8s\n' build conns "bare rps" "full rps" "full/bare"
shares=$D/shares
for round in $(seq "$ROUNDS"); do
  for c in 16 64; do
    for build in A B; do
      dir=$A; [ "$build" = B ] && dir=$B
      bare=$(rps "$dir" 1 "$c"); full=$(rps "$dir" 0 "$c")
      awk -v b="$build" -v c="$c" -v x="$bare" -v y="$full" \
        'BEGIN { printf "%-6s %5d %10d %10d %7.0f%%\n", b, c, x, y, 100 * y / x }'
      awk -v b="$build" -v c="$c" -v x="$bare" -v y="$full" \
        'BEGIN { printf "%s %d %.1f\n", b, c, 100 * y / x }' >> "$shares"
    done
  done
done
echo "median full/bare over $ROUNDS rounds:"
for c in 16 64; do
  for build in A B; do
    awk -v b="$build" -v c="$c" '$1 == b && $2 == c { print $3 }' "$shares" | sort -n |
      awk -v b="$build" -v c="$c" '{ v[NR] = $1 } END {
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%-6s %5d %7.1f%%\n", b, c, m }'
  done
done
