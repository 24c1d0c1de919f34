//! The client side: a DEALER socket.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use crate::engine::Sock;
use crate::error::Result;
use crate::frame::Frame;
use crate::monitor::Events;
use crate::options::Options;
use crate::shared::shared_methods;

/// An asynchronous DEALER socket: sends and receives multipart messages.
///
/// A Dealer connected to several Routers sends round-robin among them; zeronode connects
/// each Dealer to one Router. Cheap to clone: clones share the socket.
#[derive(Clone)]
pub struct Dealer {
    core: Arc<Sock>,
}

impl Dealer {
    /// A Dealer with default [`Options`]. Must be called inside a tokio runtime.
    pub fn new() -> Result<Dealer> {
        Dealer::with_options(Options::default())
    }

    /// A Dealer with the given options (set [`Options::routing_id`] to choose the id the
    /// Router sees). Must be called inside a tokio runtime.
    pub fn with_options(options: Options) -> Result<Dealer> {
        Ok(Dealer {
            core: Arc::new(Sock::new(false, &options)?),
        })
    }

    /// Connects to a Router's endpoint. libzmq connects in the background and reconnects
    /// after losses; the Router need not be bound yet.
    pub fn connect(&self, endpoint: &str) -> Result<()> {
        self.core.connect(endpoint)
    }

    /// Drops the connection made by [`connect`](Self::connect).
    pub fn disconnect(&self, endpoint: &str) -> Result<()> {
        self.core.disconnect(endpoint)
    }

    /// Binds to `endpoint` (a Dealer may bind, too) and returns the endpoint actually bound.
    pub fn bind(&self, endpoint: &str) -> Result<String> {
        self.core.bind(endpoint)
    }

    /// Stops listening on `endpoint`.
    pub async fn unbind(&self, endpoint: &str) -> Result<()> {
        self.core.unbind(endpoint).await
    }

    /// Sends a multipart message. Waits at the high-water mark (or fails with
    /// [`Error::QueueFull`](crate::Error::QueueFull), by option). Before any connection is
    /// made, messages queue up to the high-water mark.
    pub async fn send(&self, frames: Vec<Bytes>) -> Result<()> {
        self.core.send(&frames, None).await
    }

    /// Like [`send`](Self::send), borrowing the frames (`Bytes`, or any [`Frame`], such as a
    /// frame given as the pieces it is made of).
    pub async fn send_frames<F: Frame + Sync>(&self, frames: &[F]) -> Result<()> {
        self.core.send(frames, None).await
    }

    /// Sends without waiting: at the high-water mark this fails with
    /// [`Error::QueueFull`](crate::Error::QueueFull) whatever the socket's backpressure
    /// option (for answers to a peer that may not be reading them).
    pub async fn try_send<F: Frame + Sync>(&self, frames: &[F]) -> Result<()> {
        self.core
            .send_with(frames, None, crate::Backpressure::Fail)
            .await
    }

    /// Sends now or not at all, without a future: at the high-water mark this fails with
    /// [`Error::QueueFull`](crate::Error::QueueFull) whatever the socket's backpressure
    /// option. What [`try_send`](Self::try_send) does, for callers that are not async.
    pub fn send_now<F: Frame>(&self, frames: &[F]) -> Result<()> {
        self.core.send_now(frames, None)
    }

    /// Receives the next multipart message.
    pub async fn recv(&self) -> Result<Vec<Bytes>> {
        self.core.recv().await
    }

    /// Receives a message if one is already waiting, without blocking.
    pub fn try_recv(&self) -> Result<Option<Vec<Bytes>>> {
        self.core.try_recv()
    }

    /// Like [`recv`](Self::recv), into a buffer the caller keeps: `frames` is cleared, then
    /// holds the message's frames. A loop that receives into the same `Vec` allocates none
    /// per message.
    pub async fn recv_into(&self, frames: &mut Vec<Bytes>) -> Result<()> {
        frames.clear();
        self.core.recv_into(frames, false).await.map(drop)
    }

    /// Like [`try_recv`](Self::try_recv), into a buffer the caller keeps, as in
    /// [`recv_into`](Self::recv_into): whether a message was there.
    pub fn try_recv_into(&self, frames: &mut Vec<Bytes>) -> Result<bool> {
        frames.clear();
        Ok(self.core.try_recv_into(frames, false)?.is_some())
    }

    shared_methods!("an empty id");
}

impl fmt::Debug for Dealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dealer")
            .field("closed", &self.is_closed())
            .finish()
    }
}
