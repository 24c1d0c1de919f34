//! How the parts below reach the whole node through the narrow types they define: the
//! handler runtime through [`Host`] (its own part, the observers, a router's forward), and
//! routing through [`Relay`] (a borrowed view of the registry, the config and the node's
//! life) and [`Departures`]. This is the one place that joins them to [`Inner`], so none of
//! them names the node.

use std::sync::Arc;

use futures::future::BoxFuture;
use protocol::{Answer, Incoming, RemoteError};

use crate::mesh::peer::{Direction, LeaveReason, NodeId};
use crate::node::inner::Inner;
use crate::observation::observe::Observers;
use crate::routing::relay::{Departures, Relay};
use crate::serving::runtime::{Host, Received, Runtime};

/// The handler runtime reaches the node through this: its own part, the observers (hooks,
/// error reports), and the forward of a router (the job's hold on its node keeps it alive
/// while it runs).
impl Host for Inner {
    fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    fn observers(&self) -> &Observers {
        &self.observers
    }

    fn forward(
        self: Arc<Self>,
        from: NodeId,
        incoming: Incoming,
        received: Received,
    ) -> BoxFuture<'static, std::result::Result<Answer, RemoteError>> {
        // Boxed: a forward's future is large, and without the box every handler job
        // would be that large (the job is copied into its runner at each start: 1.8% of
        // an echo server's time in `memmove` under `spawn`, perf).
        Box::pin(async move { self.relay().handle_forward(from, incoming, received).await })
    }
}

impl Inner {
    /// The node's routing, with what it reads of the rest of the node: the one place a
    /// [`Relay`] is made from the whole node.
    pub(crate) fn relay(&self) -> Relay<'_> {
        Relay {
            id: &self.id,
            config: &self.config,
            state: &self.state,
            life: &self.life,
            routing: &self.routing,
            departures: self,
        }
    }
}

/// Forwarding tells the node of a peer that turned out to count it as gone.
impl Departures for Inner {
    fn peer_left(&self, id: &NodeId, direction: Direction, reason: LeaveReason) {
        Inner::peer_left(self, id, direction, reason);
    }
}
