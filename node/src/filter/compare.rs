//! How filter conditions compare option values: equality across number types, order,
//! containment, and the JavaScript zeronode's loose equality for `$aeq`.

use std::cmp::Ordering;

use crate::options::Value;

/// Equality across number types; lists element by element, maps key by key; other types
/// structurally.
pub(super) fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(_), Value::Float(_)) | (Value::Float(_), Value::Int(_)) => {
            compare(a, b) == Some(Ordering::Equal)
        }
        (Value::List(xs), Value::List(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| equal(x, y))
        }
        (Value::Map(xs), Value::Map(ys)) => {
            xs.len() == ys.len()
                && xs
                    .iter()
                    .zip(ys)
                    .all(|((kx, x), (ky, y))| kx == ky && equal(x, y))
        }
        _ => a == b,
    }
}

/// JavaScript's abstract equality `a == b` (ECMA-262 IsLooselyEqual) on option values.
pub(super) fn loose_equal(a: &Value, b: &Value) -> bool {
    use Value::{Bool, Float, Int, List, Map, Null, String};
    match (a, b) {
        (Null, Null) => true,
        (Null, _) | (_, Null) => false,
        (Int(_) | Float(_), Int(_) | Float(_)) => compare(a, b) == Some(Ordering::Equal),
        (String(x), String(y)) => x == y,
        (Bool(x), Bool(y)) => x == y,
        // A bool is a number first: `true == "1"`, `false == []`.
        (Bool(x), other) | (other, Bool(x)) => loose_equal(&Int(i64::from(*x)), other),
        (Int(_) | Float(_), String(s)) | (String(s), Int(_) | Float(_)) => {
            let number = if matches!(a, String(_)) { b } else { a };
            compare(number, &Float(js_string_to_number(s))) == Some(Ordering::Equal)
        }
        // Two objects are equal only if they are one object, which values off the wire
        // never are.
        (List(_) | Map(_), List(_) | Map(_)) => false,
        // An object against a primitive: the object becomes its string first.
        (List(_) | Map(_), other) | (other, List(_) | Map(_)) => {
            let object = if matches!(a, List(_) | Map(_)) { a } else { b };
            loose_equal(&String(js_to_string(object)), other)
        }
    }
}

/// JavaScript's `String(value)` for the values loose equality turns into strings: a list
/// is its elements' strings joined with commas (null elements empty), a map is
/// `[object Object]`.
pub(super) fn js_to_string(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => js_number_to_string(*f),
        Value::String(s) => s.clone(),
        Value::List(items) => items
            .iter()
            .map(|item| match item {
                Value::Null => String::new(),
                other => js_to_string(other),
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Map(_) => "[object Object]".to_owned(),
    }
}

/// A number as JavaScript prints it, for the magnitudes options hold: whole numbers without
/// a fraction (`5`, not `5.0`), `NaN`, `Infinity`; others in Rust's shortest form (the
/// same digits; JavaScript switches to exponents below 1e-6 and from 1e21).
pub(super) fn js_number_to_string(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_owned()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else if f == f.trunc() && f.abs() < 1e21 {
        // `-0` prints as `0` in JavaScript too.
        format!("{:.0}", f + 0.0)
    } else {
        f.to_string()
    }
}

/// JavaScript's `Number(string)`: surrounding whitespace ignored, empty is 0, `Infinity`,
/// `0x`/`0o`/`0b` integers, decimal literals; anything else is NaN.
pub(super) fn js_string_to_number(s: &str) -> f64 {
    let s = s.trim();
    if s.is_empty() {
        return 0.0;
    }
    match s {
        "Infinity" | "+Infinity" => return f64::INFINITY,
        "-Infinity" => return f64::NEG_INFINITY,
        _ => {}
    }
    for (prefix, radix) in [
        ("0x", 16),
        ("0X", 16),
        ("0o", 8),
        ("0O", 8),
        ("0b", 2),
        ("0B", 2),
    ] {
        if let Some(digits) = s.strip_prefix(prefix) {
            return u128::from_str_radix(digits, radix)
                .ok()
                .filter(|_| !digits.starts_with('+'))
                .map_or(f64::NAN, |n| n as f64);
        }
    }
    // Rust also reads `inf` and `nan`; JavaScript reads only digits, sign, point, exponent.
    if s.bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'))
    {
        s.parse().unwrap_or(f64::NAN)
    } else {
        f64::NAN
    }
}

/// Order between two numbers or two strings; `None` for anything else, and for NaN.
pub(super) fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y),
        (Value::Int(x), Value::Float(y)) => compare_int_float(*x, *y),
        (Value::Float(x), Value::Int(y)) => compare_int_float(*y, *x).map(Ordering::reverse),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// Compares an integer with a float exactly: `i as f64` would round above 2^53.
pub(super) fn compare_int_float(i: i64, f: f64) -> Option<Ordering> {
    // 2^63: the first float above every i64. Floats below -2^63 are below every i64.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() {
        return None;
    }
    if f >= TWO_POW_63 {
        return Some(Ordering::Less);
    }
    if f < -TWO_POW_63 {
        return Some(Ordering::Greater);
    }
    // In [-2^63, 2^63) the whole part converts to i64 exactly.
    let whole = f.trunc();
    match i.cmp(&(whole as i64)) {
        // Same whole part: the fraction decides (a positive one puts `f` above `i`).
        Ordering::Equal => 0.0_f64.partial_cmp(&(f - whole)),
        other => Some(other),
    }
}

pub(super) fn is_container(value: &Value) -> bool {
    matches!(value, Value::List(_) | Value::String(_))
}

/// A list holding `needle` (by [`equal`]), or a string holding a string `needle`.
pub(super) fn contains(haystack: &Value, needle: &Value) -> bool {
    match (haystack, needle) {
        (Value::List(items), _) => items.iter().any(|item| equal(item, needle)),
        (Value::String(s), Value::String(sub)) => s.contains(sub.as_str()),
        _ => false,
    }
}
