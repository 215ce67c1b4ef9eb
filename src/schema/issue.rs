//! What a validation reports: zod's issues, with their paths and zod v4's
//! English messages (the enqueue error shows them).

use crate::json::{js_number_to_string, Doc, Node, NodeId};
use crate::vocabulary::vocabulary;

/// One step of an issue path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seg {
    Key(&'static str),
    Index(usize),
}

vocabulary! {
    /// What kind of thing a length check was looking at (zod's `origin`).
    pub Origin {
        String => "string",
        Array => "array",
        Number => "number",
        Unknown => "unknown",
    }
}

impl Origin {
    fn unit(self) -> Option<&'static str> {
        match self {
            Origin::String => Some("characters"),
            Origin::Array => Some("items"),
            _ => None,
        }
    }
}

/// What went wrong, with the data zod's English messages need.
#[derive(Debug, Clone, PartialEq)]
pub enum IssueKind {
    InvalidType {
        expected: &'static str,
        received: String,
    },
    InvalidValue {
        values: &'static [&'static str],
    },
    TooSmall {
        origin: Origin,
        minimum: f64,
        inclusive: bool,
    },
    TooBig {
        origin: Origin,
        maximum: f64,
    },
    UnrecognizedKeys {
        keys: Vec<String>,
    },
    InvalidUnion {
        options: Vec<&'static str>,
    },
    InvalidUrl,
    Custom {
        message: &'static str,
    },
    /// Ours, not zod's: over one of our bounds ([`super::Schema::Bounded`]).
    OverBound {
        max: u32,
        measure: Measure,
        found: usize,
    },
}

/// Whether an issue lets later checks run (zod's `continue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cont {
    /// `continue: true`.
    Yes,
    /// `continue` unset: stops checks without a `when`.
    Stop,
    /// `continue: false`: stops every later check.
    Hard,
}

/// One validation issue.
#[derive(Debug, Clone, PartialEq)]
pub struct Issue {
    pub path: Vec<Seg>,
    pub kind: IssueKind,
    pub(super) cont: Cont,
}

impl Issue {
    /// zod v4's English message for this issue.
    pub fn message(&self) -> String {
        match &self.kind {
            IssueKind::InvalidType { expected, received } => {
                format!("Invalid input: expected {expected}, received {received}")
            }
            IssueKind::InvalidValue { values } => match values {
                [one] => format!("Invalid input: expected \"{one}\""),
                _ => format!("Invalid option: expected one of {}", quoted(values, "|")),
            },
            IssueKind::TooSmall {
                origin,
                minimum,
                inclusive,
            } => {
                let adj = if *inclusive { ">=" } else { ">" };
                let n = js_number_to_string(*minimum);
                match origin.unit() {
                    Some(unit) => format!(
                        "Too small: expected {} to have {adj}{n} {unit}",
                        origin.as_str()
                    ),
                    None => format!("Too small: expected {} to be {adj}{n}", origin.as_str()),
                }
            }
            IssueKind::TooBig { origin, maximum } => {
                let n = js_number_to_string(*maximum);
                match origin.unit() {
                    Some(unit) => {
                        format!("Too big: expected {} to have <={n} {unit}", origin.as_str())
                    }
                    None => format!("Too big: expected {} to be <={n}", origin.as_str()),
                }
            }
            IssueKind::UnrecognizedKeys { keys } => {
                let plural = if keys.len() > 1 { "s" } else { "" };
                let list: Vec<&str> = keys.iter().map(String::as_str).collect();
                format!("Unrecognized key{plural}: {}", quoted(&list, ", "))
            }
            IssueKind::InvalidUnion { options } => {
                let opts: Vec<String> = options.iter().map(|o| format!("'{o}'")).collect();
                format!("Invalid discriminator value. Expected {}", opts.join(" | "))
            }
            IssueKind::InvalidUrl => "Invalid URL".to_owned(),
            IssueKind::Custom { message } => (*message).to_owned(),
            IssueKind::OverBound {
                max,
                measure,
                found,
            } => format!(
                "Too big: has {found} {unit} and the limit is {max}",
                unit = measure.as_str()
            ),
        }
    }

    /// The refusal of a request over one of our bounds, naming the field as
    /// JavaScript would reach it (`capabilities[2].knownModels`): `None` for
    /// any other issue.
    pub fn bound_refusal(&self) -> Option<String> {
        let IssueKind::OverBound {
            max,
            measure,
            found,
        } = &self.kind
        else {
            return None;
        };
        let mut field = String::new();
        for seg in &self.path {
            match seg {
                Seg::Key(k) if field.is_empty() => field.push_str(k),
                Seg::Key(k) => {
                    field.push('.');
                    field.push_str(k);
                }
                Seg::Index(i) => field.push_str(&format!("[{i}]")),
            }
        }
        if field.is_empty() {
            field.push_str("the body");
        }
        let verb = if *measure == Measure::JsonBytes {
            "is"
        } else {
            "has"
        };
        Some(format!(
            "{field} {verb} {found} {unit} and the limit is {max}",
            unit = measure.as_str()
        ))
    }

    /// The path joined with `.` as the enqueue error prints it, `(root)`
    /// when empty.
    pub fn path_text(&self) -> String {
        if self.path.is_empty() {
            return "(root)".to_owned();
        }
        let parts: Vec<String> = self
            .path
            .iter()
            .map(|s| match s {
                Seg::Key(k) => (*k).to_owned(),
                Seg::Index(i) => i.to_string(),
            })
            .collect();
        parts.join(".")
    }
}

fn quoted(values: &[&str], sep: &str) -> String {
    let parts: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
    parts.join(sep)
}

/// zod's name for the type of a value, as "received …" prints it.
pub(super) fn received(doc: &Doc, value: Option<NodeId>) -> String {
    match value.map(|v| doc.node(v)) {
        None => "undefined".into(),
        Some(Node::Null) => "null".into(),
        Some(Node::Bool(_)) => "boolean".into(),
        Some(Node::Number(n)) if n.is_finite() => "number".into(),
        Some(Node::Number(n)) => js_number_to_string(*n),
        Some(Node::String(_)) => "string".into(),
        Some(Node::Array(_)) => "array".into(),
        Some(Node::Object(_)) => "object".into(),
    }
}

vocabulary! {
    /// What a [`super::Schema::Bounded`] counts, named as a refusal names it.
    pub Measure {
        /// The items of an array.
        Items => "items",
        /// The code points of a string (as zod's string lengths count them).
        Chars => "characters",
        /// The bytes of the validated value written as compact JSON.
        JsonBytes => "bytes as JSON",
    }
}
