"use strict";
/**
 * The Moleculer row's server: a ServiceBroker with the TCP transporter (loopback only) and
 * an `echo` service whose `echo` action returns its params (`{ payload }`) unchanged.
 *
 *     node serve.js
 *
 * Prints its endpoint (`tcp://127.0.0.1:PORT/bench-server`, Moleculer's static node URL) as
 * its first stdout line, then serves until stdin closes. Started by `benches serve --layer
 * moleculer`, which relays the line to the harness.
 */

const { ServiceBroker } = require("moleculer");
const { LOOPBACK, loopbackTransporter, brokerOptions, exitWhenStdinCloses } = require("./common");

/** The server's node id: the client's static node URL names it. */
const NODE_ID = "bench-server";

async function main() {
	exitWhenStdinCloses(0);
	const transporter = loopbackTransporter(null);
	const broker = new ServiceBroker(brokerOptions(NODE_ID, transporter));
	broker.createService({
		name: "echo",
		actions: {
			echo(ctx) {
				return ctx.params;
			}
		}
	});
	await broker.start();
	// The transporter keeps the port its listener really bound in its options.
	process.stdout.write(`tcp://${LOOPBACK}:${transporter.opts.port}/${NODE_ID}\n`);
}

main().catch(err => {
	process.stderr.write(`moleculer serve.js: ${err && err.stack ? err.stack : err}\n`);
	process.exit(1);
});
