#!/usr/bin/env bash
# CPU and context switches per request, under `perf stat`, for rows of the harness:
#
#   benches/cpu.sh BIN [BIN ...]     # each a `benches` or `zeronode` binary
#
# For each ROW:WINDOW of ROWS and each binary in turn (ROUNDS times, alternating), runs the
# harness on that one row and window under `perf stat -e task-clock,context-switches` (the
# server and client processes and the idle harness parent together), and divides by the
# requests the run made: the measured ones (`completed` in results.csv) plus the warm-up's,
# counted at the measured rate. Prints one line per run and, per row and binary, the median
# of the rounds: CPU microseconds per request (both processes) and context switches per
# request.
#
# CPU per request is steadier than a rate on a shared machine: other work takes cores, not
# instructions. A context switch is a thread that went to sleep and was woken: every
# hand-off of a request from one thread to another that found it asleep costs one, so a
# new hand-off on the path shows here even where the rate hides it.
#
# Settings by environment: ROWS ("floor:1 node-native-block-on:1 raw:100
# node-native-block-on:100"), SIZE (100), DURATION (3 s), WARMUP (0.5 s), ROUNDS (3),
# KEEP=DIR to keep the runs' reports and perf outputs. Needs `perf` and
# kernel.perf_event_paranoid <= 2 (counting one's own processes).
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN ...]   (env: ROWS SIZE DURATION WARMUP ROUNDS KEEP)" >&2; exit 2; }
command -v perf >/dev/null || { echo "cpu.sh: needs perf (linux-perf)" >&2; exit 2; }
rows="${ROWS:-floor:1 node-native-block-on:1 raw:100 node-native-block-on:100}"
size="${SIZE:-100}"
duration="${DURATION:-3}"
warmup="${WARMUP:-0.5}"
rounds="${ROUNDS:-3}"
keep="${KEEP:-$(mktemp -d)}"
mkdir -p "$keep"

# The command line of a binary's harness: `zeronode` reaches it through `bench`.
harness() {
	local bin
	bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
	[ -x "$bin" ] || { echo "cpu.sh: $1 is not an executable" >&2; exit 2; }
	case "$(basename "$bin")" in
	zeronode*) echo "$bin bench" ;;
	*) echo "$bin" ;;
	esac
}

results="$keep/cpu.csv"
echo "row,window,bin,round,requests,cpu_ms,switches,cpu_us_per_request,switches_per_request" >"$results"
n=0
for round in $(seq 1 "$rounds"); do
	# Alternate the order of the binaries from round to round (a drift favours no one).
	bins=("$@")
	if [ $((round % 2)) -eq 0 ]; then
		mapfile -t bins < <(printf '%s\n' "$@" | tac)
	fi
	for spec in $rows; do
		row="${spec%%:*}"
		window="${spec##*:}"
		for bin in "${bins[@]}"; do
			n=$((n + 1))
			out="$keep/run-$n"
			# shellcheck disable=SC2046
			perf stat -x, -e task-clock,context-switches -o "$out.perf" -- \
				$(harness "$bin") --layers "$row" --sizes "$size" --windows "$window" \
				--duration "$duration" --warmup "$warmup" --out "$out" >"$out.log" 2>&1
			line=$(awk -F, -v r="$row" -v w="$window" '$1 == r && $3 == w' "$out/results.csv")
			[ -n "$line" ] || { echo "cpu.sh: no $row at window $window in $out/results.csv" >&2; exit 1; }
			cpu=$(awk -F, '$3 ~ /^task-clock/ {print $1}' "$out.perf")
			switches=$(awk -F, '$3 ~ /^context-switches/ {print $1}' "$out.perf")
			awk -F, -v cpu="$cpu" -v sw="$switches" -v warm="$warmup" -v bin="$bin" -v round="$round" '{
				requests = $10 + $4 * warm
				printf "%s,%s,%s,%d,%d,%.0f,%d,%.2f,%.4f\n", $1, $3, bin, round, requests, cpu, sw, cpu * 1000 / requests, sw / requests
			}' <<<"$line" | tee -a "$results"
		done
	done
done

echo
echo "median of $rounds rounds: row window binary | CPU us/request (both processes) | context switches/request"
tail -n +2 "$results" | sort -t, -k1,1 -k2,2n -k3,3 | awk -F, '
	function median(list,   a, k, i, j, t) {
		k = split(list, a, " ")
		for (i = 2; i <= k; i++)
			for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	{ key = $1 " " $2 " " $3; cpu[key] = cpu[key] " " $8; sw[key] = sw[key] " " $9; if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
	END { for (i = 1; i <= n; i++) printf "%s %8.2f %8.3f\n", order[i], median(cpu[order[i]]), median(sw[order[i]]) }'
echo "(runs in $results)"
