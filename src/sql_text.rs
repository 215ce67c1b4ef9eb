//! Text as the SQL stores hold it: every string exactly as it was sent.
//!
//! PostgreSQL's `text` and `jsonb` cannot hold two things a JavaScript
//! string can: NUL (`"\u0000"`, refused by both) and a lone UTF-16 surrogate
//! (`"\ud800"`, refused by `jsonb`, turned into U+FFFD by `text`). A model's
//! output may hold either, and so may what a daemon or an app sends. The SQL
//! stores take every argument as one JSON text and answer JSON text; on the
//! way in, [`to_sql`] rewrites each string (value or key) such a database
//! cannot hold as [`MARK`] followed by the string's own JSON literal (ASCII
//! escapes only), which both types hold; on the way out, [`from_sql`] gives
//! the literal back. A string that already starts with [`MARK`] is written
//! the same way, so the mapping is one-to-one: equal strings stay equal in
//! SQL, different ones stay different, and every other string is stored as
//! it is.
//!
//! [`MARK`] is U+FDD0, a Unicode noncharacter (set aside for a program's
//! internal use, never for text interchange).

use std::borrow::Cow;

use crate::json::{self, JsStr, Node};

/// What starts a string stored in its escaped form.
pub(crate) const MARK: char = '\u{FDD0}';

/// `json` with every string a SQL store cannot hold as it is replaced by
/// its stored form; the text itself when nothing needs it.
pub(crate) fn to_sql(json: &str) -> Cow<'_, str> {
    // Only a `\u` escape spells NUL or a lone surrogate in JSON text.
    if !json.contains("\\u") && !json.contains(MARK) {
        return Cow::Borrowed(json);
    }
    rewrite(json, |literal| {
        let s = decode(literal)?;
        let unholdable =
            s.has_lone_surrogate() || s.as_str().contains('\0') || s.as_str().starts_with(MARK);
        if !unholdable {
            return None;
        }
        let mut stored = String::with_capacity(literal.len() + 4);
        stored.push(MARK);
        s.write_json(&mut stored);
        let mut out = String::with_capacity(stored.len() + 8);
        json::write_json_str(&stored, &mut out);
        Some(out)
    })
}

/// `json` (a SQL store's answer) with every stored form written by
/// [`to_sql`] turned back into the string it stands for.
pub(crate) fn from_sql(json: &str) -> Cow<'_, str> {
    if !json.contains(MARK) && !json.contains("\\ufdd0") && !json.contains("\\uFDD0") {
        return Cow::Borrowed(json);
    }
    rewrite(json, |literal| {
        let s = decode(literal)?;
        let inner = s.as_str().strip_prefix(MARK)?;
        // A string that merely starts with the mark (none is stored so) is
        // left as it is.
        let original = decode(inner)?;
        let mut out = String::with_capacity(inner.len());
        original.write_json(&mut out);
        Some(out)
    })
}

/// The string a JSON string literal spells (`None`: not one).
fn decode(literal: &str) -> Option<JsStr> {
    let doc = json::parse_any_depth(literal).ok()?;
    match doc.node(doc.root()) {
        Node::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// `json` with each string literal (quotes included) that `change` gives a
/// replacement for replaced by it, everything else copied.
fn rewrite<'a>(json: &'a str, change: impl Fn(&str) -> Option<String>) -> Cow<'a, str> {
    let bytes = json.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut at = 0;
    while let Some(offset) = bytes
        .get(at..)
        .and_then(|rest| rest.iter().position(|&b| b == b'"'))
    {
        let start = at + offset;
        let mut end = start + 1;
        loop {
            match bytes.get(end) {
                None => {
                    return out.map_or(Cow::Borrowed(json), |o| Cow::Owned(o + &json[copied..]))
                }
                Some(b'\\') => end += 2,
                Some(b'"') => break,
                Some(_) => end += 1,
            }
        }
        end += 1;
        // `start` and `end` sit on quotes, so both are char boundaries.
        let literal = &json[start..end];
        let worth_a_look = literal.contains("\\u") || literal.contains(MARK);
        if let Some(replacement) = worth_a_look.then(|| change(literal)).flatten() {
            let o = out.get_or_insert_with(|| String::with_capacity(json.len() + 16));
            o.push_str(&json[copied..start]);
            o.push_str(&replacement);
            copied = end;
        }
        at = end;
    }
    match out {
        None => Cow::Borrowed(json),
        Some(mut o) => {
            o.push_str(&json[copied..]);
            Cow::Owned(o)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(doc: &json::Doc, id: json::NodeId, out: &mut Vec<JsStr>) {
        match doc.node(id) {
            Node::String(s) => out.push(s.clone()),
            Node::Array(items) => items.iter().for_each(|&i| collect(doc, i, out)),
            Node::Object(entries) => {
                for (k, v) in entries {
                    out.push(k.clone());
                    collect(doc, *v, out);
                }
            }
            _ => {}
        }
    }

    fn round_trip(json: &str) -> String {
        let stored = to_sql(json);
        from_sql(&stored).into_owned()
    }

    #[test]
    fn text_a_database_holds_is_left_alone() {
        for json in [
            r#"{"outcome":"ok","text":"plain \"quoted\" \\ text é 😀"}"#,
            r#"{"t":"bell\u0007 and \u001f"}"#,
            r#"["\ud83d\ude00"]"#,
            "null",
            "",
        ] {
            assert!(matches!(to_sql(json), Cow::Borrowed(_)), "{json}");
            assert!(matches!(from_sql(json), Cow::Borrowed(_)), "{json}");
        }
    }

    #[test]
    fn nul_and_lone_surrogates_are_stored_escaped_and_come_back_exactly() {
        let json = r#"{"outcome":"ok","text":"a\u0000b\ud800c","n":[1,"\udc00"],"k\u0000":true}"#;
        let stored = to_sql(json);
        // Every string in the stored text is one PostgreSQL holds.
        let doc = json::parse_any_depth(&stored).unwrap();
        let mut strings = Vec::new();
        collect(&doc, doc.root(), &mut strings);
        assert_eq!(strings.len(), 7);
        for s in &strings {
            assert!(
                !s.has_lone_surrogate() && !s.as_str().contains('\0'),
                "{s:?}"
            );
        }
        assert!(strings
            .iter()
            .any(|s| s.as_str() == "\u{FDD0}\"a\\u0000b\\ud800c\""));
        assert!(strings.iter().any(|s| s.as_str() == "ok"));
        assert_eq!(round_trip(json), json);
    }

    #[test]
    fn a_string_that_starts_with_the_mark_is_stored_escaped_too() {
        let json = "[\"\u{FDD0}\\\"x\\\"\",\"\u{FDD0}\"]";
        let stored = to_sql(json);
        assert_ne!(stored, json);
        assert_eq!(round_trip(json), json);
        // Mark inside a string, not at its start: as it is.
        assert!(matches!(to_sql("[\"a\u{FDD0}\"]"), Cow::Borrowed(_)));
    }

    #[test]
    fn equal_strings_are_stored_equal_whatever_their_spelling() {
        assert_eq!(to_sql(r#"["a\u0000"]"#), to_sql(r#"["\u0061\u0000"]"#));
        assert_ne!(to_sql(r#"["a\u0000"]"#), to_sql(r#"["a\u0000\u0000"]"#));
    }

    #[test]
    fn the_stored_form_reads_back_however_the_database_spells_it() {
        let stored = to_sql(r#"{"t":"\u0000"}"#).into_owned();
        // supabase-js answers a parsed value that JSON.stringify writes again;
        // an escaped mark reads the same.
        let escaped = stored.replace('\u{FDD0}', "\\ufdd0");
        assert_eq!(from_sql(&escaped), r#"{"t":"\u0000"}"#);
        // A marked string that is not a stored form is left alone.
        assert!(matches!(from_sql("[\"\u{FDD0}x\"]"), Cow::Borrowed(_)));
    }

    #[test]
    fn broken_text_is_copied_not_panicked_on() {
        for json in ["\"\\u0000", "[\"a\\", "{\"\u{FDD0}", "\"\\u00"] {
            let _ = to_sql(json);
            let _ = from_sql(json);
        }
    }
}
