//! The ZMTP 3 greeting: the 64 bytes each side sends first.
//!
//! ```text
//! signature  0xFF, 8 bytes of padding (libzmq: 0x00 x7, 0x01), 0x7F
//! version    major (3), minor (1)
//! mechanism  20 bytes, the name padded with zeros ("NULL", "CURVE")
//! as-server  1 byte: 1 for the server side of a mechanism that has one (CURVE)
//! filler     31 zero bytes
//! ```
//!
//! Each side sends its signature and major version at once, and the rest once the peer's
//! signature and major version have arrived, as libzmq does ([`VERSIONED`]); it parses the
//! peer's greeting as it arrives.

use crate::error::{Error, Result};

/// Length of a greeting.
pub const LEN: usize = 64;

/// Length of the signature and the major version: what a side sends before it has seen
/// the peer's (libzmq sends its mechanism only after the peer's major version arrived).
pub const VERSIONED: usize = 11;

/// Offset and length of the mechanism's name.
const MECHANISM: std::ops::Range<usize> = 12..32;

/// What the peer's greeting says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Greeting {
    /// The ZMTP major version (3 for every peer we accept).
    pub major: u8,
    /// The minor version: 0 (ZMTP 3.0, no PING/PONG) or 1.
    pub minor: u8,
    /// The mechanism's name, padded with zeros.
    pub mechanism: [u8; 20],
    /// The as-server flag.
    pub as_server: bool,
}

impl Greeting {
    /// The mechanism's name without its padding.
    pub fn mechanism_name(&self) -> &[u8] {
        let end = self
            .mechanism
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.mechanism.len());
        &self.mechanism[..end]
    }
}

/// Our greeting: ZMTP 3.1 with `mechanism` (at most 20 bytes).
pub fn encode(mechanism: &[u8], as_server: bool) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[0] = 0xFF;
    out[8] = 0x01;
    out[9] = 0x7F;
    out[10] = 3;
    out[11] = 1;
    let name_len = mechanism.len().min(MECHANISM.len());
    out[MECHANISM.start..MECHANISM.start + name_len].copy_from_slice(&mechanism[..name_len]);
    out[32] = u8::from(as_server);
    out
}

/// Checks the greeting as far as it has arrived (`input` may be shorter than [`LEN`]): a
/// peer that is not ZMTP 3 is refused on its first bytes, before it sends 64.
/// `Ok(Some(_))` once the whole greeting is there.
pub fn parse(input: &[u8]) -> Result<Option<Greeting>> {
    if let Some(&first) = input.first() {
        if first != 0xFF {
            return Err(Error::BadGreeting {
                reason: "not a ZMTP 3 signature (first byte is not 0xFF)",
            });
        }
    }
    if let Some(&tenth) = input.get(9) {
        if tenth & 0x01 == 0 {
            return Err(Error::BadGreeting {
                reason: "not a ZMTP 3 signature (tenth byte's low bit is clear)",
            });
        }
    }
    if let Some(&major) = input.get(10) {
        if major < 3 {
            return Err(Error::UnsupportedVersion {
                major,
                minor: input.get(11).copied().unwrap_or(0),
            });
        }
    }
    let Some(all) = input.get(..LEN) else {
        return Ok(None);
    };
    let mut mechanism = [0u8; 20];
    mechanism.copy_from_slice(&all[MECHANISM]);
    Ok(Some(Greeting {
        major: all[10],
        minor: all[11],
        mechanism,
        as_server: all[32] != 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_greeting_parses_back() {
        let ours = encode(b"CURVE", true);
        let got = parse(&ours).unwrap().unwrap();
        assert_eq!((got.major, got.minor), (3, 1));
        assert_eq!(got.mechanism_name(), b"CURVE");
        assert!(got.as_server);
        // Every prefix is either incomplete or the whole greeting.
        for n in 0..LEN {
            assert_eq!(parse(&ours[..n]).unwrap(), None);
        }
    }

    #[test]
    fn a_stranger_is_refused_on_its_first_bytes() {
        assert!(matches!(
            parse(b"GET / HTTP/1.1"),
            Err(Error::BadGreeting { .. })
        ));
        let mut zmtp2 = encode(b"NULL", false);
        zmtp2[10] = 1;
        assert!(matches!(
            parse(&zmtp2[..11]),
            Err(Error::UnsupportedVersion { major: 1, .. })
        ));
        let mut low_bit = encode(b"NULL", false);
        low_bit[9] = 0x7E;
        assert!(matches!(
            parse(&low_bit[..10]),
            Err(Error::BadGreeting { .. })
        ));
    }
}
