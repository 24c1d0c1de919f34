"use strict";
/**
 * What the Moleculer row's server and client share: a TCP transporter kept on the loopback
 * interface, the stdin watch that ties a script's life to the harness process that started
 * it, and the command line.
 *
 * Nothing of this row leaves the machine: UDP discovery is off (the client is given the
 * server's address as a static node URL), the TCP listener binds 127.0.0.1 only, and every
 * peer is dialled at 127.0.0.1 whatever address it advertises.
 */

const net = require("net");
const TcpTransporter = require("moleculer").Transporters.TCP;

/** The only address this row listens on or dials. */
const LOOPBACK = "127.0.0.1";

/**
 * Moleculer's TCP transporter, loopback only. Upstream it listens on every interface and
 * dials the hostname or first IP address a node advertises; here both are 127.0.0.1.
 */
class LoopbackTcpTransporter extends TcpTransporter {
	/** Starts the TCP listener as upstream does, bound to 127.0.0.1. */
	startTcpServer() {
		// The listener's `listen` call happens synchronously inside this method (in a
		// promise executor), so the host is added for that one call and nothing else.
		const listen = net.Server.prototype.listen;
		net.Server.prototype.listen = function (options, ...rest) {
			const where = typeof options === "object" && options !== null ? options : { port: options };
			return listen.call(this, Object.assign({}, where, { host: LOOPBACK }), ...rest);
		};
		try {
			return super.startTcpServer();
		} finally {
			net.Server.prototype.listen = listen;
		}
	}

	/** Every node of this row runs on this machine: dial it on the loopback address. */
	getNodeAddress() {
		return LOOPBACK;
	}
}

/**
 * The transporter of a bench broker: TCP, no UDP discovery, `urls` the static nodes to
 * join (`tcp://127.0.0.1:PORT/NODE_ID`), port 0 (a free one).
 */
function loopbackTransporter(urls) {
	return new LoopbackTcpTransporter({
		udpDiscovery: false,
		urls: urls && urls.length > 0 ? urls : null,
		port: 0
	});
}

/**
 * Broker options every bench broker shares: Moleculer's defaults (JSON serializer, no
 * metrics, no tracing, no bulkhead, no circuit breaker), logs at warn and above (to stderr:
 * stdout carries the endpoint or the result line), and a request timeout far above any
 * latency measured, so that a timeout means something broke.
 */
function brokerOptions(nodeID, transporter) {
	return {
		nodeID,
		transporter,
		logLevel: "warn",
		logger: { type: "Console", options: { colors: false, moduleColors: false } },
		requestTimeout: 30 * 1000
	};
}

/**
 * Ends the process with `code` when stdin reaches end of file or fails: the harness process
 * that started this script holds the other end of the pipe, so this script does not outlive
 * it, however it ended (killed by pid included).
 */
function exitWhenStdinCloses(code) {
	const exit = () => process.exit(code);
	process.stdin.on("end", exit);
	process.stdin.on("close", exit);
	process.stdin.on("error", exit);
	process.stdin.resume();
}

/**
 * `--name value` pairs into an object of strings. Unknown names are kept; a name without a
 * value is an error.
 */
function parseArgs(argv) {
	const args = {};
	for (let i = 0; i < argv.length; i += 2) {
		const name = argv[i];
		if (!name.startsWith("--") || i + 1 >= argv.length)
			throw new Error(`expected --name value pairs, got ${JSON.stringify(argv.slice(i))}`);
		args[name.slice(2)] = argv[i + 1];
	}
	return args;
}

/** A required numeric option, or an error naming it. */
function numberArg(args, name) {
	const value = Number(args[name]);
	if (args[name] === undefined || !Number.isFinite(value) || value < 0)
		throw new Error(`--${name}: expected a non-negative number, got ${args[name]}`);
	return value;
}

module.exports = {
	LOOPBACK,
	loopbackTransporter,
	brokerOptions,
	exitWhenStdinCloses,
	parseArgs,
	numberArg
};
