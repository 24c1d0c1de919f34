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
# index update. Its target directory is target/dependent, kept between runs: a second run
# recompiles only what changed.
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

cat >"$project/tests/one_line.rs" <<'EOF'
//! What a project that depends on `node` with one line gets: both kinds of request on the
//! default (native) engine, and a typed error for the engine it did not build.

use std::time::Duration;

use node::{ConnectOptions, Engine, HandlerError, KeyPair, Node, Request};

/// Bounds each step, so a hang fails the test instead of CI's overall timeout. Generous: the
/// machine may be busy; a healthy step takes milliseconds.
const STEP: Duration = Duration::from_secs(30);

async fn bounded<T>(step: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, step).await.expect("a step took over 30 s")
}

#[tokio::test]
async fn a_plain_request() {
    let worker = bounded(
        Node::builder()
            .id("worker")
            .engine(Engine::Native)
            .bind("tcp://127.0.0.1:0")
            .build(),
    )
    .await
    .unwrap();
    worker.on_request("sum", |req: Request| async move {
        let numbers: Vec<i64> = req.decode()?;
        Ok::<_, HandlerError>(numbers.iter().sum::<i64>())
    });
    let client = bounded(Node::builder().id("client").build()).await.unwrap();
    bounded(client.connect(&worker.address().unwrap())).await.unwrap();
    let sum: i64 = bounded(client.request("worker", "sum", &vec![1, 2, 3]))
        .await
        .unwrap();
    assert_eq!(sum, 6);
    client.close().await;
    worker.close().await;
}

#[tokio::test]
async fn a_curve_request_with_keys_made_without_libzmq() {
    let server_keys = KeyPair::generate().unwrap();
    let client_keys = KeyPair::generate().unwrap();
    let server = bounded(
        Node::builder()
            .id("vault")
            .curve(server_keys.clone())
            .allow_keys([client_keys.public])
            .bind("tcp://127.0.0.1:0")
            .build(),
    )
    .await
    .unwrap();
    // The handler answers with the key CURVE authenticated: the client's own.
    server.on_request("who", |req: Request| async move {
        Ok::<_, HandlerError>(req.peer_key().map(|key| key.to_z85()))
    });
    let client = bounded(Node::builder().id("teller").curve(client_keys.clone()).build())
        .await
        .unwrap();
    bounded(client.connect_with(
        &server.address().unwrap(),
        ConnectOptions::new().server_key(server_keys.public),
    ))
    .await
    .unwrap();
    let seen: Option<String> = bounded(client.request("vault", "who", &())).await.unwrap();
    assert_eq!(seen, Some(client_keys.public.to_z85()));
    client.close().await;
    server.close().await;
}

#[tokio::test]
async fn the_libzmq_engine_without_its_feature_is_a_typed_error() {
    let started = bounded(
        Node::builder()
            .id("on-libzmq")
            .engine(Engine::Libzmq)
            .bind("tcp://127.0.0.1:0")
            .build(),
    )
    .await;
    match started {
        Err(node::Error::Protocol(protocol::Error::Transport(
            transport::Error::EngineUnavailable { engine },
        ))) => assert_eq!(engine, Engine::Libzmq),
        Err(other) => panic!("another error: {other:?}"),
        Ok(_) => panic!("a node on the libzmq engine started in a build without it"),
    }
}
EOF

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
