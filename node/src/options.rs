//! The metadata a node advertises to its peers.
//!
//! Every node carries [`Options`]: a map from a key to a [`Value`]. They travel in the
//! handshake, and other nodes select peers by them with a [`Filter`](crate::filter::Filter).
//!
//! A [`Value`] encodes as the natural value of its format (`true`, `5`, `2.5`, `"x"`,
//! `[..]`, `{..}`, `null`), in MessagePack as in JSON, so options read the same on the
//! JavaScript side. Options may nest: a [`Value::Map`] holds more options, which a filter
//! reaches with a dotted key (`"region.zone"`).
//!
//! ```
//! use node::options::{options, Value};
//!
//! let opts = options([
//!     ("role", Value::from("worker")),
//!     ("load", Value::from(3)),
//!     ("tags", Value::from(vec!["gpu", "eu"])),
//! ]);
//! assert_eq!(opts["load"].as_f64(), Some(3.0));
//! ```

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

/// The options a node advertises, by key. Sorted, so they encode the same way every time.
///
/// A map (it dereferences to a `BTreeMap<String, Value>`: `get`, `insert`, `iter`,
/// `opts["key"]`) that shows as a person would type it (`{role: worker, load: 3}`), the way
/// [`Value`] shows.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Options(BTreeMap<String, Value>);

/// As the map it wraps: `{"role": String("worker")}`.
impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Options {
    /// No options.
    pub fn new() -> Options {
        Options::default()
    }

    /// The map itself.
    pub fn into_inner(self) -> BTreeMap<String, Value> {
        self.0
    }
}

impl std::ops::Deref for Options {
    type Target = BTreeMap<String, Value>;

    fn deref(&self) -> &BTreeMap<String, Value> {
        &self.0
    }
}

impl std::ops::DerefMut for Options {
    fn deref_mut(&mut self) -> &mut BTreeMap<String, Value> {
        &mut self.0
    }
}

impl From<BTreeMap<String, Value>> for Options {
    fn from(map: BTreeMap<String, Value>) -> Options {
        Options(map)
    }
}

/// `Options::from([("role", "worker")])`, as for a `BTreeMap`.
impl<K: Into<String>, V: Into<Value>, const N: usize> From<[(K, V); N]> for Options {
    fn from(pairs: [(K, V); N]) -> Options {
        pairs.into_iter().collect()
    }
}

impl From<Options> for BTreeMap<String, Value> {
    fn from(options: Options) -> BTreeMap<String, Value> {
        options.0
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Options {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Options {
        Options(
            iter.into_iter()
                .map(|(key, value)| (key.into(), value.into()))
                .collect(),
        )
    }
}

impl<K: Into<String>, V: Into<Value>> Extend<(K, V)> for Options {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        self.0.extend(
            iter.into_iter()
                .map(|(key, value)| (key.into(), value.into())),
        );
    }
}

impl IntoIterator for Options {
    type Item = (String, Value);
    type IntoIter = std::collections::btree_map::IntoIter<String, Value>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Options {
    type Item = (&'a String, &'a Value);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Value>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl std::ops::Index<&str> for Options {
    type Output = Value;

    /// The value under `key`; panics when there is none, as a `BTreeMap` does.
    fn index(&self, key: &str) -> &Value {
        &self.0[key]
    }
}

/// Shows the options as a person would type them: `{load: 3, role: worker}` (sorted by
/// key, each value as [`Value`] shows it), `{}` when there are none.
impl fmt::Display for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_map(f, &self.0)
    }
}

/// Writes `{k: v, ..}`: options and nested maps show the same way.
fn write_map(f: &mut fmt::Formatter<'_>, map: &BTreeMap<String, Value>) -> fmt::Result {
    f.write_str("{")?;
    for (i, (key, item)) in map.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{key}: {item}")?;
    }
    f.write_str("}")
}

/// Builds [`Options`] from `(key, value)` pairs; a later pair replaces an earlier one.
///
/// Values of different types need a [`Value::from`] each, since an array holds one type:
///
/// ```
/// use node::options::{options, Value};
///
/// let same_type = options([("role", "worker"), ("zone", "eu-1")]);
/// let mixed = options([("role", Value::from("worker")), ("load", Value::from(0.5))]);
/// assert_eq!(same_type.len(), 2);
/// assert_eq!(mixed["load"], Value::Float(0.5));
/// ```
pub fn options<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Options
where
    K: Into<String>,
    V: Into<Value>,
{
    pairs
        .into_iter()
        .map(|(key, value)| (key.into(), value.into()))
        .collect()
}

/// One option value.
///
/// Equality (`==`) is structural: `Int(5) != Float(5.0)`. Filters compare numbers by their
/// value instead; see [`crate::filter`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// `true` or `false`.
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A UTF-8 string.
    String(String),
    /// A list of values, possibly of mixed types.
    List(Vec<Value>),
    /// Nested options: key to value, sorted (a JavaScript object). Filters reach inside
    /// with dotted keys: `"region.zone"` selects `zone` in the map under `region`.
    Map(Options),
    /// No value (JavaScript's `null`). A filter treats a key holding `null` as missing,
    /// as the JavaScript zeronode does.
    Null,
}

impl Value {
    /// The boolean, if this is a `Bool`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The integer, if this is an `Int` (a `Float` is not converted).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The number, if this is an `Int` or a `Float`.
    ///
    /// ```
    /// use node::options::Value;
    /// assert_eq!(Value::from(5).as_f64(), Some(5.0));
    /// assert_eq!(Value::from("5").as_f64(), None);
    /// ```
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            // Lossy above 2^53 by nature; filters compare Int and Float exactly instead.
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// The string, if this is a `String`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is a `List`.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) => Some(items),
            _ => None,
        }
    }

    /// The nested options, if this is a `Map`.
    ///
    /// ```
    /// use node::options::{options, Value};
    /// let region = Value::Map(options([("zone", "a")]));
    /// assert_eq!(region.as_map().and_then(|m| m.get("zone")), Some(&Value::from("a")));
    /// ```
    pub fn as_map(&self) -> Option<&Options> {
        match self {
            Value::Map(map) => Some(map),
            _ => None,
        }
    }

    /// Whether this is `Null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Whether this is an `Int` or a `Float`.
    pub fn is_number(&self) -> bool {
        matches!(self, Value::Int(_) | Value::Float(_))
    }

    /// The name of this value's type, for messages: `bool`, `int`, `float`, `string`, `list`,
    /// `map`, `null`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::String(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) => "map",
            Value::Null => "null",
        }
    }
}

/// Shows the value as a person would type it on a command line: strings without quotes,
/// floats always with a decimal point (`5.0`), lists as `[a, b]`, maps as `{k: v}`, null as
/// `null`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            // `{:?}` keeps the `.0`, so a Float never reads as an Int.
            Value::Float(x) => write!(f, "{x:?}"),
            Value::String(s) => f.write_str(s),
            Value::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Value::Map(map) => write_map(f, &map.0),
            Value::Null => f.write_str("null"),
        }
    }
}

macro_rules! from_lossless {
    ($variant:ident as $target:ty: $($source:ty),+) => {$(
        impl From<$source> for Value {
            fn from(v: $source) -> Self {
                Value::$variant(<$target>::from(v))
            }
        }
    )+};
}

from_lossless!(Bool as bool: bool);
from_lossless!(Int as i64: i8, i16, i32, i64, u8, u16, u32);
// f32 to f64 is exact: every f32 (infinities and NaN included) is an f64.
from_lossless!(Float as f64: f32, f64);

macro_rules! from_unsigned {
    ($($source:ty),+) => {$(
        /// An `Int` when it fits in an `i64`; above `i64::MAX` a `Float`, rounded to the
        /// nearest `f64` (exact up to 2^53, as JavaScript's numbers): the same rule a
        /// value decoded from a peer follows.
        impl From<$source> for Value {
            fn from(v: $source) -> Self {
                i64::try_from(v).map_or(Value::Float(v as f64), Value::Int)
            }
        }
    )+};
}

from_unsigned!(u64, usize);

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}

impl From<BTreeMap<String, Value>> for Value {
    fn from(v: BTreeMap<String, Value>) -> Self {
        Value::Map(Options(v))
    }
}

/// Nested options: a `Map`.
impl From<Options> for Value {
    fn from(v: Options) -> Self {
        Value::Map(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    /// `None` is `Null`.
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::List(v.into_iter().map(Into::into).collect())
    }
}

/// Collects into a `List`: `["a", "b"].into_iter().collect::<Value>()`.
impl<T: Into<Value>> FromIterator<T> for Value {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Value::List(iter.into_iter().map(Into::into).collect())
    }
}

// A hand-written visitor rather than `#[serde(untagged)]`: it reads the value directly
// (untagged buffers it first) and its error names what a Value may be.
impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

/// How deep lists and maps may nest in a decoded [`Value`]. Options come from peers: a
/// value nested a thousand levels deep would overflow the decoder's stack (and abort the
/// process) before MessagePack's own limit of 1,024 stops it, so decoding stops here with
/// an error instead. Options that people write nest a few levels.
pub const MAX_DEPTH: usize = 64;

thread_local! {
    /// How many lists and maps the decoder on this thread is inside. Decoding is
    /// synchronous, so a per-thread count is the depth of the value being decoded.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// One level of nesting entered by the decoder; leaving it (on success, error or unwind)
/// counts it off.
struct Nested;

impl Nested {
    fn enter<E: de::Error>() -> Result<Nested, E> {
        let depth = DEPTH.with(|d| {
            let depth = d.get() + 1;
            d.set(depth);
            depth
        });
        // Counted before the check, so the `Drop` below balances it either way.
        let level = Nested;
        if depth > MAX_DEPTH {
            return Err(E::custom(format_args!(
                "option values nest deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(level)
    }
}

impl Drop for Nested {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a bool, a number, a string, a list, a map or null")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        // Above i64::MAX only a float can hold it, as in JavaScript, whose numbers are doubles.
        Ok(i64::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let _level = Nested::enter()?;
        // The size hint comes from the peer: cap it so a lying length cannot reserve memory.
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let _level = Nested::enter()?;
        let mut map = BTreeMap::new();
        while let Some((key, value)) = access.next_entry::<String, Value>()? {
            // A repeated key: the last one wins, as in a JavaScript object literal.
            map.insert(key, value);
        }
        Ok(Value::Map(Options(map)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn from_impls_pick_the_natural_variant() {
        assert_eq!(Value::from(true), Value::Bool(true));
        assert_eq!(Value::from(5i32), Value::Int(5));
        assert_eq!(Value::from(5i64), Value::Int(5));
        assert_eq!(Value::from(5u32), Value::Int(5));
        assert_eq!(Value::from(2.5f64), Value::Float(2.5));
        assert_eq!(Value::from("x"), Value::String("x".into()));
        assert_eq!(Value::from(String::from("x")), Value::String("x".into()));
        assert_eq!(
            Value::from(vec![1, 2]),
            Value::List(vec![Value::Int(1), Value::Int(2)])
        );
        assert_eq!(
            ["a", "b"].into_iter().collect::<Value>(),
            Value::from(vec!["a", "b"])
        );
    }

    #[test]
    fn unsigned_and_f32_values_and_what_happens_past_the_range() {
        assert_eq!(Value::from(3usize), Value::Int(3));
        assert_eq!(Value::from(7u64), Value::Int(7));
        assert_eq!(Value::from(i64::MAX as u64), Value::Int(i64::MAX));
        // Past i64::MAX: a Float, the nearest f64 (2^63 here), as a peer's u64 decodes.
        assert_eq!(
            Value::from(i64::MAX as u64 + 1),
            Value::Float(9.223_372_036_854_776e18)
        );
        assert_eq!(Value::from(u64::MAX), Value::Float(u64::MAX as f64));
        assert_eq!(Value::from(usize::MAX).as_f64(), Some(usize::MAX as f64));
        let decoded: Value = rmp_serde::from_slice(&rmp_serde::to_vec(&u64::MAX).unwrap()).unwrap();
        assert_eq!(
            Value::from(u64::MAX),
            decoded,
            "the same rule as a decoded value"
        );
        // f32 widens exactly; its extremes stay what they are.
        assert_eq!(Value::from(0.5f32), Value::Float(0.5));
        assert_eq!(Value::from(f32::MAX), Value::Float(f64::from(f32::MAX)));
        assert_eq!(Value::from(f32::INFINITY), Value::Float(f64::INFINITY));
        assert!(matches!(Value::from(f32::NAN), Value::Float(x) if x.is_nan()));
    }

    #[test]
    fn options_show_as_typed_and_work_as_a_map() {
        let mut opts = options([("role", Value::from("worker")), ("load", Value::from(3))]);
        assert_eq!(opts.to_string(), "{load: 3, role: worker}");
        opts.insert(
            "region".into(),
            Value::from(Options::from([("zone", "eu-1")])),
        );
        assert_eq!(
            opts.to_string(),
            "{load: 3, region: {zone: eu-1}, role: worker}"
        );
        assert_eq!(Options::new().to_string(), "{}");
        assert_eq!(opts["load"], Value::Int(3));
        assert_eq!(opts.get("role").and_then(Value::as_str), Some("worker"));
        let keys: Vec<&String> = (&opts).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["load", "region", "role"]);
        // Same wire shape as the map it wraps.
        let map: BTreeMap<String, Value> = opts.clone().into_inner();
        assert_eq!(
            rmp_serde::to_vec(&opts).unwrap(),
            rmp_serde::to_vec(&map).unwrap()
        );
    }

    #[test]
    fn accessors() {
        assert_eq!(Value::from(5).as_f64(), Some(5.0));
        assert_eq!(Value::from(2.5).as_f64(), Some(2.5));
        assert_eq!(Value::from("5").as_f64(), None);
        assert_eq!(Value::from(5).as_i64(), Some(5));
        assert_eq!(Value::from(5.0).as_i64(), None);
        assert_eq!(Value::from("x").as_str(), Some("x"));
        assert_eq!(Value::from(1).as_str(), None);
        assert_eq!(Value::from(false).as_bool(), Some(false));
        assert_eq!(Value::from(vec![1]).as_list(), Some(&[Value::Int(1)][..]));
        assert!(Value::from(1).is_number() && !Value::from(true).is_number());
        assert_eq!(Value::from(vec![1]).type_name(), "list");
    }

    #[test]
    fn display() {
        assert_eq!(Value::from(true).to_string(), "true");
        assert_eq!(Value::from(-3).to_string(), "-3");
        assert_eq!(Value::from(5.0).to_string(), "5.0");
        assert_eq!(Value::from(2.5).to_string(), "2.5");
        assert_eq!(Value::from("eu-1").to_string(), "eu-1");
        let list = Value::List(vec![Value::from("a"), Value::from(1), Value::from(vec![2])]);
        assert_eq!(list.to_string(), "[a, 1, [2]]");
    }

    #[test]
    fn options_builder_collects_pairs() {
        let opts = options([("role", Value::from("worker")), ("load", Value::from(3))]);
        assert_eq!(opts.len(), 2);
        assert_eq!(opts["role"], Value::from("worker"));
        let last_wins = options([("k", 1), ("k", 2)]);
        assert_eq!(last_wins["k"], Value::Int(2));
    }

    #[test]
    fn json_is_the_natural_value() {
        let opts = options([
            ("b", Value::from(true)),
            ("i", Value::from(5)),
            ("f", Value::from(2.5)),
            ("s", Value::from("x")),
            ("l", Value::from(vec![Value::from(1), Value::from("y")])),
        ]);
        let json = serde_json::to_string(&opts).unwrap();
        assert_eq!(json, r#"{"b":true,"f":2.5,"i":5,"l":[1,"y"],"s":"x"}"#);
        let back: Options = serde_json::from_str(&json).unwrap();
        assert_eq!(back, opts);
    }

    #[test]
    fn messagepack_round_trip_and_shape() {
        let opts = options([
            ("b", Value::from(false)),
            ("i", Value::from(-7)),
            ("f", Value::from(5.0)),
            ("l", Value::from(vec!["a", "b"])),
        ]);
        let bytes = rmp_serde::to_vec(&opts).unwrap();
        let back: Options = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, opts);
        // A bare value is the bare MessagePack value: 5 is the positive fixint 0x05.
        assert_eq!(rmp_serde::to_vec(&Value::Int(5)).unwrap(), vec![0x05]);
        assert_eq!(
            rmp_serde::to_vec(&Value::from("x")).unwrap(),
            vec![0xa1, b'x']
        );
    }

    #[test]
    fn huge_unsigned_becomes_float() {
        let v: Value = serde_json::from_str("18446744073709551615").unwrap();
        assert_eq!(v, Value::Float(u64::MAX as f64));
        let v: Value = serde_json::from_str("9223372036854775807").unwrap();
        assert_eq!(v, Value::Int(i64::MAX));
    }

    #[test]
    fn null_and_maps_round_trip_in_json_and_messagepack() {
        let opts = options([
            (
                "region",
                Value::Map(options([
                    ("zone", Value::from("a")),
                    ("rack", Value::from(3)),
                    ("spare", Value::Null),
                ])),
            ),
            ("gone", Value::Null),
            ("nested", Value::from(vec![Value::Map(options([("k", 1)]))])),
        ]);
        let json = serde_json::to_string(&opts).unwrap();
        assert_eq!(
            json,
            r#"{"gone":null,"nested":[{"k":1}],"region":{"rack":3,"spare":null,"zone":"a"}}"#
        );
        assert_eq!(serde_json::from_str::<Options>(&json).unwrap(), opts);
        let bytes = rmp_serde::to_vec(&opts).unwrap();
        assert_eq!(rmp_serde::from_slice::<Options>(&bytes).unwrap(), opts);
        // Null is MessagePack's nil (0xc0); a map is a fixmap.
        assert_eq!(rmp_serde::to_vec(&Value::Null).unwrap(), vec![0xc0]);
        assert_eq!(
            rmp_serde::to_vec(&Value::Map(options([("a", 1)]))).unwrap(),
            vec![0x81, 0xa1, b'a', 0x01]
        );
    }

    #[test]
    fn a_map_with_a_non_string_key_is_an_error_not_a_panic() {
        // {1: 2} in MessagePack: option keys are strings, as in JavaScript objects.
        assert!(rmp_serde::from_slice::<Value>(&[0x81, 0x01, 0x02]).is_err());
        // Truncated input: an error too.
        assert!(rmp_serde::from_slice::<Value>(&[0x82, 0xa1, b'a']).is_err());
    }

    #[test]
    fn deep_nesting_from_a_peer_is_an_error_not_a_stack_overflow() {
        // 100,000 nested one-element maps {"a": {"a": ...}} then nil, and as many lists.
        let maps = |depth: usize| {
            let mut bytes = [0x81, 0xa1, b'a'].repeat(depth);
            bytes.push(0xc0);
            bytes
        };
        let lists = |depth: usize| {
            let mut bytes = vec![0x91; depth];
            bytes.push(0xc0);
            bytes
        };
        for bytes in [maps(100_000), lists(100_000), maps(MAX_DEPTH + 1)] {
            let err = rmp_serde::from_slice::<Value>(&bytes).unwrap_err();
            assert!(err.to_string().contains("nest deeper than 64"), "{err}");
        }
        // Within the limit it decodes, and the count starts over for the next value.
        assert!(rmp_serde::from_slice::<Value>(&maps(MAX_DEPTH)).is_ok());
        assert!(rmp_serde::from_slice::<Value>(&lists(MAX_DEPTH)).is_ok());
        // JSON too, inside options.
        let json = format!("{{\"k\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        assert!(serde_json::from_str::<Options>(&json).is_err());
    }

    #[test]
    fn map_null_accessors_and_display() {
        let map = Value::Map(options([("zone", Value::from("a")), ("n", Value::Null)]));
        assert_eq!(map.type_name(), "map");
        assert_eq!(Value::Null.type_name(), "null");
        assert!(Value::Null.is_null() && !map.is_null());
        assert_eq!(map.as_map().unwrap().len(), 2);
        assert_eq!(map.to_string(), "{n: null, zone: a}");
        assert_eq!(Value::from(None::<i32>), Value::Null);
        assert_eq!(Value::from(Some(3)), Value::Int(3));
    }
}
