//! Envelopes this process sealed to its own key (a job's payload at rest),
//! remembered by ephemeral public key with a digest of the whole sealed box,
//! the box key, and the signer. Opening one of them again (the fetch that
//! reseals a job for its device, usually moments after the enqueue) needs
//! neither the X25519 multiplication nor the Ed25519 verification: the bytes
//! are, digest for digest, the ones sealed here, so what they say and who
//! signed it is already known. Anything else (another ciphertext under a
//! remembered ephemeral key, another recipient, another expected signer, an
//! envelope from before a restart or evicted from the bounded table) takes
//! the full open. The digest, not the box's tag alone, is what allows
//! skipping the signature: whoever holds the site's X25519 secret could make
//! a box under a remembered key, but not these bytes.

use blake2::digest::consts::U32;
use blake2::{Blake2b, Digest};
use hashlink::LruCache;
use std::sync::{Mutex, OnceLock};
use zeroize::Zeroizing;

/// Envelopes remembered at once (≈ 200 bytes each with the table's own); the
/// least recently used goes first.
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

/// By ephemeral public key.
type Table = LruCache<[u8; 32], Entry>;

fn table() -> &'static Mutex<Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(LruCache::new(CAPACITY)))
}

/// A sealed box's ephemeral public key: its first 32 bytes.
fn ephemeral_of(sealed: &[u8]) -> Option<[u8; 32]> {
    sealed.get(..32)?.try_into().ok()
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
    let Some(ephemeral) = ephemeral_of(sealed) else {
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
    table.insert(ephemeral, entry);
}

/// The box key of `sealed` if these exact bytes were sealed here to
/// `recipient` and signed by `signer`.
pub(super) fn recall(
    sealed: &[u8],
    recipient: &[u8; 32],
    signer: &[u8; 32],
) -> Option<Zeroizing<[u8; 32]>> {
    let ephemeral = ephemeral_of(sealed)?;
    let key = {
        let mut table = table().lock().ok()?;
        let entry = table.get(&ephemeral)?;
        if entry.recipient != *recipient || entry.signer != *signer {
            return None;
        }
        (entry.digest, entry.key.clone())
    };
    // Hashed outside the lock (a megabyte payload takes a millisecond).
    (digest(sealed) == key.0).then_some(key.1)
}

#[cfg(test)]
pub(super) mod tests {
    use super::{ephemeral_of, table};
    use crate::envelope::sealed_box::{box_key_bytes, seal_nonce};
    use crate::envelope::signed::{inner_json, signed_body};
    use crate::envelope::tests::*;
    use crate::envelope::*;

    /// Drop `sealed` from the table (to open it the long way).
    pub(in crate::envelope) fn forget(sealed: &[u8]) {
        if let (Some(ephemeral), Ok(mut t)) = (ephemeral_of(sealed), table().lock()) {
            t.remove(&ephemeral);
        }
    }

    pub(in crate::envelope) fn holds(sealed: &[u8]) -> bool {
        ephemeral_of(sealed).is_some_and(|e| table().lock().is_ok_and(|t| t.contains_key(&e)))
    }

    #[cfg(not(edge))]
    #[test]
    fn own_seals_are_remembered_and_open_as_before() {
        let site = party(40);
        let device = party(41);
        let at_rest = context(&site, &site);
        let env = seal_at_rest(&site, "payload");
        assert!(holds(&sealed_bytes(&env)));
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
        assert!(!holds(&sealed_bytes(&to_device)));
    }

    #[cfg(not(edge))]
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

    #[cfg(not(edge))]
    #[test]
    fn large_own_seals_are_not_remembered_and_open_the_long_way() {
        let site = party(45);
        let at_rest = context(&site, &site);
        let text = "p".repeat(own_seals::REMEMBER_BELOW);
        let env = seal_at_rest(&site, &text);
        assert!(!holds(&sealed_bytes(&env)));
        assert_eq!(
            open_at_rest(&site, &env, &expected(&at_rest)),
            Ok(text.clone())
        );
        // Just under the size: remembered.
        let small = "p".repeat(own_seals::REMEMBER_BELOW / 2);
        let env = seal_at_rest(&site, &small);
        assert!(holds(&sealed_bytes(&env)));
    }

    #[cfg(not(edge))]
    #[test]
    fn own_seals_forget_the_oldest_beyond_capacity() {
        let site = party(44);
        let first = seal_at_rest(&site, "x");
        for _ in 0..own_seals::CAPACITY {
            seal_at_rest(&site, "y");
        }
        assert!(!holds(&sealed_bytes(&first)), "the oldest was evicted");
        // Still opens, the long way.
        let at_rest = context(&site, &site);
        assert_eq!(
            open_at_rest(&site, &first, &expected(&at_rest)),
            Ok("x".into())
        );
    }
}
