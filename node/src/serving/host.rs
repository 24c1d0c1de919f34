//! How the handler runtime reaches the node: its own part, the observers, and a router's
//! forward. The runtime sees only [`Host`]; this is the one place that joins it to
//! [`Inner`] (no module imports this one, so the runtime's needs add no import circle).

use std::sync::Arc;

use futures::future::BoxFuture;
use protocol::{Answer, Incoming, RemoteError};

use crate::inner::Inner;
use crate::mesh::peer::NodeId;
use crate::observation::observe::Observers;
use crate::routing::relay::Relay;
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
        Box::pin(async move {
            Relay::of(&self)
                .handle_forward(from, incoming, received)
                .await
        })
    }
}
