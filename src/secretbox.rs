//! XSalsa20-Poly1305 open and seal in place (libsodium's
//! `crypto_secretbox_open_detached` / `crypto_secretbox_detached`), from
//! `crypto_secretbox`.

use crypto_secretbox::aead::{AeadInPlace, KeyInit};
use crypto_secretbox::XSalsa20Poly1305;

/// Decrypt `message` in place when `tag` authenticates it under `key` and
/// `nonce`; `false` (and `message` untouched) otherwise.
pub(crate) fn open_in_place(
    key: &[u8; 32],
    nonce: &[u8; 24],
    message: &mut [u8],
    tag: &[u8; 16],
) -> bool {
    XSalsa20Poly1305::new(key.into())
        .decrypt_in_place_detached(nonce.into(), b"", message, tag.into())
        .is_ok()
}

/// Encrypt `message` in place under `key` and `nonce`; the Poly1305 tag
/// (`crypto_secretbox_detached`).
pub(crate) fn seal_in_place(key: &[u8; 32], nonce: &[u8; 24], message: &mut [u8]) -> [u8; 16] {
    // Encryption with an empty AAD cannot fail for any length a slice can have.
    XSalsa20Poly1305::new(key.into())
        .encrypt_in_place_detached(nonce.into(), b"", message)
        .map(Into::into)
        .unwrap_or([0u8; 16])
}

#[cfg(test)]
mod tests {
    use super::open_in_place;
    use crypto_secretbox::aead::{AeadInPlace, KeyInit};
    use crypto_secretbox::XSalsa20Poly1305;

    /// Seeded xorshift, so the inputs are the same on every run.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    fn fill(state: &mut u64, out: &mut [u8]) {
        for b in out {
            *b = next(state) as u8;
        }
    }

    #[test]
    fn refuses_any_altered_byte_and_leaves_the_message_alone() {
        let mut state = 0x2545_f491_4f6c_dd1d;
        let (mut key, mut nonce) = ([0u8; 32], [0u8; 24]);
        fill(&mut state, &mut key);
        fill(&mut state, &mut nonce);
        let mut sealed = vec![0u8; 300];
        fill(&mut state, &mut sealed);
        let tag: [u8; 16] = XSalsa20Poly1305::new(&key.into())
            .encrypt_in_place_detached(&nonce.into(), b"", &mut sealed)
            .expect("seal")
            .into();
        for at in [0, 1, 31, 32, 223, 224, 255, 256, 299] {
            let mut altered = sealed.clone();
            altered[at] ^= 0x40;
            let before = altered.clone();
            assert!(
                !open_in_place(&key, &nonce, &mut altered, &tag),
                "byte {at}"
            );
            assert_eq!(altered, before);
        }
        for at in 0..16 {
            let mut bad = tag;
            bad[at] ^= 1;
            assert!(!open_in_place(&key, &nonce, &mut sealed.clone(), &bad));
        }
        let mut other = nonce;
        other[23] ^= 1;
        assert!(!open_in_place(&key, &other, &mut sealed.clone(), &tag));
    }
}
