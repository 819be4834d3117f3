#!/usr/bin/env bash
# Starts Redis (with append-only persistence), the device simulator and two
# settle replicas sharing the Redis store, prints both URLs, and stops
# everything on Ctrl-C.
# Usage: scripts/run-cluster.sh SIM_ADDR RUN_DIR (the Makefile passes them).
set -euo pipefail
sim_addr=${1:-127.0.0.1:8081}
run_dir=${2:-.run}
redis_port=${REDIS_PORT:-6380}
mkdir -p "$run_dir/redis"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

wait_for() {
  local pid=$1 file=$2 pattern=$3
  for _ in $(seq 1 300); do
    grep -q "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "failed to start; its log:"; cat "$file"; exit 1; }
    sleep 0.1
  done
  echo "timed out waiting for: $pattern (log: $file)"; exit 1
}

redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$run_dir/redis" \
  --appendonly yes --appendfsync always --save "" >"$run_dir/redis.log" 2>&1 &
pids+=($!)
wait_for "${pids[-1]}" "$run_dir/redis.log" "Ready to accept connections"

./target/release/device-sim --addr "$sim_addr" >"$run_dir/sim.out" 2>"$run_dir/sim.log" &
pids+=($!)
wait_for "${pids[-1]}" "$run_dir/sim.out" "listening"

store="redis://127.0.0.1:$redis_port/0"
# Replicas must agree on the key that seals MRTR state: a retry may reach
# either of them.
export SETTLE_PLUGIN_CONFIG="request_state_key=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
urls=()
for port in 8080 8082; do
  ./target/release/settle serve --http "127.0.0.1:$port" --device-api "http://$sim_addr" \
    --store "$store" 2>"$run_dir/settle-$port.log" &
  pids+=($!)
  wait_for "${pids[-1]}" "$run_dir/settle-$port.log" "serving MCP"
  urls+=("http://127.0.0.1:$port/mcp")
done

cat <<TXT

Two settle replicas share one Redis store; a task created through one can be
read, answered and cancelled through the other.
  replica 1:        ${urls[0]}   (/healthz, /readyz beside it)
  replica 2:        ${urls[1]}
  redis:            $store   (append-only file in $run_dir/redis)
  device simulator: http://$sim_addr
  logs:             $run_dir/settle-8080.log, $run_dir/settle-8082.log, $run_dir/redis.log

Press Ctrl-C to stop.
TXT
wait -n "${pids[@]}"
