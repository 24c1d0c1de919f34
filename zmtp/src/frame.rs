//! ZMTP 3.x frames: a flags byte, a length (one byte, or eight big-endian when the LONG flag
//! is set), then the body.
//!
//! ```text
//! frame  = short-frame / long-frame
//! short  = flags(1) size(1)        body
//! long   = flags(1) size(8, BE)    body
//! flags  = bit 0 MORE, bit 1 LONG, bit 2 COMMAND; bits 3-7 are reserved and must be zero
//! ```
//!
//! A command frame never has MORE set; a message is the data frames up to the first without
//! MORE.

use bytes::BufMut;

use crate::error::{Error, Result};

/// The MORE flag: another frame of the same message follows.
pub const MORE: u8 = 0x01;
/// The LONG flag: the size is eight bytes, not one.
pub const LONG: u8 = 0x02;
/// The COMMAND flag: the frame is a command, not part of a message.
pub const COMMAND: u8 = 0x04;

/// The longest header: flags and an eight-byte size.
pub const MAX_HEADER: usize = 9;

/// The header of one frame, as read off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The flags byte as received (only MORE, LONG and COMMAND may be set).
    pub flags: u8,
    /// The header's own length: 2 or 9 bytes.
    pub header_len: usize,
    /// The body's length.
    pub body_len: u64,
}

impl Header {
    /// Whether MORE is set.
    pub fn more(&self) -> bool {
        self.flags & MORE != 0
    }

    /// Whether COMMAND is set.
    pub fn command(&self) -> bool {
        self.flags & COMMAND != 0
    }
}

/// Parses the header at the start of `input`: `Ok(None)` when more bytes are needed.
///
/// Checks what a header alone can break: reserved flag bits, MORE on a command, and a body
/// longer than `max_body` (so an oversized length is refused before anything is allocated
/// for it).
pub fn parse_header(input: &[u8], max_body: u64) -> Result<Option<Header>> {
    let Some(&flags) = input.first() else {
        return Ok(None);
    };
    if flags & !(MORE | LONG | COMMAND) != 0 {
        return Err(Error::ReservedFlags { flags });
    }
    if flags & COMMAND != 0 && flags & MORE != 0 {
        return Err(Error::CommandWithMore);
    }
    let (header_len, body_len) = if flags & LONG != 0 {
        let Some(size) = input.get(1..MAX_HEADER) else {
            return Ok(None);
        };
        let mut be = [0u8; 8];
        be.copy_from_slice(size);
        (MAX_HEADER, u64::from_be_bytes(be))
    } else {
        let Some(&size) = input.get(1) else {
            return Ok(None);
        };
        (2, u64::from(size))
    };
    if body_len > max_body {
        return Err(Error::FrameTooLarge {
            size: body_len,
            limit: max_body,
        });
    }
    Ok(Some(Header {
        flags,
        header_len,
        body_len,
    }))
}

/// Writes a frame header: `flags` is MORE and/or COMMAND; LONG is added when `len` needs it.
/// ZMTP 3 allows the long form for any size, but libzmq writes the short form up to 255
/// bytes, and so do we.
pub fn write_header(out: &mut impl BufMut, flags: u8, len: usize) {
    if len <= u8::MAX as usize {
        out.put_u8(flags & !LONG);
        out.put_u8(len as u8);
    } else {
        out.put_u8(flags | LONG);
        out.put_u64(len as u64);
    }
}

/// The header's length for a body of `len` bytes.
pub fn header_len(len: usize) -> usize {
    if len <= u8::MAX as usize {
        2
    } else {
        MAX_HEADER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_headers_round_trip() {
        for (len, expect) in [(0usize, 2usize), (1, 2), (255, 2), (256, 9), (1 << 20, 9)] {
            let mut out = Vec::new();
            write_header(&mut out, MORE, len);
            assert_eq!(out.len(), expect);
            assert_eq!(header_len(len), expect);
            let header = parse_header(&out, u64::MAX).unwrap().unwrap();
            assert_eq!(header.body_len, len as u64);
            assert_eq!(header.header_len, expect);
            assert!(header.more());
            assert!(!header.command());
        }
    }

    #[test]
    fn a_partial_header_asks_for_more() {
        assert_eq!(parse_header(&[], 10).unwrap(), None);
        assert_eq!(parse_header(&[0], 10).unwrap(), None);
        assert_eq!(parse_header(&[LONG, 0, 0, 0], 10).unwrap(), None);
    }

    #[test]
    fn bad_headers_are_typed_errors() {
        assert!(matches!(
            parse_header(&[0x08, 1], 10),
            Err(Error::ReservedFlags { flags: 0x08 })
        ));
        assert!(matches!(
            parse_header(&[COMMAND | MORE, 1], 10),
            Err(Error::CommandWithMore)
        ));
        // An oversized length is refused from the header alone.
        let mut long = vec![LONG];
        long.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            parse_header(&long, 1 << 20),
            Err(Error::FrameTooLarge { limit, .. }) if limit == 1 << 20
        ));
    }
}
