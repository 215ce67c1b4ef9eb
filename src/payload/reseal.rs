//! The payload of a job resealed for the device that holds its lease: the
//! at-rest envelope (sealed to the site's own key) opened and sealed again
//! to the device, or, while the at-rest seal is not made yet
//! ([`crate::envelope::deferred`]), sealed to the device from its text.

use std::sync::Arc;

use crate::envelope::deferred::DeferredSeal;
use crate::envelope::{SealError, SealedEnvelope, Text};
use crate::keys::{KeyHandle, PublicIdentity};

/// What a reseal gives: the envelope for the device, `Ok(None)` when the
/// at-rest envelope does not open, `Err` when the device's key cannot be
/// sealed to ([`super::reseal_for_device`]).
pub(crate) type Resealed = Result<Option<SealedEnvelope>, SealError>;

/// The payload as the store holds it.
#[derive(Clone)]
pub(crate) enum AtRest {
    Sealed(SealedEnvelope),
    /// Sealed when first needed; the same seal for every reader.
    Deferred(Arc<DeferredSeal>),
}

impl std::fmt::Debug for AtRest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AtRest::Sealed(sealed) => f.debug_tuple("Sealed").field(sealed).finish(),
            AtRest::Deferred(_) => f.write_str("Deferred"),
        }
    }
}

/// Everything a reseal is computed from.
pub(crate) struct Inputs {
    pub site: Arc<KeyHandle>,
    pub job_id: String,
    pub at_rest: AtRest,
    pub created_at: f64,
    pub device: PublicIdentity,
}

impl Inputs {
    /// The payload sealed for the device ([`super::reseal_for_device`]).
    /// A payload whose at-rest seal is not made yet is sealed for the
    /// device from its text: what opening that seal would give.
    pub(crate) fn reseal(&self) -> Resealed {
        let at_rest = match &self.at_rest {
            AtRest::Sealed(sealed) => sealed,
            AtRest::Deferred(deferred) => {
                // Only where the open would succeed: the same site's keys,
                // this job. Otherwise the seal is made and opened as any.
                let opens = same_site(deferred.site(), &self.site)
                    && deferred.context().job_id == self.job_id;
                if let Some(text) = deferred.plaintext().filter(|_| opens) {
                    return super::seal_for_device(
                        &self.site,
                        Text::Utf8(&text),
                        &self.job_id,
                        self.created_at,
                        &self.device,
                    )
                    .map(Some);
                }
                match deferred.sealed() {
                    Ok(sealed) => sealed,
                    Err(_) => return Ok(None),
                }
            }
        };
        super::reseal_for_device(
            &self.site,
            at_rest,
            &self.job_id,
            self.created_at,
            &self.device,
        )
    }
}

/// Whether two handles hold the same site keys. Equal public keys mean
/// equal secrets (both are derived from them).
fn same_site(a: &Arc<KeyHandle>, b: &Arc<KeyHandle>) -> bool {
    Arc::ptr_eq(a, b)
        || (a.key_id() == b.key_id()
            && a.encryption_public() == b.encryption_public()
            && a.signing_key().verifying_key() == b.signing_key().verifying_key())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{self, Text};
    use crate::keys::StoredKeys;

    fn handle(seed: u8) -> Arc<KeyHandle> {
        match KeyHandle::new(StoredKeys::from_secrets(
            &[seed; 32],
            &[seed.wrapping_add(1); 32],
            1,
        )) {
            Ok(h) => Arc::new(h),
            Err(e) => panic!("keys: {e}"),
        }
    }

    fn inputs(site: &Arc<KeyHandle>, device: &KeyHandle, job_id: &str) -> Inputs {
        let context = envelope::Context {
            job_id: job_id.into(),
            sender_key_id: site.key_id().into(),
            recipient_key_id: site.key_id().into(),
            deadline_at: 1_000.0 + envelope::ENVELOPE_MAX_AGE_MS,
            direction: "payload".into(),
        };
        let at_rest = match envelope::seal_with_handle(
            Text::Utf8("{\"prompt\":\"hi\"}"),
            site,
            &site.keys().encryption_public,
            &context,
        ) {
            Ok(s) => s,
            Err(e) => panic!("seal: {e}"),
        };
        Inputs {
            site: Arc::clone(site),
            job_id: job_id.into(),
            at_rest: AtRest::Sealed(at_rest),
            created_at: 1_000.0,
            device: device.public_identity(),
        }
    }

    fn opens_for(device: &KeyHandle, site: &KeyHandle, job_id: &str, sealed: &SealedEnvelope) {
        let expected = envelope::Expected {
            job_id: job_id.into(),
            sender_key_id: site.key_id().into(),
            recipient_key_id: device.key_id().into(),
            direction: "payload".into(),
        };
        match envelope::open_with_handle(sealed, device, site.identity_key(), &expected) {
            Ok(text) => assert_eq!(text.as_str(), "{\"prompt\":\"hi\"}"),
            Err(e) => panic!("the device could not open the kept reseal: {e:?}"),
        }
    }

    #[test]
    fn a_deferred_payload_is_sealed_for_the_device_only_by_its_own_site() {
        let (site, other, device) = (handle(71), handle(73), handle(79));
        let deadline = 1_000.0 + envelope::ENVELOPE_MAX_AGE_MS;
        let deferred = match crate::envelope::deferred::DeferredSeal::new(
            &site,
            "{\"prompt\":\"hi\"}".into(),
            crate::payload::at_rest_context(&site, "job-6", deadline),
        ) {
            Ok(d) => d,
            Err(_) => panic!("own keys defer"),
        };
        let ask = |by: &Arc<KeyHandle>| Inputs {
            at_rest: AtRest::Deferred(Arc::clone(&deferred)),
            ..inputs(by, &device, "job-6")
        };
        let resealed_by_own_site = || match ask(&site).reseal() {
            Ok(Some(sealed)) => opens_for(&device, &site, "job-6", &sealed),
            _ => panic!("not resealed for the device"),
        };
        // From the text, the at-rest seal not made yet.
        resealed_by_own_site();
        assert!(!deferred.is_sealed());
        // Another site's keys get what opening the at-rest seal gives them.
        assert!(matches!(ask(&other).reseal(), Ok(None)));
        assert!(deferred.is_sealed());
        // And from the at-rest seal, once made.
        resealed_by_own_site();
    }
}
