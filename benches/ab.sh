#!/usr/bin/env bash
# A/B of the `node` row between two builds of the harness, on this machine, in one sitting:
#
#   benches/ab.sh A_BIN B_BIN      # A = baseline, B = new; each a `benches` or `zeronode`
#                                  # binary (a `zeronode` one is run as `zeronode bench ...`)
#
# Runs A and B in turn, ROUNDS times each, every run measuring the node row at a SIZE-byte
# payload and each of WINDOWS (one harness run, one point per window), then prints every
# round's requests/s and, per window, the median of A, of B, and of the rounds' B/A ratios.
# The order alternates A B, B A, A B, ... so that a drift of the machine's load over the
# sitting does not favour one side; each round's ratio compares two runs seconds apart.
#
# Beside each round: how much of a core other work on the machine took during each run
# (from /proc/stat less this script's own processes); a round where it is high is suspect.
#
# Settings by environment: ROUNDS (3), DURATION (3 s measured per point), WARMUP (1 s),
# SIZE (100), WINDOWS (1,100), LAYER (node; node-block-on for the client loop as the
# runtime's block_on future, where both binaries have that row), KEEP=DIR to keep every run's report in DIR (a temporary
# directory otherwise), PRIME=0 to skip the short uncounted run of each binary first.
# Uses only flags and files the harness has long had (--sizes --windows --layers
# --duration --warmup --out, and results.csv in --out), so any two builds of it compare,
# older ones included.
#
# About ROUNDS x 2 x (number of windows) x (WARMUP + DURATION + 0.3) seconds, and 5 s of
# priming: 55 s by default. A = B (the same binary twice) shows the noise to expect of a
# ratio; on this shared 2-core machine that noise is large (see benches/README.md).
set -euo pipefail

usage() {
	echo "usage: $0 A_BIN B_BIN   (env: ROUNDS DURATION WARMUP SIZE WINDOWS KEEP PRIME)" >&2
	exit 2
}
[ $# -eq 2 ] || usage
rounds="${ROUNDS:-3}"
duration="${DURATION:-3}"
warmup="${WARMUP:-1}"
size="${SIZE:-100}"
windows="${WINDOWS:-1,100}"
layer="${LAYER:-node}"
case "$rounds" in '' | *[!0-9]* | 0) echo "ab: ROUNDS must be a positive integer" >&2; exit 2 ;; esac

# The command that runs a binary's harness, into the array named $1: `zeronode` reaches it
# through its `bench` subcommand, a `benches` binary directly.
declare -a cmd_a cmd_b cmd
harness() {
	local -n into="$1"
	local bin="$2"
	if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
		echo "ab: $bin is not an executable" >&2
		exit 2
	fi
	bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
	case "$(basename "$bin")" in
	zeronode*) into=("$bin" bench) ;;
	*) into=("$bin") ;;
	esac
}
harness cmd_a "$1"
harness cmd_b "$2"

if [ -n "${KEEP:-}" ]; then
	dir="$KEEP"
	mkdir -p "$dir"
else
	dir="$(mktemp -d -t zeronode-ab.XXXXXX)"
	trap 'rm -rf "$dir"' EXIT
fi
results="$dir/rates.txt"     # one line per point: side round window rate
others_file="$dir/others.txt" # one line per run: side round cores-taken-by-other-work
: >"$results"
: >"$others_file"

say() { printf 'ab: %s\n' "$*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown; }

# CPU seconds the whole machine has been busy (/proc/stat: user nice system irq softirq
# steal); and `times`, whose second line is the CPU of this script's reaped children (each
# harness run with its server and client processes). `times` must run in this shell, not in
# a `$(...)` subshell, so it writes to a file. Over a run, the machine's CPU less the
# children's is what something else took meanwhile (and the kernel's share of the loopback
# traffic that is charged to no process, if any: 0.00 to 0.05 of a core on a quiet machine
# here).
tick="$(getconf CLK_TCK 2>/dev/null || echo 100)"
machine_cpu() {
	awk -v tick="$tick" '/^cpu / { printf "%.2f\n", ($2 + $3 + $4 + $7 + $8 + $9) / tick }' \
		/proc/stat 2>/dev/null || echo 0
}
children_cpu() {
	awk 'NR == 2 {
		total = 0
		for (i = 1; i <= 2; i++) { split($i, t, "m"); total += t[1] * 60 + t[2] }
		printf "%.2f\n", total
	}' "$1"
}

# One harness run of side $1 (A or B) in round $2: the node row at every window.
run_side() {
	local side="$1" round="$2" out="$dir/$1-$2"
	local -a cmd
	if [ "$side" = A ]; then cmd=("${cmd_a[@]}"); else cmd=("${cmd_b[@]}"); fi
	local machine0 started0
	machine0="$(machine_cpu)"
	times >"$dir/times0"
	started0="$(date +%s.%N)"
	if ! env -u GATE "${cmd[@]}" --sizes "$size" --windows "$windows" --layers "$layer" \
		--duration "$duration" --warmup "$warmup" --out "$out" >"$out.log" 2>&1; then
		say "round $round, $side failed (${cmd[*]}); its output:"
		cat "$out.log" >&2
		exit 1
	fi
	# results.csv: layer,size,window,rate_per_s,...
	awk -F, -v side="$side" -v round="$round" -v layer="$layer" \
		'NR > 1 && $1 == layer { print side, round, $3, $4 }' "$out/results.csv" >>"$results"
	times >"$dir/times1"
	local rates others
	rates="$(awk -v s="$side" -v r="$round" '$1 == s && $2 == r { printf " w%s %.0f/s", $3, $4 }' "$results")"
	others="$(awk -v m0="$machine0" -v m1="$(machine_cpu)" -v c0="$(children_cpu "$dir/times0")" \
		-v c1="$(children_cpu "$dir/times1")" -v t0="$started0" -v t1="$(date +%s.%N)" 'BEGIN {
		other = (m1 - m0) - (c1 - c0)
		printf "%.2f", (t1 > t0 && other > 0) ? other / (t1 - t0) : 0
	}')"
	say "round $round $side:$rates; other work took $others of a core"
	echo "$side $round $others" >>"$others_file"
}

say "A: ${cmd_a[*]}"
say "B: ${cmd_b[*]}"
say "$layer row, $size B, windows $windows; $rounds rounds of A and B; ${warmup}s + ${duration}s per point; load $(load)"
started=$SECONDS
# One short run of each binary first, not counted: in a trial of A = B the very first run
# was 20% slower at window 100 than every run after it (a cold binary, page cache, CPU
# clocks), which would have counted against A in round 1.
if [ "${PRIME:-1}" != 0 ]; then
	for side in A B; do
		if [ "$side" = A ]; then cmd=("${cmd_a[@]}"); else cmd=("${cmd_b[@]}"); fi
		env -u GATE "${cmd[@]}" --sizes "$size" --windows "$windows" --layers "$layer" \
			--duration 0.5 --warmup 0.5 --out "$dir/prime-$side" >"$dir/prime-$side.log" 2>&1 ||
			{ say "priming run of $side failed: ${cmd[*]}"; cat "$dir/prime-$side.log" >&2; exit 1; }
	done
	say "primed both binaries (one short run each, not counted)"
fi
for ((round = 1; round <= rounds; round++)); do
	if ((round % 2 == 1)); then
		run_side A "$round"
		run_side B "$round"
	else
		run_side B "$round"
		run_side A "$round"
	fi
done
say "done in $((SECONDS - started)) s; load $(load)"

# The table: per window, every round, then the medians. Medians of an even count are the
# mean of the middle two.
awk -v rounds="$rounds" '
function median(values, n,    i, j, t) {
	for (i = 2; i <= n; i++) {
		t = values[i]
		for (j = i - 1; j >= 1 && values[j] > t; j--) values[j + 1] = values[j]
		values[j + 1] = t
	}
	if (n % 2) return values[(n + 1) / 2]
	return (values[n / 2] + values[n / 2 + 1]) / 2
}
FILENAME == others_file { others[$1, $2] = $3; next }
{
	rate[$1, $2, $3] = $4
	if (!($3 in seen)) { seen[$3] = 1; order[++nw] = $3 }
}
END {
	printf "node row: requests/s per round, A = baseline, B = new; the median B/A is the\n"
	printf "median of the rounds ratios (each round ran A and B seconds apart)\n"
	printf "(others: cores that other work took during the A and the B run; a round with more\n"
	printf "than a few tenths is suspect)\n"
	printf "%-7s %-6s %12s %12s %8s   %s\n", "window", "round", "A req/s", "B req/s", "B/A", "others A,B"
	for (k = 1; k <= nw; k++) {
		w = order[k]
		n = 0
		for (r = 1; r <= rounds; r++) {
			if (!(("A", r, w) in rate) || !(("B", r, w) in rate)) continue
			a = rate["A", r, w]; b = rate["B", r, w]
			n++
			as[n] = a; bs[n] = b; rs[n] = (a > 0) ? b / a : 0
			printf "%-7s %-6s %12.0f %12.0f %8.3f   %s,%s\n", w, r, a, b, rs[n], others["A", r], others["B", r]
		}
		if (n == 0) continue
		lo = rs[1]; hi = rs[1]
		for (i = 2; i <= n; i++) { if (rs[i] < lo) lo = rs[i]; if (rs[i] > hi) hi = rs[i] }
		ma = median(as, n); mb = median(bs, n); mr = median(rs, n)
		printf "%-7s %-6s %12.0f %12.0f %8.3f   (rounds B/A %.3f..%.3f)\n", w, "median", ma, mb, mr, lo, hi
	}
}' others_file="$others_file" "$others_file" "$results"
