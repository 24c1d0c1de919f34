//! Router nodes: the forward header and its pure decisions (`forward.rs`), sending through
//! routers and forwarding for peers (`relay.rs`, the `Relay` view of the node), fan-outs
//! through routers (`fanout.rs`), streams relayed item by item (`stream_route.rs`).
//!
//! May use the leaves, the mesh, observation, the config and the serving side (a forward
//! runs as a handler job); it reaches the rest of the node only through `Relay` and
//! `Departures` (made from the node in `node/host.rs`).

pub(crate) mod fanout;
pub(crate) mod forward;
pub(crate) mod relay;
pub(crate) mod stream_route;
