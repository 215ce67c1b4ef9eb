//! Spare ephemeral keys for seals to our own key (every job's payload at
//! rest): the ephemeral public key and the box key it shares with ours,
//! made on the background thread ([`crate::chores`]) so an enqueue's seal
//! skips its two X25519 multiplications. Each spare is used once, taken out
//! under the lock; the box key is zeroed when dropped. A pool refills when
//! it falls below half; an empty one (a first seal, a burst) means the seal
//! makes its own key, as without spares.

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
    use hashlink::LruCache;
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
    }

    /// Pools by own public key.
    type Pools = LruCache<[u8; 32], Pool>;

    fn pools() -> &'static Mutex<Pools> {
        static POOLS: OnceLock<Mutex<Pools>> = OnceLock::new();
        POOLS.get_or_init(|| Mutex::new(LruCache::new(MAX_KEYS)))
    }

    /// A spare for a seal to `recipient`, asking for more when low.
    pub(in super::super) fn take(recipient: &[u8; 32]) -> Option<Spare> {
        let mut guard = pools().lock().ok()?;
        if !guard.contains_key(recipient) {
            guard.insert(*recipient, Pool::default());
        }
        let pool = guard.get_mut(recipient)?;
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
            if let Some(pool) = pools.peek_mut(recipient) {
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
            let ephemeral = crate::envelope::sealed_box::random_secret(&mut rand_core::OsRng);
            let public = *x25519_dalek::PublicKey::from(&ephemeral).as_bytes();
            // A small-order key: no spares (its seals fail the same way).
            let Some(key) = crate::envelope::sealed_box::box_key_bytes(&ephemeral, recipient)
            else {
                return;
            };
            let Ok(mut pools) = pools().lock() else {
                return;
            };
            let Some(pool) = pools.peek_mut(recipient) else {
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
    pub(in super::super) mod for_tests {
        pub(in crate::envelope) fn held(recipient: &[u8; 32]) -> usize {
            super::pools()
                .lock()
                .ok()
                .and_then(|p| p.peek(recipient).map(|pool| pool.spares.len()))
                .unwrap_or(0)
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
pub(super) use made::{for_tests::held, KEEP};

#[cfg(test)]
mod tests {
    use crate::envelope::tests::*;
    use crate::envelope::*;

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn seals_to_our_own_key_take_spares_made_ahead_each_once() {
        let site = party(46);
        let own = *site.encryption_public();
        // The first seal asks for spares; wait until the thread has filled
        // the pool.
        seal_at_rest(&site, "first");
        for _ in 0..10_000 {
            if spare_keys::held(&own) == spare_keys::KEEP {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            spare_keys::held(&own),
            spare_keys::KEEP,
            "the pool never filled"
        );
        // A full pool is not refilled until it is half empty: one seal, one spare.
        seal_at_rest(&site, "second");
        assert_eq!(
            spare_keys::held(&own),
            spare_keys::KEEP - 1,
            "the seal took a spare"
        );
        let mut ephemerals = std::collections::HashSet::new();
        let cb = crypto_box::SecretKey::from(site.encryption_secret().to_bytes());
        for n in 0..(2 * spare_keys::KEEP) {
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
            own_seals::tests::forget(&sealed);
            let at_rest = context(&site, &site);
            assert_eq!(open_at_rest(&site, &env, &expected(&at_rest)), Ok(text));
        }
        // Seals to someone else never take them (once a refill, if one is
        // running, has settled).
        let mut held = spare_keys::held(&own);
        for _ in 0..500 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let now = spare_keys::held(&own);
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
            spare_keys::held(&own),
            held,
            "a seal to another key took a spare"
        );
    }
}
