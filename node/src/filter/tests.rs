//! Tests of the parent module.
#![allow(clippy::unwrap_used)]
use super::*;
use crate::options::options;
use serde_json::json;

/// A typical peer: every test filters this one.
fn peer() -> Options {
    options([
        ("role", Value::from("worker")),
        ("load", Value::from(7)),
        ("ratio", Value::from(0.5)),
        ("region", Value::from("eu-west")),
        ("tags", Value::from(vec!["gpu", "ssd"])),
        ("up", Value::from(true)),
    ])
}

fn check(filter: Filter) -> bool {
    filter.matches(&peer())
}

fn reason(err: Error) -> String {
    match err {
        Error::InvalidFilter { reason } => reason,
        other => panic!("expected InvalidFilter, got {other:?}"),
    }
}

#[test]
fn empty_filter_matches_every_peer() {
    assert!(Filter::any().is_any());
    assert!(check(Filter::any()));
    assert!(Filter::new().matches(&Options::new()));
}

#[test]
fn eq() {
    assert!(check(Filter::new().eq("role", "worker")));
    assert!(check(Filter::new().eq("up", true)));
    assert!(check(Filter::new().eq("tags", vec!["gpu", "ssd"])));
    assert!(!check(Filter::new().eq("role", "broker")));
    assert!(!check(Filter::new().eq("tags", vec!["ssd", "gpu"])));
}

#[test]
fn ne() {
    assert!(check(Filter::new().ne("role", "broker")));
    assert!(!check(Filter::new().ne("role", "worker")));
    // A different type is a different value.
    assert!(check(Filter::new().ne("load", "7")));
}

#[test]
fn gt_and_gte() {
    assert!(check(Filter::new().gt("load", 5)));
    assert!(!check(Filter::new().gt("load", 7)));
    assert!(check(Filter::new().gte("load", 7)));
    assert!(!check(Filter::new().gte("load", 8)));
}

#[test]
fn lt_and_lte() {
    assert!(check(Filter::new().lt("load", 8)));
    assert!(!check(Filter::new().lt("load", 7)));
    assert!(check(Filter::new().lte("load", 7)));
    assert!(!check(Filter::new().lte("load", 6)));
}

#[test]
fn strings_order_lexicographically() {
    assert!(check(Filter::new().gt("region", "eu")));
    assert!(check(Filter::new().lt("region", "us")));
    assert!(!check(Filter::new().gte("region", "eu-x")));
    assert!(check(Filter::new().between("region", "eu", "ev")));
}

#[test]
fn between_is_inclusive() {
    assert!(check(Filter::new().between("load", 7, 10)));
    assert!(check(Filter::new().between("load", 0, 7)));
    assert!(check(Filter::new().between("ratio", 0, 1)));
    assert!(!check(Filter::new().between("load", 8, 10)));
    assert!(!check(Filter::new().between("load", 10, 0)));
}

#[test]
fn is_in_and_not_in() {
    assert!(check(Filter::new().is_in("role", ["worker", "broker"])));
    assert!(!check(Filter::new().is_in("role", ["broker"])));
    assert!(!check(Filter::new().is_in("role", Vec::<Value>::new())));
    assert!(check(Filter::new().is_in("load", [7.0])));
    assert!(check(Filter::new().not_in("role", ["broker"])));
    assert!(!check(Filter::new().not_in("role", ["broker", "worker"])));
}

#[test]
fn contains_in_lists_and_strings() {
    assert!(check(Filter::new().contains("tags", "gpu")));
    assert!(!check(Filter::new().contains("tags", "tpu")));
    assert!(check(Filter::new().contains("region", "west")));
    assert!(!check(Filter::new().contains("region", "east")));
    let numbers = options([("ports", vec![80, 443])]);
    assert!(Filter::new().contains("ports", 443.0).matches(&numbers));
}

#[test]
fn contains_any() {
    assert!(check(Filter::new().contains_any("tags", ["tpu", "ssd"])));
    assert!(!check(Filter::new().contains_any("tags", ["tpu", "hdd"])));
    assert!(!check(
        Filter::new().contains_any("tags", Vec::<Value>::new())
    ));
    assert!(check(Filter::new().contains_any("region", ["us", "eu"])));
}

#[test]
fn contains_none() {
    assert!(check(Filter::new().contains_none("tags", ["tpu", "hdd"])));
    assert!(!check(Filter::new().contains_none("tags", ["tpu", "gpu"])));
    assert!(check(Filter::new().contains_none("region", ["us-"])));
    assert!(!check(Filter::new().contains_none("region", ["eu-"])));
}

#[test]
fn regex_and_matching() {
    assert!(check(Filter::new().regex("region", "^eu-").unwrap()));
    assert!(check(Filter::new().regex("region", "west").unwrap()));
    assert!(!check(Filter::new().regex("region", "^us-").unwrap()));
    // Only strings are searched.
    assert!(!check(Filter::new().regex("load", "7").unwrap()));
    let re = Regex::new("^work").unwrap();
    assert!(check(Filter::new().matching("role", re.clone())));
    assert!(!check(Filter::new().matching("region", re)));
}

#[test]
fn missing_key_fails_every_operator_as_in_javascript() {
    let absent = || Filter::new();
    let failing = [
        absent().eq("gone", 1),
        absent().ne("gone", 1),
        absent().aeq("gone", 1),
        absent().gt("gone", 1),
        absent().gte("gone", 1),
        absent().lt("gone", 1),
        absent().lte("gone", 1),
        absent().between("gone", 0, 2),
        absent().is_in("gone", [1]),
        absent().not_in("gone", [1]),
        absent().contains("gone", 1),
        absent().contains_any("gone", [1]),
        absent().contains_none("gone", [1]),
        absent().regex("gone", ".*").unwrap(),
    ];
    for filter in failing {
        assert!(!check(filter.clone()), "{filter:?} should fail");
    }
}

/// A peer with nested options, a null, and the JavaScript falsy values.
fn rich_peer() -> Options {
    options([
        ("role", Value::from("worker")),
        ("load", Value::from(5)),
        ("zero", Value::from(0)),
        ("off", Value::from(false)),
        ("empty", Value::from("")),
        ("nothing", Value::Null),
        ("tags", Value::from(vec!["gpu", "ssd"])),
        ("pair", Value::from(vec![1, 2])),
        (
            "region",
            Value::Map(options([
                ("zone", Value::from("a")),
                ("rack", Value::from(3)),
                ("spare", Value::Null),
                ("deep", Value::Map(options([("floor", Value::from(2))]))),
            ])),
        ),
        ("dotted.key", Value::from("literal")),
    ])
}

#[test]
fn semantics_table() {
    let f = Filter::new;
    #[rustfmt::skip]
    let rows: Vec<(&str, Filter, bool)> = vec![
        // Missing keys: every operator fails, the "absence" ones too (JavaScript's rule).
        ("ne on missing", f().ne("gone", "x"), false),
        ("nin on missing", f().not_in("gone", ["x"]), false),
        ("containsNone on missing", f().contains_none("gone", ["x"]), false),
        ("eq on missing", f().eq("gone", "x"), false),
        // Null is missing.
        ("eq null on null", f().eq("nothing", Value::Null), false),
        ("ne on null", f().ne("nothing", 1), false),
        ("nin on null", f().not_in("nothing", [1]), false),
        ("containsNone on null", f().contains_none("nothing", ["x"]), false),
        ("aeq on null", f().aeq("nothing", Value::Null), false),
        // Present values, including the ones JavaScript's truthiness test drops.
        ("ne on present", f().ne("role", "broker"), true),
        ("ne on equal", f().ne("role", "worker"), false),
        ("nin on present", f().not_in("load", [1, 2]), true),
        ("nin holding it", f().not_in("load", [5]), false),
        ("containsNone on list", f().contains_none("tags", ["tpu"]), true),
        ("containsNone hit", f().contains_none("tags", ["gpu"]), false),
        ("eq zero", f().eq("zero", 0), true),
        ("eq false", f().eq("off", false), true),
        ("eq empty string", f().eq("empty", ""), true),
        ("ne zero", f().ne("zero", 1), true),
        // Nested maps by dotted path.
        ("path eq", f().eq("region.zone", "a"), true),
        ("path eq other", f().eq("region.zone", "b"), false),
        ("path gt", f().gt("region.rack", 2), true),
        ("path two deep", f().eq("region.deep.floor", 2), true),
        ("path missing leaf", f().eq("region.row", 1), false),
        ("path ne missing leaf", f().ne("region.row", 1), false),
        ("path null leaf", f().ne("region.spare", 1), false),
        ("path through a non-map", f().eq("role.zone", "a"), false),
        ("path through a list", f().eq("tags.0", "gpu"), false),
        ("literal dotted key first", f().eq("dotted.key", "literal"), true),
        ("whole map eq", f().eq("region.deep", Value::Map(options([("floor", 2)]))), true),
        ("whole map eq by value", f().eq("region.deep", Value::Map(options([("floor", 2.0)]))), true),
        ("whole map differs", f().eq("region.deep", Value::Map(options([("floor", 3)]))), false),
        // Type mismatches.
        ("map ordered", f().gt("region", 1), false),
        ("map contains", f().contains("region", "zone"), false),
        ("map containsNone", f().contains_none("region", ["x"]), false),
        ("map ne string", f().ne("region", "a"), true),
        ("string eq number", f().eq("load", "5"), false),
        ("bool gt", f().gt("off", -1), false),
        ("containsNone on number", f().contains_none("load", [1]), false),
        // $aeq: JavaScript's loose ==.
        ("aeq number", f().aeq("load", 5), true),
        ("aeq float", f().aeq("load", 5.0), true),
        ("aeq string of number", f().aeq("load", "5"), true),
        ("aeq padded string", f().aeq("load", " 5 "), true),
        ("aeq hex string", f().aeq("load", "0x5"), true),
        ("aeq not a number", f().aeq("load", "5a"), false),
        ("aeq other number", f().aeq("load", 6), false),
        ("aeq empty string is zero", f().aeq("zero", ""), true),
        ("aeq false is zero", f().aeq("zero", false), true),
        ("aeq false is empty string", f().aeq("empty", false), true),
        ("aeq true is not 5", f().aeq("load", true), false),
        ("aeq string", f().aeq("role", "worker"), true),
        ("aeq list as string", f().aeq("pair", "1,2"), true),
        ("aeq list against list", f().aeq("pair", vec![1, 2]), false),
        ("aeq one-element list", f().aeq("load", vec![5]), true),
        ("aeq map as string", f().aeq("region", "[object Object]"), true),
        ("aeq map against map", f().aeq("region.deep", Value::Map(options([("floor", 2)]))), false),
        ("aeq null operand", f().aeq("load", Value::Null), false),
        ("aeq by path", f().aeq("region.rack", "3"), true),
    ];
    let peer = rich_peer();
    let mut wrong = Vec::new();
    for (name, filter, expected) in &rows {
        if filter.matches(&peer) != *expected {
            wrong.push(*name);
        }
        // The wire form decides the same.
        let rebuilt = Filter::from_json(&filter.to_json().unwrap()).unwrap();
        assert_eq!(rebuilt.matches(&peer), *expected, "{name} after JSON");
    }
    assert!(wrong.is_empty(), "rows that decided wrongly: {wrong:?}");
}

#[test]
fn aeq_reads_numbers_the_javascript_way() {
    let cases = [
        ("", 0.0),
        ("  12  ", 12.0),
        ("1e3", 1000.0),
        (".5", 0.5),
        ("-2.5", -2.5),
        ("0b101", 5.0),
        ("0o17", 15.0),
        ("0xff", 255.0),
        ("Infinity", f64::INFINITY),
        ("-Infinity", f64::NEG_INFINITY),
    ];
    for (text, number) in cases {
        assert_eq!(js_string_to_number(text), number, "{text:?}");
    }
    for text in [
        "inf", "nan", "NaN", "1e", "0x", "-0x5", "0x+5", "1,5", "five",
    ] {
        assert!(js_string_to_number(text).is_nan(), "{text:?}");
    }
    assert_eq!(
        js_to_string(&Value::from(vec![
            Value::from(1.5),
            Value::Null,
            Value::from(2.0)
        ])),
        "1.5,,2"
    );
    assert_eq!(
        js_to_string(&Value::from(vec![Value::from(vec![1, 2]), Value::from(3)])),
        "1,2,3"
    );
}

#[test]
fn mismatched_types_fail() {
    assert!(!check(Filter::new().eq("load", "7")));
    assert!(!check(Filter::new().gt("load", "5")));
    assert!(!check(Filter::new().lt("role", 5)));
    assert!(!check(Filter::new().gte("up", false)));
    assert!(!check(Filter::new().lte("tags", vec!["z"])));
    assert!(!check(Filter::new().between("load", "0", 10)));
    assert!(!check(Filter::new().contains("load", 7)));
    assert!(!check(Filter::new().contains("region", 1)));
    assert!(!check(Filter::new().contains_none("load", [1])));
    assert!(!check(Filter::new().gt("ratio", f64::NAN)));
}

#[test]
fn int_and_float_compare_by_value() {
    assert!(check(Filter::new().eq("load", 7.0)));
    assert!(check(Filter::new().gt("load", 6.5)));
    assert!(check(Filter::new().lt("load", 7.25)));
    assert!(check(Filter::new().gt("ratio", 0)));
    assert!(!check(Filter::new().gte("ratio", 1)));
    assert!(check(Filter::new().eq("tags", vec!["gpu", "ssd"])));
    let floats = options([("v", Value::List(vec![Value::Float(1.0)]))]);
    assert!(Filter::new().eq("v", vec![1]).matches(&floats));
}

#[test]
fn int_float_comparison_is_exact_at_the_edges() {
    let big = (1_i64 << 53) + 1; // not representable as f64
    let near = (1_i64 << 53) as f64;
    assert_eq!(compare_int_float(big, near), Some(Ordering::Greater));
    assert_eq!(compare_int_float(i64::MAX, 9.3e18), Some(Ordering::Less));
    assert_eq!(
        compare_int_float(i64::MIN, -9.3e18),
        Some(Ordering::Greater)
    );
    assert_eq!(
        compare_int_float(i64::MIN, -9_223_372_036_854_775_808.0),
        Some(Ordering::Equal)
    );
    assert_eq!(compare_int_float(-3, -2.5), Some(Ordering::Less));
    assert_eq!(compare_int_float(-2, -2.5), Some(Ordering::Greater));
    assert_eq!(compare_int_float(2, 2.0), Some(Ordering::Equal));
    assert_eq!(compare_int_float(0, f64::INFINITY), Some(Ordering::Less));
    assert_eq!(compare_int_float(0, f64::NAN), None);
}

#[test]
fn conditions_are_anded() {
    let within = Filter::new().gt("load", 5).lte("load", 10);
    assert!(check(within));
    let one_fails = Filter::new().gt("load", 5).lte("load", 6);
    assert!(!check(one_fails));
    let across_keys = Filter::new().eq("role", "worker").contains("tags", "gpu");
    assert!(check(across_keys));
    let second_key_fails = Filter::new().eq("role", "worker").contains("tags", "tpu");
    assert!(!check(second_key_fails));
}

#[test]
fn predicate_and_conditions() {
    let high_ratio = |opts: &Options| opts.get("ratio").and_then(Value::as_f64) > Some(0.4);
    assert!(check(Filter::predicate(high_ratio)));
    assert!(!check(Filter::predicate(|_| false)));
    assert!(!check(Filter::predicate(high_ratio).eq("role", "broker")));
    assert!(!check(
        Filter::new().eq("role", "worker").with_predicate(|_| false)
    ));
    assert!(Filter::predicate(high_ratio).has_predicate());
    assert!(!Filter::predicate(high_ratio).is_any());
}

#[test]
fn predicate_refuses_to_serialize() {
    let filter = Filter::new().eq("role", "worker").with_predicate(|_| true);
    assert!(matches!(
        filter.to_spec(),
        Err(Error::PredicateNotSerializable)
    ));
    assert!(matches!(
        filter.to_json(),
        Err(Error::PredicateNotSerializable)
    ));
}

#[test]
fn debug_hides_the_predicate() {
    let text = format!("{:?}", Filter::predicate(|_| true).eq("role", "worker"));
    assert!(text.contains("<predicate>"), "{text}");
    assert!(text.contains("worker"), "{text}");
    // The cached selection key stays out of it.
    let filter = Filter::new().eq("role", "worker");
    filter.selection_key();
    assert!(!format!("{filter:?}").contains("selection_key"));
}

#[test]
fn bad_regex_is_invalid_filter() {
    let err = Filter::new().regex("region", "(eu").unwrap_err();
    assert!(reason(err).contains("region"));
    let err = Filter::from_json(&json!({"region": {"$regex": "[z-a]"}})).unwrap_err();
    assert!(reason(err).contains("bad regex for key `region`"));
}

#[test]
fn unknown_operator_is_invalid_filter() {
    let err = Filter::from_json(&json!({"load": {"$gt": 1, "$near": 5}})).unwrap_err();
    let reason = reason(err);
    assert!(
        reason.contains("unknown operator `$near` on key `load`"),
        "{reason}"
    );
}

#[test]
fn wrong_operand_shapes_are_invalid_filter() {
    let cases = [
        (
            json!({"load": {"$between": [1]}}),
            "`$between` on key `load`",
        ),
        (json!({"load": {"$between": 3}}), "`$between` on key `load`"),
        (
            json!({"role": {"$in": "worker"}}),
            "`$in` on key `role` needs a list",
        ),
        (
            json!({"role": {"$nin": 1}}),
            "`$nin` on key `role` needs a list",
        ),
        (
            json!({"tags": {"$containsAny": "a"}}),
            "`$containsAny` on key `tags`",
        ),
        (
            json!({"tags": {"$containsNone": true}}),
            "`$containsNone` on key `tags`",
        ),
        (
            json!({"region": {"$regex": 5}}),
            "`$regex` on key `region` needs a string",
        ),
        (
            json!({"region": {}}),
            "key `region` has an empty map of operators",
        ),
    ];
    for (json, expected) in cases {
        let reason = reason(Filter::from_json(&json).unwrap_err());
        assert!(reason.contains(expected), "{json}: {reason}");
    }
}

#[test]
fn json_that_is_no_spec_is_invalid_filter() {
    for json in [
        json!("role=worker"),
        json!([1, 2]),
        json!({"meta": {"nested": 1}}),
    ] {
        assert!(matches!(
            Filter::from_json(&json),
            Err(Error::InvalidFilter { .. })
        ));
    }
}

#[test]
fn spec_has_the_javascript_shape() {
    let filter = Filter::new()
        .eq("role", "worker")
        .gt("load", 5)
        .lte("load", 10)
        .regex("region", "^eu-")
        .unwrap()
        .contains_any("tags", ["a", "b"])
        .between("ratio", 0, 1.5)
        .not_in("zone", ["x"]);
    let expected = json!({
        "role": "worker",
        "load": {"$gt": 5, "$lte": 10},
        "region": {"$regex": "^eu-"},
        "tags": {"$containsAny": ["a", "b"]},
        "ratio": {"$between": [0, 1.5]},
        "zone": {"$nin": ["x"]},
    });
    assert_eq!(filter.to_json().unwrap(), expected);
}

/// One filter using every operator, for the round trips.
fn every_operator() -> Filter {
    Filter::new()
        .eq("role", "worker")
        .ne("role", "broker")
        .gt("load", 5)
        .gte("load", 5.5)
        .lt("load", 10)
        .lte("load", 9)
        .between("ratio", 0, 1)
        .is_in("region", ["eu-west", "us-east"])
        .not_in("role", ["z9"])
        .aeq("load", "7")
        .contains("tags", "gpu")
        .contains_any("tags", ["ssd", "nvme"])
        .contains_none("tags", ["tape"])
        .regex("region", "^eu-")
        .unwrap()
        .eq("up", true)
}

#[test]
fn spec_round_trip_through_json() {
    let filter = every_operator();
    assert!(check(filter.clone()));
    let spec = filter.to_spec().unwrap();
    let text = serde_json::to_string(&spec).unwrap();
    let decoded: FilterSpec = serde_json::from_str(&text).unwrap();
    assert_eq!(decoded, spec);
    let rebuilt = Filter::from_spec(decoded).unwrap();
    assert!(check(rebuilt.clone()));
    assert_eq!(rebuilt.to_spec().unwrap(), spec);
    assert_eq!(
        Filter::from_json(&filter.to_json().unwrap())
            .unwrap()
            .to_spec()
            .unwrap(),
        spec
    );
}

#[test]
fn spec_round_trip_through_messagepack() {
    let filter = every_operator();
    let spec = filter.to_spec().unwrap();
    let bytes = rmp_serde::to_vec(&spec).unwrap();
    let decoded: FilterSpec = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(decoded, spec);
    let rebuilt = Filter::from_spec(decoded).unwrap();
    assert!(check(rebuilt.clone()));
    assert_eq!(rebuilt.to_spec().unwrap(), spec);
    // Named-map encoding is the same bytes as a map built by hand.
    let by_hand = rmp_serde::to_vec(&json!({"role": "worker"})).unwrap();
    let encoded = rmp_serde::to_vec(&Filter::new().eq("role", "worker").to_spec().unwrap());
    assert_eq!(encoded.unwrap(), by_hand);
}

#[test]
fn explicit_eq_operator_reads_like_a_plain_value() {
    let explicit = Filter::from_json(&json!({"role": {"$eq": "worker"}})).unwrap();
    assert!(check(explicit.clone()));
    assert_eq!(explicit.to_json().unwrap(), json!({"role": "worker"}));
}

#[test]
fn the_same_operator_twice_on_a_key_cannot_travel() {
    let filter = Filter::new().gt("load", 1).gt("load", 2);
    assert!(check(filter.clone()));
    let reason = reason(filter.to_spec().unwrap_err());
    assert!(reason.contains("key `load` has `$gt` twice"), "{reason}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            (-20_i64..20).prop_map(Value::Int),
            (-20.0_f64..20.0).prop_map(Value::Float),
            "[a-c(]{0,3}".prop_map(Value::String),
        ];
        let leaf = prop_oneof![leaf, Just(Value::Null)];
        leaf.prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::List),
                prop::collection::btree_map("[a-c]", inner, 0..3).prop_map(Value::from),
            ]
        })
    }

    fn clause() -> impl Strategy<Value = Clause> {
        let name = prop::sample::select(OPERATORS.split(' ').chain(["$bogus"]).collect::<Vec<_>>());
        prop_oneof![
            value().prop_map(Clause::Exact),
            prop::collection::btree_map(name.prop_map(str::to_owned), value(), 0..3)
                .prop_map(Clause::Operators),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        "[a-c](\\.[a-c])?"
    }

    proptest! {
        /// Any spec either fails cleanly or rebuilds into a filter whose wire form is
        /// stable and which decides every peer the same way after a round trip.
        #[test]
        fn any_spec_is_rejected_or_round_trips(
            spec in prop::collection::btree_map(key(), clause(), 0..4),
            peers in prop::collection::vec(prop::collection::btree_map(key(), value(), 0..4), 1..4),
        ) {
            match Filter::from_spec(FilterSpec(spec)) {
                Err(err) => {
                    let is_invalid = matches!(err, Error::InvalidFilter { .. });
                    prop_assert!(is_invalid, "{:?}", err);
                }
                Ok(filter) => {
                    let wire = filter.to_spec().unwrap();
                    let bytes = rmp_serde::to_vec(&wire).unwrap();
                    let decoded: FilterSpec = rmp_serde::from_slice(&bytes).unwrap();
                    let rebuilt = Filter::from_spec(decoded).unwrap();
                    prop_assert_eq!(rebuilt.to_spec().unwrap(), wire);
                    for peer in peers.iter().cloned().map(Options::from) {
                        prop_assert_eq!(filter.matches(&peer), rebuilt.matches(&peer));
                    }
                }
            }
        }
    }
}

#[test]
fn null_and_maps_travel_in_the_wire_form() {
    let filter = Filter::from_json(&json!({
        "region.zone": "a",
        "gone": null,
        "meta": {"$eq": {"nested": 1}},
        "load": {"$aeq": "5"}
    }))
    .unwrap();
    let json = filter.to_json().unwrap();
    assert_eq!(
        json,
        json!({
            "gone": null,
            "load": {"$aeq": "5"},
            "meta": {"$eq": {"nested": 1}},
            "region.zone": "a"
        })
    );
    let bytes = rmp_serde::to_vec(&filter.to_spec().unwrap()).unwrap();
    let back: FilterSpec = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, filter.to_spec().unwrap());
    // `gone: null` never matches (null is no value), so the whole filter fails here.
    let peer = options([
        ("region", Value::Map(options([("zone", "a")]))),
        ("meta", Value::Map(options([("nested", 1)]))),
        ("load", Value::from(5)),
    ]);
    assert!(!filter.matches(&peer));
    let without_gone = Filter::new()
        .eq("region.zone", "a")
        .eq("meta", Value::Map(options([("nested", 1)])))
        .aeq("load", "5");
    assert!(without_gone.matches(&peer));
    // An exact map travels as `$eq`, since a plain map reads as operators.
    assert_eq!(
        without_gone.to_json().unwrap()["meta"],
        json!({"$eq": {"nested": 1}})
    );
}

#[test]
fn selection_key_is_canonical_and_shared_by_clones() {
    let a = Filter::new().eq("role", "worker").gt("load", 1);
    let b = Filter::new().gt("load", 1).eq("role", "worker");
    assert_eq!(a.selection_key(), b.selection_key());
    assert_ne!(
        a.selection_key(),
        Filter::new().eq("role", "worker").selection_key()
    );
    // A string 5 and a number 5 are different filters.
    assert_ne!(
        Filter::new().eq("k", "5").selection_key(),
        Filter::new().eq("k", 5).selection_key()
    );
    let key = a.selection_key().unwrap();
    let clone = a.clone();
    assert!(Arc::ptr_eq(&clone.selection_key().unwrap(), &key));
    // Adding a condition makes a new filter with its own key.
    assert_ne!(clone.lt("load", 9).selection_key(), Some(key));
    assert!(Filter::predicate(|_| true).selection_key().is_none());
    assert!(Filter::new()
        .gt("k", 1)
        .gt("k", 2)
        .selection_key()
        .is_none());
}

#[test]
fn absence_operators_table_with_options_per_row() {
    let map = |pairs: Vec<(&str, Value)>| Value::Map(options(pairs));
    let none = Options::new;
    let one = |key: &str, value: Value| options([(key, value)]);
    #[rustfmt::skip]
    let rows: Vec<(Filter, Options, bool)> = vec![
        // $ne
        (Filter::new().ne("k", 1), none(), false),
        (Filter::new().ne("k", 1), one("k", Value::Null), false),
        (Filter::new().ne("k", 1), one("k", Value::from(2)), true),
        (Filter::new().ne("k", 1), one("k", Value::from(1.0)), false),
        (Filter::new().ne("k", 1), one("k", Value::from("1")), true),
        (Filter::new().ne("k", 1), one("k", map(vec![])), true),
        // $nin
        (Filter::new().not_in("k", [1, 2]), none(), false),
        (Filter::new().not_in("k", [1, 2]), one("k", Value::Null), false),
        (Filter::new().not_in("k", [1, 2]), one("k", Value::from(3)), true),
        (Filter::new().not_in("k", [1, 2]), one("k", Value::from(2)), false),
        (Filter::new().not_in("k", [1, 2]), one("k", Value::from(vec![1])), true),
        // $containsNone
        (Filter::new().contains_none("k", ["a"]), none(), false),
        (Filter::new().contains_none("k", ["a"]), one("k", Value::Null), false),
        (Filter::new().contains_none("k", ["a"]), one("k", Value::from(vec!["b"])), true),
        (Filter::new().contains_none("k", ["a"]), one("k", Value::from(vec!["a"])), false),
        (Filter::new().contains_none("k", ["a"]), one("k", Value::from("bcd")), true),
        (Filter::new().contains_none("k", ["a"]), one("k", Value::from("cab")), false),
        (Filter::new().contains_none("k", ["a"]), one("k", Value::from(5)), false),
        (Filter::new().contains_none("k", ["a"]), one("k", map(vec![("a", Value::from(1))])), false),
        // Nested, by dotted path.
        (Filter::new().ne("a.b", 1), one("a", map(vec![])), false),
        (Filter::new().ne("a.b", 1), one("a", map(vec![("b", Value::from(2))])), true),
        (Filter::new().ne("a.b", 1), one("a", map(vec![("b", Value::Null)])), false),
        (Filter::new().ne("a.b", 1), one("a", Value::from(3)), false),
        (Filter::new().not_in("a.b", [1]), one("a", map(vec![("b", Value::from(2))])), true),
        (Filter::new().contains_none("a.b", ["x"]), one("a", map(vec![("b", Value::from(vec!["y"]))])), true),
        // A literal dotted key wins over the path.
        (Filter::new().eq("a.b", 1), one("a.b", Value::from(1)), true),
        (
            Filter::new().eq("a.b", 1),
            options([("a.b", Value::from(2)), ("a", map(vec![("b", Value::from(1))]))]),
            false,
        ),
    ];
    for (i, (filter, peer, expected)) in rows.iter().enumerate() {
        assert_eq!(
            filter.matches(peer),
            *expected,
            "row {i}: {filter:?} on {peer:?}"
        );
    }
}
