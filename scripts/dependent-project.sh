#!/usr/bin/env bash
# A project outside this workspace that depends on `node` with one line, as a user's would:
# `node = { path = ... }` and nothing else (no `[patch]`, no feature). It must build without
# libzmq (no `zmq`/`zmq-sys` in its dependency graph), send a plain request and a CURVE
# request between two nodes in one process, and get a typed error, not a native socket in
# its place, when it asks for the libzmq engine that its build does not have.
#
# The project is written to a fresh temporary directory (its own `[workspace]`, so nothing
# of this workspace, its `[patch]` above all, applies to it) with this workspace's
# Cargo.lock, so it resolves the versions the workspace is tested with and needs no registry
# index update. Its tests are scripts/dependent/one_line.rs. Its target directory is
# target/dependent, kept between runs: a second run recompiles only what changed.
#
# Usage: scripts/dependent-project.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
project="$(mktemp -d "${TMPDIR:-/tmp}/zeronode-dependent.XXXXXX")"
trap 'rm -rf "$project"' EXIT
export CARGO_TARGET_DIR="${DEPENDENT_TARGET_DIR:-$repo/target/dependent}"

mkdir -p "$project/src" "$project/tests"
cat >"$project/Cargo.toml" <<EOF
[package]
name = "dependent"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
node = { path = "$repo/node" }
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }

# Only for the test's match on the typed transport error; a user needs \`node\` alone.
[dev-dependencies]
protocol = { path = "$repo/protocol" }
transport = { path = "$repo/transport" }

# Its own workspace: this directory is not part of zeronode's, whose [patch] does not apply.
[workspace]

# As the zeronode workspace's: no debug information for dependencies (smaller, faster links).
[profile.dev]
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false
EOF
cp "$repo/Cargo.lock" "$project/Cargo.lock"
echo 'fn main() {}' >"$project/src/main.rs"

cp "$repo/scripts/dependent/one_line.rs" "$project/tests/one_line.rs"

cd "$project"
echo "== the dependency graph of a project with node = { path = ... } (no zmq-sys, no zmq)"
graph="$(cargo tree -e normal --prefix none)"
if grep -E '^(zmq-sys|zmq) ' <<<"$graph"; then
  echo "FAIL: the default dependency graph of node contains libzmq's crates (above)" >&2
  exit 1
fi
echo "ok: $(sort -u <<<"$graph" | wc -l) packages, none of them zmq or zmq-sys"

echo "== its tests: a plain and a CURVE request, the libzmq engine a typed error"
cargo test --quiet
