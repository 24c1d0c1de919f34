//! `_system:describe`, a request with no payload: answer this node's description (a
//! MessagePack `Description`, `crate::observation::describe`), as its policy allows the asker
//! (`DescribePolicy`). Routers pass it on like a user request (`crate::routing::relay`). A
//! closing node answers `SHUTTING_DOWN`, as for any request.

use protocol::{Answer, Incoming, RemoteError};

use crate::node::inner::Inner;

/// The event name.
pub(crate) use crate::observation::describe::DESCRIBE as EVENT;

/// The answer to a joined peer's ask (`Inner::answer_describe`: cached, never waits).
pub(crate) fn answer(inner: &Inner, incoming: &Incoming) -> Result<Answer, RemoteError> {
    inner.answer_describe(incoming)
}
