//! Request signatures: Ed25519 over five canonical lines, with a freshness
//! window checked before the signature.

use std::sync::{Mutex, OnceLock};

use ed25519_dalek::VerifyingKey;
use hashlink::LruCache;
use sha2::{Digest, Sha256};

use crate::b64;
use crate::json;
use crate::keys::{self, KeyHandle};
use crate::vocabulary::vocabulary;

/// How far `issuedAt` may be from the verifier's clock, either way (inclusive).
pub const MAX_CLOCK_SKEW_MS: f64 = 120_000.0;

/// First line of the canonical request.
pub const CANONICAL_PREFIX: &str = "byollm/v1/request";

/// The signed triple a request carries.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSignature {
    pub runner_id: String,
    pub issued_at: f64,
    pub signature: String,
}

vocabulary! {
    /// Why a signed request was refused.
    pub SignatureFailure {
        Stale => "stale",
        BadSignature => "bad-signature",
    }
}

/// The canonical bytes: prefix, endpoint, runner id, `String(issuedAt)`, and
/// the lowercase hex SHA-256 of the body's UTF-8, joined by `\n`.
pub fn canonical_request(endpoint: &str, runner_id: &str, issued_at: f64, body: &str) -> String {
    let digest = b64::hex_lower(&Sha256::digest(body.as_bytes()));
    let issued = json::js_number_to_string(issued_at);
    let mut out = String::with_capacity(
        CANONICAL_PREFIX.len() + endpoint.len() + runner_id.len() + issued.len() + 68,
    );
    for (i, part) in [CANONICAL_PREFIX, endpoint, runner_id, &issued, &digest]
        .iter()
        .enumerate()
    {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(part);
    }
    out
}

/// `signRequest(keys, {endpoint, runnerId, issuedAt, body})`.
pub fn sign_request(
    keys: &KeyHandle,
    endpoint: &str,
    runner_id: &str,
    issued_at: f64,
    body: &str,
) -> RequestSignature {
    let canonical = canonical_request(endpoint, runner_id, issued_at, body);
    RequestSignature {
        runner_id: runner_id.to_string(),
        issued_at,
        signature: keys.sign_text(canonical.as_bytes()),
    }
}

/// The site plane signs `site/<endpoint>` with the site id in the caller slot.
pub fn site_endpoint(endpoint: &str) -> String {
    format!("site/{endpoint}")
}

/// Freshness, exactly as `Math.abs(now - issuedAt) > maxSkewMs` in doubles
/// (so a NaN anywhere is *not* stale, as in the reference).
pub fn is_stale(now: f64, issued_at: f64, max_skew_ms: f64) -> bool {
    (now - issued_at).abs() > max_skew_ms
}

/// `verifyRequest`: `None` when valid. Staleness is checked first; a missing
/// or malformed key or signature is `BadSignature`.
pub fn verify_request(
    key: Option<&VerifyingKey>,
    endpoint: &str,
    body: &str,
    signature: &RequestSignature,
    now: f64,
    max_skew_ms: f64,
) -> Option<SignatureFailure> {
    if is_stale(now, signature.issued_at, max_skew_ms) {
        return Some(SignatureFailure::Stale);
    }
    let Some(key) = key else {
        return Some(SignatureFailure::BadSignature);
    };
    // Deliberate difference: the reference decodes the signature leniently
    // (junk skipped, `=` ends it, either alphabet), so altered texts of a
    // valid signature verify too. Only the canonical spelling counts here;
    // every signer on this wire writes exactly that.
    if b64::decode_canonical_url(&signature.signature).is_none_or(|bytes| bytes.len() != 64) {
        return Some(SignatureFailure::BadSignature);
    }
    let canonical = canonical_request(endpoint, &signature.runner_id, signature.issued_at, body);
    if keys::verify_with_key(key, canonical.as_bytes(), &signature.signature) {
        None
    } else {
        Some(SignatureFailure::BadSignature)
    }
}

/// Decoded identity keys by their base64url text, so a runner's pinned key is
/// not decoded (a point decompression) on every request; keys that do not
/// decode are remembered as such too. `None` when `identity_public` is not a
/// key.
pub fn pinned_key(identity_public: &str) -> Option<VerifyingKey> {
    static CACHE: OnceLock<Mutex<LruCache<String, Option<VerifyingKey>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(LruCache::new(4096)));
    // A poisoned lock only means another call panicked mid-update; decode
    // directly rather than fail this request.
    let Ok(mut cache) = cache.lock() else {
        return keys::verifying_key(identity_public);
    };
    if let Some(hit) = cache.get(identity_public) {
        return *hit;
    }
    let key = keys::verifying_key(identity_public);
    cache.insert(identity_public.to_owned(), key);
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::StoredKeys;

    fn device() -> KeyHandle {
        match KeyHandle::new(StoredKeys::from_secrets(&[11; 32], &[12; 32], 1)) {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        }
    }

    fn vectors(text: &str) -> serde_json::Value {
        serde_json::from_str(text).unwrap_or_default()
    }

    fn text(v: &serde_json::Value) -> &str {
        v.as_str().unwrap_or_default()
    }

    /// A party of `keys.fixture.json`.
    fn party(v: &serde_json::Value) -> KeyHandle {
        let keys = StoredKeys {
            version: 1,
            identity_public: text(&v["identityPublic"]).to_owned(),
            identity_private: crate::keys::SecretText::new(text(&v["identityPrivate"]).to_owned()),
            encryption_public: text(&v["encryptionPublic"]).to_owned(),
            encryption_private: crate::keys::SecretText::new(
                text(&v["encryptionPrivate"]).to_owned(),
            ),
            encryption_sig: text(&v["encryptionSig"]).to_owned(),
            created_at: v["createdAt"].as_u64().unwrap_or_default(),
        };
        KeyHandle::new(keys).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_golden_canonical_requests_and_signatures() {
        let fixture = vectors(include_str!("../tests/vectors/keys.fixture.json"));
        let v = vectors(include_str!("../tests/vectors/signatures.json"));
        let signed = v["signed"].as_array().cloned().unwrap_or_default();
        assert!(!signed.is_empty());
        for c in &signed {
            let i = &c["input"];
            let (endpoint, runner_id, body) =
                (text(&i["endpoint"]), text(&i["runnerId"]), text(&i["body"]));
            let issued_at = i["issuedAt"].as_f64().unwrap_or_default();
            let canonical = canonical_request(endpoint, runner_id, issued_at, body);
            assert_eq!(canonical, text(&c["canonicalUtf8"]), "{}", c["name"]);
            let keys = party(&fixture[text(&c["signedBy"])]);
            let sig = sign_request(&keys, endpoint, runner_id, issued_at, body);
            assert_eq!(
                sig.signature,
                text(&c["signature"]["signature"]),
                "{}",
                c["name"]
            );
        }
    }

    #[test]
    fn the_golden_public_identities() {
        let v = vectors(include_str!("../tests/vectors/keys.json"));
        let cases = v["verifyPublicIdentity"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!cases.is_empty());
        for c in &cases {
            let i = &c["input"];
            let identity = crate::keys::PublicIdentity {
                identity: text(&i["identity"]).to_owned(),
                encryption: text(&i["encryption"]).to_owned(),
                encryption_sig: text(&i["encryptionSig"]).to_owned(),
            };
            let expected = c["expected"].as_bool().unwrap_or_default();
            assert_eq!(
                keys::verify_public_identity(&identity),
                expected,
                "{}",
                c["name"]
            );
        }
        for p in v["parties"]
            .as_object()
            .into_iter()
            .flat_map(|o| o.values())
        {
            let public = party(&p["storedKeys"]).public_identity();
            assert_eq!(public.identity, text(&p["publicIdentity"]["identity"]));
            assert_eq!(
                public.encryption_sig,
                text(&p["publicIdentity"]["encryptionSig"])
            );
        }
    }

    #[test]
    fn canonical_shape() {
        let c = canonical_request("claim", "runner_1", 1_767_225_660_000.0, "");
        assert_eq!(
            c,
            "byollm/v1/request\nclaim\nrunner_1\n1767225660000\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(canonical_request("x", "r", 1.5, "").contains("\n1.5\n"));
    }

    #[test]
    fn only_the_canonical_spelling_of_a_signature_verifies() {
        let d = device();
        let key = keys::verifying_key(&d.keys().identity_public);
        let sig = sign_request(&d, "claim", "r", 1_000_000.0, "{}");
        let text = sig.signature.clone();
        assert_eq!(text.len(), 86);
        let verdict = |signature: String| {
            let s = RequestSignature {
                signature,
                ..sig.clone()
            };
            verify_request(
                key.as_ref(),
                "claim",
                "{}",
                &s,
                1_000_000.0,
                MAX_CLOCK_SKEW_MS,
            )
        };
        assert_eq!(verdict(text.clone()), None);
        // The reference accepts all of these (its decoder is lenient).
        let std_alphabet = text.replace('-', "+").replace('_', "/");
        let (head, tail) = text.split_at(20);
        // The last symbol carries 2 data bits and 4 leftover bits: flip one leftover bit.
        let mut trailing = text.clone();
        trailing.pop();
        trailing.push(match text.chars().last() {
            Some('A') => 'B',
            Some('Q') => 'R',
            Some('g') => 'h',
            _ => 'x',
        });
        for spelling in [
            format!("{text}=="),
            format!("{head}!{tail}"),
            format!("{head} {tail}"),
            format!("{text}\n"),
            trailing,
        ] {
            assert_eq!(
                verdict(spelling.clone()),
                Some(SignatureFailure::BadSignature),
                "{spelling}"
            );
        }
        if std_alphabet != text {
            assert_eq!(verdict(std_alphabet), Some(SignatureFailure::BadSignature));
        }
        assert_eq!(verdict(String::new()), Some(SignatureFailure::BadSignature));
        assert_eq!(
            verdict(text[..84].to_string()),
            Some(SignatureFailure::BadSignature)
        );
    }

    #[test]
    fn window_is_inclusive_both_ways_and_checked_first() {
        let d = device();
        let key = keys::verifying_key(&d.keys().identity_public);
        let sig = sign_request(&d, "claim", "r", 1_000_000.0, "{}");
        let v = |now: f64, k: Option<&VerifyingKey>| {
            verify_request(k, "claim", "{}", &sig, now, MAX_CLOCK_SKEW_MS)
        };
        assert_eq!(v(1_000_000.0, key.as_ref()), None);
        assert_eq!(v(1_120_000.0, key.as_ref()), None);
        assert_eq!(v(880_000.0, key.as_ref()), None);
        assert_eq!(v(1_120_001.0, key.as_ref()), Some(SignatureFailure::Stale));
        assert_eq!(v(879_999.0, key.as_ref()), Some(SignatureFailure::Stale));
        assert_eq!(v(879_999.0, None), Some(SignatureFailure::Stale));
        assert_eq!(v(1_000_000.0, None), Some(SignatureFailure::BadSignature));
        assert_eq!(
            verify_request(
                key.as_ref(),
                "release",
                "{}",
                &sig,
                1_000_000.0,
                MAX_CLOCK_SKEW_MS
            ),
            Some(SignatureFailure::BadSignature)
        );
        assert!(!is_stale(f64::NAN, 1.0, MAX_CLOCK_SKEW_MS));
    }

    #[test]
    fn pinned_key_is_the_decoded_key() {
        let d = device();
        let id = d.keys().identity_public.clone();
        for _ in 0..2 {
            assert_eq!(
                pinned_key(&id).map(|k| k.to_bytes()),
                keys::verifying_key(&id).map(|k| k.to_bytes())
            );
            assert!(pinned_key("nope").is_none());
        }
    }
}
