//! The envelope: how one zeronode message is laid out on the wire.
//!
//! A message is one or two ZeroMQ frames. A large payload travels as a frame of its own, so
//! it is never copied into the header and reaches the application as the very `Bytes` libzmq
//! delivered. A small payload (up to [`INLINE_MAX`] bytes) rides at the end of the header
//! frame instead: copying a few hundred bytes costs less than a second frame's trip through
//! libzmq, and decoding still slices it out without a copy.
//!
//! ```text
//! header frame (integers big-endian)
//! offset  size  field
//!      0     1  magic      0x5A ('Z'): not a zeronode peer otherwise
//!      1     1  version    1
//!      2     1  kind       1 request, 2 reply, 3 error reply, 4 tick, 5 stream item,
//!                          6 credit, 7 cancel
//!      3     1  flags      bit 0: system message (event in the `_system:` namespace);
//!                          bit 1: payload inline (after the metadata, in this frame);
//!                          bit 2 (requests only): reply streamed: the caller wants items
//!                          back and sends its first credit right after the request;
//!                          bit 3 (requests only): body streamed: the request's items
//!                          follow as stream items once the callee grants credit;
//!                          bit 3 (stream items and credit): belongs to the body (items
//!                          caller to callee, credit callee to caller); clear: to the
//!                          reply (items callee to caller, credit caller to callee);
//!                          bit 4 (stream items only): end of the body (no payload, takes
//!                          no credit);
//!                          other bits must be zero
//!      4     8  id         request id, unique per sender (a u64 counter: no collision at
//!                          any rate); replies, stream items, credit and cancel carry the
//!                          id of their request
//!     12     2  E          event name length in bytes
//!     14     E  event      UTF-8
//!   14+E     4  M          metadata length in bytes (0: none)
//!   18+E     M  metadata   key/value entries (`meta.rs`); a request's time budget first
//! 18+E+M     P  payload    only with the inline flag: the rest of the frame
//! payload frame (only without the inline flag; absent when empty): the payload, raw
//! ```
//!
//! A stream is a request with bit 2 and/or bit 3 set, then its items (kind 5) one way and
//! credit (kind 6, payload a u32 big-endian count of items granted) the other way, ended by
//! the request's ordinary reply or error reply (a streamed reply) or by an end item (a
//! streamed body). Kind 7 (no payload) says the caller gave up: the callee's handler sees
//! its stream cancelled. Items are counted in credit, not bytes, and each is bounded by the
//! payload limit, so a stream holds at most window x max payload bytes at its receiver
//! (`credit.rs`). A peer that predates streams refuses kinds 5-7 as `UnknownKind` and bits
//! 2-4 as `UnknownFlags`: a typed error, never a misreading.
//!
//! Decoding ([`Envelope::decode`]) checks the header and the event name and stops there: the
//! metadata and the payload stay `Bytes` slices of what was received until someone asks for
//! them ([`Envelope::payload`], [`Envelope::decode_payload`]).

use bytes::{BufMut, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{DecodeError, Error};
use crate::meta::{budget_entry, BUDGET_ENTRY};

/// The first byte of every zeronode header.
pub const MAGIC: u8 = 0x5A;
/// The envelope version this crate writes and reads.
pub const VERSION: u8 = 1;
/// Size of the fixed part of the header, before the event name.
pub const FIXED_HEADER: usize = 14;
/// Events in this namespace are reserved for the node layer's system messages.
pub const SYSTEM_PREFIX: &str = "_system:";
/// Flag bit: the message is a system message.
const FLAG_SYSTEM: u8 = 0b0000_0001;
/// Flag bit: the payload follows the metadata in the header frame.
const FLAG_INLINE: u8 = 0b0000_0010;
/// Flag bit (requests): the caller wants the reply as a stream of items.
pub(crate) const FLAG_REPLY_STREAMED: u8 = 0b0000_0100;
/// Flag bit (requests): the request's body follows as a stream of items.
pub(crate) const FLAG_BODY_STREAMED: u8 = 0b0000_1000;
/// Flag bit (stream items): the last item of a body.
pub(crate) const FLAG_END: u8 = 0b0001_0000;
/// The stream flags, as a request or item carries them.
const STREAM_FLAGS: u8 = FLAG_REPLY_STREAMED | FLAG_BODY_STREAMED | FLAG_END;
/// Payloads up to this size ride inline in the header frame.
pub const INLINE_MAX: usize = 4096;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A request: the receiver answers with a reply or an error reply carrying the same id.
    Request = 1,
    /// A successful answer to a request.
    Reply = 2,
    /// A failed answer to a request; the payload is an encoded [`RemoteError`](crate::RemoteError).
    Error = 3,
    /// A one-way message: no answer.
    Tick = 4,
    /// One item of a stream: `id` names the request it belongs to, the payload is the item.
    StreamItem = 5,
    /// Credit for a stream: the payload is a u32 (big-endian) count of items granted.
    Credit = 6,
    /// The caller gave up on a request or stream: its handler sees it cancelled.
    Cancel = 7,
}

impl Kind {
    fn from_byte(byte: u8) -> Result<Kind, DecodeError> {
        Ok(match byte {
            1 => Kind::Request,
            2 => Kind::Reply,
            3 => Kind::Error,
            4 => Kind::Tick,
            5 => Kind::StreamItem,
            6 => Kind::Credit,
            7 => Kind::Cancel,
            other => return Err(DecodeError::UnknownKind(other)),
        })
    }
}

/// An event name: kept inline when short (most are), so that decoding one costs no
/// reference on the received buffer (two atomic operations per message) and building one no
/// allocation; a longer one is a slice of the received buffer, or a copy.
#[derive(Clone)]
enum EventName {
    Inline {
        len: u8,
        bytes: [u8; EventName::INLINE],
    },
    Shared(Bytes),
}

impl EventName {
    const INLINE: usize = 30;

    /// `name`, inline if short; otherwise a slice of `within` (a buffer that holds `name`
    /// at the given offset) when given, else a copy.
    fn new(name: &[u8], within: Option<(&Bytes, usize)>) -> EventName {
        if name.len() <= Self::INLINE {
            let mut bytes = [0; Self::INLINE];
            bytes[..name.len()].copy_from_slice(name);
            return EventName::Inline {
                len: name.len() as u8,
                bytes,
            };
        }
        match within {
            Some((buffer, at)) => EventName::Shared(buffer.slice(at..at + name.len())),
            None => EventName::Shared(Bytes::copy_from_slice(name)),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            EventName::Inline { len, bytes } => &bytes[..usize::from(*len)],
            EventName::Shared(bytes) => bytes,
        }
    }
}

impl PartialEq for EventName {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for EventName {}

impl std::fmt::Debug for EventName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&String::from_utf8_lossy(self.as_bytes()), f)
    }
}

/// A decoded message. Cheap to clone (it holds `Bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    kind: Kind,
    system: bool,
    /// The stream flag bits (`FLAG_REPLY_STREAMED`, `FLAG_BODY_STREAMED`, `FLAG_END`).
    stream: u8,
    id: u64,
    /// The event name; checked to be UTF-8 when decoded.
    event: EventName,
    metadata: Bytes,
    payload: Bytes,
}

impl Envelope {
    /// Builds an envelope. System status follows from the event name.
    pub fn new(kind: Kind, id: u64, event: &str, metadata: Bytes, payload: Bytes) -> Envelope {
        Envelope {
            kind,
            system: event.starts_with(SYSTEM_PREFIX),
            stream: 0,
            id,
            event: EventName::new(event.as_bytes(), None),
            metadata,
            payload,
        }
    }

    /// The message kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Whether this is a system message (event in the `_system:` namespace).
    pub fn is_system(&self) -> bool {
        self.system
    }

    /// The request id (for replies: the id of the request answered).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A request whose caller wants its reply as a stream of items.
    pub fn reply_streamed(&self) -> bool {
        self.stream & FLAG_REPLY_STREAMED != 0
    }

    /// A request whose body follows as a stream of items; on a stream item or credit: it
    /// belongs to the body (not the reply).
    pub fn body_streamed(&self) -> bool {
        self.stream & FLAG_BODY_STREAMED != 0
    }

    /// A stream item that ends its stream.
    pub fn is_end(&self) -> bool {
        self.stream & FLAG_END != 0
    }

    /// The same envelope with stream flag bits set (crate use: tests and encoders).
    #[cfg(test)]
    pub(crate) fn with_stream_flags(mut self, flags: u8) -> Envelope {
        self.stream = flags & STREAM_FLAGS;
        self
    }

    /// The event name.
    pub fn event(&self) -> &str {
        // Checked in `decode` (or built from a `&str`); this cannot fail.
        std::str::from_utf8(self.event.as_bytes()).unwrap_or_default()
    }

    /// The event name's bytes (UTF-8, checked when decoded), without checking them again.
    pub(crate) fn event_bytes(&self) -> &[u8] {
        self.event.as_bytes()
    }

    /// The raw metadata (empty when none was sent).
    pub fn metadata(&self) -> &Bytes {
        &self.metadata
    }

    /// The raw payload, exactly as sent.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Takes the payload out without copying.
    pub fn into_payload(self) -> Bytes {
        self.payload
    }

    /// Decodes the payload from MessagePack into `T`.
    pub fn decode_payload<T: DeserializeOwned>(&self) -> Result<T, Error> {
        decode_value(&self.payload)
    }

    /// Decodes the metadata from MessagePack into `T`.
    pub fn decode_metadata<T: DeserializeOwned>(&self) -> Result<T, Error> {
        decode_value(&self.metadata)
    }

    /// The wire frames: the header (with the payload inline when it is small), then the
    /// payload frame when it is not.
    pub fn encode(&self) -> Vec<Bytes> {
        let payload = &self.payload;
        if !payload.is_empty() && payload.len() <= INLINE_MAX {
            let header = header(
                self.kind,
                self.id,
                self.event(),
                &self.metadata,
                Some(payload),
            );
            vec![with_flags(header, self.stream)]
        } else if payload.is_empty() {
            vec![self.encode_header()]
        } else {
            vec![self.encode_header(), payload.clone()]
        }
    }

    /// The header frame alone, for a payload sent as a frame of its own.
    pub fn encode_header(&self) -> Bytes {
        with_flags(
            header(self.kind, self.id, self.event(), &self.metadata, None),
            self.stream,
        )
    }

    /// Decodes the frames of one message, checking only the header and the event name; the
    /// payload and metadata are kept as slices of the received buffers. `max_payload` bounds
    /// the payload frame.
    pub fn decode(frames: &[Bytes], max_payload: usize) -> Result<Envelope, DecodeError> {
        let (header, payload_frame) = match frames {
            [] => return Err(DecodeError::NoFrames),
            [header] => (header, None),
            [header, payload] => (header, Some(payload)),
            more => return Err(DecodeError::TooManyFrames(more.len())),
        };
        if header.len() < FIXED_HEADER {
            // Check the magic first when we have it: a stranger is more useful to report
            // than a short read.
            if let Some(&magic) = header.first() {
                if magic != MAGIC {
                    return Err(DecodeError::BadMagic(magic));
                }
            }
            return Err(DecodeError::Truncated {
                needed: FIXED_HEADER,
                got: header.len(),
            });
        }
        if header[0] != MAGIC {
            return Err(DecodeError::BadMagic(header[0]));
        }
        if header[1] != VERSION {
            return Err(DecodeError::UnsupportedVersion(header[1]));
        }
        let kind = Kind::from_byte(header[2])?;
        let flags = header[3];
        // Each stream bit is only known on the kind it belongs to.
        let allowed = match kind {
            Kind::Request => FLAG_REPLY_STREAMED | FLAG_BODY_STREAMED,
            Kind::StreamItem => FLAG_END | FLAG_BODY_STREAMED,
            Kind::Credit => FLAG_BODY_STREAMED,
            _ => 0,
        };
        if flags & !(FLAG_SYSTEM | FLAG_INLINE | allowed) != 0 {
            return Err(DecodeError::UnknownFlags(flags));
        }
        let inline = flags & FLAG_INLINE != 0;
        if inline && payload_frame.is_some() {
            return Err(DecodeError::TooManyFrames(2));
        }
        let id = u64::from_be_bytes([
            header[4], header[5], header[6], header[7], header[8], header[9], header[10],
            header[11],
        ]);
        let event_len = usize::from(u16::from_be_bytes([header[12], header[13]]));
        let event_end = FIXED_HEADER + event_len;
        let metadata_start = event_end + 4;
        if header.len() < metadata_start {
            return Err(DecodeError::Truncated {
                needed: metadata_start,
                got: header.len(),
            });
        }
        let event_raw = &header[FIXED_HEADER..event_end];
        let event_str = std::str::from_utf8(event_raw).map_err(|_| DecodeError::InvalidUtf8)?;
        let system = flags & FLAG_SYSTEM != 0;
        if system != event_str.starts_with(SYSTEM_PREFIX) {
            return Err(DecodeError::SystemFlagMismatch);
        }
        let metadata_len = u32::from_be_bytes([
            header[event_end],
            header[event_end + 1],
            header[event_end + 2],
            header[event_end + 3],
        ]) as usize;
        let available = header.len() - metadata_start;
        let metadata_fits = if inline {
            metadata_len <= available
        } else {
            metadata_len == available
        };
        if !metadata_fits {
            return Err(DecodeError::LengthMismatch {
                declared: metadata_len,
                available,
            });
        }
        let metadata_end = metadata_start + metadata_len;
        let payload = match payload_frame {
            Some(frame) => frame.clone(),
            None if inline => header.slice(metadata_end..),
            None => Bytes::new(),
        };
        if payload.len() > max_payload {
            return Err(DecodeError::TooLarge {
                size: payload.len(),
                max: max_payload,
            });
        }
        Ok(Envelope {
            kind,
            system,
            stream: flags & STREAM_FLAGS,
            id,
            event: EventName::new(event_raw, Some((header, FIXED_HEADER))),
            metadata: header.slice(metadata_start..metadata_end),
            payload,
        })
    }
}

/// `header` with the stream flag bits `stream` set (rare: only envelopes built by hand).
fn with_flags(header: Bytes, stream: u8) -> Bytes {
    if stream == 0 {
        return header;
    }
    let mut header = BytesMut::from(header);
    header[3] |= stream;
    header.freeze()
}

/// Writes a header frame straight from its parts (no intermediate envelope), with `inline`
/// payload bytes at its end when given.
pub(crate) fn header(
    kind: Kind,
    id: u64,
    event: &str,
    metadata: &[u8],
    inline: Option<&[u8]>,
) -> Bytes {
    // Event names are bounded by `check_event` before an envelope is sent; a longer one
    // (only possible through `Envelope::new`) is cut rather than mis-framed.
    let event = &event.as_bytes()[..event.len().min(u16::MAX as usize)];
    let metadata = &metadata[..metadata.len().min(u32::MAX as usize)];
    let inline_len = inline.map_or(0, <[u8]>::len);
    let mut header =
        BytesMut::with_capacity(FIXED_HEADER + event.len() + 4 + metadata.len() + inline_len);
    header.put_u8(MAGIC);
    header.put_u8(VERSION);
    header.put_u8(kind as u8);
    let mut flags = 0;
    if event.starts_with(SYSTEM_PREFIX.as_bytes()) {
        flags |= FLAG_SYSTEM;
    }
    if inline.is_some() {
        flags |= FLAG_INLINE;
    }
    header.put_u8(flags);
    header.put_u64(id);
    header.put_u16(event.len() as u16);
    header.put_slice(event);
    header.put_u32(metadata.len() as u32);
    header.put_slice(metadata);
    if let Some(payload) = inline {
        header.put_slice(payload);
    }
    header.freeze()
}

/// One message to send, as the pieces its frames are made of: nothing is copied or allocated
/// here; the transport copies the pieces once, straight into libzmq's buffers. (Building the
/// header in a buffer of our own first cost an allocation, a copy and a free per message.)
#[derive(Clone, Copy)]
pub(crate) struct Encoded<'a> {
    /// magic, version, kind, flags, id, event length.
    fixed: [u8; FIXED_HEADER],
    event: &'a [u8],
    metadata_len: [u8; 4],
    /// A request's time budget, first in the metadata section (`meta.rs`); empty otherwise.
    budget: [u8; BUDGET_ENTRY],
    has_budget: bool,
    metadata: &'a [u8],
    payload: &'a [u8],
    /// The payload rides at the end of the header frame.
    inline: bool,
}

impl<'a> Encoded<'a> {
    /// Lays a message out: a small payload inline, a large one as its own frame (the same
    /// bytes as [`header`] and [`Envelope::encode`] write).
    pub(crate) fn new(
        kind: Kind,
        id: u64,
        event: &'a str,
        metadata: &'a [u8],
        payload: &'a [u8],
    ) -> Encoded<'a> {
        // Cut rather than mis-framed, as in `header`.
        let event = &event.as_bytes()[..event.len().min(u16::MAX as usize)];
        let metadata = &metadata[..metadata.len().min(u32::MAX as usize)];
        let inline = !payload.is_empty() && payload.len() <= INLINE_MAX;
        let mut flags = 0;
        if event.starts_with(SYSTEM_PREFIX.as_bytes()) {
            flags |= FLAG_SYSTEM;
        }
        if inline {
            flags |= FLAG_INLINE;
        }
        let mut fixed = [0; FIXED_HEADER];
        fixed[0] = MAGIC;
        fixed[1] = VERSION;
        fixed[2] = kind as u8;
        fixed[3] = flags;
        fixed[4..12].copy_from_slice(&id.to_be_bytes());
        fixed[12..14].copy_from_slice(&(event.len() as u16).to_be_bytes());
        Encoded {
            fixed,
            event,
            metadata_len: (metadata.len() as u32).to_be_bytes(),
            budget: [0; BUDGET_ENTRY],
            has_budget: false,
            metadata,
            payload,
            inline,
        }
    }

    /// The same message with the stream flag bits `flags` set.
    pub(crate) fn with_flags(mut self, flags: u8) -> Encoded<'a> {
        self.fixed[3] |= flags & STREAM_FLAGS;
        self
    }

    /// The same message carrying the time budget `budget` first in its metadata (a
    /// request: its receiver sees how long its sender will wait).
    pub(crate) fn with_budget(mut self, budget: std::time::Duration) -> Encoded<'a> {
        self.budget = budget_entry(budget);
        self.has_budget = true;
        let len = (self.metadata.len() + BUDGET_ENTRY).min(u32::MAX as usize);
        self.metadata_len = (len as u32).to_be_bytes();
        self
    }

    /// The pieces of the header frame (with the payload last when it rides inline) and of
    /// the payload frame.
    pub(crate) fn pieces(&self) -> Pieces<'_> {
        let inline: &[u8] = if self.inline { self.payload } else { &[] };
        Pieces {
            header: [
                &self.fixed,
                self.event,
                &self.metadata_len,
                if self.has_budget { &self.budget } else { &[] },
                self.metadata,
                inline,
            ],
            payload: [self.payload],
            separate_payload: !self.inline && !self.payload.is_empty(),
        }
    }
}

/// The pieces of one message's frames, borrowed from an [`Encoded`].
pub(crate) struct Pieces<'e> {
    header: [&'e [u8]; 6],
    payload: [&'e [u8]; 1],
    separate_payload: bool,
}

impl<'e> Pieces<'e> {
    /// The frames to send: the header, and the payload frame when there is one.
    pub(crate) fn frames(&self) -> FrameList<'_, 'e> {
        FrameList {
            frames: [&self.header, &self.payload],
            len: if self.separate_payload { 2 } else { 1 },
        }
    }
}

/// One or two frames, each a list of pieces, without a heap-allocated list.
pub(crate) struct FrameList<'p, 'e> {
    frames: [&'p [&'e [u8]]; 2],
    len: usize,
}

impl<'p, 'e> FrameList<'p, 'e> {
    /// The frames to send.
    pub(crate) fn as_slice(&self) -> &[&'p [&'e [u8]]] {
        &self.frames[..self.len]
    }
}

/// The id of a request whose header is readable (magic, version, kind "request"), for
/// answering it when the rest of it is refused (a payload over the limit): `None` for
/// anything else.
pub(crate) fn request_id(frames: &[Bytes]) -> Option<u64> {
    let header = frames.first()?;
    if header.len() < FIXED_HEADER || header[0] != MAGIC || header[1] != VERSION {
        return None;
    }
    if header[2] != Kind::Request as u8 {
        return None;
    }
    let id: [u8; 8] = header.get(4..12)?.try_into().ok()?;
    Some(u64::from_be_bytes(id))
}

/// The kind, id and flags of a message whose header is readable (magic, version, kind),
/// for ending the stream an item over the size limit belonged to: `None` for anything else.
pub(crate) fn kind_and_id(frames: &[Bytes]) -> Option<(Kind, u64, u8)> {
    let header = frames.first()?;
    if header.len() < FIXED_HEADER || header[0] != MAGIC || header[1] != VERSION {
        return None;
    }
    let kind = Kind::from_byte(header[2]).ok()?;
    let id: [u8; 8] = header.get(4..12)?.try_into().ok()?;
    Some((kind, u64::from_be_bytes(id), header[3]))
}

/// Encodes a value as MessagePack (maps with field names, as the JavaScript zeronode reads).
pub fn encode_value<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, Error> {
    rmp_serde::to_vec_named(value)
        .map(Bytes::from)
        .map_err(|e| Error::Encode(e.to_string()))
}

/// Decodes a MessagePack value.
pub fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    rmp_serde::from_slice(bytes).map_err(|e| Error::Decode(e.to_string()))
}

/// Longest event name accepted.
pub const MAX_EVENT_LEN: usize = 1024;

/// Checks an event name a user wants to send: not empty, not too long, not reserved.
pub(crate) fn check_user_event(event: &str) -> Result<(), Error> {
    if event.starts_with(SYSTEM_PREFIX) {
        return Err(Error::ReservedEvent(event.to_owned()));
    }
    check_event(event)
}

/// Checks an event name the node layer sends as a system message: it must be in the
/// reserved namespace.
pub(crate) fn check_system_event(event: &str) -> Result<(), Error> {
    if !event.starts_with(SYSTEM_PREFIX) {
        return Err(Error::InvalidEvent(event.to_owned()));
    }
    Ok(())
}

/// Checks an event name: not empty and not too long.
pub(crate) fn check_event(event: &str) -> Result<(), Error> {
    if event.is_empty() || event.len() > MAX_EVENT_LEN {
        return Err(Error::InvalidEvent(event.chars().take(64).collect()));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;
