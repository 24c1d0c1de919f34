//! CurveZMQ (RFC 26), the CURVE security mechanism of ZMTP, as sans-IO state machines.
//!
//! ```text
//! client                                   server
//! HELLO     C', Box[64 zeros](C'->S)   ->
//!                                      <-  WELCOME  Box[S' + cookie](S->C')
//! INITIATE  cookie, Box[C + vouch + metadata](C'->S')  ->
//!                                      <-  READY    Box[metadata](S'->C')
//! MESSAGE   Box[flags + frame](C'->S') <-> MESSAGE  Box[flags + frame](S'->C')
//! ```
//!
//! `C`/`S` are the long-term public keys (the client's, the server's), `C'`/`S'` the
//! transient ones made for this connection alone; lower case names the secret halves. Every
//! box is NaCl's `crypto_box` (X25519, XSalsa20, Poly1305); on the wire a box is its 16-byte
//! MAC followed by the ciphertext, as libzmq writes it (libsodium's `_easy` layout, or
//! `crypto_box` with its 16 leading zero bytes dropped).
//!
//! The pieces, each fed and read by the connection's driver:
//! - [`CurveClient`]: [`hello`](CurveClient::hello), then
//!   [`on_command`](CurveClient::on_command) for WELCOME (answers INITIATE) and READY;
//! - [`CurveServer`]: [`on_command`](CurveServer::on_command) for HELLO (answers WELCOME)
//!   and INITIATE (asks the caller to authorize the client's key), then
//!   [`ready`](CurveServer::ready) or [`refuse`](CurveServer::refuse);
//! - [`Cipher`]: after the handshake, every frame in either direction, as MESSAGE.
//!
//! Every `Err` from these ends the connection: the state machines do not advance on an
//! error, and the caller must close (as libzmq does on each failure below).
//!
//! ## How libzmq 4.3.4 frames CURVE traffic (the version this workspace links)
//!
//! Checked in libzmq's `curve_mechanism_base.cpp`, `stream_engine_base.cpp`,
//! `zmtp_engine.cpp` and `v2_encoder.cpp`, and by the interop tests:
//! - The greeting: libzmq writes zeros after the mechanism's name, so its as-server byte is
//!   0 even on a CURVE server, and it never reads the peer's. Which side is the CURVE
//!   server comes from each side's configuration, not from the greeting; a check that
//!   exactly one side claims as-server would refuse every libzmq peer.
//! - The handshake commands (HELLO, WELCOME, INITIATE, READY, ERROR) are ordinary ZMTP
//!   command frames (COMMAND flag set), in plain text apart from their boxes.
//! - After the handshake, *every* frame, data or command, is one MESSAGE command whose body
//!   is `"\x07MESSAGE"`, an 8-byte nonce and a box of one flags byte (0x01 MORE, 0x02
//!   COMMAND) followed by the frame. libzmq sends that MESSAGE as an outer frame with **no
//!   flags at all**: neither COMMAND nor MORE (only LONG above 255 bytes). It builds the
//!   MESSAGE in a fresh message whose flags are zero, and its encoder derives the outer flags
//!   from that message, so MORE travels only inside the box. Receiving, libzmq ORs the
//!   inner flags byte (masked to 0x03) into the flags the outer frame had (`msg_t::set_flags`
//!   ORs, and the decoded frame keeps the outer ones): an outer MORE joins the next message
//!   to this one, an outer COMMAND makes it a command (the interop tests show both). So the
//!   outer flags must be 0: [`Cipher::encrypt`] writes 0 and [`Cipher::decrypt`] refuses a
//!   MESSAGE frame with MORE or COMMAND rather than guess.
//! - PING and PONG (ZMTP 3.1 heartbeats) are commands like any other: libzmq builds the
//!   plain `"\x04PING" ttl(2) [context]` command and passes it to the mechanism, so under
//!   CURVE it is a MESSAGE (outer flags 0) whose inner flags byte is 0x02 (COMMAND) and whose
//!   payload is the PING command's body. The PONG goes back the same way. A plain-text PING
//!   after a CURVE handshake is not a MESSAGE and libzmq closes the connection on it. Send
//!   them with [`Cipher::encrypt_command`]; [`Decrypted::command`] marks them on receipt.
//! - Nonces: each side keeps one counter, starting at 1, shared by its short-nonce handshake
//!   commands and its MESSAGEs: a libzmq client sends HELLO with 1, INITIATE with 2, and its
//!   first MESSAGE with 3; a server sends READY with 1 and its first MESSAGE with 2 (WELCOME
//!   carries a random long nonce instead). A receiver refuses a MESSAGE whose nonce is not
//!   above the last one it accepted from that peer (HELLO's or INITIATE's on the server,
//!   READY's on the client at first): strictly increasing, gaps allowed.
//! - The cookie key is fresh for every connection (libzmq draws a new one in each WELCOME).
//! - libzmq's server sends no ERROR when HELLO or INITIATE fail (a wrong server key, a bad
//!   box): it closes the connection and reports `ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL`
//!   (`ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC`) on its own monitor; the libzmq client
//!   reconnects. ERROR is sent only for a ZAP refusal (see [`CurveServer::refuse`]).
//!
//! ## Secrets
//! Long-term secret keys, transient secret keys, the shared keys precomputed from them and
//! the cookie key are wiped when dropped (`zeroize`). Secrets are compared in constant
//! time (libsodium checks MACs so; the server's cookie check uses `subtle`).
//!
//! ## Cryptography
//! Every primitive is libsodium's (`sodium.rs`, the only `unsafe` code of this crate), as in
//! libzmq: X25519, `crypto_box_beforenm` and `crypto_secretbox`. Nothing here is written
//! by hand but the CurveZMQ framing around the boxes.

mod cipher;
mod client;
mod secretbox;
mod server;
mod sodium;
#[cfg(test)]
mod tests;

use rand_core::{OsRng, RngCore};
use zeroize::Zeroizing;

use self::secretbox::{Nonce, SecretBox};
use crate::error::{Error, Result};

pub use cipher::{Cipher, Decrypted, MESSAGE_OVERHEAD};
pub use client::{ClientStep, CurveClient};
pub use server::{CurveServer, ServerStep};

/// The length of a CURVE key (public or secret).
pub const KEY_LEN: usize = 32;

/// A box's MAC, which precedes its ciphertext on the wire.
const MAC_LEN: usize = 16;

/// A long-term CURVE key pair: the client's, or the server's whose public half the clients
/// know in advance.
///
/// The secret half is wiped when the value is dropped and never printed by `Debug`.
#[derive(Clone)]
pub struct CurveKeys {
    /// The public key, which the peer sees (and a server checks against its allow-list).
    pub public: [u8; KEY_LEN],
    /// The secret key.
    secret: Zeroizing<[u8; KEY_LEN]>,
}

impl CurveKeys {
    /// A key pair from its two halves, as stored (for example from libzmq's
    /// `zmq_curve_keypair`, Z85-decoded).
    ///
    /// The halves are not checked against each other: a public key that is not the secret
    /// key's makes every handshake fail (the server cannot open the client's vouch; the
    /// client cannot open the server's WELCOME). [`from_secret`](Self::from_secret) derives
    /// the public half instead.
    pub fn new(public: [u8; KEY_LEN], secret: [u8; KEY_LEN]) -> CurveKeys {
        CurveKeys {
            public,
            secret: Zeroizing::new(secret),
        }
    }

    /// A key pair from its secret half alone (the public key is derived: one X25519 base
    /// point multiplication).
    pub fn from_secret(secret: [u8; KEY_LEN]) -> CurveKeys {
        CurveKeys::new(public_from_secret(&secret), secret)
    }

    /// A new random key pair (from the operating system's random number generator).
    pub fn generate() -> CurveKeys {
        let (secret, public) = transient_pair();
        CurveKeys { public, secret }
    }

    /// The secret key, for storing it or handing it to another engine (libzmq's
    /// `ZMQ_CURVE_SECRETKEY`).
    pub fn secret(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }

    /// A copy of the secret key, wiped on drop too.
    fn secret_key(&self) -> Secret {
        self.secret.clone()
    }
}

impl std::fmt::Debug for CurveKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurveKeys")
            .field("public", &self.public)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// The public key of a secret key (X25519 with the base point, as libsodium's
/// `crypto_scalarmult_base`).
pub fn public_from_secret(secret: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
    sodium::public_key(secret)
}

/// A secret key (long-term or transient), wiped on drop.
type Secret = Zeroizing<[u8; KEY_LEN]>;

/// A connection's CURVE setting: which side of the mechanism it takes, and its keys.
#[derive(Debug, Clone)]
pub enum CurveConfig {
    /// The connecting side: our key pair and the server's public key.
    Client {
        /// Our long-term key pair (the server learns its public half).
        keys: CurveKeys,
        /// The server's long-term public key, known in advance.
        server_key: [u8; KEY_LEN],
    },
    /// The accepting side, whose public key the clients hold.
    Server {
        /// Our long-term key pair.
        keys: CurveKeys,
    },
}

/// Makes a random key pair: a connection's transient `C'`/`c'` or `S'`/`s'`, or a new
/// long-term one. Any 32 random bytes are a secret key (X25519 clamps them).
fn transient_pair() -> (Secret, [u8; KEY_LEN]) {
    let mut secret = Zeroizing::new([0u8; KEY_LEN]);
    OsRng.fill_bytes(&mut *secret);
    let public = sodium::public_key(&secret);
    (secret, public)
}

/// A nonce of a 16-byte prefix and a short (8-byte, big-endian) counter: HELLO, INITIATE,
/// READY and MESSAGE.
fn short_nonce(prefix: &[u8; 16], counter: u64) -> Nonce {
    let mut nonce = [0u8; 24];
    nonce[..16].copy_from_slice(prefix);
    nonce[16..].copy_from_slice(&counter.to_be_bytes());
    nonce
}

/// A nonce of an 8-byte prefix and 16 bytes carried beside the box: WELCOME, the cookie and
/// the vouch.
fn long_nonce(prefix: &[u8; 8], rest: &[u8; 16]) -> Nonce {
    let mut nonce = [0u8; 24];
    nonce[..8].copy_from_slice(prefix);
    nonce[8..].copy_from_slice(rest);
    nonce
}

/// 16 random bytes: the varying part of a long nonce.
fn random16() -> [u8; 16] {
    let mut out = [0u8; 16];
    OsRng.fill_bytes(&mut out);
    out
}

/// Reads a big-endian short nonce from exactly 8 bytes.
fn read_u64(bytes: &[u8]) -> u64 {
    let mut be = [0u8; 8];
    be.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(be)
}

/// Appends the box of `plaintext` to `out`: the MAC, then the ciphertext.
fn seal(cipher: &SecretBox, nonce: &Nonce, plaintext: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + MAC_LEN, 0);
    out.extend_from_slice(plaintext);
    seal_in_place(cipher, nonce, &mut out[start..]);
}

/// Encrypts `buf[MAC_LEN..]` in place and writes its MAC into `buf[..MAC_LEN]`.
fn seal_in_place(cipher: &SecretBox, nonce: &Nonce, buf: &mut [u8]) {
    let (mac, text) = buf.split_at_mut(MAC_LEN);
    mac.copy_from_slice(&cipher.seal(nonce, text));
}

/// Opens a box (MAC, then ciphertext) into a new buffer, wiped on drop: `what` names the box
/// in the error.
fn open(
    cipher: &SecretBox,
    nonce: &Nonce,
    boxed: &[u8],
    what: &'static str,
) -> Result<Zeroizing<Vec<u8>>> {
    if boxed.len() < MAC_LEN {
        return Err(Error::MalformedCommand {
            what: "a CURVE box shorter than its MAC",
        });
    }
    let (mac, text) = boxed.split_at(MAC_LEN);
    let mut plain = Zeroizing::new(text.to_vec());
    cipher
        .open(nonce, &mut plain, mac)
        .map_err(|_| Error::Crypto { what })?;
    Ok(plain)
}

/// The shared key of a box between `secret` and `public` (libsodium's
/// `crypto_box_beforenm`), wiped on drop.
///
/// A public key of small order is [`Error::Crypto`]: its shared key would be known to all.
fn precompute(public: &[u8; KEY_LEN], secret: &Secret) -> Result<SecretBox> {
    SecretBox::between(public, secret).ok_or(Error::Crypto {
        what: "a public key of small order",
    })
}
