//! Envelopes: a plaintext signed by the sender's Ed25519 identity, then sealed
//! to the recipient's X25519 key with libsodium's `crypto_box_seal`.
//!
//! Seal: signed body (compact JSON, fixed key order) → Ed25519 signature →
//! inner JSON `{"body","signature"}` → sealed box → base64url.
//! Open: the reference's checks in the reference's order, each failure one of
//! five reasons, never a panic or an error.
//!
//! The parts, each in its own file: [`sealed_box`] (X25519 + XSalsa20-Poly1305),
//! [`signed`] (the signed body and inner JSON formats), [`spare_keys`] and
//! [`own_seals`] (process caches that speed up seals to, and opens from, our
//! own key), [`scratch`] (reused buffers) and [`deferred`] (seals made later).

use ed25519_dalek::{SigningKey, VerifyingKey};
use rand_core::OsRng;
use x25519_dalek::{PublicKey as XPublicKey, StaticSecret};
use zeroize::Zeroizing;

use crate::b64;
use crate::json::{self, JsStr};
use crate::keys;
use crate::vocabulary::vocabulary;
use scratch::{with_scratch, with_seal_scratch};
use sealed_box::{
    open_box_in_place, open_box_with_key, random_secret, seal_box_keyed_into,
    seal_box_with_key_into, SEAL_OVERHEAD,
};
use signed::{
    parse_inner, read_claims, split_inner_fast, verify_inner, write_inner_json, write_signed_body,
};

pub mod deferred;
#[cfg(not(edge))]
mod own_seals;
mod scratch;
pub mod sealed_box;
pub mod signed;
mod spare_keys;

/// Envelope deadline offset from creation.
pub const ENVELOPE_MAX_AGE_MS: f64 = 86_400_000.0;

/// A plaintext as it arrives from JavaScript: usually UTF-8, or the exact
/// UTF-16 code units when it may hold lone surrogates.
#[derive(Clone, Copy, Debug)]
pub enum Text<'a> {
    Utf8(&'a str),
    Utf16(&'a [u16]),
}

/// What the signature binds besides the plaintext.
#[derive(Clone, Debug, PartialEq)]
pub struct Context {
    pub job_id: String,
    pub sender_key_id: String,
    pub recipient_key_id: String,
    pub deadline_at: f64,
    pub direction: String,
}

/// A sealed envelope's keys in the order the wire and every record have
/// them, the order of [`SealedEnvelope`]'s fields (the shell reads it through
/// `protocolConstants().envelopeKeys`).
pub const SEALED_ENVELOPE_KEYS: [&str; 5] = [
    "ciphertext",
    "recipientKeyId",
    "senderKeyId",
    "direction",
    "deadlineAt",
];

/// The wire envelope (field order = serialisation order).
#[derive(Clone, Debug, PartialEq)]
pub struct SealedEnvelope {
    pub ciphertext: String,
    pub recipient_key_id: String,
    pub sender_key_id: String,
    pub direction: String,
    pub deadline_at: f64,
}

/// What the opener expects (the deadline comes from the envelope itself).
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    pub job_id: String,
    pub sender_key_id: String,
    pub recipient_key_id: String,
    pub direction: String,
}

vocabulary! {
    /// Why an envelope did not open.
    pub OpenFailure {
        NotForUs => "not-for-us",
        Unopenable => "unopenable",
        Malformed => "malformed",
        BadSignature => "bad-signature",
        ContextMismatch => "context-mismatch",
    }
}

/// Why sealing failed (the reference throws in these cases).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The sender's `identityPrivate` is unusable.
    #[error("cannot seal: sender keys: {0}")]
    SenderKey(keys::KeyError),
    #[error(
        "cannot seal: the recipient encryption key must be 32 bytes of base64url, got {0} bytes"
    )]
    RecipientKeyLength(usize),
    /// The recipient key is of small order: libsodium refuses to seal to it.
    #[error("cannot seal: the recipient encryption key is a small-order point (no shared secret)")]
    RecipientKeyWeak,
}

/// The length of the ciphertext text (base64url) a seal of `plaintext`
/// with `context` gives, whatever the keys: the signed body, its signature
/// (always 86 characters) in the inner JSON, the box's 48 bytes.
pub fn sealed_ciphertext_chars(context: &Context, plaintext: Text<'_>) -> usize {
    /// `{"body":"` + `","signature":` + the quoted signature + `}`.
    const INNER_OVERHEAD: usize = 9 + 14 + 88 + 1;
    let unpadded = |bytes: usize| base64::encoded_len(bytes, false).unwrap_or(usize::MAX);
    // The signed body around an empty plaintext, then the plaintext's own
    // JSON length: a megabyte prompt is measured, not written.
    let mut around = String::new();
    write_signed_body(context, Text::Utf8(""), &mut around);
    let plain = match plaintext {
        Text::Utf8(s) => json::json_str_len(s),
        Text::Utf16(units) => {
            let mut written = Zeroizing::new(String::new());
            JsStr::from_utf16(units).write_json(&mut written);
            written.len()
        }
    };
    let body = (around.len() - 2).saturating_add(plain);
    let inner = unpadded(body).saturating_add(INNER_OVERHEAD);
    unpadded(inner.saturating_add(SEAL_OVERHEAD))
}

/// `JSON.stringify(envelope).length` of the wire envelope a seal of
/// `plaintext` with `context` gives (all ASCII, so also its bytes): the
/// measure `MAX_ENVELOPE_BYTES` caps.
pub fn sealed_envelope_chars(context: &Context, plaintext: Text<'_>) -> usize {
    SealedEnvelope::new(String::new(), context)
        .to_json()
        .len()
        .saturating_add(sealed_ciphertext_chars(context, plaintext))
}

impl SealedEnvelope {
    /// The envelope of `ciphertext`, sealed under `context`.
    pub fn new(ciphertext: String, context: &Context) -> SealedEnvelope {
        SealedEnvelope {
            ciphertext,
            recipient_key_id: context.recipient_key_id.clone(),
            sender_key_id: context.sender_key_id.clone(),
            direction: context.direction.clone(),
            deadline_at: context.deadline_at,
        }
    }

    /// `JSON.stringify(envelope)`: the wire form, in this key order.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\"ciphertext\":");
        json::write_json_str(&self.ciphertext, &mut out);
        out.push_str(",\"recipientKeyId\":");
        json::write_json_str(&self.recipient_key_id, &mut out);
        out.push_str(",\"senderKeyId\":");
        json::write_json_str(&self.sender_key_id, &mut out);
        out.push_str(",\"direction\":");
        json::write_json_str(&self.direction, &mut out);
        out.push_str(",\"deadlineAt\":");
        json::push_json_number(&mut out, self.deadline_at);
        out.push('}');
        out
    }
}

fn recipient_bytes(recipient_encryption_public: &str) -> Result<[u8; 32], SealError> {
    let recipient = b64::decode_lenient(recipient_encryption_public);
    recipient
        .as_slice()
        .try_into()
        .map_err(|_| SealError::RecipientKeyLength(recipient.len()))
}

/// The seal itself. `to_self`: the recipient key is the sender's own
/// (checked by the caller against the key derived from its secret), so the
/// envelope is remembered for [`own_seals`].
fn seal_to(
    plaintext: Text<'_>,
    sender: &SigningKey,
    recipient: &[u8; 32],
    context: &Context,
    to_self: bool,
) -> Result<SealedEnvelope, SealError> {
    with_seal_scratch(|body, inner, sealed| {
        write_signed_body(context, plaintext, body);
        let signature =
            b64::encode_url(&ed25519_dalek::Signer::sign(sender, body.as_bytes()).to_bytes());
        write_inner_json(body.as_bytes(), &signature, inner);
        // A seal to our own key takes a spare ephemeral key made ahead on
        // the background thread when there is one (see `spare_keys`).
        #[cfg(not(target_arch = "wasm32"))]
        let spare = if to_self {
            spare_keys::take(recipient)
        } else {
            None
        };
        #[cfg(target_arch = "wasm32")]
        let spare: Option<spare_keys::Spare> = None;
        let key = match spare {
            Some(spare_keys::Spare { public, key }) => {
                seal_box_with_key_into(&public, key, recipient, inner.as_bytes(), sealed)
            }
            None => {
                let ephemeral = random_secret(&mut OsRng);
                seal_box_keyed_into(&ephemeral, recipient, inner.as_bytes(), sealed)
            }
        }
        .ok_or(SealError::RecipientKeyWeak)?;
        #[cfg(not(edge))]
        if to_self && sealed.len() < own_seals::REMEMBER_BELOW {
            own_seals::remember(sealed, key, recipient, sender.verifying_key().as_bytes());
        }
        #[cfg(edge)]
        let _ = (to_self, key);
        Ok(SealedEnvelope::new(b64::encode_url(sealed), context))
    })
}

/// Seal `plaintext` from `sender` to `recipient_encryption_public`.
pub fn seal(
    plaintext: Text<'_>,
    sender: &SigningKey,
    recipient_encryption_public: &str,
    context: &Context,
) -> Result<SealedEnvelope, SealError> {
    let recipient = recipient_bytes(recipient_encryption_public)?;
    seal_to(plaintext, sender, &recipient, context, false)
}

/// `seal()` over raw `StoredKeys` fields, parsing the sender key each call
/// (what the reference does); prefer a [`keys::KeyHandle`] when reused.
pub fn seal_with_keys(
    plaintext: Text<'_>,
    sender_identity_private: &str,
    recipient_encryption_public: &str,
    context: &Context,
) -> Result<SealedEnvelope, SealError> {
    let sender = keys::parse_signing_key(sender_identity_private).map_err(SealError::SenderKey)?;
    seal(plaintext, &sender, recipient_encryption_public, context)
}

/// Seal with a parsed key handle as the sender.
pub fn seal_with_handle(
    plaintext: Text<'_>,
    sender: &keys::KeyHandle,
    recipient_encryption_public: &str,
    context: &Context,
) -> Result<SealedEnvelope, SealError> {
    let recipient = recipient_bytes(recipient_encryption_public)?;
    // Sealed to the key its own secret gives: an at-rest envelope this
    // process will most likely open again soon (see `own_seals`).
    let to_self = recipient == *sender.encryption_public();
    seal_to(
        plaintext,
        sender.signing_key(),
        &recipient,
        context,
        to_self,
    )
}

/// Open with a parsed key handle as the recipient.
pub fn open_with_handle(
    envelope: &SealedEnvelope,
    recipient: &keys::KeyHandle,
    sender: Option<&VerifyingKey>,
    expected: &Expected,
) -> Result<JsStr, OpenFailure> {
    let recipient = Recipient {
        secret: recipient.encryption_secret(),
        public: recipient.encryption_public(),
    };
    open(envelope, Some(recipient), sender, expected)
}

/// [`open_then`] with a parsed key handle as the recipient.
pub fn open_with_handle_then<T>(
    envelope: &SealedEnvelope,
    recipient: &keys::KeyHandle,
    sender: Option<&VerifyingKey>,
    expected: &Expected,
    then: impl FnOnce(JsStr) -> T,
) -> Result<T, OpenFailure> {
    let recipient = Recipient {
        secret: recipient.encryption_secret(),
        public: recipient.encryption_public(),
    };
    open_then(envelope, Some(recipient), sender, expected, then)
}

/// The recipient side of an open: a parsed X25519 secret and its public key.
pub struct Recipient<'a> {
    pub secret: &'a StaticSecret,
    pub public: &'a [u8; 32],
}

/// Open an envelope. Checks, in the reference's order:
/// 1. the envelope's key ids and direction are the expected ones (`not-for-us`);
/// 2. the sealed box opens (`unopenable`);
/// 3. the inner text is JSON with string `body` and `signature`, and `body`
///    passes the strict decoder (`malformed`);
/// 4. the signature verifies under the sender identity (`bad-signature`);
/// 5. the signed body is JSON (`malformed`);
/// 6. the signed claims match the expected context and the envelope's deadline
///    (`context-mismatch`);
/// 7. `plaintext` is a string (`malformed`).
///
/// Deliberate difference: where the reference throws a `TypeError` (the inner
/// text or the signed body is the JSON literal `null`), this returns
/// `malformed`, so a paired runner cannot make the result handler fail.
pub fn open(
    envelope: &SealedEnvelope,
    recipient: Option<Recipient<'_>>,
    sender: Option<&VerifyingKey>,
    expected: &Expected,
) -> Result<JsStr, OpenFailure> {
    open_then(envelope, recipient, sender, expected, |plaintext| plaintext)
}

/// Signed bodies from this size on are verified on a second thread while
/// [`open_then`]'s continuation runs: SHA-512 over a megabyte is
/// milliseconds, starting a thread is microseconds. (Not in WebAssembly,
/// which has no such thread; the edge module has no use for it at all.)
#[cfg(not(edge))]
const PARALLEL_VERIFY_FROM: usize = 256 * 1024;

/// [`open`], then `then` on the plaintext. For a large body the signature
/// check runs on a second thread while the claims are read and `then` runs
/// (the fetch path's reseal), and `then`'s answer is returned only if the
/// check passes. The reasons and their precedence are `open`'s: a bad
/// signature wins over whatever the claims say.
pub fn open_then<T>(
    envelope: &SealedEnvelope,
    recipient: Option<Recipient<'_>>,
    sender: Option<&VerifyingKey>,
    expected: &Expected,
    then: impl FnOnce(JsStr) -> T,
) -> Result<T, OpenFailure> {
    if envelope.recipient_key_id != expected.recipient_key_id
        || envelope.sender_key_id != expected.sender_key_id
        || envelope.direction != expected.direction
    {
        return Err(OpenFailure::NotForUs);
    }

    // An unusable recipient key is just another box that does not open.
    let recipient = recipient.ok_or(OpenFailure::Unopenable)?;
    with_scratch(|sealed, body| {
        b64::decode_lenient_into(&envelope.ciphertext, sealed);
        // An envelope sealed here to our own key, byte for byte: its box key
        // and its signer are known (see `own_seals`).
        #[cfg(not(edge))]
        let known = sender.and_then(|s| own_seals::recall(sealed, recipient.public, s.as_bytes()));
        #[cfg(edge)]
        let known: Option<Zeroizing<[u8; 32]>> = None;
        let signed_here = known.is_some();
        let inner = match &known {
            Some(key) => open_box_with_key(key, recipient.public, sealed),
            None => open_box_in_place(recipient.secret, recipient.public, sealed),
        }
        .ok_or(OpenFailure::Unopenable)?;
        let verified = match split_inner_fast(inner) {
            // The common case, `{"body":"…","signature":"…"}` exactly as seal
            // writes it: read straight from the bytes, no JSON tree and no
            // copy of the (large) body text.
            Some((body_text, signature)) if b64::decode_inner_body_into(body_text, body) => {
                if signed_here {
                    return read_claims(envelope, expected, body).map(then);
                }
                // No second thread in WebAssembly: the edge module has none, and
                // in the Node binding's fallback each one is a new worker.
                #[cfg(not(target_arch = "wasm32"))]
                if body.len() >= PARALLEL_VERIFY_FROM {
                    let body: &[u8] = body;
                    return std::thread::scope(|scope| {
                        let check = scope.spawn(|| verify_inner(sender, body, signature));
                        let done = read_claims(envelope, expected, body).map(then);
                        // A check that could not finish did not pass.
                        if !check.join().unwrap_or(false) {
                            return Err(OpenFailure::BadSignature);
                        }
                        done
                    });
                }
                verify_inner(sender, body, signature)
            }
            // Any other text (escapes, more members, other order…): let the
            // JSON reader decide what it says.
            _ => {
                let (decoded, verified) = parse_inner(inner.to_vec(), sender)?;
                *body = decoded;
                verified
            }
        };
        if !verified {
            return Err(OpenFailure::BadSignature);
        }
        read_claims(envelope, expected, body).map(then)
    })
}

/// `open()` over raw `StoredKeys` / identity text, parsing both keys each call.
pub fn open_with_keys(
    envelope: &SealedEnvelope,
    recipient_encryption_private: &str,
    sender_identity_public: &str,
    expected: &Expected,
) -> Result<JsStr, OpenFailure> {
    let secret = keys::parse_encryption_secret(recipient_encryption_private).ok();
    let public = secret.as_ref().map(|s| *XPublicKey::from(s).as_bytes());
    let recipient = match (&secret, &public) {
        (Some(secret), Some(public)) => Some(Recipient { secret, public }),
        _ => None,
    };
    let sender = keys::verifying_key(sender_identity_public);
    open(envelope, recipient, sender.as_ref(), expected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::key_id;
    use crate::keys::{KeyHandle, StoredKeys};
    use signed::{inner_json, signed_body};

    pub(super) fn party(n: u8) -> KeyHandle {
        match KeyHandle::new(StoredKeys::from_secrets(
            &[n; 32],
            &[n.wrapping_add(100); 32],
            1,
        )) {
            Ok(h) => h,
            Err(e) => panic!("fixture keys: {e}"),
        }
    }

    pub(super) fn context(from: &KeyHandle, to: &KeyHandle) -> Context {
        Context {
            job_id: "job-1".into(),
            sender_key_id: from.key_id().into(),
            recipient_key_id: to.key_id().into(),
            deadline_at: 1_767_312_000_000.0,
            direction: "result".into(),
        }
    }

    pub(super) fn expected(ctx: &Context) -> Expected {
        Expected {
            job_id: ctx.job_id.clone(),
            sender_key_id: ctx.sender_key_id.clone(),
            recipient_key_id: ctx.recipient_key_id.clone(),
            direction: ctx.direction.clone(),
        }
    }

    pub(super) fn open_as(
        to: &KeyHandle,
        from: &KeyHandle,
        env: &SealedEnvelope,
        exp: &Expected,
    ) -> Result<JsStr, OpenFailure> {
        let sender = keys::verifying_key(&from.keys().identity_public);
        let recipient = Recipient {
            secret: to.encryption_secret(),
            public: to.encryption_public(),
        };
        open(env, Some(recipient), sender.as_ref(), exp)
    }

    fn seal_raw_inner(to: &KeyHandle, inner: &[u8]) -> String {
        let ephemeral = random_secret(&mut OsRng);
        match sealed_box::seal_box_with_ephemeral(&ephemeral, to.encryption_public(), inner) {
            Some(sealed) => b64::encode_url(&sealed),
            None => panic!("seal to a fixture key"),
        }
    }

    #[test]
    fn round_trip() {
        let (site, device) = (party(1), party(2));
        let ctx = context(&device, &site);
        let sender =
            keys::parse_signing_key(&device.keys().identity_private).map_err(|e| e.to_string());
        let Ok(sender) = sender else {
            panic!("sender key")
        };
        let env = seal(
            Text::Utf8("héllo 😀\u{2028}"),
            &sender,
            &site.keys().encryption_public,
            &ctx,
        );
        let Ok(env) = env else { panic!("seal failed") };
        assert_eq!(env.recipient_key_id, key_id(&site.keys().identity_public));
        let opened = open_as(&site, &device, &env, &expected(&ctx));
        assert_eq!(
            opened.map(|p| p.as_str().to_string()),
            Ok("héllo 😀\u{2028}".to_string())
        );
        // Wrong sender pin.
        assert_eq!(
            open_as(&site, &site, &env, &expected(&ctx)).err(),
            Some(OpenFailure::BadSignature)
        );
        // Wrong recipient secret.
        assert_eq!(
            open_as(&device, &device, &env, &expected(&ctx)).err(),
            Some(OpenFailure::Unopenable)
        );
    }

    #[test]
    fn lone_surrogates_survive_a_round_trip() {
        let (site, device) = (party(3), party(4));
        let ctx = context(&device, &site);
        let Ok(sender) = keys::parse_signing_key(&device.keys().identity_private) else {
            panic!()
        };
        let units = [0x61, 0xD800, 0x62];
        let Ok(env) = seal(
            Text::Utf16(&units),
            &sender,
            &site.keys().encryption_public,
            &ctx,
        ) else {
            panic!()
        };
        let opened = open_as(&site, &device, &env, &expected(&ctx));
        assert_eq!(
            opened
                .ok()
                .and_then(|p| p.lone_utf16().map(<[u16]>::to_vec)),
            Some(units.to_vec())
        );
    }

    /// `text` sealed by `site` to its own key (an at-rest envelope).
    pub(super) fn seal_at_rest(site: &KeyHandle, text: &str) -> SealedEnvelope {
        match seal_with_handle(
            Text::Utf8(text),
            site,
            &site.keys().encryption_public,
            &context(site, site),
        ) {
            Ok(env) => env,
            Err(e) => panic!("seal: {e}"),
        }
    }

    /// `site` opening its own at-rest envelope, as text.
    pub(super) fn open_at_rest(
        site: &KeyHandle,
        env: &SealedEnvelope,
        exp: &Expected,
    ) -> Result<String, OpenFailure> {
        open_as(site, site, env, exp).map(|p| p.as_str().to_string())
    }

    /// `env`'s sealed box, decoded.
    pub(super) fn sealed_bytes(env: &SealedEnvelope) -> Vec<u8> {
        let mut out = Vec::new();
        b64::decode_lenient_into(&env.ciphertext, &mut out);
        out
    }

    #[test]
    fn repeated_seals_to_one_key_open() {
        let site = party(7);
        let to = party(8);
        let ctx = context(&site, &to);
        for i in 0..12 {
            let text = format!("message {i}");
            let Ok(env) =
                seal_with_handle(Text::Utf8(&text), &site, &to.keys().encryption_public, &ctx)
            else {
                panic!("seal")
            };
            match open_as(&to, &site, &env, &expected(&ctx)) {
                Ok(opened) => assert_eq!(opened.as_str(), text),
                Err(e) => panic!("open {i}: {e:?}"),
            }
        }
    }

    #[test]
    fn large_bodies_checked_beside_the_continuation_keep_opens_answers() {
        let site = party(9);
        let to = party(10);
        let stranger = party(11);
        let ctx = context(&site, &to);
        let text = "é and more ".repeat(PARALLEL_VERIFY_FROM / 8);
        let Ok(env) =
            seal_with_handle(Text::Utf8(&text), &site, &to.keys().encryption_public, &ctx)
        else {
            panic!("seal")
        };
        let recipient = || Recipient {
            secret: to.encryption_secret(),
            public: to.encryption_public(),
        };
        let site_key = keys::verifying_key(&site.keys().identity_public);
        let stranger_key = keys::verifying_key(&stranger.keys().identity_public);
        let mut ran = 0;
        // The real sender: the continuation's answer comes back.
        let good = open_then(
            &env,
            Some(recipient()),
            site_key.as_ref(),
            &expected(&ctx),
            |p| {
                ran += 1;
                p.as_str().len()
            },
        );
        assert_eq!(good, Ok(text.len()));
        // Anyone else: a bad signature, whatever the continuation made.
        let forged = open_then(
            &env,
            Some(recipient()),
            stranger_key.as_ref(),
            &expected(&ctx),
            |p| {
                ran += 1;
                p.as_str().len()
            },
        );
        assert_eq!(forged, Err(OpenFailure::BadSignature));
        // Wrong claims and a bad signature: the signature is named, as `open` does.
        let mut other = expected(&ctx);
        other.job_id = "job-2".into();
        let both = open_then(
            &env,
            Some(recipient()),
            stranger_key.as_ref(),
            &other,
            |p| p,
        );
        assert_eq!(
            both.map(|p| p.into_string()),
            Err(OpenFailure::BadSignature)
        );
        let claims = open_then(&env, Some(recipient()), site_key.as_ref(), &other, |p| p);
        assert_eq!(
            claims.map(|p| p.into_string()),
            Err(OpenFailure::ContextMismatch)
        );
        assert_eq!(
            open(
                &env,
                Some(recipient()),
                stranger_key.as_ref(),
                &expected(&ctx)
            )
            .map(|p| p.into_string()),
            Err(OpenFailure::BadSignature)
        );
        assert!(ran >= 1);
    }

    #[test]
    fn null_inner_and_null_claims_are_malformed_not_a_throw() {
        let (site, device) = (party(7), party(8));
        let ctx = context(&device, &site);
        let exp = expected(&ctx);
        let mut env = SealedEnvelope::new(seal_raw_inner(&site, b"null"), &ctx);
        assert_eq!(
            open_as(&site, &device, &env, &exp).err(),
            Some(OpenFailure::Malformed)
        );
        let body = b"null";
        let inner = inner_json(body, &device.sign_text(body));
        env.ciphertext = seal_raw_inner(&site, &inner);
        assert_eq!(
            open_as(&site, &device, &env, &exp).err(),
            Some(OpenFailure::Malformed)
        );
        // A validly signed non-object body reads as "no claims": context-mismatch,
        // as in the reference (property reads on a number are undefined).
        let body = b"5";
        let inner = inner_json(body, &device.sign_text(body));
        env.ciphertext = seal_raw_inner(&site, &inner);
        assert_eq!(
            open_as(&site, &device, &env, &exp).err(),
            Some(OpenFailure::ContextMismatch)
        );
    }

    #[test]
    fn duplicate_claim_keys_last_wins_and_bom_is_dropped() {
        let (site, device) = (party(9), party(10));
        let ctx = context(&device, &site);
        let exp = expected(&ctx);
        let good = String::from_utf8(signed_body(&ctx, Text::Utf8("first"))).unwrap_or_default();
        let body = format!(
            "\u{feff}{},\"plaintext\":\"second\"}}",
            good.trim_end_matches('}')
        );
        let inner = inner_json(body.as_bytes(), &device.sign_text(body.as_bytes()));
        let env = SealedEnvelope::new(seal_raw_inner(&site, &inner), &ctx);
        assert_eq!(
            open_as(&site, &device, &env, &exp).map(|p| p.as_str().to_string()),
            Ok("second".to_string())
        );
        // A BOM before the inner JSON is not dropped: malformed.
        let mut inner_bom = b"\xEF\xBB\xBF".to_vec();
        inner_bom.extend_from_slice(&inner);
        let env2 = SealedEnvelope {
            ciphertext: seal_raw_inner(&site, &inner_bom),
            ..env
        };
        assert_eq!(
            open_as(&site, &device, &env2, &exp).err(),
            Some(OpenFailure::Malformed)
        );
    }

    #[test]
    fn inner_text_other_than_the_usual_shape_reads_like_json_parse() {
        let (site, device) = (party(11), party(12));
        let ctx = context(&device, &site);
        let exp = expected(&ctx);
        let body = signed_body(&ctx, Text::Utf8("p"));
        let sig = device.sign_text(&body);
        let b = b64::encode_url(&body);
        let env_for =
            |inner: String| SealedEnvelope::new(seal_raw_inner(&site, inner.as_bytes()), &ctx);
        let ok = Ok("p".to_string());
        let cases: Vec<(String, Result<String, OpenFailure>)> = vec![
            (
                format!("{{\"body\":\"{b}\",\"signature\":\"{sig}\"}}"),
                ok.clone(),
            ),
            // An escape inside the body: JSON.parse reads it, so do we.
            (
                format!(
                    "{{\"body\":\"\\u00{:02x}{}\",\"signature\":\"{sig}\"}}",
                    b.as_bytes()[0],
                    &b[1..]
                ),
                ok.clone(),
            ),
            // Extra members, other order, whitespace, duplicates (last wins).
            (
                format!("{{\"body\":\"{b}\",\"x\":1,\"signature\":\"{sig}\"}}"),
                ok.clone(),
            ),
            (
                format!("{{\"signature\":\"{sig}\",\"body\":\"{b}\"}}"),
                ok.clone(),
            ),
            (
                format!(" {{ \"body\" : \"{b}\" , \"signature\" : \"{sig}\" }} "),
                ok.clone(),
            ),
            (
                format!("{{\"body\":\"AAAA\",\"body\":\"{b}\",\"signature\":\"{sig}\"}}"),
                ok.clone(),
            ),
            // A signature with junk the lenient decoder skips still verifies.
            (
                format!("{{\"body\":\"{b}\",\"signature\":\"{sig}==\"}}"),
                ok.clone(),
            ),
            (
                format!("{{\"body\":\"{b}\",\"signature\":\"{sig}\\u00e9\"}}"),
                ok.clone(),
            ),
            (
                format!("{{\"body\":\"{b}=\",\"signature\":\"{sig}\"}}"),
                Err(OpenFailure::Malformed),
            ),
            (
                format!("{{\"body\":\"{b}\",\"signature\":\"{}\"}}", &sig[1..]),
                Err(OpenFailure::BadSignature),
            ),
            (
                format!("{{\"body\":\"{b}\",\"signature\":5}}"),
                Err(OpenFailure::Malformed),
            ),
            // A signature too long for the fast path's tail window: the
            // general reader takes over and the lenient decoder skips junk.
            (
                format!(
                    "{{\"body\":\"{b}\",\"signature\":\"{sig}{}\"}}",
                    "!".repeat(400)
                ),
                ok.clone(),
            ),
        ];
        for (inner, want) in cases {
            let got = open_as(&site, &device, &env_for(inner.clone()), &exp)
                .map(|p| p.as_str().to_string());
            assert_eq!(got, want, "{inner}");
        }
    }

    #[test]
    fn bad_keys_never_panic() {
        let ctx = context(&party(1), &party(2));
        let env = SealedEnvelope {
            ciphertext: "garbage".into(),
            recipient_key_id: ctx.recipient_key_id.clone(),
            sender_key_id: ctx.sender_key_id.clone(),
            direction: ctx.direction.clone(),
            deadline_at: 1.0,
        };
        assert_eq!(
            open_with_keys(&env, "x", "y", &expected(&ctx)).err(),
            Some(OpenFailure::Unopenable)
        );
        assert!(matches!(
            seal_with_keys(Text::Utf8("x"), "bad", "bad", &ctx),
            Err(SealError::SenderKey(_))
        ));
        let sender = party(1).keys().identity_private.clone();
        assert_eq!(
            seal_with_keys(Text::Utf8("x"), &sender, "AAAA", &ctx).err(),
            Some(SealError::RecipientKeyLength(3))
        );
        assert_eq!(
            seal_with_keys(Text::Utf8("x"), &sender, &b64::encode_url(&[0; 32]), &ctx).err(),
            Some(SealError::RecipientKeyWeak)
        );
    }
}
