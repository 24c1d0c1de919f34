//! What a socket does with the requests and ticks it receives: one receiver per socket,
//! asked once per message, and the one place a request nobody handles is refused.
//!
//! A socket starts with a table of handlers by exact event name ([`Client::on_request`],
//! [`Server::on_tick`], ...). A layer above with its own table (the node's, with patterns
//! and middleware) gives the socket its own receiver instead ([`Serve`], set with
//! `serve`): the socket then has no table of its own, and every request and tick goes
//! straight to that receiver, which answers `NO_HANDLER` itself
//! ([`RemoteError::no_handler`], [`Responder::no_handler`]). One table is looked in per
//! message, never two.
//!
//! [`Client::on_request`]: crate::Client::on_request
//! [`Server::on_tick`]: crate::Server::on_tick

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::RemoteError;
use crate::handler::{Incoming, RequestHandler, Responder, TickHandler};

/// A socket's receiver of requests and ticks, when a layer above keeps the handlers (set
/// with [`Client::serve`](crate::Client::serve) or [`Server::serve`](crate::Server::serve)).
///
/// Both methods are called on the socket's driver (on the native engine, the connection's
/// own) and must return at once: work that waits runs as a task of its own.
pub trait Serve: Send + Sync + 'static {
    /// A request arrived: answer it through `responder`, now or later. A request nobody
    /// handles is answered with [`Responder::no_handler`]. A responder dropped unanswered
    /// answers `HANDLER_ERROR` itself, so the request always ends.
    fn request(&self, incoming: Incoming, responder: Responder);

    /// A tick arrived (no answer).
    fn tick(&self, incoming: Incoming);
}

/// Who a socket's messages go to: its own table of named handlers, or a receiver a layer
/// above gave it. Replaced whole (copy on write) when it changes.
#[derive(Clone)]
pub(crate) enum Receiver {
    /// Handlers by exact event name: what a socket starts with.
    Table(Handlers),
    /// A receiver of every request and tick ([`Serve`]).
    Serve(Arc<dyn Serve>),
}

impl Default for Receiver {
    fn default() -> Self {
        Receiver::Table(Handlers::default())
    }
}

impl Receiver {
    /// The table, for a change to a named handler: a socket that had a receiver of its own
    /// starts a new, empty table (the last one set wins, see `local.rs`).
    pub(crate) fn table(&mut self) -> &mut Handlers {
        if let Receiver::Serve(_) = self {
            *self = Receiver::default();
        }
        match self {
            Receiver::Table(table) => table,
            Receiver::Serve(_) => unreachable!("replaced above"),
        }
    }
}

impl RemoteError {
    /// The refusal of a request for `event` that no handler takes: the system error
    /// [`NO_HANDLER`](Self::NO_HANDLER). Every layer that refuses one makes it here.
    pub fn no_handler(event: &str) -> RemoteError {
        RemoteError::system_error(Self::NO_HANDLER, format!("no handler for {event:?}"))
    }
}

/// The handlers' maps hash event names with foldhash (a lookup per message, and names are
/// short, where SipHash's set-up dominates: about 60 instructions for a 4-byte name,
/// callgrind). Only the names of registered handlers are ever inserted, so names from the
/// network cannot flood a map with collisions; foldhash's per-map seed is kept all the same.
type NameMap<V> = HashMap<Box<[u8]>, V, foldhash::fast::RandomState>;

/// Handlers by exact event name: a socket's own table.
#[derive(Default, Clone)]
pub(crate) struct Handlers {
    // Keyed by the name's bytes: a received event name is looked up as it came, without
    // checking its UTF-8 a second time (decoding checked it).
    requests: NameMap<RequestHandler>,
    ticks: NameMap<TickHandler>,
}

impl Handlers {
    /// Sets (`Some`) or removes (`None`) the request handler for `event`.
    pub(crate) fn set_request(&mut self, event: &str, handler: Option<RequestHandler>) {
        match handler {
            Some(h) => {
                self.requests.insert(event.as_bytes().into(), h);
            }
            None => {
                self.requests.remove(event.as_bytes());
            }
        }
    }

    /// Sets (`Some`) or removes (`None`) the tick handler for `event`.
    pub(crate) fn set_tick(&mut self, event: &str, handler: Option<TickHandler>) {
        match handler {
            Some(h) => {
                self.ticks.insert(event.as_bytes().into(), h);
            }
            None => {
                self.ticks.remove(event.as_bytes());
            }
        }
    }

    pub(crate) fn request(&self, event: &[u8]) -> Option<&RequestHandler> {
        self.requests.get(event)
    }

    pub(crate) fn tick(&self, event: &[u8]) -> Option<&TickHandler> {
        self.ticks.get(event)
    }
}
