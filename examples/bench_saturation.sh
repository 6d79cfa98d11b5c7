#!/usr/bin/env bash
# Busy is not dead, at saturation (D8): wrk -t1 -c64 for
# SECONDS (default 60) against the gateway with every layer on (examples/bench.toml) in
# memory, on one redis-server without quota blocks, with the default quota blocks and
# with billing blocks too — one after the other in one run. Every non-2xx answer is a
# defect: a Redis that is slow because it is busy must delay answers, not fail them.
#
#   bash examples/bench_saturation.sh [SECONDS]
#
# Needs wrk and redis-server on PATH (Debian: apt-get install wrk redis-server); starts
# its own processes on free loopback ports and stops them on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
command -v wrk > /dev/null || { echo "wrk is not on PATH (apt-get install wrk)" >&2; exit 1; }
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

FAKE=$(free_port)
$BIN/fake_upstream --port "$FAKE" > /dev/null 2>&1 & pids+=($!)
wait_port "$FAKE"
D=$(mktemp -d); dirs+=("$D")
sed "s#http://127.0.0.1:9100#http://127.0.0.1:$FAKE#" examples/bench.toml > "$D/all.toml"
sed 's/^money_blocks = true$/money_blocks = false/' "$D/all.toml" > "$D/blocks.toml"
sed 's/^money_blocks = true$/blocks = false\nmoney_blocks = false/' "$D/all.toml" > "$D/none.toml"
cat > "$D/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Say hello in five words."}]}'
LUA
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$D" > /dev/null 2>&1 & pids+=($!)
wait_port "$RPORT"

printf '%-16s %10s %10s %12s %10s\n' target requests req/s non-2xx failures
for target in memory:all redis:none redis:blocks redis:all; do
  store=${target%%:*}; variant=${target#*:}
  url=memory; [ "$store" = redis ] && { url="redis://127.0.0.1:$RPORT"; redis-cli -p "$RPORT" flushall > /dev/null; }
  port=$(free_port)
  RUST_LOG=error $BIN/proxy --config "$D/$variant.toml" --listen 127.0.0.1:"$port" --store "$url" \
    > /dev/null 2>&1 &
  gw=$!; pids+=($gw)
  wait_port "$port"
  out=$(wrk -t1 -c64 -d"${SECS}s" -s "$D/post.lua" "http://127.0.0.1:$port/v1/chat/completions")
  total=$(echo "$out" | awk '/requests in/ { print $1 }')
  rps=$(echo "$out" | awk '/Requests\/sec/ { print $2 }')
  bad=$(echo "$out" | awk '/Non-2xx/ { print $5 }'); bad=${bad:-0}
  errs=$(echo "$out" | awk '/Socket errors/ { print $0 }')
  failures=$(curl -s "http://127.0.0.1:$port/metrics" \
    | awk '/^portcullis_store_failures_total/ { s += $2 } END { print s+0 }')
  printf '%-16s %10s %10s %12s %10s %s\n' "$target" "$total" "$rps" "$bad" "$failures" "$errs"
  kill "$gw"; wait "$gw" 2>/dev/null || true
done
