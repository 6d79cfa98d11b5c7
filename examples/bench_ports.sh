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
