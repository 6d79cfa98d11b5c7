#!/usr/bin/env bash
# Many instances' store, measured (T3, D6, D8): the gateway with every layer on
# (examples/bench.toml: slot, two request and two token tiers, provider RPM + TPM,
# capacity, failover, balance and budget) in front of the bundled fake upstream, in one
# run on
#   memory        the in-memory store (the baseline),
#   redis:none    one redis-server, every decision a round trip ([store] blocks = false),
#   redis:blocks  one redis-server, quota blocks for slots, windows and capacity,
#                 billing per request (money_blocks = false),
#   redis:all     one redis-server, billing blocks too (the default; examples/bench.toml
#                 says money_blocks = true),
#   cluster:all   a 3-master Redis Cluster (redis-server --cluster-enabled yes), all blocks,
# at 16 and 64 connections. For each: requests/s, p50/p99, the statuses (every non-2xx
# is a defect: a busy Redis must delay, not fail), the store failures the gateway
# counted (fail-open decisions and fail-closed 503s), and the Redis script calls
# (EVALSHA) and all commands per request from INFO commandstats.
#
#   bash examples/bench_redis.sh [REQUESTS]
#   BUSY=4 bash examples/bench_redis.sh      # the same on a busy host: 4 busy loops
#                                            # compete for the 2 cores (D8: busy is not
#                                            # dead — store calls must delay, not fail)
#
# Needs redis-server and redis-cli on PATH; starts its own on free loopback ports and
# stops everything on exit. Every run is bounded by REQUESTS (default 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
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

FAKE=$(free_port)
$BIN/fake_upstream --port "$FAKE" > /dev/null 2>&1 & pids+=($!)
wait_port "$FAKE"
CONFIG=$(mktemp --suffix .toml); dirs+=("$CONFIG")
sed "s#http://127.0.0.1:9100#http://127.0.0.1:$FAKE#" examples/bench.toml > "$CONFIG"
config_of() { # blocks variant → a config file with its [store] blocks settings
  local f="$CONFIG.$1.toml"; dirs+=("$f")
  case $1 in
    none) sed 's/^money_blocks = true$/blocks = false\nmoney_blocks = false/' "$CONFIG" > "$f" ;;
    blocks) sed 's/^money_blocks = true$/money_blocks = false/' "$CONFIG" > "$f" ;;
    *) cp "$CONFIG" "$f" ;;
  esac
  echo "$f"
}

redis_node() { # port extra-args... → starts one redis-server in its own directory
  local port=$1; shift
  local dir; dir=$(mktemp -d); dirs+=("$dir")
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" "$@" \
    > /dev/null 2>&1 & pids+=($!)
  wait_port "$port"
}

# A busy host (BUSY=N): N processes that only burn CPU, stopped on exit with the rest.
for _ in $(seq 1 "${BUSY:-0}"); do
  bash -c 'while :; do :; done' & pids+=($!)
done

RPORT=$(free_port)
redis_node "$RPORT"
CPORTS=()
for _ in 1 2 3; do
  p=$(free_port); bus=$(free_port)
  redis_node "$p" --cluster-enabled yes --cluster-port "$bus" --cluster-config-file nodes.conf
  CPORTS+=("$p")
done
redis-cli --cluster create "${CPORTS[@]/#/127.0.0.1:}" --cluster-yes > /dev/null
for _ in $(seq 1 100); do
  ok=1
  for p in "${CPORTS[@]}"; do
    redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' || ok=0
  done
  [ "$ok" = 1 ] && break; sleep 0.1
done
[ "$ok" = 1 ] || { echo "the cluster never became ok" >&2; exit 1; }

stats_ports() { # store → the redis ports whose INFO counts
  case $1 in
    redis) echo "$RPORT" ;;
    cluster) echo "${CPORTS[@]}" ;;
  esac
}
reset_stats() { for p in $(stats_ports "$1"); do redis-cli -p "$p" config resetstat > /dev/null; done; }
count_calls() { # store command-regex → calls summed over the store's nodes
  local total=0 n
  for p in $(stats_ports "$1"); do
    n=$(redis-cli -p "$p" info commandstats | tr -d '\r' \
      | awk -F'[:,=]' -v re="$2" '$1 ~ "^cmdstat_("re")$" { s += $3 } END { print s+0 }')
    total=$((total + n))
  done
  echo "$total"
}
flush() { for p in $(stats_ports "$1"); do redis-cli -p "$p" flushall > /dev/null; done; }

url_of() {
  case $1 in
    memory) echo memory ;;
    redis) echo "redis://127.0.0.1:$RPORT" ;;
    cluster) echo "redis://127.0.0.1:${CPORTS[0]}" ;; # one node: Cluster mode detected
  esac
}

printf '%-16s %8s %8s %8s  %-28s %9s %8s %8s\n' target rps p50_ms p99_ms statuses failures evalsha/r cmds/r
for c in 16 64; do
  for target in memory redis:none redis:blocks redis:all cluster:all; do
    store=${target%%:*}; variant=${target#*:}
    [ "$store" != memory ] && { flush "$store"; }
    port=$(free_port)
    RUST_LOG=error $BIN/proxy --config "$(config_of "$variant")" --listen 127.0.0.1:"$port" \
      --store "$(url_of $store)" > /dev/null 2>&1 &
    gw=$!; pids+=($gw)
    wait_port "$port"
    # Warm-up (connections, script cache), then counted.
    $BIN/load --url "http://127.0.0.1:$port/v1/chat/completions" --key sk-bench \
      --requests 500 --concurrency "$c" > /dev/null
    [ "$store" != memory ] && reset_stats "$store"
    out=$($BIN/load --url "http://127.0.0.1:$port/v1/chat/completions" --key sk-bench \
      --requests "$N" --concurrency "$c")
    failures=$(curl -s "http://127.0.0.1:$port/metrics" \
      | awk '/^portcullis_store_failures_total/ { s += $2 } END { print s+0 }')
    rps=$(echo "$out" | sed -n 's/.*rps=\([0-9]*\).*/\1/p')
    p50=$(echo "$out" | sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p')
    p99=$(echo "$out" | sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p')
    statuses=$(echo "$out" | sed -n 's/.*statuses=\(.*\)$/\1/p')
    if [ "$store" = memory ]; then
      per_eval=-; per_cmd=-
    else
      evals=$(count_calls "$store" 'evalsha|eval')
      cmds=$(count_calls "$store" '[a-z|]+')
      per_eval=$(awk -v a="$evals" -v n="$N" 'BEGIN { printf "%.2f", a / n }')
      per_cmd=$(awk -v a="$cmds" -v n="$N" 'BEGIN { printf "%.2f", a / n }')
    fi
    printf '%-16s %8s %8s %8s  %-28s %9s %8s %8s\n' "$target@$c" "$rps" "$p50" "$p99" "$statuses" \
      "$failures" "$per_eval" "$per_cmd"
    kill "$gw"; wait "$gw" 2>/dev/null || true
  done
done
