#!/usr/bin/env bash
# Starts the device simulator and settle (Streamable HTTP, embedded store),
# prints how to connect a client, and stops both on Ctrl-C.
# Usage: scripts/run.sh SIM_ADDR HTTP_ADDR RUN_DIR (the Makefile passes them).
set -euo pipefail
sim_addr=${1:-127.0.0.1:8081}
http_addr=${2:-127.0.0.1:8080}
run_dir=${3:-.run}
mkdir -p "$run_dir"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# Wait until a log file shows a line, or the process dies.
wait_for() {
  local pid=$1 file=$2 pattern=$3
  for _ in $(seq 1 300); do
    grep -q "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "failed to start; its log:"; cat "$file"; exit 1; }
    sleep 0.1
  done
  echo "timed out waiting for: $pattern (log: $file)"; exit 1
}

./target/release/device-sim --addr "$sim_addr" >"$run_dir/sim.out" 2>"$run_dir/sim.log" &
pids+=($!)
wait_for "${pids[-1]}" "$run_dir/sim.out" "listening"

# The live view's token: yours if SETTLE_UI_TOKEN is set, else a fresh one
# for this run. It reaches settle through the environment, not the
# command line, which other users can read.
export SETTLE_UI_TOKEN=${SETTLE_UI_TOKEN:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}

# The plugin file rather than the built-in copy, so that rebuilding it
# (make guest) swaps it in while settle serves.
./target/release/settle serve --http "$http_addr" --ui \
  --plugin target/wasm32-wasip2/release/settle_devices.wasm \
  --device-api "http://$sim_addr" --store "$run_dir/settle.redb" 2>"$run_dir/settle.log" &
pids+=($!)
wait_for "${pids[-1]}" "$run_dir/settle.log" "serving MCP"

cat <<TXT

settle is running.
  MCP endpoint:     http://$http_addr/mcp   (Streamable HTTP, protocol 2026-07-28 and 2025-11-25)
  live view:        http://$http_addr/ui?token=$SETTLE_UI_TOKEN
                    (open it once with the token; the page then keeps it for this tab.
                     Set SETTLE_UI_TOKEN before make run to choose your own.)
  device simulator: http://$sim_addr        (devices ac-living, ac-bedroom; 4 s actuation delay)
  logs:             $run_dir/settle.log, $run_dir/sim.log
  store:            $run_dir/settle.redb

Client config (Claude Desktop, VS Code, Cursor: "mcpServers"):
{
  "mcpServers": {
    "settle": { "type": "http", "url": "http://$http_addr/mcp" }
  }
}

Or launch settle over stdio from the client instead:
{
  "mcpServers": {
    "settle": {
      "command": "$PWD/target/release/settle",
      "args": ["serve", "--stdio", "--device-api", "http://$sim_addr",
               "--store", "$PWD/$run_dir/settle-stdio.redb"]
    }
  }
}

MCP Inspector (one line):
npx -y @modelcontextprotocol/inspector@2.12.0 --cli http://$http_addr/mcp --method tools/call --tool-name set_temperature --tool-arg device_id=ac-living --tool-arg temperature=24

Press Ctrl-C to stop.
TXT
wait -n "${pids[@]}"
