//! Router nodes: the forward header and its pure decisions (`forward.rs`), sending through
//! routers and forwarding for peers (`relay.rs`, the `Relay` view of the node), fan-outs
//! through routers (`fanout.rs`), streams relayed item by item (`stream_route.rs`), and the
//! counts per next hop (`hops.rs`).
//!
//! Uses the mesh (the registry and links) and observation; it reaches the rest of the
//! node only through `Relay`.

pub(crate) mod fanout;
pub(crate) mod forward;
pub(crate) mod hops;
pub(crate) mod relay;
pub(crate) mod stream_route;
