//! The handshake: what two nodes tell each other when they join, the decision to admit a
//! peer (pure, the same on both sides), and the two sides' steps around it.
//!
//! ```text
//! client node C                                  server node S
//!   request _system:handshake {id, instance, version, options, router, heartbeat_ms} -->
//!                                      admit(hello, ...) else error reply (system) with the
//!                                      refusal's code; register C (downstream)
//!   <-- reply: S's own hello
//!   admit(S's hello, ...) else give up; register S (upstream)
//! ```

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use protocol::{encode_value, Answer, Client, Incoming, RemoteError, Server};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use transport::Key;

use crate::error::{Error, Result};
use crate::events::{ErrorSource, NodeEvent};
use crate::inner::Inner;
use crate::link::Link;
use crate::options::Options;
use crate::peer::{Direction, Entry, NodeId};

/// The node protocol version exchanged in the handshake.
pub const PROTOCOL_VERSION: u32 = 1;

pub(crate) const HANDSHAKE: &str = "_system:handshake";
pub(crate) const HEARTBEAT: &str = "_system:heartbeat";
pub(crate) const OPTIONS: &str = "_system:options";
pub(crate) const BYE: &str = "_system:bye";
/// Sent by a server to a connection it does not know (it declared the peer dead, or
/// restarted): the peer should handshake again.
pub(crate) const REJOIN: &str = "_system:rejoin";

/// Error codes of refused handshakes and unjoined messages (system error replies).
pub(crate) const DUPLICATE_ID: &str = "DUPLICATE_ID";
pub(crate) const VERSION_MISMATCH: &str = "VERSION_MISMATCH";
pub(crate) const NOT_JOINED: &str = "NOT_JOINED";
/// The handshake of a connection whose CURVE key is not (or no longer) on the allow-list.
pub(crate) const NOT_AUTHORIZED: &str = "NOT_AUTHORIZED";
const BAD_HANDSHAKE: &str = "BAD_HANDSHAKE";

/// What each side tells the other in the handshake.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub(crate) id: NodeId,
    /// Random per process: tells a reconnect of the same node from a second node that claims
    /// the same id.
    pub(crate) instance: String,
    pub(crate) version: u32,
    pub(crate) options: Options,
    /// Whether the sender is a router node.
    #[serde(default)]
    pub(crate) router: bool,
    /// How often the sender sends heartbeats, in milliseconds (0: not said), so that the
    /// receiver does not declare it dead for heartbeats slower than its own.
    #[serde(default)]
    pub(crate) heartbeat_ms: u64,
    /// The largest payload the sender accepts (0: not said), so that the receiver refuses
    /// a larger one before sending it.
    #[serde(default)]
    pub(crate) max_payload: u64,
}

impl Hello {
    /// The largest payload the sender of this hello accepts: what it said, or ours when it
    /// said nothing (a peer of an older version, configured like us by default).
    pub(crate) fn limit(&self, ours: usize) -> usize {
        match self.max_payload {
            0 => ours,
            said => usize::try_from(said).unwrap_or(usize::MAX),
        }
    }
}

/// Why a peer's hello is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It speaks another node protocol version.
    VersionMismatch {
        /// Its version.
        theirs: u32,
    },
    /// It claims our own id, or an id another live instance holds.
    DuplicateId,
    /// Its CURVE key is not on the allow-list (any more).
    NotAuthorized(Key),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::VersionMismatch { theirs } => {
                write!(f, "protocol version {theirs} (ours {PROTOCOL_VERSION})")
            }
            Refusal::DuplicateId => f.write_str("its id is ours or another node's"),
            Refusal::NotAuthorized(key) => write!(f, "key {key} is not allowed"),
        }
    }
}

impl Refusal {
    /// The error reply the server answers with.
    pub(crate) fn to_remote(&self, hello: &Hello) -> RemoteError {
        match self {
            Refusal::VersionMismatch { .. } => {
                RemoteError::system_error(VERSION_MISMATCH, PROTOCOL_VERSION.to_string())
            }
            Refusal::DuplicateId => RemoteError::system_error(DUPLICATE_ID, hello.id.to_string()),
            Refusal::NotAuthorized(key) => {
                RemoteError::system_error(NOT_AUTHORIZED, key.to_string())
            }
        }
    }
}

/// What the admission of a hello needs to know about this node, as plain data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admission<'a> {
    /// Our own id.
    pub(crate) ours: &'a NodeId,
    /// The instance that holds the hello's id among our peers now, if any.
    pub(crate) holder: Option<&'a str>,
    /// The peer's CURVE key, and whether the allow-list still has it (`None`: plaintext,
    /// or no allow-list).
    pub(crate) key: Option<(Key, bool)>,
}

/// The decision on a peer's hello, used by both sides: the version must be ours, the id
/// not ours nor held by another live instance (the same instance rejoining replaces its
/// entry), and a CURVE key still allowed.
pub(crate) fn admit(hello: &Hello, admission: Admission<'_>) -> std::result::Result<(), Refusal> {
    if hello.version != PROTOCOL_VERSION {
        return Err(Refusal::VersionMismatch {
            theirs: hello.version,
        });
    }
    if &hello.id == admission.ours {
        return Err(Refusal::DuplicateId);
    }
    if admission
        .holder
        .is_some_and(|instance| instance != hello.instance)
    {
        return Err(Refusal::DuplicateId);
    }
    if let Some((key, false)) = admission.key {
        return Err(Refusal::NotAuthorized(key));
    }
    Ok(())
}

impl Inner {
    /// Our hello.
    pub(crate) fn hello(&self) -> Hello {
        Hello {
            id: self.id.clone(),
            instance: self.instance.clone(),
            version: PROTOCOL_VERSION,
            options: self.options.read().clone(),
            router: self.config.router,
            heartbeat_ms: crate::inner::millis(self.config.heartbeat_interval),
            max_payload: self.config.max_payload as u64,
        }
    }
}

/// The server side: admits (or refuses) the hello of a connection and registers its node
/// as a downstream peer. Runs on the socket's driver (no waiting).
pub(crate) fn handshake_downstream(
    inner: &Arc<Inner>,
    server: &Server,
    incoming: &Incoming,
) -> std::result::Result<Answer, RemoteError> {
    let hello: Hello = incoming
        .decode()
        .map_err(|e| RemoteError::system_error(BAD_HANDSHAKE, e.to_string()))?;
    let key = incoming.peer_key().copied();
    // The connection passed the allow-list when it was made; the key may have been revoked
    // since (a revoked peer that tries to rejoin on its old connection).
    let allowed = key.map(|key| {
        let still = match server.allowed_keys() {
            Ok(Some(allowed)) => allowed.contains(&key),
            _ => true,
        };
        (key, still)
    });
    let route = incoming.from.clone();
    let joined = {
        let mut state = inner.state.lock();
        let decision = admit(
            &hello,
            Admission {
                ours: &inner.id,
                holder: state.registry.holder(&hello.id),
                key: allowed,
            },
        );
        decision.and_then(|()| {
            let entry = Entry {
                id: hello.id.clone(),
                direction: Direction::Downstream,
                options: hello.options.clone(),
                instance: hello.instance.clone(),
                router: hello.router,
                key,
                link: Link::Down {
                    server: server.clone(),
                    route: route.clone(),
                    limit: hello.limit(inner.config.max_payload),
                },
                last_seen: Arc::new(Mutex::new(Instant::now().into_std())),
                dead_after: inner.dead_after(&hello),
                in_flight: Arc::new(AtomicUsize::new(0)),
                work: Arc::default(),
            };
            state.join_downstream(entry, route)
        })
    };
    match joined {
        Ok(is_new) => {
            if is_new {
                tracing::debug!(node = %inner.id, peer = %hello.id, "downstream peer joined");
                inner.emit(NodeEvent::PeerJoined {
                    id: hello.id,
                    direction: Direction::Downstream,
                    options: hello.options,
                });
            }
            encode_value(&inner.hello())
                .map(Answer::from)
                .map_err(|e| RemoteError::handler(e.to_string()))
        }
        Err(refusal) => {
            inner.report(
                ErrorSource::Handshake,
                format!("refused {}: {refusal}", hello.id),
            );
            Err(refusal.to_remote(&hello))
        }
    }
}

/// The client side: sends our hello, checks the server's.
pub(crate) async fn handshake_upstream(inner: &Inner, client: &Client) -> Result<Hello> {
    let payload = encode_value(&inner.hello())?;
    let reply = match client
        .system_request(
            HANDSHAKE,
            Bytes::new(),
            payload,
            inner.config.handshake_timeout,
        )
        .await
    {
        Ok(reply) => reply,
        Err(protocol::Error::Remote(remote)) if remote.system => {
            return Err(match remote.code.as_str() {
                DUPLICATE_ID => Error::DuplicateId { id: remote.message },
                NOT_AUTHORIZED => Error::Refused {
                    endpoint: client.endpoint().to_owned(),
                    reason: transport::HandshakeFailure::Auth,
                },
                VERSION_MISMATCH => Error::VersionMismatch {
                    ours: PROTOCOL_VERSION,
                    theirs: remote.message.parse().unwrap_or(0),
                },
                _ => Error::HandshakeRefused {
                    reason: remote.to_string(),
                },
            })
        }
        Err(protocol::Error::Remote(remote)) => {
            return Err(Error::HandshakeRefused {
                reason: remote.to_string(),
            })
        }
        Err(protocol::Error::Timeout { .. }) => {
            return Err(Error::HandshakeTimeout {
                endpoint: client.endpoint().to_owned(),
            })
        }
        Err(e) => return Err(e.into()),
    };
    let hello: Hello = reply
        .decode_payload()
        .map_err(|e| Error::HandshakeRefused {
            reason: format!("invalid handshake reply: {e}"),
        })?;
    // The registry's holder is checked when the entry joins (under its lock).
    let checked = admit(
        &hello,
        Admission {
            ours: &inner.id,
            holder: None,
            key: None,
        },
    );
    match checked {
        Ok(()) => Ok(hello),
        Err(Refusal::VersionMismatch { theirs }) => Err(Error::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs,
        }),
        Err(_) => Err(Error::DuplicateId {
            id: hello.id.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(id: &str, instance: &str) -> Hello {
        Hello {
            id: NodeId::from(id),
            instance: instance.to_owned(),
            version: PROTOCOL_VERSION,
            options: Options::default(),
            router: false,
            heartbeat_ms: 1000,
            max_payload: 0,
        }
    }

    fn admission(ours: &NodeId) -> Admission<'_> {
        Admission {
            ours,
            holder: None,
            key: None,
        }
    }

    #[test]
    fn a_new_id_of_our_version_is_admitted() {
        let ours = NodeId::from("server");
        assert_eq!(admit(&hello("client", "i1"), admission(&ours)), Ok(()));
    }

    #[test]
    fn another_version_is_refused_with_its_number() {
        let ours = NodeId::from("server");
        let mut old = hello("client", "i1");
        old.version = PROTOCOL_VERSION + 1;
        assert_eq!(
            admit(&old, admission(&ours)),
            Err(Refusal::VersionMismatch {
                theirs: PROTOCOL_VERSION + 1
            })
        );
    }

    #[test]
    fn our_own_id_or_one_held_by_another_instance_is_a_duplicate() {
        let ours = NodeId::from("server");
        assert_eq!(
            admit(&hello("server", "i1"), admission(&ours)),
            Err(Refusal::DuplicateId)
        );
        let held = Admission {
            holder: Some("i1"),
            ..admission(&ours)
        };
        assert_eq!(
            admit(&hello("client", "i2"), held),
            Err(Refusal::DuplicateId)
        );
        // The same instance rejoining (after a reconnect) is admitted.
        assert_eq!(admit(&hello("client", "i1"), held), Ok(()));
    }

    #[test]
    fn a_key_off_the_allow_list_is_not_authorized() {
        let ours = NodeId::from("server");
        let key = transport::KeyPair::generate().expect("keys").public;
        let revoked = Admission {
            key: Some((key, false)),
            ..admission(&ours)
        };
        assert_eq!(
            admit(&hello("client", "i1"), revoked),
            Err(Refusal::NotAuthorized(key))
        );
        let allowed = Admission {
            key: Some((key, true)),
            ..admission(&ours)
        };
        assert_eq!(admit(&hello("client", "i1"), allowed), Ok(()));
    }

    #[test]
    fn refusals_travel_as_system_errors() {
        let remote = Refusal::DuplicateId.to_remote(&hello("client", "i1"));
        assert!(remote.is_system(DUPLICATE_ID));
        assert_eq!(remote.message, "client");
    }
}
