# Loopback ports for the bench scripts, sourced by each once it is at the workspace
# root (`source examples/bench_ports.sh`).

# A port free on 127.0.0.1 now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_port PORT [TRIES] [GAP]: returns once PORT accepts a connection, trying TRIES
# times GAP seconds apart (default 100 × 0.1 s); exits the script if it never does.
wait_port() {
  local tries=${2:-100} gap=${3:-0.1}
  for _ in $(seq 1 "$tries"); do
    (echo > /dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep "$gap"
  done
  echo "port $1 never opened" >&2
  exit 1
}

# bench_setup [DIR]: the common start of the scripts that compare the bare forwarder
# with the full stack. Sets BIN to DIR (release binaries of another build) or to this
# checkout's, built; OUT to a scratch directory removed on exit, with OUT/bench.toml
# pointing at a fake upstream started on a free port; pids to the processes killed on
# exit (add the ones you start).
bench_setup() {
  BIN=${1:-}
  if [ -z "$BIN" ]; then
    cargo build --release -q -p portcullis-examples --example proxy --example load --example fake_upstream
    BIN=target/release/examples
  fi
  OUT=$(mktemp -d)
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$OUT"' EXIT
  FAKE=$(free_port)
  "$BIN"/fake_upstream --port "$FAKE" > /dev/null 2>&1 & pids+=($!)
  wait_port "$FAKE" 300 0.2
  sed "s#http://127.0.0.1:9100#http://127.0.0.1:$FAKE#" examples/bench.toml > "$OUT/bench.toml"
}
