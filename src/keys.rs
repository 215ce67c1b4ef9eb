//! Key material: `StoredKeys`, public identities, the encryption-key
//! signature, and a parsed key handle that is reused across calls.
//!
//! Private keys travel as PKCS#8 DER in standard base64. Every key the
//! reference generates has the same 48-byte shape (a fixed 16-byte header and
//! the 32-byte seed or scalar), so that is the shape read here; Node would
//! also take other valid PKCS#8 encodings, which keygen never writes.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use rand_core::{OsRng, RngCore};
use serde::Serialize;
use x25519_dalek::{PublicKey as XPublicKey, StaticSecret};
use zeroize::Zeroizing;

use crate::b64;
use crate::fingerprint;
use crate::json::{Doc, Node};

/// Domain separator of the encryption-key signature.
pub const ENCRYPTION_KEY_CONTEXT: &str = "byollm/v1/encryption-key";

/// PKCS#8 v1 header of an Ed25519 private key (OID 1.3.101.112).
pub const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// PKCS#8 v1 header of an X25519 private key (OID 1.3.101.110).
pub const X25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20,
];

/// `Number.MAX_SAFE_INTEGER`: the schema's `int()` means a safe integer.
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// The text of a private key: wiped when dropped, never shown by `Debug`.
/// Derefs to `str` for the parsers and serialises as the plain string
/// (`formatSiteKeys` writes it).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretText(Zeroizing<String>);

impl SecretText {
    pub fn new(text: String) -> SecretText {
        SecretText(Zeroizing::new(text))
    }
}

impl From<String> for SecretText {
    fn from(text: String) -> SecretText {
        SecretText::new(text)
    }
}

impl From<&str> for SecretText {
    fn from(text: &str) -> SecretText {
        SecretText::new(text.to_owned())
    }
}

impl std::ops::Deref for SecretText {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretText(<redacted>)")
    }
}

impl Serialize for SecretText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

/// A party's private key material, as stored and as `formatSiteKeys` writes
/// it. Field order is the serialisation order. The private halves are
/// [`SecretText`]: wiped on drop, redacted in `Debug`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredKeys {
    pub version: u8,
    pub identity_public: String,
    pub identity_private: SecretText,
    pub encryption_public: String,
    pub encryption_private: SecretText,
    pub encryption_sig: String,
    pub created_at: u64,
}

/// The public half, as it travels on the wire (this key order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicIdentity {
    pub identity: String,
    pub encryption: String,
    pub encryption_sig: String,
}

/// Why key material could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("identityPrivate is not a base64 PKCS#8 Ed25519 private key")]
    IdentityPrivate,
    #[error("encryptionPrivate is not a base64 PKCS#8 X25519 private key")]
    EncryptionPrivate,
    /// The object does not match the strict `StoredKeys` schema.
    #[error("not a valid StoredKeys object: {0}")]
    Schema(&'static str),
}

/// Is `n` a positive safe integer (`z.number().int().positive()`)?
pub fn is_positive_safe_integer(n: f64) -> bool {
    n.is_finite() && n.fract() == 0.0 && n > 0.0 && n <= MAX_SAFE_INTEGER
}

impl StoredKeys {
    /// Fresh Ed25519 + X25519 key pairs from the OS CSPRNG, bound together by
    /// the encryption-key signature.
    pub fn generate(now_ms: u64) -> StoredKeys {
        let mut seed = Zeroizing::new([0u8; 32]);
        OsRng.fill_bytes(seed.as_mut());
        let mut scalar = Zeroizing::new([0u8; 32]);
        OsRng.fill_bytes(scalar.as_mut());
        Self::from_secrets(&seed, &scalar, now_ms)
    }

    /// Deterministic construction from a seed and a scalar (tests, and the
    /// one place generation happens).
    pub fn from_secrets(seed: &[u8; 32], scalar: &[u8; 32], now_ms: u64) -> StoredKeys {
        let signing = SigningKey::from_bytes(seed);
        let secret = StaticSecret::from(*scalar);
        let encryption_public = b64::encode_url(XPublicKey::from(&secret).as_bytes());
        let sig = signing.sign(&encryption_sig_message(&encryption_public));

        let mut identity_der = Zeroizing::new(Vec::with_capacity(48));
        identity_der.extend_from_slice(&ED25519_PKCS8_PREFIX);
        identity_der.extend_from_slice(seed);
        let mut encryption_der = Zeroizing::new(Vec::with_capacity(48));
        encryption_der.extend_from_slice(&X25519_PKCS8_PREFIX);
        encryption_der.extend_from_slice(scalar);

        StoredKeys {
            version: 1,
            identity_public: b64::encode_url(signing.verifying_key().as_bytes()),
            identity_private: SecretText::new(b64::encode_std(&identity_der)),
            encryption_public,
            encryption_private: SecretText::new(b64::encode_std(&encryption_der)),
            encryption_sig: b64::encode_url(&sig.to_bytes()),
            created_at: now_ms,
        }
    }

    /// `publicIdentityOf(keys)`.
    pub fn public_identity(&self) -> PublicIdentity {
        PublicIdentity {
            identity: self.identity_public.clone(),
            encryption: self.encryption_public.clone(),
            encryption_sig: self.encryption_sig.clone(),
        }
    }

    /// The strict schema over a parsed JSON value: exactly the seven keys,
    /// `version` the number 1, non-empty strings, `createdAt` a positive safe
    /// integer. A string holding a lone surrogate is kept with U+FFFD in its
    /// place (every key field is decoded leniently, which skips either).
    pub fn from_json(doc: &Doc) -> Result<StoredKeys, KeyError> {
        const FIELDS: [&str; 7] = [
            "version",
            "identityPublic",
            "identityPrivate",
            "encryptionPublic",
            "encryptionPrivate",
            "encryptionSig",
            "createdAt",
        ];
        let root = doc.root();
        let Node::Object(members) = doc.node(root) else {
            return Err(KeyError::Schema("expected an object"));
        };
        if members.iter().any(|(k, _)| !FIELDS.iter().any(|f| k.is(f))) {
            return Err(KeyError::Schema("unknown key"));
        }
        let field = |name: &str| doc.get(root, name).map(|id| doc.node(id));
        let text = |name: &'static str| -> Result<String, KeyError> {
            match field(name) {
                Some(Node::String(s)) if !s.as_str().is_empty() => Ok(s.as_str().to_string()),
                _ => Err(KeyError::Schema(name)),
            }
        };
        match field("version") {
            Some(Node::Number(n)) if *n == 1.0 => {}
            _ => return Err(KeyError::Schema("version")),
        }
        let created_at = match field("createdAt") {
            Some(Node::Number(n)) if is_positive_safe_integer(*n) => *n as u64,
            _ => return Err(KeyError::Schema("createdAt")),
        };
        Ok(StoredKeys {
            version: 1,
            identity_public: text("identityPublic")?,
            identity_private: text("identityPrivate")?.into(),
            encryption_public: text("encryptionPublic")?,
            encryption_private: text("encryptionPrivate")?.into(),
            encryption_sig: text("encryptionSig")?,
            created_at,
        })
    }

    /// Compact JSON in field order, byte-identical to `JSON.stringify(keys)`.
    /// Written into room reserved up front, so no partial copy of the private
    /// keys is left in a buffer outgrown on the way (the caller wipes the
    /// answer when it is done with it).
    pub fn to_json(&self) -> String {
        let fields = [
            &self.identity_public,
            &*self.identity_private,
            &self.encryption_public,
            &*self.encryption_private,
            &self.encryption_sig,
        ];
        // Every character escaped as `\uXXXX` at worst, plus the keys.
        let room = 160 + fields.iter().map(|f| 6 * f.len()).sum::<usize>();
        let mut out = Vec::with_capacity(room);
        // Serialising plain strings and integers into a Vec cannot fail.
        if serde_json::to_writer(&mut out, self).is_err() {
            out.clear();
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl PublicIdentity {
    /// Compact JSON in field order, byte-identical to `JSON.stringify`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The 48-byte PKCS#8 shape: fixed header, then 32 secret bytes.
fn pkcs8_secret(text: &str, prefix: &[u8; 16]) -> Option<Zeroizing<[u8; 32]>> {
    let der = Zeroizing::new(b64::decode_lenient(text));
    if der.len() != 48 || der.get(..16)? != prefix {
        return None;
    }
    let mut secret = Zeroizing::new([0u8; 32]);
    secret.copy_from_slice(der.get(16..48)?);
    Some(secret)
}

/// Read `identityPrivate`.
pub fn parse_signing_key(identity_private: &str) -> Result<SigningKey, KeyError> {
    let seed =
        pkcs8_secret(identity_private, &ED25519_PKCS8_PREFIX).ok_or(KeyError::IdentityPrivate)?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Read `encryptionPrivate`.
pub fn parse_encryption_secret(encryption_private: &str) -> Result<StaticSecret, KeyError> {
    let scalar = pkcs8_secret(encryption_private, &X25519_PKCS8_PREFIX)
        .ok_or(KeyError::EncryptionPrivate)?;
    Ok(StaticSecret::from(*scalar))
}

/// An Ed25519 public key from its base64url text (lenient); `None` unless it
/// decodes to 32 bytes that are a valid point.
pub fn verifying_key(identity_public: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = b64::decode_lenient(identity_public).try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// A signature from its base64url text (lenient); `None` unless 64 bytes.
pub fn signature_from_text(signature: &str) -> Option<Signature> {
    let bytes: [u8; 64] = b64::decode_lenient(signature).try_into().ok()?;
    Some(Signature::from_bytes(&bytes))
}

/// Verify `data` under a parsed key and a base64url signature text.
/// Malformed signatures are simply `false`.
pub fn verify_with_key(key: &VerifyingKey, data: &[u8], signature: &str) -> bool {
    match signature_from_text(signature) {
        // Cofactorless verification comparing the encoded R, which is what
        // OpenSSL (behind Node's `crypto.verify`) does.
        Some(sig) => key.verify(data, &sig).is_ok(),
        None => false,
    }
}

/// `verifyWith(identityPublic, data, signature)`: never fails, only `false`.
pub fn verify_with(identity_public: &str, data: &[u8], signature: &str) -> bool {
    match verifying_key(identity_public) {
        Some(key) => verify_with_key(&key, data, signature),
        None => false,
    }
}

/// The message the encryption-key signature covers: the context, a colon,
/// and the encryption key's base64url *text* as given (not its bytes).
pub fn encryption_sig_message(encryption_public_text: &str) -> Vec<u8> {
    let mut message =
        Vec::with_capacity(ENCRYPTION_KEY_CONTEXT.len() + 1 + encryption_public_text.len());
    message.extend_from_slice(ENCRYPTION_KEY_CONTEXT.as_bytes());
    message.push(b':');
    message.extend_from_slice(encryption_public_text.as_bytes());
    message
}

/// `verifyPublicIdentity`: does the identity key sign this encryption key?
pub fn verify_public_identity(identity: &PublicIdentity) -> bool {
    verify_with(
        &identity.identity,
        &encryption_sig_message(&identity.encryption),
        &identity.encryption_sig,
    )
}

/// The reference's `pair start` refusal of a device whose encryption key
/// its identity did not sign.
pub const DEVICE_UNSIGNED: &str =
    "the device's encryption key is not signed by the identity it was presented with";

/// Why a device presenting itself at `pair start` is refused, as `pair
/// start` answers it: the reference's message when the signature does not
/// verify, ours when it does but the texts are not exactly the keys (the
/// canonical unpadded base64url of 32 bytes each, 64 for the signature: what
/// every daemon writes; the reference decodes leniently, so a key padded
/// with junk still verified).
pub fn device_identity_refusal(identity: &PublicIdentity) -> Option<&'static str> {
    if !verify_public_identity(identity) {
        return Some(DEVICE_UNSIGNED);
    }
    let exact = |text: &str, len: usize| {
        b64::decode_canonical_url(text).is_some_and(|bytes| bytes.len() == len)
    };
    let exactly_keys = exact(&identity.identity, 32)
        && exact(&identity.encryption, 32)
        && exact(&identity.encryption_sig, 64);
    (!exactly_keys).then_some(
        "the device's keys are not spelled exactly: identity and encryption must each be the unpadded base64url of 32 bytes, encryptionSig of 64",
    )
}

/// Parsed key material, decoded once and reused for every operation.
pub struct KeyHandle {
    keys: StoredKeys,
    signing: SigningKey,
    encryption_secret: StaticSecret,
    /// Derived from the secret, as the reference's open does, rather than
    /// trusted from `encryptionPublic`.
    encryption_public: [u8; 32],
    /// `identityPublic` decoded (for verifying our own at-rest envelopes).
    identity_key: Option<VerifyingKey>,
    key_id: String,
}

impl KeyHandle {
    /// Parse both private keys. The public fields are not cross-checked here;
    /// see [`KeyHandle::is_consistent`].
    pub fn new(keys: StoredKeys) -> Result<KeyHandle, KeyError> {
        let signing = parse_signing_key(&keys.identity_private)?;
        let encryption_secret = parse_encryption_secret(&keys.encryption_private)?;
        let encryption_public = *XPublicKey::from(&encryption_secret).as_bytes();
        let key_id = fingerprint::key_id(&keys.identity_public);
        let identity_key = verifying_key(&keys.identity_public);
        Ok(KeyHandle {
            keys,
            signing,
            encryption_secret,
            encryption_public,
            identity_key,
            key_id,
        })
    }

    pub fn keys(&self) -> &StoredKeys {
        &self.keys
    }

    /// A 32-byte key for `purpose`, derived from the encryption secret
    /// (BLAKE2b-256 of the purpose and the secret): the same for every
    /// process holding these keys, and revealing nothing of them.
    pub fn derived_key(&self, purpose: &str) -> [u8; 32] {
        use blake2::digest::consts::U32;
        use blake2::{Blake2b, Digest};
        let mut hasher = Blake2b::<U32>::new();
        hasher.update((purpose.len() as u64).to_le_bytes());
        hasher.update(purpose.as_bytes());
        hasher.update(self.encryption_secret.to_bytes());
        hasher.finalize().into()
    }

    /// `keyId(identityPublic)` of these keys.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub fn public_identity(&self) -> PublicIdentity {
        self.keys.public_identity()
    }

    /// `verifyPublicIdentity(publicIdentityOf(keys))`.
    pub fn is_consistent(&self) -> bool {
        verify_public_identity(&self.keys.public_identity())
    }

    /// Ed25519 signature over `data`, base64url.
    pub fn sign_text(&self, data: &[u8]) -> String {
        b64::encode_url(&self.signing.sign(data).to_bytes())
    }

    pub fn signing_key(&self) -> &SigningKey {
        &self.signing
    }

    /// `identityPublic` as a key, if it is one.
    pub fn identity_key(&self) -> Option<&VerifyingKey> {
        self.identity_key.as_ref()
    }

    pub fn encryption_secret(&self) -> &StaticSecret {
        &self.encryption_secret
    }

    pub fn encryption_public(&self) -> &[u8; 32] {
        &self.encryption_public
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json;

    #[test]
    fn a_device_identity_must_be_spelled_exactly() {
        // Fixed keys: the identity's text holds `-` or `_`, so the standard
        // alphabet spells it differently.
        let id = (1u8..)
            .map(|seed| StoredKeys::from_secrets(&[seed; 32], &[seed; 32], 1).public_identity())
            .find(|p| p.identity.contains(['-', '_']))
            .unwrap_or_else(|| unreachable!());
        assert_eq!(device_identity_refusal(&id), None);
        let with = |change: &dyn Fn(&mut PublicIdentity)| {
            let mut changed = id.clone();
            change(&mut changed);
            changed
        };
        for (name, bad) in [
            (
                "junk after the identity",
                with(&|p| p.identity.push_str("!!!!")),
            ),
            (
                "junk inside the identity",
                with(&|p| p.identity.insert(5, '*')),
            ),
            ("padded identity", with(&|p| p.identity.push('='))),
            (
                "standard alphabet",
                with(&|p| {
                    p.identity = b64::encode_std(&b64::decode_lenient(&p.identity))
                        .trim_end_matches('=')
                        .into()
                }),
            ),
            (
                "junk after the encryption key",
                with(&|p| p.encryption.push('\u{1f600}')),
            ),
            (
                "junk after the signature",
                with(&|p| p.encryption_sig.push_str("AAAA")),
            ),
        ] {
            // Only where a lenient decode still yields the same key does the
            // reference's rule accept it; ours never does.
            assert!(device_identity_refusal(&bad).is_some(), "{name}");
        }
        // The reference's lenient rule accepts junk after the identity.
        assert!(verify_public_identity(&with(&|p| p
            .identity
            .push_str("!!!!"))));
    }

    #[test]
    fn private_key_text_is_never_shown_by_debug() {
        let keys = StoredKeys::generate(1_767_225_600_000);
        let shown = format!("{keys:?}");
        assert!(!shown.contains(&*keys.identity_private), "{shown}");
        assert!(!shown.contains(&*keys.encryption_private), "{shown}");
        assert!(shown.contains(&keys.identity_public));
        // Still serialised in full: formatSiteKeys writes it.
        assert!(keys.to_json().contains(&*keys.identity_private));
    }

    #[test]
    fn generated_keys_are_consistent_and_well_formed() {
        let keys = StoredKeys::generate(1_767_225_600_000);
        assert_eq!(keys.identity_public.len(), 43);
        assert_eq!(keys.identity_private.len(), 64);
        assert!(keys.identity_private.starts_with("MC4CAQAwBQYDK2VwBCIEI"));
        assert!(keys.encryption_private.starts_with("MC4CAQAwBQYDK2VuBCIEI"));
        assert_eq!(keys.encryption_sig.len(), 86);
        assert!(verify_public_identity(&keys.public_identity()));
        let handle = KeyHandle::new(keys.clone()).map_err(|e| e.to_string());
        assert!(handle.as_ref().is_ok_and(|h| h.is_consistent()));
        assert_ne!(
            StoredKeys::generate(1).identity_public,
            keys.identity_public
        );
    }

    #[test]
    fn json_round_trip_is_strict() {
        let keys = StoredKeys::from_secrets(&[7; 32], &[9; 32], 42);
        let text = keys.to_json();
        assert!(text.starts_with("{\"version\":1,\"identityPublic\":"));
        let parsed = json::parse(&text)
            .map_err(|e| e.to_string())
            .and_then(|v| StoredKeys::from_json(&v).map_err(|e| e.to_string()));
        assert_eq!(parsed, Ok(keys.clone()));
        let extra = text.replacen('{', "{\"x\":1,", 1);
        let from = |t: &str| {
            json::parse(t)
                .map_err(|_| KeyError::Schema("json"))
                .and_then(|d| StoredKeys::from_json(&d))
        };
        assert!(from(&extra).is_err());
        for (f, to) in [
            ("\"createdAt\":42", "\"createdAt\":4.5"),
            ("\"version\":1", "\"version\":2"),
            ("\"createdAt\":42", "\"createdAt\":0"),
        ] {
            assert!(from(&text.replace(f, to)).is_err(), "{to}");
        }
        let exp = text.replace("\"createdAt\":42", "\"createdAt\":4.2e1");
        assert_eq!(from(&exp).map(|k| k.created_at), Ok(42));
    }

    #[test]
    fn malformed_private_keys_are_typed_errors() {
        let mut keys = StoredKeys::from_secrets(&[1; 32], &[2; 32], 1);
        keys.identity_private = "not a key".into();
        assert_eq!(
            KeyHandle::new(keys.clone()).err(),
            Some(KeyError::IdentityPrivate)
        );
        keys.identity_private = StoredKeys::from_secrets(&[1; 32], &[2; 32], 1).identity_private;
        keys.encryption_private = keys.identity_private.clone();
        assert_eq!(
            KeyHandle::new(keys).err(),
            Some(KeyError::EncryptionPrivate)
        );
    }

    #[test]
    fn verify_never_panics_on_garbage() {
        assert!(!verify_with("", b"x", ""));
        assert!(!verify_with("nope", b"x", "nope"));
        let keys = StoredKeys::from_secrets(&[3; 32], &[4; 32], 1);
        let mut id = keys.public_identity();
        id.encryption.push('=');
        assert!(!verify_public_identity(&id));
    }
}
