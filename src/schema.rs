//! A small validator that behaves like the zod v4 schemas of the reference
//! (`zod` 4.6.x, the version `@byollm/protocol@0.1.1` resolves to): the same
//! accept/reject decisions, the same parsed output (keys in schema order,
//! absent optionals left out, defaults filled in), and the same issues, in
//! the same order, with the same messages — the enqueue error shows them.
//!
//! Only the zod features the protocol uses are modelled: strict objects,
//! strings with min/max, `z.url()`, enums/literals, safe integers with
//! bounds, booleans, arrays with min/max, `.optional()`, `.default([])`,
//! discriminated unions and the two payload-total refinements.
//!
//! zod details reproduced on purpose (they decide messages and outcomes):
//! * string `min`/`max` count **code points** in this zod version (a lone
//!   surrogate counts as one), while the payload totals count UTF-16 units;
//! * length checks still run after a type error when the value has a
//!   `length` (a string where an array belongs, an array where a string
//!   belongs, an object with a `length` key), comparing with JS semantics;
//! * an array longer than its `max` is refused before its elements are
//!   looked at, and that refusal stops every later check;
//! * unknown keys never stop later checks; a refinement runs only when no
//!   issue so far has stopped the object.

mod issue;

use crate::json::json_str_len;
use crate::json::{is_js_space, js_to_number, push_json_number, Doc, JsStr, Node, NodeId};
use issue::{received, Cont, Origin};
// Reachable as `wire::Issue` and its parts.
#[allow(unreachable_pub)]
pub use issue::{Issue, IssueKind, Measure, Seg};

/// A schema node.
#[derive(Debug)]
pub enum Schema {
    /// `z.string()` with optional `.min(n)` / `.max(n)` (code points).
    Str { min: Option<u32>, max: Option<u32> },
    /// `z.url()`: a string that the WHATWG URL parser accepts once trimmed.
    Url,
    /// `z.enum([...])` or `z.literal(v)` (one value).
    Enum(&'static [&'static str]),
    /// `z.number().int()` with bounds; `gt_zero` is `.positive()`.
    Int {
        min: Option<f64>,
        max: Option<f64>,
        gt_zero: bool,
    },
    /// `z.boolean()`.
    Bool,
    /// `z.array(elem)` with optional `.min(n)` / `.max(n)`.
    Array {
        elem: &'static Schema,
        min: Option<u32>,
        max: Option<u32>,
    },
    /// `z.object({...}).strict()`, optionally refined.
    Object {
        fields: &'static [Field],
        refine: Option<Refine>,
    },
    /// `z.discriminatedUnion(key, options)`.
    Union {
        key: &'static str,
        options: &'static [(&'static str, &'static Schema)],
    },
    /// Ours, not the reference's: `inner` with a bound the reference does
    /// not have, on what a request carries (docs/security.md). Items and
    /// characters are counted before `inner` looks at the value, so a value
    /// over its bound costs nothing more; JSON bytes are counted on the
    /// validated output. Over it: an [`IssueKind::OverBound`] issue that
    /// stops every later check.
    Bounded {
        inner: &'static Schema,
        max: u32,
        measure: Measure,
    },
}

/// How a key may be absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Required,
    /// `.optional()`: may be absent; `null` is still a type error.
    Optional,
    /// `.default([])`: absent reads as an empty array.
    DefaultEmptyArray,
}

/// One key of a strict object.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub schema: &'static Schema,
    pub presence: Presence,
}

/// The object-level refinements the payload schemas carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refine {
    /// `prompt.length + (system?.length ?? 0) <= 4_000_000` (UTF-16 units).
    GenerateTotal,
    /// `Σ messages[i].content.length + (system?.length ?? 0) <= 4_000_000`.
    ChatTotal,
    /// Ours, not the reference's: a `pair start` body, as canonical JSON, is
    /// at most [`MAX_PAIR_START_BYTES`] bytes of UTF-8 (it is kept, and
    /// anyone may send one).
    PairStartBytes,
}

/// The largest `pair start` body kept: a daemon's is well under 2 KiB
/// (device keys, version, label, a few capabilities).
pub(crate) const MAX_PAIR_START_BYTES: usize = 8 * 1024;

/// Total payload text limit, in UTF-16 units.
pub(crate) const MAX_TOTAL_CHARS: usize = 4_000_000;

/// Const helpers so schema tables read like the zod source.
pub(crate) const fn req(name: &'static str, schema: &'static Schema) -> Field {
    Field {
        name,
        schema,
        presence: Presence::Required,
    }
}

pub(crate) const fn opt(name: &'static str, schema: &'static Schema) -> Field {
    Field {
        name,
        schema,
        presence: Presence::Optional,
    }
}

/// `z.string()` with optional `.min(n)` / `.max(n)`.
pub(crate) const fn text(min: Option<u32>, max: Option<u32>) -> Schema {
    Schema::Str { min, max }
}

/// `z.number().int()` with optional `.min(n)` / `.max(n)`.
pub(crate) const fn int(min: Option<f64>, max: Option<f64>) -> Schema {
    Schema::Int {
        min,
        max,
        gt_zero: false,
    }
}

/// `z.array(elem)` with optional `.min(n)` / `.max(n)`.
pub(crate) const fn array(elem: &'static Schema, min: Option<u32>, max: Option<u32>) -> Schema {
    Schema::Array { elem, min, max }
}

/// `inner` with one of our bounds ([`Schema::Bounded`]).
pub(crate) const fn bounded(inner: &'static Schema, max: u32, measure: Measure) -> Schema {
    Schema::Bounded {
        inner,
        max,
        measure,
    }
}

/// `z.object({...}).strict()` without a refinement.
pub(crate) const fn object(fields: &'static [Field]) -> Schema {
    Schema::Object {
        fields,
        refine: None,
    }
}

/// The validated value, in zod's output shape. Strings that came from the
/// input are referenced by node id (no copy).
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    Str(NodeId),
    /// A string zod rewrote (a trimmed URL).
    Owned(JsStr),
    Num(f64),
    Bool(bool),
    Arr(Vec<Out>),
    Obj(Vec<(&'static str, Out)>),
}

impl Out {
    /// The value of `key` in an object output.
    pub fn field(&self, key: &str) -> Option<&Out> {
        match self {
            Out::Obj(fields) => fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string this output holds, if any.
    pub fn as_js_str<'d>(&'d self, doc: &'d Doc) -> Option<&'d JsStr> {
        match self {
            Out::Str(id) => doc.str(*id),
            Out::Owned(s) => Some(s),
            _ => None,
        }
    }

    /// The length in bytes of [`Out::write_json`]'s text, without writing it.
    pub fn json_len(&self, doc: &Doc) -> usize {
        let str_len = |s: &JsStr| {
            if s.has_lone_surrogate() {
                let mut text = String::new();
                s.write_json(&mut text);
                text.len()
            } else {
                json_str_len(s.as_str())
            }
        };
        match self {
            Out::Str(id) => doc.str(*id).map_or(4, str_len),
            Out::Owned(s) => str_len(s),
            Out::Num(n) => {
                let mut text = String::new();
                push_json_number(&mut text, *n);
                text.len()
            }
            Out::Bool(b) => {
                if *b {
                    4
                } else {
                    5
                }
            }
            Out::Arr(items) => {
                2 + items.len().saturating_sub(1)
                    + items.iter().map(|i| i.json_len(doc)).sum::<usize>()
            }
            Out::Obj(fields) => {
                2 + fields.len().saturating_sub(1)
                    + fields
                        .iter()
                        .map(|(k, v)| json_str_len(k) + 1 + v.json_len(doc))
                        .sum::<usize>()
            }
        }
    }

    /// Append `JSON.stringify` of this output.
    pub fn write_json(&self, doc: &Doc, out: &mut String) {
        match self {
            Out::Str(id) => match doc.str(*id) {
                Some(s) => s.write_json(out),
                None => out.push_str("null"),
            },
            Out::Owned(s) => s.write_json(out),
            Out::Num(n) => push_json_number(out, *n),
            Out::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Out::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_json(doc, out);
                }
                out.push(']');
            }
            Out::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    crate::json::write_json_str(k, out);
                    out.push(':');
                    v.write_json(doc, out);
                }
                out.push('}');
            }
        }
    }
}

// JS comparisons with NaN are all false, so "not at least the minimum" must
// be written as the negation of the comparison, never as `<`.
fn holds_ge(a: f64, b: f64) -> bool {
    a >= b
}

fn holds_le(a: f64, b: f64) -> bool {
    a <= b
}

fn holds_gt(a: f64, b: f64) -> bool {
    a > b
}

/// A parent chain for issue paths, materialised only when an issue is made.
#[derive(Clone, Copy)]
struct Path<'p> {
    seg: Option<Seg>,
    parent: Option<&'p Path<'p>>,
}

impl Path<'_> {
    const ROOT: Path<'static> = Path {
        seg: None,
        parent: None,
    };

    fn child(&self, seg: Seg) -> Path<'_> {
        Path {
            seg: Some(seg),
            parent: Some(self),
        }
    }

    fn segments(&self) -> Vec<Seg> {
        let mut segs = Vec::new();
        let mut at = Some(self);
        while let Some(p) = at {
            if let Some(s) = p.seg {
                segs.push(s);
            }
            at = p.parent;
        }
        segs.reverse();
        segs
    }
}

/// Runs schemas over a parsed document.
pub(crate) struct Validator<'d> {
    doc: &'d Doc,
    url_ok: &'d dyn Fn(&str) -> bool,
    issues: Vec<Issue>,
    /// Stop collecting after this many issues (a request only needs one to
    /// be refused; the enqueue message wants them all).
    limit: usize,
    /// Stays true while every validated object held exactly its output keys
    /// in output order and no default was filled in: then `JSON.parse` of the
    /// input text already equals the output, and a caller in JavaScript can
    /// let the engine's own parser build it.
    canonical: bool,
}

/// The outcome of validating one value.
#[derive(Debug)]
pub struct Validated {
    pub out: Option<Out>,
    pub issues: Vec<Issue>,
    /// See [`Validated::canonical`].
    canonical: bool,
}

impl Validated {
    pub fn ok(&self) -> bool {
        self.issues.is_empty() && self.out.is_some()
    }

    /// True when the value passed and `JSON.parse` of the input equals the
    /// output (same keys in the same order, no defaults, no rewritten
    /// strings).
    pub fn canonical(&self) -> bool {
        self.ok() && self.canonical
    }
}

/// Validate `value` (`None` = JS `undefined`) against `schema`.
/// `url_ok` answers `URL.canParse` for `z.url()`; `limit` caps the issues
/// collected (use 1 when only the verdict matters).
pub(crate) fn validate(
    doc: &Doc,
    value: Option<NodeId>,
    schema: &Schema,
    url_ok: &dyn Fn(&str) -> bool,
    limit: usize,
) -> Validated {
    let mut v = Validator {
        doc,
        url_ok,
        issues: Vec::new(),
        limit: limit.max(1),
        canonical: true,
    };
    let out = v.run(schema, value, &Path::ROOT);
    Validated {
        out: if v.issues.is_empty() { out } else { None },
        issues: v.issues,
        canonical: v.canonical,
    }
}

/// `payloadTextLength` of a validated payload: its `system` plus its
/// `prompt` (generate) or its messages' `content`s (chat), in UTF-16 units.
/// A validated object holds only its schema's keys, so the kind shows in
/// which of `prompt` and `messages` it has.
pub(crate) fn payload_text_length(doc: &Doc, payload: &Out) -> usize {
    let len = |o: Option<&Out>| o.and_then(|o| o.as_js_str(doc)).map_or(0, JsStr::utf16_len);
    let body = match payload.field("messages") {
        Some(Out::Arr(messages)) => messages.iter().map(|m| len(m.field("content"))).sum(),
        _ => len(payload.field("prompt")),
    };
    body + len(payload.field("system"))
}

/// What a length check measures.
enum Measured {
    /// An exact count (code points of a string, items of an array).
    Count(f64, Origin),
    /// An object's own `length` value, compared with JS coercion.
    Coerced(f64),
}

impl<'d> Validator<'d> {
    fn full(&self) -> bool {
        self.issues.len() >= self.limit
    }

    fn push(&mut self, path: &Path<'_>, kind: IssueKind, cont: Cont) {
        if self.full() {
            return;
        }
        self.issues.push(Issue {
            path: path.segments(),
            kind,
            cont,
        });
    }

    /// zod's "expected …, received …" issue, which stops this value's checks.
    fn wrong_type(&mut self, path: &Path<'_>, expected: &'static str, value: Option<NodeId>) {
        let received = received(self.doc, value);
        self.push(
            path,
            IssueKind::InvalidType { expected, received },
            Cont::Stop,
        );
    }

    fn soft_aborted(&self, start: usize) -> bool {
        self.issues
            .get(start..)
            .is_some_and(|s| s.iter().any(|i| i.cont != Cont::Yes))
    }

    fn hard_aborted(&self, start: usize) -> bool {
        self.issues
            .get(start..)
            .is_some_and(|s| s.iter().any(|i| i.cont == Cont::Hard))
    }

    /// zod's `_whenHasLength`: not null/undefined and `.length` defined.
    fn measure(&self, value: Option<NodeId>) -> Option<Measured> {
        match self.doc.node(value?) {
            Node::String(s) => Some(Measured::Count(s.code_points() as f64, Origin::String)),
            Node::Array(items) => Some(Measured::Count(items.len() as f64, Origin::Array)),
            Node::Object(_) => {
                let len = self.doc.get(value?, "length")?;
                Some(Measured::Coerced(js_to_number(self.doc, len)))
            }
            _ => None,
        }
    }

    /// The `.min()` / `.max()` length checks, in declaration order (min
    /// first), skipped only after a hard abort.
    fn length_checks(
        &mut self,
        value: Option<NodeId>,
        path: &Path<'_>,
        start: usize,
        min: Option<u32>,
        max: Option<u32>,
    ) {
        for (is_min, bound) in [(true, min), (false, max)] {
            let Some(bound) = bound else { continue };
            if self.hard_aborted(start) {
                return;
            }
            let Some(m) = self.measure(value) else { return };
            let (n, origin) = match m {
                Measured::Count(n, o) => (n, o),
                Measured::Coerced(n) => (n, Origin::Unknown),
            };
            let bound = f64::from(bound);
            if is_min && !holds_ge(n, bound) {
                self.push(
                    path,
                    IssueKind::TooSmall {
                        origin,
                        minimum: bound,
                        inclusive: true,
                    },
                    Cont::Yes,
                );
            } else if !is_min && !holds_le(n, bound) {
                self.push(
                    path,
                    IssueKind::TooBig {
                        origin,
                        maximum: bound,
                    },
                    Cont::Yes,
                );
            }
        }
    }

    fn run(&mut self, schema: &Schema, value: Option<NodeId>, path: &Path<'_>) -> Option<Out> {
        if self.full() {
            return None;
        }
        let node = value.map(|v| self.doc.node(v));
        let start = self.issues.len();
        match schema {
            Schema::Str { min, max } => {
                let out = match node {
                    Some(Node::String(_)) => value.map(Out::Str),
                    _ => {
                        self.wrong_type(path, "string", value);
                        None
                    }
                };
                self.length_checks(value, path, start, *min, *max);
                out
            }
            Schema::Url => {
                let Some(Node::String(s)) = node else {
                    self.wrong_type(path, "string", value);
                    return None;
                };
                let trimmed = s.as_str().trim_matches(is_js_space);
                if (self.url_ok)(trimmed) {
                    let kept: String = trimmed
                        .chars()
                        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
                        .collect();
                    if kept.len() == s.as_str().len() && !s.has_lone_surrogate() {
                        value.map(Out::Str)
                    } else {
                        self.canonical = false;
                        Some(Out::Owned(JsStr::new(kept)))
                    }
                } else {
                    self.push(path, IssueKind::InvalidUrl, Cont::Yes);
                    None
                }
            }
            Schema::Enum(values) => match node {
                Some(Node::String(s)) if values.iter().any(|v| s.is(v)) => value.map(Out::Str),
                _ => {
                    self.push(path, IssueKind::InvalidValue { values }, Cont::Stop);
                    None
                }
            },
            Schema::Bool => match node {
                Some(Node::Bool(b)) => Some(Out::Bool(*b)),
                _ => {
                    self.wrong_type(path, "boolean", value);
                    None
                }
            },
            Schema::Int { min, max, gt_zero } => {
                let n = match node {
                    Some(Node::Number(n)) if n.is_finite() => *n,
                    _ => {
                        self.wrong_type(path, "number", value);
                        return None;
                    }
                };
                if n.fract() != 0.0 {
                    self.push(
                        path,
                        IssueKind::InvalidType {
                            expected: "int",
                            received: "number".into(),
                        },
                        Cont::Hard,
                    );
                    return None;
                }
                const SAFE: f64 = 9_007_199_254_740_991.0;
                if n > SAFE {
                    self.push(
                        path,
                        IssueKind::TooBig {
                            origin: Origin::Number,
                            maximum: SAFE,
                        },
                        Cont::Yes,
                    );
                } else if n < -SAFE {
                    self.push(
                        path,
                        IssueKind::TooSmall {
                            origin: Origin::Number,
                            minimum: -SAFE,
                            inclusive: true,
                        },
                        Cont::Yes,
                    );
                }
                if let Some(min) = min {
                    if !holds_ge(n, *min) {
                        self.push(
                            path,
                            IssueKind::TooSmall {
                                origin: Origin::Number,
                                minimum: *min,
                                inclusive: true,
                            },
                            Cont::Yes,
                        );
                    }
                }
                if *gt_zero && !holds_gt(n, 0.0) {
                    self.push(
                        path,
                        IssueKind::TooSmall {
                            origin: Origin::Number,
                            minimum: 0.0,
                            inclusive: false,
                        },
                        Cont::Yes,
                    );
                }
                if let Some(max) = max {
                    if !holds_le(n, *max) {
                        self.push(
                            path,
                            IssueKind::TooBig {
                                origin: Origin::Number,
                                maximum: *max,
                            },
                            Cont::Yes,
                        );
                    }
                }
                Some(Out::Num(n))
            }
            Schema::Array { elem, min, max } => {
                let Some(Node::Array(items)) = node else {
                    self.wrong_type(path, "array", value);
                    self.length_checks(value, path, start, *min, *max);
                    return None;
                };
                if let Some(max) = max {
                    if items.len() > *max as usize {
                        // zod refuses an oversized array before parsing any
                        // element, and nothing after that runs.
                        self.push(
                            path,
                            IssueKind::TooBig {
                                origin: Origin::Array,
                                maximum: f64::from(*max),
                            },
                            Cont::Hard,
                        );
                        return None;
                    }
                }
                let mut outs = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let child = path.child(Seg::Index(i));
                    if let Some(o) = self.run(elem, Some(*item), &child) {
                        outs.push(o);
                    }
                    if self.full() {
                        return None;
                    }
                }
                self.length_checks(value, path, start, *min, *max);
                Some(Out::Arr(outs))
            }
            Schema::Object { fields, refine } => {
                let Some(Node::Object(entries)) = node else {
                    self.wrong_type(path, "object", value);
                    return None;
                };
                let obj = value?;
                let mut outs = Vec::with_capacity(fields.len());
                for field in fields.iter() {
                    let present = self.doc.get(obj, field.name);
                    let child = path.child(Seg::Key(field.name));
                    match (field.presence, present) {
                        (Presence::Optional, None) => {}
                        (Presence::DefaultEmptyArray, None) => {
                            outs.push((field.name, Out::Arr(Vec::new())))
                        }
                        _ => {
                            if let Some(o) = self.run(field.schema, present, &child) {
                                outs.push((field.name, o));
                            }
                        }
                    }
                    if self.full() {
                        return None;
                    }
                }
                let unknown: Vec<String> = entries
                    .iter()
                    .filter(|(k, _)| !fields.iter().any(|f| k.is(f.name)))
                    .map(|(k, _)| k.as_str().to_owned())
                    .collect();
                if !unknown.is_empty() {
                    self.push(
                        path,
                        IssueKind::UnrecognizedKeys { keys: unknown },
                        Cont::Yes,
                    );
                }
                if self.canonical
                    && (entries.len() != outs.len()
                        || entries
                            .iter()
                            .zip(outs.iter())
                            .any(|((k, _), (name, _))| !k.is(name)))
                {
                    self.canonical = false;
                }
                let out = Out::Obj(outs);
                if let Some(refine) = refine {
                    if !self.soft_aborted(start) && !self.refine_holds(*refine, &out) {
                        let message = match refine {
                            Refine::PairStartBytes => "pair start exceeds 8192 bytes",
                            _ => "payload exceeds 4000000 characters",
                        };
                        self.push(path, IssueKind::Custom { message }, Cont::Yes);
                    }
                }
                Some(out)
            }
            Schema::Bounded {
                inner,
                max,
                measure,
            } => {
                let counted = match (measure, node) {
                    (Measure::Items, Some(Node::Array(items))) => Some(items.len()),
                    (Measure::Chars, Some(Node::String(s))) => Some(s.code_points()),
                    _ => None,
                };
                if let Some(found) = counted.filter(|&n| n > *max as usize) {
                    self.over_bound(path, *max, *measure, found);
                    return None;
                }
                let out = self.run(inner, value, path)?;
                if *measure == Measure::JsonBytes && self.issues.len() == start {
                    let found = out.json_len(self.doc);
                    if found > *max as usize {
                        self.over_bound(path, *max, *measure, found);
                        return None;
                    }
                }
                Some(out)
            }
            Schema::Union { key, options } => {
                let Some(Node::Object(_)) = node else {
                    self.wrong_type(path, "object", value);
                    return None;
                };
                let tag = value
                    .and_then(|v| self.doc.get(v, key))
                    .and_then(|t| self.doc.str(t));
                let chosen = tag.and_then(|t| options.iter().find(|(name, _)| t.is(name)));
                match chosen {
                    Some((_, schema)) => self.run(schema, value, path),
                    None => {
                        let options = options.iter().map(|(name, _)| *name).collect();
                        self.push(
                            &path.child(Seg::Key(key)),
                            IssueKind::InvalidUnion { options },
                            Cont::Stop,
                        );
                        None
                    }
                }
            }
        }
    }

    fn over_bound(&mut self, path: &Path<'_>, max: u32, measure: Measure, found: usize) {
        self.push(
            path,
            IssueKind::OverBound {
                max,
                measure,
                found,
            },
            Cont::Hard,
        );
    }

    fn refine_holds(&self, refine: Refine, out: &Out) -> bool {
        if refine == Refine::PairStartBytes {
            let mut text = String::new();
            out.write_json(self.doc, &mut text);
            return text.len() <= MAX_PAIR_START_BYTES;
        }
        payload_text_length(self.doc, out) <= MAX_TOTAL_CHARS
    }
}
