//! After the CURVE handshake: every frame as a MESSAGE command.

use bytes::{BufMut, Bytes, BytesMut};

use super::secretbox::SecretBox;
use super::{read_u64, seal_in_place, short_nonce, MAC_LEN};
use crate::error::{Error, Result};
use crate::frame;

/// MESSAGE's short-nonce prefix from client to server. libzmq uses this, not RFC 26's
/// "CurveZMQMESSAGE-" for both directions (`curve_client.cpp`, `curve_server.cpp`).
pub(super) const CLIENT_TO_SERVER: &[u8; 16] = b"CurveZMQMESSAGEC";
/// MESSAGE's short-nonce prefix from server to client.
pub(super) const SERVER_TO_CLIENT: &[u8; 16] = b"CurveZMQMESSAGES";

/// MESSAGE's name, with its size byte.
const MESSAGE: &[u8; 8] = b"\x07MESSAGE";

/// The inner flags byte's MORE bit (libzmq's `msg_t::more`).
const INNER_MORE: u8 = 0x01;
/// The inner flags byte's COMMAND bit (libzmq's `msg_t::command`): PING, PONG and other
/// ZMTP commands travel inside MESSAGE with it.
const INNER_COMMAND: u8 = 0x02;

/// A MESSAGE body without the frame: name (8), nonce (8), MAC (16), flags (1).
///
/// ```text
/// 0   "\x07MESSAGE"
/// 8   short nonce (prefix "CurveZMQMESSAGEC" or "CurveZMQMESSAGES")
/// 16  Box[flags (1) + frame](C'->S' or S'->C'): MAC (16), then the ciphertext
/// ```
pub const MESSAGE_OVERHEAD: usize = MESSAGE.len() + 8 + MAC_LEN + 1;

/// Where the box starts in a MESSAGE body.
const BOX_AT: usize = MESSAGE.len() + 8;

/// One frame out of a MESSAGE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decrypted {
    /// More frames of the same message follow (the inner MORE bit).
    pub more: bool,
    /// The frame is a ZMTP command (PING, PONG...; the inner COMMAND bit), whose body is
    /// `payload`: parse it with [`Command::parse`](crate::command::Command::parse).
    pub command: bool,
    /// The frame's content, decrypted.
    pub payload: Bytes,
}

/// The encryption of one connection after its CURVE handshake, both directions.
///
/// Frames go out as MESSAGE commands whose outer ZMTP frame has no flags (libzmq's framing,
/// see the [module documentation](super)); MORE and COMMAND travel in the flags byte inside
/// the box.
pub struct Cipher {
    /// The shared key of our transient secret and the peer's transient public key.
    session: SecretBox,
    /// The nonce prefix of what we send.
    send_prefix: &'static [u8; 16],
    /// The nonce prefix of what we receive.
    recv_prefix: &'static [u8; 16],
    /// The next short nonce we send. It counts on from the handshake's and never wraps:
    /// 2^64 frames are out of reach (58,000 years at ten million frames a second).
    next_nonce: u64,
    /// The last short nonce accepted from the peer: the next must be above it.
    peer_nonce: u64,
}

impl Cipher {
    /// A cipher that continues a handshake's nonces.
    pub(super) fn new(
        session: SecretBox,
        send_prefix: &'static [u8; 16],
        recv_prefix: &'static [u8; 16],
        next_nonce: u64,
        peer_nonce: u64,
    ) -> Cipher {
        Cipher {
            session,
            send_prefix,
            recv_prefix,
            next_nonce,
            peer_nonce,
        }
    }

    /// Encrypts one frame of a message and writes the complete ZMTP frame (header and
    /// MESSAGE body) to `out`. `more`: more frames of the same message follow. `payload`
    /// is the frame in pieces whose concatenation is the frame (each is copied once, into
    /// `out`, and encrypted there).
    pub fn encrypt(&mut self, more: bool, payload: &[&[u8]], out: &mut BytesMut) {
        let flags = if more { INNER_MORE } else { 0 };
        self.seal_frame(flags, payload, out);
    }

    /// Encrypts a ZMTP command (PING, PONG...: `body` is the command's body in pieces,
    /// name-size, name, data; see [`command::body`](crate::command::body)) as a MESSAGE
    /// with the inner COMMAND flag, and writes the complete frame to `out`. This is how
    /// libzmq sends PING and PONG under CURVE.
    pub fn encrypt_command(&mut self, body: &[&[u8]], out: &mut BytesMut) {
        self.seal_frame(INNER_COMMAND, body, out);
    }

    /// Decrypts the body of a received frame (its header already parsed; `outer_flags` is
    /// that header's flags byte) into the frame it carries, copying the ciphertext once (see
    /// [`decrypt_owned`](Self::decrypt_owned) to decrypt in place).
    ///
    /// The outer frame must have neither MORE nor COMMAND set (LONG is free): libzmq never
    /// sets them on a MESSAGE, and when it receives them it ORs them into the frame's own
    /// flags (an outer MORE joins the next message to this one, an outer COMMAND turns the
    /// frame into a command), so a peer that sets them means something libzmq would not
    /// read as it was meant. The frame's MORE and COMMAND are the flags byte in the box.
    ///
    /// Errors: [`Error::Unexpected`] for outer MORE or COMMAND, or a command other than
    /// MESSAGE (libzmq closes on a plain-text PING too); [`Error::MalformedCommand`] for a
    /// MESSAGE too short to hold a box and a flags byte; [`Error::Crypto`] for a nonce not
    /// above the last accepted (replayed or reordered) or a box that does not open.
    pub fn decrypt(&mut self, outer_flags: u8, body: &[u8]) -> Result<Decrypted> {
        let nonce = self.check(outer_flags, body)?;
        self.open(
            nonce,
            &body[BOX_AT..BOX_AT + MAC_LEN],
            BytesMut::from(&body[BOX_AT + MAC_LEN..]),
        )
    }

    /// As [`decrypt`](Self::decrypt), in place: the payload is a slice of `body`, no copy.
    pub fn decrypt_owned(&mut self, outer_flags: u8, mut body: BytesMut) -> Result<Decrypted> {
        let nonce = self.check(outer_flags, &body)?;
        let text = body.split_off(BOX_AT + MAC_LEN);
        let mac = body.split_off(BOX_AT);
        self.open(nonce, &mac, text)
    }

    /// The name, length and nonce checks, before any decryption: the MESSAGE's nonce.
    fn check(&self, outer_flags: u8, body: &[u8]) -> Result<u64> {
        if outer_flags & (frame::MORE | frame::COMMAND) != 0 {
            return Err(Error::Unexpected {
                what: "a CURVE MESSAGE in a frame with MORE or COMMAND set",
            });
        }
        if !body.starts_with(MESSAGE) {
            return Err(Error::Unexpected {
                what: "a command other than MESSAGE after the CURVE handshake",
            });
        }
        if body.len() < MESSAGE_OVERHEAD {
            return Err(Error::MalformedCommand {
                what: "a MESSAGE too short for its nonce, box and flags",
            });
        }
        let nonce = read_u64(&body[MESSAGE.len()..BOX_AT]);
        if nonce <= self.peer_nonce {
            return Err(Error::Crypto {
                what: "a MESSAGE nonce not above the last (replayed or reordered)",
            });
        }
        Ok(nonce)
    }

    /// Opens the box (`mac`, `text`) in place; the nonce counts only once it opened.
    fn open(&mut self, nonce: u64, mac: &[u8], mut text: BytesMut) -> Result<Decrypted> {
        self.session
            .open(&short_nonce(self.recv_prefix, nonce), &mut text, mac)
            .map_err(|_| Error::Crypto {
                what: "a MESSAGE box does not open",
            })?;
        self.peer_nonce = nonce;
        let flags = text[0];
        let payload = text.split_off(1).freeze();
        Ok(Decrypted {
            more: flags & INNER_MORE != 0,
            command: flags & INNER_COMMAND != 0,
            payload,
        })
    }

    /// Writes the frame header (outer flags 0, as libzmq), MESSAGE, the nonce, and the box
    /// of `flags` + `pieces`, sealed in place in `out`.
    fn seal_frame(&mut self, flags: u8, pieces: &[&[u8]], out: &mut BytesMut) {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        let body_len = MESSAGE_OVERHEAD + len;
        out.reserve(frame::header_len(body_len) + body_len);
        frame::write_header(out, 0, body_len);
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        out.put_slice(MESSAGE);
        out.put_u64(nonce);
        let box_at = out.len();
        out.put_bytes(0, MAC_LEN);
        out.put_u8(flags);
        for piece in pieces {
            out.put_slice(piece);
        }
        seal_in_place(
            &self.session,
            &short_nonce(self.send_prefix, nonce),
            &mut out[box_at..],
        );
    }
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cipher")
            .field("send_prefix", &String::from_utf8_lossy(self.send_prefix))
            .field("next_nonce", &self.next_nonce)
            .field("peer_nonce", &self.peer_nonce)
            .finish_non_exhaustive()
    }
}
