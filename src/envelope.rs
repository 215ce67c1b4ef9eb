//! Envelopes: a plaintext signed by the sender's Ed25519 identity, then sealed
//! to the recipient's X25519 key with libsodium's `crypto_box_seal`.
//!
//! Seal: signed body (compact JSON, fixed key order) → Ed25519 signature →
//! inner JSON `{"body","signature"}` → sealed box → base64url.
//! Open: the reference's checks in the reference's order, each failure one of
//! five reasons, never a panic or an error.
//!
//! The sealed box is composed here from RustCrypto parts (X25519 from
//! `x25519-dalek`, HSalsa20 from `salsa20`, XSalsa20-Poly1305 from
//! `crypto_secretbox`, the BLAKE2b nonce from `blake2`) rather than called as
//! `crypto_box::PublicKey::seal` / `SecretKey::unseal`, for two reasons:
//! * libsodium refuses a box whose shared secret is all zeros (a small-order
//!   ephemeral or recipient key); `crypto_box` accepts it. The reference
//!   answers `unopenable` there, and refuses to seal to such a key.
//! * `unseal` re-derives the recipient's public key on every call; a parsed
//!   key handle already has it, which saves a scalar multiplication per open.
//!
//! The byte layout (`epk ‖ tag ‖ ciphertext`, nonce = BLAKE2b-192(epk ‖ pk))
//! is pinned by the known-answer vectors and cross-checked against
//! `crypto_box` in the tests below.

use blake2::digest::consts::U24;
use blake2::{Blake2b, Digest};
use crypto_secretbox::Nonce;
use ed25519_dalek::{SigningKey, VerifyingKey};
use rand_core::{CryptoRng, OsRng, RngCore};
use salsa20::hsalsa;
use x25519_dalek::{PublicKey as XPublicKey, StaticSecret};
use zeroize::Zeroizing;

use crate::b64;
use crate::json::{self, JsStr, Node};
use crate::keys;

pub mod deferred;

/// `v` of the signed body.
pub const ENVELOPE_BODY_VERSION: &str = "byollm/v1/envelope";
/// Envelope deadline offset from creation.
pub const ENVELOPE_MAX_AGE_MS: f64 = 86_400_000.0;
/// Ephemeral public key plus Poly1305 tag.
pub const SEAL_OVERHEAD: usize = 48;

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

/// Why an envelope did not open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenFailure {
    NotForUs,
    Unopenable,
    Malformed,
    BadSignature,
    ContextMismatch,
}

impl OpenFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OpenFailure::NotForUs => "not-for-us",
            OpenFailure::Unopenable => "unopenable",
            OpenFailure::Malformed => "malformed",
            OpenFailure::BadSignature => "bad-signature",
            OpenFailure::ContextMismatch => "context-mismatch",
        }
    }
}

/// Why sealing failed (the reference throws in these cases).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SealError {
    /// The sender's `identityPrivate` is unusable.
    SenderKey(keys::KeyError),
    /// The recipient encryption key does not decode to 32 bytes.
    RecipientKeyLength(usize),
    /// The recipient key is of small order: libsodium refuses to seal to it.
    RecipientKeyWeak,
}

impl std::fmt::Display for SealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SealError::SenderKey(e) => write!(f, "cannot seal: sender keys: {e}"),
            SealError::RecipientKeyLength(n) => write!(
                f,
                "cannot seal: the recipient encryption key must be 32 bytes of base64url, got {n} bytes"
            ),
            SealError::RecipientKeyWeak => f.write_str(
                "cannot seal: the recipient encryption key is a small-order point (no shared secret)",
            ),
        }
    }
}

impl std::error::Error for SealError {}

/// The exact bytes the envelope signature covers: `JSON.stringify` of
/// `{v, jobId, senderKeyId, recipientKeyId, deadlineAt, direction, plaintext}`.
pub fn signed_body(context: &Context, plaintext: Text<'_>) -> Vec<u8> {
    let mut out = String::new();
    write_signed_body(context, plaintext, &mut out);
    out.into_bytes()
}

/// [`signed_body`] appended to `out`.
fn write_signed_body(context: &Context, plaintext: Text<'_>, out: &mut String) {
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
fn write_inner_json(body: &[u8], signature: &str, out: &mut String) {
    out.reserve(body.len() / 3 * 4 + signature.len() + 32);
    out.push_str("{\"body\":\"");
    b64::encode_url_append(body, out);
    out.push_str("\",\"signature\":");
    // A signature we made is base64url, but escape anyway so the output is
    // always the JSON.stringify of whatever was given.
    json::write_json_str(signature, out);
    out.push('}');
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
    let mut around = String::from("{\"ciphertext\":\"\",\"recipientKeyId\":");
    json::write_json_str(&context.recipient_key_id, &mut around);
    around.push_str(",\"senderKeyId\":");
    json::write_json_str(&context.sender_key_id, &mut around);
    around.push_str(",\"direction\":");
    json::write_json_str(&context.direction, &mut around);
    around.push_str(",\"deadlineAt\":");
    if context.deadline_at.is_finite() {
        json::push_js_number(&mut around, context.deadline_at);
    } else {
        around.push_str("null");
    }
    around.push('}');
    around
        .len()
        .saturating_add(sealed_ciphertext_chars(context, plaintext))
}

/// BLAKE2b-192 over `epk ‖ recipient pk`: the sealed-box nonce.
fn seal_nonce(ephemeral_public: &[u8; 32], recipient_public: &[u8; 32]) -> Nonce {
    let mut hasher = Blake2b::<U24>::new();
    hasher.update(ephemeral_public);
    hasher.update(recipient_public);
    hasher.finalize()
}

/// X25519 then HSalsa20 (`crypto_box_beforenm`), refusing an all-zero shared
/// secret like libsodium does; the key `crate::secretbox` takes.
fn box_key_bytes(secret: &StaticSecret, their_public: &[u8; 32]) -> Option<Zeroizing<[u8; 32]>> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(shared) = variable_base_shared_secret(secret, their_public) {
        if bool::from(subtle::ConstantTimeEq::ct_eq(&shared[..], &[0u8; 32][..])) {
            return None;
        }
        return Some(hsalsa_key(&shared));
    }
    let shared = secret.diffie_hellman(&XPublicKey::from(*their_public));
    if !shared.was_contributory() {
        return None;
    }
    Some(hsalsa_key(shared.as_bytes()))
}

/// X25519 of our secret against a key we see once (an envelope's ephemeral
/// key), computed on the Edwards form of the point: curve25519-dalek runs
/// that multiplication on its vector backends (AVX-512 IFMA, else AVX2) when
/// the CPU has them, which the Montgomery ladder cannot use (≈ 13 µs with
/// IFMA and 22 with AVX2, against the ladder's 51, here). Constant time
/// in the secret; the point is public. Equal to the ladder for the same
/// reasons as [`fixed_base`] (the unreduced clamped scalar, the u-coordinate
/// of either lift); `None` for a u on the twist, which keeps the ladder.
#[cfg(not(target_arch = "wasm32"))]
fn variable_base_shared_secret(
    secret: &StaticSecret,
    their_public: &[u8; 32],
) -> Option<Zeroizing<[u8; 32]>> {
    let point = curve25519_dalek::montgomery::MontgomeryPoint(*their_public).to_edwards(0)?;
    let scalar = Zeroizing::new(secret.to_bytes());
    let mut product = point.mul_clamped(*scalar);
    let shared = Zeroizing::new(product.to_montgomery().to_bytes());
    zeroize::Zeroize::zeroize(&mut product);
    Some(shared)
}

/// HSalsa20 of the X25519 output with a zero nonce (`crypto_box_beforenm`).
fn hsalsa_key(shared: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    let mut key = hsalsa::<salsa20::cipher::consts::U10>(shared.into(), &Default::default());
    let bytes = Zeroizing::new(key.into());
    zeroize::Zeroize::zeroize(key.as_mut_slice());
    bytes
}

/// The seal side's box key: the ephemeral secret against the recipient's
/// public key, through the recipient's precomputed table when it has one.
fn seal_box_key(
    ephemeral: &StaticSecret,
    recipient_public: &[u8; 32],
) -> Option<Zeroizing<[u8; 32]>> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(shared) = fixed_base::shared_secret(ephemeral, recipient_public) {
        // All zeros: a small-order recipient key, refused as libsodium does.
        if bool::from(subtle::ConstantTimeEq::ct_eq(&shared[..], &[0u8; 32][..])) {
            return None;
        }
        return Some(hsalsa_key(&shared));
    }
    box_key_bytes(ephemeral, recipient_public)
}

/// X25519 to a recipient we seal to again and again (the site's own key at
/// every enqueue, a paired device's key at every fetch) through a
/// constant-time table of multiples of that recipient's point: the same
/// multiplication the site's identity signature does with the basepoint
/// table, about a third of the Montgomery ladder's time here. The table costs
/// about as much as twenty ladders and 30 KB, so a key gets one only after
/// being sealed to a few times, and only a bounded number of keys keep one.
///
/// Why it equals X25519: the ladder's answer is the u-coordinate of
/// `clamp(k)·P` for either point P with the recipient's u (a u on the curve's
/// twist has no Edwards point and keeps the ladder). The clamped scalar is
/// used unreduced, a multiple of the cofactor, so a small-order component of
/// P vanishes just as in the ladder, and the identity maps back to u = 0.
#[cfg(not(target_arch = "wasm32"))]
mod fixed_base {
    use curve25519_dalek::edwards::EdwardsBasepointTable;
    use curve25519_dalek::montgomery::MontgomeryPoint;
    use curve25519_dalek::traits::BasepointTable;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    use x25519_dalek::StaticSecret;
    use zeroize::Zeroizing;

    /// Seals to a key before it gets a table (a table pays for itself after ~25).
    pub(super) const BUILD_AFTER: u32 = 4;
    /// Keys holding a table at once (30 KB each).
    const MAX_TABLES: usize = 64;
    /// Keys whose seals are being counted, before the count starts over.
    const MAX_COUNTED: usize = 4096;

    #[derive(Default)]
    struct Tables {
        /// `None`: this u has no Edwards point (the twist); the ladder it is.
        built: HashMap<[u8; 32], Option<Arc<EdwardsBasepointTable>>>,
        /// Insertion order of `built`, for eviction.
        order: std::collections::VecDeque<[u8; 32]>,
        seen: HashMap<[u8; 32], u32>,
    }

    fn tables() -> &'static Mutex<Tables> {
        static TABLES: OnceLock<Mutex<Tables>> = OnceLock::new();
        TABLES.get_or_init(|| Mutex::new(Tables::default()))
    }

    /// The table for `public`, building it on the seal that reaches
    /// [`BUILD_AFTER`]; `None` means: use the ladder.
    fn table_for(public: &[u8; 32]) -> Option<Arc<EdwardsBasepointTable>> {
        {
            let mut state = tables().lock().ok()?;
            if let Some(entry) = state.built.get(public) {
                return entry.clone();
            }
            if state.seen.len() >= MAX_COUNTED && !state.seen.contains_key(public) {
                state.seen.clear();
            }
            let count = state.seen.entry(*public).or_insert(0);
            *count += 1;
            if *count < BUILD_AFTER {
                return None;
            }
            state.seen.remove(public);
        }
        // Built outside the lock: a millisecond other seals need not wait for.
        let table = MontgomeryPoint(*public)
            .to_edwards(0)
            .map(|point| Arc::new(EdwardsBasepointTable::create(&point)));
        let mut state = tables().lock().ok()?;
        if !state.built.contains_key(public) {
            if state.built.len() >= MAX_TABLES {
                if let Some(oldest) = state.order.pop_front() {
                    state.built.remove(&oldest);
                }
            }
            state.built.insert(*public, table.clone());
            state.order.push_back(*public);
        }
        table
    }

    /// The X25519 output of `ephemeral` against `public`, or `None` when
    /// `public` has no table (the caller runs the ladder).
    pub(super) fn shared_secret(
        ephemeral: &StaticSecret,
        public: &[u8; 32],
    ) -> Option<Zeroizing<[u8; 32]>> {
        let table = table_for(public)?;
        let scalar = Zeroizing::new(ephemeral.to_bytes());
        let mut point = table.mul_base_clamped(*scalar);
        let shared = Zeroizing::new(point.to_montgomery().to_bytes());
        zeroize::Zeroize::zeroize(&mut point);
        Some(shared)
    }
}

/// `crypto_box_seal` with a given ephemeral secret (for known answers; real
/// seals use [`seal_box`]). `None` when the recipient key is of small order.
pub fn seal_box_with_ephemeral(
    ephemeral: &StaticSecret,
    recipient_public: &[u8; 32],
    message: &[u8],
) -> Option<Vec<u8>> {
    seal_box_keyed(ephemeral, recipient_public, message).map(|(sealed, _)| sealed)
}

/// [`seal_box_with_ephemeral`], also giving the box key (for [`own_seals`]).
fn seal_box_keyed(
    ephemeral: &StaticSecret,
    recipient_public: &[u8; 32],
    message: &[u8],
) -> Option<(Vec<u8>, Zeroizing<[u8; 32]>)> {
    let mut out = Vec::new();
    let key = seal_box_keyed_into(ephemeral, recipient_public, message, &mut out)?;
    Some((out, key))
}

/// [`seal_box_keyed`] into `out` (cleared first).
fn seal_box_keyed_into(
    ephemeral: &StaticSecret,
    recipient_public: &[u8; 32],
    message: &[u8],
    out: &mut Vec<u8>,
) -> Option<Zeroizing<[u8; 32]>> {
    let ephemeral_public = *XPublicKey::from(ephemeral).as_bytes();
    let key = seal_box_key(ephemeral, recipient_public)?;
    seal_box_with_key_into(&ephemeral_public, key, recipient_public, message, out)
}

/// The sealed box of `message` under an ephemeral public key and the box
/// key it shares with the recipient, into `out` (cleared first).
fn seal_box_with_key_into(
    ephemeral_public: &[u8; 32],
    key: Zeroizing<[u8; 32]>,
    recipient_public: &[u8; 32],
    message: &[u8],
    out: &mut Vec<u8>,
) -> Option<Zeroizing<[u8; 32]>> {
    let nonce: [u8; 24] = seal_nonce(ephemeral_public, recipient_public).into();
    out.clear();
    out.reserve(SEAL_OVERHEAD + message.len());
    out.extend_from_slice(ephemeral_public);
    out.extend_from_slice(&[0u8; 16]);
    out.extend_from_slice(message);
    // Through crate::secretbox (SSE2 Salsa20 on x86_64), as open does.
    let tag = crate::secretbox::seal_in_place(&key, &nonce, out.get_mut(SEAL_OVERHEAD..)?);
    out.get_mut(32..SEAL_OVERHEAD)?.copy_from_slice(&tag);
    Some(key)
}

/// A fresh X25519 secret from `rng` (32 random bytes; clamping happens when
/// it is used). Our RNG is rand_core 0.6's, x25519-dalek 3 takes 0.10's, so
/// the bytes are drawn here rather than through `random_from_rng`.
fn random_secret<R: RngCore + CryptoRng>(rng: &mut R) -> StaticSecret {
    let mut bytes = Zeroizing::new([0u8; 32]);
    rng.fill_bytes(bytes.as_mut());
    StaticSecret::from(*bytes)
}

/// `crypto_box_seal` with a fresh ephemeral key from `rng`.
pub fn seal_box<R: RngCore + CryptoRng>(
    rng: &mut R,
    recipient_public: &[u8; 32],
    message: &[u8],
) -> Option<Vec<u8>> {
    let ephemeral = random_secret(rng);
    seal_box_with_ephemeral(&ephemeral, recipient_public, message)
}

/// `crypto_box_seal_open`: `None` for anything that does not open (too short,
/// zero shared secret, wrong key, bad tag).
pub fn open_box(secret: &StaticSecret, own_public: &[u8; 32], sealed: &[u8]) -> Option<Vec<u8>> {
    open_box_owned(secret, own_public, sealed.to_vec())
}

/// [`open_box`] decrypting in place in the caller's buffer (a megabyte
/// payload is then not copied once more).
pub fn open_box_owned(
    secret: &StaticSecret,
    own_public: &[u8; 32],
    mut sealed: Vec<u8>,
) -> Option<Vec<u8>> {
    if sealed.len() < SEAL_OVERHEAD {
        return None;
    }
    let ephemeral_public: [u8; 32] = sealed.get(..32)?.try_into().ok()?;
    let tag: [u8; 16] = sealed.get(32..SEAL_OVERHEAD)?.try_into().ok()?;
    let key = box_key_bytes(secret, &ephemeral_public)?;
    let nonce = seal_nonce(&ephemeral_public, own_public).into();
    if !crate::secretbox::open_in_place(&key, &nonce, sealed.get_mut(SEAL_OVERHEAD..)?, &tag) {
        return None;
    }
    sealed.drain(..SEAL_OVERHEAD);
    Some(sealed)
}

/// Seal `plaintext` from `sender` to `recipient_encryption_public`.
pub fn seal_with_rng<R: RngCore + CryptoRng>(
    rng: &mut R,
    plaintext: Text<'_>,
    sender: &SigningKey,
    recipient_encryption_public: &str,
    context: &Context,
) -> Result<SealedEnvelope, SealError> {
    let recipient = recipient_bytes(recipient_encryption_public)?;
    seal_to(rng, plaintext, sender, &recipient, context, false)
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
fn seal_to<R: RngCore + CryptoRng>(
    rng: &mut R,
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
        // the background thread when there is one (see `spares`).
        #[cfg(not(target_arch = "wasm32"))]
        let spare = if to_self {
            spares::take(recipient)
        } else {
            None
        };
        #[cfg(target_arch = "wasm32")]
        let spare: Option<spares::Spare> = None;
        let key = match spare {
            Some(spares::Spare { public, key }) => {
                seal_box_with_key_into(&public, key, recipient, inner.as_bytes(), sealed)
            }
            None => {
                let ephemeral = random_secret(rng);
                seal_box_keyed_into(&ephemeral, recipient, inner.as_bytes(), sealed)
            }
        }
        .ok_or(SealError::RecipientKeyWeak)?;
        #[cfg(not(target_arch = "wasm32"))]
        if to_self && sealed.len() < own_seals::REMEMBER_BELOW {
            own_seals::remember(sealed, key, recipient, sender.verifying_key().as_bytes());
        }
        #[cfg(target_arch = "wasm32")]
        let _ = (to_self, key);
        Ok(SealedEnvelope {
            ciphertext: b64::encode_url(sealed),
            recipient_key_id: context.recipient_key_id.clone(),
            sender_key_id: context.sender_key_id.clone(),
            direction: context.direction.clone(),
            deadline_at: context.deadline_at,
        })
    })
}

/// Seal with OS randomness.
pub fn seal(
    plaintext: Text<'_>,
    sender: &SigningKey,
    recipient_encryption_public: &str,
    context: &Context,
) -> Result<SealedEnvelope, SealError> {
    seal_with_rng(
        &mut OsRng,
        plaintext,
        sender,
        recipient_encryption_public,
        context,
    )
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
        &mut OsRng,
        plaintext,
        sender.signing_key(),
        &recipient,
        context,
        to_self,
    )
}

/// Spare ephemeral keys for seals to our own key (every job's payload at
/// rest): the ephemeral public key and the box key it shares with ours,
/// made on the background thread ([`crate::chores`]) so an enqueue's seal
/// skips its two X25519 multiplications. Each spare is used once, taken out
/// under the lock; the box key is zeroed when dropped. A pool refills when
/// it falls below half; an empty one (a first seal, a burst) means the seal
/// makes its own key, as without spares.
mod spares {
    use zeroize::Zeroizing;

    pub(super) struct Spare {
        pub(super) public: [u8; 32],
        pub(super) key: Zeroizing<[u8; 32]>,
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub(super) use made::take;

    #[cfg(not(target_arch = "wasm32"))]
    mod made {
        use super::Spare;
        use std::collections::HashMap;
        use std::sync::{Mutex, OnceLock};

        /// Spares a pool holds when full.
        pub(in super::super) const KEEP: usize = 64;
        /// Spares made in one chore, so other chores queued meanwhile wait
        /// for at most this many (≈ 30 µs each).
        const ROUND: usize = 1;
        /// Own keys with a pool (a process usually has one site); the one
        /// sealed to least recently gives way to a new one.
        const MAX_KEYS: usize = 16;

        #[derive(Default)]
        struct Pool {
            spares: Vec<Spare>,
            refilling: bool,
            /// When it was last taken from (a count of takes).
            used: u64,
        }

        #[derive(Default)]
        struct Pools {
            by_key: HashMap<[u8; 32], Pool>,
            takes: u64,
        }

        fn pools() -> &'static Mutex<Pools> {
            static POOLS: OnceLock<Mutex<Pools>> = OnceLock::new();
            POOLS.get_or_init(|| Mutex::new(Pools::default()))
        }

        /// A spare for a seal to `recipient`, asking for more when low.
        pub(in super::super) fn take(recipient: &[u8; 32]) -> Option<Spare> {
            let mut guard = pools().lock().ok()?;
            let pools = &mut *guard;
            pools.takes += 1;
            if !pools.by_key.contains_key(recipient) && pools.by_key.len() >= MAX_KEYS {
                let oldest = pools
                    .by_key
                    .iter()
                    .min_by_key(|(_, pool)| pool.used)
                    .map(|(key, _)| *key);
                if let Some(oldest) = oldest {
                    pools.by_key.remove(&oldest);
                }
            }
            let pool = pools.by_key.entry(*recipient).or_default();
            pool.used = pools.takes;
            let spare = pool.spares.pop();
            if pool.spares.len() < KEEP / 2 && !pool.refilling {
                pool.refilling = true;
                drop(guard);
                let recipient = *recipient;
                if !crate::chores::run(move || refill(&recipient)) {
                    stop_refilling(&recipient);
                }
            }
            spare
        }

        fn stop_refilling(recipient: &[u8; 32]) {
            if let Ok(mut pools) = pools().lock() {
                if let Some(pool) = pools.by_key.get_mut(recipient) {
                    pool.refilling = false;
                }
            }
        }

        /// On the background thread: make spares one at a time (unlocked)
        /// until the pool is full, [`ROUND`] per chore.
        fn refill(recipient: &[u8; 32]) {
            // However this ends, the next `take` may ask again, unless this
            // queued its own next round.
            struct Done<'a> {
                recipient: &'a [u8; 32],
                queued_again: bool,
            }
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    if !self.queued_again {
                        stop_refilling(self.recipient);
                    }
                }
            }
            let mut done = Done {
                recipient,
                queued_again: false,
            };
            for _ in 0..ROUND {
                let ephemeral = super::super::random_secret(&mut rand_core::OsRng);
                let public = *x25519_dalek::PublicKey::from(&ephemeral).as_bytes();
                // A small-order key: no spares (its seals fail the same way).
                let Some(key) = super::super::seal_box_key(&ephemeral, recipient) else {
                    return;
                };
                let Ok(mut pools) = pools().lock() else {
                    return;
                };
                let Some(pool) = pools.by_key.get_mut(recipient) else {
                    return;
                };
                pool.spares.push(Spare { public, key });
                if pool.spares.len() >= KEEP {
                    return;
                }
            }
            // The rest in another round, behind whatever was queued
            // meanwhile (a reseal a fetch is about to ask for).
            let recipient = *recipient;
            done.queued_again = crate::chores::run(move || refill(&recipient));
        }

        #[cfg(test)]
        pub(in super::super) fn held(recipient: &[u8; 32]) -> usize {
            pools()
                .lock()
                .ok()
                .and_then(|p| p.by_key.get(recipient).map(|pool| pool.spares.len()))
                .unwrap_or(0)
        }
    }

    #[cfg(all(test, not(target_arch = "wasm32")))]
    pub(super) use made::{held, KEEP};
}

/// Envelopes this process sealed to its own key (a job's payload at rest),
/// remembered by ephemeral public key with a digest of the whole sealed box,
/// the box key, and the signer. Opening one of them again (the fetch that
/// reseals a job for its device, usually moments after the enqueue) needs
/// neither the X25519 multiplication nor the Ed25519 verification: the bytes
/// are, digest for digest, the ones sealed here, so what they say and who
/// signed it is already known. Anything else (another ciphertext under a
/// remembered ephemeral key, another recipient, another expected signer, an
/// envelope from before a restart or evicted from the bounded table) takes
/// the full open. The digest, not the box's tag alone, is what allows
/// skipping the signature: whoever holds the site's X25519 secret could make
/// a box under a remembered key, but not these bytes.
#[cfg(not(target_arch = "wasm32"))]
mod own_seals {
    use blake2::digest::consts::U32;
    use blake2::{Blake2b, Digest};
    use std::collections::{HashMap, VecDeque};
    use std::sync::{Mutex, OnceLock};
    use zeroize::Zeroizing;

    /// Envelopes remembered at once (≈ 200 bytes each with the table's own); the oldest goes first.
    pub(super) const CAPACITY: usize = 4096;
    /// Boxes from this size on are not remembered. Their signature is
    /// checked on a second thread while the reseal runs
    /// (`PARALLEL_VERIFY_FROM`), so the check costs the fetch little wall
    /// time, while hashing the box at seal and at open (BLAKE2b, ≈ 1 GB/s
    /// here) would sit on the path twice: a 1M-character payload's seal took
    /// 7.1 ms remembered and 5.0 ms not, its reseal 9.6 and 7.0 ms.
    pub(super) const REMEMBER_BELOW: usize = super::PARALLEL_VERIFY_FROM;

    struct Entry {
        digest: [u8; 32],
        recipient: [u8; 32],
        signer: [u8; 32],
        key: Zeroizing<[u8; 32]>,
    }

    #[derive(Default)]
    struct Table {
        entries: HashMap<[u8; 32], Entry>,
        order: VecDeque<[u8; 32]>,
    }

    fn table() -> &'static Mutex<Table> {
        static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
        TABLE.get_or_init(|| Mutex::new(Table::default()))
    }

    fn digest(sealed: &[u8]) -> [u8; 32] {
        Blake2b::<U32>::digest(sealed).into()
    }

    pub(super) fn remember(
        sealed: &[u8],
        key: Zeroizing<[u8; 32]>,
        recipient: &[u8; 32],
        signer: &[u8; 32],
    ) {
        let Some(ephemeral) = sealed.get(..32).and_then(|e| <[u8; 32]>::try_from(e).ok()) else {
            return;
        };
        let entry = Entry {
            digest: digest(sealed),
            recipient: *recipient,
            signer: *signer,
            key,
        };
        // A poisoned lock (a panic elsewhere) only costs the shortcut.
        let Ok(mut table) = table().lock() else {
            return;
        };
        if table.entries.len() >= CAPACITY {
            if let Some(oldest) = table.order.pop_front() {
                table.entries.remove(&oldest);
            }
        }
        if table.entries.insert(ephemeral, entry).is_none() {
            table.order.push_back(ephemeral);
        }
    }

    /// The box key of `sealed` if these exact bytes were sealed here to
    /// `recipient` and signed by `signer`.
    pub(super) fn recall(
        sealed: &[u8],
        recipient: &[u8; 32],
        signer: &[u8; 32],
    ) -> Option<Zeroizing<[u8; 32]>> {
        let ephemeral: [u8; 32] = sealed.get(..32)?.try_into().ok()?;
        let key = {
            let table = table().lock().ok()?;
            let entry = table.entries.get(&ephemeral)?;
            if entry.recipient != *recipient || entry.signer != *signer {
                return None;
            }
            (entry.digest, entry.key.clone())
        };
        // Hashed outside the lock (a megabyte payload takes a millisecond).
        (digest(sealed) == key.0).then_some(key.1)
    }

    /// Drop `sealed` from the table (tests: to open it the long way).
    #[cfg(test)]
    pub(super) fn forget(sealed: &[u8]) {
        let Some(ephemeral) = sealed.get(..32).and_then(|e| <[u8; 32]>::try_from(e).ok()) else {
            return;
        };
        if let Ok(mut t) = table().lock() {
            t.entries.remove(&ephemeral);
        }
    }

    #[cfg(test)]
    pub(super) fn holds(sealed: &[u8]) -> bool {
        let Some(ephemeral) = sealed.get(..32).and_then(|e| <[u8; 32]>::try_from(e).ok()) else {
            return false;
        };
        table()
            .lock()
            .is_ok_and(|t| t.entries.contains_key(&ephemeral))
    }
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
/// milliseconds, starting a thread is microseconds.
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
        #[cfg(not(target_arch = "wasm32"))]
        let known = sender.and_then(|s| own_seals::recall(sealed, recipient.public, s.as_bytes()));
        #[cfg(target_arch = "wasm32")]
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

/// Steps 5 to 7 of [`open`]: the verified body's claims against the context.
fn read_claims(
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

/// Scratch buffers above this capacity are released after use instead of kept.
const SCRATCH_KEEP: usize = 4 << 20;

/// Run `work` with two reusable byte buffers (decoded ciphertext, decoded
/// body), so opening large envelopes does not map and fault in fresh memory
/// every time. The buffers hold decrypted data, so the used part is zeroed
/// after use (a plain memset: the buffers stay alive, so it is not a dead
/// store the compiler could drop; `zeroize`'s byte-wise volatile writes cost
/// more than the rest of a megabyte open).
fn with_scratch<T>(work: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>) -> T) -> T {
    use std::cell::RefCell;
    thread_local! {
        static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut pair) => {
            let (a, b) = &mut *pair;
            let out = work(a, b);
            for buf in [a, b] {
                buf.fill(0);
                buf.clear();
                if buf.capacity() > SCRATCH_KEEP {
                    *buf = Vec::new();
                }
            }
            out
        }
        // Re-entered (cannot happen today): fresh buffers.
        Err(_) => {
            let (mut a, mut b) = (Zeroizing::new(Vec::new()), Zeroizing::new(Vec::new()));
            work(&mut a, &mut b)
        }
    })
}

/// Run a seal's `work` with three reusable buffers (signed body, inner
/// JSON, sealed box), for the same reason as [`with_scratch`]: a large
/// payload's seal otherwise maps and faults in a few fresh megabytes each
/// time (a 1M-character seal spent more in page faults than in copies).
/// Strings are handed out empty; afterwards the used bytes are zeroed (they
/// hold the plaintext) and oversized buffers are released.
fn with_seal_scratch<T>(work: impl FnOnce(&mut String, &mut String, &mut Vec<u8>) -> T) -> T {
    use std::cell::RefCell;
    thread_local! {
        static SEAL_SCRATCH: RefCell<[Vec<u8>; 3]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
    }
    // An empty byte vector is always valid UTF-8: the string keeps its capacity.
    let as_string = |mut bytes: Vec<u8>| {
        bytes.clear();
        String::from_utf8(bytes).unwrap_or_default()
    };
    let wipe = |mut bytes: Vec<u8>| {
        bytes.fill(0);
        bytes.clear();
        if bytes.capacity() > SCRATCH_KEEP {
            Vec::new()
        } else {
            bytes
        }
    };
    SEAL_SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut bufs) => {
            let [body, inner, sealed] = &mut *bufs;
            let mut body_text = as_string(std::mem::take(body));
            let mut inner_text = as_string(std::mem::take(inner));
            let out = work(&mut body_text, &mut inner_text, sealed);
            *body = wipe(body_text.into_bytes());
            *inner = wipe(inner_text.into_bytes());
            *sealed = wipe(std::mem::take(sealed));
            out
        }
        // Re-entered (cannot happen today): fresh buffers, wiped on drop.
        Err(_) => {
            let (mut body, mut inner) =
                (Zeroizing::new(String::new()), Zeroizing::new(String::new()));
            let mut sealed = Zeroizing::new(Vec::new());
            work(&mut body, &mut inner, &mut sealed)
        }
    })
}

/// `crypto_box_seal_open` decrypting inside `sealed`; the plaintext is the
/// returned slice of it.
fn open_box_in_place<'a>(
    secret: &StaticSecret,
    own_public: &[u8; 32],
    sealed: &'a mut [u8],
) -> Option<&'a [u8]> {
    if sealed.len() < SEAL_OVERHEAD {
        return None;
    }
    let ephemeral_public: [u8; 32] = sealed.get(..32)?.try_into().ok()?;
    let key = box_key_bytes(secret, &ephemeral_public)?;
    open_box_with_key(&key, own_public, sealed)
}

/// The secretbox half of [`open_box_in_place`], with the box key known.
fn open_box_with_key<'a>(
    key: &[u8; 32],
    own_public: &[u8; 32],
    sealed: &'a mut [u8],
) -> Option<&'a [u8]> {
    let ephemeral_public: [u8; 32] = sealed.get(..32)?.try_into().ok()?;
    let tag: [u8; 16] = sealed.get(32..SEAL_OVERHEAD)?.try_into().ok()?;
    let nonce = seal_nonce(&ephemeral_public, own_public).into();
    let message = sealed.get_mut(SEAL_OVERHEAD..)?;
    crate::secretbox::open_in_place(key, &nonce, message, &tag).then_some(message)
}

/// Split `{"body":"B","signature":"S"}` when the bytes have exactly that
/// shape, with S short and plain (no quote, backslash, control or non-ASCII
/// byte). For such bytes `JSON.parse` yields exactly `{body: B, signature: S}`
/// (B is checked by the strict decoder, which refuses anything else).
fn split_inner_fast(inner: &[u8]) -> Option<(&[u8], &str)> {
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
fn parse_inner(
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

fn verify_inner(sender: Option<&VerifyingKey>, body: &[u8], signature: &str) -> bool {
    match sender {
        Some(key) => keys::verify_with_key(key, body, signature),
        None => false,
    }
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

fn utf8_lossy_owned(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::key_id;
    use crate::keys::{KeyHandle, StoredKeys};
    use crypto_secretbox::aead::{AeadInPlace, KeyInit};
    use crypto_secretbox::XSalsa20Poly1305;

    fn party(n: u8) -> KeyHandle {
        match KeyHandle::new(StoredKeys::from_secrets(
            &[n; 32],
            &[n.wrapping_add(100); 32],
            1,
        )) {
            Ok(h) => h,
            Err(e) => panic!("fixture keys: {e}"),
        }
    }

    fn context(from: &KeyHandle, to: &KeyHandle) -> Context {
        Context {
            job_id: "job-1".into(),
            sender_key_id: from.key_id().into(),
            recipient_key_id: to.key_id().into(),
            deadline_at: 1_767_312_000_000.0,
            direction: "result".into(),
        }
    }

    fn expected(ctx: &Context) -> Expected {
        Expected {
            job_id: ctx.job_id.clone(),
            sender_key_id: ctx.sender_key_id.clone(),
            recipient_key_id: ctx.recipient_key_id.clone(),
            direction: ctx.direction.clone(),
        }
    }

    fn open_as(
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
        match seal_box(&mut OsRng, to.encryption_public(), inner) {
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

    #[test]
    fn zero_shared_secret_is_refused_both_ways() {
        let site = party(5);
        // u = 0 and u = 1 are small-order points: X25519 gives all zeros.
        for weak in [[0u8; 32], {
            let mut one = [0u8; 32];
            one[0] = 1;
            one
        }] {
            assert!(seal_box(&mut OsRng, &weak, b"x").is_none());
            // A box whose ephemeral key is small order: crypto_box would open
            // it (with the all-zero key); libsodium, and we, refuse.
            let mut forged = weak.to_vec();
            let zero_key = XSalsa20Poly1305::new(&hsalsa::<salsa20::cipher::consts::U10>(
                &[0u8; 32].into(),
                &Default::default(),
            ));
            let nonce = seal_nonce(&weak, site.encryption_public());
            let mut msg = b"{}".to_vec();
            let Ok(tag) = zero_key.encrypt_in_place_detached(&nonce, b"", &mut msg) else {
                panic!()
            };
            forged.extend_from_slice(&tag);
            forged.extend_from_slice(&msg);
            assert!(
                open_box(site.encryption_secret(), site.encryption_public(), &forged).is_none()
            );
            let cb = crypto_box::SecretKey::from(site.encryption_secret().to_bytes());
            assert!(cb.unseal(&forged).is_ok(), "crypto_box alone accepts it");
        }
    }

    /// A deterministic X25519 secret (no RNG: the test is repeatable).
    fn nth_secret(n: u32) -> StaticSecret {
        let digest = <sha2::Sha256 as sha2::Digest>::digest(n.to_le_bytes());
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&digest);
        StaticSecret::from(bytes)
    }

    /// X25519 keys a peer could present: `honest` honest ones (from `seed`),
    /// the first of them plus each small-order component (a key need not be
    /// in the prime-order group), and the eight small-order points.
    #[cfg(not(target_arch = "wasm32"))]
    fn honest_torsioned_and_small_order(seed: u32, honest: u32) -> Vec<[u8; 32]> {
        use curve25519_dalek::constants::EIGHT_TORSION;
        use curve25519_dalek::montgomery::MontgomeryPoint;
        use curve25519_dalek::traits::IsIdentity;
        let mut points: Vec<[u8; 32]> = (0..honest)
            .map(|i| *XPublicKey::from(&nth_secret(seed + i)).as_bytes())
            .collect();
        let Some(lift) = MontgomeryPoint(points[0]).to_edwards(0) else {
            panic!("an honest key lifts to Edwards")
        };
        for t in EIGHT_TORSION.iter() {
            if !t.is_identity() {
                points.push((lift + t).to_montgomery().to_bytes());
            }
            points.push(t.to_montgomery().to_bytes());
        }
        points
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn recipient_tables_give_the_ladders_answer() {
        use curve25519_dalek::montgomery::MontgomeryPoint;
        let mut recipients = honest_torsioned_and_small_order(1000, 3);
        // A u on the twist (no Edwards point) keeps the ladder.
        let twist = (2u8..)
            .map(|u| {
                let mut b = [0u8; 32];
                b[0] = u;
                b
            })
            .find(|b| MontgomeryPoint(*b).to_edwards(0).is_none());
        let Some(twist) = twist else {
            panic!("some small u is on the twist")
        };
        recipients.push(twist);

        let mut n = 0;
        for public in &recipients {
            let mut tabled = 0;
            for _ in 0..(fixed_base::BUILD_AFTER + 6) {
                n += 1;
                let eph = nth_secret(n);
                let ladder = eph.diffie_hellman(&XPublicKey::from(*public));
                if let Some(shared) = fixed_base::shared_secret(&eph, public) {
                    assert_eq!(&*shared, ladder.as_bytes(), "u = {public:?}");
                    tabled += 1;
                }
                // The whole seal agrees with the ladder's refusals too.
                let sealed = seal_box_with_ephemeral(&eph, public, b"x");
                assert_eq!(sealed.is_none(), !ladder.was_contributory());
            }
            if *public == twist {
                assert_eq!(tabled, 0, "the twist has no table");
            } else {
                assert!(tabled >= 6, "a key sealed to often gets its table");
            }
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn the_edwards_multiplication_gives_the_ladders_answer() {
        // What an envelope's ephemeral key can be: honest, honest plus a
        // small-order component, small order, on the twist, and spellings
        // the ladder reduces (high bit set, u ≥ p).
        let mut points = honest_torsioned_and_small_order(5000, 24);
        for u in 0u8..=40 {
            let mut b = [0u8; 32];
            b[0] = u;
            points.push(b);
            let mut high = b;
            high[31] |= 0x80;
            points.push(high);
            // p + u for small u: 2^255 - 19 + u, a non-canonical spelling.
            let mut big = [0xffu8; 32];
            big[31] = 0x7f;
            big[0] = 0xedu8.wrapping_add(u);
            if u < 19 {
                points.push(big);
            }
        }
        for honest in points.clone().iter().take(24) {
            let mut high = *honest;
            high[31] |= 0x80;
            points.push(high);
        }
        let (mut lifted, mut twisted) = (0, 0);
        for (i, point) in points.iter().enumerate() {
            let secret = nth_secret(9000 + i as u32);
            let ladder = secret.diffie_hellman(&XPublicKey::from(*point));
            match variable_base_shared_secret(&secret, point) {
                Some(shared) => {
                    assert_eq!(&*shared, ladder.as_bytes(), "u = {point:?}");
                    lifted += 1;
                }
                None => twisted += 1,
            }
            // The box key agrees, refusals included.
            let key = box_key_bytes(&secret, point);
            assert_eq!(key.is_none(), !ladder.was_contributory(), "u = {point:?}");
            if let Some(key) = key {
                assert_eq!(*key, *hsalsa_key(ladder.as_bytes()));
            }
        }
        assert!(
            lifted > 60 && twisted > 10,
            "both paths ran: {lifted} / {twisted}"
        );
    }

    /// `text` sealed by `site` to its own key (an at-rest envelope).
    fn seal_at_rest(site: &KeyHandle, text: &str) -> SealedEnvelope {
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
    fn open_at_rest(
        site: &KeyHandle,
        env: &SealedEnvelope,
        exp: &Expected,
    ) -> Result<String, OpenFailure> {
        open_as(site, site, env, exp).map(|p| p.as_str().to_string())
    }

    /// `env`'s sealed box, decoded.
    fn sealed_bytes(env: &SealedEnvelope) -> Vec<u8> {
        let mut out = Vec::new();
        b64::decode_lenient_into(&env.ciphertext, &mut out);
        out
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn own_seals_are_remembered_and_open_as_before() {
        let site = party(40);
        let device = party(41);
        let at_rest = context(&site, &site);
        let env = seal_at_rest(&site, "payload");
        assert!(own_seals::holds(&sealed_bytes(&env)));
        assert_eq!(
            open_at_rest(&site, &env, &expected(&at_rest)),
            Ok("payload".into())
        );
        // Expecting another signer: refused, as the full open refuses it.
        assert_eq!(
            open_as(&site, &device, &env, &expected(&at_rest)).map(|p| p.as_str().to_string()),
            Err(OpenFailure::BadSignature)
        );
        // Another job's claims: the claims are still read.
        let mut other = expected(&at_rest);
        other.job_id = "job-2".into();
        assert_eq!(
            open_at_rest(&site, &env, &other),
            Err(OpenFailure::ContextMismatch)
        );
        // One byte changed: the box does not open.
        let mut bytes = sealed_bytes(&env);
        if let Some(last) = bytes.last_mut() {
            *last ^= 1;
        }
        let tampered = SealedEnvelope {
            ciphertext: b64::encode_url(&bytes),
            ..env.clone()
        };
        assert_eq!(
            open_at_rest(&site, &tampered, &expected(&at_rest)),
            Err(OpenFailure::Unopenable)
        );
        // Sealed to someone else: not remembered.
        let Ok(to_device) = seal_with_handle(
            Text::Utf8("payload"),
            &site,
            &device.keys().encryption_public,
            &context(&site, &device),
        ) else {
            panic!("seal")
        };
        assert!(!own_seals::holds(&sealed_bytes(&to_device)));
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_box_forged_under_a_remembered_key_still_has_its_signature_checked() {
        // Someone holding the site's X25519 secret (a leaked encryption key,
        // not the identity key) can make a box under a remembered ephemeral
        // key. Its content is theirs, so its signature must be checked.
        let site = party(42);
        let forger = party(43);
        let at_rest = context(&site, &site);
        let genuine = seal_at_rest(&site, "real");
        let sealed = sealed_bytes(&genuine);
        let Ok(ephemeral) = <[u8; 32]>::try_from(&sealed[..32]) else {
            panic!("ephemeral key")
        };
        let Some(key) = box_key_bytes(site.encryption_secret(), &ephemeral) else {
            panic!("box key")
        };
        let body = signed_body(&at_rest, Text::Utf8("forged"));
        let inner = inner_json(&body, &forger.sign_text(&body));
        let nonce: [u8; 24] = seal_nonce(&ephemeral, site.encryption_public()).into();
        let mut message = inner.clone();
        let tag = crate::secretbox::seal_in_place(&key, &nonce, &mut message);
        let mut forged = ephemeral.to_vec();
        forged.extend_from_slice(&tag);
        forged.extend_from_slice(&message);
        let forged = SealedEnvelope {
            ciphertext: b64::encode_url(&forged),
            ..genuine.clone()
        };
        assert_eq!(
            open_at_rest(&site, &forged, &expected(&at_rest)),
            Err(OpenFailure::BadSignature)
        );
        assert_eq!(
            open_at_rest(&site, &genuine, &expected(&at_rest)),
            Ok("real".into())
        );
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn large_own_seals_are_not_remembered_and_open_the_long_way() {
        let site = party(45);
        let at_rest = context(&site, &site);
        let text = "p".repeat(own_seals::REMEMBER_BELOW);
        let env = seal_at_rest(&site, &text);
        assert!(!own_seals::holds(&sealed_bytes(&env)));
        assert_eq!(
            open_at_rest(&site, &env, &expected(&at_rest)),
            Ok(text.clone())
        );
        // Just under the size: remembered.
        let small = "p".repeat(own_seals::REMEMBER_BELOW / 2);
        let env = seal_at_rest(&site, &small);
        assert!(own_seals::holds(&sealed_bytes(&env)));
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn seals_to_our_own_key_take_spares_made_ahead_each_once() {
        let site = party(46);
        let own = *site.encryption_public();
        // The first seal asks for spares; wait until the thread has filled
        // the pool.
        seal_at_rest(&site, "first");
        for _ in 0..10_000 {
            if spares::held(&own) == spares::KEEP {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(spares::held(&own), spares::KEEP, "the pool never filled");
        // A full pool is not refilled until it is half empty: one seal, one spare.
        seal_at_rest(&site, "second");
        assert_eq!(
            spares::held(&own),
            spares::KEEP - 1,
            "the seal took a spare"
        );
        let mut ephemerals = std::collections::HashSet::new();
        let cb = crypto_box::SecretKey::from(site.encryption_secret().to_bytes());
        for n in 0..(2 * spares::KEEP) {
            let text = format!("payload {n}");
            let env = seal_at_rest(&site, &text);
            let sealed = sealed_bytes(&env);
            assert!(
                ephemerals.insert(sealed[..32].to_vec()),
                "an ephemeral key used twice"
            );
            // libsodium's open (another implementation) agrees on the box key.
            assert!(
                cb.unseal(&sealed).is_ok(),
                "seal {n} does not open as a sealed box"
            );
            // And ours, the long way (not from the remembered seals).
            own_seals::forget(&sealed);
            let at_rest = context(&site, &site);
            assert_eq!(open_at_rest(&site, &env, &expected(&at_rest)), Ok(text));
        }
        // Seals to someone else never take them (once a refill, if one is
        // running, has settled).
        let mut held = spares::held(&own);
        for _ in 0..500 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let now = spares::held(&own);
            if now == held {
                break;
            }
            held = now;
        }
        let device = party(47);
        let _ = seal_with_handle(
            Text::Utf8("to the device"),
            &site,
            &device.keys().encryption_public,
            &context(&site, &device),
        );
        assert_eq!(
            spares::held(&own),
            held,
            "a seal to another key took a spare"
        );
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn own_seals_forget_the_oldest_beyond_capacity() {
        let site = party(44);
        let first = seal_at_rest(&site, "x");
        for _ in 0..own_seals::CAPACITY {
            seal_at_rest(&site, "y");
        }
        assert!(
            !own_seals::holds(&sealed_bytes(&first)),
            "the oldest was evicted"
        );
        // Still opens, the long way.
        let at_rest = context(&site, &site);
        assert_eq!(
            open_at_rest(&site, &first, &expected(&at_rest)),
            Ok("x".into())
        );
    }

    #[test]
    fn seals_to_a_tabled_key_open() {
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
    fn interoperates_with_crypto_box() {
        let site = party(6);
        let theirs = crypto_box::PublicKey::from(*site.encryption_public());
        let Ok(sealed) = theirs.seal(&mut OsRng, b"from crypto_box") else {
            panic!()
        };
        assert_eq!(
            open_box(site.encryption_secret(), site.encryption_public(), &sealed),
            Some(b"from crypto_box".to_vec())
        );
        let Some(ours) = seal_box(&mut OsRng, site.encryption_public(), b"from us") else {
            panic!()
        };
        let cb = crypto_box::SecretKey::from(site.encryption_secret().to_bytes());
        assert_eq!(cb.unseal(&ours).ok(), Some(b"from us".to_vec()));
    }

    #[test]
    fn null_inner_and_null_claims_are_malformed_not_a_throw() {
        let (site, device) = (party(7), party(8));
        let ctx = context(&device, &site);
        let exp = expected(&ctx);
        let mut env = SealedEnvelope {
            ciphertext: seal_raw_inner(&site, b"null"),
            recipient_key_id: ctx.recipient_key_id.clone(),
            sender_key_id: ctx.sender_key_id.clone(),
            direction: ctx.direction.clone(),
            deadline_at: ctx.deadline_at,
        };
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
        let env = SealedEnvelope {
            ciphertext: seal_raw_inner(&site, &inner),
            recipient_key_id: ctx.recipient_key_id.clone(),
            sender_key_id: ctx.sender_key_id.clone(),
            direction: ctx.direction.clone(),
            deadline_at: ctx.deadline_at,
        };
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
        let env_for = |inner: String| SealedEnvelope {
            ciphertext: seal_raw_inner(&site, inner.as_bytes()),
            recipient_key_id: ctx.recipient_key_id.clone(),
            sender_key_id: ctx.sender_key_id.clone(),
            direction: ctx.direction.clone(),
            deadline_at: ctx.deadline_at,
        };
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
