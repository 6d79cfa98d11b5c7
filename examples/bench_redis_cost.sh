#!/usr/bin/env bash
# Where the Redis store's cost goes (T3): the gateway with
# every layer on (examples/bench.toml) in front of the fake upstream, on memory and on
# one redis-server, in one run, twice each (memory, redis, memory, redis):
#   - CPU time per request of each process (gateway, redis-server, fake upstream, load
#     generator), from /proc/<pid>/stat before and after N requests;
#   - Redis time per script call, by script (SLOWLOG with a 0 µs threshold during the
#     last redis run: mean and median µs per call, named by the first key's family).
#
#   bash examples/bench_redis_cost.sh [REQUESTS] [CONNECTIONS]
#
# Needs redis-server, redis-cli and python3 on PATH; starts its own on free loopback
# ports and stops everything on exit. Bounded by REQUESTS (default 10000).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}; C=${2:-16}
cargo build --release -q -p portcullis-examples --example proxy --example load --example fake_upstream
BIN=target/release/examples
pids=(); dirs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in "${dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT
source examples/bench_ports.sh
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; } # utime + stime, in clock ticks
HZ=$(getconf CLK_TCK)

FAKE=$(free_port)
$BIN/fake_upstream --port "$FAKE" > /dev/null 2>&1 & fpid=$!; pids+=($fpid)
wait_port "$FAKE"
D=$(mktemp -d); dirs+=("$D")
CONFIG="$D/bench.toml"
sed "s#http://127.0.0.1:9100#http://127.0.0.1:$FAKE#" examples/bench.toml > "$CONFIG"
RP=$(free_port)
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$D" > /dev/null 2>&1 & rpid=$!; pids+=($rpid)
wait_port "$RP"

printf '%-7s %7s   %s\n' store rps "CPU µs per request: gateway / redis-server / fake upstream / load generator"
for store in memory redis memory redis; do
  url=memory; [ "$store" = redis ] && url="redis://127.0.0.1:$RP"
  P=$(free_port)
  RUST_LOG=error $BIN/proxy --config "$CONFIG" --listen 127.0.0.1:"$P" --store "$url" > /dev/null 2>&1 & gpid=$!; pids+=($gpid)
  wait_port "$P"
  $BIN/load --url "http://127.0.0.1:$P/v1/chat/completions" --key sk-bench --requests 500 --concurrency "$C" > /dev/null
  if [ "$store" = redis ]; then
    redis-cli -p "$RP" config set slowlog-log-slower-than 0 > /dev/null
    redis-cli -p "$RP" config set slowlog-max-len 1000000 > /dev/null
    redis-cli -p "$RP" slowlog reset > /dev/null
  fi
  g0=$(ticks $gpid); r0=$(ticks $rpid); f0=$(ticks $fpid)
  out=$( { /usr/bin/time -f "%U %S" $BIN/load --url "http://127.0.0.1:$P/v1/chat/completions" \
    --key sk-bench --requests "$N" --concurrency "$C"; } 2>&1 )
  g1=$(ticks $gpid); r1=$(ticks $rpid); f1=$(ticks $fpid)
  load_s=$(echo "$out" | tail -1 | awk '{print $1+$2}')
  rps=$(echo "$out" | sed -n 's/.*rps=\([0-9]*\).*/\1/p')
  st=$(echo "$out" | sed -n 's/.*statuses=\(.*\)$/\1/p')
  awk -v s="$store" -v n="$N" -v hz="$HZ" -v g=$((g1-g0)) -v r=$((r1-r0)) -v f=$((f1-f0)) \
      -v l="$load_s" -v rps="$rps" -v st="$st" 'BEGIN {
    u = 1e6 / hz / n
    printf "%-7s %7d   %5.1f / %5.1f / %5.1f / %5.1f   %s\n", s, rps, g*u, r*u, f*u, l*1e6/n, st }'
  if [ "$store" = redis ]; then
    redis-cli -p "$RP" config set slowlog-log-slower-than 10000 > /dev/null
    redis-cli -p "$RP" --json slowlog get 1000000 > "$D/slowlog.json"
  fi
  kill "$gpid"; wait "$gpid" 2>/dev/null || true
done

echo
echo "Redis time per script call in the last redis run (SLOWLOG; the first key names the script's family):"
python3 - "$D/slowlog.json" <<'PY'
import collections, json, re, sys
entries = json.loads(open(sys.argv[1], 'rb').read().decode('latin-1'))
by = collections.defaultdict(list)
for e in entries:
    args = e[3]
    if not args or args[0].lower() != 'evalsha' or len(args) < 4:
        continue
    key = re.sub(r'[\x00-\x1f]', ' ', args[3])
    key = re.sub(r'(att|cred)-[0-9a-f-]+', r'\1-…', key)
    by[(args[1][:8], key)].append(e[2])
rows = sorted(by.items(), key=lambda kv: -sum(kv[1]))
for (sha, key), v in rows:
    if len(v) < 20:
        continue
    v.sort()
    print(f"  {sha} {key[:56]:<56} calls {len(v):>6}  mean {sum(v)/len(v):6.1f} µs  p50 {v[len(v)//2]:4d} µs")
PY
