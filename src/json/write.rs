//! `JSON.stringify`'s text for strings and numbers: the one writer every
//! JSON the core produces goes through.

use super::parse::plain_len;

/// The byte length of `JSON.stringify(s)` for a well-formed string, without
/// writing it (what [`write_json_str`] would append).
pub fn json_str_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut len = bytes.len() + 2;
    let mut at = 0;
    loop {
        at += plain_len(bytes, at);
        let Some(&b) = bytes.get(at) else { break };
        len += match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            _ => 5,
        };
        at += 1;
    }
    len
}

/// Append `JSON.stringify(s)` for a well-formed string.
pub fn write_json_str(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut at = 0;
    loop {
        // What needs escaping is exactly what ends a plain run in the
        // parser (`"`, `\\`, a control byte), so the parser's vector scan
        // finds it here too: a megabyte prompt is written in a few copies.
        let run = plain_len(bytes, at);
        // Ends before an ASCII byte or at the end: always a char boundary.
        out.push_str(s.get(at..at + run).unwrap_or_default());
        at += run;
        let Some(&b) = bytes.get(at) else { break };
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => push_u_escape(out, u16::from(b)),
        }
        at += 1;
    }
    out.push('"');
}

fn push_u_escape(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12u16, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

pub(super) fn write_json_utf16(units: &[u16], out: &mut String) {
    out.push('"');
    for r in char::decode_utf16(units.iter().copied()) {
        match r {
            Ok(c) => {
                let mut buf = [0u8; 4];
                let s: &str = c.encode_utf8(&mut buf);
                let mut tmp = String::new();
                write_json_str(s, &mut tmp);
                out.push_str(&tmp[1..tmp.len() - 1]);
            }
            // JSON.stringify writes lone surrogates as lowercase \u escapes.
            Err(e) => push_u_escape(out, e.unpaired_surrogate()),
        }
    }
    out.push('"');
}

/// JS `String(n)` for a double, as JSON.stringify prints numbers
/// (non-finite numbers print as `null` in JSON; this returns the JS text).
pub fn js_number_to_string(n: f64) -> String {
    let mut out = String::new();
    push_js_number(&mut out, n);
    out
}

/// Below this magnitude every integral double is printed digit for digit:
/// doubles there are at most 1 apart, so no shorter digit string rounds to
/// the same double, and Number::toString's shortest digits are the integer's.
const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0; // 2^53

/// `n` as an integer when its decimal text is the integer's digits (integral,
/// below 2^53), so it can skip the float formatter. Not -0, which JS and
/// Rust spell differently.
fn exact_integer(n: f64) -> Option<i64> {
    let negative_zero = n == 0.0 && n.is_sign_negative();
    // In range, so the conversion is exact.
    (n.fract() == 0.0 && n.abs() < EXACT_INTEGERS && !negative_zero).then_some(n as i64)
}

/// [`js_number_to_string`] appended to `out`. Timestamps, counts and
/// durations (integral, below 2^53) are written without the shortest-digits
/// search or any allocation.
pub fn push_js_number(out: &mut String, n: f64) {
    match exact_integer(n) {
        Some(i) => {
            use std::fmt::Write as _;
            // Writing to a String cannot fail.
            let _ = write!(out, "{i}");
        }
        None => out.push_str(&shortest_js_number(n)),
    }
}

/// Append `JSON.stringify(n)`: the JS number text, `null` for NaN and the
/// infinities.
pub fn push_json_number(out: &mut String, n: f64) {
    if n.is_finite() {
        push_js_number(out, n);
    } else {
        out.push_str("null");
    }
}

/// The general case: ECMAScript Number::toString from Rust's shortest
/// round-trip digits.
pub(super) fn shortest_js_number(n: f64) -> String {
    if n.is_nan() {
        return "NaN".into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if n == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits; lay them out the
    // way ECMAScript Number::toString does.
    let sci = format!("{:e}", n.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let point = exp + 1; // position of the decimal point relative to digits
    let mut out = String::new();
    if n < 0.0 {
        out.push('-');
    }
    if k <= point && point <= 21 {
        out.push_str(&digits);
        for _ in 0..(point - k) {
            out.push('0');
        }
    } else if 0 < point && point <= 21 {
        out.push_str(&digits[..point as usize]);
        out.push('.');
        out.push_str(&digits[point as usize..]);
    } else if -6 < point && point <= 0 {
        out.push_str("0.");
        for _ in 0..(-point) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if point >= 1 { '+' } else { '-' });
        out.push_str(&(point - 1).abs().to_string());
    }
    out
}

/// `JSON.stringify(s)` as a new string.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_json_str(s, &mut out);
    out
}

/// A JSON object written key by key, in the order written (the wire's
/// order): the one object writer of everything the core answers but the
/// byte-pinned envelope body (`envelope::signed`).
pub struct Obj {
    out: String,
    /// Where this object's `{` is in `out`.
    start: usize,
}

impl Default for Obj {
    fn default() -> Obj {
        Obj::with_capacity(0)
    }
}

impl Obj {
    pub fn new() -> Obj {
        Obj::default()
    }

    /// An object whose text is about `bytes` long.
    pub fn with_capacity(bytes: usize) -> Obj {
        let mut out = String::with_capacity(bytes.max(2));
        out.push('{');
        Obj { out, start: 0 }
    }

    fn key(&mut self, key: &str) -> &mut String {
        if self.out.len() > self.start + 1 {
            self.out.push(',');
        }
        write_json_str(key, &mut self.out);
        self.out.push(':');
        &mut self.out
    }

    pub fn str(&mut self, key: &str, value: &str) -> &mut Obj {
        write_json_str(value, self.key(key));
        self
    }

    pub fn js(&mut self, key: &str, value: &super::JsStr) -> &mut Obj {
        value.write_json(self.key(key));
        self
    }

    /// A value that is JSON text already.
    pub fn raw(&mut self, key: &str, json: &str) -> &mut Obj {
        self.key(key).push_str(json);
        self
    }

    pub fn num(&mut self, key: &str, value: f64) -> &mut Obj {
        push_json_number(self.key(key), value);
        self
    }

    pub fn bool(&mut self, key: &str, value: bool) -> &mut Obj {
        self.raw(key, if value { "true" } else { "false" })
    }

    /// An object value, written by `fill` in place.
    pub fn obj(&mut self, key: &str, fill: impl FnOnce(&mut Obj)) -> &mut Obj {
        let out = std::mem::take(self.key(key));
        let mut inner = Obj {
            start: out.len(),
            out,
        };
        inner.out.push('{');
        fill(&mut inner);
        self.out = inner.end();
        self
    }

    /// A value written by `write` straight into the text.
    pub fn with(&mut self, key: &str, write: impl FnOnce(&mut String)) -> &mut Obj {
        write(self.key(key));
        self
    }

    pub fn end(mut self) -> String {
        self.out.push('}');
        self.out
    }
}
