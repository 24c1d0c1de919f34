//! The calling side: the one call builder (`call.rs`) and what sends a call (`send.rs`),
//! streams and uploads as the caller reads them (`stream.rs`), a stream from every match and
//! the listing of matches (`find.rs`), the tower caller and its layers (`caller.rs`,
//! `call_timeout.rs`, `breaker.rs`).
//!
//! The top room: built on the node's handle (`impl Node { fn call .. }`), it may use every
//! room below: the mesh (links and the registry, to pick where a call goes), routing (to
//! send through routers what no joined peer takes), the serving side (a reply's type, the
//! handler's context) and observation (spans, hooks, metrics).

pub(crate) mod breaker;
pub(crate) mod call;
pub(crate) mod call_timeout;
pub(crate) mod caller;
pub(crate) mod find;
pub(crate) mod send;
pub(crate) mod stream;
