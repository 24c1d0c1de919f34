//! The client side of the CURVE handshake: HELLO, WELCOME, INITIATE, READY.

use super::cipher::{Cipher, CLIENT_TO_SERVER, SERVER_TO_CLIENT};
use super::secretbox::SecretBox;
use super::{
    long_nonce, open, precompute, random16, read_u64, seal, short_nonce, transient_pair, CurveKeys,
    Secret, KEY_LEN, MAC_LEN,
};
use crate::command::{self, Command};
use crate::error::{Error, Result};

/// HELLO's short-nonce prefix (RFC 26; libzmq `curve_client_tools.hpp`).
pub(super) const HELLO_NONCE: &[u8; 16] = b"CurveZMQHELLO---";
/// WELCOME's long-nonce prefix.
pub(super) const WELCOME_NONCE: &[u8; 8] = b"WELCOME-";
/// The vouch's long-nonce prefix.
pub(super) const VOUCH_NONCE: &[u8; 8] = b"VOUCH---";
/// INITIATE's short-nonce prefix.
pub(super) const INITIATE_NONCE: &[u8; 16] = b"CurveZMQINITIATE";
/// READY's short-nonce prefix.
pub(super) const READY_NONCE: &[u8; 16] = b"CurveZMQREADY---";

/// HELLO's whole body: libzmq's server refuses any other length.
///
/// ```text
/// 0   "\x05HELLO"
/// 6   version 1, 0 (libzmq's server refuses any other)
/// 8   72 zero bytes (anti-amplification padding: HELLO is longer than WELCOME)
/// 80  C', the client's transient public key
/// 112 short nonce (prefix "CurveZMQHELLO---")
/// 120 signature: Box[64 zero bytes](C'->S), 16 + 64 bytes
/// ```
pub(super) const HELLO_LEN: usize = 200;
/// WELCOME's whole body: libzmq's client refuses any other length.
///
/// ```text
/// 0   "\x07WELCOME"
/// 8   the long nonce's last 16 bytes (prefix "WELCOME-")
/// 24  Box[S' + cookie](S->C'), 16 + 32 + 96 bytes
/// ```
pub(super) const WELCOME_LEN: usize = 168;
/// The cookie: a 16-byte nonce suffix (prefix "COOKIE--") and
/// SecretBox[C' + s'](cookie key), 16 + 64 bytes. Only the server can open it.
pub(super) const COOKIE_LEN: usize = 96;
/// INITIATE without its metadata: libzmq's server refuses anything shorter.
///
/// ```text
/// 0   "\x08INITIATE"
/// 9   the cookie, echoed from WELCOME
/// 105 short nonce (prefix "CurveZMQINITIATE")
/// 113 Box[C + vouch nonce (16) + vouch (80) + metadata](C'->S')
/// ```
/// where vouch = Box[C' + S](C->S') with the long nonce "VOUCH---" + 16 random bytes.
pub(super) const INITIATE_MIN_LEN: usize = 113 + MAC_LEN + 128;
/// READY without its metadata: libzmq's client refuses anything shorter.
///
/// ```text
/// 0   "\x05READY"
/// 6   short nonce (prefix "CurveZMQREADY---")
/// 14  Box[metadata](S'->C')
/// ```
pub(super) const READY_MIN_LEN: usize = 14 + MAC_LEN;

/// What the client does after a command from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientStep {
    /// Send this command body (INITIATE, the answer to WELCOME) in a command frame.
    Send(Vec<u8>),
    /// The handshake is done (READY opened): the server's metadata, decrypted, as ZMTP
    /// properties (parse with [`Properties::parse`](crate::command::Properties::parse)).
    /// Call [`CurveClient::into_cipher`] next.
    Ready {
        /// The server's properties (`Socket-Type`...).
        properties: Vec<u8>,
    },
}

/// Where the client's handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// HELLO not made yet.
    Start,
    /// HELLO sent.
    ExpectWelcome,
    /// INITIATE sent.
    ExpectReady,
    /// READY received: only [`CurveClient::into_cipher`] is left.
    Ready,
}

/// The client side of a CURVE handshake, for one connection.
///
/// ```text
/// let mut client = CurveClient::new(&keys, server_key)?;
/// send_command(client.hello());
/// // WELCOME
/// let ClientStep::Send(initiate) = client.on_command(&welcome, &metadata)? else { .. };
/// send_command(initiate);
/// // READY
/// let ClientStep::Ready { properties } = client.on_command(&ready, &metadata)? else { .. };
/// let cipher = client.into_cipher();
/// ```
pub struct CurveClient {
    /// Where the handshake is.
    state: State,
    /// C, our long-term public key (boxed in INITIATE for the server to authorize).
    public: [u8; KEY_LEN],
    /// c, our long-term secret key: signs the vouch.
    secret: Secret,
    /// S, the server's long-term public key.
    server_key: [u8; KEY_LEN],
    /// c', this connection's transient secret key.
    transient: Secret,
    /// C', its public half, sent in HELLO.
    transient_public: [u8; KEY_LEN],
    /// The shared key of c' and S: HELLO's signature and WELCOME's box.
    to_server: SecretBox,
    /// The shared key of c' and S', once WELCOME told us S': INITIATE, READY and then every
    /// MESSAGE.
    session: Option<SecretBox>,
    /// The next short nonce we send (HELLO takes 1, INITIATE 2, the first MESSAGE 3).
    next_nonce: u64,
    /// The last short nonce received from the server (READY's).
    peer_nonce: u64,
}

impl CurveClient {
    /// A client for one connection with our long-term `keys`, to the server whose public
    /// key is `server_key`. Makes the connection's transient key pair.
    ///
    /// A server key of small order (no real server has one) is [`Error::Crypto`].
    pub fn new(keys: &CurveKeys, server_key: [u8; KEY_LEN]) -> Result<CurveClient> {
        let (transient, transient_public) = transient_pair();
        let to_server = precompute(&server_key, &transient)?;
        Ok(CurveClient {
            state: State::Start,
            public: keys.public,
            secret: keys.secret_key(),
            server_key,
            transient,
            transient_public,
            to_server,
            session: None,
            next_nonce: 1,
            peer_nonce: 0,
        })
    }

    /// HELLO's command body (name-size, name, data; no frame header; see
    /// [`command::body`]): the first command the client sends, right after the greeting.
    pub fn hello(&mut self) -> Vec<u8> {
        let nonce = self.take_nonce();
        let mut out = Vec::with_capacity(HELLO_LEN);
        out.extend_from_slice(b"\x05HELLO");
        // CurveZMQ version 1.0.
        out.extend_from_slice(&[1, 0]);
        // Anti-amplification padding: 72 zero bytes.
        out.resize(80, 0);
        out.extend_from_slice(&self.transient_public);
        out.extend_from_slice(&nonce.to_be_bytes());
        // The signature: Box[64 zero bytes](C'->S), which proves we know S.
        seal(
            &self.to_server,
            &short_nonce(HELLO_NONCE, nonce),
            &[0u8; 64],
            &mut out,
        );
        debug_assert_eq!(out.len(), HELLO_LEN);
        self.state = State::ExpectWelcome;
        out
    }

    /// Feeds one command body received during the handshake (the frame's body: name-size,
    /// name, data). `metadata` is our ZMTP properties, already encoded (see
    /// [`command::put_property`]), for INITIATE; it is not read after WELCOME.
    ///
    /// WELCOME gives `Ok(ClientStep::Send(initiate))`; READY gives `Ok(ClientStep::Ready)`
    /// with the server's decrypted metadata; ERROR gives [`Error::Refused`] with its
    /// reason. Anything else is an error: [`Error::Unexpected`] for a command out of turn,
    /// [`Error::MalformedCommand`] for a wrong length, [`Error::Crypto`] for a box that does
    /// not open (a WELCOME that does not open means the server is not the one whose key we
    /// hold).
    pub fn on_command(&mut self, body: &[u8], metadata: &[u8]) -> Result<ClientStep> {
        let cmd = Command::parse(body)?;
        match (self.state, cmd.name) {
            // libzmq's client accepts ERROR while it waits for WELCOME or READY.
            (State::ExpectWelcome | State::ExpectReady, b"ERROR") => Err(Error::Refused {
                reason: command::parse_error(cmd.data)?,
            }),
            (State::ExpectWelcome, b"WELCOME") => self.on_welcome(body, metadata),
            (State::ExpectReady, b"READY") => self.on_ready(body),
            (State::Start, _) => Err(Error::Unexpected {
                what: "a CURVE command before HELLO was sent",
            }),
            (State::ExpectWelcome, _) => Err(Error::Unexpected {
                what: "a command other than WELCOME or ERROR after HELLO",
            }),
            (State::ExpectReady, _) => Err(Error::Unexpected {
                what: "a command other than READY or ERROR after INITIATE",
            }),
            (State::Ready, _) => Err(Error::Unexpected {
                what: "a CURVE handshake command after READY",
            }),
        }
    }

    /// The cipher for the rest of the connection (client to server: "CurveZMQMESSAGEC",
    /// server to client: "CurveZMQMESSAGES").
    ///
    /// # Panics
    /// Before [`on_command`](Self::on_command) returned [`ClientStep::Ready`]: a caller's
    /// bug, never the peer's doing.
    pub fn into_cipher(self) -> Cipher {
        assert!(
            self.state == State::Ready,
            "CurveClient::into_cipher before the handshake finished"
        );
        let session = self
            .session
            .unwrap_or_else(|| unreachable!("READY is only reached after WELCOME"));
        Cipher::new(
            session,
            CLIENT_TO_SERVER,
            SERVER_TO_CLIENT,
            self.next_nonce,
            self.peer_nonce,
        )
    }

    /// WELCOME: opens Box[S' + cookie](S->C') and answers INITIATE.
    fn on_welcome(&mut self, body: &[u8], metadata: &[u8]) -> Result<ClientStep> {
        if body.len() != WELCOME_LEN {
            return Err(Error::MalformedCommand {
                what: "a WELCOME that is not 168 bytes",
            });
        }
        let mut suffix = [0u8; 16];
        suffix.copy_from_slice(&body[8..24]);
        let plain = open(
            &self.to_server,
            &long_nonce(WELCOME_NONCE, &suffix),
            &body[24..],
            "WELCOME's box does not open (the server's key is not the one we hold)",
        )?;
        // plain = S' (32) + cookie (96).
        let mut server_transient = [0u8; KEY_LEN];
        server_transient.copy_from_slice(&plain[..KEY_LEN]);
        let cookie = &plain[KEY_LEN..KEY_LEN + COOKIE_LEN];
        let session = precompute(&server_transient, &self.transient)?;

        // The vouch: Box[C' + S](C->S'), proving that the holder of c made C'.
        let vouch_suffix = random16();
        let mut vouch_plain = [0u8; 64];
        vouch_plain[..32].copy_from_slice(&self.transient_public);
        vouch_plain[32..].copy_from_slice(&self.server_key);
        let mut vouch = Vec::with_capacity(MAC_LEN + 64);
        seal(
            &precompute(&server_transient, &self.secret)?,
            &long_nonce(VOUCH_NONCE, &vouch_suffix),
            &vouch_plain,
            &mut vouch,
        );

        // INITIATE's box: C + vouch nonce + vouch + metadata.
        let mut inner = Vec::with_capacity(128 + metadata.len());
        inner.extend_from_slice(&self.public);
        inner.extend_from_slice(&vouch_suffix);
        inner.extend_from_slice(&vouch);
        inner.extend_from_slice(metadata);

        let nonce = self.take_nonce();
        let mut out = Vec::with_capacity(INITIATE_MIN_LEN + metadata.len());
        out.extend_from_slice(b"\x08INITIATE");
        out.extend_from_slice(cookie);
        out.extend_from_slice(&nonce.to_be_bytes());
        seal(
            &session,
            &short_nonce(INITIATE_NONCE, nonce),
            &inner,
            &mut out,
        );
        self.session = Some(session);
        self.state = State::ExpectReady;
        Ok(ClientStep::Send(out))
    }

    /// READY: opens Box[metadata](S'->C').
    fn on_ready(&mut self, body: &[u8]) -> Result<ClientStep> {
        if body.len() < READY_MIN_LEN {
            return Err(Error::MalformedCommand {
                what: "a READY shorter than its nonce and box",
            });
        }
        let session = self.session.as_ref().ok_or(Error::Unexpected {
            what: "READY before WELCOME",
        })?;
        let nonce = read_u64(&body[6..14]);
        let plain = open(
            session,
            &short_nonce(READY_NONCE, nonce),
            &body[14..],
            "READY's box does not open",
        )?;
        // MESSAGE nonces from the server count on from READY's.
        self.peer_nonce = nonce;
        self.state = State::Ready;
        Ok(ClientStep::Ready {
            properties: plain.to_vec(),
        })
    }

    /// The next short nonce to send.
    fn take_nonce(&mut self) -> u64 {
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        nonce
    }
}

impl std::fmt::Debug for CurveClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurveClient")
            .field("state", &self.state)
            .field("public", &self.public)
            .field("server_key", &self.server_key)
            .finish_non_exhaustive()
    }
}
