//! Handlers: what runs when a request or tick arrives.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use transport::{Key, PeerId};

use crate::envelope::{decode_value, Envelope};
use crate::error::{RemoteError, Result};

/// A request or tick as a handler sees it: who sent it, the event, the metadata, and the
/// payload still undecoded until the handler asks.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The sender's routing id (empty on a Client: the sender is its server).
    pub from: PeerId,
    key: Option<Key>,
    envelope: Envelope,
}

impl Incoming {
    /// An incoming message from `from` (for tests and for layers that forward messages).
    pub fn from_envelope(from: PeerId, envelope: Envelope) -> Incoming {
        Incoming::new(from, None, envelope)
    }

    /// An incoming message from `from`, authenticated with CURVE public key `key`.
    pub fn new(from: PeerId, key: Option<Key>, envelope: Envelope) -> Incoming {
        Incoming {
            from,
            key,
            envelope,
        }
    }

    /// The sender's CURVE public key, as libzmq authenticated it during the handshake: set
    /// on a server whose socket is a CURVE server, `None` otherwise.
    pub fn peer_key(&self) -> Option<&Key> {
        self.key.as_ref()
    }

    /// The event name.
    pub fn event(&self) -> &str {
        self.envelope.event()
    }

    /// The request id (unique per sender).
    pub fn id(&self) -> u64 {
        self.envelope.id()
    }

    /// The raw metadata.
    pub fn metadata(&self) -> &Bytes {
        self.envelope.metadata()
    }

    /// The raw payload, untouched.
    pub fn payload(&self) -> &Bytes {
        self.envelope.payload()
    }

    /// Decodes the payload from MessagePack.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        decode_value(self.envelope.payload())
    }

    /// The whole envelope.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }
}

/// What a request handler answers: a payload and optional metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// Metadata carried back with the reply.
    pub metadata: Bytes,
    /// The reply payload.
    pub payload: Bytes,
}

impl From<Bytes> for Answer {
    fn from(payload: Bytes) -> Answer {
        Answer {
            metadata: Bytes::new(),
            payload,
        }
    }
}

/// The future a request handler returns.
pub type RequestFuture = BoxFuture<'static, Result<Answer, RemoteError>>;
/// The future a tick handler returns.
pub type TickFuture = BoxFuture<'static, ()>;

/// A request handler.
pub type RequestHandler = Arc<dyn Fn(Incoming) -> RequestFuture + Send + Sync>;
/// A tick handler.
pub type TickHandler = Arc<dyn Fn(Incoming) -> TickFuture + Send + Sync>;

/// Wraps an async function as a [`RequestHandler`].
pub fn request_fn<F, Fut, A>(f: F) -> RequestHandler
where
    F: Fn(Incoming) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<A, RemoteError>> + Send + 'static,
    A: Into<Answer>,
{
    Arc::new(move |incoming| {
        let fut = f(incoming);
        Box::pin(async move { fut.await.map(Into::into) })
    })
}

/// Wraps an async function as a [`TickHandler`].
pub fn tick_fn<F, Fut>(f: F) -> TickHandler
where
    F: Fn(Incoming) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |incoming| Box::pin(f(incoming)))
}

/// FNV-1a over an event name: a lookup per message, and names are short, where SipHash's
/// set-up dominates (about 60 instructions for a 4-byte name, callgrind). Only the names of
/// registered handlers are ever inserted, so names from the network cannot flood the map
/// with collisions (what SipHash's keying protects against).
#[derive(Clone, Copy)]
pub(crate) struct NameHasher(u64);

impl Default for NameHasher {
    fn default() -> Self {
        NameHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for NameHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Handlers by exact event name, with an optional catch-all for each kind (the node layer
/// installs its own dispatcher as the catch-all).
#[derive(Default, Clone)]
pub(crate) struct Handlers {
    // Keyed by the name's bytes: a received event name is looked up as it came, without
    // checking its UTF-8 a second time (decoding checked it).
    requests: HashMap<Box<[u8]>, RequestHandler, BuildHasherDefault<NameHasher>>,
    ticks: HashMap<Box<[u8]>, TickHandler, BuildHasherDefault<NameHasher>>,
    any_request: Option<RequestHandler>,
    any_tick: Option<TickHandler>,
}

impl Handlers {
    pub(crate) fn set_request(&mut self, event: Option<String>, handler: Option<RequestHandler>) {
        match (event, handler) {
            (Some(event), Some(h)) => {
                self.requests.insert(event.into_bytes().into(), h);
            }
            (Some(event), None) => {
                self.requests.remove(event.as_bytes());
            }
            (None, h) => self.any_request = h,
        }
    }

    pub(crate) fn set_tick(&mut self, event: Option<String>, handler: Option<TickHandler>) {
        match (event, handler) {
            (Some(event), Some(h)) => {
                self.ticks.insert(event.into_bytes().into(), h);
            }
            (Some(event), None) => {
                self.ticks.remove(event.as_bytes());
            }
            (None, h) => self.any_tick = h,
        }
    }

    pub(crate) fn request(&self, event: &[u8]) -> Option<&RequestHandler> {
        self.requests.get(event).or(self.any_request.as_ref())
    }

    pub(crate) fn tick(&self, event: &[u8]) -> Option<&TickHandler> {
        self.ticks.get(event).or(self.any_tick.as_ref())
    }
}
