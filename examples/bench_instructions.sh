#!/usr/bin/env bash
# Instructions the gateway executes per request (all its threads), bare forwarder
# against all seven layers, counted by valgrind's callgrind: a figure that does not
# move with the load on a shared machine, unlike requests/s. Each target serves N and
# then 3N small OpenAI chat requests (concurrency 8) from the fake upstream; the
# difference divided by 2N leaves start-up and shutdown out. The third and fourth rows
# count the full stack with the same OpenAI requests served by an Anthropic and by a
# Gemini channel (translated both ways, X1–X2), beside the same-dialect row.
#
#   bash examples/bench_instructions.sh [N] [DIR]
#
# DIR holds `proxy`, `load` and `fake_upstream` release binaries of another build (for
# example a copy of `target/release/examples` taken before a change); without it, this
# checkout's are built and counted.
#
# Needs valgrind (Debian: apt-get install valgrind). Loopback only; ~2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
BIN=${2:-}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
source examples/bench_ports.sh
bench_setup "$BIN"

# The same configuration with the channel an Anthropic one, and a Gemini one: every
# request translated.
sed 's#^vendor = "openai"#vendor = "anthropic"#' "$OUT/bench.toml" > "$OUT/translated.toml"
sed 's#^vendor = "openai"#vendor = "gemini"#' "$OUT/bench.toml" > "$OUT/gemini.toml"

total() { # bare(0/1) requests [config] → instructions of the whole gateway run
  local bare=$1 n=$2 config=${3:-$OUT/bench.toml} port gw
  port=$(free_port)
  local flags=(--config "$config" --listen 127.0.0.1:"$port" --store memory)
  [ "$bare" = 1 ] && flags+=(--bare)
  RUST_LOG=error valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$bare.$n" \
    $BIN/proxy "${flags[@]}" > /dev/null 2>&1 &
  gw=$!
  wait_port "$port" 300 0.2
  $BIN/load --url "http://127.0.0.1:$port/v1/chat/completions" --key sk-bench \
    --requests "$n" --concurrency 8 > /dev/null
  kill -INT "$gw"; wait "$gw" 2>/dev/null || true
  callgrind_annotate "$OUT/cg.$bare.$n" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}

for bare in 1 0; do
  a=$(total $bare "$N"); b=$(total $bare $((3 * N)))
  label=$([ $bare = 1 ] && echo "bare forwarder" || echo "all seven layers")
  echo "$label: $(( (b - a) / (2 * N) )) instructions per request"
done
a=$(total 0 "$N" "$OUT/translated.toml"); b=$(total 0 $((3 * N)) "$OUT/translated.toml")
echo "all seven layers, translated to an Anthropic channel: $(( (b - a) / (2 * N) )) instructions per request"
a=$(total 0 "$N" "$OUT/gemini.toml"); b=$(total 0 $((3 * N)) "$OUT/gemini.toml")
echo "all seven layers, translated to a Gemini channel: $(( (b - a) / (2 * N) )) instructions per request"
