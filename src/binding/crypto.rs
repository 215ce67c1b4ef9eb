//! The crypto exports: keys, key ids, envelopes, request signatures, ids,
//! site keys, and the `SiteKeyring` key handle (types: the generated `index.d.ts`).
//!
//! Conversions only: every rule lives in the core modules. Objects returned
//! to JavaScript are `#[napi(object)]` structs, whose field order is the key
//! order JavaScript sees.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use napi::bindgen_prelude::*;
use napi::{JsString, ValueType};
use napi_derive::napi;

use crate::envelope::{self, OpenFailure, Text};
use crate::fingerprint;
use crate::ids;
use crate::json::JsStr;
use crate::keys::{
    self, is_positive_safe_integer, KeyHandle, ParsedKeyCache, PublicIdentity, StoredKeys,
};
use crate::signing::{self, RequestSignature};
use crate::site_keys;
use crate::wire;

// ---------------------------------------------------------------- shapes

/// Declares a string newtype to napi as a JavaScript string (its type name
/// and type check are `String`'s).
macro_rules! string_typed {
    ($name:ident) => {
        impl TypeName for $name {
            fn type_name() -> &'static str {
                String::type_name()
            }

            fn value_type() -> ValueType {
                String::value_type()
            }
        }

        impl ValidateNapiValue for $name {}
    };
}

/// A JavaScript string read into Rust without UTF-8 transcoding when it is
/// pure ASCII (as a ciphertext is): V8 then copies its one-byte form
/// straight out. A megabyte envelope's ciphertext is ~1.4 M characters, and
/// the UTF-8 writer costs a visible share of an open.
///
/// The Latin-1 getter alone cannot tell ASCII from other text: it keeps
/// only the low byte of each UTF-16 unit, so "Ł" (U+0141) would come out as
/// "A", and "é" as a lone 0xE9 byte where UTF-8 would give two. So the
/// string's UTF-8 length is asked first: it equals its UTF-16 length
/// exactly when every unit is ASCII (anything else, lone surrogates
/// included, takes two or more UTF-8 bytes). Every other string takes the
/// ordinary UTF-8 path, so what the core sees is the same text either way.
pub struct AsciiFirstString(pub String);

string_typed!(AsciiFirstString);

/// The string as bytes when every UTF-16 unit of it is ASCII, copied with
/// the Latin-1 getter; `None` for any other string, or a non-string.
///
/// # Safety
/// `env` and `napi_val` as napi hands them to `from_napi_value`.
unsafe fn read_ascii(env: napi::sys::napi_env, napi_val: napi::sys::napi_value) -> Option<String> {
    use napi::sys;
    let mut utf8_len = 0usize;
    let mut units = 0usize;
    // SAFETY: length queries only (null buffer), as napi documents them.
    let queried = unsafe {
        sys::napi_get_value_string_utf8(env, napi_val, std::ptr::null_mut(), 0, &mut utf8_len)
            == sys::Status::napi_ok
            && sys::napi_get_value_string_latin1(env, napi_val, std::ptr::null_mut(), 0, &mut units)
                == sys::Status::napi_ok
    };
    if !queried || utf8_len != units {
        return None;
    }
    // Room for the terminating NUL napi always writes.
    let mut buf: Vec<u8> = Vec::with_capacity(units + 1);
    let mut written = 0usize;
    // SAFETY: the buffer has `units + 1` bytes of capacity, which is what
    // napi is told it may write; only `written` bytes are then claimed as
    // initialised (napi never reports more than it wrote).
    let status = unsafe {
        sys::napi_get_value_string_latin1(
            env,
            napi_val,
            buf.as_mut_ptr().cast(),
            units + 1,
            &mut written,
        )
    };
    if status != sys::Status::napi_ok || written > units {
        return None;
    }
    // SAFETY: see above; `written` bytes were initialised.
    unsafe { buf.set_len(written) };
    // Checked rather than assumed: an ASCII scan is cheap next to the
    // transcoding it replaces.
    if !buf.is_ascii() {
        return None;
    }
    // SAFETY: ASCII bytes are valid UTF-8.
    Some(unsafe { String::from_utf8_unchecked(buf) })
}

impl FromNapiValue for AsciiFirstString {
    unsafe fn from_napi_value(
        env: napi::sys::napi_env,
        napi_val: napi::sys::napi_value,
    ) -> Result<Self> {
        // SAFETY: forwarded as received from napi.
        if let Some(text) = unsafe { read_ascii(env, napi_val) } {
            return Ok(AsciiFirstString(text));
        }
        // Not a string, or not ASCII: the ordinary path (and its errors).
        unsafe { String::from_napi_value(env, napi_val) }.map(AsciiFirstString)
    }
}

impl ToNapiValue for AsciiFirstString {
    unsafe fn to_napi_value(env: napi::sys::napi_env, val: Self) -> Result<napi::sys::napi_value> {
        unsafe { String::to_napi_value(env, val.0) }
    }
}

/// A private key's text as it crosses the boundary: wiped when dropped
/// here (the engine's own copy is JavaScript's).
pub struct KeyText(String);

string_typed!(KeyText);

impl std::ops::Deref for KeyText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for KeyText {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl FromNapiValue for KeyText {
    unsafe fn from_napi_value(
        env: napi::sys::napi_env,
        napi_val: napi::sys::napi_value,
    ) -> Result<Self> {
        // SAFETY: forwarded as received from napi.
        unsafe { String::from_napi_value(env, napi_val) }.map(KeyText)
    }
}

impl ToNapiValue for KeyText {
    unsafe fn to_napi_value(env: napi::sys::napi_env, val: Self) -> Result<napi::sys::napi_value> {
        // SAFETY: forwarded as received from napi; `val` is wiped when it drops.
        unsafe { <&str>::to_napi_value(env, &val) }
    }
}

/// A JavaScript string exactly, lone surrogates included: ASCII through
/// [`AsciiFirstString`]'s copy, anything else as its UTF-16 units.
pub struct ExactString(pub JsStr);

string_typed!(ExactString);

impl FromNapiValue for ExactString {
    unsafe fn from_napi_value(
        env: napi::sys::napi_env,
        napi_val: napi::sys::napi_value,
    ) -> Result<Self> {
        // SAFETY: forwarded as received from napi.
        if let Some(text) = unsafe { read_ascii(env, napi_val) } {
            return Ok(ExactString(JsStr::new(text)));
        }
        // Not ASCII (or not a string: the UTF-16 read reports that).
        // SAFETY: forwarded as received from napi.
        let units = unsafe { Utf16String::from_napi_value(env, napi_val) }?;
        Ok(ExactString(JsStr::from_utf16(&units)))
    }
}

/// `JSON.stringify` of an object whose own enumerable properties are these
/// keys with these string values, in this order (the caller checked that
/// shape, so nothing else can change the text).
fn string_fields_json(keys: &[ExactString], values: &[ExactString]) -> String {
    let size: usize = keys
        .iter()
        .chain(values)
        .map(|s| s.0.as_str().len() + 3)
        .sum();
    let mut out = String::with_capacity(size + 2);
    out.push('{');
    for (at, (key, value)) in keys.iter().zip(values).enumerate() {
        if at > 0 {
            out.push(',');
        }
        key.0.write_json(&mut out);
        out.push(':');
        value.0.write_json(&mut out);
    }
    out.push('}');
    out
}

#[napi(object, js_name = "StoredKeys")]
pub struct JsStoredKeys {
    #[napi(ts_type = "1")]
    pub version: f64,
    pub identity_public: String,
    #[napi(ts_type = "string")]
    pub identity_private: KeyText,
    pub encryption_public: String,
    #[napi(ts_type = "string")]
    pub encryption_private: KeyText,
    pub encryption_sig: String,
    pub created_at: f64,
}

#[napi(object, js_name = "PublicIdentity")]
pub struct JsPublicIdentity {
    pub identity: String,
    pub encryption: String,
    pub encryption_sig: String,
}

#[napi(object, js_name = "SealedEnvelope")]
pub struct JsSealedEnvelope {
    #[napi(ts_type = "string")]
    pub ciphertext: AsciiFirstString,
    pub recipient_key_id: String,
    pub sender_key_id: String,
    #[napi(ts_type = "\"payload\" | \"result\"")]
    pub direction: String,
    pub deadline_at: f64,
}

#[napi(object, js_name = "EnvelopeContext")]
pub struct JsEnvelopeContext {
    pub job_id: String,
    pub sender_key_id: String,
    pub recipient_key_id: String,
    pub deadline_at: f64,
    #[napi(ts_type = "\"payload\" | \"result\"")]
    pub direction: String,
}

#[napi(object, js_name = "OpenExpected")]
pub struct JsOpenExpected {
    pub job_id: String,
    pub sender_key_id: String,
    pub recipient_key_id: String,
    #[napi(ts_type = "\"payload\" | \"result\"")]
    pub direction: String,
}

/// `{ok: true, plaintext}` or `{ok: false, reason}` (absent fields are not set).
#[napi(object, js_name = "OpenResult")]
pub struct JsOpenResult {
    pub ok: bool,
    #[napi(ts_type = "string")]
    pub plaintext: Option<Either3<Latin1String, Utf16String, String>>,
    #[napi(
        ts_type = "\"not-for-us\" | \"unopenable\" | \"malformed\" | \"bad-signature\" | \"context-mismatch\""
    )]
    pub reason: Option<String>,
    /// Set by `openResult` only: the plaintext is a sealed outcome, valid and
    /// canonical, so `JSON.parse(plaintext)` is exactly what
    /// `parseSealedOutcome` would answer (its `outcome` and `ran`) and the
    /// caller may build it that way. Absent or false says nothing.
    pub canonical_outcome: Option<bool>,
}

#[napi(object)]
pub struct SealOptions {
    pub plaintext: String,
    pub sender_keys: JsStoredKeys,
    pub recipient_encryption_public: String,
    pub context: JsEnvelopeContext,
}

#[napi(object)]
pub struct OpenOptions {
    pub envelope: JsSealedEnvelope,
    pub recipient_keys: JsStoredKeys,
    pub sender_identity_public: String,
    pub expected: JsOpenExpected,
}

#[napi(object, js_name = "RequestSignature")]
pub struct JsRequestSignature {
    pub runner_id: String,
    pub issued_at: f64,
    pub signature: String,
}

/// What `signRequest` returns: `runnerId` is echoed back exactly as given
/// (as UTF-16, so even a lone surrogate survives).
#[napi(object)]
pub struct SignedRequest {
    #[napi(ts_type = "string")]
    pub runner_id: Utf16String,
    pub issued_at: f64,
    pub signature: String,
}

#[napi(object)]
pub struct RequestToSign {
    pub endpoint: String,
    #[napi(ts_type = "string")]
    pub runner_id: Utf16String,
    pub issued_at: f64,
    pub body: String,
}

#[napi(object)]
pub struct VerifyRequestOptions {
    pub identity_public: String,
    pub endpoint: String,
    pub body: String,
    pub signature: JsRequestSignature,
    pub now: f64,
    pub max_skew_ms: Option<f64>,
}

// ---------------------------------------------------------------- conversions

/// `sealCheckedPayload`'s answer: the at-rest envelope and the payload's
/// size class, or the validator's message.
#[napi(object, js_name = "SealedPayload")]
pub struct JsSealedPayload {
    pub ok: bool,
    pub envelope: Option<JsSealedEnvelope>,
    pub size_class: Option<String>,
    pub message: Option<String>,
}

impl JsSealedPayload {
    fn from_core(
        checked: std::result::Result<(envelope::SealedEnvelope, &'static str), String>,
    ) -> Self {
        match checked {
            Ok((sealed, size_class)) => JsSealedPayload {
                ok: true,
                envelope: Some(sealed.into()),
                size_class: Some(size_class.to_owned()),
                message: None,
            },
            Err(message) => JsSealedPayload {
                ok: false,
                envelope: None,
                size_class: None,
                message: Some(message),
            },
        }
    }
}

/// An enqueued job's fields besides its kind and payload, as our store's
/// `create` takes them (`purposeJson`: `JSON.stringify` of `purpose`).
#[napi(object, js_name = "EnqueuedJob")]
pub struct JsEnqueuedJob {
    pub id: String,
    pub owner: String,
    pub audience: Option<String>,
    pub purpose_json: Option<String>,
    pub audience_allow: Option<Vec<String>>,
    pub depends_on: Option<Vec<String>>,
    pub ttl_ms: Option<f64>,
    pub deadline_at: Option<f64>,
}

/// Store an enqueued job with its at-rest envelope: the new record's row.
fn create_enqueued<'env>(
    env: &'env Env,
    store: &mut crate::binding::store::NativeMemoryStore,
    job: JsEnqueuedJob,
    kind: &str,
    at_rest: &crate::direct::AtRestSeal,
    size_class: &'static str,
    now: f64,
) -> Result<JsString<'env>> {
    let JsEnqueuedJob {
        id,
        owner,
        audience,
        purpose_json,
        audience_allow,
        depends_on,
        ttl_ms,
        deadline_at,
    } = job;
    store.create_job(
        env,
        crate::store::JobInput {
            id: &id,
            kind,
            envelope: at_rest.as_input(),
            size_class,
            owner: &owner,
            audience: audience.as_deref(),
            purpose_json: purpose_json.as_deref(),
            audience_allow,
            depends_on,
            ttl_ms,
            deadline_at,
        },
        now,
    )
}

/// `enqueueDirect`'s refusal: the payload validator's message.
#[napi(object, js_name = "PayloadRefusal")]
pub struct JsPayloadRefusal {
    pub message: String,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(Status::InvalidArg, message.into())
}

impl JsStoredKeys {
    /// The strict schema, applied to an object that came from JavaScript.
    fn to_core(&self) -> Result<StoredKeys> {
        if self.version != 1.0 {
            return Err(invalid("StoredKeys.version must be 1"));
        }
        if !is_positive_safe_integer(self.created_at) {
            return Err(invalid(
                "StoredKeys.createdAt must be a positive integer (epoch ms)",
            ));
        }
        let fields = [
            ("identityPublic", self.identity_public.as_str()),
            ("identityPrivate", &self.identity_private),
            ("encryptionPublic", &self.encryption_public),
            ("encryptionPrivate", &self.encryption_private),
            ("encryptionSig", &self.encryption_sig),
        ];
        if let Some((name, _)) = fields.iter().find(|(_, v)| v.is_empty()) {
            return Err(invalid(format!(
                "StoredKeys.{name} must be a non-empty string"
            )));
        }
        Ok(StoredKeys {
            version: 1,
            identity_public: self.identity_public.clone(),
            identity_private: (*self.identity_private).into(),
            encryption_public: self.encryption_public.clone(),
            encryption_private: (*self.encryption_private).into(),
            encryption_sig: self.encryption_sig.clone(),
            created_at: self.created_at as u64,
        })
    }

    fn from_core(keys: StoredKeys) -> JsStoredKeys {
        JsStoredKeys {
            version: f64::from(keys.version),
            identity_public: keys.identity_public,
            identity_private: KeyText(keys.identity_private.to_string()),
            encryption_public: keys.encryption_public,
            encryption_private: KeyText(keys.encryption_private.to_string()),
            encryption_sig: keys.encryption_sig,
            created_at: keys.created_at as f64,
        }
    }
}

impl From<PublicIdentity> for JsPublicIdentity {
    fn from(p: PublicIdentity) -> Self {
        JsPublicIdentity {
            identity: p.identity,
            encryption: p.encryption,
            encryption_sig: p.encryption_sig,
        }
    }
}

impl From<envelope::SealedEnvelope> for JsSealedEnvelope {
    fn from(e: envelope::SealedEnvelope) -> Self {
        JsSealedEnvelope {
            ciphertext: AsciiFirstString(e.ciphertext),
            recipient_key_id: e.recipient_key_id,
            sender_key_id: e.sender_key_id,
            direction: e.direction,
            deadline_at: e.deadline_at,
        }
    }
}

impl From<JsSealedEnvelope> for envelope::SealedEnvelope {
    fn from(e: JsSealedEnvelope) -> Self {
        envelope::SealedEnvelope {
            ciphertext: e.ciphertext.0,
            recipient_key_id: e.recipient_key_id,
            sender_key_id: e.sender_key_id,
            direction: e.direction,
            deadline_at: e.deadline_at,
        }
    }
}

fn open_result(result: std::result::Result<JsStr, OpenFailure>) -> JsOpenResult {
    open_result_with(result, None)
}

/// `canonicalOutcome` for an opened result: `Some(true)` when the plaintext
/// is a canonical sealed outcome (the one-pass check `isCanonicalRequestBody`
/// uses, over the sealed-outcome schema; a lone surrogate never is), else
/// absent.
fn canonical_outcome(opened: &std::result::Result<JsStr, OpenFailure>) -> Option<bool> {
    opened
        .as_ref()
        .is_ok_and(crate::direct::is_canonical_outcome)
        .then_some(true)
}

/// [`open_result`] carrying `canonicalOutcome` (see [`JsOpenResult`]).
fn open_result_with(
    result: std::result::Result<JsStr, OpenFailure>,
    canonical_outcome: Option<bool>,
) -> JsOpenResult {
    match result {
        Ok(text) => {
            // A plaintext holding a lone surrogate goes back as exact UTF-16.
            // Otherwise the cheapest form V8 can take without a UTF-8
            // decoding pass (a megabyte plaintext spends ~15% of its open
            // there): ASCII as Latin-1 (a copy), anything else as UTF-16.
            let plaintext = match text.lone_utf16() {
                Some(units) => Either3::B(Utf16String::from(units.to_vec())),
                None => {
                    let text = text.into_string();
                    if text.is_ascii() {
                        Either3::A(Latin1String::from(text))
                    } else {
                        Either3::B(Utf16String::from(text))
                    }
                }
            };
            JsOpenResult {
                ok: true,
                plaintext: Some(plaintext),
                reason: None,
                canonical_outcome,
            }
        }
        Err(reason) => JsOpenResult {
            ok: false,
            plaintext: None,
            reason: Some(reason.as_str().to_string()),
            canonical_outcome: None,
        },
    }
}

fn seal_error(e: envelope::SealError) -> Error {
    invalid(e.to_string())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(1)
}

// ---------------------------------------------------------------- keys

/// `generateSiteKeys(now = Date.now())`.
#[napi(catch_unwind)]
pub fn generate_keys(now: Option<f64>) -> Result<JsStoredKeys> {
    let now = match now {
        None => now_ms(),
        Some(n) if is_positive_safe_integer(n) => n as u64,
        Some(_) => {
            return Err(invalid(
                "generateKeys: now must be a positive integer (epoch ms)",
            ))
        }
    };
    Ok(JsStoredKeys::from_core(site_keys::generate_site_keys(now)))
}

#[napi(catch_unwind)]
pub fn public_identity_of(keys: JsStoredKeys) -> JsPublicIdentity {
    JsPublicIdentity {
        identity: keys.identity_public,
        encryption: keys.encryption_public,
        encryption_sig: keys.encryption_sig,
    }
}

/// Never throws: anything that is not an object of three strings is `false`.
#[napi(catch_unwind)]
pub fn verify_public_identity(identity: Unknown<'_>) -> bool {
    read_public_identity(&identity).is_some_and(|p| keys::verify_public_identity(&p))
}

/// Why a device presented at `pair start` is refused, or `null`: its
/// encryption key must be signed by its identity, and each key text must be
/// the one canonical spelling of its bytes (`keys::device_identity_refusal`).
/// Never throws.
#[napi(catch_unwind)]
pub fn device_identity_refusal(identity: Unknown<'_>) -> Option<&'static str> {
    read_public_identity(&identity).map_or(Some(keys::DEVICE_UNSIGNED), |p| {
        keys::device_identity_refusal(&p)
    })
}

fn read_public_identity(identity: &Unknown<'_>) -> Option<PublicIdentity> {
    fn read(identity: &Unknown<'_>) -> Option<PublicIdentity> {
        if identity.get_type().ok()? != ValueType::Object {
            return None;
        }
        // SAFETY: the value was just checked to be an object.
        let object: Object<'_> = unsafe { identity.cast().ok()? };
        let text = |name: &str| -> Option<String> {
            let value: Unknown<'_> = object.get(name).ok()??;
            if value.get_type().ok()? != ValueType::String {
                return None;
            }
            // SAFETY: checked to be a string.
            unsafe { value.cast::<String>().ok() }
        };
        Some(PublicIdentity {
            identity: text("identity")?,
            encryption: text("encryption")?,
            encryption_sig: text("encryptionSig")?,
        })
    }
    read(identity)
}

#[napi(catch_unwind)]
pub fn key_id(identity_public: String) -> String {
    fingerprint::key_id(&identity_public)
}

#[napi(catch_unwind)]
pub fn format_site_keys(keys: JsStoredKeys) -> Result<String> {
    Ok(site_keys::format_site_keys(&keys.to_core()?))
}

/// `siteKeysFromEnv` given the variable's name and value; the shell reads
/// `process.env`. Throws the reference's three messages.
#[napi(catch_unwind)]
pub fn site_keys_from_env_value(variable: String, value: Option<String>) -> Result<JsStoredKeys> {
    site_keys::site_keys_from_env(&variable, value.as_deref())
        .map(JsStoredKeys::from_core)
        .map_err(|e| Error::new(Status::GenericFailure, e.to_string()))
}

// ---------------------------------------------------------------- envelopes

fn core_context(c: &JsEnvelopeContext) -> envelope::Context {
    envelope::Context {
        job_id: c.job_id.clone(),
        sender_key_id: c.sender_key_id.clone(),
        recipient_key_id: c.recipient_key_id.clone(),
        deadline_at: c.deadline_at,
        direction: c.direction.clone(),
    }
}

fn core_expected(e: JsOpenExpected) -> envelope::Expected {
    envelope::Expected {
        job_id: e.job_id,
        sender_key_id: e.sender_key_id,
        recipient_key_id: e.recipient_key_id,
        direction: e.direction,
    }
}

#[napi(catch_unwind)]
pub fn seal(opts: SealOptions) -> Result<JsSealedEnvelope> {
    let sender = with_parsed(|c| c.signing_key(&opts.sender_keys.identity_private))
        .map_err(|e| seal_error(envelope::SealError::SenderKey(e)))?;
    envelope::seal(
        Text::Utf8(&opts.plaintext),
        &sender,
        &opts.recipient_encryption_public,
        &core_context(&opts.context),
    )
    .map(JsSealedEnvelope::from)
    .map_err(seal_error)
}

/// Private keys handed over as text on every call, parsed once (see
/// `keys::ParsedKeyCache`).
fn with_parsed<T>(work: impl FnOnce(&mut ParsedKeyCache) -> T) -> T {
    static CACHE: OnceLock<Mutex<ParsedKeyCache>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(ParsedKeyCache::new(8)));
    match cache.lock() {
        Ok(mut guard) => work(&mut guard),
        // Poisoned by a panic elsewhere: work without the cache.
        Err(_) => work(&mut ParsedKeyCache::new(1)),
    }
}

/// Never throws for a bad envelope or bad keys: those are reasons.
#[napi(
    catch_unwind,
    ts_return_type = "{ ok: true; plaintext: string; canonicalOutcome?: boolean } | { ok: false; reason: \"not-for-us\" | \"unopenable\" | \"malformed\" | \"bad-signature\" | \"context-mismatch\" }"
)]
pub fn open(opts: OpenOptions) -> JsOpenResult {
    let envelope = envelope::SealedEnvelope::from(opts.envelope);
    // Unusable recipient keys are just a box that does not open.
    let recipient = with_parsed(|c| c.encryption(&opts.recipient_keys.encryption_private)).ok();
    let sender = signing::pinned_key(&opts.sender_identity_public);
    let recipient = recipient
        .as_ref()
        .map(|(secret, public)| envelope::Recipient { secret, public });
    open_result(envelope::open(
        &envelope,
        recipient,
        sender.as_ref(),
        &core_expected(opts.expected),
    ))
}

// ---------------------------------------------------------------- request signatures

#[napi(catch_unwind)]
pub fn canonical_request(
    endpoint: String,
    runner_id: String,
    issued_at: f64,
    body: String,
) -> String {
    signing::canonical_request(&endpoint, &runner_id, issued_at, &body)
}

#[napi(catch_unwind)]
pub fn sign_request(keys: JsStoredKeys, req: RequestToSign) -> Result<SignedRequest> {
    let signer = with_parsed(|c| c.signing_key(&keys.identity_private))
        .map_err(|e| invalid(e.to_string()))?;
    // The canonical bytes take the UTF-8 form (a lone surrogate as U+FFFD,
    // which is what Node's UTF-8 encoding writes too).
    let runner_id = String::from_utf16_lossy(&req.runner_id);
    let canonical = signing::canonical_request(&req.endpoint, &runner_id, req.issued_at, &req.body);
    let signature = crate::b64::encode_url(
        &ed25519_dalek::Signer::sign(&signer, canonical.as_bytes()).to_bytes(),
    );
    Ok(SignedRequest {
        runner_id: req.runner_id,
        issued_at: req.issued_at,
        signature,
    })
}

#[napi(catch_unwind, ts_return_type = "null | \"stale\" | \"bad-signature\"")]
pub fn verify_request(opts: VerifyRequestOptions) -> Option<&'static str> {
    let key = signing::pinned_key(&opts.identity_public);
    let signature = RequestSignature {
        runner_id: opts.signature.runner_id,
        issued_at: opts.signature.issued_at,
        signature: opts.signature.signature,
    };
    signing::verify_request(
        key.as_ref(),
        &opts.endpoint,
        &opts.body,
        &signature,
        opts.now,
        opts.max_skew_ms.unwrap_or(signing::MAX_CLOCK_SKEW_MS),
    )
    .map(|failure| failure.as_str())
}

// ---------------------------------------------------------------- ids and secrets

#[napi(catch_unwind)]
pub fn generate_device_code() -> String {
    ids::generate_device_code()
}

#[napi(catch_unwind)]
pub fn generate_user_code() -> String {
    ids::generate_user_code()
}

#[napi(catch_unwind)]
pub fn generate_runner_id() -> String {
    ids::generate_runner_id()
}

#[napi(catch_unwind)]
pub fn generate_job_id() -> String {
    ids::generate_job_id()
}

#[napi(catch_unwind)]
pub fn generate_lease_id() -> String {
    ids::generate_lease_id()
}

#[napi(catch_unwind)]
pub fn hash_secret(secret: String) -> String {
    ids::hash_secret(&secret)
}

/// Constant time for equal lengths; `false` (never a throw) on malformed input.
#[napi(catch_unwind)]
pub fn secrets_match(a: String, b: String) -> bool {
    ids::secrets_match(&a, &b)
}

#[napi(catch_unwind)]
pub fn normalize_user_code(input: String) -> String {
    ids::normalize_user_code(&input)
}

// ---------------------------------------------------------------- SiteKeyring

/// A site's keys, parsed once and shared with the thread pool.
#[napi]
pub struct SiteKeyring {
    inner: Arc<KeyHandle>,
}

fn device_from_js(device: &JsPublicIdentity) -> PublicIdentity {
    PublicIdentity {
        identity: device.identity.clone(),
        encryption: device.encryption.clone(),
        encryption_sig: device.encryption_sig.clone(),
    }
}

fn seal_payload_core(
    handle: &KeyHandle,
    plaintext: &str,
    job_id: &str,
    deadline_at: f64,
) -> std::result::Result<envelope::SealedEnvelope, envelope::SealError> {
    let context = crate::direct::at_rest_context(handle, job_id, deadline_at);
    envelope::seal_with_handle(
        Text::Utf8(plaintext),
        handle,
        &handle.keys().encryption_public,
        &context,
    )
}

/// Validate an enqueue's payload and seal its canonical text at rest, in one
/// step: the canonical text (as long as the payload) never crosses to
/// JavaScript and back. The validator's message is the inner `Err`.
fn seal_checked_core(
    handle: &KeyHandle,
    kind: Option<&str>,
    kind_display: &str,
    payload_json: Option<&str>,
    job_id: &str,
    deadline_at: f64,
) -> std::result::Result<
    std::result::Result<(envelope::SealedEnvelope, &'static str), String>,
    envelope::SealError,
> {
    let valid = match crate::direct::validate_for_enqueue(
        handle,
        kind,
        kind_display,
        payload_json,
        job_id,
        deadline_at,
    ) {
        Ok(valid) => valid,
        Err(message) => return Ok(Err(message)),
    };
    let sealed = seal_payload_core(handle, &valid.canonical, job_id, deadline_at)?;
    Ok(Ok((sealed, valid.size_class.as_str())))
}

#[napi]
impl SiteKeyring {
    /// Parses both private keys; throws a clear error when they are not keys.
    /// Consistency of the public half is a separate question: `isConsistent()`.
    #[napi(constructor, catch_unwind)]
    pub fn new(keys: JsStoredKeys) -> Result<Self> {
        let handle =
            KeyHandle::new(keys.to_core()?).map_err(|e| invalid(format!("siteKeys: {e}")))?;
        Ok(SiteKeyring {
            inner: Arc::new(handle),
        })
    }

    #[napi(getter, catch_unwind)]
    pub fn key_id(&self) -> String {
        self.inner.key_id().to_string()
    }

    #[napi(catch_unwind)]
    pub fn public_identity(&self) -> JsPublicIdentity {
        self.inner.public_identity().into()
    }

    #[napi(catch_unwind)]
    pub fn is_consistent(&self) -> bool {
        self.inner.is_consistent()
    }

    /// Seal a job payload to the site itself, for storage at rest.
    #[napi(catch_unwind)]
    pub fn seal_payload(
        &self,
        plaintext: String,
        job_id: String,
        deadline_at: f64,
    ) -> Result<JsSealedEnvelope> {
        seal_payload_core(&self.inner, &plaintext, &job_id, deadline_at)
            .map(JsSealedEnvelope::from)
            .map_err(seal_error)
    }

    #[napi(catch_unwind, ts_return_type = "Promise<SealedEnvelope>")]
    pub fn seal_payload_async(
        &self,
        plaintext: String,
        job_id: String,
        deadline_at: f64,
    ) -> AsyncTask<SealPayloadTask> {
        AsyncTask::new(SealPayloadTask {
            handle: self.inner.clone(),
            plaintext,
            job_id,
            deadline_at,
        })
    }

    /// `validatePayload` then `sealPayload` of its canonical text, in one call.
    #[napi(
        catch_unwind,
        ts_return_type = "{ ok: true; envelope: SealedEnvelope; sizeClass: string } | { ok: false; message: string }"
    )]
    pub fn seal_checked_payload(
        &self,
        kind: Unknown<'_>,
        payload_json: Option<String>,
        job_id: String,
        deadline_at: f64,
    ) -> Result<JsSealedPayload> {
        let (kind_text, display) = super::rules::payload_kind(kind)?;
        seal_checked_core(
            &self.inner,
            kind_text.as_deref(),
            &display,
            payload_json.as_deref(),
            &job_id,
            deadline_at,
        )
        .map(JsSealedPayload::from_core)
        .map_err(seal_error)
    }

    /// [`Self::seal_checked_payload`] on the thread pool (validation
    /// included: for a large payload it is milliseconds of parsing).
    #[napi(
        catch_unwind,
        ts_return_type = "Promise<{ ok: true; envelope: SealedEnvelope; sizeClass: string } | { ok: false; message: string }>"
    )]
    pub fn seal_checked_payload_async(
        &self,
        kind: Unknown<'_>,
        payload_json: Option<String>,
        job_id: String,
        deadline_at: f64,
    ) -> Result<AsyncTask<SealCheckedTask>> {
        self.checked_task(kind, PayloadSource::Json(payload_json), job_id, deadline_at)
            .map(AsyncTask::new)
    }

    /// [`Self::seal_checked_payload_async`] for a payload that is a plain
    /// object of string values, given as its keys and values: the JSON text
    /// is written here (off the main thread) instead of by `JSON.stringify`,
    /// which scans a megabyte prompt a character at a time.
    #[napi(
        catch_unwind,
        ts_return_type = "Promise<{ ok: true; envelope: SealedEnvelope; sizeClass: string } | { ok: false; message: string }>"
    )]
    pub fn seal_string_fields_async(
        &self,
        kind: Unknown<'_>,
        keys: Vec<ExactString>,
        values: Vec<ExactString>,
        job_id: String,
        deadline_at: f64,
    ) -> Result<AsyncTask<SealCheckedTask>> {
        let payload = PayloadSource::fields("sealStringFieldsAsync", keys, values)?;
        self.checked_task(kind, payload, job_id, deadline_at)
            .map(AsyncTask::new)
    }

    /// [`Self::seal_checked_payload_async`] for an enqueue on our
    /// `NativeMemoryStore` whose records leave envelopes out: validated on
    /// the thread pool, the at-rest seal left to the background thread (see
    /// `crate::envelope::deferred`), then stored by `enqueuePrepared`.
    #[napi(
        catch_unwind,
        ts_return_type = "Promise<PreparedPayload | PayloadRefusal>"
    )]
    pub fn prepare_checked_payload_async(
        &self,
        kind: Unknown<'_>,
        payload_json: Option<String>,
        job_id: String,
        deadline_at: f64,
    ) -> Result<AsyncTask<PrepareCheckedTask>> {
        self.checked_task(kind, PayloadSource::Json(payload_json), job_id, deadline_at)
            .map(|checked| AsyncTask::new(PrepareCheckedTask { checked }))
    }

    /// [`Self::prepare_checked_payload_async`] for a plain object of string
    /// values (see [`Self::seal_string_fields_async`]).
    #[napi(
        catch_unwind,
        ts_return_type = "Promise<PreparedPayload | PayloadRefusal>"
    )]
    pub fn prepare_string_fields_async(
        &self,
        kind: Unknown<'_>,
        keys: Vec<ExactString>,
        values: Vec<ExactString>,
        job_id: String,
        deadline_at: f64,
    ) -> Result<AsyncTask<PrepareCheckedTask>> {
        let payload = PayloadSource::fields("prepareStringFieldsAsync", keys, values)?;
        self.checked_task(kind, payload, job_id, deadline_at)
            .map(|checked| AsyncTask::new(PrepareCheckedTask { checked }))
    }

    /// Store a payload `prepare…Async` validated, as `enqueueDirect` stores
    /// one: the new record's row. `kind` is the one it was prepared with.
    /// Throws if `prepared` was used already.
    #[napi(catch_unwind)]
    pub fn enqueue_prepared<'env>(
        &self,
        env: &'env Env,
        store: &mut crate::binding::store::NativeMemoryStore,
        prepared: &mut PreparedPayload,
        kind: String,
        job: JsEnqueuedJob,
        now: f64,
    ) -> Result<JsString<'env>> {
        let Some((at_rest, size_class)) = prepared.prepared.take() else {
            return Err(invalid("enqueuePrepared: this payload was stored already"));
        };
        // A job under this id already: `create` answers with it, and this
        // payload's seal is never needed.
        if store.core_mut().get(&job.id).is_none() {
            crate::direct::seal_later(&at_rest);
        }
        create_enqueued(env, store, job, &kind, &at_rest, size_class, now)
    }

    /// Open the at-rest payload and seal it to the claiming device; `null`
    /// when the at-rest envelope does not open.
    #[napi(catch_unwind)]
    pub fn reseal_for_device(
        &self,
        at_rest: JsSealedEnvelope,
        job_id: String,
        created_at: f64,
        device: JsPublicIdentity,
    ) -> Result<Option<JsSealedEnvelope>> {
        crate::direct::reseal_for_device(
            &self.inner,
            &at_rest.into(),
            &job_id,
            created_at,
            &device_from_js(&device),
        )
        .map(|o| o.map(JsSealedEnvelope::from))
        .map_err(seal_error)
    }

    /// `sealCheckedPayload` and our store's `create` in one call, for an
    /// enqueue on our `NativeMemoryStore`: the at-rest envelope never
    /// becomes a JS object only to be handed back. The new record's row (see
    /// `NativeMemoryStore.create`), or the validator's refusal (nothing
    /// stored).
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind, ts_return_type = "string | { message: string }")]
    pub fn enqueue_direct<'env>(
        &self,
        env: &'env Env,
        store: &mut crate::binding::store::NativeMemoryStore,
        kind: Unknown<'_>,
        payload_json: Option<String>,
        job_id: String,
        envelope_deadline_at: f64,
        owner: String,
        audience: Option<String>,
        purpose_json: Option<String>,
        audience_allow: Option<Vec<String>>,
        depends_on: Option<Vec<String>>,
        ttl_ms: Option<f64>,
        deadline_at: Option<f64>,
        now: f64,
    ) -> Result<Either<JsString<'env>, JsPayloadRefusal>> {
        let (kind_text, display) = super::rules::payload_kind(kind)?;
        let valid = match crate::direct::validate_for_enqueue(
            &self.inner,
            kind_text.as_deref(),
            &display,
            payload_json.as_deref(),
            &job_id,
            envelope_deadline_at,
        ) {
            Ok(valid) => valid,
            Err(message) => return Ok(Either::B(JsPayloadRefusal { message })),
        };
        let size_class = valid.size_class.as_str();
        let at_rest = crate::direct::seal_at_rest(
            &self.inner,
            store.core_mut(),
            valid.canonical,
            &job_id,
            envelope_deadline_at,
        )
        .map_err(seal_error)?;
        // The validator accepted the kind, so it is a string.
        let kind = kind_text.unwrap_or_default();
        let job = JsEnqueuedJob {
            id: job_id,
            owner,
            audience,
            purpose_json,
            audience_allow,
            depends_on,
            ttl_ms,
            deadline_at,
        };
        create_enqueued(env, store, job, &kind, &at_rest, size_class, now).map(Either::A)
    }

    /// A signed `claim`, `fetch` or `result` served end to end on our
    /// store (see `crate::direct::serve`): the answer's JSON text (status
    /// 200), or `null` when the general path must answer, in which case
    /// nothing has changed.
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind)]
    pub fn serve_direct<'env>(
        &self,
        env: &'env Env,
        store: &mut crate::binding::store::NativeMemoryStore,
        endpoint: String,
        body: String,
        runner_id: String,
        issued_at: String,
        signature: String,
        lease_ms: f64,
        now: f64,
    ) -> Result<Option<JsString<'env>>> {
        let Some(endpoint) = wire::Endpoint::parse(&endpoint) else {
            return Ok(None);
        };
        let call = crate::direct::Call {
            endpoint,
            body: &body,
            runner_id: &runner_id,
            issued_at: &issued_at,
            signature: &signature,
        };
        let site = crate::direct::Site {
            keys: &self.inner,
            lease_ms,
        };
        let answer = crate::direct::serve(store.core_mut(), &site, &call, now);
        // What the request changed is on disk before the device hears of it.
        store.persist()?;
        match answer {
            // Answers are ASCII but for the odd id or model name; V8 takes
            // those as Latin-1 without a UTF-8 decoding pass.
            Some(answer) if answer.is_ascii() => {
                env.create_string_latin1(answer.as_bytes()).map(Some)
            }
            Some(answer) => env.create_string(&answer).map(Some),
            None => Ok(None),
        }
    }

    /// [`Self::reseal_for_device_async`] for a job whose envelope is in our
    /// `NativeMemoryStore`: read there, so a megabyte ciphertext does not
    /// become a JS string only to be read back. `null` when the store has no
    /// sealed envelope under that id, as for one that does not open.
    #[napi(catch_unwind, ts_return_type = "Promise<SealedEnvelope | null>")]
    pub fn reseal_stored_for_device_async(
        &self,
        store: &mut crate::binding::store::NativeMemoryStore,
        job_id: String,
        created_at: f64,
        device: JsPublicIdentity,
    ) -> AsyncTask<ResealTask> {
        AsyncTask::new(ResealTask {
            inputs: store
                .at_rest_core(&job_id)
                .map(|at_rest| crate::direct::reseal::Inputs {
                    site: self.inner.clone(),
                    job_id,
                    at_rest,
                    created_at,
                    device: device_from_js(&device),
                }),
        })
    }

    #[napi(catch_unwind, ts_return_type = "Promise<SealedEnvelope | null>")]
    pub fn reseal_for_device_async(
        &self,
        at_rest: JsSealedEnvelope,
        job_id: String,
        created_at: f64,
        device: JsPublicIdentity,
    ) -> AsyncTask<ResealTask> {
        AsyncTask::new(ResealTask {
            inputs: Some(crate::direct::reseal::Inputs {
                site: self.inner.clone(),
                job_id,
                at_rest: crate::direct::reseal::AtRest::Sealed(at_rest.into()),
                created_at,
                device: device_from_js(&device),
            }),
        })
    }

    /// Open a device's result envelope addressed to this site.
    #[napi(
        catch_unwind,
        ts_return_type = "{ ok: true; plaintext: string; canonicalOutcome?: boolean } | { ok: false; reason: \"not-for-us\" | \"unopenable\" | \"malformed\" | \"bad-signature\" | \"context-mismatch\" }"
    )]
    pub fn open_result(
        &self,
        envelope: JsSealedEnvelope,
        job_id: String,
        device_identity: String,
    ) -> JsOpenResult {
        let opened =
            crate::direct::open_result(&self.inner, &envelope.into(), &job_id, &device_identity);
        let canonical = canonical_outcome(&opened);
        open_result_with(opened, canonical)
    }

    #[napi(
        catch_unwind,
        ts_return_type = "Promise<{ ok: true; plaintext: string; canonicalOutcome?: boolean } | { ok: false; reason: \"not-for-us\" | \"unopenable\" | \"malformed\" | \"bad-signature\" | \"context-mismatch\" }>"
    )]
    pub fn open_result_async(
        &self,
        envelope: JsSealedEnvelope,
        job_id: String,
        device_identity: String,
    ) -> AsyncTask<OpenResultTask> {
        AsyncTask::new(OpenResultTask {
            handle: self.inner.clone(),
            envelope: envelope.into(),
            job_id,
            device_identity,
        })
    }

    /// The site plane's request signature over `site/<endpoint>`.
    #[napi(catch_unwind)]
    pub fn sign_site_request(
        &self,
        endpoint: String,
        site_id: String,
        issued_at: f64,
        body: String,
    ) -> String {
        signing::sign_request(
            &self.inner,
            &signing::site_endpoint(&endpoint),
            &site_id,
            issued_at,
            &body,
        )
        .signature
    }
}

// ---------------------------------------------------------------- thread-pool tasks

pub struct SealPayloadTask {
    handle: Arc<KeyHandle>,
    plaintext: String,
    job_id: String,
    deadline_at: f64,
}

impl Task for SealPayloadTask {
    type Output = envelope::SealedEnvelope;
    type JsValue = JsSealedEnvelope;

    fn compute(&mut self) -> Result<Self::Output> {
        guard(|| {
            seal_payload_core(
                &self.handle,
                &self.plaintext,
                &self.job_id,
                self.deadline_at,
            )
            .map_err(seal_error)
        })
    }

    fn resolve(&mut self, _env: Env, output: Self::Output) -> Result<Self::JsValue> {
        Ok(output.into())
    }
}

/// An enqueue payload as it reaches the keyring.
pub enum PayloadSource {
    /// `JSON.stringify(payload)`, or `None` when there is none.
    Json(Option<String>),
    /// A plain object of string values, as keys and values.
    Fields(Vec<ExactString>, Vec<ExactString>),
}

impl PayloadSource {
    /// [`PayloadSource::Fields`], refused (for `method`) unless there are as
    /// many values as keys.
    fn fields(
        method: &str,
        keys: Vec<ExactString>,
        values: Vec<ExactString>,
    ) -> Result<PayloadSource> {
        if keys.len() != values.len() {
            return Err(invalid(format!(
                "{method}: keys and values differ in length"
            )));
        }
        Ok(PayloadSource::Fields(keys, values))
    }
}

impl SiteKeyring {
    /// The validation-and-seal work for `payload` of `kind` (the async seals
    /// and prepares share it).
    fn checked_task(
        &self,
        kind: Unknown<'_>,
        payload: PayloadSource,
        job_id: String,
        deadline_at: f64,
    ) -> Result<SealCheckedTask> {
        let (kind_text, kind_display) = super::rules::payload_kind(kind)?;
        Ok(SealCheckedTask {
            handle: self.inner.clone(),
            kind_text,
            kind_display,
            payload,
            job_id,
            deadline_at,
        })
    }
}

pub struct SealCheckedTask {
    handle: Arc<KeyHandle>,
    kind_text: Option<String>,
    kind_display: String,
    payload: PayloadSource,
    job_id: String,
    deadline_at: f64,
}

impl Task for SealCheckedTask {
    type Output = std::result::Result<(envelope::SealedEnvelope, &'static str), String>;
    type JsValue = JsSealedPayload;

    fn compute(&mut self) -> Result<Self::Output> {
        guard(|| {
            let written;
            let payload_json = match &self.payload {
                PayloadSource::Json(json) => json.as_deref(),
                PayloadSource::Fields(keys, values) => {
                    written = string_fields_json(keys, values);
                    Some(written.as_str())
                }
            };
            seal_checked_core(
                &self.handle,
                self.kind_text.as_deref(),
                &self.kind_display,
                payload_json,
                &self.job_id,
                self.deadline_at,
            )
            .map_err(seal_error)
        })
    }

    fn resolve(&mut self, _env: Env, output: Self::Output) -> Result<Self::JsValue> {
        Ok(JsSealedPayload::from_core(output))
    }
}

/// A large payload validated on the thread pool, its at-rest seal left for
/// later where it can be ([`crate::direct::prepare_at_rest`]), waiting to
/// be stored by `SiteKeyring.enqueuePrepared`. Used once.
#[napi]
pub struct PreparedPayload {
    prepared: Option<(crate::direct::AtRestSeal, &'static str)>,
}

pub struct PrepareCheckedTask {
    checked: SealCheckedTask,
}

impl Task for PrepareCheckedTask {
    type Output = std::result::Result<(crate::direct::AtRestSeal, &'static str), String>;
    type JsValue = Either<PreparedPayload, JsPayloadRefusal>;

    fn compute(&mut self) -> Result<Self::Output> {
        let task = &self.checked;
        guard(|| {
            let written;
            let payload_json = match &task.payload {
                PayloadSource::Json(json) => json.as_deref(),
                PayloadSource::Fields(keys, values) => {
                    written = string_fields_json(keys, values);
                    Some(written.as_str())
                }
            };
            let valid = match crate::direct::validate_for_enqueue(
                &task.handle,
                task.kind_text.as_deref(),
                &task.kind_display,
                payload_json,
                &task.job_id,
                task.deadline_at,
            ) {
                Ok(valid) => valid,
                Err(message) => return Ok(Err(message)),
            };
            let size_class = valid.size_class.as_str();
            crate::direct::prepare_at_rest(
                &task.handle,
                valid.canonical,
                &task.job_id,
                task.deadline_at,
                true,
            )
            .map(|at_rest| Ok((at_rest, size_class)))
            .map_err(seal_error)
        })
    }

    fn resolve(&mut self, _env: Env, output: Self::Output) -> Result<Self::JsValue> {
        Ok(match output {
            Ok(prepared) => Either::A(PreparedPayload {
                prepared: Some(prepared),
            }),
            Err(message) => Either::B(JsPayloadRefusal { message }),
        })
    }
}

pub struct ResealTask {
    /// `None`: nothing to open (a stored job without a sealed envelope).
    inputs: Option<crate::direct::reseal::Inputs>,
}

impl Task for ResealTask {
    type Output = Option<envelope::SealedEnvelope>;
    type JsValue = Option<JsSealedEnvelope>;

    fn compute(&mut self) -> Result<Self::Output> {
        guard(|| match &self.inputs {
            Some(inputs) => inputs.reseal().map_err(seal_error),
            None => Ok(None),
        })
    }

    fn resolve(&mut self, _env: Env, output: Self::Output) -> Result<Self::JsValue> {
        Ok(output.map(JsSealedEnvelope::from))
    }
}

pub struct OpenResultTask {
    handle: Arc<KeyHandle>,
    envelope: envelope::SealedEnvelope,
    job_id: String,
    device_identity: String,
}

impl Task for OpenResultTask {
    type Output = (std::result::Result<JsStr, OpenFailure>, Option<bool>);
    type JsValue = JsOpenResult;

    fn compute(&mut self) -> Result<Self::Output> {
        guard(|| {
            let opened = crate::direct::open_result(
                &self.handle,
                &self.envelope,
                &self.job_id,
                &self.device_identity,
            );
            let canonical = canonical_outcome(&opened);
            Ok((opened, canonical))
        })
    }

    fn resolve(&mut self, _env: Env, (opened, canonical): Self::Output) -> Result<Self::JsValue> {
        Ok(open_result_with(opened, canonical))
    }
}

/// `catch_unwind` for work on the thread pool, where the attribute does not
/// reach: a panic becomes a rejected promise.
fn guard<T>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|_| {
        Err(Error::new(
            Status::GenericFailure,
            "byollm-server-native: internal error (panic) in a crypto task",
        ))
    })
}
