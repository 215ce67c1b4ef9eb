//! Job kinds and their payloads (protocol.md §9).

use crate::json;
use crate::schema::{self, array, object, opt, req, text, Refine, Schema};
use crate::vocabulary::vocabulary;

vocabulary! {
    /// A job kind. The wire spelling is the dotted name.
    pub JobKind {
        Generate => "llm.generate",
        Chat => "llm.chat",
    }
}

// ---------------------------------------------------------------------------
// Payloads (protocol.md §9)

/// Longest single text (prompt, system, one message), in code points as
/// zod counts them.
pub const MAX_TEXT_CHARS: u32 = 1_000_000;
/// Most messages in a chat.
pub const MAX_MESSAGES: u32 = 256;
/// Longest total text, in UTF-16 units.
pub const MAX_TOTAL_CHARS: usize = schema::MAX_TOTAL_CHARS;

const TEXT: Schema = text(None, Some(MAX_TEXT_CHARS));

/// `llm.generate`: `{prompt, system?}`.
pub static GENERATE_PAYLOAD: Schema = Schema::Object {
    fields: &[
        req("prompt", &text(Some(1), Some(MAX_TEXT_CHARS))),
        opt("system", &TEXT),
    ],
    refine: Some(Refine::GenerateTotal),
};

/// `llm.chat`: `{messages: [{role, content}], system?}`.
pub static CHAT_PAYLOAD: Schema = Schema::Object {
    fields: &[
        req(
            "messages",
            &array(
                &object(&[
                    req("role", &Schema::Enum(&["system", "user", "assistant"])),
                    req("content", &TEXT),
                ]),
                Some(1),
                Some(MAX_MESSAGES),
            ),
        ),
        opt("system", &TEXT),
    ],
    refine: Some(Refine::ChatTotal),
};

/// `{kind, payload}` discriminated by `kind`.
pub static KINDED_PAYLOAD: Schema = Schema::Union {
    key: "kind",
    options: &[
        (
            "llm.generate",
            &object(&[
                req("kind", &Schema::Enum(&["llm.generate"])),
                req("payload", &GENERATE_PAYLOAD),
            ]),
        ),
        (
            "llm.chat",
            &object(&[
                req("kind", &Schema::Enum(&["llm.chat"])),
                req("payload", &CHAT_PAYLOAD),
            ]),
        ),
    ],
};

vocabulary! {
    /// How big a job's text is, for the stub (`unbounded` is never produced).
    pub SizeClass {
        Small => "small",
        Medium => "medium",
        Large => "large",
        Unbounded => "unbounded",
    }
}

/// `sizeClassOf`: ≤ 4000 small, ≤ 64000 medium, else large.
pub fn size_class_of(text_chars: f64) -> SizeClass {
    if text_chars <= 4_000.0 {
        SizeClass::Small
    } else if text_chars <= 64_000.0 {
        SizeClass::Medium
    } else {
        SizeClass::Large
    }
}

/// A payload that passed its kind's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidPayload {
    pub kind: JobKind,
    /// `JSON.stringify` of the parsed payload: keys in schema order, unknown
    /// spellings normalised — the text that gets sealed.
    pub canonical: String,
    /// `payloadTextLength`: prompt + system, or Σ contents + system (UTF-16).
    pub text_length: usize,
    pub size_class: SizeClass,
}

/// Why an enqueue's payload is refused. Its text ([`std::fmt::Display`]) is
/// the reference's message, `invalid <kind> payload — <detail>`, with the
/// kind as JS `String(kind)` spells it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PayloadRefusal {
    /// `JSON.stringify(payload)` gave no JSON text.
    #[error("invalid {kind} payload \u{2014} payload: the payload is not JSON-serialisable")]
    NotSerialisable { kind: String },
    /// The schema's issues, each `path: message`.
    #[error("invalid {kind} payload \u{2014} {}", issues.join("; "))]
    Invalid { kind: String, issues: Vec<String> },
    /// Valid, but no kind or payload came out (the schema makes it unreachable).
    #[error("invalid {kind} payload")]
    Unread { kind: String },
    /// Sealed for its runner its envelope would be `size` long, over the
    /// `limit` on one envelope (both as the refusal words them).
    #[error("invalid {kind} payload \u{2014} sealed for its runner it would be {size} and the limit on one envelope is {limit}, so no runner could ever receive it. Shorten it, or split the work into smaller jobs.")]
    Undeliverable {
        kind: String,
        size: String,
        limit: String,
    },
}

/// Validate an enqueue payload as `KindedPayload.safeParse({kind, payload})`
/// does.
///
/// * `kind`: the kind when it is a string (`None` for any other JS value,
///   which no option matches);
/// * `kind_display`: JS `String(kind)`, for the message;
/// * `payload_json`: `JSON.stringify(payload)`, `None` for `undefined`.
///
/// The error renders as the reference's message:
/// `invalid <kind> payload — <path>: <message>; …`.
pub fn validate_payload(
    kind: Option<&str>,
    kind_display: &str,
    payload_json: Option<&str>,
) -> Result<ValidPayload, PayloadRefusal> {
    let mut text = String::from("{");
    if let Some(kind) = kind {
        text.push_str("\"kind\":");
        json::write_json_str(kind, &mut text);
    }
    if let Some(payload) = payload_json {
        if kind.is_some() {
            text.push(',');
        }
        text.push_str("\"payload\":");
        text.push_str(payload);
    }
    text.push('}');
    let doc = json::parse_any_depth(&text).map_err(|_| PayloadRefusal::NotSerialisable {
        kind: kind_display.to_owned(),
    })?;
    let v = schema::validate(
        &doc,
        Some(doc.root()),
        &KINDED_PAYLOAD,
        &|_| false,
        usize::MAX,
    );
    let parsed = match v.out {
        Some(out) if v.issues.is_empty() => out,
        _ => {
            return Err(PayloadRefusal::Invalid {
                kind: kind_display.to_owned(),
                issues: v
                    .issues
                    .iter()
                    .map(|i| format!("{}: {}", i.path_text(), i.message()))
                    .collect(),
            });
        }
    };
    let unread = || PayloadRefusal::Unread {
        kind: kind_display.to_owned(),
    };
    let kind = kind.and_then(JobKind::parse).ok_or_else(unread)?;
    let payload = parsed.field("payload").ok_or_else(unread)?;
    let mut canonical = String::new();
    payload.write_json(&doc, &mut canonical);
    let text_length = schema::payload_text_length(&doc, payload);
    Ok(ValidPayload {
        kind,
        canonical,
        text_length,
        size_class: size_class_of(text_length as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kind: &str, payload: &str) -> Result<ValidPayload, String> {
        validate_payload(Some(kind), kind, Some(payload)).map_err(|e| e.to_string())
    }

    #[test]
    fn canonical_order_and_lengths() {
        let v = check("llm.generate", r#"{"system":"S","prompt":"P🙂"}"#).unwrap();
        assert_eq!(v.canonical, r#"{"prompt":"P🙂","system":"S"}"#);
        assert_eq!((v.text_length, v.size_class), (4, SizeClass::Small));
        let v = check(
            "llm.chat",
            r#"{"messages":[{"content":"é🙂","role":"user"}]}"#,
        )
        .unwrap();
        assert_eq!(
            v.canonical,
            r#"{"messages":[{"role":"user","content":"é🙂"}]}"#
        );
        assert_eq!(v.text_length, 3);
    }

    #[test]
    fn messages_match_zod() {
        let e = |k: &str, p: &str| check(k, p).unwrap_err();
        assert_eq!(
            e("llm.generate", r#"{"prompt":"x","command":"/bin/sh"}"#),
            "invalid llm.generate payload \u{2014} payload: Unrecognized key: \"command\""
        );
        assert_eq!(
            e("llm.generate", r#"{"messages":[{"role":"user","content":"x"}]}"#),
            "invalid llm.generate payload \u{2014} payload.prompt: Invalid input: expected string, received undefined; payload: Unrecognized key: \"messages\""
        );
        assert_eq!(
            e("llm.chat", r#"{"messages":[{"role":"tool","content":"x"}]}"#),
            "invalid llm.chat payload \u{2014} payload.messages.0.role: Invalid option: expected one of \"system\"|\"user\"|\"assistant\""
        );
        assert_eq!(
            e("llm.embed", r#"{"prompt":"x"}"#),
            "invalid llm.embed payload \u{2014} kind: Invalid discriminator value. Expected 'llm.generate' | 'llm.chat'"
        );
        assert_eq!(
            validate_payload(Some("llm.generate"), "llm.generate", None)
                .unwrap_err()
                .to_string(),
            "invalid llm.generate payload \u{2014} payload: Invalid input: expected object, received undefined"
        );
    }

    #[test]
    fn size_classes() {
        assert_eq!(size_class_of(4000.0), SizeClass::Small);
        assert_eq!(size_class_of(4001.0), SizeClass::Medium);
        assert_eq!(size_class_of(64001.0), SizeClass::Large);
    }
}
