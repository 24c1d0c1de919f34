//! The server side of the CURVE handshake: HELLO, WELCOME, INITIATE, READY (or ERROR).

use rand_core::{OsRng, RngCore};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::cipher::{Cipher, CLIENT_TO_SERVER, SERVER_TO_CLIENT};
use super::client::{
    COOKIE_LEN, HELLO_LEN, HELLO_NONCE, INITIATE_MIN_LEN, INITIATE_NONCE, READY_MIN_LEN,
    READY_NONCE, VOUCH_NONCE, WELCOME_LEN, WELCOME_NONCE,
};
use super::secretbox::SecretBox;
use super::{
    long_nonce, open, precompute, random16, read_u64, seal, short_nonce, transient_pair, CurveKeys,
    Secret, KEY_LEN,
};
use crate::command::{self, Command};
use crate::error::{Error, Result};

/// The cookie's long-nonce prefix.
const COOKIE_NONCE: &[u8; 8] = b"COOKIE--";

/// What the server does after a command from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStep {
    /// Send this command body (WELCOME, the answer to HELLO) in a command frame.
    Send(Vec<u8>),
    /// INITIATE checked out (cookie, box and vouch): the client holds the secret key of
    /// `client_key`. The caller decides whether that key may connect, then calls
    /// [`CurveServer::ready`] (admitted) or [`CurveServer::refuse`] (not).
    Authorize {
        /// C, the client's long-term public key (what an allow-list or ZAP checks).
        client_key: [u8; KEY_LEN],
        /// The client's metadata, decrypted, as ZMTP properties (parse with
        /// [`Properties::parse`](crate::command::Properties::parse)).
        properties: Vec<u8>,
    },
}

/// Where the server's handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for HELLO.
    ExpectHello,
    /// WELCOME made, waiting for INITIATE.
    ExpectInitiate,
    /// INITIATE checked: the caller authorizes the client's key.
    Authorize,
    /// READY made: only [`CurveServer::into_cipher`] is left.
    Ready,
    /// ERROR made: the connection ends once it is written.
    Refused,
}

/// The server side of a CURVE handshake, for one connection.
///
/// ```text
/// let mut server = CurveServer::new(&keys);
/// // HELLO
/// let ServerStep::Send(welcome) = server.on_command(&hello)? else { .. };
/// send_command(welcome);
/// // INITIATE
/// let ServerStep::Authorize { client_key, properties } = server.on_command(&initiate)? else { .. };
/// if allowed(&client_key) {
///     send_command(server.ready(&metadata));
///     let cipher = server.into_cipher();
/// } else {
///     send_command(server.refuse("400"));
/// }
/// ```
pub struct CurveServer {
    /// Where the handshake is.
    state: State,
    /// S, our long-term public key (the vouch must name it).
    public: [u8; KEY_LEN],
    /// s, our long-term secret key: opens HELLO, seals WELCOME.
    secret: Secret,
    /// s', this connection's transient secret key.
    transient: Secret,
    /// S', its public half, sent in WELCOME.
    transient_public: [u8; KEY_LEN],
    /// C', the client's transient public key, from HELLO.
    client_transient: [u8; KEY_LEN],
    /// The key of the cookie, drawn for this connection (as libzmq draws one per WELCOME);
    /// wiped on drop by the cipher's own `Drop`.
    cookie_key: SecretBox,
    /// The shared key of s' and C', once HELLO told us C': INITIATE, READY and then every
    /// MESSAGE.
    session: Option<SecretBox>,
    /// The next short nonce we send (READY takes 1, the first MESSAGE 2).
    next_nonce: u64,
    /// The last short nonce received from the client (HELLO's, then INITIATE's).
    peer_nonce: u64,
}

impl CurveServer {
    /// A server for one connection with our long-term `keys`. Makes the connection's
    /// transient key pair and cookie key.
    pub fn new(keys: &CurveKeys) -> CurveServer {
        let (transient, transient_public) = transient_pair();
        let mut cookie_key = Zeroizing::new([0u8; 32]);
        OsRng.fill_bytes(&mut *cookie_key);
        CurveServer {
            state: State::ExpectHello,
            public: keys.public,
            secret: keys.secret_key(),
            transient,
            transient_public,
            client_transient: [0; KEY_LEN],
            cookie_key: SecretBox::new(&cookie_key),
            session: None,
            next_nonce: 1,
            peer_nonce: 0,
        }
    }

    /// Feeds one command body received during the handshake (the frame's body: name-size,
    /// name, data).
    ///
    /// HELLO gives `Ok(ServerStep::Send(welcome))`; INITIATE gives
    /// `Ok(ServerStep::Authorize)` once the cookie, the box and the vouch are checked.
    /// Anything else is an error: [`Error::Unexpected`] for a command out of turn,
    /// [`Error::MalformedCommand`] for a wrong length or version, [`Error::Crypto`] for a
    /// box that does not open (a HELLO that does not open means the client holds another
    /// server key than ours) or a nonce that does not increase. libzmq's server sends no
    /// ERROR in these cases: it closes the connection.
    pub fn on_command(&mut self, body: &[u8]) -> Result<ServerStep> {
        let cmd = Command::parse(body)?;
        match (self.state, cmd.name) {
            (State::ExpectHello, b"HELLO") => self.on_hello(body),
            (State::ExpectInitiate, b"INITIATE") => self.on_initiate(body),
            (State::ExpectHello, _) => Err(Error::Unexpected {
                what: "a command other than HELLO from a CURVE client",
            }),
            (State::ExpectInitiate, _) => Err(Error::Unexpected {
                what: "a command other than INITIATE after WELCOME",
            }),
            (State::Authorize | State::Ready | State::Refused, _) => Err(Error::Unexpected {
                what: "a CURVE handshake command after INITIATE",
            }),
        }
    }

    /// After [`ServerStep::Authorize`], when the caller admits the client's key: READY's
    /// body, with our `metadata` (ZMTP properties, see [`command::put_property`]) boxed.
    ///
    /// # Panics
    /// Unless the last step was [`ServerStep::Authorize`]: a caller's bug, never the
    /// peer's doing.
    pub fn ready(&mut self, metadata: &[u8]) -> Vec<u8> {
        assert!(
            self.state == State::Authorize,
            "CurveServer::ready before INITIATE was authorized"
        );
        let session = self
            .session
            .as_ref()
            .unwrap_or_else(|| unreachable!("Authorize is only reached after HELLO"));
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        let mut out = Vec::with_capacity(READY_MIN_LEN + metadata.len());
        out.extend_from_slice(b"\x05READY");
        out.extend_from_slice(&nonce.to_be_bytes());
        seal(
            session,
            &short_nonce(READY_NONCE, nonce),
            metadata,
            &mut out,
        );
        self.state = State::Ready;
        out
    }

    /// After [`ServerStep::Authorize`], when the caller does not admit the client's key:
    /// ERROR's body (in plain text, like every ERROR). Close the connection once it is
    /// written.
    ///
    /// libzmq's server sends the ZAP status code as the reason (`"400"` for a refused key,
    /// `"300"` for a temporary failure, `"500"` for an internal one). A libzmq 4.3.4 client
    /// reports exactly such a three-digit code as `ZMQ_EVENT_HANDSHAKE_FAILED_AUTH` with the
    /// number as the event's value (any other reason: no such event), then
    /// `ZMQ_EVENT_DISCONNECTED`; and it takes ERROR as a protocol error, so it does **not**
    /// reconnect to this endpoint. Closing the connection without ERROR instead is a
    /// connection error to libzmq, which then reconnects every `ZMQ_RECONNECT_IVL`
    /// (100 ms by default). Both checked by the interop tests.
    pub fn refuse(&mut self, reason: &str) -> Vec<u8> {
        self.state = State::Refused;
        command::body(b"ERROR", &command::error_data(reason))
    }

    /// The cipher for the rest of the connection (server to client: "CurveZMQMESSAGES",
    /// client to server: "CurveZMQMESSAGEC").
    ///
    /// # Panics
    /// Before [`ready`](Self::ready): a caller's bug, never the peer's doing.
    pub fn into_cipher(self) -> Cipher {
        assert!(
            self.state == State::Ready,
            "CurveServer::into_cipher before READY"
        );
        let session = self
            .session
            .unwrap_or_else(|| unreachable!("READY is only reached after HELLO"));
        Cipher::new(
            session,
            SERVER_TO_CLIENT,
            CLIENT_TO_SERVER,
            self.next_nonce,
            self.peer_nonce,
        )
    }

    /// HELLO: checks its length, version and signature box, and answers WELCOME.
    fn on_hello(&mut self, body: &[u8]) -> Result<ServerStep> {
        if body.len() != HELLO_LEN {
            return Err(Error::MalformedCommand {
                what: "a HELLO that is not 200 bytes",
            });
        }
        if body[6..8] != [1, 0] {
            return Err(Error::MalformedCommand {
                what: "a HELLO of a CurveZMQ version other than 1.0",
            });
        }
        let mut client_transient = [0u8; KEY_LEN];
        client_transient.copy_from_slice(&body[80..112]);
        let nonce = read_u64(&body[112..120]);
        let to_client = precompute(&client_transient, &self.secret)?;
        let signature = open(
            &to_client,
            &short_nonce(HELLO_NONCE, nonce),
            &body[120..],
            "HELLO's signature does not open (the client holds another server key)",
        )?;
        // RFC 26: the signature box holds 64 zero bytes (libzmq does not look, but its
        // client sends them).
        if signature.iter().any(|&b| b != 0) {
            return Err(Error::Crypto {
                what: "HELLO's signature box does not hold 64 zero bytes",
            });
        }

        // The cookie: SecretBox[C' + s'](cookie key), with the long nonce "COOKIE--" + 16
        // random bytes. The client echoes it in INITIATE; only we can open it.
        let cookie_suffix = random16();
        let mut cookie_plain = Zeroizing::new([0u8; 64]);
        cookie_plain[..32].copy_from_slice(&client_transient);
        cookie_plain[32..].copy_from_slice(&*self.transient);
        let mut welcome_plain = Zeroizing::new(Vec::with_capacity(KEY_LEN + COOKIE_LEN));
        welcome_plain.extend_from_slice(&self.transient_public);
        welcome_plain.extend_from_slice(&cookie_suffix);
        seal(
            &self.cookie_key,
            &long_nonce(COOKIE_NONCE, &cookie_suffix),
            &*cookie_plain,
            &mut welcome_plain,
        );

        // WELCOME: Box[S' + cookie](S->C'), with the long nonce "WELCOME-" + 16 random bytes.
        let welcome_suffix = random16();
        let mut out = Vec::with_capacity(WELCOME_LEN);
        out.extend_from_slice(b"\x07WELCOME");
        out.extend_from_slice(&welcome_suffix);
        seal(
            &to_client,
            &long_nonce(WELCOME_NONCE, &welcome_suffix),
            &welcome_plain,
            &mut out,
        );
        debug_assert_eq!(out.len(), WELCOME_LEN);

        self.client_transient = client_transient;
        self.session = Some(precompute(&client_transient, &self.transient)?);
        self.peer_nonce = nonce;
        self.state = State::ExpectInitiate;
        Ok(ServerStep::Send(out))
    }

    /// INITIATE: checks the cookie, opens the box, checks the vouch.
    fn on_initiate(&mut self, body: &[u8]) -> Result<ServerStep> {
        if body.len() < INITIATE_MIN_LEN {
            return Err(Error::MalformedCommand {
                what: "an INITIATE shorter than its cookie, nonce and box",
            });
        }
        let session = self.session.as_ref().ok_or(Error::Unexpected {
            what: "INITIATE before HELLO",
        })?;

        // The cookie must open under this connection's key and hold C' and s' (libzmq
        // checks both too).
        let mut cookie_suffix = [0u8; 16];
        cookie_suffix.copy_from_slice(&body[9..25]);
        let cookie = open(
            &self.cookie_key,
            &long_nonce(COOKIE_NONCE, &cookie_suffix),
            &body[25..105],
            "INITIATE's cookie does not open",
        )?;
        // s' is a secret: compared in constant time.
        let keys_match =
            cookie[..32].ct_eq(&self.client_transient) & cookie[32..64].ct_eq(&*self.transient);
        if !bool::from(keys_match) {
            return Err(Error::Crypto {
                what: "INITIATE's cookie is not this connection's",
            });
        }

        // INITIATE's short nonce comes after HELLO's (libzmq's client: 1, then 2).
        let nonce = read_u64(&body[105..113]);
        if nonce <= self.peer_nonce {
            return Err(Error::Crypto {
                what: "INITIATE's nonce is not above HELLO's",
            });
        }
        let plain = open(
            session,
            &short_nonce(INITIATE_NONCE, nonce),
            &body[113..],
            "INITIATE's box does not open",
        )?;
        // plain = C (32) + vouch nonce suffix (16) + vouch box (80) + metadata.
        let mut client_key = [0u8; KEY_LEN];
        client_key.copy_from_slice(&plain[..32]);
        let mut vouch_suffix = [0u8; 16];
        vouch_suffix.copy_from_slice(&plain[32..48]);
        let vouch = open(
            &precompute(&client_key, &self.transient)?,
            &long_nonce(VOUCH_NONCE, &vouch_suffix),
            &plain[48..128],
            "INITIATE's vouch does not open (the client does not hold its key's secret)",
        )?;
        // The vouch names C' (libzmq checks this) and S (RFC 26; libzmq's client sends it,
        // libzmq's server does not check it).
        if vouch[..32] != self.client_transient || vouch[32..64] != self.public {
            return Err(Error::Crypto {
                what: "INITIATE's vouch does not name this connection's keys",
            });
        }

        // MESSAGE nonces from the client count on from INITIATE's.
        self.peer_nonce = nonce;
        self.state = State::Authorize;
        Ok(ServerStep::Authorize {
            client_key,
            properties: plain[128..].to_vec(),
        })
    }
}

impl std::fmt::Debug for CurveServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurveServer")
            .field("state", &self.state)
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}
