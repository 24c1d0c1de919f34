//! Selecting peers by the [`Options`] they advertise.
//!
//! A [`Filter`] is a list of conditions, each on one key, plus optional Rust predicates. A
//! peer matches when **every** condition and every predicate holds (several conditions on
//! one key, and conditions on several keys, are all ANDed). A filter with no condition
//! ([`Filter::any`]) matches every peer.
//!
//! | operator         | builder                          | holds when the peer's value...                       |
//! |------------------|----------------------------------|------------------------------------------------------|
//! | exact / `$eq`    | [`eq`](Filter::eq)               | equals the operand                                   |
//! | `$ne`            | [`ne`](Filter::ne)               | does not equal the operand (a missing key fails)     |
//! | `$aeq`           | [`aeq`](Filter::aeq)             | equals the operand by JavaScript's loose `==` (below) |
//! | `$gt` `$gte`     | [`gt`](Filter::gt) [`gte`](Filter::gte) | is greater (or equal)                         |
//! | `$lt` `$lte`     | [`lt`](Filter::lt) [`lte`](Filter::lte) | is less (or equal)                            |
//! | `$between`       | [`between`](Filter::between)     | lies in `[low, high]`, both ends included            |
//! | `$in`            | [`is_in`](Filter::is_in)         | equals one of the operands                           |
//! | `$nin`           | [`not_in`](Filter::not_in)       | equals none of the operands (a missing key fails)    |
//! | `$contains`      | [`contains`](Filter::contains)   | is a list holding the operand, or a string holding it as a substring |
//! | `$containsAny`   | [`contains_any`](Filter::contains_any) | is a list (or string) containing at least one operand |
//! | `$containsNone`  | [`contains_none`](Filter::contains_none) | is a list (or string) containing no operand (a missing key fails) |
//! | `$regex` / regex | [`regex`](Filter::regex) [`matching`](Filter::matching) | is a string the regex finds a match in (unanchored) |
//!
//! The rules behind the table:
//! - **Missing key, or `null`**: every operator fails, `$ne`, `$nin` and `$containsNone`
//!   included. This is the JavaScript zeronode's rule: its `optionsPredicateBuilder`
//!   (`src/utils.js` in github.com/sfast/zeronode) reads `nodeOptions[key]` and, when that is
//!   not truthy, counts the condition as not satisfied before looking at the operator; its
//!   test suite asserts "operator on missing nodeOption key ... should fail". A key holding
//!   `null` is absent to it the same way. (Its truthiness test also fails on `0`, `false`
//!   and `""`; we do not copy that: a value that is there is compared, so `eq("load", 0)`
//!   selects a peer whose load is 0.)
//! - **Nested options**: a key with dots (`"region.zone"`) is the key itself if the peer has
//!   it (the JavaScript lookup), and otherwise a path through [`Value::Map`]s:
//!   `"region.zone"` reaches `zone` inside the map under `region`. A path that stops at a
//!   value that is not a map is a missing key.
//! - **Equality** (`$eq $ne $in $nin`, list elements in `$contains*`) compares values:
//!   `Int(5)` equals `Float(5.0)`, lists are equal element by element and maps key by key,
//!   values of different types are never equal (so `$ne` holds between them).
//! - **`$aeq`** is JavaScript's abstract (loose) equality, `operand == value`, as the
//!   JavaScript zeronode's `$aeq` case is written (`value != nodeOptionValue` marks it
//!   unsatisfied); the name comes from LokiJS, whose `$aeq` is the same "abstract equal".
//!   It is not an array equality: a number equals a string that reads as it (`5` and `"5"`,
//!   `" 5 "`, `"0x5"`; `""` is 0), a bool is first taken as 1 or 0 (`true == 1`,
//!   `true == "1"`), a list or map against a bool, number or string is first turned into
//!   its JavaScript string (`[1, 2]` is `"1,2"`, `[5]` is `"5"`, a map is
//!   `"[object Object]"`), and two lists or maps are never equal (JavaScript compares
//!   objects by identity, and no two values off the wire are the same object).
//! - **Order** (`$gt $gte $lt $lte $between`) compares two numbers by value (Int against
//!   Float exactly, without rounding) and two strings lexicographically. Any other pair
//!   (a bool, a list, a map, a number against a string, NaN) fails.
//! - **Containment** on a value that is neither a list nor a string fails, `$containsNone`
//!   included.
//!
//! Where we differ from the JavaScript zeronode on purpose: `$between` includes both ends
//! (JavaScript's excludes them: `value[0] >= x || value[1] <= x` fails it); `$eq` and exact
//! values compare lists and maps by content (JavaScript's `===` compares them by identity,
//! so never holds for them); and the falsy values `0`, `false`, `""` are values (above).
//!
//! Regexes are compiled once, when the filter is built; a bad one is
//! [`Error::InvalidFilter`].
//!
//! # Wire form
//!
//! A filter without a predicate travels as a [`FilterSpec`], shaped as in the JavaScript
//! zeronode: a map from key to a plain value (exact match) or a map of operators.
//!
//! ```
//! use node::filter::Filter;
//! use node::options::{options, Value};
//!
//! let filter = Filter::new()
//!     .eq("role", "worker")
//!     .gt("load", 5)
//!     .lte("load", 10)
//!     .regex("region", "^eu-")?;
//! let json = filter.to_json()?;
//! assert_eq!(
//!     json.to_string(),
//!     r#"{"load":{"$gt":5,"$lte":10},"region":{"$regex":"^eu-"},"role":"worker"}"#
//! );
//!
//! let peer = options([
//!     ("role", Value::from("worker")),
//!     ("load", Value::from(7.5)),
//!     ("region", Value::from("eu-west")),
//! ]);
//! assert!(Filter::from_json(&json)?.matches(&peer));
//! # Ok::<(), node::Error>(())
//! ```

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use regex::Regex;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::options::{Options, Value};
use crate::Error;

/// Selects peers whose [`Options`] match; see the [module docs](self) for the semantics.
///
/// Built with chained calls, each adding one condition:
///
/// ```
/// use node::filter::Filter;
/// use node::options::{options, Value};
///
/// let filter = Filter::new()
///     .eq("role", "worker")
///     .between("load", 0, 10)
///     .contains_any("tags", ["gpu", "tpu"]);
/// let peer = options([
///     ("role", Value::from("worker")),
///     ("load", Value::from(3)),
///     ("tags", Value::from(vec!["gpu", "ssd"])),
/// ]);
/// assert!(filter.matches(&peer));
/// ```
#[derive(Clone, Default)]
pub struct Filter {
    /// Conditions on keys, all ANDed, in the order they were added.
    conditions: Vec<Condition>,
    /// Rust closures, ANDed after the conditions. Any one of them keeps the filter local.
    predicates: Vec<Predicate>,
    /// The canonical form, computed once and shared by clones (a caller that clones one
    /// filter into every call to any match pays for it once): what the peer selection caches
    /// its matches under. Reset by every builder call, since it changes the filter.
    selection_key: Arc<OnceLock<Option<SelectionKey>>>,
}

// By hand, to leave out the cached selection key (bytes no reader needs).
impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("conditions", &self.conditions)
            .field("predicates", &self.predicates)
            .finish()
    }
}

/// A filter's canonical form as bytes: the MessagePack of its [`FilterSpec`], in which
/// keys and operators are sorted, so two filters with equal keys select the same peers.
pub(crate) type SelectionKey = Arc<[u8]>;

/// One operator applied to one key.
#[derive(Clone, Debug)]
struct Condition {
    key: String,
    /// The key split at its dots, when it has any: the path tried when the peer has no
    /// option under the whole key.
    path: Option<Vec<String>>,
    op: Op,
}

impl Condition {
    /// The peer's value this condition looks at; `None` when missing.
    fn lookup<'a>(&self, options: &'a Options) -> Option<&'a Value> {
        let found = match (options.get(&self.key), &self.path) {
            (Some(value), _) => Some(value),
            (None, None) => None,
            (None, Some(path)) => {
                let (first, rest) = path.split_first()?;
                rest.iter()
                    .try_fold(options.get(first)?, |value, part| value.as_map()?.get(part))
            }
        };
        // `null` is no value, as in JavaScript.
        found.filter(|value| !value.is_null())
    }
}

/// An operator with its operand, already checked and compiled.
#[derive(Clone, Debug)]
enum Op {
    Eq(Value),
    Ne(Value),
    Aeq(Value),
    Gt(Value),
    Gte(Value),
    Lt(Value),
    Lte(Value),
    Between(Value, Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Contains(Value),
    ContainsAny(Vec<Value>),
    ContainsNone(Vec<Value>),
    Regex(Regex),
}

/// The operator names the wire form accepts, for the "unknown operator" message.
const OPERATORS: &str = "$eq $ne $aeq $gt $gte $lt $lte $between $in $nin $contains \
                         $containsAny $containsNone $regex";

/// A user's closure over a peer's options.
#[derive(Clone)]
struct Predicate(Arc<dyn Fn(&Options) -> bool + Send + Sync>);

impl fmt::Debug for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<predicate>")
    }
}

impl Filter {
    /// A filter with no condition yet: it matches every peer until conditions are added.
    pub fn new() -> Self {
        Self::default()
    }

    /// A filter that matches every peer; the same as [`Filter::new`], named for the reader.
    pub fn any() -> Self {
        Self::default()
    }

    /// A filter holding an arbitrary Rust closure. More conditions can be chained after it.
    ///
    /// Such a filter runs only where it was built: [`to_spec`](Filter::to_spec) refuses it.
    ///
    /// ```
    /// use node::filter::Filter;
    /// use node::options::options;
    ///
    /// let even_shard = Filter::predicate(|opts| {
    ///     opts.get("shard").and_then(|v| v.as_i64()).is_some_and(|s| s % 2 == 0)
    /// });
    /// assert!(even_shard.matches(&options([("shard", 4)])));
    /// ```
    pub fn predicate<F>(f: F) -> Self
    where
        F: Fn(&Options) -> bool + Send + Sync + 'static,
    {
        Self::new().with_predicate(f)
    }

    /// Adds a Rust closure that must also hold (see [`Filter::predicate`]).
    pub fn with_predicate<F>(mut self, f: F) -> Self
    where
        F: Fn(&Options) -> bool + Send + Sync + 'static,
    {
        self.predicates.push(Predicate(Arc::new(f)));
        self.selection_key = Arc::default();
        self
    }

    /// The value under `key` equals `value` (the JavaScript exact match, or `$eq`).
    #[doc(alias = "$eq")]
    pub fn eq(self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.with(key, Op::Eq(value.into()))
    }

    /// The value under `key` differs from `value` (`$ne`). A missing key fails, as in the
    /// JavaScript zeronode.
    #[doc(alias = "$ne")]
    pub fn ne(self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.with(key, Op::Ne(value.into()))
    }

    /// The value under `key` equals `value` by JavaScript's loose `==` (`$aeq`): `5`
    /// equals `"5"`, `true` equals `1`, `[1, 2]` equals `"1,2"`; see the
    /// [module docs](self).
    ///
    /// ```
    /// use node::filter::Filter;
    /// use node::options::options;
    ///
    /// let five = Filter::new().aeq("load", "5");
    /// assert!(five.matches(&options([("load", 5)])));
    /// assert!(five.matches(&options([("load", "5")])));
    /// assert!(!five.matches(&options([("load", 6)])));
    /// ```
    #[doc(alias = "$aeq")]
    pub fn aeq(self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.with(key, Op::Aeq(value.into()))
    }

    /// The value under `key` is greater than `value` (`$gt`).
    #[doc(alias = "$gt")]
    pub fn gt(self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.with(key, Op::Gt(value.into()))
    }

    /// The value under `key` is greater than or equal to `value` (`$gte`).
    #[doc(alias = "$gte")]
    pub fn gte(self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.with(key, Op::Gte(value.into()))
    }

    /// The value under `key` is less than `value` (`$lt`).
    #[doc(alias = "$lt")]
    pub fn lt(self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.with(key, Op::Lt(value.into()))
    }

    /// The value under `key` is less than or equal to `value` (`$lte`).
    #[doc(alias = "$lte")]
    pub fn lte(self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.with(key, Op::Lte(value.into()))
    }

    /// The value under `key` lies in `[low, high]`, both ends included (`$between`).
    #[doc(alias = "$between")]
    pub fn between(
        self,
        key: impl Into<String>,
        low: impl Into<Value>,
        high: impl Into<Value>,
    ) -> Self {
        self.with(key, Op::Between(low.into(), high.into()))
    }

    /// The value under `key` equals one of `values` (`$in`).
    #[doc(alias = "$in")]
    pub fn is_in<V: Into<Value>>(
        self,
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.with(key, Op::In(collect(values)))
    }

    /// The value under `key` equals none of `values` (`$nin`). A missing key fails, as in
    /// the JavaScript zeronode.
    #[doc(alias = "$nin")]
    pub fn not_in<V: Into<Value>>(
        self,
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.with(key, Op::Nin(collect(values)))
    }

    /// The value under `key` is a list holding `value`, or a string holding it as a
    /// substring (`$contains`).
    #[doc(alias = "$contains")]
    pub fn contains(self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.with(key, Op::Contains(value.into()))
    }

    /// The value under `key` is a list (or string) containing at least one of `values`
    /// (`$containsAny`).
    #[doc(alias = "$containsAny")]
    pub fn contains_any<V: Into<Value>>(
        self,
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.with(key, Op::ContainsAny(collect(values)))
    }

    /// The value under `key` is a list (or string) containing none of `values`
    /// (`$containsNone`). A missing key fails, as in the JavaScript zeronode.
    #[doc(alias = "$containsNone")]
    pub fn contains_none<V: Into<Value>>(
        self,
        key: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.with(key, Op::ContainsNone(collect(values)))
    }

    /// The value under `key` is a string in which `pattern` finds a match (`$regex`).
    ///
    /// The pattern uses the [`regex`] crate's syntax and is compiled here, once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidFilter`] if `pattern` is not a valid regex.
    #[doc(alias = "$regex")]
    pub fn regex(self, key: impl Into<String>, pattern: impl AsRef<str>) -> Result<Self, Error> {
        let key = key.into();
        let regex = compile(&key, pattern.as_ref())?;
        Ok(self.with(key, Op::Regex(regex)))
    }

    /// The value under `key` is a string in which the compiled `regex` finds a match: the
    /// JavaScript form where a `RegExp` is given as the key's exact value.
    ///
    /// It travels as `{"$regex": "<pattern>"}`.
    pub fn matching(self, key: impl Into<String>, regex: Regex) -> Self {
        self.with(key, Op::Regex(regex))
    }

    /// Whether a peer advertising `options` is selected.
    pub fn matches(&self, options: &Options) -> bool {
        self.conditions
            .iter()
            .all(|c| c.lookup(options).is_some_and(|value| c.op.holds(value)))
            && self.predicates.iter().all(|p| (p.0)(options))
    }

    /// Whether this filter has no condition and no predicate, so it matches every peer.
    pub fn is_any(&self) -> bool {
        self.conditions.is_empty() && self.predicates.is_empty()
    }

    /// Whether this filter holds a Rust predicate, which keeps it from travelling.
    pub fn has_predicate(&self) -> bool {
        !self.predicates.is_empty()
    }

    /// The wire form of this filter, for another node to rebuild with
    /// [`from_spec`](Filter::from_spec).
    ///
    /// A key with a single `eq` condition becomes a plain value; any other key becomes a map
    /// of operators.
    ///
    /// # Errors
    ///
    /// - [`Error::PredicateNotSerializable`] if the filter holds a predicate.
    /// - [`Error::InvalidFilter`] if one key has the same operator twice (say two `gt`), which
    ///   a map of operators cannot hold.
    pub fn to_spec(&self) -> Result<FilterSpec, Error> {
        if self.has_predicate() {
            return Err(Error::PredicateNotSerializable);
        }
        let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
        for condition in &self.conditions {
            by_key
                .entry(&condition.key)
                .or_default()
                .push(&condition.op);
        }
        let mut clauses = BTreeMap::new();
        for (key, ops) in by_key {
            let clause = match ops.as_slice() {
                // A map would read back as operators: it travels as `{"$eq": {..}}`.
                [Op::Eq(value)] if !matches!(value, Value::Map(_)) => Clause::Exact(value.clone()),
                _ => {
                    let mut operators = BTreeMap::new();
                    for op in ops {
                        if operators
                            .insert(op.name().to_owned(), op.operand())
                            .is_some()
                        {
                            return Err(invalid(format!(
                                "key `{key}` has `{}` twice; the wire form holds each \
                                 operator once per key",
                                op.name()
                            )));
                        }
                    }
                    Clause::Operators(operators)
                }
            };
            clauses.insert(key.to_owned(), clause);
        }
        Ok(FilterSpec(clauses))
    }

    /// Rebuilds a filter from its wire form, checking every operator and operand and
    /// compiling every regex.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidFilter`], naming the key and what is wrong: an unknown operator, an
    /// empty map of operators, an operand of the wrong shape (`$between` needs
    /// `[low, high]`; `$in $nin $containsAny $containsNone` need a list; `$regex` needs a
    /// string) or a bad regex.
    pub fn from_spec(spec: FilterSpec) -> Result<Self, Error> {
        let mut filter = Self::new();
        for (key, clause) in spec.0 {
            match clause {
                Clause::Exact(value) => filter = filter.with(key, Op::Eq(value)),
                Clause::Operators(operators) => {
                    if operators.is_empty() {
                        return Err(invalid(format!(
                            "key `{key}` has an empty map of operators"
                        )));
                    }
                    for (name, operand) in operators {
                        let op = Op::parse(&key, &name, operand)?;
                        filter = filter.with(key.clone(), op);
                    }
                }
            }
        }
        Ok(filter)
    }

    /// Builds a filter from the JSON of its wire form, e.g.
    /// `{"role": "worker", "load": {"$lt": 5}}`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidFilter`] if the JSON is not a map of key to value or operators (a
    /// `null` or a nested object where a value is expected), or for any reason
    /// [`from_spec`](Filter::from_spec) gives.
    pub fn from_json(json: &serde_json::Value) -> Result<Self, Error> {
        let spec = FilterSpec::deserialize(json).map_err(|e| invalid(e.to_string()))?;
        Self::from_spec(spec)
    }

    /// The JSON of this filter's wire form.
    ///
    /// # Errors
    ///
    /// As [`to_spec`](Filter::to_spec); also [`Error::InvalidFilter`] if an operand is a
    /// non-finite float, which JSON cannot hold.
    pub fn to_json(&self) -> Result<serde_json::Value, Error> {
        serde_json::to_value(self.to_spec()?).map_err(|e| invalid(e.to_string()))
    }

    /// The key the peer selection caches this filter's matches under: its canonical wire
    /// form. `None` for a filter that has none (a predicate, an operator twice on a key),
    /// which is evaluated on every peer each time instead.
    pub(crate) fn selection_key(&self) -> Option<SelectionKey> {
        self.selection_key
            .get_or_init(|| {
                let spec = self.to_spec().ok()?;
                rmp_serde::to_vec(&spec).ok().map(SelectionKey::from)
            })
            .clone()
    }

    /// Adds one condition; every public builder ends here.
    fn with(mut self, key: impl Into<String>, op: Op) -> Self {
        let key = key.into();
        let path = key
            .contains('.')
            .then(|| key.split('.').map(str::to_owned).collect());
        self.conditions.push(Condition { key, path, op });
        self.selection_key = Arc::default();
        self
    }
}

impl Op {
    /// Checks an operator and its operand as they came off the wire.
    fn parse(key: &str, name: &str, operand: Value) -> Result<Self, Error> {
        let op = match name {
            "$eq" => Op::Eq(operand),
            "$ne" => Op::Ne(operand),
            "$aeq" => Op::Aeq(operand),
            "$gt" => Op::Gt(operand),
            "$gte" => Op::Gte(operand),
            "$lt" => Op::Lt(operand),
            "$lte" => Op::Lte(operand),
            "$between" => {
                let bounds = match operand {
                    Value::List(items) => <[Value; 2]>::try_from(items).ok(),
                    _ => None,
                };
                let [low, high] = bounds.ok_or_else(|| {
                    invalid(format!(
                        "`$between` on key `{key}` needs a list [low, high] of two values"
                    ))
                })?;
                Op::Between(low, high)
            }
            "$in" => Op::In(list_operand(key, name, operand)?),
            "$nin" => Op::Nin(list_operand(key, name, operand)?),
            "$contains" => Op::Contains(operand),
            "$containsAny" => Op::ContainsAny(list_operand(key, name, operand)?),
            "$containsNone" => Op::ContainsNone(list_operand(key, name, operand)?),
            "$regex" => match operand {
                Value::String(pattern) => Op::Regex(compile(key, &pattern)?),
                other => {
                    return Err(invalid(format!(
                        "`$regex` on key `{key}` needs a string, got a {}",
                        other.type_name()
                    )))
                }
            },
            _ => {
                return Err(invalid(format!(
                    "unknown operator `{name}` on key `{key}` (known: {OPERATORS})"
                )))
            }
        };
        Ok(op)
    }

    /// The operator's wire name.
    fn name(&self) -> &'static str {
        match self {
            Op::Eq(_) => "$eq",
            Op::Ne(_) => "$ne",
            Op::Aeq(_) => "$aeq",
            Op::Gt(_) => "$gt",
            Op::Gte(_) => "$gte",
            Op::Lt(_) => "$lt",
            Op::Lte(_) => "$lte",
            Op::Between(..) => "$between",
            Op::In(_) => "$in",
            Op::Nin(_) => "$nin",
            Op::Contains(_) => "$contains",
            Op::ContainsAny(_) => "$containsAny",
            Op::ContainsNone(_) => "$containsNone",
            Op::Regex(_) => "$regex",
        }
    }

    /// The operand as it travels.
    fn operand(&self) -> Value {
        match self {
            Op::Eq(v)
            | Op::Ne(v)
            | Op::Aeq(v)
            | Op::Gt(v)
            | Op::Gte(v)
            | Op::Lt(v)
            | Op::Lte(v)
            | Op::Contains(v) => v.clone(),
            Op::Between(low, high) => Value::List(vec![low.clone(), high.clone()]),
            Op::In(vs) | Op::Nin(vs) | Op::ContainsAny(vs) | Op::ContainsNone(vs) => {
                Value::List(vs.clone())
            }
            Op::Regex(regex) => Value::String(regex.as_str().to_owned()),
        }
    }

    /// Whether the condition holds for the peer's value under its key. A missing key (or
    /// `null`) never reaches here: it fails every operator, as in the JavaScript zeronode.
    fn holds(&self, value: &Value) -> bool {
        let order = |operand: &Value| compare(value, operand);
        match self {
            Op::Eq(x) => equal(value, x),
            Op::Ne(x) => !equal(value, x),
            Op::Aeq(x) => loose_equal(x, value),
            Op::Gt(x) => order(x) == Some(Ordering::Greater),
            Op::Gte(x) => order(x).is_some_and(Ordering::is_ge),
            Op::Lt(x) => order(x) == Some(Ordering::Less),
            Op::Lte(x) => order(x).is_some_and(Ordering::is_le),
            Op::Between(low, high) => {
                order(low).is_some_and(Ordering::is_ge) && order(high).is_some_and(Ordering::is_le)
            }
            Op::In(xs) => xs.iter().any(|x| equal(value, x)),
            Op::Nin(xs) => !xs.iter().any(|x| equal(value, x)),
            Op::Contains(x) => contains(value, x),
            Op::ContainsAny(xs) => xs.iter().any(|x| contains(value, x)),
            Op::ContainsNone(xs) => is_container(value) && !xs.iter().any(|x| contains(value, x)),
            Op::Regex(regex) => value.as_str().is_some_and(|s| regex.is_match(s)),
        }
    }
}

/// The wire form of a [`Filter`]: key to [`Clause`], as the JavaScript zeronode writes it.
///
/// It encodes in MessagePack and JSON as a plain map:
/// `{"role": "worker", "load": {"$gt": 5}, "tags": {"$containsAny": ["a", "b"]}}`.
/// Decoding accepts any operator name; [`Filter::from_spec`] is what checks them, so a bad
/// filter from a peer becomes an [`Error::InvalidFilter`] naming the problem.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FilterSpec(pub BTreeMap<String, Clause>);

/// What a [`FilterSpec`] asks of one key.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Clause {
    /// A plain value: the key must equal it (`"role": "worker"`).
    Exact(Value),
    /// Operator name to operand (`"load": {"$gt": 5, "$lte": 10}`), all ANDed.
    Operators(BTreeMap<String, Value>),
}

// Hand-written so that a map reads as operators and anything else as a value, without
// buffering the input the way `#[serde(untagged)]` does.
impl<'de> Deserialize<'de> for Clause {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ClauseVisitor)
    }
}

struct ClauseVisitor;

impl ClauseVisitor {
    /// Hands a scalar to `Value`'s own deserializer, so both read numbers the same way.
    fn exact<'de, E, T>(v: T) -> Result<Clause, E>
    where
        E: de::Error,
        T: IntoDeserializer<'de, E>,
    {
        Value::deserialize(v.into_deserializer()).map(Clause::Exact)
    }
}

impl<'de> Visitor<'de> for ClauseVisitor {
    type Value = Clause;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value or a map of operators")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Clause, E> {
        Self::exact(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Clause, E> {
        Self::exact(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Clause, E> {
        Self::exact(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Clause, E> {
        Self::exact(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Clause, E> {
        Ok(Clause::Exact(Value::from(v)))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Clause, E> {
        Ok(Clause::Exact(Value::String(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Clause, E> {
        Ok(Clause::Exact(Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Clause, E> {
        Ok(Clause::Exact(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Clause, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq)).map(Clause::Exact)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Clause, A::Error> {
        BTreeMap::deserialize(MapAccessDeserializer::new(map)).map(Clause::Operators)
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidFilter { reason }
}

fn compile(key: &str, pattern: &str) -> Result<Regex, Error> {
    Regex::new(pattern).map_err(|e| invalid(format!("bad regex for key `{key}`: {e}")))
}

fn collect<V: Into<Value>>(values: impl IntoIterator<Item = V>) -> Vec<Value> {
    values.into_iter().map(Into::into).collect()
}

fn list_operand(key: &str, name: &str, operand: Value) -> Result<Vec<Value>, Error> {
    match operand {
        Value::List(items) => Ok(items),
        other => Err(invalid(format!(
            "`{name}` on key `{key}` needs a list, got a {}",
            other.type_name()
        ))),
    }
}

mod compare;
use compare::*;

#[cfg(test)]
mod tests;
