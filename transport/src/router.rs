//! The server side: a ROUTER socket.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use crate::curve::Key;
use crate::engine::Sock;
use crate::error::Result;
use crate::frame::Frame;
use crate::ids::PeerId;
use crate::monitor::Events;
use crate::options::Options;
use crate::shared::shared_methods;

/// An asynchronous ROUTER socket: receives `(peer, frames)` and sends frames to a peer.
///
/// Cheap to clone: clones share the socket. Sending and receiving may happen from different
/// tasks at once.
///
/// ```
/// # #[tokio::main] async fn main() -> transport::Result<()> {
/// use bytes::Bytes;
/// use transport::{Dealer, Router};
///
/// let router = Router::new()?;
/// let endpoint = router.bind("tcp://127.0.0.1:0")?;
/// let dealer = Dealer::new()?;
/// dealer.connect(&endpoint)?;
///
/// dealer.send(vec![Bytes::from_static(b"ping")]).await?;
/// let (peer, frames) = router.recv().await?;
/// router.send(&peer, frames).await?;
/// assert_eq!(dealer.recv().await?, vec![Bytes::from_static(b"ping")]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Router {
    core: Arc<Sock>,
}

impl Router {
    /// A Router with default [`Options`]. Must be called inside a tokio runtime.
    pub fn new() -> Result<Router> {
        Router::with_options(Options::default())
    }

    /// A Router with the given options. Must be called inside a tokio runtime.
    pub fn with_options(options: Options) -> Result<Router> {
        Ok(Router {
            core: Arc::new(Sock::new(true, &options)?),
        })
    }

    /// Binds to `endpoint` and returns the endpoint actually bound: `tcp://127.0.0.1:0`
    /// comes back with the port the system chose. A Router may bind several endpoints.
    pub fn bind(&self, endpoint: &str) -> Result<String> {
        self.core.bind(endpoint)
    }

    /// Stops listening on `endpoint` (as returned by [`bind`](Self::bind)).
    pub async fn unbind(&self, endpoint: &str) -> Result<()> {
        self.core.unbind(endpoint).await
    }

    /// Connects to a bound endpoint (a Router may connect, too).
    pub fn connect(&self, endpoint: &str) -> Result<()> {
        self.core.connect(endpoint)
    }

    /// Drops the connection made by [`connect`](Self::connect).
    pub fn disconnect(&self, endpoint: &str) -> Result<()> {
        self.core.disconnect(endpoint)
    }

    /// Sends a multipart message to `peer`. Waits at the high-water mark (or fails with
    /// [`Error::QueueFull`](crate::Error::QueueFull), by option); an unknown peer is
    /// [`Error::UnknownPeer`](crate::Error::UnknownPeer).
    pub async fn send(&self, peer: &PeerId, frames: Vec<Bytes>) -> Result<()> {
        self.core.send(&frames, Some(&peer.0)).await
    }

    /// Like [`send`](Self::send), borrowing the frames (`Bytes`, or any [`Frame`], such as a
    /// frame given as the pieces it is made of).
    pub async fn send_frames<F: Frame + Sync>(&self, peer: &PeerId, frames: &[F]) -> Result<()> {
        self.core.send(frames, Some(&peer.0)).await
    }

    /// Sends without waiting: at the high-water mark this fails with
    /// [`Error::QueueFull`](crate::Error::QueueFull) whatever the socket's backpressure
    /// option (for answers to a peer that may not be reading them).
    pub async fn try_send<F: Frame + Sync>(&self, peer: &PeerId, frames: &[F]) -> Result<()> {
        self.core
            .send_with(frames, Some(&peer.0), crate::Backpressure::Fail)
            .await
    }

    /// Sends now or not at all, without a future: at the high-water mark this fails with
    /// [`Error::QueueFull`](crate::Error::QueueFull) whatever the socket's backpressure
    /// option. What [`try_send`](Self::try_send) does, for callers that are not async.
    pub fn send_now<F: Frame>(&self, peer: &PeerId, frames: &[F]) -> Result<()> {
        self.core.send_now(frames, Some(&peer.0))
    }

    /// Receives the next message with the routing id of the peer that sent it.
    pub async fn recv(&self) -> Result<(PeerId, Vec<Bytes>)> {
        loop {
            let mut frames = self.core.recv().await?;
            // A ROUTER always prefixes the routing id; a message without one cannot happen,
            // but it must not panic either: skip it.
            if frames.is_empty() {
                continue;
            }
            let peer = PeerId(frames.remove(0));
            return Ok((peer, frames));
        }
    }

    /// Like [`recv`](Self::recv), into a buffer the caller keeps: `frames` is cleared, then
    /// holds the message's frames (without the routing id, which is returned). A loop that
    /// receives into the same `Vec` allocates none per message.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> transport::Result<()> {
    /// use bytes::Bytes;
    /// use transport::{Dealer, Router};
    ///
    /// let router = Router::new()?;
    /// let endpoint = router.bind("tcp://127.0.0.1:0")?;
    /// let dealer = Dealer::new()?;
    /// dealer.connect(&endpoint)?;
    /// dealer.send(vec![Bytes::from_static(b"ping")]).await?;
    ///
    /// let mut frames = Vec::new();
    /// let peer = router.recv_into(&mut frames).await?;
    /// router.send_frames(&peer, &frames).await?;
    /// assert_eq!(dealer.recv().await?, vec![Bytes::from_static(b"ping")]);
    /// # Ok(()) }
    /// ```
    pub async fn recv_into(&self, frames: &mut Vec<Bytes>) -> Result<PeerId> {
        loop {
            frames.clear();
            self.core.recv_into(frames, false).await?;
            if frames.is_empty() {
                continue;
            }
            return Ok(PeerId(frames.remove(0)));
        }
    }

    /// Like [`try_recv`](Self::try_recv), into a buffer the caller keeps, as in
    /// [`recv_into`](Self::recv_into): the routing id when a message was there.
    pub fn try_recv_into(&self, frames: &mut Vec<Bytes>) -> Result<Option<PeerId>> {
        loop {
            frames.clear();
            if self.core.try_recv_into(frames, false)?.is_none() {
                return Ok(None);
            }
            if frames.is_empty() {
                continue;
            }
            return Ok(Some(PeerId(frames.remove(0))));
        }
    }

    /// Receives a message if one is already waiting, without blocking.
    pub fn try_recv(&self) -> Result<Option<(PeerId, Vec<Bytes>)>> {
        loop {
            let Some(mut frames) = self.core.try_recv()? else {
                return Ok(None);
            };
            if frames.is_empty() {
                continue;
            }
            let peer = PeerId(frames.remove(0));
            return Ok(Some((peer, frames)));
        }
    }

    /// Like [`recv`](Self::recv), with the CURVE public key of the client that sent the
    /// message, so the layer above can authorize by key: CURVE proved that the sender holds
    /// the matching secret key. The key is `None` when this Router is not a CURVE server
    /// (then this costs the same as `recv`).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> transport::Result<()> {
    /// use bytes::Bytes;
    /// use transport::{Curve, Dealer, KeyPair, Options, Router};
    ///
    /// let (server_keys, client_keys) = (KeyPair::generate()?, KeyPair::generate()?);
    /// let router = Router::with_options(Options::default().curve(Curve::server(&server_keys)))?;
    /// let endpoint = router.bind("tcp://127.0.0.1:0")?;
    /// let dealer = Dealer::with_options(
    ///     Options::default().curve(Curve::client(&client_keys, server_keys.public)),
    /// )?;
    /// dealer.connect(&endpoint)?;
    /// dealer.send(vec![Bytes::from_static(b"who am i")]).await?;
    /// let (_peer, key, _frames) = router.recv_with_key().await?;
    /// assert_eq!(key, Some(client_keys.public));
    /// # Ok(()) }
    /// ```
    pub async fn recv_with_key(&self) -> Result<(PeerId, Option<Key>, Vec<Bytes>)> {
        let with_key = self.core.is_curve_server();
        loop {
            let (mut frames, key) = self.core.recv_message(with_key).await?;
            if frames.is_empty() {
                continue;
            }
            let peer = PeerId(frames.remove(0));
            return Ok((peer, key, frames));
        }
    }

    /// Like [`try_recv`](Self::try_recv), with the client's CURVE key as in
    /// [`recv_with_key`](Self::recv_with_key).
    // The same tuple as `recv_with_key`, in an Option; an alias would hide it from readers.
    #[allow(clippy::type_complexity)]
    pub fn try_recv_with_key(&self) -> Result<Option<(PeerId, Option<Key>, Vec<Bytes>)>> {
        let with_key = self.core.is_curve_server();
        loop {
            let Some((mut frames, key)) = self.core.try_recv_message(with_key)? else {
                return Ok(None);
            };
            if frames.is_empty() {
                continue;
            }
            let peer = PeerId(frames.remove(0));
            return Ok(Some((peer, key, frames)));
        }
    }

    /// [`recv_with_key`](Self::recv_with_key) into a buffer the caller keeps, as in
    /// [`recv_into`](Self::recv_into): `frames` is cleared, then holds the message's frames;
    /// the routing id and the client's key are returned.
    pub async fn recv_with_key_into(
        &self,
        frames: &mut Vec<Bytes>,
    ) -> Result<(PeerId, Option<Key>)> {
        let with_key = self.core.is_curve_server();
        loop {
            frames.clear();
            let key = self.core.recv_into(frames, with_key).await?;
            if frames.is_empty() {
                continue;
            }
            return Ok((PeerId(frames.remove(0)), key));
        }
    }

    /// [`try_recv_with_key`](Self::try_recv_with_key) into a buffer the caller keeps, as in
    /// [`recv_with_key_into`](Self::recv_with_key_into).
    pub fn try_recv_with_key_into(
        &self,
        frames: &mut Vec<Bytes>,
    ) -> Result<Option<(PeerId, Option<Key>)>> {
        let with_key = self.core.is_curve_server();
        loop {
            frames.clear();
            let Some(key) = self.core.try_recv_into(frames, with_key)? else {
                return Ok(None);
            };
            if frames.is_empty() {
                continue;
            }
            return Ok(Some((PeerId(frames.remove(0)), key)));
        }
    }

    /// CURVE server only: accept exactly these client keys from now on (an empty list refuses
    /// everyone). Without a list, a CURVE server accepts any client that knows its public
    /// key. Applies to handshakes that start after the call; connections already up stay up.
    /// [`Error::NotCurveServer`](crate::Error::NotCurveServer) on any other socket.
    ///
    /// Both ends of a refused connection see
    /// [`Event::HandshakeFailed`](crate::Event::HandshakeFailed) with
    /// [`HandshakeFailure::Auth`](crate::HandshakeFailure::Auth). libzmq does not retry a
    /// connection the server refused: once its key is allowed, the client must `disconnect`
    /// and `connect` again.
    pub fn allow_keys(&self, keys: impl IntoIterator<Item = Key>) -> Result<()> {
        self.core
            .allow_list()?
            .set(Some(keys.into_iter().collect()));
        Ok(())
    }

    /// CURVE server only: add one key to the allow-list. If there was no list (any client
    /// accepted), this starts one that holds only this key.
    pub fn allow_key(&self, key: Key) -> Result<()> {
        self.core.allow_list()?.insert(key);
        Ok(())
    }

    /// CURVE server only: take a key off the allow-list; whether it was on it. New
    /// handshakes with it are refused; a connection already up stays up until it drops.
    pub fn revoke_key(&self, key: &Key) -> Result<bool> {
        Ok(self.core.allow_list()?.remove(key))
    }

    /// CURVE server only: drop the allow-list, accepting any client that knows our public key.
    pub fn allow_any_key(&self) -> Result<()> {
        self.core.allow_list()?.set(None);
        Ok(())
    }

    /// CURVE server only: the keys on the allow-list, `None` when there is no list.
    pub fn allowed_keys(&self) -> Result<Option<Vec<Key>>> {
        Ok(self.core.allow_list()?.keys())
    }

    shared_methods!("its routing id");
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("closed", &self.is_closed())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn peer_ids_are_equal_exactly_when_their_bytes_are() {
        let empty = PeerId(Bytes::new());
        let also_empty = PeerId(Bytes::from_static(b""));
        let a = PeerId(Bytes::from_static(b"\x00abcd"));
        let a_again = PeerId(Bytes::copy_from_slice(b"\x00abcd"));
        let b = PeerId(Bytes::from_static(b"\x00abce"));
        assert_eq!(empty, also_empty);
        assert_ne!(empty, a);
        assert_ne!(a, empty);
        assert_eq!(a, a_again);
        assert_ne!(a, b);
        // Hashing agrees with equality.
        let set: HashSet<PeerId> = [empty, also_empty, a, a_again, b].into_iter().collect();
        assert_eq!(set.len(), 3);
    }
}
