#!/usr/bin/env bash
# Where the gateway's CPU time goes, bare forwarder against all seven layers: each
# target serves N small OpenAI chat requests (16 connections) from the fake upstream
# while `perf` samples the gateway process by CPU clock (a software event: it works in
# a VM without hardware counters). Prints the µs of CPU per request of the gateway's
# own functions (libc's memmove and the allocator included, the kernel left out) that
# grow most from the bare forwarder to the full stack. Unlike callgrind's instruction
# counts (`bench_instructions.sh`) this weighs what each instruction costs: a division,
# a cache miss, a contended atomic.
#
#   bash examples/bench_profile.sh [N] [DIR]
#
# DIR holds `proxy`, `load` and `fake_upstream` release binaries of another build; without
# it, this checkout's are built. Needs perf (Debian: apt-get install linux-perf) and
# permission to sample (kernel.perf_event_paranoid ≤ 2 for one's own processes).
# Loopback only; bounded by N requests per target.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-60000}
BIN=${2:-}
command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 1; }
source examples/bench_ports.sh
bench_setup "$BIN"

profile() { # bare(0/1) → $OUT/symbols.<bare>: "<µs of CPU per request>\t<symbol>"
  local bare=$1 port gw rec
  port=$(free_port)
  local flags=(--config "$OUT/bench.toml" --listen 127.0.0.1:"$port" --store memory)
  [ "$bare" = 1 ] && flags+=(--bare)
  RUST_LOG=error $BIN/proxy "${flags[@]}" > /dev/null 2>&1 & gw=$!; pids+=($gw)
  wait_port "$port" 300 0.2
  # Warm-up: connections, pools, the stores' first keys.
  $BIN/load --url "http://127.0.0.1:$port/v1/chat/completions" --key sk-bench \
    --requests 2000 --concurrency 16 > /dev/null
  perf record -q -e cpu-clock -F 4999 -p "$gw" -o "$OUT/perf.$bare" > /dev/null 2>&1 & rec=$!
  sleep 0.5
  $BIN/load --url "http://127.0.0.1:$port/v1/chat/completions" --key sk-bench \
    --requests "$N" --concurrency 16 | sed "s/^/$([ "$bare" = 1 ] && echo bare || echo full): /"
  kill -INT "$rec"; wait "$rec" 2>/dev/null || true
  kill "$gw"; wait "$gw" 2>/dev/null || true
  perf report -i "$OUT/perf.$bare" --no-children -q --sort sym -F period,sym 2>/dev/null \
    | awk -v n="$N" '$2 == "[.]" { p = $1; $1 = ""; $2 = ""; sub(/^  */, ""); s[$0] += p }
        END { for (k in s) printf "%.3f\t%s\n", s[k] / n / 1000, k }' \
    > "$OUT/symbols.$bare"
}

profile 1
profile 0
echo
echo "µs of CPU per request: full - bare, full, function"
awk -F'\t' 'NR == FNR { bare[$2] = $1; next } { full[$2] = $1 }
  END {
    for (k in full) { d = full[k] - bare[k]; tf += full[k]; printf "%8.3f %8.3f  %s\n", d, full[k], k }
    for (k in bare) tb += bare[k]
    printf "%8.3f %8.3f  (all the gateway'"'"'s own code; bare %.3f)\n", tf - tb, tf, tb
  }' "$OUT/symbols.1" "$OUT/symbols.0" | sort -rn | head -30
