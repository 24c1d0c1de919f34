#!/usr/bin/env bash
# One command: a Rust router, a Python worker streaming tokens behind it, and a Rust client
# (`zeronode stream`) asking the router for any `role=llm` node. Needs the workspace built
# (`cargo build -p cli`) and the Python package installed (`pip install ./clients/python`).
#   examples/python-tokens/run.sh ["your prompt"]
set -euo pipefail
cd "$(dirname "$0")/../.."
ZERONODE=${ZERONODE:-target/debug/zeronode}
PYTHON=${PYTHON:-python3}
ADDRESS=${ADDRESS:-tcp://127.0.0.1:0}
PROMPT=${1:-"the mesh speaks python now"}
pids=()
logs=$(mktemp -d)
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$logs"
}
trap cleanup EXIT

"$ZERONODE" node --router --id gateway --bind "$ADDRESS" > "$logs/gateway.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q "ready" "$logs/gateway.log" 2>/dev/null && break; sleep 0.1; done
# Port 0 picks a free port: the gateway prints the address it got.
GATEWAY=$(sed -n 's/^listening on //p' "$logs/gateway.log" | head -1)

"$PYTHON" examples/python-tokens/worker.py --connect "$GATEWAY" > "$logs/worker.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q "joined" "$logs/worker.log" 2>/dev/null && break; sleep 0.1; done

# The client joins the gateway only; the gateway forwards by filter to the Python worker
# and relays each token as it comes.
"$ZERONODE" stream -c "$GATEWAY" --any -f role=llm generate \
  "{\"prompt\": \"$PROMPT\", \"max_tokens\": 12}"
