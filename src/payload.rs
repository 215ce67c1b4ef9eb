//! A job's payload sealed: validated and measured at enqueue, sealed at
//! rest (by and to the site, now or on the background thread), resealed
//! for the device that holds its lease, and written as the fetch answer.

use std::sync::Arc;

use crate::envelope::deferred::DeferredSeal;
use crate::envelope::{self, Text};
use crate::fingerprint;
use crate::json::Obj;
use crate::keys::{KeyHandle, PublicIdentity};
use crate::kinds::{PayloadRefusal, ValidPayload};
use crate::store::{EnvelopeInput, JobRef, Store};
use crate::wire;

pub(crate) mod reseal;

/// Envelopes from this many ciphertext characters are sealed and opened on
/// the thread pool, off the event loop.
pub(crate) const ASYNC_CRYPTO_THRESHOLD: usize = 64 * 1024;

/// Open a job's at-rest payload (sealed by and to the site) and seal it to
/// the device; `Ok(None)` when the at-rest envelope does not open, `Err`
/// when the device's encryption key cannot be sealed to.
pub(crate) fn reseal_for_device(
    site: &KeyHandle,
    at_rest: &envelope::SealedEnvelope,
    job_id: &str,
    created_at: f64,
    device: &PublicIdentity,
) -> Result<Option<envelope::SealedEnvelope>, envelope::SealError> {
    let site_id = site.key_id().to_string();
    let expected = envelope::Expected {
        job_id: job_id.to_string(),
        sender_key_id: site_id.clone(),
        recipient_key_id: site_id,
        direction: "payload".into(),
    };
    // The seal to the device runs while a large body's at-rest signature is
    // still being checked; its envelope is kept only if the check passes.
    let resealed = envelope::open_with_handle_then(
        at_rest,
        site,
        site.identity_key(),
        &expected,
        |plaintext| {
            let text = match plaintext.lone_utf16() {
                Some(units) => Text::Utf16(units),
                None => Text::Utf8(plaintext.as_str()),
            };
            seal_for_device(site, text, job_id, created_at, device)
        },
    );
    match resealed {
        Ok(sealed) => sealed.map(Some),
        Err(_) => Ok(None),
    }
}

/// `validatePayload`, then the size its envelope would have: a payload
/// whose envelope would be over [`wire::MAX_ENVELOPE_BYTES`] is refused
/// here, since no runner could ever be handed it. The envelope a device
/// fetches has the at-rest envelope's size (same job, deadline and
/// direction; key ids of one length), so that is what is measured, from
/// lengths alone.
pub(crate) fn validate_for_enqueue(
    site: &KeyHandle,
    kind: Option<&str>,
    kind_display: &str,
    payload_json: Option<&str>,
    job_id: &str,
    deadline_at: f64,
) -> Result<ValidPayload, PayloadRefusal> {
    let valid = crate::kinds::validate_payload(kind, kind_display, payload_json)?;
    let context = at_rest_context(site, job_id, deadline_at);
    let chars = envelope::sealed_envelope_chars(&context, Text::Utf8(&valid.canonical));
    if chars as u64 > wire::MAX_ENVELOPE_BYTES {
        return Err(PayloadRefusal::Undeliverable {
            kind: kind_display.to_owned(),
            size: wire::describe_bytes(chars as f64),
            limit: wire::describe_bytes(wire::MAX_ENVELOPE_BYTES as f64),
        });
    }
    Ok(valid)
}

/// What a payload at rest binds: the job, the site as sender and recipient.
pub(crate) fn at_rest_context(
    site: &KeyHandle,
    job_id: &str,
    deadline_at: f64,
) -> envelope::Context {
    let site_id = site.key_id().to_string();
    envelope::Context {
        job_id: job_id.to_string(),
        sender_key_id: site_id.clone(),
        recipient_key_id: site_id,
        deadline_at,
        direction: "payload".into(),
    }
}

/// An enqueued payload's envelope for our store: the one at-rest type, which
/// the reseal for a device reads too.
pub(crate) use reseal::AtRest as AtRestSeal;

impl reseal::AtRest {
    /// How the store's `create` takes it.
    pub(crate) fn as_input(&self) -> EnvelopeInput<'_> {
        match self {
            AtRestSeal::Sealed(sealed) => EnvelopeInput::Sealed {
                ciphertext: &sealed.ciphertext,
                recipient_key_id: &sealed.recipient_key_id,
                sender_key_id: &sealed.sender_key_id,
                direction: &sealed.direction,
                deadline_at: sealed.deadline_at,
            },
            AtRestSeal::Deferred(deferred) => EnvelopeInput::Deferred(Arc::clone(deferred)),
        }
    }
}

/// Job `r`'s payload as the store holds it: its sealed envelope (ciphertext
/// re-encoded) or its at-rest seal still to be made; `None` for an unknown
/// job or a caller's own (unsealed) envelope.
pub(crate) fn at_rest_of(store: &Store, r: JobRef) -> Option<AtRestSeal> {
    if let Some(deferred) = store.deferred_seal(r) {
        return Some(AtRestSeal::Deferred(Arc::clone(deferred)));
    }
    let mut ciphertext = String::new();
    let parts = store.sealed_envelope_parts(r, &mut ciphertext)?;
    Some(AtRestSeal::Sealed(envelope::SealedEnvelope {
        ciphertext,
        recipient_key_id: parts.recipient_key_id.to_owned(),
        sender_key_id: parts.sender_key_id.to_owned(),
        direction: parts.direction.to_owned(),
        deadline_at: parts.deadline_at,
    }))
}

/// Deferred seals a store holds before enqueues seal at once again: a burst
/// of enqueues faster than the background thread seals (≈ 50 µs a payload
/// there, ≈ 17 µs an enqueue here) would otherwise keep thousands of texts
/// and uncompacted envelopes around; measured, ≈ 0.5–1 KB more memory per
/// queued job after bulk enqueues.
pub(crate) const MAX_UNSETTLED: usize = 256;

/// The at-rest envelope of an enqueue on our store: sealed later
/// ([`crate::envelope::deferred`]) when nothing can tell the difference
/// (the store's records leave envelopes out until asked for, a background
/// thread will make the seal, no job has this id already, the site's keys
/// are their own) and the store is not already holding
/// [`MAX_UNSETTLED`] of them, else sealed now. The payload is already
/// validated.
pub(crate) fn seal_at_rest(
    site: &Arc<KeyHandle>,
    store: &Store,
    plaintext: String,
    job_id: &str,
    deadline_at: f64,
) -> Result<AtRestSeal, envelope::SealError> {
    let defer = store.omits_envelopes()
        && store.get(job_id).is_none()
        && store.unsettled_seals() < MAX_UNSETTLED;
    let at_rest = prepare_at_rest(site, plaintext, job_id, deadline_at, defer)?;
    seal_later(&at_rest);
    Ok(at_rest)
}

/// [`seal_at_rest`]'s seal, or its deferral when `defer` (the store's side
/// of the conditions) and there is a thread to make it: for a payload
/// validated off the main thread, stored later by [`seal_later`]'s caller.
pub(crate) fn prepare_at_rest(
    site: &Arc<KeyHandle>,
    plaintext: String,
    job_id: &str,
    deadline_at: f64,
    defer: bool,
) -> Result<AtRestSeal, envelope::SealError> {
    let plaintext = if defer && crate::chores::available() {
        let context = at_rest_context(site, job_id, deadline_at);
        match DeferredSeal::new(site, plaintext, context) {
            Ok(deferred) => return Ok(AtRestSeal::Deferred(deferred)),
            Err(refused) => refused.0,
        }
    } else {
        plaintext
    };
    seal_at_rest_now(site, &plaintext, job_id, deadline_at).map(AtRestSeal::Sealed)
}

/// A payload's text sealed at rest now: by and to the site, bound to the job.
pub(crate) fn seal_at_rest_now(
    site: &KeyHandle,
    plaintext: &str,
    job_id: &str,
    deadline_at: f64,
) -> Result<envelope::SealedEnvelope, envelope::SealError> {
    let context = at_rest_context(site, job_id, deadline_at);
    envelope::seal_with_handle(
        Text::Utf8(plaintext),
        site,
        &site.keys().encryption_public,
        &context,
    )
}

/// Hand a deferred seal to the background thread, without waking it: the
/// next wake for other work makes it. If the queue refuses (the thread is
/// thousands of chores behind), it is made here and now, so that no
/// payload's text waits in memory for a reader that may never come.
pub(crate) fn seal_later(at_rest: &AtRestSeal) {
    if let AtRestSeal::Deferred(deferred) = at_rest {
        let later = Arc::clone(deferred);
        if !crate::chores::run_quietly(move || later.seal_now()) {
            deferred.seal_now();
        }
    }
}

/// A payload's text sealed for `device`, exactly as [`reseal_for_device`]
/// seals what it opens (for a payload whose at-rest seal is not made yet):
/// bound to the job, the site as sender, the device as recipient, and a
/// deadline a day after the job was created.
pub(crate) fn seal_for_device(
    site: &KeyHandle,
    plaintext: Text<'_>,
    job_id: &str,
    created_at: f64,
    device: &PublicIdentity,
) -> Result<envelope::SealedEnvelope, envelope::SealError> {
    let context = envelope::Context {
        job_id: job_id.to_string(),
        sender_key_id: site.key_id().to_string(),
        recipient_key_id: fingerprint::key_id(&device.identity),
        deadline_at: created_at + envelope::ENVELOPE_MAX_AGE_MS,
        direction: "payload".into(),
    };
    envelope::seal_with_handle(plaintext, site, &device.encryption, &context)
}

/// The fetch answer, `{"envelope":{…}}` with the envelope's keys in the
/// reference's order (written here with the reseal, so a megabyte answer is
/// never `JSON.stringify`'d).
pub(crate) fn fetch_answer(sealed: &envelope::SealedEnvelope) -> String {
    let mut out = Obj::with_capacity(sealed.ciphertext.len() + 200);
    out.obj("envelope", |envelope| {
        envelope
            .str("ciphertext", &sealed.ciphertext)
            .str("recipientKeyId", &sealed.recipient_key_id)
            .str("senderKeyId", &sealed.sender_key_id)
            .str("direction", &sealed.direction)
            .num("deadlineAt", sealed.deadline_at);
    });
    out.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::keys::StoredKeys;
    use crate::store::{JobInput, StoreOptions};

    const NOW: f64 = 1_764_500_000_000.0;

    /// A small `llm.generate` job for `owner` with its at-rest envelope.
    fn job_input<'a>(id: &'a str, owner: &'a str, at_rest: &'a AtRestSeal) -> JobInput<'a> {
        JobInput {
            id,
            kind: "llm.generate",
            envelope: at_rest.as_input(),
            size_class: "small",
            owner,
            audience: None,
            purpose_json: None,
            audience_allow: None,
            depends_on: None,
            ttl_ms: None,
            deadline_at: None,
        }
    }

    fn handle(seed: u8) -> KeyHandle {
        match KeyHandle::new(StoredKeys::from_secrets(
            &[seed; 32],
            &[seed.wrapping_add(1); 32],
            1,
        )) {
            Ok(h) => h,
            Err(e) => panic!("keys: {e}"),
        }
    }

    #[test]
    fn a_store_holding_many_unmade_seals_seals_new_payloads_at_once_and_settles_as_they_are_made() {
        let site = Arc::new(handle(3));
        let mut store = Store::new(StoreOptions::default());
        store.set_omit_envelopes(true);
        // Seals nobody makes (no chore queued for them).
        let mut unmade = Vec::new();
        for n in 0..MAX_UNSETTLED {
            let id = format!("held-{n}");
            let Ok(deferred) = DeferredSeal::new(
                &site,
                "{\"prompt\":\"x\"}".into(),
                at_rest_context(&site, &id, 1.0),
            ) else {
                panic!("own keys defer");
            };
            let at_rest = AtRestSeal::Deferred(Arc::clone(&deferred));
            store.create(job_input(&id, "o", &at_rest), 1.0);
            unmade.push(deferred);
        }
        assert_eq!(store.unsettled_seals(), MAX_UNSETTLED);
        let next = seal_at_rest(&site, &store, "{\"prompt\":\"y\"}".into(), "next", 1.0);
        assert!(
            matches!(next, Ok(AtRestSeal::Sealed(_))),
            "deferred past the bound"
        );
        // Once made, each create or claim keeps a few of them compact.
        for deferred in &unmade {
            deferred.seal_now();
        }
        if let Ok(at_rest) = next {
            store.create(job_input("next", "o", &at_rest), 1.0);
        }
        assert_eq!(store.unsettled_seals(), MAX_UNSETTLED - 4);
        let r = store.get("held-0").expect("stored");
        assert!(
            store.deferred_seal(r).is_none(),
            "the oldest is settled first"
        );
    }

    #[test]
    fn an_envelope_is_measured_before_it_is_sealed_exactly() {
        let site = handle(1);
        let device = handle(7).public_identity();
        for text in [
            String::new(),
            "hi".into(),
            "quote \" back \\ nl \n tab \t ctl \u{1} \u{1f} del \u{7f}".into(),
            "\u{20ac}\u{1f600}".repeat(1000),
            "\"".repeat(70_001),
        ] {
            let payload = format!("{{\"prompt\":{}}}", serde_json::Value::from(text.clone()));
            let context = at_rest_context(&site, "job-1", NOW + envelope::ENVELOPE_MAX_AGE_MS);
            let at_rest = envelope::seal_with_handle(
                Text::Utf8(&payload),
                &site,
                &site.keys().encryption_public,
                &context,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let wire_len = |e: &envelope::SealedEnvelope| {
                serde_json::json!({
                    "ciphertext": e.ciphertext,
                    "recipientKeyId": e.recipient_key_id,
                    "senderKeyId": e.sender_key_id,
                    "direction": e.direction,
                    "deadlineAt": e.deadline_at as u64,
                })
                .to_string()
                .len()
            };
            let predicted = envelope::sealed_envelope_chars(&context, Text::Utf8(&payload));
            assert_eq!(predicted, wire_len(&at_rest), "{text:.40}");
            // What a device fetches is the same size.
            let fetched = reseal_for_device(&site, &at_rest, "job-1", NOW, &device)
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("does not open"));
            assert_eq!(predicted, wire_len(&fetched), "{text:.40}");
        }
    }

    #[test]
    fn a_payload_no_runner_could_receive_is_refused_at_enqueue() {
        let site = handle(1);
        let deadline = NOW + envelope::ENVELOPE_MAX_AGE_MS;
        let check = |text: &str| {
            let payload = format!("{{\"prompt\":{}}}", serde_json::Value::from(text));
            validate_for_enqueue(
                &site,
                Some("llm.generate"),
                "llm.generate",
                Some(&payload),
                "job-1",
                deadline,
            )
        };
        // A million astral characters pass the length rules (1,000,000 code
        // points, 2,000,000 UTF-16 units) but are 4 MB of UTF-8: 6.8 MiB sealed.
        let astral = "\u{1f600}".repeat(1_000_000);
        assert!(crate::kinds::validate_payload(
            Some("llm.generate"),
            "llm.generate",
            Some(&format!("{{\"prompt\":\"{astral}\"}}"))
        )
        .is_ok());
        let refused = check(&astral)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            refused.starts_with("invalid llm.generate payload \u{2014} sealed for its runner it would be 6.8 MB and the limit on one envelope is 6.0 MB"),
            "{refused}"
        );
        // A million 3-byte characters: 5.4 MB sealed, delivered.
        assert!(check(&"\u{20ac}".repeat(1_000_000)).is_ok());
        // Quotes double when written into the signed body.
        assert!(check(&"\"".repeat(1_000_000)).is_err());
        // The schema's own refusals come first, unchanged.
        assert_eq!(
            check("").err(),
            crate::kinds::validate_payload(
                Some("llm.generate"),
                "llm.generate",
                Some(r#"{"prompt":""}"#)
            )
            .err()
        );
    }
}
