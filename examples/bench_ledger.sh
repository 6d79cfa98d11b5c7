#!/usr/bin/env bash
# The cost of the ledger (B6), side by side in one run: two gateways with every layer on
# (examples/bench.toml, in-memory store) in front of one fake upstream, one writing its
# usage records to a JSON-lines file (`[server] usage_log`, no records database), the
# other to the ledger in an SQLite records database (through its spool) — loaded
# alternately, ROUNDS times each; then the ledger's batched writer alone, records per
# second on SQLite and, when PG_URL is given, on PostgreSQL.
#
#   bash examples/bench_ledger.sh [REQUESTS] [CONCURRENCY] [ROUNDS] [BIN_DIR]
#   PG_URL=postgres://postgres@127.0.0.1/test bash examples/bench_ledger.sh
#
# Loopback only; every load is bounded by REQUESTS and by the load tool's --seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
C=${2:-32}
ROUNDS=${3:-3}
source examples/bench_ports.sh
if [ -z "${4:-}" ]; then
  cargo build --release -q -p portcullis-examples --example ledger_writer
fi
bench_setup "${4:-}"

{
  printf '[database]\nurl = "none"\n\n'
  sed "s#^\[server\]#[server]\nusage_log = \"$OUT/usage.jsonl\"#" "$OUT/bench.toml"
} > "$OUT/jsonl.toml"
{
  printf '[database]\nurl = "sqlite://%s/records.db"\n\n' "$OUT"
  cat "$OUT/bench.toml"
} > "$OUT/ledger.toml"

start() { # config → PORT
  local port
  port=$(free_port)
  RUST_LOG=error "$BIN"/proxy --config "$1" --listen 127.0.0.1:"$port" --store memory > /dev/null 2>&1 &
  pids+=($!)
  wait_port "$port" 300 0.2
  PORT=$port
}
start "$OUT/jsonl.toml"; JSONL=$PORT
start "$OUT/ledger.toml"; LEDGER=$PORT

for round in $(seq 1 "$ROUNDS"); do
  for which in jsonl ledger; do
    port=$JSONL; [ "$which" = ledger ] && port=$LEDGER
    echo "$which/round$round $("$BIN"/load --url "http://127.0.0.1:$port/v1/chat/completions" --key sk-bench --requests "$N" --concurrency "$C")"
  done
done
sleep 2   # the writers drain
echo "jsonl lines: $(wc -l < "$OUT/usage.jsonl")  ledger rows: $(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from pcx_ledger').fetchone()[0])" "$OUT/records.db")"

WRITER=${4:-target/release/examples}/ledger_writer
echo "writer/sqlite $("$WRITER" sqlite 100000)"
if [ -n "${PG_URL:-}" ]; then
  echo "writer/postgres $("$WRITER" "$PG_URL" 100000)"
fi
