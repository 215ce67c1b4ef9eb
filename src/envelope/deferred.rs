//! A job payload's at-rest seal, made later than the enqueue that asks for
//! it, and exactly once.
//!
//! An enqueue on our in-memory store validates the payload at once (its
//! errors are the caller's) but need not sign and seal it to the site's own
//! key on the event loop: nothing reads the at-rest envelope before the job
//! is read back or claimed, and the store is in the same process as the
//! site's secret keys. So the store keeps a [`DeferredSeal`]; the background
//! thread seals it when it next runs ([`crate::chores::run_quietly`]), and
//! whoever needs the envelope before that (a record read, the general fetch
//! path) seals it right then. Either way there is one envelope per job: the
//! first seal is kept and the plaintext is dropped (zeroed) once it is made.
//!
//! Until then, a device's reseal is made from the plaintext directly (sign
//! for the device, seal to it), which gives the same envelope as opening
//! the at-rest one first: the open of our own fresh seal cannot fail, and its
//! plaintext is the text kept here.
//!
//! Only for seals to the site's own key as derived from its secret (so the
//! seal cannot fail), see [`DeferredSeal::new`].

use std::sync::{Arc, Mutex, OnceLock};

use zeroize::Zeroizing;

use super::{Context, SealError, SealedEnvelope, Text};
use crate::keys::KeyHandle;

/// The plaintext, shared with a reseal that is using it; zeroed when the
/// last holder lets go.
pub type Plaintext = Arc<Zeroizing<String>>;

/// A payload's at-rest envelope, sealed when first needed.
pub struct DeferredSeal {
    site: Arc<KeyHandle>,
    context: Context,
    /// The payload text until the envelope is made.
    plaintext: Mutex<Option<Plaintext>>,
    sealed: OnceLock<Result<SealedEnvelope, SealError>>,
    /// The length of the envelope's ciphertext text, known before it exists.
    ciphertext_chars: usize,
}

impl DeferredSeal {
    /// The seal of `plaintext` from `site` to its own key with `context`,
    /// to be made later. Refused (both handed back) unless `site`'s stored
    /// public keys are the ones its secrets give: the caller seals now then,
    /// and what that gives, an error or an envelope that will not open,
    /// stays as it was.
    pub fn new(
        site: &Arc<KeyHandle>,
        plaintext: String,
        context: Context,
    ) -> Result<Arc<Self>, Box<(String, Context)>> {
        let own = super::recipient_bytes(&site.keys().encryption_public)
            .is_ok_and(|recipient| recipient == *site.encryption_public())
            && site.identity_key() == Some(&site.signing_key().verifying_key());
        if !own {
            return Err(Box::new((plaintext, context)));
        }
        let ciphertext_chars = super::sealed_ciphertext_chars(&context, Text::Utf8(&plaintext));
        Ok(Arc::new(DeferredSeal {
            site: Arc::clone(site),
            context,
            plaintext: Mutex::new(Some(Arc::new(Zeroizing::new(plaintext)))),
            sealed: OnceLock::new(),
            ciphertext_chars,
        }))
    }

    /// The envelope, sealed now if nobody has yet. An error only if the
    /// seal failed, which a key that passed [`DeferredSeal::new`] does not.
    pub fn sealed(&self) -> Result<&SealedEnvelope, &SealError> {
        self.sealed
            .get_or_init(|| {
                // Unreachable: the text goes only once a seal is kept, and
                // get_or_init runs this at most once.
                let Some(text) = self.plaintext() else {
                    return Err(SealError::RecipientKeyWeak);
                };
                let sealed = super::seal_with_handle(
                    Text::Utf8(&text),
                    &self.site,
                    &self.site.keys().encryption_public,
                    &self.context,
                );
                if sealed.is_ok() {
                    if let Ok(mut kept) = self.plaintext.lock() {
                        *kept = None;
                    }
                }
                sealed
            })
            .as_ref()
    }

    /// The envelope if it has been made (without making it).
    pub fn made(&self) -> Option<&SealedEnvelope> {
        self.sealed.get()?.as_ref().ok()
    }

    /// Seal now if nobody has yet (the background thread's chore).
    pub fn seal_now(&self) {
        let _ = self.sealed();
    }

    /// The plaintext, while the envelope has not been made.
    pub fn plaintext(&self) -> Option<Plaintext> {
        self.plaintext.lock().ok()?.clone()
    }

    pub fn is_sealed(&self) -> bool {
        self.sealed.get().is_some()
    }

    /// The keys it is sealed from and to.
    pub fn site(&self) -> &Arc<KeyHandle> {
        &self.site
    }

    /// What the envelope binds (job, keys, direction, deadline).
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The length of the envelope's ciphertext (base64url text), sealed or not.
    pub fn ciphertext_chars(&self) -> usize {
        self.ciphertext_chars
    }
}

impl std::fmt::Debug for DeferredSeal {
    // Never the plaintext.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredSeal")
            .field("job_id", &self.context.job_id)
            .field("sealed", &self.is_sealed())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{self, Expected};
    use crate::keys::{KeyHandle, StoredKeys};

    fn handle(seed: u8) -> Arc<KeyHandle> {
        let stored = StoredKeys::from_secrets(&[seed; 32], &[seed.wrapping_add(1); 32], 1);
        Arc::new(KeyHandle::new(stored).expect("keys from secrets parse"))
    }

    fn site() -> Arc<KeyHandle> {
        handle(7)
    }

    fn context(site: &KeyHandle, job: &str) -> Context {
        Context {
            job_id: job.into(),
            sender_key_id: site.key_id().into(),
            recipient_key_id: site.key_id().into(),
            deadline_at: 1_767_312_000_000.0,
            direction: "payload".into(),
        }
    }

    fn opens_to(site: &KeyHandle, sealed: &SealedEnvelope, job: &str) -> String {
        let expected = Expected {
            job_id: job.into(),
            sender_key_id: site.key_id().into(),
            recipient_key_id: site.key_id().into(),
            direction: "payload".into(),
        };
        match envelope::open_with_handle(sealed, site, site.identity_key(), &expected) {
            Ok(text) => text.as_str().to_owned(),
            Err(e) => panic!("the deferred seal does not open: {e:?}"),
        }
    }

    #[test]
    fn sealed_once_opens_to_the_plaintext_and_drops_it() {
        let site = site();
        let text = r#"{"prompt":"héllo \"quoted\" 🙂"}"#;
        let deferred =
            DeferredSeal::new(&site, text.into(), context(&site, "job-1")).expect("own keys defer");
        assert!(!deferred.is_sealed());
        assert_eq!(
            deferred.plaintext().as_deref().map(|t| t.as_str()),
            Some(text)
        );
        let first = deferred.sealed().expect("seals").clone();
        assert!(deferred.is_sealed());
        assert!(
            deferred.plaintext().is_none(),
            "the plaintext outlived the seal"
        );
        // The same envelope every time, not a fresh seal.
        assert_eq!(deferred.sealed().ok(), Some(&first));
        assert_eq!(first.ciphertext.len(), deferred.ciphertext_chars());
        assert_eq!(opens_to(&site, &first, "job-1"), text);
        assert_eq!(first.recipient_key_id, site.key_id());
        assert_eq!(first.direction, "payload");
    }

    #[test]
    fn the_length_is_known_before_the_seal_for_any_text() {
        let site = site();
        for text in [
            "",
            "x",
            "\u{0}\u{1f}\"\\",
            &"é".repeat(3000),
            &"a".repeat(70_001),
        ] {
            let deferred =
                DeferredSeal::new(&site, text.into(), context(&site, "j")).expect("defers");
            let chars = deferred.ciphertext_chars();
            let sealed = deferred.sealed().expect("seals");
            assert_eq!(
                sealed.ciphertext.len(),
                chars,
                "text of {} bytes",
                text.len()
            );
        }
    }

    #[test]
    fn racing_readers_get_one_envelope() {
        let site = site();
        let deferred =
            DeferredSeal::new(&site, "{\"prompt\":\"p\"}".into(), context(&site, "job-2"))
                .expect("defers");
        let seen: Vec<SealedEnvelope> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| deferred.sealed().expect("seals").clone()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a reader panicked"))
                .collect()
        });
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "two envelopes for one job"
        );
    }

    #[test]
    fn keys_whose_stored_public_key_is_not_their_own_are_not_deferred() {
        let other = handle(9);
        for swap in [0, 1] {
            let mut stored = StoredKeys::from_secrets(&[3; 32], &[4; 32], 1);
            if swap == 0 {
                stored.encryption_public = other.keys().encryption_public.clone();
            } else {
                stored.identity_public = other.keys().identity_public.clone();
            }
            let site = Arc::new(KeyHandle::new(stored).expect("parses"));
            assert!(DeferredSeal::new(&site, "{}".into(), context(&site, "j")).is_err());
        }
        let own = site();
        assert!(DeferredSeal::new(&own, "{}".into(), context(&own, "j")).is_ok());
    }

    #[test]
    fn debug_never_shows_the_plaintext() {
        let site = site();
        let deferred = DeferredSeal::new(
            &site,
            "{\"prompt\":\"secret words\"}".into(),
            context(&site, "j"),
        )
        .expect("defers");
        let shown = format!("{deferred:?}");
        assert!(!shown.contains("secret words"), "{shown}");
    }
}
