//! The ZAP handler: which CURVE clients a server socket accepts, and who they are.
//!
//! libzmq asks a ZAP handler (ZeroMQ Authentication Protocol, RFC 27) about every CURVE
//! handshake on a server socket: it sends a request to whatever socket is bound at
//! `inproc://zeromq.zap.01` in the socket's context and waits for the answer before letting
//! the connection through. The request carries the server socket's ZAP domain and the
//! client's public key; the answer is a status code (200 accepts, 400 refuses) and a user id,
//! which libzmq then attaches to every message of that connection as the "User-Id" property.
//!
//! The transport has one libzmq context for the whole process, so there is one handler for
//! the whole process. Each CURVE server socket gets a domain of its own
//! (`zeronode-<n>`, set as ZMQ_ZAP_DOMAIN before it binds) and a [`Registration`] that maps
//! the domain to the socket's [`AllowList`]. The handler answers 200 when the socket has no
//! list or the key is on it, and 400 otherwise; the user id is the client's public key in
//! Z85, so a server can tell who sent each message
//! ([`Router::recv_with_key`](crate::Router::recv_with_key)).
//!
//! The handler runs on a thread of its own, for the reason the monitor hub does
//! (monitor.rs): libzmq holds the handshake until the answer comes, and a reader that a
//! tokio runtime's shutdown could take away would leave every later handshake of the process
//! hanging. The decision itself ([`answer`]) is a pure function over the request's frames.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use crate::curve::{AllowList, Key};
use crate::error::{socket_error, Error, Result};
use crate::socket::context;

/// Where libzmq sends ZAP requests (RFC 27; fixed by libzmq).
const ZAP_ADDRESS: &str = "inproc://zeromq.zap.01";

/// The ZAP domain of every plaintext Router socket. It is there for one effect: libzmq
/// refuses ZMTP 1.0 and 2.0 peers on a socket with a ZAP domain (see `Options::apply`).
/// When a ZAP handler runs in the process (some CURVE server exists), libzmq asks it about
/// the NULL handshakes of these sockets too, and it lets them through; when none runs,
/// libzmq lets them through itself (ZMQ_ZAP_ENFORCE_DOMAIN is off).
pub(crate) const PLAINTEXT_DOMAIN: &str = "zeronode-plaintext";

/// The only ZAP version there is.
const ZAP_VERSION: &[u8] = b"1.0";

/// A CURVE server socket's entry in the handler: its ZAP domain and allow-list. Dropping it
/// (with the socket) removes the entry.
#[derive(Debug)]
pub(crate) struct Registration {
    domain: String,
    allow_list: Arc<AllowList>,
}

impl Registration {
    /// The ZAP domain to set on the socket (ZMQ_ZAP_DOMAIN).
    pub(crate) fn domain(&self) -> &str {
        &self.domain
    }

    /// The socket's allow-list, read by the handler at every handshake.
    pub(crate) fn allow_list(&self) -> &AllowList {
        &self.allow_list
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(handler) = HANDLER.get() {
            handler.domains.write().remove(&self.domain);
        }
    }
}

/// Starts the handler if needed and registers a new server socket with an empty allow-list
/// slot (any client accepted until a list is set).
pub(crate) fn register() -> Result<Registration> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let handler = handler()?;
    let registration = Registration {
        domain: format!("zeronode-{}", NEXT.fetch_add(1, Ordering::Relaxed)),
        allow_list: Arc::new(AllowList::default()),
    };
    handler.domains.write().insert(
        registration.domain.clone(),
        Arc::clone(&registration.allow_list),
    );
    Ok(registration)
}

/// The process-wide handler's shared state: domain -> allow-list.
struct Handler {
    domains: RwLock<HashMap<String, Arc<AllowList>>>,
}

static HANDLER: OnceLock<Handler> = OnceLock::new();

/// The handler, started on first use: its socket is bound before this returns, so libzmq
/// finds it for the first handshake of the socket being created.
fn handler() -> Result<&'static Handler> {
    static STARTING: Mutex<()> = Mutex::new(());
    if let Some(handler) = HANDLER.get() {
        return Ok(handler);
    }
    let _one_at_a_time = STARTING.lock();
    if let Some(handler) = HANDLER.get() {
        return Ok(handler);
    }
    // A ROUTER, not a REP: a malformed request can then be dropped instead of wedging the
    // REP state machine, which needs a reply to every request.
    let socket = context()
        .socket(zmq::ROUTER)
        .map_err(socket_error("create ZAP handler"))?;
    socket
        .bind(ZAP_ADDRESS)
        .map_err(socket_error("bind ZAP handler"))?;
    let handler = HANDLER.get_or_init(|| Handler {
        domains: RwLock::new(HashMap::new()),
    });
    std::thread::Builder::new()
        .name("zeronode-zap".into())
        .spawn(move || run(socket, handler))
        .map_err(|source| Error::Socket {
            operation: "start ZAP thread",
            source,
        })?;
    Ok(handler)
}

fn run(socket: zmq::Socket, handler: &'static Handler) {
    loop {
        let request = match socket.recv_multipart(0) {
            Ok(request) => request,
            // The context is process-wide and never terminated; should that change, stop.
            Err(zmq::Error::ETERM) => return,
            Err(err) => {
                tracing::warn!(cause = %err, "ZAP handler: receive failed");
                continue;
            }
        };
        let lookup = |domain: &str| handler.domains.read().get(domain).cloned();
        let Some(reply) = answer(&request, lookup) else {
            tracing::warn!(
                frames = request.len(),
                "ZAP handler: malformed request dropped"
            );
            continue;
        };
        if let Err(err) = socket.send_multipart(reply, 0) {
            tracing::warn!(cause = %err, "ZAP handler: reply failed");
        }
    }
}

/// The reply to one ZAP request as received by a ROUTER:
/// `[routing id, "", version, request id, domain, address, identity, mechanism, credentials...]`.
/// `None` for a request too malformed to answer (never expected from libzmq).
///
/// The reply is `[routing id, "", "1.0", request id, status, text, user id, metadata]`.
fn answer(
    request: &[Vec<u8>],
    lookup: impl Fn(&str) -> Option<Arc<AllowList>>,
) -> Option<Vec<Vec<u8>>> {
    let [routing_id, delimiter, version, request_id, domain, _address, _identity, mechanism, credentials @ ..] =
        request
    else {
        return None;
    };
    if !delimiter.is_empty() {
        return None;
    }
    let reply = |status: &str, text: &str, user_id: String| {
        Some(vec![
            routing_id.clone(),
            Vec::new(),
            ZAP_VERSION.to_vec(),
            request_id.clone(),
            status.as_bytes().to_vec(),
            text.as_bytes().to_vec(),
            user_id.into_bytes(),
            Vec::new(),
        ])
    };
    if version.as_slice() != ZAP_VERSION {
        return reply("500", "unsupported ZAP version", String::new());
    }
    let domain = String::from_utf8_lossy(domain);
    // A plaintext Router's domain: NULL is what it speaks (it has no keys to check).
    if domain == PLAINTEXT_DOMAIN {
        return if mechanism.as_slice() == b"NULL" {
            reply("200", "OK", String::new())
        } else {
            reply("400", "NULL expected", String::new())
        };
    }
    // Only our CURVE server sockets have another domain; anything else is refused (fail
    // closed).
    let Some(allow_list) = lookup(&domain) else {
        tracing::debug!(%domain, "ZAP: unknown domain refused");
        return reply("400", "unknown domain", String::new());
    };
    if mechanism.as_slice() != b"CURVE" {
        tracing::debug!(%domain, "ZAP: mechanism other than CURVE refused");
        return reply("400", "CURVE required", String::new());
    }
    let [credential] = credentials else {
        return reply("400", "one CURVE key expected", String::new());
    };
    let Ok(key) = Key::try_from(credential.as_slice()) else {
        return reply("400", "malformed CURVE key", String::new());
    };
    if allow_list.allows(&key) {
        tracing::debug!(%domain, %key, "ZAP: CURVE client accepted");
        reply("200", "OK", key.to_z85())
    } else {
        tracing::debug!(%domain, %key, "ZAP: CURVE client not on the allow-list, refused");
        reply("400", "key not allowed", String::new())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn request(domain: &str, mechanism: &str, credentials: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut frames = vec![
            b"pipe-id".to_vec(),
            Vec::new(),
            b"1.0".to_vec(),
            b"7".to_vec(),
            domain.as_bytes().to_vec(),
            b"127.0.0.1".to_vec(),
            Vec::new(),
            mechanism.as_bytes().to_vec(),
        ];
        frames.extend(credentials.iter().map(|c| c.to_vec()));
        frames
    }

    fn status(reply: &[Vec<u8>]) -> (&str, &str) {
        (
            std::str::from_utf8(&reply[4]).unwrap(),
            std::str::from_utf8(&reply[6]).unwrap(),
        )
    }

    #[test]
    fn plaintext_routers_let_null_in_and_nothing_else() {
        let lookup = |_: &str| None;
        let reply = answer(&request(PLAINTEXT_DOMAIN, "NULL", &[]), lookup).unwrap();
        assert_eq!(status(&reply), ("200", ""));
        let key = Key::from_bytes([7; 32]);
        let reply = answer(
            &request(PLAINTEXT_DOMAIN, "CURVE", &[key.as_bytes()]),
            lookup,
        )
        .unwrap();
        assert_eq!(status(&reply).0, "400");
    }

    #[test]
    fn accepts_listed_keys_and_returns_the_key_as_user_id() {
        let list = Arc::new(AllowList::default());
        let key = Key::from_bytes([7; 32]);
        let lookup = |d: &str| (d == "zn-1").then(|| Arc::clone(&list));

        // No list: anyone.
        let reply = answer(&request("zn-1", "CURVE", &[key.as_bytes()]), lookup).unwrap();
        assert_eq!(status(&reply), ("200", key.to_z85().as_str()));
        assert_eq!(reply[0], b"pipe-id");
        assert_eq!(reply[3], b"7", "the request id is echoed");
        assert_eq!(reply.len(), 8);

        list.set(Some(HashSet::new()));
        let reply = answer(&request("zn-1", "CURVE", &[key.as_bytes()]), lookup).unwrap();
        assert_eq!(status(&reply), ("400", ""));

        list.insert(key);
        let reply = answer(&request("zn-1", "CURVE", &[key.as_bytes()]), lookup).unwrap();
        assert_eq!(status(&reply).0, "200");

        assert!(list.remove(&key));
        let reply = answer(&request("zn-1", "CURVE", &[key.as_bytes()]), lookup).unwrap();
        assert_eq!(status(&reply).0, "400");
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        let list = Arc::new(AllowList::default());
        let lookup = |d: &str| (d == "zn-1").then(|| Arc::clone(&list));
        let key = [1u8; 32];
        for (domain, mechanism, credentials) in [
            ("other", "CURVE", vec![&key[..]]),
            ("zn-1", "NULL", vec![]),
            ("zn-1", "PLAIN", vec![&b"user"[..], &b"pass"[..]]),
            ("zn-1", "CURVE", vec![&key[..31]]),
            ("zn-1", "CURVE", vec![]),
        ] {
            let reply = answer(&request(domain, mechanism, &credentials), lookup).unwrap();
            assert_eq!(status(&reply), ("400", ""), "{domain} {mechanism}");
        }
        let mut wrong_version = request("zn-1", "CURVE", &[&key]);
        wrong_version[2] = b"2.0".to_vec();
        assert_eq!(status(&answer(&wrong_version, lookup).unwrap()).0, "500");
    }

    #[test]
    fn malformed_requests_are_dropped() {
        let lookup = |_: &str| None;
        assert!(answer(&[], lookup).is_none());
        assert!(answer(&request("d", "CURVE", &[])[..7], lookup).is_none());
        let mut no_delimiter = request("d", "CURVE", &[]);
        no_delimiter[1] = b"x".to_vec();
        assert!(answer(&no_delimiter, lookup).is_none());
    }
}
