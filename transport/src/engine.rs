//! The two engines behind [`Router`](crate::Router) and [`Dealer`](crate::Dealer): libzmq,
//! and the native ZMTP engine in Rust. Both speak ZMTP 3.1 on the wire, so a socket of one
//! talks to a socket of the other; the API above does not change with the engine.

use std::sync::OnceLock;

use bytes::Bytes;

use crate::curve::{AllowList, Key};
use crate::error::{Error, Result};
use crate::frame::Frame;
use crate::ids::Engine;
use crate::monitor::Events;
use crate::native;
use crate::options::{Backpressure, Options};
#[cfg(feature = "libzmq")]
use crate::socket::Core;

impl Engine {
    /// The process's default: `ZERONODE_ENGINE` (`native` or `libzmq`), else native. An
    /// unknown value is reported once and ignored.
    pub fn from_env() -> Engine {
        static DEFAULT: OnceLock<Engine> = OnceLock::new();
        *DEFAULT.get_or_init(|| match std::env::var("ZERONODE_ENGINE") {
            Ok(value) => value.parse().unwrap_or_else(|_| {
                tracing::warn!(
                    value,
                    "ZERONODE_ENGINE is `native` or `libzmq`: using native"
                );
                Engine::Native
            }),
            Err(_) => Engine::Native,
        })
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine::from_env()
    }
}

impl std::str::FromStr for Engine {
    type Err = Error;

    fn from_str(text: &str) -> Result<Engine> {
        match text.to_ascii_lowercase().as_str() {
            "libzmq" | "zmq" => Ok(Engine::Libzmq),
            "native" => Ok(Engine::Native),
            _ => Err(Error::UnknownEngine {
                name: text.to_owned(),
            }),
        }
    }
}

/// A socket on one engine or the other.
// Always behind the `Arc` of a Router or Dealer: the larger variant costs one allocation's
// size, not a move; boxing it would add a pointer hop to every call on the libzmq engine.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Sock {
    #[cfg(feature = "libzmq")]
    Zmq(Core),
    Native(native::Socket),
}

/// Calls the same method on whichever engine the socket runs.
macro_rules! on_engine {
    ($self:ident, $name:ident($($arg:expr),*)) => {
        match $self {
            #[cfg(feature = "libzmq")]
            Sock::Zmq(core) => core.$name($($arg),*),
            Sock::Native(socket) => socket.$name($($arg),*),
        }
    };
    ($self:ident, $name:ident($($arg:expr),*).await) => {
        match $self {
            #[cfg(feature = "libzmq")]
            Sock::Zmq(core) => core.$name($($arg),*).await,
            Sock::Native(socket) => socket.$name($($arg),*).await,
        }
    };
}

impl Sock {
    pub(crate) fn new(router: bool, options: &Options) -> Result<Sock> {
        Ok(match options.engine {
            #[cfg(feature = "libzmq")]
            Engine::Libzmq => Sock::Zmq(Core::new(
                if router { zmq::ROUTER } else { zmq::DEALER },
                options,
            )?),
            // Never a quiet fallback to the native engine: whoever chose libzmq (an option,
            // `ZERONODE_ENGINE`) is told at once that this build does not have it.
            #[cfg(not(feature = "libzmq"))]
            Engine::Libzmq => {
                return Err(Error::EngineUnavailable {
                    engine: Engine::Libzmq,
                })
            }
            Engine::Native => Sock::Native(native::Socket::new(router, options)?),
        })
    }

    pub(crate) fn bind(&self, endpoint: &str) -> Result<String> {
        on_engine!(self, bind(endpoint))
    }

    pub(crate) async fn unbind(&self, endpoint: &str) -> Result<()> {
        on_engine!(self, unbind(endpoint).await)
    }

    pub(crate) fn connect(&self, endpoint: &str) -> Result<()> {
        on_engine!(self, connect(endpoint))
    }

    pub(crate) fn disconnect(&self, endpoint: &str) -> Result<()> {
        on_engine!(self, disconnect(endpoint))
    }

    pub(crate) async fn close(&self) {
        on_engine!(self, close().await)
    }

    pub(crate) fn is_closed(&self) -> bool {
        on_engine!(self, is_closed())
    }

    pub(crate) fn events(&self) -> Result<Events> {
        on_engine!(self, events())
    }

    pub(crate) fn allow_list(&self) -> Result<&AllowList> {
        on_engine!(self, allow_list())
    }

    pub(crate) fn is_curve_server(&self) -> bool {
        on_engine!(self, is_curve_server())
    }

    /// Hands received messages to `deliver` on the connections' drivers: the native engine
    /// does, libzmq's cannot (its messages are read from its own threads' queues).
    pub(crate) fn deliver_to(&self, deliver: std::sync::Arc<dyn crate::Deliver>) -> bool {
        match self {
            #[cfg(feature = "libzmq")]
            Sock::Zmq(_) => false,
            Sock::Native(socket) => {
                socket.deliver_to(deliver);
                true
            }
        }
    }

    pub(crate) async fn send<F: Frame + Sync>(
        &self,
        frames: &[F],
        peer: Option<&Bytes>,
    ) -> Result<()> {
        on_engine!(self, send(frames, peer).await)
    }

    pub(crate) async fn send_with<F: Frame + Sync>(
        &self,
        frames: &[F],
        peer: Option<&Bytes>,
        backpressure: Backpressure,
    ) -> Result<()> {
        on_engine!(self, send_with(frames, peer, backpressure).await)
    }

    pub(crate) fn send_now<F: Frame>(&self, frames: &[F], peer: Option<&Bytes>) -> Result<()> {
        on_engine!(self, send_now(frames, peer))
    }

    /// Receives one multipart message (a Router's begins with the routing id).
    pub(crate) async fn recv(&self) -> Result<Vec<Bytes>> {
        self.recv_message(false).await.map(|(frames, _)| frames)
    }

    /// [`recv`](Self::recv) with the CURVE client key of a CURVE server's message.
    pub(crate) async fn recv_message(&self, with_key: bool) -> Result<(Vec<Bytes>, Option<Key>)> {
        let mut frames = Vec::with_capacity(2);
        let key = self.recv_into(&mut frames, with_key).await?;
        Ok((frames, key))
    }

    pub(crate) async fn recv_into(
        &self,
        frames: &mut Vec<Bytes>,
        with_key: bool,
    ) -> Result<Option<Key>> {
        on_engine!(self, recv_into(frames, with_key).await)
    }

    /// Receives one message if one is already there, without waiting.
    pub(crate) fn try_recv(&self) -> Result<Option<Vec<Bytes>>> {
        Ok(self.try_recv_message(false)?.map(|(frames, _)| frames))
    }

    /// [`try_recv`](Self::try_recv) with the CURVE client key, as in
    /// [`recv_message`](Self::recv_message).
    pub(crate) fn try_recv_message(
        &self,
        with_key: bool,
    ) -> Result<Option<(Vec<Bytes>, Option<Key>)>> {
        let mut frames = Vec::with_capacity(2);
        Ok(self
            .try_recv_into(&mut frames, with_key)?
            .map(|key| (frames, key)))
    }

    pub(crate) fn try_recv_into(
        &self,
        frames: &mut Vec<Bytes>,
        with_key: bool,
    ) -> Result<Option<Option<Key>>> {
        on_engine!(self, try_recv_into(frames, with_key))
    }
}
