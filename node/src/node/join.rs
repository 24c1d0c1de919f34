//! Joining: the handshake's two sides as the node runs them (the server side on its
//! socket's driver, the client side in its connection's supervisor), around the pure
//! decision of `handshake.rs` (`admit`).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use protocol::{encode_value, Answer, Client, Incoming, RemoteError, Server};
use tokio::time::Instant;

use crate::codes::system::{
    ALREADY_JOINED, BAD_HANDSHAKE, DUPLICATE_ID, NOT_AUTHORIZED, VERSION_MISMATCH,
};
use crate::error::{Error, Result};
use crate::mesh::handshake::{
    admit, Admission, Hello, Holder, Refusal, HANDSHAKE, PROTOCOL_VERSION,
};
use crate::mesh::link::Link;
use crate::mesh::peer::{Direction, Entry, PeerWork, Reach, Ticket};
use crate::node::inner::Inner;
use crate::observation::events::{ErrorSource, NodeEvent};

impl Inner {
    /// Our hello, with no ticket.
    pub(crate) fn hello(&self) -> Hello {
        Hello {
            id: self.id.clone(),
            instance: self.instance.clone(),
            version: PROTOCOL_VERSION,
            options: self.options.read().clone(),
            router: self.config.router,
            heartbeat_ms: crate::context::millis(self.config.heartbeat_interval),
            max_payload: self.config.max_payload as u64,
            token: Ticket::default(),
        }
    }

    /// How long a peer may stay silent: our dead-peer timeout, stretched to two and a half of
    /// the peer's own heartbeat intervals when it beats slower than we do.
    pub(crate) fn dead_after(&self, hello: &Hello) -> Duration {
        let theirs = Duration::from_millis(hello.heartbeat_ms) * 5 / 2;
        self.config.dead_peer_timeout.max(theirs)
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
    // The ticket this join gets: random, sent only on this connection.
    let ticket = Ticket::random();
    let joined = {
        let mut state = inner.state.lock();
        let held = [Direction::Downstream, Direction::Upstream]
            .into_iter()
            .find_map(|d| state.registry.get(&hello.id, d));
        let holder = held.map(|e| Holder {
            instance: &e.instance,
            ticket: e.token.as_ref(),
            same_connection: e.link().route() == Some(&route),
        });
        let bound = key.is_none_or(|key| inner.keys.may_claim(&hello.id, &key));
        let decision = admit(
            &hello,
            Admission {
                ours: &inner.id,
                holder,
                connection_joined: state.routes.get(&route),
                key: allowed.map(|(key, still)| (key, still && bound)),
            },
        );
        decision.and_then(|()| {
            let limit = hello.limit(inner.config.max_payload);
            let entry = Entry {
                reach: Reach::new(
                    hello.id.clone(),
                    Direction::Downstream,
                    Arc::new(Link::down(server, &route, limit)),
                ),
                options: hello.options.clone(),
                instance: hello.instance.clone(),
                token: Some(ticket.clone()),
                router: hello.router,
                key,
                last_seen: Arc::new(Mutex::new(Instant::now().into_std())),
                dead_after: inner.dead_after(&hello),
                work: Arc::new(PeerWork::new(limit, inner.runtime.stopping())),
                draining: false,
            };
            state.join_downstream(entry, route)
        })
    };
    if let (Ok(_), Some(key)) = (&joined, key) {
        inner.keys.bind(&hello.id, key);
    }
    match joined {
        Ok(is_new) => {
            if is_new {
                tracing::debug!(node = %inner.id, peer = %hello.id, "downstream peer joined");
                inner.observers.emit(NodeEvent::PeerJoined {
                    id: hello.id.clone(),
                    direction: Direction::Downstream,
                    options: hello.options.clone(),
                });
            }
            let reply = Hello {
                token: ticket,
                ..inner.hello()
            };
            encode_value(&reply)
                .map(Answer::from)
                .map_err(|e| RemoteError::handler(e.to_string()))
        }
        Err(refusal) => {
            inner.observers.report(
                ErrorSource::Handshake,
                format!("refused {}: {refusal}", hello.id),
            );
            Err(refusal.to_remote(&hello))
        }
    }
}

/// How long to wait before asking again after the `attempt`th (from 0) refusal of our id
/// as a duplicate, `None` to give up: 25 ms doubling, about 1.5 s in all. A node restarted
/// under its id gets in once its old instance's goodbye arrives; a live duplicate is still
/// refused, only later.
fn duplicate_retry(attempt: u32) -> Option<Duration> {
    const TRIES: u32 = 6;
    (attempt < TRIES).then(|| Duration::from_millis(25) * 2u32.pow(attempt))
}

/// The client side: sends our hello (with the ticket this server gave us when we joined
/// it before, if we did), checks the server's. Returns the server's hello, whose `token`
/// is the ticket of this join.
pub(crate) async fn handshake_upstream(
    inner: &Inner,
    client: &Client,
    ticket: Option<&Ticket>,
) -> Result<Hello> {
    let ours = Hello {
        token: ticket.cloned().unwrap_or_default(),
        ..inner.hello()
    };
    let payload = encode_value(&ours)?;
    let mut attempt = 0;
    let reply = loop {
        let answer = client
            .peer()
            .system()
            .request_with(
                HANDSHAKE,
                &[],
                payload.clone(),
                inner.config.handshake_timeout,
            )
            .await;
        // Our id may be held by the instance we replace, whose goodbye is still on its way
        // on its own connection: ask again a few times before taking it as a duplicate.
        if let Err(protocol::Error::Remote(remote)) = &answer {
            if remote.system && remote.code == DUPLICATE_ID {
                if let Some(wait) = duplicate_retry(attempt) {
                    attempt += 1;
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
        }
        break answer;
    };
    let reply = match reply {
        Ok(reply) => reply,
        Err(protocol::Error::Remote(remote)) if remote.system => {
            return Err(match remote.code.as_str() {
                DUPLICATE_ID | ALREADY_JOINED => Error::DuplicateId {
                    id: inner.id.to_string(),
                },
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
            connection_joined: None,
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

    #[test]
    fn a_refused_id_is_asked_again_for_about_a_second_and_a_half() {
        let waits: Vec<Duration> = (0..).map_while(duplicate_retry).collect();
        assert_eq!(waits.first(), Some(&Duration::from_millis(25)));
        let total: Duration = waits.iter().sum();
        assert!(total >= Duration::from_secs(1) && total <= Duration::from_secs(2));
        assert!(waits.windows(2).all(|w| w[1] == w[0] * 2));
    }
}
