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
//!   cap parses there. Ours refuses arrays and objects nested more than
//!   [`MAX_DEPTH`] deep as soon as it meets the first one too many (a
//!   difference from `JSON.parse`, on purpose: nothing this protocol carries
//!   nests past 5, and a body of 6 MiB of `[` would otherwise cost a frame per
//!   byte before anything could refuse it). Below that it keeps its own stack,
//!   and values live in one flat arena, so neither parsing nor dropping a
//!   value can overflow the thread stack.
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

mod coerce;
pub(crate) mod parse;
#[cfg(test)]
mod tests;
mod write;

pub use coerce::{is_js_space, js_to_number, string_to_number};
pub use parse::{lone_surrogates_replaced, parse, parse_any_depth, parse_secret};
use write::write_json_utf16;
pub use write::{
    js_number_to_string, json_str_len, json_string, push_js_number, push_json_number,
    write_json_str, Obj,
};

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
    pub(super) nodes: Vec<Node>,
    pub(super) root: NodeId,
}

/// How deep arrays and objects may nest in a text [`parse()`] takes: the
/// 65th container inside containers is refused where it opens
/// ([`ParseError::too_deep`]). The deepest body of this protocol nests 5
/// (a heartbeat's `withheld[].claimants[]`), a payload 3.
pub const MAX_DEPTH: usize = 64;

/// Why a text is not JSON (the reference never shows the reason; this is for
/// our own diagnostics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset where parsing stopped.
    pub offset: usize,
    /// Stopped at an array or object nested deeper than [`MAX_DEPTH`] (the
    /// text before it was JSON so far).
    pub too_deep: bool,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.too_deep {
            write!(
                f,
                "JSON nested deeper than {MAX_DEPTH} levels at byte {}",
                self.offset
            )
        } else {
            write!(f, "invalid JSON at byte {}", self.offset)
        }
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

    /// The value at `id`, when there is one (an absent key: `None`).
    pub fn node_at(&self, id: Option<NodeId>) -> Option<&Node> {
        id.map(|id| self.node(id))
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
                    Node::Number(n) => push_json_number(&mut out, *n),
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
