//! The parser: `JSON.parse`'s grammar, duplicate-key and key-order rules,
//! with its own stack (see the module docs of [`super`]).

use std::collections::HashMap;

use super::{Doc, JsStr, Node, NodeId, ParseError, MAX_DEPTH};

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
pub(super) fn plain_len(b: &[u8], at: usize) -> usize {
    let rest = b.get(at..).unwrap_or_default();
    rest.iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .unwrap_or(rest.len())
}

/// The code unit spelled by the four hex digits a `\u` escape starts
/// with (either case), read from the front of `bytes`.
fn hex4(bytes: &[u8]) -> Option<u16> {
    let mut v: u16 = 0;
    for &b in bytes.get(..4)? {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u16::from(d);
    }
    Some(v)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    nodes: Vec<Node>,
    max_depth: usize,
}

/// Parse `text` exactly as `JSON.parse` would accept it, up to
/// [`MAX_DEPTH`] nested arrays and objects (what anyone may send).
pub fn parse(text: &str) -> Result<Doc, ParseError> {
    parse_to(text, MAX_DEPTH)
}

/// [`parse`] at any depth, for what the site itself wrote: its own
/// payloads and its store's answers (their depth is the app's choice, as
/// it is with `JSON.parse`; the parser's stack is its own, so any depth is
/// safe).
pub fn parse_any_depth(text: &str) -> Result<Doc, ParseError> {
    parse_to(text, usize::MAX)
}

fn parse_to(text: &str, max_depth: usize) -> Result<Doc, ParseError> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        nodes: Vec::new(),
        max_depth,
    };
    let root = p.parse_all()?;
    Ok(Doc {
        nodes: p.nodes,
        root,
    })
}

/// [`parse`] for a text that holds secrets (key material): when parsing
/// stops partway, the strings read so far are wiped before they are
/// dropped. (The caller wipes a document it got with [`Doc::wipe`].)
pub fn parse_secret(text: &str) -> Result<Doc, ParseError> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        nodes: Vec::new(),
        max_depth: MAX_DEPTH,
    };
    match p.parse_all() {
        Ok(root) => Ok(Doc {
            nodes: p.nodes,
            root,
        }),
        Err(error) => {
            let mut partial = Doc {
                nodes: std::mem::take(&mut p.nodes),
                root: 0,
            };
            partial.wipe();
            Err(error)
        }
    }
}

impl Parser<'_> {
    /// The whole text as one value (white space around it allowed).
    fn parse_all(&mut self) -> Result<NodeId, ParseError> {
        let root = self.run()?;
        self.skip_ws();
        if self.pos != self.bytes.len() {
            return Err(self.err());
        }
        Ok(root)
    }

    fn err(&self) -> ParseError {
        ParseError {
            offset: self.pos,
            too_deep: false,
        }
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
            if stack.len() >= self.max_depth && matches!(self.peek(), Some(b'{' | b'[')) {
                return Err(ParseError {
                    offset: self.pos,
                    too_deep: true,
                });
            }
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
            .map_err(|_| ParseError {
                offset: start,
                too_deep: false,
            })
    }

    fn hex4(&mut self) -> Result<u16, ParseError> {
        let v = self
            .bytes
            .get(self.pos..)
            .and_then(hex4)
            .ok_or_else(|| self.err())?;
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
                        too_deep: false,
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
