//! JS `ToNumber`, as the reference's comparisons and `Number(…)` calls apply
//! it to parsed values and strings.

use super::{Doc, Node, NodeId};

/// JS `ToNumber` of a JSON value, as a relational comparison against a
/// number applies it (`[5]` → 5, `"1e3"` → 1000, `{}` → NaN, `null` → 0).
/// Single-element arrays unwrap without recursion, so any depth is safe.
pub fn js_to_number(doc: &Doc, id: NodeId) -> f64 {
    let mut id = id;
    // Inside an array, an element is first turned into a string, which makes
    // `null` and `[]` read as "" (0) and booleans as text (NaN).
    let mut in_array = false;
    loop {
        return match doc.node(id) {
            Node::Number(n) => *n,
            Node::Null => 0.0,
            Node::Bool(b) => {
                if in_array {
                    f64::NAN
                } else if *b {
                    1.0
                } else {
                    0.0
                }
            }
            Node::String(s) => string_to_number(s.as_str()),
            Node::Object(_) => f64::NAN,
            Node::Array(items) => match items.as_slice() {
                [] => 0.0,
                [only] => {
                    id = *only;
                    in_array = true;
                    continue;
                }
                _ => f64::NAN,
            },
        };
    }
}

/// JS white space and line terminators, as `String.prototype.trim` and
/// `StringToNumber` strip them.
pub fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\u{9}' | '\u{a}' | '\u{b}' | '\u{c}' | '\u{d}' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\u{feff}'
    )
}

/// JS `Number(string)`.
pub fn string_to_number(s: &str) -> f64 {
    let t = s.trim_matches(is_js_space);
    if t.is_empty() {
        return 0.0;
    }
    let radix = match t.get(..2) {
        Some("0x" | "0X") => Some(16),
        Some("0o" | "0O") => Some(8),
        Some("0b" | "0B") => Some(2),
        _ => None,
    };
    if let Some(radix) = radix {
        let digits = &t[2..];
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            return f64::NAN;
        }
        return digits.chars().fold(0.0, |acc, c| {
            acc * f64::from(radix) + f64::from(c.to_digit(radix).unwrap_or(0))
        });
    }
    let (sign, body) = match t.as_bytes()[0] {
        b'+' => (1.0, &t[1..]),
        b'-' => (-1.0, &t[1..]),
        _ => (1.0, t),
    };
    if body == "Infinity" {
        return sign * f64::INFINITY;
    }
    // StrDecimalLiteral: digits [. digits] | . digits, then an optional exponent.
    let b = body.as_bytes();
    let mut i = 0;
    let int_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return f64::NAN;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let exp_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp_digits == 0 {
            return f64::NAN;
        }
        i += exp_digits;
    }
    if i != b.len() {
        return f64::NAN;
    }
    body.parse::<f64>().map_or(f64::NAN, |v| sign * v)
}
