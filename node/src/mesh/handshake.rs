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

use protocol::RemoteError;
use serde::{Deserialize, Serialize};
use transport::Key;

use crate::codes::system::{ALREADY_JOINED, DUPLICATE_ID, NOT_AUTHORIZED, VERSION_MISMATCH};
use crate::mesh::peer::{NodeId, Ticket};
use crate::options::Options;

/// The node protocol version exchanged in the handshake.
pub const PROTOCOL_VERSION: u32 = 1;

// The names of the system messages about joining and membership (`crate::node::system` has one
// file per message, with its payload and its effect; the names stay here, in a leaf, so
// that the senders need not import the effects).
pub(crate) const HANDSHAKE: &str = "_system:handshake";
pub(crate) const HEARTBEAT: &str = "_system:heartbeat";
pub(crate) const OPTIONS: &str = "_system:options";
pub(crate) const BYE: &str = "_system:bye";
pub(crate) const DRAINING: &str = "_system:draining";
pub(crate) const REJOIN: &str = "_system:rejoin";

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
    /// A ticket: in a server's reply, a random value it issues to this join, sent only on
    /// this connection; in a client's hello, the ticket this address gave it before (empty
    /// on a first join). A claim of an id held on another connection must bring its
    /// holder's ticket, which nobody but the holder ever saw.
    #[serde(default)]
    pub(crate) token: Ticket,
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
    /// It claims our own id, or an id held on another connection without its ticket.
    DuplicateId,
    /// Its CURVE key is not on the allow-list (any more), or the id is bound to another key.
    NotAuthorized(Key),
    /// The connection already joined another id: one connection joins one id.
    AlreadyJoined,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::VersionMismatch { theirs } => {
                write!(f, "protocol version {theirs} (ours {PROTOCOL_VERSION})")
            }
            Refusal::DuplicateId => f.write_str("its id is ours or another node's"),
            Refusal::NotAuthorized(key) => write!(f, "key {key} is not allowed for it"),
            Refusal::AlreadyJoined => f.write_str("its connection joined another id"),
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
            Refusal::AlreadyJoined => {
                RemoteError::system_error(ALREADY_JOINED, hello.id.to_string())
            }
        }
    }
}

/// Who holds the id a hello claims, as the admission needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holder<'a> {
    /// The holder's instance.
    pub(crate) instance: &'a str,
    /// The ticket we issued to the holder, when it joined us (downstream); `None` when we
    /// hold the id only because we connected to it (upstream).
    pub(crate) ticket: Option<&'a Ticket>,
    /// Whether the claim comes on the holder's own connection (a new handshake there).
    pub(crate) same_connection: bool,
}

/// What the admission of a hello needs to know about this node, as plain data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admission<'a> {
    /// Our own id.
    pub(crate) ours: &'a NodeId,
    /// Who holds the hello's id among our peers now, if anyone.
    pub(crate) holder: Option<Holder<'a>>,
    /// The id the claiming connection joined already, if any.
    pub(crate) connection_joined: Option<&'a NodeId>,
    /// The peer's CURVE key, and whether it may join with this id: still on the
    /// allow-list, and the key the id first joined with (`None`: plaintext).
    pub(crate) key: Option<(Key, bool)>,
}

/// The decision on a peer's hello, used by both sides:
/// - the version must be ours, the id not ours;
/// - one connection joins one id;
/// - an id held by a live connection that joined us is taken only by a new handshake on
///   that same connection from the same instance, or by a claim from the same instance
///   that brings the ticket we issued to the holder (the holder itself on a new
///   connection, after a reconnect); anything else is a duplicate;
/// - an id we hold only because we connected to it may join us too from the same instance
///   (two nodes connected both ways); plaintext cannot prove more here (ARCHITECTURE.md);
/// - with CURVE, the key must be allowed for the id.
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
        .connection_joined
        .is_some_and(|joined| joined != &hello.id)
    {
        return Err(Refusal::AlreadyJoined);
    }
    if let Some((key, false)) = admission.key {
        return Err(Refusal::NotAuthorized(key));
    }
    let Some(holder) = admission.holder else {
        return Ok(());
    };
    if holder.instance != hello.instance {
        return Err(Refusal::DuplicateId);
    }
    match holder.ticket {
        _ if holder.same_connection => Ok(()),
        None => Ok(()),
        Some(ticket) if !hello.token.is_empty() && hello.token.matches(ticket) => Ok(()),
        Some(_) => Err(Refusal::DuplicateId),
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
            token: Ticket::default(),
        }
    }

    fn proving(id: &str, instance: &str, token: &str) -> Hello {
        Hello {
            token: Ticket::from(token),
            ..hello(id, instance)
        }
    }

    fn admission(ours: &NodeId) -> Admission<'_> {
        Admission {
            ours,
            holder: None,
            connection_joined: None,
            key: None,
        }
    }

    fn held_by<'a>(ours: &'a NodeId, holder: Holder<'a>) -> Admission<'a> {
        Admission {
            holder: Some(holder),
            ..admission(ours)
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
    fn our_own_id_is_a_duplicate() {
        let ours = NodeId::from("server");
        assert_eq!(
            admit(&hello("server", "i1"), admission(&ours)),
            Err(Refusal::DuplicateId)
        );
    }

    #[test]
    fn a_held_id_is_taken_only_on_its_connection_or_with_its_ticket() {
        let ours = NodeId::from("server");
        let proof = Ticket::from("proof-1");
        let on_its_connection = Holder {
            instance: "i1",
            ticket: Some(&proof),
            same_connection: true,
        };
        // The same instance handshaking again on its connection.
        assert_eq!(
            admit(&hello("client", "i1"), held_by(&ours, on_its_connection)),
            Ok(())
        );
        let elsewhere = Holder {
            same_connection: false,
            ..on_its_connection
        };
        // Another connection, no ticket.
        assert_eq!(
            admit(&hello("client", "i1"), held_by(&ours, elsewhere)),
            Err(Refusal::DuplicateId)
        );
        // The hijack: the holder's instance (which anyone it joined learned) without the
        // ticket we gave only to it.
        assert_eq!(
            admit(&proving("client", "i1", "guess"), held_by(&ours, elsewhere)),
            Err(Refusal::DuplicateId)
        );
        // The holder itself on a new connection (a reconnect) brings its ticket.
        assert_eq!(
            admit(
                &proving("client", "i1", "proof-1"),
                held_by(&ours, elsewhere)
            ),
            Ok(())
        );
        // Another process under the same id, even with the ticket, is not the holder.
        assert_eq!(
            admit(
                &proving("client", "i2", "proof-1"),
                held_by(&ours, elsewhere)
            ),
            Err(Refusal::DuplicateId)
        );
        // An id we hold only because we connected to it (no ticket of ours): the same
        // instance may join us too (both ways), another may not.
        let upstream = Holder {
            ticket: None,
            ..elsewhere
        };
        assert_eq!(
            admit(&hello("client", "i1"), held_by(&ours, upstream)),
            Ok(())
        );
        assert_eq!(
            admit(&hello("client", "i2"), held_by(&ours, upstream)),
            Err(Refusal::DuplicateId)
        );
    }

    #[test]
    fn one_connection_joins_one_id() {
        let ours = NodeId::from("server");
        let first = NodeId::from("first");
        let joined = Admission {
            connection_joined: Some(&first),
            ..admission(&ours)
        };
        assert_eq!(
            admit(&hello("second", "i1"), joined),
            Err(Refusal::AlreadyJoined)
        );
        assert_eq!(admit(&hello("first", "i1"), joined), Ok(()));
    }

    #[test]
    fn a_key_not_allowed_for_the_id_is_refused() {
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

    #[test]
    fn a_ticket_matches_only_itself_is_never_printed_and_travels_as_a_string() {
        let ticket = Ticket::random();
        assert!(ticket.matches(&ticket.clone()));
        assert!(!ticket.matches(&Ticket::random()));
        assert!(!ticket.matches(&Ticket::default()));
        let mut one_off = ticket.0.clone();
        one_off.pop();
        one_off.push('x');
        assert!(!ticket.matches(&Ticket(one_off)));
        let shown = format!("{:?}", proving("client", "i1", &ticket.0));
        assert!(!shown.contains(&ticket.0), "{shown}");
        assert!(shown.contains("Ticket(<hidden>)"));
        // On the wire it is the plain string older versions sent.
        let wire = rmp_serde::to_vec_named(&ticket).unwrap();
        assert_eq!(wire, rmp_serde::to_vec_named(&ticket.0).unwrap());
        let back: Ticket = rmp_serde::from_slice(&wire).unwrap();
        assert!(back.matches(&ticket));
    }
}
