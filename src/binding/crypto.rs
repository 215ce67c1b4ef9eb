//! The free crypto exports: keys, site keys, ids and secrets, and the object
//! shapes they share with the `SiteKeyring` (types: the generated
//! `index.d.ts`).
//!
//! Conversions only: every rule lives in the core modules. Objects returned
//! to JavaScript are `#[napi(object)]` structs, whose field order is the key
//! order JavaScript sees.

use napi::bindgen_prelude::*;
use napi_derive::napi;

use super::strings::{AsciiFirstString, KeyText};
use crate::envelope;
use crate::ids;
use crate::json::JsStr;
use crate::keys::{is_positive_safe_integer, PublicIdentity, StoredKeys};
use crate::site_keys;

// ---------------------------------------------------------------- shapes

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

// ---------------------------------------------------------------- conversions

pub(super) fn invalid(message: impl Into<String>) -> Error {
    Error::new(Status::InvalidArg, message.into())
}

impl JsStoredKeys {
    /// The strict schema, applied to an object that came from JavaScript.
    pub(super) fn to_core(&self) -> Result<StoredKeys> {
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

/// A text for JavaScript: holding a lone surrogate, as exact UTF-16.
/// Otherwise the cheapest form V8 can take without a UTF-8 decoding pass
/// (a megabyte plaintext spends ~15% of its open there): ASCII as Latin-1
/// (a copy), anything else as UTF-16.
pub(super) fn js_text(text: JsStr) -> Either3<Latin1String, Utf16String, String> {
    match text.lone_utf16() {
        Some(units) => Either3::B(Utf16String::from(units.to_vec())),
        None => {
            let text = text.into_string();
            if super::LATIN1_IS_CHEAP && text.is_ascii() {
                Either3::A(Latin1String::from(text))
            } else if text.is_ascii() {
                Either3::C(text)
            } else {
                Either3::B(Utf16String::from(text))
            }
        }
    }
}

pub(super) fn seal_error(e: envelope::SealError) -> Error {
    invalid(e.to_string())
}

// ---------------------------------------------------------------- keys

/// `generateSiteKeys(now)`: the shell supplies the default, `Date.now()`.
#[napi(catch_unwind)]
pub(super) fn generate_keys(now: f64) -> Result<JsStoredKeys> {
    if !is_positive_safe_integer(now) {
        return Err(invalid(
            "generateKeys: now must be a positive integer (epoch ms)",
        ));
    }
    Ok(JsStoredKeys::from_core(site_keys::generate_site_keys(
        now as u64,
    )))
}

#[napi(catch_unwind)]
pub(super) fn format_site_keys(keys: JsStoredKeys) -> Result<String> {
    Ok(site_keys::format_site_keys(&keys.to_core()?))
}

/// `siteKeysFromEnv` given the variable's name and value; the shell reads
/// `process.env`. Throws the reference's three messages. The value (the keys,
/// private halves included) is wiped here once read.
#[napi(
    catch_unwind,
    ts_args_type = "variable: string, value?: string | undefined | null"
)]
pub(super) fn site_keys_from_env_value(
    variable: String,
    value: Option<KeyText>,
) -> Result<JsStoredKeys> {
    site_keys::site_keys_from_env(&variable, value.as_deref())
        .map(JsStoredKeys::from_core)
        .map_err(|e| Error::new(Status::GenericFailure, e.to_string()))
}

// ---------------------------------------------------------------- ids and secrets

#[napi(catch_unwind)]
pub(super) fn generate_device_code() -> String {
    ids::generate_device_code()
}

#[napi(catch_unwind)]
pub(super) fn generate_user_code() -> String {
    ids::generate_user_code()
}

#[napi(catch_unwind)]
pub(super) fn generate_runner_id() -> String {
    ids::generate_runner_id()
}

#[napi(catch_unwind)]
pub(super) fn generate_job_id() -> String {
    ids::generate_job_id()
}

#[napi(catch_unwind)]
pub(super) fn hash_secret(secret: String) -> String {
    ids::hash_secret(&secret)
}

/// Constant time for equal lengths; `false` (never a throw) on malformed input.
#[napi(catch_unwind)]
pub(super) fn secrets_match(a: String, b: String) -> bool {
    ids::secrets_match(&a, &b)
}

#[napi(catch_unwind)]
pub(super) fn normalize_user_code(input: String) -> String {
    ids::normalize_user_code(&input)
}
