//! The signed body (the compact JSON the Ed25519 signature covers) and the
//! inner JSON `{"body","signature"}` the sealed box holds: writing both on
//! seal, reading them back on open with the reference's checks.

use ed25519_dalek::VerifyingKey;

use super::{Context, Expected, OpenFailure, SealedEnvelope, Text};
use crate::b64;
use crate::json::{self, JsStr, Node};
use crate::keys;

/// `v` of the signed body.
pub const ENVELOPE_BODY_VERSION: &str = "byollm/v1/envelope";

/// The exact bytes the envelope signature covers: `JSON.stringify` of
/// `{v, jobId, senderKeyId, recipientKeyId, deadlineAt, direction, plaintext}`.
pub fn signed_body(context: &Context, plaintext: Text<'_>) -> Vec<u8> {
    let mut out = String::new();
    write_signed_body(context, plaintext, &mut out);
    out.into_bytes()
}

/// [`signed_body`] appended to `out`.
pub(super) fn write_signed_body(context: &Context, plaintext: Text<'_>, out: &mut String) {
    let plain_len = match plaintext {
        Text::Utf8(s) => s.len(),
        Text::Utf16(u) => u.len() * 3,
    };
    out.reserve(200 + plain_len + plain_len / 16);
    out.push_str("{\"v\":");
    json::write_json_str(ENVELOPE_BODY_VERSION, out);
    out.push_str(",\"jobId\":");
    json::write_json_str(&context.job_id, out);
    out.push_str(",\"senderKeyId\":");
    json::write_json_str(&context.sender_key_id, out);
    out.push_str(",\"recipientKeyId\":");
    json::write_json_str(&context.recipient_key_id, out);
    out.push_str(",\"deadlineAt\":");
    if context.deadline_at.is_finite() {
        json::push_js_number(out, context.deadline_at);
    } else {
        // JSON.stringify writes non-finite numbers as null.
        out.push_str("null");
    }
    out.push_str(",\"direction\":");
    json::write_json_str(&context.direction, out);
    out.push_str(",\"plaintext\":");
    match plaintext {
        Text::Utf8(s) => json::write_json_str(s, out),
        // Lone surrogates are written as `\udxxx` escapes, like JSON.stringify.
        Text::Utf16(u) => JsStr::from_utf16(u).write_json(out),
    }
    out.push('}');
}

/// The inner JSON `{"body":<base64url body>,"signature":<signature>}`.
pub fn inner_json(body: &[u8], signature: &str) -> Vec<u8> {
    let mut out = String::new();
    write_inner_json(body, signature, &mut out);
    out.into_bytes()
}

/// [`inner_json`] appended to `out`.
pub(super) fn write_inner_json(body: &[u8], signature: &str, out: &mut String) {
    out.reserve(body.len() / 3 * 4 + signature.len() + 32);
    out.push_str("{\"body\":\"");
    b64::encode_url_append(body, out);
    out.push_str("\",\"signature\":");
    // A signature we made is base64url, but escape anyway so the output is
    // always the JSON.stringify of whatever was given.
    json::write_json_str(signature, out);
    out.push('}');
}

/// Steps 5 to 7 of [`crate::envelope::open`]: the verified body's claims against the context.
pub(super) fn read_claims(
    envelope: &SealedEnvelope,
    expected: &Expected,
    body: &[u8],
) -> Result<JsStr, OpenFailure> {
    // TextDecoder: one leading BOM dropped, invalid sequences become U+FFFD.
    let body_slice = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let claims_text = match std::str::from_utf8(body_slice) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(body_slice),
    };
    let mut claims = json::parse(&claims_text).map_err(|_| OpenFailure::Malformed)?;
    drop(claims_text);
    let root = claims.root();
    if matches!(claims.node(root), Node::Null) {
        return Err(OpenFailure::Malformed);
    }

    // A non-object body has none of these properties: context-mismatch, as
    // in the reference.
    let is_text = |name: &str, want: &str| {
        claims
            .get(root, name)
            .and_then(|id| claims.str(id))
            .is_some_and(|s| s.is(want))
    };
    let deadline_matches = matches!(
        claims.get(root, "deadlineAt").map(|id| claims.node(id)),
        Some(Node::Number(n)) if *n == envelope.deadline_at
    );
    if !is_text("jobId", &expected.job_id)
        || !is_text("senderKeyId", &expected.sender_key_id)
        || !is_text("recipientKeyId", &expected.recipient_key_id)
        || !deadline_matches
        || !is_text("direction", &expected.direction)
    {
        return Err(OpenFailure::ContextMismatch);
    }
    // Moved out of the parsed claims: a megabyte plaintext is not copied.
    match claims
        .get(root, "plaintext")
        .and_then(|id| claims.take_str(id))
    {
        Some(plaintext) => Ok(plaintext),
        None => Err(OpenFailure::Malformed),
    }
}

/// Split `{"body":"B","signature":"S"}` when the bytes have exactly that
/// shape, with S short and plain (no quote, backslash, control or non-ASCII
/// byte). For such bytes `JSON.parse` yields exactly `{body: B, signature: S}`
/// (B is checked by the strict decoder, which refuses anything else).
pub(super) fn split_inner_fast(inner: &[u8]) -> Option<(&[u8], &str)> {
    const MARK: &[u8] = b"\",\"signature\":\"";
    let rest = inner.strip_prefix(b"{\"body\":\"")?.strip_suffix(b"\"}")?;
    // The signature sits at the end; look for the marker in the tail only.
    let tail_from = rest.len().saturating_sub(256 + MARK.len());
    let tail = rest.get(tail_from..)?;
    let at = tail.windows(MARK.len()).rposition(|w| w == MARK)? + tail_from;
    let body = rest.get(..at)?;
    let signature = rest.get(at + MARK.len()..)?;
    if signature
        .iter()
        .any(|&b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b))
    {
        return None;
    }
    Some((body, std::str::from_utf8(signature).ok()?))
}

/// The general inner reader: `Buffer#toString("utf8")` (invalid sequences
/// become U+FFFD, a BOM is kept and then fails, as in the reference), then
/// `JSON.parse`, string `body` and `signature`, strict body decoding.
/// Returns the body bytes and whether the signature verifies.
pub(super) fn parse_inner(
    inner: Vec<u8>,
    sender: Option<&VerifyingKey>,
) -> Result<(Vec<u8>, bool), OpenFailure> {
    let inner = utf8_lossy_owned(inner);
    let parsed = json::parse(&inner).map_err(|_| OpenFailure::Malformed)?;
    drop(inner);
    // `null` has no properties (the reference throws here); any other
    // non-object lacks `body`. Both are malformed.
    let field = |name: &str| {
        parsed
            .get(parsed.root(), name)
            .and_then(|id| parsed.str(id))
    };
    let body_text = field("body").ok_or(OpenFailure::Malformed)?;
    let signature = field("signature").ok_or(OpenFailure::Malformed)?;
    if body_text.has_lone_surrogate() {
        return Err(OpenFailure::Malformed);
    }
    let body = b64::decode_inner_body(body_text.as_str()).ok_or(OpenFailure::Malformed)?;
    // The signature text is decoded leniently; a lone surrogate in it is
    // skipped by that decoder, exactly like the U+FFFD that stands in for it.
    let verified = verify_inner(sender, &body, signature.as_str());
    Ok((body, verified))
}

pub(super) fn verify_inner(sender: Option<&VerifyingKey>, body: &[u8], signature: &str) -> bool {
    match sender {
        Some(key) => keys::verify_with_key(key, body, signature),
        None => false,
    }
}

fn utf8_lossy_owned(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}
