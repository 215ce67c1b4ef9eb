//! How the SQL stores hold text (`crate::sql_text`): their arguments' JSON
//! text on the way in, their answers' on the way out.

use napi_derive::napi;

use crate::sql_text;

/// `json` (the JSON text of a SQL store's arguments) with every string the
/// database cannot hold as it is (NUL, a lone surrogate) in its stored form;
/// `undefined` when nothing changes.
#[napi(catch_unwind)]
pub(super) fn sql_text_in(json: String) -> Option<String> {
    match sql_text::to_sql(&json) {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(text) => Some(text),
    }
}

/// `json` (the JSON text of a SQL store's answer) with every stored form
/// turned back into the exact string; `undefined` when nothing changes.
#[napi(catch_unwind)]
pub(super) fn sql_text_out(json: String) -> Option<String> {
    match sql_text::from_sql(&json) {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(text) => Some(text),
    }
}

/// The character that starts a string kept in its stored form.
#[napi(catch_unwind)]
pub(super) fn sql_text_mark() -> String {
    sql_text::MARK.to_string()
}
