//! ZMTP commands: a frame with the COMMAND flag whose body is a name and its data.
//!
//! ```text
//! command    = name-size(1) name data
//! READY      = properties                       (NULL, and inside CURVE's boxes)
//! ERROR      = reason-size(1) reason
//! PING       = ttl(2, BE, tenths of a second) context(0..16)
//! PONG       = context(0..16)
//! properties = *(name-size(1) name value-size(4, BE) value)
//! ```

use bytes::{BufMut, Bytes};

use crate::error::{Error, Result};
use crate::frame;

/// The longest PING context ZMTP 3.1 allows.
pub const MAX_PING_CONTEXT: usize = 16;

/// A command split into its name and data, borrowing the frame's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command<'a> {
    /// The command's name (`READY`, `ERROR`, `PING`, `HELLO`...).
    pub name: &'a [u8],
    /// What follows the name.
    pub data: &'a [u8],
}

impl<'a> Command<'a> {
    /// Splits a command frame's body.
    pub fn parse(body: &'a [u8]) -> Result<Command<'a>> {
        let (&len, rest) = body.split_first().ok_or(Error::MalformedCommand {
            what: "an empty command frame",
        })?;
        let len = usize::from(len);
        if rest.len() < len || len == 0 {
            return Err(Error::MalformedCommand {
                what: "a command name longer than its frame, or empty",
            });
        }
        let (name, data) = rest.split_at(len);
        Ok(Command { name, data })
    }
}

/// Writes a whole command frame (header, name, data) into `out`.
pub fn write(out: &mut impl BufMut, name: &[u8], data: &[u8]) {
    let body_len = 1 + name.len() + data.len();
    frame::write_header(out, frame::COMMAND, body_len);
    out.put_u8(name.len() as u8);
    out.put_slice(name);
    out.put_slice(data);
}

/// A command body (name-size, name, data) without a frame header: what CURVE puts in a box
/// or a caller hands to [`write()`] later.
pub fn body(name: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + name.len() + data.len());
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(data);
    out
}

/// Appends one property (ZMTP metadata) to `out`.
pub fn put_property(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(value);
}

/// The properties a peer announced (in READY, or CURVE's INITIATE and READY).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    entries: Vec<(Bytes, Bytes)>,
}

impl Properties {
    /// Parses properties; names compare case-insensitively, as ZMTP says.
    pub fn parse(mut data: &[u8]) -> Result<Properties> {
        let mut entries = Vec::new();
        while let Some((&name_len, rest)) = data.split_first() {
            let name_len = usize::from(name_len);
            if name_len == 0 || rest.len() < name_len + 4 {
                return Err(Error::MalformedCommand {
                    what: "a property name longer than the command, or empty",
                });
            }
            let (name, rest) = rest.split_at(name_len);
            let (size, rest) = rest.split_at(4);
            let value_len = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
            if rest.len() < value_len {
                return Err(Error::MalformedCommand {
                    what: "a property value longer than the command",
                });
            }
            let (value, rest) = rest.split_at(value_len);
            entries.push((Bytes::copy_from_slice(name), Bytes::copy_from_slice(value)));
            data = rest;
        }
        Ok(Properties { entries })
    }

    /// The value of property `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.entries
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Every property, in the order received.
    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Bytes)> {
        self.entries.iter().map(|(n, v)| (n, v))
    }
}

/// The reason in an ERROR command's data.
pub fn parse_error(data: &[u8]) -> Result<String> {
    let (&len, rest) = data.split_first().ok_or(Error::MalformedCommand {
        what: "an ERROR without a reason",
    })?;
    let reason = rest
        .get(..usize::from(len))
        .ok_or(Error::MalformedCommand {
            what: "an ERROR reason longer than the command",
        })?;
    Ok(String::from_utf8_lossy(reason).into_owned())
}

/// ERROR's data for `reason` (cut at 255 bytes).
pub fn error_data(reason: &str) -> Vec<u8> {
    let reason = &reason.as_bytes()[..reason.len().min(255)];
    let mut out = Vec::with_capacity(1 + reason.len());
    out.push(reason.len() as u8);
    out.extend_from_slice(reason);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_and_ignore_case() {
        let mut data = Vec::new();
        put_property(&mut data, b"Socket-Type", b"DEALER");
        put_property(&mut data, b"Identity", b"");
        let props = Properties::parse(&data).unwrap();
        assert_eq!(props.get("socket-type").unwrap().as_ref(), b"DEALER");
        assert_eq!(props.get("IDENTITY").unwrap().as_ref(), b"");
        assert_eq!(props.get("Resource"), None);
        assert_eq!(props.iter().count(), 2);
    }

    #[test]
    fn truncated_properties_and_commands_are_errors() {
        let mut data = Vec::new();
        put_property(&mut data, b"Socket-Type", b"DEALER");
        for cut in 1..data.len() {
            assert!(Properties::parse(&data[..cut]).is_err(), "cut at {cut}");
        }
        assert!(Command::parse(&[]).is_err());
        assert!(Command::parse(&[5, b'R']).is_err());
        assert!(Command::parse(&[0]).is_err());
        let ready = body(b"READY", &data);
        let cmd = Command::parse(&ready).unwrap();
        assert_eq!(cmd.name, b"READY");
        assert_eq!(cmd.data, &data[..]);
    }

    #[test]
    fn error_reasons_round_trip() {
        assert_eq!(parse_error(&error_data("no")).unwrap(), "no");
        assert!(parse_error(&[4, b'a']).is_err());
        assert_eq!(error_data(&"x".repeat(300)).len(), 256);
    }
}
