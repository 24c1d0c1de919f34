//! The peers' rows (`--features peers`): what a user would pick instead of zeronode,
//! measured by the same harness, on the same machine, with the same method.
//!
//! | row | server role | client role |
//! |---|---|---|
//! | `nats` | a `nats-server` child on a free loopback port, and an async-nats responder on an echo subject | async-nats `request`, driven by [`drive_concurrent`](crate::measure::drive_concurrent) |
//! | `moleculer` | `node benches/peers/moleculer/serve.js`: a ServiceBroker, TCP transporter, `echo` service | `node benches/peers/moleculer/client.js`: the same method in JavaScript, relayed |
//!
//! Each role keeps its helper processes (`nats-server`, `node`) tied to its own life through
//! a pipe: the helper's stdin, whose only writer is the role process. The orchestrator kills
//! a role process by pid; its end of the pipe closes with it, and each helper exits at end of
//! file (the node scripts watch their stdin; `nats-server` runs under a small `sh` watcher
//! that stops it). No helper outlives the point that started it.
//!
//! Everything stays on 127.0.0.1: `nats-server` listens there only, and the Moleculer
//! scripts turn UDP discovery off, bind their TCP listeners there and dial every peer there.

pub(super) mod moleculer;
pub(super) mod nats;
mod process;

use std::process::ExitStatus;
use std::time::Duration;

/// What can stop a peer's row.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerError {
    /// A program or a package the row needs is missing.
    #[error("{what} is not installed: run benches/peers/run.sh, or {hint}")]
    NotInstalled {
        /// What is missing.
        what: &'static str,
        /// How to install it by hand.
        hint: &'static str,
    },
    /// A helper process could not be started.
    #[error("starting {what}: {source}")]
    Spawn {
        /// Which helper.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A helper process ended while the row still needed it.
    #[error("{what} exited ({})", status.map_or_else(|| "status unknown".to_owned(), |s| s.to_string()))]
    Exited {
        /// Which helper.
        what: &'static str,
        /// Its exit status, when known.
        status: Option<ExitStatus>,
    },
    /// A helper did not accept connections in time.
    #[error("{what} was not ready within {waited:?}")]
    NotReady {
        /// Which helper.
        what: &'static str,
        /// How long we waited.
        waited: Duration,
    },
    /// A helper that must print its endpoint first printed nothing.
    #[error("{what} printed no endpoint")]
    NoEndpoint {
        /// Which helper.
        what: &'static str,
    },
    /// The Moleculer client script measured another point than the one asked for.
    #[error("the moleculer client measured {got}, not {asked}")]
    WrongPoint {
        /// The point asked for (layer, size, window).
        asked: String,
        /// The point printed.
        got: String,
    },
    /// Connecting to nats-server failed.
    #[error("nats connect: {0}")]
    NatsConnect(#[from] async_nats::ConnectError),
    /// Subscribing the echo responder failed.
    #[error("nats subscribe: {0}")]
    NatsSubscribe(#[from] async_nats::SubscribeError),
    /// Flushing the responder's subscription to the server failed.
    #[error("nats flush: {0}")]
    NatsFlush(#[from] async_nats::client::FlushError),
    /// Publishing a reply failed.
    #[error("nats publish: {0}")]
    NatsPublish(#[from] async_nats::PublishError),
    /// A request failed (no responder, timeout, connection lost).
    #[error("nats request: {0}")]
    NatsRequest(#[from] async_nats::RequestError),
    /// The responder's subscription ended (the connection was closed).
    #[error("the nats echo subscription ended")]
    SubscriptionEnded,
}
