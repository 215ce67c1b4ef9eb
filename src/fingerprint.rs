//! Key ids: the human-comparable fingerprint of an identity key.
//!
//! `BYOLLM-` followed by the first 120 bits of SHA-256 over the (leniently
//! decoded) identity bytes, written in Crockford base32 as six groups of four.
//! No length check: whatever bytes the lenient decoder yields are hashed, so
//! `"abc"` and `"!!!!"` both have fingerprints, exactly as in the reference.

use sha2::{Digest, Sha256};

use crate::b64;

/// Crockford base32: no I, L, O or U.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Bytes of digest kept: 15 bytes = 120 bits = 24 symbols of 5 bits.
const KEPT_BYTES: usize = 15;

/// The fingerprint of raw identity bytes.
pub fn fingerprint_bytes(identity: &[u8]) -> String {
    let digest = Sha256::digest(identity);
    // 120 bits fit in a u128; read them big-endian and cut 5 bits at a time.
    let mut value: u128 = 0;
    for &byte in digest.iter().take(KEPT_BYTES) {
        value = (value << 8) | u128::from(byte);
    }
    let mut out = String::with_capacity(36);
    out.push_str("BYOLLM");
    for symbol in 0..24u32 {
        if symbol % 4 == 0 {
            out.push('-');
        }
        let shift = 115 - 5 * symbol;
        let index = ((value >> shift) & 31) as usize;
        out.push(ALPHABET[index] as char);
    }
    out
}

/// `keyId(identityPublic)` = `fingerprint(identityPublic)`: the base64url text
/// is decoded leniently first.
pub fn key_id(identity_public: &str) -> String {
    fingerprint_bytes(&b64::decode_lenient(identity_public))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_hashes_zero_bytes() {
        assert_eq!(key_id(""), "BYOLLM-WERC-8GMR-ZGE1-96QV-YK49-JVXS");
        assert_eq!(key_id("!!!!"), key_id(""));
    }

    #[test]
    fn shape() {
        let id = key_id("Q2P-JjbFOWxxaBF6axF_DKGNfBmZOcuZZvbcOTKgM_8");
        assert_eq!(id, "BYOLLM-EA1K-Z4XJ-89JV-57J7-CG5C-KY87");
        // "BYOLLM" + six groups of "-XXXX".
        assert_eq!(id.len(), 36);
    }
}
