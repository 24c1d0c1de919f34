//! Metadata: the key/value section that travels beside a message's payload.
//!
//! The envelope's metadata section (see `envelope.rs`) is a list of entries:
//!
//! ```text
//! entry   size  field
//!            1  K        key length, 1..=255
//!            K  key      UTF-8
//!            1  kind     0: the value is UTF-8 text, 1: raw bytes
//!            4  V        value length, big-endian
//!            V  value
//! ```
//!
//! Keys that start with `:` are the framework's own ([`RESERVED_PREFIX`]): the time budget
//! a request carries ([`BUDGET`], written by this layer on every request, first in the
//! section), and what the node layer adds (a forwarded message's route). A user can read
//! them but not set them; [`Meta::iter`] skips them.
//!
//! A received section is checked once ([`Meta::parse`]: lengths, UTF-8, kinds, and the
//! receiver's limits) and then read in place, as slices of the received buffer.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

/// Keys with this prefix are reserved for the framework.
pub const RESERVED_PREFIX: char = ':';
/// The reserved key of a request's time budget: the microseconds its sender will still
/// wait for the answer, as 8 bytes big-endian. A budget, not an absolute time, so clocks
/// that disagree between hosts do not matter.
pub const BUDGET: &str = ":budget";

const KIND_TEXT: u8 = 0;
const KIND_BYTES: u8 = 1;
/// Bytes an entry takes besides its key and value.
const ENTRY_OVERHEAD: usize = 1 + 1 + 4;

/// The room a section built here starts with: a few short entries (an auth token, a
/// tenant, a trace context) without growing.
const BUILD_ROOM: usize = 128;
/// The size of the budget entry, as written (a section of exactly this size with a budget
/// holds nothing else).
pub const BUDGET_ENTRY: usize = ENTRY_OVERHEAD + BUDGET.len() + 8;

/// One metadata value: text or raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaValue<'a> {
    /// UTF-8 text (checked when received).
    Text(&'a str),
    /// Raw bytes.
    Bytes(&'a [u8]),
}

impl<'a> MetaValue<'a> {
    /// The value as text, if it is text.
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            MetaValue::Text(text) => Some(text),
            MetaValue::Bytes(_) => None,
        }
    }

    /// The value's bytes, whichever kind it is.
    pub fn as_bytes(&self) -> &'a [u8] {
        match self {
            MetaValue::Text(text) => text.as_bytes(),
            MetaValue::Bytes(bytes) => bytes,
        }
    }
}

/// Why a metadata section or entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// More entries or more bytes than the limit.
    #[error("metadata too large: {entries} entries in {bytes} bytes (limit {max_entries} entries, {max_bytes} bytes)")]
    TooLarge {
        /// User entries, counted up to the first over the limit.
        entries: usize,
        /// Their encoded size in bytes, counted as far.
        bytes: usize,
        /// The most entries accepted.
        max_entries: usize,
        /// The most bytes accepted.
        max_bytes: usize,
    },
    /// A key a user may not set: empty, longer than 255 bytes, or reserved (`:`).
    #[error("invalid metadata key {0:?} (1 to 255 bytes, not starting with ':')")]
    InvalidKey(String),
    /// The section is not a valid list of entries.
    #[error("malformed metadata: {0}")]
    Malformed(&'static str),
}

/// Limits on a metadata section's user entries: how many, and their encoded bytes (the
/// framework's `:` entries are not counted: the frame they ride in bounds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaLimits {
    /// The most entries.
    pub max_entries: usize,
    /// The most bytes in the whole section.
    pub max_bytes: usize,
}

impl Default for MetaLimits {
    /// 64 entries, 16 KiB.
    fn default() -> MetaLimits {
        MetaLimits {
            max_entries: 64,
            max_bytes: 16 * 1024,
        }
    }
}

impl MetaLimits {
    /// Checks a section of `bytes` bytes holding `entries` entries.
    pub fn check(&self, entries: usize, bytes: usize) -> Result<(), MetaError> {
        if entries > self.max_entries || bytes > self.max_bytes {
            return Err(MetaError::TooLarge {
                entries,
                bytes,
                max_entries: self.max_entries,
                max_bytes: self.max_bytes,
            });
        }
        Ok(())
    }
}

/// Key/value metadata: built by a sender ([`insert`](Self::insert)), or parsed from a
/// received section ([`parse`](Self::parse)) and read in place. Cheap to clone.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// The encoded entries.
    raw: Bytes,
    /// One bit ([`key_bit`]) per key in `raw`: a key whose bit is clear is not there, found
    /// without walking the section. (Looking up a key a request does not carry, as the trace
    /// context's is on every request received, was a walk of every entry: about 20 ns of a
    /// server's request with two entries, `perf`.)
    keys: u64,
}

impl Meta {
    /// No entries.
    pub fn new() -> Meta {
        Meta::default()
    }

    /// Checks a received section: well formed, and its user entries within `limits`
    /// (the framework's own entries are bounded by the frame they ride in). Reading it
    /// afterwards cannot fail.
    pub fn parse(raw: Bytes, limits: &MetaLimits) -> Result<Meta, MetaError> {
        let (mut entries, mut bytes, mut keys) = (0, 0, 0);
        let mut rest: &[u8] = &raw;
        while !rest.is_empty() {
            let (key, after) = check_entry(rest)?;
            keys |= key_bit(key);
            if !is_reserved(key) {
                entries += 1;
                bytes += rest.len() - after.len();
                limits.check(entries, bytes)?;
            }
            rest = after;
        }
        Ok(Meta { raw, keys })
    }

    /// Whether there are no entries at all (framework ones included).
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The encoded section, as it goes on the wire.
    pub fn as_bytes(&self) -> &Bytes {
        &self.raw
    }

    /// The value of `key` (the last one, if it was given twice), framework keys included.
    ///
    /// Keys are compared as bytes and only the value found is checked as text: looking up
    /// a key in a request's section was, with every entry's key and text checked as UTF-8,
    /// about 40 ns of each side's request context (two entries, `perf`).
    pub fn get(&self, key: &str) -> Option<MetaValue<'_>> {
        if self.keys & key_bit(key.as_bytes()) == 0 {
            return None;
        }
        let (_, kind, value) = self
            .raw_entries()
            .filter(|(k, _, _)| *k == key.as_bytes())
            .last()?;
        match kind {
            KIND_TEXT => std::str::from_utf8(value).ok().map(MetaValue::Text),
            KIND_BYTES => Some(MetaValue::Bytes(value)),
            _ => None,
        }
    }

    /// The text value of `key`, if it is there and is text.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| v.as_str())
    }

    /// The user's entries, in the order they were sent (framework keys skipped).
    pub fn iter(&self) -> impl Iterator<Item = (&str, MetaValue<'_>)> {
        self.all()
            .filter(|(key, _)| !key.starts_with(RESERVED_PREFIX))
    }

    /// How many entries there are (framework ones included).
    pub fn len(&self) -> usize {
        self.all().count()
    }

    /// Every entry, framework ones included.
    fn all(&self) -> Entries<'_> {
        Entries { rest: &self.raw }
    }

    /// Every entry as bytes (key, kind, value), nothing checked as text: for looking at keys
    /// and sizes. The section was checked when it was parsed or built.
    fn raw_entries(&self) -> RawEntries<'_> {
        RawEntries { rest: &self.raw }
    }

    /// Sets `key` to text `value`, replacing an earlier value. A key that is empty, longer
    /// than 255 bytes or reserved is refused.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), MetaError> {
        check_user_key(key)?;
        self.set(key, MetaValue::Text(value));
        Ok(())
    }

    /// Sets `key` to raw bytes `value`, replacing an earlier value.
    pub fn insert_bytes(&mut self, key: &str, value: &[u8]) -> Result<(), MetaError> {
        check_user_key(key)?;
        self.set(key, MetaValue::Bytes(value));
        Ok(())
    }

    /// Removes `key`; whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        if self.get(key).is_none() {
            return false;
        }
        let mut kept = BytesMut::with_capacity(self.raw.len());
        let mut keys = 0;
        for (k, v) in self.all() {
            if k != key {
                put_entry(&mut kept, k, v);
                keys |= key_bit(k.as_bytes());
            }
        }
        self.raw = kept.freeze();
        self.keys = keys;
        true
    }

    /// Sets any key, framework ones included (for the layers above this one).
    ///
    /// Appends in place to a section this value alone holds (one built here, with room left
    /// for a few more short entries); a section shared with a received message or a clone
    /// is copied first. Two entries set one after the other cost one allocation, not two.
    pub fn set(&mut self, key: &str, value: MetaValue<'_>) {
        self.remove(key);
        let needed = entry_len(key, value);
        let mut raw = match std::mem::take(&mut self.raw).try_into_mut() {
            Ok(mut unique) => {
                unique.reserve(needed);
                unique
            }
            Err(shared) => {
                let mut raw = BytesMut::with_capacity(shared.len() + needed.max(BUILD_ROOM));
                raw.put_slice(&shared);
                raw
            }
        };
        put_entry(&mut raw, key, value);
        self.raw = raw.freeze();
        self.keys |= key_bit(key.as_bytes());
    }

    /// The same entries without the framework's (what a layer passes on to the next hop,
    /// which adds its own).
    pub fn user_only(&self) -> Meta {
        if !self.raw_entries().any(|(key, _, _)| is_reserved(key)) {
            return self.clone();
        }
        let mut raw = BytesMut::with_capacity(self.raw.len());
        let mut keys = 0;
        for (k, v) in self.iter() {
            put_entry(&mut raw, k, v);
            keys |= key_bit(k.as_bytes());
        }
        Meta {
            raw: raw.freeze(),
            keys,
        }
    }

    /// Checks this section's user entries, as they would be sent, against `limits`.
    pub fn check(&self, limits: &MetaLimits) -> Result<(), MetaError> {
        let (entries, bytes) = self
            .raw_entries()
            .filter(|(key, _, _)| !is_reserved(key))
            .fold((0, 0), |(n, size), (key, _, value)| {
                (n + 1, size + ENTRY_OVERHEAD + key.len() + value.len())
            });
        limits.check(entries, bytes)
    }

    /// The time budget the sender gave this request, if it said (see [`BUDGET`]).
    pub fn budget(&self) -> Option<Duration> {
        budget_of(&self.raw)
    }
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.all()).finish()
    }
}

/// The budget of a request from its raw metadata section, where this layer writes it first
/// (so finding it costs a comparison, not a walk); `None` when it is not there.
pub(crate) fn budget_of(raw: &[u8]) -> Option<Duration> {
    let entry = raw.get(..BUDGET_ENTRY)?;
    let mut expected = [0u8; BUDGET_ENTRY - 8];
    expected[0] = BUDGET.len() as u8;
    expected[1..1 + BUDGET.len()].copy_from_slice(BUDGET.as_bytes());
    expected[1 + BUDGET.len()] = KIND_BYTES;
    expected[2 + BUDGET.len()..].copy_from_slice(&8u32.to_be_bytes());
    if entry[..BUDGET_ENTRY - 8] != expected {
        return None;
    }
    let micros: [u8; 8] = entry[BUDGET_ENTRY - 8..].try_into().ok()?;
    Some(Duration::from_micros(u64::from_be_bytes(micros)))
}

/// The budget entry for `budget`, as written first in a request's section.
pub(crate) fn budget_entry(budget: Duration) -> [u8; BUDGET_ENTRY] {
    let mut entry = [0u8; BUDGET_ENTRY];
    entry[0] = BUDGET.len() as u8;
    entry[1..1 + BUDGET.len()].copy_from_slice(BUDGET.as_bytes());
    entry[1 + BUDGET.len()] = KIND_BYTES;
    entry[2 + BUDGET.len()..6 + BUDGET.len()].copy_from_slice(&8u32.to_be_bytes());
    let micros = u64::try_from(budget.as_micros()).unwrap_or(u64::MAX);
    entry[BUDGET_ENTRY - 8..].copy_from_slice(&micros.to_be_bytes());
    entry
}

fn check_user_key(key: &str) -> Result<(), MetaError> {
    if key.is_empty() || key.len() > 255 || key.starts_with(RESERVED_PREFIX) {
        return Err(MetaError::InvalidKey(key.chars().take(64).collect()));
    }
    Ok(())
}

fn entry_len(key: &str, value: MetaValue<'_>) -> usize {
    ENTRY_OVERHEAD + key.len() + value.as_bytes().len()
}

/// Appends one entry (the key is at most 255 bytes: checked by the callers, cut otherwise;
/// a value's length fits 32 bits: metadata limits are far below).
fn put_entry(out: &mut BytesMut, key: &str, value: MetaValue<'_>) {
    let key = &key.as_bytes()[..key.len().min(255)];
    out.put_u8(key.len() as u8);
    out.put_slice(key);
    let (kind, bytes) = match value {
        MetaValue::Text(text) => (KIND_TEXT, text.as_bytes()),
        MetaValue::Bytes(bytes) => (KIND_BYTES, bytes),
    };
    let bytes = &bytes[..bytes.len().min(u32::MAX as usize)];
    out.put_u8(kind);
    out.put_u32(bytes.len() as u32);
    out.put_slice(bytes);
}

/// Splits the first entry off `raw`: its key, its value, and what follows.
fn split_entry(raw: &[u8]) -> Result<(&str, MetaValue<'_>, &[u8]), MetaError> {
    let (&key_len, rest) = raw
        .split_first()
        .ok_or(MetaError::Malformed("empty entry"))?;
    let key_len = usize::from(key_len);
    if key_len == 0 {
        return Err(MetaError::Malformed("empty key"));
    }
    if rest.len() < key_len + 5 {
        return Err(MetaError::Malformed("truncated entry"));
    }
    let (key, rest) = rest.split_at(key_len);
    let key = std::str::from_utf8(key).map_err(|_| MetaError::Malformed("key is not UTF-8"))?;
    let kind = rest[0];
    let value_len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
    let rest = &rest[5..];
    if rest.len() < value_len {
        return Err(MetaError::Malformed("truncated value"));
    }
    let (value, rest) = rest.split_at(value_len);
    let value = match kind {
        KIND_TEXT => MetaValue::Text(
            std::str::from_utf8(value).map_err(|_| MetaError::Malformed("text is not UTF-8"))?,
        ),
        KIND_BYTES => MetaValue::Bytes(value),
        _ => return Err(MetaError::Malformed("unknown value kind")),
    };
    Ok((key, value, rest))
}

/// A key's bit in [`Meta`]'s filter: from its length and its first and last bytes, which
/// tell apart the keys a section carries in practice (`auth`, `tenant`, `traceparent`, the
/// framework's), without hashing.
fn key_bit(key: &[u8]) -> u64 {
    let (first, last) = match key {
        [] => (0, 0),
        [first, .., last] => (*first, *last),
        [only] => (*only, *only),
    };
    let mixed = (key.len() as u32)
        .wrapping_mul(31)
        .wrapping_add(u32::from(first).wrapping_mul(7))
        .wrapping_add(u32::from(last));
    1 << (mixed & 63)
}

/// Checks the first entry of `raw` (its framing, its key and a text value as UTF-8); its key
/// and what follows. Short ASCII text, the usual case, is checked a word at a time.
fn check_entry(raw: &[u8]) -> Result<(&[u8], &[u8]), MetaError> {
    let ((key, kind, value), rest) = split_raw(raw).ok_or_else(|| malformed(raw))?;
    let text = |bytes: &[u8]| bytes.is_ascii() || std::str::from_utf8(bytes).is_ok();
    if !text(key) {
        return Err(MetaError::Malformed("key is not UTF-8"));
    }
    match kind {
        KIND_TEXT if !text(value) => Err(MetaError::Malformed("text is not UTF-8")),
        KIND_TEXT | KIND_BYTES => Ok((key, rest)),
        _ => Err(MetaError::Malformed("unknown value kind")),
    }
}

/// Why `raw`'s first entry does not frame: [`split_entry`]'s reason.
fn malformed(raw: &[u8]) -> MetaError {
    match split_entry(raw) {
        Err(e) => e,
        Ok(_) => MetaError::Malformed("truncated entry"),
    }
}

/// Whether a key (as bytes) is the framework's.
fn is_reserved(key: &[u8]) -> bool {
    key.first() == Some(&(RESERVED_PREFIX as u8))
}

/// The entries of a checked section as bytes: key, value kind, value.
struct RawEntries<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for RawEntries<'a> {
    type Item = RawEntry<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        match split_raw(self.rest) {
            Some((entry, rest)) => {
                self.rest = rest;
                Some(entry)
            }
            // Not after `parse`; a section built unchecked stops at its first bad entry.
            None => {
                self.rest = &[];
                None
            }
        }
    }
}

/// One entry as bytes: key, value kind, value.
type RawEntry<'a> = (&'a [u8], u8, &'a [u8]);

/// Splits the first entry off `raw` as bytes, and what follows; `None` at the end or at a
/// malformed entry.
fn split_raw(raw: &[u8]) -> Option<(RawEntry<'_>, &[u8])> {
    let (&key_len, rest) = raw.split_first()?;
    let key_len = usize::from(key_len);
    if key_len == 0 || rest.len() < key_len + 5 {
        return None;
    }
    let (key, rest) = rest.split_at(key_len);
    let value_len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
    let (kind, rest) = (rest[0], &rest[5..]);
    if rest.len() < value_len {
        return None;
    }
    let (value, rest) = rest.split_at(value_len);
    Some(((key, kind, value), rest))
}

/// The entries of a checked section.
struct Entries<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, MetaValue<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match split_entry(self.rest) {
            Ok((key, value, rest)) => {
                self.rest = rest;
                Some((key, value))
            }
            // Not after `parse`; a section built unchecked stops at its first bad entry.
            Err(_) => {
                self.rest = &[];
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_in_place_leaves_clones_and_received_sections_as_they_were() {
        let mut meta = Meta::new();
        meta.insert("auth", "t0k3n").unwrap();
        let before = meta.clone();
        // Shared with `before` now: this set copies.
        meta.insert("tenant", "acme").unwrap();
        assert_eq!(before.get_str("tenant"), None);
        assert_eq!(before.get_str("auth"), Some("t0k3n"));
        // Unique again: these append (or replace) in place.
        meta.insert("auth", "other").unwrap();
        meta.insert_bytes("blob", &[0, 1, 2]).unwrap();
        let entries: Vec<_> = meta.iter().collect();
        assert_eq!(
            entries,
            [
                ("tenant", MetaValue::Text("acme")),
                ("auth", MetaValue::Text("other")),
                ("blob", MetaValue::Bytes(&[0, 1, 2])),
            ]
        );
        // A section parsed from a message is never written through.
        let wire = meta.as_bytes().clone();
        let mut received = Meta::parse(wire.clone(), &MetaLimits::default()).unwrap();
        received.insert("more", "x").unwrap();
        assert_eq!(meta.as_bytes(), &wire);
        assert_eq!(received.get_str("more"), Some("x"));
        assert_eq!(received.get_str("tenant"), Some("acme"));
    }

    fn limits() -> MetaLimits {
        MetaLimits::default()
    }

    #[test]
    fn lookups_by_key_bytes_agree_with_the_checked_entries() {
        let mut meta = Meta::new();
        meta.insert("auth", "t0k3n").unwrap();
        meta.insert_bytes("blob", &[0xff, 0xfe]).unwrap();
        meta.set(":budget-like", MetaValue::Bytes(&[1, 2, 3]));
        meta.insert("tenant", "acme").unwrap();
        let parsed = Meta::parse(meta.as_bytes().clone(), &limits()).unwrap();
        // Every entry the checked walk sees, the lookup finds with the same value.
        for (key, value) in parsed.all() {
            assert_eq!(parsed.get(key), Some(value), "{key}");
        }
        assert_eq!(parsed.get("nope"), None);
        assert_eq!(parsed.get("aut"), None, "a prefix of a key is not the key");
        // The size check counts user entries only, each as it is encoded.
        let user: usize = parsed.iter().map(|(k, v)| entry_len(k, v)).sum();
        let exact = MetaLimits {
            max_entries: 3,
            max_bytes: user,
        };
        assert_eq!(parsed.check(&exact), Ok(()));
        let tighter = MetaLimits {
            max_bytes: user - 1,
            ..exact
        };
        assert!(parsed.check(&tighter).is_err());
        let fewer = MetaLimits {
            max_entries: 2,
            ..exact
        };
        assert!(parsed.check(&fewer).is_err());
        // Passed on without the framework's entry, the user's in their order.
        let passed = parsed.user_only();
        let keys: Vec<&str> = passed.all().map(|(k, _)| k).collect();
        assert_eq!(keys, ["auth", "blob", "tenant"]);
        let plain = passed.user_only();
        assert_eq!(plain.as_bytes(), passed.as_bytes());
    }

    #[test]
    fn entries_round_trip_in_order_with_the_last_value_winning() {
        let mut meta = Meta::new();
        meta.insert("auth", "t0k3n").unwrap();
        meta.insert_bytes("blob", &[0, 159, 255]).unwrap();
        meta.insert("auth", "newer").unwrap();
        let mut parsed = Meta::parse(meta.as_bytes().clone(), &limits()).unwrap();
        assert_eq!(parsed.get_str("auth"), Some("newer"));
        assert_eq!(
            parsed.get("blob"),
            Some(MetaValue::Bytes(&[0, 159, 255][..]))
        );
        let keys: Vec<&str> = parsed.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["blob", "auth"]);
        assert!(parsed.remove("blob"));
        assert!(!parsed.clone().remove("nothing"));
        assert_eq!(parsed.len(), 1);
    }

    #[test]
    fn users_cannot_set_reserved_or_bad_keys() {
        let mut meta = Meta::new();
        assert!(matches!(
            meta.insert(":budget", "1"),
            Err(MetaError::InvalidKey(_))
        ));
        assert!(meta.insert("", "x").is_err());
        assert!(meta.insert(&"k".repeat(256), "x").is_err());
        assert!(meta.insert(&"k".repeat(255), "x").is_ok());
    }

    #[test]
    fn the_budget_is_found_first_and_hidden_from_users() {
        let mut raw = BytesMut::new();
        raw.put_slice(&budget_entry(Duration::from_millis(1500)));
        let mut user = Meta::new();
        user.insert("trace", "abc").unwrap();
        raw.put_slice(user.as_bytes());
        let meta = Meta::parse(raw.freeze(), &limits()).unwrap();
        assert_eq!(meta.budget(), Some(Duration::from_millis(1500)));
        assert_eq!(meta.iter().count(), 1, "the budget is the framework's");
        assert_eq!(meta.user_only(), user);
        assert_eq!(Meta::new().budget(), None);
        assert_eq!(user.budget(), None, "not first: not a budget");
    }

    #[test]
    fn a_huge_budget_saturates() {
        let entry = budget_entry(Duration::MAX);
        assert_eq!(
            budget_of(&entry),
            Some(Duration::from_micros(u64::MAX)),
            "read back as the most a budget can say"
        );
    }

    #[test]
    fn malformed_sections_are_refused_not_misread() {
        let cases: &[(&[u8], &str)] = &[
            (&[0], "empty key"),
            (&[3, b'a', b'b'], "truncated entry"),
            (&[1, b'a', 0, 0, 0, 0, 9, 1], "truncated value"),
            (&[1, b'a', 7, 0, 0, 0, 0], "unknown value kind"),
            (&[1, 0xff, 0, 0, 0, 0, 0], "key is not UTF-8"),
            (&[1, b'a', 0, 0, 0, 0, 1, 0xff], "text is not UTF-8"),
        ];
        for (case, reason) in cases {
            assert_eq!(
                Meta::parse(Bytes::copy_from_slice(case), &limits()),
                Err(MetaError::Malformed(reason)),
                "{case:?}"
            );
        }
        // Not ASCII, but UTF-8: taken.
        let mut accented = Meta::new();
        accented.insert("clé", "été").unwrap();
        let parsed = Meta::parse(accented.as_bytes().clone(), &limits()).unwrap();
        assert_eq!(parsed.get_str("clé"), Some("été"));
    }

    #[test]
    fn keys_whose_filter_bits_collide_are_still_told_apart() {
        // Same length, first and last byte: the same bit.
        assert_eq!(key_bit(b"axb"), key_bit(b"ayb"));
        let mut meta = Meta::new();
        meta.insert("axb", "1").unwrap();
        assert_eq!(meta.get_str("ayb"), None);
        assert_eq!(meta.get_str("axb"), Some("1"));
        let parsed = Meta::parse(meta.as_bytes().clone(), &limits()).unwrap();
        assert_eq!(parsed.get_str("ayb"), None);
        assert_eq!(parsed.get_str("axb"), Some("1"));
        assert_eq!(parsed, meta, "parsed and built agree, filter included");
        // A removed key is gone from the filter too, the others stay found.
        meta.insert("tenant", "acme").unwrap();
        assert!(meta.remove("axb"));
        assert_eq!(meta.get_str("axb"), None);
        assert_eq!(meta.get_str("tenant"), Some("acme"));
        assert_eq!(meta.keys, key_bit(b"tenant"));
    }

    #[test]
    fn limits_count_the_users_entries_only() {
        let mut raw = BytesMut::new();
        raw.put_slice(&budget_entry(Duration::from_secs(1)));
        let mut user = Meta::new();
        user.insert("a", "1").unwrap();
        raw.put_slice(user.as_bytes());
        let exact = MetaLimits {
            max_entries: 1,
            max_bytes: user.as_bytes().len(),
        };
        assert!(Meta::parse(raw.freeze(), &exact).is_ok());
        assert!(user.check(&exact).is_ok());
    }

    #[test]
    fn limits_count_entries_and_bytes() {
        let tight = MetaLimits {
            max_entries: 2,
            max_bytes: 64,
        };
        let mut meta = Meta::new();
        meta.insert("a", "1").unwrap();
        meta.insert("b", "2").unwrap();
        assert!(Meta::parse(meta.as_bytes().clone(), &tight).is_ok());
        meta.insert("c", "3").unwrap();
        assert!(matches!(
            Meta::parse(meta.as_bytes().clone(), &tight),
            Err(MetaError::TooLarge { entries: 3, .. })
        ));
        assert!(meta.check(&tight).is_err());
        let mut big = Meta::new();
        big.insert("a", &"x".repeat(100)).unwrap();
        assert!(matches!(
            Meta::parse(big.as_bytes().clone(), &tight),
            Err(MetaError::TooLarge { bytes: 107, .. })
        ));
    }
}
