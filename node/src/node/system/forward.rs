//! `_system:forward`, a request (or a stream, an upload, a stream both ways): a message
//! for someone else, sent to a router. Its payload is the user's; its metadata carries the
//! `Forward` header under `:forward` (the destination, the action, the hops left, the
//! routers visited: `crate::routing::forward`, whose decisions are pure). It runs as a task of the
//! handler runtime like a user request (it waits on the next hop), with no handler of its
//! own: the runtime calls the router (`crate::routing::relay`, `Relay::handle_forward`), and a
//! node that is not a router answers `NOT_A_ROUTER`.

/// The event name.
pub(crate) use crate::routing::forward::FORWARD as EVENT;
