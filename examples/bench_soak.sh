#!/usr/bin/env bash
# Memory that stays flat (D7, T1): the gateway's resident set before and after
# REQUESTS (default 1,000,000) requests, with every layer on (examples/bench.toml) in
# memory and on one redis-server (the shipped [store] defaults), beside the bare
# forwarder — one after the other in one run, each on a fresh process.
#
#   bash examples/bench_soak.sh [REQUESTS] [CONNECTIONS]
#
# Each target is warmed up for 10 s, then loaded with wrk -t1 -cCONNECTIONS (default 64)
# in 15 s rounds until REQUESTS more were answered (at most 40 rounds); RSS is read with
# ps after the warm-up and after the last round, once the gateway has been idle for 6 s
# (past the metrics upkeep, which folds histogram samples every 5 s). Needs wrk and
# redis-server on PATH (Debian: apt-get install wrk redis-server); starts its own
# processes on free loopback ports and stops them on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-1000000}
CONNS=${2:-64}
command -v wrk > /dev/null || { echo "wrk is not on PATH (apt-get install wrk)" >&2; exit 1; }
command -v redis-server > /dev/null || { echo "redis-server is not on PATH (apt-get install redis-server)" >&2; exit 1; }
cargo build --release -q -p portcullis-examples --example proxy --example fake_upstream
BIN=target/release/examples
pids=()
dirs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in "${dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT
source examples/bench_ports.sh
rss_mb() { awk '{ printf "%.1f", $1 / 1024 }' <<< "$(ps -o rss= -p "$1")"; }

FAKE=$(free_port)
$BIN/fake_upstream --port "$FAKE" > /dev/null 2>&1 & pids+=($!)
wait_port "$FAKE"
D=$(mktemp -d); dirs+=("$D")
# The shipped [store] defaults: bench.toml's money_blocks line removed.
sed "s#http://127.0.0.1:9100#http://127.0.0.1:$FAKE#; /^money_blocks = /d" examples/bench.toml > "$D/all.toml"
cat > "$D/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Say hello in five words."}]}'
LUA
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$D" > /dev/null 2>&1 & pids+=($!)
wait_port "$RPORT"

printf '%-8s %12s %14s %14s %12s %10s %12s\n' target requests 'RSS warm MB' 'RSS after MB' 'grown MB' 'B/request' non-2xx
for target in bare memory redis; do
  url=memory; flags=()
  [ "$target" = redis ] && { url="redis://127.0.0.1:$RPORT"; redis-cli -p "$RPORT" flushall > /dev/null; }
  [ "$target" = bare ] && flags=(--bare)
  port=$(free_port)
  RUST_LOG=error $BIN/proxy --config "$D/all.toml" --listen 127.0.0.1:"$port" --store "$url" "${flags[@]}" \
    > /dev/null 2>&1 &
  gw=$!; pids+=($gw)
  wait_port "$port"
  wrk -t1 -c"$CONNS" -d10s -s "$D/post.lua" "http://127.0.0.1:$port/v1/chat/completions" > /dev/null
  sleep 6
  warm=$(rss_mb "$gw")
  total=0; bad=0; rounds=0
  while [ "$total" -lt "$REQUESTS" ] && [ "$rounds" -lt 40 ]; do
    out=$(wrk -t1 -c"$CONNS" -d15s -s "$D/post.lua" "http://127.0.0.1:$port/v1/chat/completions")
    n=$(echo "$out" | awk '/requests in/ { print $1 }')
    b=$(echo "$out" | awk '/Non-2xx/ { print $5 }')
    total=$((total + n)); bad=$((bad + ${b:-0})); rounds=$((rounds + 1))
  done
  sleep 6
  after=$(rss_mb "$gw")
  grown=$(awk -v a="$after" -v w="$warm" 'BEGIN { printf "%.1f", a - w }')
  per=$(awk -v a="$after" -v w="$warm" -v n="$total" 'BEGIN { printf "%.1f", (a - w) * 1048576 / n }')
  printf '%-8s %12s %14s %14s %12s %10s %12s\n' "$target" "$total" "$warm" "$after" "$grown" "$per" "$bad"
  kill "$gw"; wait "$gw" 2>/dev/null || true
done
