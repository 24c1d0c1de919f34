#!/usr/bin/env bash
# The peers beside zeronode, same driver, same machine: installs what is missing (Debian's
# nats-server, the npm packages of the Moleculer row), builds the harness with the `peers`
# feature and runs it on raw libzmq, our transport and node rows, NATS and Moleculer in one
# run. Extra arguments go to the harness (--sizes, --windows, --duration, --warmup, --out);
# --layers may be given to override the default set below.
#
#   benches/peers/run.sh --sizes 100,1000 --windows 1,10,100,1000 --duration 3
#
# Everything runs on 127.0.0.1. Not part of the test command (CI does not run it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

say() { printf 'peers: %s\n' "$*" >&2; }

# Run a command as root: directly when we are root, else through sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# nats-server: Debian's package (found on PATH, in /usr/sbin, or at $NATS_SERVER).
if [ -z "${NATS_SERVER:-}" ] && ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
	say "installing nats-server (apt)"
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
fi
# The package enables a system service; this run starts its own server on a free port and
# never uses that one.

# Moleculer: node and npm from the machine, the packages from the committed lock file.
for tool in node npm; do
	command -v "$tool" >/dev/null 2>&1 || { say "$tool is missing: install Node.js 20 or later"; exit 1; }
done
if [ ! -d "$here/moleculer/node_modules/moleculer" ] ||
	[ "$here/moleculer/package-lock.json" -nt "$here/moleculer/node_modules/.package-lock.json" ]; then
	say "installing the Moleculer row's npm packages (npm ci)"
	(cd "$here/moleculer" && npm ci --no-audit --no-fund --loglevel=error)
fi

# The default rows, unless the caller names its own --layers.
layers=(--layers raw,transport,node,node-native,nats,moleculer)
for arg in "$@"; do
	case "$arg" in --layers | --layers=*) layers=() ;; esac
done

say "building and running the harness with --features peers"
cd "$root"
exec cargo run --release --quiet -p benches --features peers -- "${layers[@]}" "$@"
