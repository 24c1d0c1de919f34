#!/usr/bin/env bash
# One command: a Rust router, a Python worker streaming tokens behind it, and a Rust client
# (`zeronode stream`) asking the router for any `role=llm` node. Needs the workspace built
# (`cargo build -p cli`) and the Python package installed (`pip install ./clients/python`).
#   examples/python-tokens/run.sh ["your prompt"]
set -euo pipefail
cd "$(dirname "$0")/../.."
ZERONODE=${ZERONODE:-target/debug/zeronode}
PYTHON=${PYTHON:-python3}
PORT=${PORT:-7700}
PROMPT=${1:-"the mesh speaks python now"}
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$ZERONODE" node --router --id gateway --bind "tcp://127.0.0.1:$PORT" > /tmp/zeronode-gateway.log 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "ready" /tmp/zeronode-gateway.log 2>/dev/null && break; sleep 0.1; done

"$PYTHON" examples/python-tokens/worker.py --connect "tcp://127.0.0.1:$PORT" > /tmp/zeronode-worker.log 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "joined" /tmp/zeronode-worker.log 2>/dev/null && break; sleep 0.1; done

# The client joins the gateway only; the gateway forwards by filter to the Python worker
# and relays each token as it comes.
"$ZERONODE" stream -c "tcp://127.0.0.1:$PORT" --any -f role=llm generate \
  "{\"prompt\": \"$PROMPT\", \"max_tokens\": 12}"
