//! A JSON reader with JavaScript's `JSON.parse` semantics, for the places where
//! the reference parses bytes that came off the wire or out of a decryption
//! (the envelope's inner object and signed claims, the site-keys secret).
//!
//! Why not `serde_json`: it differs from `JSON.parse` on inputs a peer can
//! send, and each difference would change an outcome.
//! * `\ud800`-style lone surrogate escapes: `JSON.parse` accepts them,
//!   `serde_json` refuses the whole document.
//! * nesting depth: `serde_json` stops at 128 levels, V8 does not. This reader
//!   keeps its own stack, so depth costs heap, never the thread's stack; values
//!   nested deeper than [`KEEP_DEPTH`] are validated but not kept (they read as
//!   `null`), so that dropping the tree cannot recurse deeply either. Every
//!   caller here reads top-level fields only.
//! * duplicate keys: both "last wins" only with `Value`; derived structs refuse.
//!
//! Grammar is strict RFC 8259, like `JSON.parse`: whitespace is only space,
//! tab, LF and CR (a BOM is an error), no trailing commas, no leading zeros,
//! raw control characters inside strings are errors.

/// Containers nested deeper than this are checked for syntax and discarded.
pub const KEEP_DEPTH: usize = 256;

/// A string as JavaScript holds it. `text` is exact unless the JSON contained a
/// lone surrogate escape, which no Rust `String` can hold: then `text` has
/// U+FFFD in its place and `utf16` carries the exact code units.
#[derive(Debug, Clone, PartialEq)]
pub struct JsString {
    pub text: String,
    pub utf16: Option<Vec<u16>>,
}

impl JsString {
    /// JavaScript `===` against a well-formed string.
    pub fn is(&self, other: &str) -> bool {
        self.utf16.is_none() && self.text == other
    }
}

/// A parsed JSON value. Objects keep every member in document order,
/// duplicates included; [`Value::get`] applies "last wins".
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(JsString),
    Array(Vec<Value>),
    Object(Vec<(JsString, Value)>),
}

impl Value {
    /// Property lookup with `JSON.parse`'s duplicate-key rule (the last
    /// occurrence wins). Only objects have properties here: the callers ask
    /// about data fields, which arrays, strings and numbers never carry.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members
                .iter()
                .rev()
                .find(|(k, _)| k.is(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// Like [`Value::get`], but moves the value out (for large strings).
    pub fn take(&mut self, key: &str) -> Option<Value> {
        match self {
            Value::Object(members) => {
                let at = members.iter().rposition(|(k, _)| k.is(key))?;
                Some(std::mem::replace(&mut members[at].1, Value::Null))
            }
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&JsString> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

/// Why a text is not JSON. Callers only need to know that it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub offset: usize,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid JSON at byte {}", self.offset)
    }
}

impl std::error::Error for ParseError {}

/// Parse a complete JSON text.
pub fn parse(text: &str) -> Result<Value, ParseError> {
    Parser {
        bytes: text.as_bytes(),
        src: text,
        at: 0,
    }
    .document()
}

/// An open container while the parser descends.
enum Frame {
    Array(Vec<Value>),
    Object(Vec<(JsString, Value)>, JsString),
}

struct Parser<'a> {
    bytes: &'a [u8],
    src: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn fail<T>(&self) -> Result<T, ParseError> {
        Err(ParseError { offset: self.at })
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), ParseError> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            self.fail()
        }
    }

    fn document(mut self) -> Result<Value, ParseError> {
        let mut stack: Vec<Frame> = Vec::new();
        'value: loop {
            // Read one value, or open a container and go round again.
            self.skip_ws();
            let mut value = match self.peek() {
                Some(b'{' | b'[') if stack.len() >= KEEP_DEPTH => {
                    self.skip_container()?;
                    Value::Null
                }
                Some(b'{') => {
                    self.at += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.at += 1;
                        Value::Object(Vec::new())
                    } else {
                        let key = self.member_key()?;
                        stack.push(Frame::Object(Vec::new(), key));
                        continue 'value;
                    }
                }
                Some(b'[') => {
                    self.at += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.at += 1;
                        Value::Array(Vec::new())
                    } else {
                        stack.push(Frame::Array(Vec::new()));
                        continue 'value;
                    }
                }
                Some(b'"') => Value::String(self.string()?),
                Some(b't') => self.literal(b"true", Value::Bool(true))?,
                Some(b'f') => self.literal(b"false", Value::Bool(false))?,
                Some(b'n') => self.literal(b"null", Value::Null)?,
                Some(b'-' | b'0'..=b'9') => Value::Number(self.number()?),
                _ => return self.fail(),
            };
            // Hand the finished value to its container, closing as many
            // containers as the input closes.
            loop {
                self.skip_ws();
                match stack.last_mut() {
                    None => {
                        return if self.at == self.bytes.len() {
                            Ok(value)
                        } else {
                            self.fail()
                        };
                    }
                    Some(Frame::Array(items)) => {
                        items.push(value);
                        match self.peek() {
                            Some(b',') => {
                                self.at += 1;
                                continue 'value;
                            }
                            Some(b']') => {
                                self.at += 1;
                                match stack.pop() {
                                    Some(Frame::Array(items)) => value = Value::Array(items),
                                    _ => return self.fail(),
                                }
                            }
                            _ => return self.fail(),
                        }
                    }
                    Some(Frame::Object(members, key)) => {
                        let name = std::mem::replace(
                            key,
                            JsString {
                                text: String::new(),
                                utf16: None,
                            },
                        );
                        members.push((name, value));
                        match self.peek() {
                            Some(b',') => {
                                self.at += 1;
                                self.skip_ws();
                                let next = self.member_key()?;
                                if let Some(Frame::Object(_, key)) = stack.last_mut() {
                                    *key = next;
                                }
                                continue 'value;
                            }
                            Some(b'}') => {
                                self.at += 1;
                                match stack.pop() {
                                    Some(Frame::Object(members, _)) => {
                                        value = Value::Object(members)
                                    }
                                    _ => return self.fail(),
                                }
                            }
                            _ => return self.fail(),
                        }
                    }
                }
            }
        }
    }

    /// Validate one container (at its opening bracket) without building it.
    fn skip_container(&mut self) -> Result<(), ParseError> {
        // Each entry: the closing bracket this level expects.
        let mut open: Vec<u8> = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'{') => {
                    self.at += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.at += 1;
                    } else {
                        self.member_key()?;
                        open.push(b'}');
                        continue;
                    }
                }
                Some(b'[') => {
                    self.at += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.at += 1;
                    } else {
                        open.push(b']');
                        continue;
                    }
                }
                Some(b'"') => {
                    self.string()?;
                }
                Some(b't') => {
                    self.literal(b"true", Value::Null)?;
                }
                Some(b'f') => {
                    self.literal(b"false", Value::Null)?;
                }
                Some(b'n') => {
                    self.literal(b"null", Value::Null)?;
                }
                Some(b'-' | b'0'..=b'9') => {
                    self.number()?;
                }
                _ => return self.fail(),
            }
            // A value ended: continue its container or close containers.
            loop {
                self.skip_ws();
                let Some(&close) = open.last() else {
                    return Ok(());
                };
                match self.peek() {
                    Some(b',') => {
                        self.at += 1;
                        if close == b'}' {
                            self.skip_ws();
                            self.member_key()?;
                        }
                        break;
                    }
                    Some(c) if c == close => {
                        self.at += 1;
                        open.pop();
                    }
                    _ => return self.fail(),
                }
            }
        }
    }

    /// `"key"` then `:` (leading whitespace already skipped).
    fn member_key(&mut self) -> Result<JsString, ParseError> {
        if self.peek() != Some(b'"') {
            return self.fail();
        }
        let key = self.string()?;
        self.skip_ws();
        self.expect(b':')?;
        Ok(key)
    }

    fn literal(&mut self, word: &[u8], value: Value) -> Result<Value, ParseError> {
        if self.bytes.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(value)
        } else {
            self.fail()
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<f64, ParseError> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.fail(),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return self.fail();
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if self.digits() == 0 {
                return self.fail();
            }
        }
        // Rust's float parsing is correctly rounded, as JavaScript's is, and
        // overflows to infinity the same way (`1e400`).
        let literal = self.src.get(start..self.at).unwrap_or("");
        literal.parse::<f64>().or_else(|_| self.fail())
    }

    /// A string token, starting at its opening quote.
    fn string(&mut self) -> Result<JsString, ParseError> {
        self.at += 1; // opening quote
        let start = self.at;
        let mut text = String::new();
        let mut run = start;
        let mut lone = false;
        loop {
            let Some(byte) = self.peek() else {
                return self.fail();
            };
            match byte {
                b'"' => {
                    text.push_str(self.src.get(run..self.at).unwrap_or(""));
                    let raw_end = self.at;
                    self.at += 1;
                    let utf16 = if lone {
                        Some(self.utf16_of(start, raw_end))
                    } else {
                        None
                    };
                    return Ok(JsString { text, utf16 });
                }
                b'\\' => {
                    text.push_str(self.src.get(run..self.at).unwrap_or(""));
                    self.at += 1;
                    let Some(escape) = self.peek() else {
                        return self.fail();
                    };
                    self.at += 1;
                    match escape {
                        b'"' => text.push('"'),
                        b'\\' => text.push('\\'),
                        b'/' => text.push('/'),
                        b'b' => text.push('\u{8}'),
                        b'f' => text.push('\u{c}'),
                        b'n' => text.push('\n'),
                        b'r' => text.push('\r'),
                        b't' => text.push('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            match unit {
                                0xD800..=0xDBFF => {
                                    // A high surrogate pairs only with an
                                    // immediately following `\u` low surrogate.
                                    if let Some(low) = self.low_surrogate_after() {
                                        let cp = 0x10000
                                            + ((u32::from(unit) - 0xD800) << 10)
                                            + (u32::from(low) - 0xDC00);
                                        text.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                                    } else {
                                        lone = true;
                                        text.push('\u{FFFD}');
                                    }
                                }
                                0xDC00..=0xDFFF => {
                                    lone = true;
                                    text.push('\u{FFFD}');
                                }
                                _ => {
                                    text.push(char::from_u32(u32::from(unit)).unwrap_or('\u{FFFD}'))
                                }
                            }
                        }
                        _ => {
                            self.at -= 1;
                            return self.fail();
                        }
                    }
                    run = self.at;
                }
                0x00..=0x1F => return self.fail(),
                _ => self.at += 1,
            }
        }
    }

    fn hex4(&mut self) -> Result<u16, ParseError> {
        let mut unit: u16 = 0;
        for _ in 0..4 {
            let digit = match self.peek() {
                Some(c @ b'0'..=b'9') => c - b'0',
                Some(c @ b'a'..=b'f') => c - b'a' + 10,
                Some(c @ b'A'..=b'F') => c - b'A' + 10,
                _ => return self.fail(),
            };
            unit = (unit << 4) | u16::from(digit);
            self.at += 1;
        }
        Ok(unit)
    }

    /// If `\uDC00`..`\uDFFF` follows, consume it and return it.
    fn low_surrogate_after(&mut self) -> Option<u16> {
        if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
            return None;
        }
        let save = self.at;
        self.at += 2;
        match self.hex4() {
            Ok(low @ 0xDC00..=0xDFFF) => Some(low),
            _ => {
                self.at = save;
                None
            }
        }
    }

    /// Exact UTF-16 code units of an already validated string body (only
    /// needed when it holds a lone surrogate).
    fn utf16_of(&self, start: usize, end: usize) -> Vec<u16> {
        let mut sub = Parser {
            bytes: self.bytes.get(..end).unwrap_or(&[]),
            src: self.src.get(..end).unwrap_or(""),
            at: start,
        };
        let mut out = Vec::new();
        while let Some(byte) = sub.peek() {
            if byte == b'\\' {
                sub.at += 1;
                let escape = sub.peek().unwrap_or(b'"');
                sub.at += 1;
                let unit = match escape {
                    b'b' => 0x08,
                    b'f' => 0x0C,
                    b'n' => 0x0A,
                    b'r' => 0x0D,
                    b't' => 0x09,
                    b'u' => sub.hex4().unwrap_or(0xFFFD),
                    other => u16::from(other),
                };
                out.push(unit);
            } else {
                // Copy one raw UTF-8 character as UTF-16.
                let rest = sub.src.get(sub.at..).unwrap_or("");
                let Some(ch) = rest.chars().next() else { break };
                let mut buf = [0u16; 2];
                out.extend_from_slice(ch.encode_utf16(&mut buf));
                sub.at += ch.len_utf8();
            }
        }
        out
    }
}

/// JavaScript's `String(n)` / `JSON.stringify(n)` for a number: plain digits
/// for integers below 1e21, shortest round-trip digits otherwise, exponent
/// form outside [1e-7, 1e21). (`JSON.stringify` writes `null` for non-finite
/// numbers; callers that serialise handle that themselves.)
pub fn number_to_string(n: f64) -> String {
    if n.is_nan() {
        return "NaN".into();
    }
    if n == 0.0 {
        return "0".into(); // also -0
    }
    if n.is_infinite() {
        return if n > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 {
        // Exact integer with at most 16 digits: its digits are its shortest
        // round-trip form. (Larger ones are padded with zeros below, like JS.)
        return format!("{n:.0}");
    }
    // Rust's `{:e}` gives the shortest round-trip digits, like JavaScript's
    // Number::toString; only the layout differs.
    let sci = format!("{:e}", n.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let point = exp + 1; // position of the decimal point after the first digit
    let mut out = String::new();
    if n < 0.0 {
        out.push('-');
    }
    if k <= point && point <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (point - k) as usize));
    } else if 0 < point && point <= 21 {
        out.push_str(digits.get(..point as usize).unwrap_or(""));
        out.push('.');
        out.push_str(digits.get(point as usize..).unwrap_or(""));
    } else if -6 < point && point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-point) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(digits.get(..1).unwrap_or(""));
        if k > 1 {
            out.push('.');
            out.push_str(digits.get(1..).unwrap_or(""));
        }
        out.push('e');
        out.push(if point - 1 < 0 { '-' } else { '+' });
        out.push_str(&(point - 1).abs().to_string());
    }
    out
}

/// Append `JSON.stringify(text)`: quotes, `\"` and `\\`, the short escapes
/// `\b \t \n \f \r`, other C0 controls as lowercase `\u00xx`; everything
/// else (U+007F, U+2028/2029, all non-ASCII) raw.
pub fn write_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut run = 0;
    for (at, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(bytes.get(run..at).unwrap_or(&[]));
        push_escape(out, u16::from(b));
        run = at + 1;
    }
    out.extend_from_slice(bytes.get(run..).unwrap_or(&[]));
    out.push(b'"');
}

/// Append `JSON.stringify(text)` for a JavaScript string given as UTF-16 code
/// units: as [`write_string`], and a lone surrogate is written as `\udxxx`
/// (well-formed `JSON.stringify`), so no information is lost.
pub fn write_string_utf16(out: &mut Vec<u8>, units: &[u16]) {
    out.reserve(units.len() + 2);
    out.push(b'"');
    let mut at = 0;
    while let Some(&unit) = units.get(at) {
        at += 1;
        match unit {
            0x20..=0x7F if unit != u16::from(b'"') && unit != u16::from(b'\\') => {
                out.push(unit as u8)
            }
            0x00..=0x7F => push_escape(out, unit),
            0xD800..=0xDBFF => match units.get(at) {
                Some(&low @ 0xDC00..=0xDFFF) => {
                    at += 1;
                    let cp =
                        0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                    push_char(out, cp);
                }
                _ => push_escape(out, unit),
            },
            0xDC00..=0xDFFF => push_escape(out, unit),
            _ => push_char(out, u32::from(unit)),
        }
    }
    out.push(b'"');
}

fn push_char(out: &mut Vec<u8>, cp: u32) {
    let ch = char::from_u32(cp).unwrap_or('\u{FFFD}');
    let mut buf = [0u8; 4];
    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
}

fn push_escape(out: &mut Vec<u8>, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match unit {
        0x22 => out.extend_from_slice(b"\\\""),
        0x5C => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x09 => out.extend_from_slice(b"\\t"),
        0x0A => out.extend_from_slice(b"\\n"),
        0x0C => out.extend_from_slice(b"\\f"),
        0x0D => out.extend_from_slice(b"\\r"),
        _ => {
            out.extend_from_slice(b"\\u");
            for shift in [12, 8, 4, 0] {
                out.push(HEX[usize::from((unit >> shift) & 0xF)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::String(JsString {
            text: text.to_string(),
            utf16: None,
        })
    }

    #[test]
    fn numbers_format_like_javascript() {
        let cases: [(f64, &str); 14] = [
            (0.0, "0"),
            (-0.0, "0"),
            (1767225660000.0, "1767225660000"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (1e21, "1e+21"),
            (123456789012345680000.0, "123456789012345680000"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::INFINITY, "Infinity"),
            (5e-324, "5e-324"),
        ];
        for (n, want) in cases {
            assert_eq!(number_to_string(n), want, "{n:e}");
        }
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let text = "a\"b\\c/\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}\u{2028}é😀";
        let mut out = Vec::new();
        write_string(&mut out, text);
        let want = "\"a\\\"b\\\\c/\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f}\u{2028}é😀\"";
        assert_eq!(String::from_utf8_lossy(&out), want);
        let units: Vec<u16> = text.encode_utf16().collect();
        let mut out16 = Vec::new();
        write_string_utf16(&mut out16, &units);
        assert_eq!(out16, out);
        let mut lone = Vec::new();
        write_string_utf16(&mut lone, &[0x61, 0xD800, 0x62, 0xDC00]);
        assert_eq!(String::from_utf8_lossy(&lone), "\"a\\ud800b\\udc00\"");
    }

    #[test]
    fn scalars() {
        assert_eq!(parse("null"), Ok(Value::Null));
        assert_eq!(parse(" true "), Ok(Value::Bool(true)));
        assert_eq!(parse("-0.5e1"), Ok(Value::Number(-5.0)));
        assert_eq!(parse("1767312000000"), Ok(Value::Number(1767312000000.0)));
        assert_eq!(parse("1.767312e12"), Ok(Value::Number(1767312000000.0)));
        assert_eq!(parse("1e400"), Ok(Value::Number(f64::INFINITY)));
        assert_eq!(parse("\"a\\u00e9\\n\""), Ok(s("aé\n")));
    }

    #[test]
    fn rejects_what_json_parse_rejects() {
        for bad in [
            "",
            " ",
            "01",
            "1.",
            ".5",
            "+1",
            "-",
            "1e",
            "[1,]",
            "{\"a\":1,}",
            "{a:1}",
            "'x'",
            "\"\t\"",
            "\u{feff}{}",
            "nul",
            "[1] x",
            "\"\\x\"",
            "\"\\u12\"",
            "{\"a\" 1}",
            "[",
            "{",
            "\"abc",
        ] {
            assert!(parse(bad).is_err(), "should refuse {bad:?}");
        }
    }

    #[test]
    fn duplicate_keys_last_wins() {
        let v = parse(r#"{"a":1,"b":2,"a":3}"#).unwrap_or(Value::Null);
        assert_eq!(v.get("a"), Some(&Value::Number(3.0)));
        assert_eq!(v.get("b"), Some(&Value::Number(2.0)));
        assert_eq!(v.get("c"), None);
    }

    #[test]
    fn surrogates() {
        assert_eq!(parse(r#""\ud83d\ude00""#), Ok(s("😀")));
        let lone = parse(r#""a\ud800b""#).unwrap_or(Value::Null);
        let js = lone.as_str().cloned().unwrap_or(JsString {
            text: String::new(),
            utf16: None,
        });
        assert_eq!(js.text, "a\u{FFFD}b");
        assert_eq!(js.utf16, Some(vec![0x61, 0xD800, 0x62]));
        assert!(!js.is("a\u{FFFD}b"));
        let low_first = parse(r#""\udc00\ud800""#).unwrap_or(Value::Null);
        assert_eq!(
            low_first.as_str().and_then(|j| j.utf16.clone()),
            Some(vec![0xDC00, 0xD800])
        );
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let depth = 100_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(parse(&text).is_ok());
        let objects = format!("{}1{}", "{\"a\":[".repeat(depth), "]}".repeat(depth));
        assert!(parse(&objects).is_ok());
        let bad_deep = format!("{}1,{}", "{\"a\":[".repeat(depth), "]}".repeat(depth));
        assert!(parse(&bad_deep).is_err());
        let unbalanced = format!("{}{}", "[".repeat(depth), "]".repeat(depth - 1));
        assert!(parse(&unbalanced).is_err());
    }

    #[test]
    fn nested_objects_and_take() {
        let mut v = parse(r#"{"x":[1,{"y":"z"}],"p":"big"}"#).unwrap_or(Value::Null);
        assert_eq!(v.take("p"), Some(s("big")));
        match v.get("x") {
            Some(Value::Array(items)) => assert_eq!(items[1].get("y"), Some(&s("z"))),
            other => panic!("unexpected {other:?}"),
        }
    }
}
