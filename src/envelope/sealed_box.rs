//! The sealed box: libsodium's `crypto_box_seal` and `crypto_box_seal_open`.
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
use rand_core::{CryptoRng, RngCore};
use salsa20::hsalsa;
use x25519_dalek::{PublicKey as XPublicKey, StaticSecret};
use zeroize::Zeroizing;

/// Ephemeral public key plus Poly1305 tag.
pub const SEAL_OVERHEAD: usize = 48;

/// BLAKE2b-192 over `epk ‖ recipient pk`: the sealed-box nonce.
pub(super) fn seal_nonce(ephemeral_public: &[u8; 32], recipient_public: &[u8; 32]) -> Nonce {
    let mut hasher = Blake2b::<U24>::new();
    hasher.update(ephemeral_public);
    hasher.update(recipient_public);
    hasher.finalize()
}

/// X25519 then HSalsa20 (`crypto_box_beforenm`), refusing an all-zero shared
/// secret like libsodium does; the key `crate::secretbox` takes.
pub(super) fn box_key_bytes(
    secret: &StaticSecret,
    their_public: &[u8; 32],
) -> Option<Zeroizing<[u8; 32]>> {
    #[cfg(not(edge))]
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

/// X25519 computed on the Edwards form of the point: curve25519-dalek runs
/// that multiplication on its vector backends (AVX-512 IFMA, else AVX2) when
/// the CPU has them, which the Montgomery ladder cannot use (≈ 13 µs with
/// IFMA and 22 with AVX2, against the ladder's 51). Constant time in the
/// secret; the point is public.
///
/// Why it equals X25519: the ladder's answer is the u-coordinate of
/// `clamp(k)·P` for either point P with that u (a u on the curve's twist
/// has no Edwards point: `None`, and the ladder runs). The clamped scalar is
/// used unreduced, a multiple of the cofactor, so a small-order component of
/// P vanishes just as in the ladder, and the identity maps back to u = 0.
#[cfg(not(edge))]
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

/// `crypto_box_seal` with a given ephemeral secret (for known answers; real
/// seals draw a fresh one). `None` when the recipient key is of small order.
pub fn seal_box_with_ephemeral(
    ephemeral: &StaticSecret,
    recipient_public: &[u8; 32],
    message: &[u8],
) -> Option<Vec<u8>> {
    seal_box_keyed(ephemeral, recipient_public, message).map(|(sealed, _)| sealed)
}

/// [`seal_box_with_ephemeral`], also giving the box key (for [`super::own_seals`]).
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
pub(super) fn seal_box_keyed_into(
    ephemeral: &StaticSecret,
    recipient_public: &[u8; 32],
    message: &[u8],
    out: &mut Vec<u8>,
) -> Option<Zeroizing<[u8; 32]>> {
    let ephemeral_public = *XPublicKey::from(ephemeral).as_bytes();
    let key = box_key_bytes(ephemeral, recipient_public)?;
    seal_box_with_key_into(&ephemeral_public, key, recipient_public, message, out)
}

/// The sealed box of `message` under an ephemeral public key and the box
/// key it shares with the recipient, into `out` (cleared first).
pub(super) fn seal_box_with_key_into(
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
    // Through crate::secretbox, as open does.
    let tag = crate::secretbox::seal_in_place(&key, &nonce, out.get_mut(SEAL_OVERHEAD..)?);
    out.get_mut(32..SEAL_OVERHEAD)?.copy_from_slice(&tag);
    Some(key)
}

/// A fresh X25519 secret from `rng` (32 random bytes; clamping happens when
/// it is used). Our RNG is rand_core 0.6's, x25519-dalek 3 takes 0.10's, so
/// the bytes are drawn here rather than through `random_from_rng`.
pub(super) fn random_secret<R: RngCore + CryptoRng>(rng: &mut R) -> StaticSecret {
    let mut bytes = Zeroizing::new([0u8; 32]);
    rng.fill_bytes(bytes.as_mut());
    StaticSecret::from(*bytes)
}

/// `crypto_box_seal_open` decrypting inside `sealed`; the plaintext is the
/// returned slice of it.
pub(super) fn open_box_in_place<'a>(
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
pub(super) fn open_box_with_key<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::tests::party;
    use crypto_secretbox::aead::{AeadInPlace, KeyInit};
    use crypto_secretbox::XSalsa20Poly1305;
    use rand_core::OsRng;

    /// `crypto_box_seal` with a fresh ephemeral key.
    fn seal_box(rng: &mut OsRng, recipient_public: &[u8; 32], message: &[u8]) -> Option<Vec<u8>> {
        seal_box_with_ephemeral(&random_secret(rng), recipient_public, message)
    }

    /// `crypto_box_seal_open` through the open path's in-place decryption.
    fn open_box(secret: &StaticSecret, own_public: &[u8; 32], sealed: &[u8]) -> Option<Vec<u8>> {
        let mut sealed = sealed.to_vec();
        open_box_in_place(secret, own_public, &mut sealed).map(<[u8]>::to_vec)
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
    #[cfg(not(edge))]
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

    #[cfg(not(edge))]
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
}
