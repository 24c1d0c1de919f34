"use strict";
/**
 * The Moleculer row's client: joins the server given as a static node URL and measures one
 * point of `echo.echo` calls by the harness's method (see measure.js), then prints the
 * harness's `Point` as one JSON line on stdout.
 *
 *     node client.js --endpoint tcp://127.0.0.1:PORT/bench-server --size 100 --window 10 \
 *         --warmup 1 --duration 3
 *
 * Started by `benches client --layer moleculer`, which relays the line. The payload is a
 * string of `size` ASCII characters (so `size` bytes) sent as `{ payload }` through the
 * default JSON serializer; every reply must carry a payload of the same length. Exits when
 * stdin closes (the harness process that started it is gone).
 */

const { ServiceBroker } = require("moleculer");
const { loopbackTransporter, brokerOptions, exitWhenStdinCloses, parseArgs, numberArg } = require("./common");
const { drive, point } = require("./measure");

/** How long the server's `echo` service may take to be discovered. */
const DISCOVERY_MS = 20 * 1000;

async function main() {
	exitWhenStdinCloses(1);
	const args = parseArgs(process.argv.slice(2));
	if (!args.endpoint) throw new Error("--endpoint is required");
	const size = numberArg(args, "size");
	const window = Math.max(1, numberArg(args, "window"));
	const warmup = numberArg(args, "warmup");
	const duration = Math.max(0.001, numberArg(args, "duration"));

	const broker = new ServiceBroker(
		brokerOptions(`bench-client-${process.pid}`, loopbackTransporter([args.endpoint]))
	);
	await broker.start();
	await broker.waitForServices(["echo"], DISCOVERY_MS);

	const payload = "x".repeat(size);
	const echo = async () => {
		const reply = await broker.call("echo.echo", { payload });
		const got = reply && typeof reply.payload === "string" ? reply.payload.length : -1;
		if (got !== size) throw new Error(`reply of ${got} bytes to a request of ${size} bytes`);
	};
	// One round trip so the connections both ways are up before the point starts.
	await echo();
	const timings = await drive(window, warmup, duration, echo);
	process.stdout.write(`${JSON.stringify(point("moleculer", size, window, duration, timings))}\n`);
	await broker.stop();
	process.exit(0);
}

main().catch(err => {
	process.stderr.write(`moleculer client.js: ${err && err.stack ? err.stack : err}\n`);
	process.exit(1);
});
