#!/usr/bin/env bash
# How much of a script's Redis "server time" is the script, and how much is a Redis
# that was idle a moment before (T3; the Redis operations guide): the same tiny
# scripts timed by Redis itself (`INFO commandstats`, usec_per_call) when calls come
# back to back (redis-benchmark, one connection) and when each call follows a short
# pause (0.2 ms and 2 ms), as it does behind a gateway that sends a request's calls one
# after another on a busy 2-core host.
#   - empty:          `return 1`
#   - billing prelude: time.lua + billing_prelude.lua + reading the clock, then return
#     (what every billing script runs before its own work), sent with EVALSHA
#   - as a function: the same code loaded once as a Redis Function library (FUNCTION
#     LOAD, Redis 7) and called with FCALL: its helpers are built once, not per call
#
#   bash examples/bench_redis_cold.sh [CALLS]
#
# Needs redis-server, redis-cli, redis-benchmark and python3; starts its own Redis on a
# free loopback port and stops it on exit. Bounded by CALLS (default 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
LUA=crates/portcullis-redis/src/lua
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
D=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$D" > /dev/null 2>&1 &
rpid=$!
trap 'kill $rpid 2>/dev/null || true; rm -rf "$D"' EXIT
for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done
cli() { redis-cli -p "$PORT" "$@"; }
per_call() { cli info commandstats | sed -n 's/^cmdstat_\(evalsha\|fcall\):.*usec_per_call=\([0-9.]*\).*/\2/p'; }

printf 'return 1' > "$D/empty.lua"
{ cat "$LUA/time.lua" "$LUA/billing_prelude.lua"; printf 'local now = now_ms(ARGV[1])\nreturn {0}\n'; } > "$D/prelude.lua"

{ echo "#!lua name=portcullis_cold"
  sed 's/^local floor = math.floor/local function floor(x) return math.floor(x) end/' \
    "$LUA/time.lua" "$LUA/billing_prelude.lua"
  echo "redis.register_function('cold_prelude', function(KEYS, ARGV)"
  echo "  local now = now_ms(ARGV[1]); cache, dirty, order = {}, {}, {}; return {0} end)"
} > "$D/library.lua"
cli function load "$(cat "$D/library.lua")" > /dev/null

printf '%-16s %14s %14s %14s\n' script "back to back" "0.2 ms apart" "2 ms apart"
for s in empty prelude function; do
  if [ "$s" = function ]; then call=(fcall cold_prelude); else
    call=(evalsha "$(cli script load "$(cat "$D/$s.lua")")"); fi
  cli config resetstat > /dev/null
  redis-benchmark -p "$PORT" -n "$N" -c 1 -q "${call[@]}" 3 a b c 0 s 5 0 id > /dev/null
  hot=$(per_call)
  spaced=()
  for pause in 0.0002 0.002; do
    cli config resetstat > /dev/null
    python3 - "$PORT" "${call[0]}" "${call[1]}" "$N" "$pause" <<'PY'
import socket, sys, time
port, verb, name = int(sys.argv[1]), sys.argv[2].upper(), sys.argv[3]
n, pause = int(sys.argv[4]), float(sys.argv[5])
args = [verb, name, '3', 'a', 'b', 'c', '0', 's', '5', '0', 'id']
cmd = ('*%d\r\n' % len(args) + ''.join('$%d\r\n%s\r\n' % (len(a), a) for a in args)).encode()
s = socket.create_connection(('127.0.0.1', port))
for _ in range(min(n, 500)):  # bounded: at most 500 spaced calls
    s.sendall(cmd)
    reply = s.recv(128)
    assert reply.startswith(b'*1') or reply.startswith(b':1'), reply
    time.sleep(pause)
PY
    spaced+=("$(per_call)")
  done
  printf '%-16s %11s µs %11s µs %11s µs\n' "$s" "$hot" "${spaced[0]}" "${spaced[1]}"
done
