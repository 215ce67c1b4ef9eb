//! A JSON parser with JavaScript `JSON.parse` semantics.
//!
//! Why not `serde_json::Value` as is: the reference parses request bodies with
//! `JSON.parse`, and serde_json differs from it in ways a peer can reach:
//!
//! * **lone surrogate escapes** (`"\ud800"`) are valid for `JSON.parse` and an
//!   error for serde_json;
//! * **duplicate keys**: JS keeps the key at its *first* position with the
//!   *last* value;
//! * **key order**: JS lists array-index keys (`"0"`, `"7"`, …) first in
//!   numeric order, then the other keys in insertion order. zod reports
//!   unknown keys in that order, and the enqueue error message shows them;
//! * **depth**: V8's parser is iterative, so any nesting that fits in the body
//!   cap parses. A recursive parser (serde_json stops at 128) would answer
//!   "not valid JSON" where the reference answers with a version or schema
//!   error. This parser keeps its own stack, and values live in one flat
//!   arena, so neither parsing nor dropping a deep value can overflow the
//!   thread stack.
//!
//! Numbers are IEEE doubles exactly as JS reads them (Rust's `f64` parser
//! rounds correctly, like V8): `1e400` is `Infinity`, `-0` is `-0`, and `5`,
//! `5.0` and `5e0` are the same integer.
//!
//! Strings: the text is valid UTF-8 (it came from a JS string or from UTF-8
//! decoding), so only `\u` escapes can produce a lone surrogate. Such a
//! string is kept as Rust text with U+FFFD in place of each lone surrogate
//! (one UTF-16 unit and one code point, like the surrogate, so every length
//! rule sees the same count) **plus** its exact UTF-16 form, which is used for
//! equality and for handing the exact value back to JavaScript.

use std::collections::HashMap;

/// Index of a value in a [`Doc`].
pub type NodeId = u32;

/// A string value as JavaScript sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsStr {
    text: String,
    /// The exact UTF-16 code units, present only when the string holds a lone
    /// surrogate (then `text` has U+FFFD in its place).
    lone: Option<Box<[u16]>>,
}

impl JsStr {
    /// A well-formed string.
    pub fn new(text: impl Into<String>) -> JsStr {
        JsStr {
            text: text.into(),
            lone: None,
        }
    }

    /// Build from UTF-16 code units, which may hold lone surrogates.
    pub fn from_utf16(units: &[u16]) -> JsStr {
        let mut text = String::with_capacity(units.len());
        let mut lone = false;
        for r in char::decode_utf16(units.iter().copied()) {
            match r {
                Ok(c) => text.push(c),
                Err(_) => {
                    lone = true;
                    text.push('\u{FFFD}');
                }
            }
        }
        JsStr {
            text,
            lone: lone.then(|| units.to_vec().into_boxed_slice()),
        }
    }

    /// The text; lone surrogates read as U+FFFD (what UTF-8 encoding in
    /// Node gives them too).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The text, moved out; lone surrogates read as U+FFFD.
    pub fn into_string(self) -> String {
        self.text
    }

    /// True when the string holds a lone surrogate.
    pub fn has_lone_surrogate(&self) -> bool {
        self.lone.is_some()
    }

    /// The exact UTF-16 units when the string holds a lone surrogate.
    pub fn lone_utf16(&self) -> Option<&[u16]> {
        self.lone.as_deref()
    }

    /// JS `===` against a well-formed string.
    pub fn is(&self, other: &str) -> bool {
        self.lone.is_none() && self.text == other
    }

    /// JS `.length` (UTF-16 units).
    pub fn utf16_len(&self) -> usize {
        utf16_len(&self.text)
    }

    /// Length in code points (a lone surrogate counts as one).
    pub fn code_points(&self) -> usize {
        self.text.chars().count()
    }

    /// Overwrite the text with zeros (for a string that held a secret).
    pub fn wipe(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.text);
        if let Some(units) = self.lone.as_mut() {
            zeroize::Zeroize::zeroize(&mut units[..]);
        }
    }

    /// Append `JSON.stringify(this)` to `out`.
    pub fn write_json(&self, out: &mut String) {
        match &self.lone {
            None => write_json_str(&self.text, out),
            Some(units) => write_json_utf16(units, out),
        }
    }
}

/// JS `.length` of a well-formed string.
pub fn utf16_len(s: &str) -> usize {
    // Every char is one unit except the astral ones (4 UTF-8 bytes), which
    // are two: count them from the bytes without decoding.
    if s.is_ascii() {
        return s.len();
    }
    s.chars().map(char::len_utf16).sum()
}

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

fn write_json_utf16(units: &[u16], out: &mut String) {
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

/// One parsed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Number(f64),
    String(JsStr),
    Array(Vec<NodeId>),
    /// Entries in JS own-key order, keys unique (last value won).
    Object(Vec<(JsStr, NodeId)>),
}

/// A parsed JSON text: values in a flat arena, the root last.
#[derive(Debug, Clone)]
pub struct Doc {
    nodes: Vec<Node>,
    root: NodeId,
}

/// Why a text is not JSON (the reference never shows the reason; this is for
/// our own diagnostics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset where parsing stopped.
    pub offset: usize,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid JSON at byte {}", self.offset)
    }
}

impl std::error::Error for ParseError {}

impl Doc {
    /// Overwrite every string and key with zeros: for a document that held
    /// key material or a plaintext, before it is dropped.
    pub fn wipe(&mut self) {
        for node in &mut self.nodes {
            match node {
                Node::String(s) => s.wipe(),
                Node::Object(members) => members.iter_mut().for_each(|(k, _)| k.wipe()),
                _ => {}
            }
        }
    }

    pub fn root(&self) -> NodeId {
        self.root
    }

    /// The value at `id`. Ids come from this document; a foreign id reads as
    /// `null` rather than panicking.
    pub fn node(&self, id: NodeId) -> &Node {
        const NULL: Node = Node::Null;
        self.nodes.get(id as usize).unwrap_or(&NULL)
    }

    /// `obj[key]` for an own key of an object node (JS `undefined` → `None`).
    pub fn get(&self, obj: NodeId, key: &str) -> Option<NodeId> {
        match self.node(obj) {
            Node::Object(entries) => entries.iter().find(|(k, _)| k.is(key)).map(|(_, v)| *v),
            _ => None,
        }
    }

    /// The string at `id`, if it is one.
    pub fn str(&self, id: NodeId) -> Option<&JsStr> {
        match self.node(id) {
            Node::String(s) => Some(s),
            _ => None,
        }
    }

    /// Move the string at `id` out of the document (leaving an empty string
    /// behind), so a large value can be handed on without a copy.
    pub fn take_str(&mut self, id: NodeId) -> Option<JsStr> {
        match self.nodes.get_mut(id as usize) {
            Some(Node::String(s)) => Some(std::mem::replace(s, JsStr::new(String::new()))),
            _ => None,
        }
    }

    /// Number of values in the document.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never true for a parsed document (it has a root).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `JSON.stringify` of the value at `id` (iterative, so any depth).
    pub fn to_json(&self, id: NodeId) -> String {
        enum Step {
            Value(NodeId),
            Text(&'static str),
            Key(usize, usize),
        }
        let mut out = String::new();
        let mut stack = vec![Step::Value(id)];
        while let Some(step) = stack.pop() {
            match step {
                Step::Text(t) => out.push_str(t),
                Step::Key(obj, i) => {
                    if let Some(Node::Object(entries)) = self.nodes.get(obj) {
                        if let Some((k, _)) = entries.get(i) {
                            k.write_json(&mut out);
                            out.push(':');
                        }
                    }
                }
                Step::Value(v) => match self.node(v) {
                    Node::Null => out.push_str("null"),
                    Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                    Node::Number(n) => push_js_number(&mut out, *n),
                    Node::String(s) => s.write_json(&mut out),
                    Node::Array(items) => {
                        stack.push(Step::Text("]"));
                        for (i, item) in items.iter().enumerate().rev() {
                            stack.push(Step::Value(*item));
                            if i > 0 {
                                stack.push(Step::Text(","));
                            }
                        }
                        out.push('[');
                    }
                    Node::Object(entries) => {
                        stack.push(Step::Text("}"));
                        for (i, (_, item)) in entries.iter().enumerate().rev() {
                            stack.push(Step::Value(*item));
                            stack.push(Step::Key(v as usize, i));
                            if i > 0 {
                                stack.push(Step::Text(","));
                            }
                        }
                        out.push('{');
                    }
                },
            }
        }
        out
    }
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
pub(crate) fn exact_integer(n: f64) -> Option<i64> {
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
fn shortest_js_number(n: f64) -> String {
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

/// Is `key` an array index (canonical decimal below 2^32 - 1)? JS lists
/// those own keys first, in numeric order.
fn array_index(key: &str) -> Option<u32> {
    let b = key.as_bytes();
    if b.is_empty() || b.len() > 10 || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    if !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = key.parse().ok()?;
    (v < u64::from(u32::MAX)).then_some(v as u32)
}

/// An object under construction.
struct ObjBuilder {
    entries: Vec<(JsStr, NodeId)>,
    /// Key → position, built once an object grows past a few keys so
    /// duplicate detection stays linear.
    index: Option<HashMap<JsStr, usize>>,
    has_index_keys: bool,
    pending_key: Option<JsStr>,
}

impl ObjBuilder {
    fn new() -> Self {
        ObjBuilder {
            entries: Vec::new(),
            index: None,
            has_index_keys: false,
            pending_key: None,
        }
    }

    fn insert(&mut self, key: JsStr, value: NodeId) {
        const INDEX_FROM: usize = 12;
        if let Some(index) = &mut self.index {
            if let Some(&pos) = index.get(&key) {
                if let Some(slot) = self.entries.get_mut(pos) {
                    slot.1 = value;
                }
                return;
            }
            index.insert(key.clone(), self.entries.len());
        } else if let Some(slot) = self.entries.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
            return;
        }
        if !self.has_index_keys && key.lone.is_none() && array_index(&key.text).is_some() {
            self.has_index_keys = true;
        }
        self.entries.push((key, value));
        if self.index.is_none() && self.entries.len() >= INDEX_FROM {
            let map = self
                .entries
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect();
            self.index = Some(map);
        }
    }

    fn finish(mut self) -> Vec<(JsStr, NodeId)> {
        if self.has_index_keys {
            // Stable: index keys ascending first, the rest keep insertion order.
            self.entries.sort_by_key(|(k, _)| match k.lone {
                None => array_index(&k.text).map_or((1, 0), |i| (0, i)),
                Some(_) => (1, 0),
            });
        }
        self.entries
    }
}

enum Frame {
    Array(Vec<NodeId>),
    Object(ObjBuilder),
}

/// How many bytes from `at` come before the first `"`, `\\` or control byte
/// (or the end): the plain part of a string literal, which is copied as is.
/// Those three are ASCII, so the count always ends on a character boundary.
fn plain_len(b: &[u8], at: usize) -> usize {
    let mut i = at;
    #[cfg(target_arch = "x86_64")]
    while let Some(chunk) = b.get(i..i + 16) {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        // SAFETY: SSE2 is part of the x86_64 baseline, and `chunk` has
        // exactly 16 readable bytes for the unaligned load.
        let special = unsafe {
            let x = _mm_loadu_si128(chunk.as_ptr().cast());
            let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
            // x <= 0x1f (unsigned) exactly when max(x, 0x1f) == 0x1f.
            let control = _mm_cmpeq_epi8(_mm_max_epu8(x, _mm_set1_epi8(0x1f)), _mm_set1_epi8(0x1f));
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control))
        };
        if special != 0 {
            return i + special.trailing_zeros() as usize - at;
        }
        i += 16;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        i += 1;
    }
    i - at
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    nodes: Vec<Node>,
}

/// Parse `text` exactly as `JSON.parse` would accept it.
pub fn parse(text: &str) -> Result<Doc, ParseError> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        nodes: Vec::new(),
    };
    let root = p.run()?;
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return Err(p.err());
    }
    Ok(Doc {
        nodes: p.nodes,
        root,
    })
}

impl Parser<'_> {
    fn err(&self) -> ParseError {
        ParseError { offset: self.pos }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        (self.nodes.len() - 1) as NodeId
    }

    fn run(&mut self) -> Result<NodeId, ParseError> {
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            // Parse one value start.
            self.skip_ws();
            let value = match self.peek() {
                Some(b'{') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        self.push(Node::Object(Vec::new()))
                    } else {
                        let mut obj = ObjBuilder::new();
                        obj.pending_key = Some(self.key()?);
                        stack.push(Frame::Object(obj));
                        continue;
                    }
                }
                Some(b'[') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        self.push(Node::Array(Vec::new()))
                    } else {
                        stack.push(Frame::Array(Vec::new()));
                        continue;
                    }
                }
                Some(b'"') => {
                    let s = self.string()?;
                    self.push(Node::String(s))
                }
                Some(b't') => self.literal("true", Node::Bool(true))?,
                Some(b'f') => self.literal("false", Node::Bool(false))?,
                Some(b'n') => self.literal("null", Node::Null)?,
                Some(b'-' | b'0'..=b'9') => {
                    let n = self.number()?;
                    self.push(Node::Number(n))
                }
                _ => return Err(self.err()),
            };

            // Hand the value to its container; close containers as they end.
            let mut value = value;
            loop {
                let Some(frame) = stack.last_mut() else {
                    return Ok(value);
                };
                self.skip_ws();
                match frame {
                    Frame::Array(items) => {
                        items.push(value);
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                break;
                            }
                            Some(b']') => {
                                self.pos += 1;
                                let Some(Frame::Array(items)) = stack.pop() else {
                                    return Err(self.err());
                                };
                                value = self.push(Node::Array(items));
                            }
                            _ => return Err(self.err()),
                        }
                    }
                    Frame::Object(obj) => {
                        let key = obj.pending_key.take().ok_or_else(|| self.err())?;
                        obj.insert(key, value);
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                self.skip_ws();
                                let key = self.key()?;
                                if let Some(Frame::Object(obj)) = stack.last_mut() {
                                    obj.pending_key = Some(key);
                                }
                                break;
                            }
                            Some(b'}') => {
                                self.pos += 1;
                                let Some(Frame::Object(obj)) = stack.pop() else {
                                    return Err(self.err());
                                };
                                value = self.push(Node::Object(obj.finish()));
                            }
                            _ => return Err(self.err()),
                        }
                    }
                }
            }
        }
    }

    /// `"key"` then `:`.
    fn key(&mut self) -> Result<JsStr, ParseError> {
        if self.peek() != Some(b'"') {
            return Err(self.err());
        }
        let key = self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.err());
        }
        self.pos += 1;
        Ok(key)
    }

    fn literal(&mut self, word: &str, node: Node) -> Result<NodeId, ParseError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(self.push(node))
        } else {
            Err(self.err())
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<f64, ParseError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err()),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.err());
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.err());
            }
        }
        // The grammar above is JSON's; Rust's parser reads it with correct
        // rounding and overflows to infinity like JS.
        self.text[start..self.pos]
            .parse::<f64>()
            .map_err(|_| ParseError { offset: start })
    }

    fn hex4(&mut self) -> Result<u16, ParseError> {
        let chunk = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err())?;
        let mut v: u16 = 0;
        for &b in chunk {
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(self.err()),
            };
            v = (v << 4) | u16::from(d);
        }
        self.pos += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<JsStr, ParseError> {
        // at the opening quote
        self.pos += 1;
        let start = self.pos;
        // Fast path: no escapes.
        loop {
            self.pos += plain_len(self.bytes, self.pos);
            match self.peek() {
                None => return Err(self.err()),
                Some(b'"') => {
                    let s = &self.text[start..self.pos];
                    self.pos += 1;
                    return Ok(JsStr::new(s));
                }
                Some(b'\\') => break,
                Some(0..=0x1f) => return Err(self.err()),
                Some(_) => self.pos += 1,
            }
        }
        // Slow path: decode escapes into UTF-16 only if a lone surrogate
        // shows up; otherwise straight into a String.
        let mut out = String::with_capacity(self.pos - start + 16);
        out.push_str(&self.text[start..self.pos]);
        let mut lone = false;
        loop {
            let seg_start = self.pos;
            self.pos += plain_len(self.bytes, self.pos);
            out.push_str(&self.text[seg_start..self.pos]);
            match self.peek() {
                None | Some(0..=0x1f) => return Err(self.err()),
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                _ => {}
            }
            // backslash
            self.pos += 1;
            let esc = self.peek().ok_or_else(|| self.err())?;
            self.pos += 1;
            match esc {
                b'"' => out.push('"'),
                b'\\' => out.push('\\'),
                b'/' => out.push('/'),
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => {
                    let unit = self.hex4()?;
                    if (0xD800..0xDC00).contains(&unit)
                        && self.bytes.get(self.pos..self.pos + 2) == Some(b"\\u")
                    {
                        let save = self.pos;
                        self.pos += 2;
                        let low = self.hex4()?;
                        if (0xDC00..0xE000).contains(&low) {
                            let c = 0x10000
                                + ((u32::from(unit) - 0xD800) << 10)
                                + (u32::from(low) - 0xDC00);
                            out.push(char::from_u32(c).unwrap_or('\u{FFFD}'));
                            continue;
                        }
                        self.pos = save;
                    }
                    match char::from_u32(u32::from(unit)) {
                        Some(c) => out.push(c),
                        None => {
                            lone = true;
                            out.push('\u{FFFD}');
                        }
                    }
                }
                _ => {
                    return Err(ParseError {
                        offset: self.pos - 1,
                    })
                }
            }
        }
        if !lone {
            return Ok(JsStr::new(out));
        }
        // Rare: re-decode the literal to exact UTF-16 so the lone surrogates
        // survive for equality and for the trip back to JavaScript.
        let literal = &self.text[start..self.pos - 1];
        Ok(JsStr::from_utf16(&unescape_utf16(literal)))
    }
}

/// The surrogate unit a `\uXXXX` escape at `at` (the backslash) spells, if
/// it spells one.
fn surrogate_escape_at(b: &[u8], at: usize) -> Option<u16> {
    if b.get(at + 1) != Some(&b'u') {
        return None;
    }
    let hex = std::str::from_utf8(b.get(at + 2..at + 6)?).ok()?;
    let unit = u16::from_str_radix(hex, 16).ok()?;
    (0xD800..=0xDFFF).contains(&unit).then_some(unit)
}

/// `text` (JSON) with every `\u` escape of a lone surrogate replaced by
/// `\ufffd`, for serde_json, which refuses such escapes where `JSON.parse`
/// (and so `JSON.stringify`'s output, which writes them) takes them. The
/// replacement is what the Node-API boundary does to a lone surrogate in a
/// string anyway. Borrowed when there is none, the usual case.
pub fn lone_surrogates_replaced(text: &str) -> std::borrow::Cow<'_, str> {
    let b = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut at = 0;
    while at < b.len() {
        if b.get(at) != Some(&b'\\') {
            at += 1;
            continue;
        }
        let Some(unit) = surrogate_escape_at(b, at) else {
            // Any other escape is two bytes (a `\u` one is skipped the same
            // way; its hex digits hold no backslash).
            at += 2;
            continue;
        };
        let paired = (0xD800..=0xDBFF).contains(&unit)
            && surrogate_escape_at(b, at + 6).is_some_and(|low| (0xDC00..=0xDFFF).contains(&low));
        if paired {
            at += 12;
            continue;
        }
        let buf = out.get_or_insert_with(|| String::with_capacity(text.len()));
        buf.push_str(text.get(copied..at).unwrap_or_default());
        buf.push_str("\\ufffd");
        at += 6;
        copied = at;
    }
    match out {
        None => std::borrow::Cow::Borrowed(text),
        Some(mut buf) => {
            buf.push_str(text.get(copied..).unwrap_or_default());
            std::borrow::Cow::Owned(buf)
        }
    }
}

/// Decode an already-validated string literal body into UTF-16 units.
fn unescape_utf16(literal: &str) -> Vec<u16> {
    let mut units = Vec::with_capacity(literal.len());
    let mut chars = literal.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u16; 2];
            units.extend_from_slice(c.encode_utf16(&mut buf));
            continue;
        }
        let unit = match chars.next() {
            Some('b') => 0x8,
            Some('f') => 0xc,
            Some('n') => 0xa,
            Some('r') => 0xd,
            Some('t') => 0x9,
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                u16::from_str_radix(&hex, 16).unwrap_or(0xFFFD)
            }
            Some(other) => other as u16,
            None => break,
        };
        units.push(unit);
    }
    units
}

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

#[cfg(test)]
mod tests {
    /// The SIMD scan stops exactly where a byte-at-a-time scan does, for a
    /// special byte at every offset of blocks longer than one vector, and
    /// strings with long plain runs and escapes still parse to the same text.
    /// The byte-at-a-time writer `write_json_str` replaced, as the oracle.
    fn write_json_str_bytewise(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn write_json_str_escapes_exactly_what_json_stringify_does() {
        let specials = [
            '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}', '\u{1f}', '\u{7f}', 'é', '😀',
            '\u{2028}', 'a',
        ];
        for len in 0..70 {
            for &special in &specials {
                for at in 0..=len {
                    let text: String = (0..len)
                        .map(|i| if i == at { special } else { 'x' })
                        .collect();
                    let mut out = String::new();
                    write_json_str(&text, &mut out);
                    assert_eq!(out, write_json_str_bytewise(&text), "{text:?}");
                    // And JSON.parse (ours) reads it back.
                    let back = parse(&out).map(|d| d.str(d.root()).map(|s| s.as_str().to_string()));
                    assert_eq!(back.ok().flatten(), Some(text));
                }
            }
        }
        // Every control byte, in runs of every mix.
        let all: String = (0u32..0x80)
            .filter_map(char::from_u32)
            .cycle()
            .take(1000)
            .collect();
        let mut out = String::from("kept");
        write_json_str(&all, &mut out);
        assert_eq!(out, format!("kept{}", write_json_str_bytewise(&all)));
    }

    #[test]
    fn json_str_len_is_the_length_write_json_str_writes() {
        let long_mixed = "a\"b\\c\u{1}\u{e9}\u{1f600}\n".repeat(300);
        for s in [
            "",
            "plain",
            "\"",
            "\\",
            "\u{0}\u{8}\u{c}\u{1f}\u{7f}",
            "\u{2028}\u{20ac}",
            &long_mixed,
        ] {
            let mut out = String::new();
            write_json_str(s, &mut out);
            assert_eq!(json_str_len(s), out.len(), "{s:?}");
        }
    }

    #[test]
    fn plain_len_matches_a_byte_scan() {
        let naive = |b: &[u8], at: usize| {
            b[at..]
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                .unwrap_or(b.len() - at)
        };
        for len in 0..70 {
            for special in [b'"', b'\\', 0x00, 0x1f, b' ', 0x7f, 0x80, 0xff] {
                for at_special in 0..=len {
                    let mut b = vec![b'a'; len];
                    if at_special < len {
                        b[at_special] = special;
                    }
                    for start in [0, 1, 5, 16].into_iter().filter(|&s| s <= len) {
                        assert_eq!(super::plain_len(&b, start), naive(&b, start));
                    }
                }
            }
        }
        let long = format!("{}é\\n\\\"{}\\u00e9", "x".repeat(100), "y".repeat(37));
        let doc = super::parse(&format!("\"{long}\"")).map_err(|e| e.offset);
        let want = format!("{}é\n\"{}é", "x".repeat(100), "y".repeat(37));
        assert_eq!(
            doc.map(|d| d.str(d.root()).map(|s| s.as_str().to_string())),
            Ok(Some(want))
        );
    }

    use super::*;

    #[test]
    fn lone_surrogate_escapes_become_replacement_characters_for_serde() {
        let fixed = |t: &str| lone_surrogates_replaced(t).into_owned();
        assert_eq!(fixed(r#"{"a":"\ud800"}"#), r#"{"a":"\ufffd"}"#);
        assert_eq!(fixed(r#"["\udc00x","\uDBFF"]"#), r#"["\ufffdx","\ufffd"]"#);
        // A pair is kept; an escaped backslash before "ud800" is no escape.
        assert_eq!(fixed(r#""\ud83d\ude00""#), r#""\ud83d\ude00""#);
        assert_eq!(fixed(r#""\\ud800""#), r#""\\ud800""#);
        // A high surrogate followed by another high one: both lone.
        assert_eq!(fixed(r#""\ud800\ud800""#), r#""\ufffd\ufffd""#);
        assert!(matches!(
            lone_surrogates_replaced(r#"{"a":1}"#),
            std::borrow::Cow::Borrowed(_)
        ));
        // Truncated escapes are left for the parser to refuse.
        assert_eq!(fixed(r#""\ud8"#), r#""\ud8"#);
        let v: serde_json::Value =
            serde_json::from_str(&fixed(r#"{"label":"a\ud800b"}"#)).unwrap_or_default();
        assert_eq!(v["label"], "a\u{fffd}b");
    }

    fn p(text: &str) -> Doc {
        parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn accepts_what_json_parse_accepts() {
        for ok in [
            "0",
            "-0",
            "1e400",
            "5.0",
            " \t\n\r[] ",
            "\"\\ud800\"",
            "{\"a\":1,\"a\":2}",
            "[1,[2,[3]]]",
            "\"\\u00e9\\/\"",
            "-1.5E-3",
            "null",
        ] {
            assert!(parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            " ",
            "01",
            "1.",
            ".5",
            "+1",
            "[1,]",
            "{\"a\":1,}",
            "{a:1}",
            "'x'",
            "\"\t\"",
            "\u{feff}1",
            "NaN",
            "\"\\x\"",
            "\"\\u12\"",
            "[1 2]",
            "{\"a\" 1}",
            "tru",
            "1 2",
            "-",
            "1e",
            "[",
            "{\"a\":",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn numbers_are_doubles() {
        let d = p("[1e400,-0,5e0,123456789012345678901234567890]");
        let Node::Array(items) = d.node(d.root()) else {
            panic!()
        };
        let n = |i: usize| match d.node(items[i]) {
            Node::Number(n) => *n,
            _ => panic!(),
        };
        assert_eq!(n(0), f64::INFINITY);
        assert!(n(1) == 0.0 && n(1).is_sign_negative());
        assert_eq!(n(2), 5.0);
        assert_eq!(n(3), 1.2345678901234568e29);
    }

    #[test]
    fn duplicate_keys_keep_first_position_last_value() {
        let d = p(r#"{"b":1,"a":2,"b":3}"#);
        assert_eq!(d.to_json(d.root()), r#"{"b":3,"a":2}"#);
    }

    #[test]
    fn index_keys_come_first_in_numeric_order() {
        let d = p(r#"{"b":1,"10":2,"a":3,"2":4,"01":5,"4294967295":6,"4294967294":7}"#);
        assert_eq!(
            d.to_json(d.root()),
            r#"{"2":4,"10":2,"4294967294":7,"b":1,"a":3,"01":5,"4294967295":6}"#
        );
    }

    #[test]
    fn lone_surrogates_keep_lengths_and_identity() {
        let d = p(r#"{"\ud800":1,"\ufffd":2,"x":"a\udc00b","y":"\ud83d\ude00"}"#);
        let Node::Object(entries) = d.node(d.root()) else {
            panic!()
        };
        assert_eq!(
            entries.len(),
            2 + 2,
            "lone surrogate and U+FFFD are distinct keys"
        );
        let x = d.str(d.get(d.root(), "x").unwrap()).unwrap();
        assert!(x.has_lone_surrogate());
        assert_eq!((x.utf16_len(), x.code_points()), (3, 3));
        let y = d.str(d.get(d.root(), "y").unwrap()).unwrap();
        assert!(!y.has_lone_surrogate());
        assert_eq!((y.utf16_len(), y.code_points()), (2, 1));
        assert_eq!(
            d.to_json(d.root()),
            r#"{"\ud800":1,"�":2,"x":"a\udc00b","y":"😀"}"#
        );
    }

    #[test]
    fn deep_nesting_neither_overflows_nor_fails() {
        let depth = 200_000;
        let text = "[".repeat(depth) + &"]".repeat(depth);
        let d = p(&text);
        assert_eq!(d.len(), depth);
        let text = "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth);
        assert!(parse(&text).is_ok());
        assert!(parse(&"[".repeat(depth)).is_err());
    }

    #[test]
    fn many_keys_stay_linear_and_deduplicate() {
        let mut text = String::from("{");
        for i in 0..50_000 {
            text.push_str(&format!("\"k{}\":{},", i % 40_000, i));
        }
        text.push_str("\"end\":0}");
        let d = p(&text);
        let Node::Object(entries) = d.node(d.root()) else {
            panic!()
        };
        assert_eq!(entries.len(), 40_001);
        assert_eq!(
            d.get(d.root(), "k0").map(|v| d.node(v).clone()),
            Some(Node::Number(40_000.0))
        );
    }

    #[test]
    fn stringify_escapes_like_js() {
        let d = p(r#""\u0000\u001f\b\f\n\r\t\"\\/\u007f\u2028""#);
        assert_eq!(
            d.to_json(d.root()),
            "\"\\u0000\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\u{7f}\u{2028}\""
        );
    }

    #[test]
    fn number_to_string_matches_js() {
        for (n, s) in [
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (-1.5, "-1.5"),
            (123.456, "123.456"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ] {
            assert_eq!(js_number_to_string(n), s);
        }
    }

    #[test]
    fn integers_take_the_short_way_with_the_same_text() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut cases: Vec<f64> = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            9.0,
            10.0,
            1_764_500_000_000.0,
            9_007_199_254_740_991.0,
            -9_007_199_254_740_991.0,
            // From 2^53 on, the shortest digits are no longer the integer's.
            9_007_199_254_740_992.0,
            1_152_921_504_606_846_976.0,
            0.5,
            -2.5,
        ];
        for _ in 0..20_000 {
            let bits = next();
            cases.push((bits >> 11) as f64 * if bits & 1 == 0 { 1.0 } else { -1.0 });
            cases.push((bits >> 40) as f64);
            cases.push(f64::from_bits(bits));
        }
        for n in cases {
            let mut fast = String::from("x");
            push_js_number(&mut fast, n);
            let want = if n == 0.0 {
                "0".to_string()
            } else {
                shortest_js_number(n)
            };
            assert_eq!(fast, format!("x{want}"), "{n:e}");
        }
        assert_eq!(
            js_number_to_string(1_152_921_504_606_846_976.0),
            "1152921504606847000"
        );
        assert_eq!(js_number_to_string(-0.0), "0");
    }

    #[test]
    fn to_number_follows_js() {
        for (text, want) in [
            ("5", 5.0),
            ("\" 0x10 \"", 16.0),
            ("\"1e3\"", 1000.0),
            ("\"\"", 0.0),
            ("null", 0.0),
            ("true", 1.0),
            ("[]", 0.0),
            ("[[\"7\"]]", 7.0),
            ("[null]", 0.0),
            ("\"-Infinity\"", f64::NEG_INFINITY),
        ] {
            let d = p(text);
            assert_eq!(js_to_number(&d, d.root()), want, "{text}");
        }
        for text in [
            "{}",
            "[1,2]",
            "\"abc\"",
            "[true]",
            "\"infinity\"",
            "\"-0x1\"",
            "\"1e\"",
        ] {
            let d = p(text);
            assert!(js_to_number(&d, d.root()).is_nan(), "{text}");
        }
    }
}
