#!/usr/bin/env bash
# The cost of keys from the records database (#36, K4): one gateway with every layer on
# (examples/bench.toml, in-memory store) and an SQLite records database, loaded over
# loopback alternately with the file's key `sk-bench` and with a database key of the same
# tenant and policy — the same process, the same work behind the lookup — ROUNDS times
# each, interleaved, so both are measured side by side in one run.
#
#   bash examples/bench_keys.sh [REQUESTS] [CONCURRENCY] [ROUNDS] [BIN_DIR]
#
# Loopback only; every load is bounded by REQUESTS and by the load tool's --seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
C=${2:-32}
ROUNDS=${3:-3}
source examples/bench_ports.sh
bench_setup "${4:-}"

TOKEN=bench-admin-token-0123456789
{
  printf '[database]\nurl = "sqlite://%s/records.db"\n\n' "$OUT"
  sed "s#^\[server\]#[server]\nadmin_token = \"$TOKEN\"#" "$OUT/bench.toml"
} > "$OUT/keys.toml"
grep -q admin_token "$OUT/keys.toml" || { echo "bench.toml has no [server] table" >&2; exit 1; }

port=$(free_port)
RUST_LOG=error "$BIN"/proxy --config "$OUT/keys.toml" --listen 127.0.0.1:"$port" --store memory > /dev/null 2>&1 &
pids+=($!)
wait_port "$port" 300 0.2
URL=http://127.0.0.1:$port

DBKEY=$(curl -sf "$URL/admin/keys" -H "authorization: Bearer $TOKEN" \
  -d '{"label":"bench-db","tenant":"bench","policy":"bench"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
# The key reaches the gateway's view through its follower (at once for its own change).
for _ in $(seq 1 50); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/chat/completions" -H "authorization: Bearer $DBKEY" \
    -d '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}')
  [ "$code" = 200 ] && break
  sleep 0.1
done
[ "$code" = 200 ] || { echo "the database key never answered 200 (last: $code)" >&2; exit 1; }

for round in $(seq 1 "$ROUNDS"); do
  for which in file database; do
    key=sk-bench; [ "$which" = database ] && key=$DBKEY
    echo "$which/round$round $("$BIN"/load --url "$URL/v1/chat/completions" --key "$key" --requests "$N" --concurrency "$C")"
  done
done
