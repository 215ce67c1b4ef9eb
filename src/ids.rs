//! Identifiers, pairing codes and secret hashing.

use rand_core::{OsRng, RngCore};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::b64;

/// The pairing code alphabet: 27 symbols, none of 0 1 5 I L O S U V.
pub const USER_CODE_ALPHABET: &[u8; 27] = b"ABCDEFGHJKMNPQRTWXYZ2346789";

/// Bytes at or above this are discarded: 256 - (256 mod 27), the largest
/// multiple of 27 that fits, so every symbol is equally likely.
pub const USER_CODE_REJECTION_LIMIT: u8 = 243;

/// A device code: 32 random bytes, base64url (43 characters).
pub fn generate_device_code() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    b64::encode_url(&bytes)
}

/// A pairing code `XXXX-XXXX`, drawn from `rng` 16 bytes at a time.
pub fn user_code_from_rng<R: RngCore>(rng: &mut R) -> String {
    let mut symbols: Vec<u8> = Vec::with_capacity(8);
    while symbols.len() < 8 {
        let mut batch = [0u8; 16];
        rng.fill_bytes(&mut batch);
        for byte in batch {
            if byte >= USER_CODE_REJECTION_LIMIT {
                continue;
            }
            symbols.push(USER_CODE_ALPHABET[usize::from(byte % 27)]);
            if symbols.len() == 8 {
                break;
            }
        }
    }
    let mut out = String::with_capacity(9);
    for (i, &symbol) in symbols.iter().enumerate() {
        if i == 4 {
            out.push('-');
        }
        out.push(char::from(symbol));
    }
    out
}

/// A pairing code from the OS CSPRNG.
pub fn generate_user_code() -> String {
    user_code_from_rng(&mut OsRng)
}

/// `runner_` + a lowercase UUID v4.
pub fn generate_runner_id() -> String {
    format!("runner_{}", uuid::Uuid::new_v4())
}

/// A bare lowercase UUID v4.
pub fn generate_job_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A fresh id per lease grant (UUID v4).
pub fn generate_lease_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Lowercase hex SHA-256 of the UTF-8 encoding.
pub fn hash_secret(secret: &str) -> String {
    b64::hex_lower(&Sha256::digest(secret.as_bytes()))
}

/// Compare two hex digests in constant time (for equal lengths).
///
/// Both must be non-empty, strictly hex (either case) and of an even
/// length; anything else is `false`, never equal. Deliberate difference:
/// the reference decodes leniently (stops at the first non-hex pair, drops
/// an odd last digit), so `"zz"` and `"yy"` both decode to nothing and
/// match, and where the decoded lengths differ (`"zz"` vs `"ab"`) Node's
/// `timingSafeEqual` throws a `RangeError`.
pub fn secrets_match(a: &str, b: &str) -> bool {
    match (b64::decode_hex_strict(a), b64::decode_hex_strict(b)) {
        (Some(da), Some(db)) if da.len() == db.len() => da.ct_eq(&db).into(),
        _ => false,
    }
}

/// Accept a pairing code however it was typed: Unicode uppercase (as JS
/// `toUpperCase`, so `ß` → `SS`), keep only ASCII `A-Z0-9`, and put the dash
/// back when exactly eight remain.
pub fn normalize_user_code(input: &str) -> String {
    let bare: String = input
        .to_uppercase()
        .chars()
        .filter(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        .collect();
    if bare.len() == 8 {
        format!("{}-{}", &bare[..4], &bare[4..])
    } else {
        bare
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed byte stream, to drive the rejection sampling.
    struct Script(Vec<u8>, usize);
    impl RngCore for Script {
        fn next_u32(&mut self) -> u32 {
            0
        }
        fn next_u64(&mut self) -> u64 {
            0
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            for d in dest {
                *d = self.0.get(self.1 % self.0.len()).copied().unwrap_or(0);
                self.1 += 1;
            }
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
            self.fill_bytes(dest);
            Ok(())
        }
    }

    #[test]
    fn user_code_rejects_high_bytes_and_maps_mod_27() {
        // 243..=255 are skipped; 0 → 'A', 26 → '9', 27 → 'A', 242 → alphabet[242 % 27 = 26].
        let mut rng = Script(vec![243, 255, 0, 26, 27, 242, 1, 2, 3, 4], 0);
        assert_eq!(user_code_from_rng(&mut rng), "A9A9-BCDE");
        // Needs more than one batch of 16 when most bytes are rejected.
        let mut bytes = vec![250u8; 15];
        bytes.push(5);
        let mut rng = Script(bytes, 0);
        assert_eq!(user_code_from_rng(&mut rng), "FFFF-FFFF");
    }

    #[test]
    fn generated_ids_have_their_shapes() {
        let code = generate_user_code();
        assert_eq!(code.len(), 9);
        assert!(code.chars().enumerate().all(|(i, c)| if i == 4 {
            c == '-'
        } else {
            USER_CODE_ALPHABET.contains(&(c as u8))
        }));
        assert_eq!(generate_device_code().len(), 43);
        let runner = generate_runner_id();
        assert!(runner.starts_with("runner_") && runner.len() == 43);
        let job = generate_job_id();
        assert_eq!(job.len(), 36);
        assert_eq!(job.as_bytes()[14], b'4');
        assert_eq!(job, job.to_lowercase());
        assert_ne!(generate_lease_id(), generate_lease_id());
    }

    #[test]
    fn secrets_match_semantics() {
        let h = hash_secret("abc");
        assert!(secrets_match(&h, &h));
        assert!(secrets_match(&h, &h.to_uppercase()));
        assert!(!secrets_match(&h, &hash_secret("abd")));
        assert!(!secrets_match(&h, &h[..62]));
        // Malformed input is never equal (the reference matches these).
        assert!(!secrets_match("abc", "abd"));
        assert!(!secrets_match("abc", "abc"));
        assert!(!secrets_match("zz", "yy"));
        assert!(!secrets_match("zz", "zz"));
        assert!(!secrets_match("", ""));
        assert!(!secrets_match("ab\u{e9}", "ab\u{e9}"));
        // Node throws here; we answer false.
        assert!(!secrets_match("zz", "ab"));
    }

    #[test]
    fn normalize() {
        assert_eq!(normalize_user_code(" ab cd ef gh "), "ABCD-EFGH");
        assert_eq!(normalize_user_code("ßbc-defg"), "SSBC-DEFG");
        assert_eq!(normalize_user_code("1234-567"), "1234567");
        assert_eq!(normalize_user_code("ＡＢＣＤ-ＥＦＧＨ"), "");
    }
}
