"use strict";
/**
 * One measurement point on the client side, by the same method as the harness's
 * `benches/src/measure.rs` and `stats.rs`:
 *
 * - warm-up and measured phase are one loop: `window` calls are kept in flight from the
 *   first call to the end of the measured phase, never drained in between;
 * - only calls that complete inside the measured phase (from `warmup` after the start,
 *   for `duration`) are counted, each timed from its start to its completion;
 * - no call starts at or after the end of the measured phase; the last ones are waited for;
 * - mean and p50/p95/p99 by nearest rank over every counted timing, in microseconds;
 *   rate = counted calls / length of the measured phase;
 * - the first failed call ends the point with its error.
 */

/** Nanoseconds on a monotonic clock, as a BigInt. */
const now = () => process.hrtime.bigint();

/**
 * Keeps `window` calls of `call` (a function returning a promise) in flight for the
 * warm-up and the measured phase; resolves to the counted timings in nanoseconds.
 */
function drive(window, warmupSeconds, durationSeconds, call) {
	const from = now() + BigInt(Math.round(warmupSeconds * 1e9));
	const until = from + BigInt(Math.round(durationSeconds * 1e9));
	return new Promise((resolve, reject) => {
		const timings = [];
		let inFlight = 0;
		let failed = false;
		const launch = () => {
			inFlight += 1;
			const sent = now();
			call().then(
				() => {
					if (failed) return;
					inFlight -= 1;
					const done = now();
					if (done >= from && done < until) timings.push(Number(done - sent));
					if (done < until) launch();
					else if (inFlight === 0) resolve(timings);
				},
				err => {
					if (!failed) {
						failed = true;
						reject(err);
					}
				}
			);
		};
		for (let i = 0; i < Math.max(1, window); i += 1) launch();
	});
}

/**
 * The `q`-quantile of `sorted` (ascending) by nearest rank: the value of rank
 * `max(1, ceil(q * n))`; undefined when empty.
 */
function percentile(sorted, q) {
	if (sorted.length === 0) return undefined;
	const clamped = Math.min(1, Math.max(0, q));
	const rank = Math.max(1, Math.ceil(clamped * sorted.length));
	return sorted[Math.min(rank, sorted.length) - 1];
}

/** Mean and p50/p95/p99 in microseconds of timings in nanoseconds; null when empty. */
function summarize(timingsNs) {
	if (timingsNs.length === 0) return null;
	const sorted = Float64Array.from(timingsNs).sort();
	let sum = 0;
	for (const t of sorted) sum += t;
	const us = q => percentile(sorted, q) / 1000;
	return { mean: sum / sorted.length / 1000, p50: us(0.5), p95: us(0.95), p99: us(0.99) };
}

/** The harness's `Point` (one JSON line) for a finished point. */
function point(layer, size, window, durationSeconds, timingsNs) {
	return {
		layer,
		size,
		window: Math.max(1, window),
		completed: timingsNs.length,
		seconds: durationSeconds,
		rate: timingsNs.length / durationSeconds,
		latency_us: summarize(timingsNs)
	};
}

module.exports = { drive, percentile, summarize, point };
