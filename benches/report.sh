#!/usr/bin/env bash
# The whole performance report in one command, as PERFORMANCE.md quotes it:
#
#   benches/report.sh              # every layer (4 sizes x 4 windows, median of 5 rounds),
#                                  # the scale run (100 and 1,000 peers), and the peers
#   GATE=1 benches/report.sh       # the same, and exit 1 when a layer is under its floor
#
# Results, tables and SVG plots go to benches/report/ (OUT=dir to change): results.* and
# throughput.svg / latency.svg (layers), scale.* (scale), peers/ (NATS and Moleculer beside
# raw libzmq and our rows). Settings by environment: ROUNDS (5: the layers, which the gate
# judges; a window-1 rate moves about 8% between rounds on a noisy 2-core machine, and the
# median of 5 holds still better than that of 3), OTHER_ROUNDS (3: the scale and peers runs),
# DURATION (2 s measured per point), WARMUP (1 s), PEERS=0 to skip the peers (they install
# Debian's nats-server and the npm packages of the Moleculer row; see benches/peers/README.md).
#
# About 35 minutes on 2 cores. Needs at least 2 cores; everything runs on 127.0.0.1.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/benches/report}"
rounds="${ROUNDS:-5}"
other_rounds="${OTHER_ROUNDS:-3}"
duration="${DURATION:-2}"
warmup="${WARMUP:-1}"
say() { printf 'report: %s\n' "$*" >&2; }

say "building the harness (release)"
cargo build --release --quiet -p benches
bin="$root/target/release/benches"

say "layers: every size and window, $rounds rounds, ${duration}s per point -> $out"
status=0
"$bin" --rounds "$rounds" --duration "$duration" --warmup "$warmup" --out "$out" || status=$?

say "scale: a hub with 100 and 1,000 peer nodes"
env -u GATE "$bin" scale --rounds "$other_rounds" --out "$out"

if [ "${PEERS:-1}" != 0 ]; then
	say "peers: NATS and Moleculer beside raw libzmq, transport and node"
	env -u GATE "$root/benches/peers/run.sh" --sizes 100,1000 --windows 1,10,100,1000 \
		--duration "$duration" --warmup "$warmup" --rounds "$other_rounds" --out "$out/peers"
fi

# The layers' run decides: 1 when GATE=1 found a layer under its floor, 2 when it could
# not judge.
exit "$status"
