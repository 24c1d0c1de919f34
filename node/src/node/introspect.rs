//! A node's description at run time: built from the node's parts when asked for, the
//! answer to `_system:describe`, and [`Node::describe`] to ask a peer (the types and the
//! per-event load are `describe.rs`).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use protocol::{decode_value, encode_value, Answer, Incoming, RemoteError};
use tokio::time::Instant;

use crate::codes::system::NO_HANDLER;
use crate::config::BusyPolicy;
use crate::context::Outgoing;
use crate::error::{Error, Result};
use crate::mesh::link::Target;
use crate::mesh::peer::NodeId;
use crate::node::inner::Inner;
use crate::node::Node;
use crate::observation::describe::{
    millis, Description, Limits, PeerSummary, RouterCounts, Totals, DESCRIBE, REBUILD_AFTER,
};
use crate::routing::forward::Action;

impl Inner {
    /// This node's description, built now.
    pub(crate) fn description(&self) -> Description {
        let now = Instant::now();
        let stats = self.stats();
        let config = &self.config;
        let patterns = self.handlers.patterns();
        let peers = self
            .state
            .lock()
            .registry
            .infos()
            .into_iter()
            .map(|p| PeerSummary {
                id: p.id,
                direction: p.direction,
                router: p.router,
                in_flight: p.in_flight as u64,
                draining: p.draining,
                options: p.options,
            })
            .collect();
        let load = self.observers.load.as_ref();
        let routing = &self.routing;
        Description {
            id: self.id.clone(),
            instance: self.instance.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol: crate::PROTOCOL_VERSION,
            engine: config.engine.to_string(),
            curve: config.curve.is_some(),
            router: config.router,
            address: self
                .links
                .server
                .lock()
                .as_ref()
                .map(|s| s.endpoint().to_owned()),
            options: self.options.read().clone(),
            requests: patterns.requests,
            streams: patterns.streams,
            uploads: patterns.uploads,
            ticks: patterns.ticks,
            peers,
            uptime_ms: load.map_or(0, |l| millis(now.saturating_duration_since(l.born))),
            closing: self.life.is_closing(),
            limits: Limits {
                max_payload: config.max_payload as u64,
                max_concurrent_handlers: config.max_concurrent_handlers as u64,
                max_handlers_per_peer: config.max_handlers_per_peer as u64,
                max_queued_per_peer: config.max_queued_per_peer as u64,
                max_queued: match config.when_busy {
                    BusyPolicy::Wait { max_queued } => max_queued as u64,
                    BusyPolicy::Refuse => 0,
                },
                request_timeout_ms: millis(config.request_timeout),
                heartbeat_ms: millis(config.heartbeat_interval),
                hop_limit: config.hop_limit,
            },
            totals: Totals {
                requests_handled: stats.requests_handled,
                requests_sent: stats.requests_sent,
                ticks_received: stats.ticks_received,
                timeouts: stats.timeouts,
                busy_refused: stats.busy_refused,
                handlers_active: stats.handlers_active as u64,
                handlers_queued: stats.handlers_queued as u64,
            },
            events: load.map(|l| l.events(now)).unwrap_or_default(),
            routing: config.router.then(|| RouterCounts {
                forwarded: routing.forwarded.load(Ordering::Relaxed),
                failed: routing.failed.load(Ordering::Relaxed),
                looped: routing.looped.load(Ordering::Relaxed),
                expired: routing.expired.load(Ordering::Relaxed),
                hops: routing.hops.snapshot(),
            }),
        }
    }

    /// The answer to a `_system:describe` from a joined peer. Runs on the socket's driver:
    /// builds at most one description per [`REBUILD_AFTER`] and never waits.
    pub(crate) fn answer_describe(
        &self,
        incoming: &Incoming,
    ) -> std::result::Result<Answer, RemoteError> {
        self.config.describe.admits(incoming.peer_key())?;
        let Some(load) = &self.observers.load else {
            // Only with the policy off, refused above.
            return Err(RemoteError::system_error(NO_HANDLER, "no description"));
        };
        let now = Instant::now();
        let mut cache = load.cache.lock();
        if let Some((at, bytes)) = &*cache {
            if now.saturating_duration_since(*at) < REBUILD_AFTER {
                return Ok(Answer::from(bytes.clone()));
            }
        }
        let bytes =
            encode_value(&self.description()).map_err(|e| RemoteError::handler(e.to_string()))?;
        *cache = Some((now, bytes.clone()));
        Ok(Answer::from(bytes))
    }
}

impl Node {
    /// This node's own description (what it answers a peer that asks).
    pub fn description(&self) -> Description {
        self.inner.description()
    }

    /// Asks the node `id` to describe itself: a joined peer directly, any other node
    /// through the routers this node is joined to. Fails with
    /// [`Error::NoHandler`] when that node does not describe itself
    /// ([`DescribePolicy::Off`](crate::DescribePolicy::Off)), [`Error::Handler`] with code `NOT_AUTHORIZED` when its
    /// policy does not admit us, and as a request by id does otherwise.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> node::Result<()> {
    /// use node::Node;
    ///
    /// let server = Node::builder().id("billing").bind("tcp://127.0.0.1:0").build().await?;
    /// server.on_request("charge", |_req| async { Ok("done") });
    /// let client = Node::builder().build().await?;
    /// client.connect(&server.address().unwrap()).await?;
    /// let _: String = client.request("billing", "charge", &()).await?;
    ///
    /// let described = client.describe("billing").await?;
    /// assert_eq!(described.requests, ["charge"]);
    /// assert_eq!(described.events[0].requests.ok, 1);
    /// # client.close().await; server.close().await;
    /// # Ok(()) }
    /// ```
    pub async fn describe(&self, id: impl Into<NodeId>) -> Result<Description> {
        let id = id.into();
        if id == self.inner.id {
            return Ok(self.description());
        }
        if self.inner.life.is_closing() {
            return Err(Error::Closed);
        }
        let timeout = self.inner.config.request_timeout;
        let route = self.inner.state.lock().registry.route(&id);
        let payload = match route {
            Some(reach) => match reach
                .link
                .system()
                .request_with(DESCRIBE, &[], Bytes::new(), timeout)
                .await
            {
                Ok(reply) => reply.into_payload(),
                Err(protocol::Error::Remote(remote)) => return Err(describe_error(remote)),
                Err(e) => {
                    return Err(self.inner.relay().link_error(
                        &id,
                        &reach.link,
                        DESCRIBE,
                        timeout,
                        e,
                    ))
                }
            },
            None => {
                let outgoing = Outgoing {
                    meta: protocol::Meta::new(),
                    timeout,
                };
                let local = Error::NodeNotFound { id: id.to_string() };
                self.inner
                    .relay()
                    .forward_from_here(
                        Action::Request,
                        &Target::Id(id.clone()),
                        DESCRIBE,
                        Bytes::new(),
                        &outgoing,
                        local,
                    )
                    .await?
                    .0
                    .payload
            }
        };
        decode_value(&payload).map_err(Error::from)
    }
}

/// The caller's error for a refused description.
fn describe_error(remote: RemoteError) -> Error {
    if remote.is_system(NO_HANDLER) {
        return Error::NoHandler {
            event: DESCRIBE.to_owned(),
        };
    }
    Error::from_remote(remote)
}
