//! `SiteKeyring`, a site's key handle: its payload seals and result opens,
//! inline and on the thread pool, and its reseals for a claiming device.
//! The calls that also act on our store are `NativeMemoryStore`'s
//! (`enqueue`, `serveNative`, …), which take the keyring.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use super::crypto::{
    invalid, js_text, seal_error, JsPublicIdentity, JsSealedEnvelope, JsStoredKeys,
};
use super::strings::ExactString;
use super::tasks::{
    now_or_pooled, CheckedPayload, NowOrLater, PayloadSource, PreparedPayload, Work,
};
use crate::envelope::{OpenFailure, SealedEnvelope};
use crate::json::JsStr;
use crate::keys::{KeyHandle, PublicIdentity};
use crate::payload::ASYNC_CRYPTO_THRESHOLD;
use crate::result::{self as acceptance, NOT_FROM_DEVICE};
use crate::signing;

/// `sealChecked`'s answer: the at-rest envelope and the payload's size
/// class, or the validator's message.
#[napi(object, js_name = "SealedPayload")]
pub struct JsSealedPayload {
    pub ok: bool,
    pub envelope: Option<JsSealedEnvelope>,
    pub size_class: Option<String>,
    pub message: Option<String>,
}

/// A payload resealed for a device: the envelope, and the fetch answer's
/// text as the core writes it (`payload::fetch_answer`).
#[napi(object, js_name = "FetchAnswer")]
pub struct JsFetchAnswer {
    pub envelope: JsSealedEnvelope,
    pub text: String,
}

impl From<SealedEnvelope> for JsFetchAnswer {
    fn from(sealed: SealedEnvelope) -> Self {
        JsFetchAnswer {
            text: crate::payload::fetch_answer(&sealed),
            envelope: sealed.into(),
        }
    }
}

/// A payload's seal: the envelope and size class, or the validator's message.
type Checked = std::result::Result<(SealedEnvelope, &'static str), String>;

impl JsSealedPayload {
    fn from_core(checked: Checked) -> Self {
        match checked {
            Ok((sealed, size_class)) => JsSealedPayload {
                ok: true,
                envelope: Some(sealed.into()),
                size_class: Some(size_class.to_owned()),
                message: None,
            },
            Err(message) => JsSealedPayload {
                ok: false,
                envelope: None,
                size_class: None,
                message: Some(message),
            },
        }
    }
}

/// A payload validated, its at-rest seal prepared, or the validator's message.
type Prepared = std::result::Result<(crate::payload::AtRestSeal, &'static str), String>;

/// `NativeMemoryStore.enqueue`'s refusal: the payload validator's message.
#[napi(object, js_name = "PayloadRefusal")]
pub struct JsPayloadRefusal {
    pub message: String,
}

/// Who a result is accepted from (`crate::result::Source`).
#[napi(object, js_name = "ResultSource")]
pub struct JsResultSource {
    /// The job's audience as stored (an unknown spelling is echoed, untrusted).
    pub audience: String,
    pub runner_id: String,
    pub runner_owner: String,
}

/// `acceptResult`'s answer: `accepted`, the JSON text of `{outcome,
/// provenance}` (V8 builds the objects from text faster than they are
/// built across the boundary), or `why` the result was refused.
#[napi(object, js_name = "ResultAcceptance")]
pub struct JsResultAcceptance {
    pub ok: bool,
    #[napi(ts_type = "string")]
    pub accepted: Option<Either3<Latin1String, Utf16String, String>>,
    pub why: Option<String>,
}

impl JsResultAcceptance {
    fn from_core(answer: std::result::Result<String, &'static str>) -> Self {
        match answer {
            Ok(text) => JsResultAcceptance {
                ok: true,
                accepted: Some(js_text(JsStr::new(text))),
                why: None,
            },
            Err(why) => JsResultAcceptance {
                ok: false,
                accepted: None,
                why: Some(why.to_owned()),
            },
        }
    }
}

/// A result to open and accept, as `acceptResult` read it.
struct ResultToAccept {
    site: Arc<KeyHandle>,
    envelope: SealedEnvelope,
    job_id: String,
    device_identity: String,
    disposition: Option<String>,
    source: JsResultSource,
}

impl ResultToAccept {
    fn open(&self) -> std::result::Result<JsStr, OpenFailure> {
        crate::result::open_result(
            &self.site,
            &self.envelope,
            &self.job_id,
            &self.device_identity,
        )
    }

    fn accept(
        &self,
        opened: &std::result::Result<JsStr, OpenFailure>,
        url_ok: &dyn Fn(&str) -> bool,
    ) -> std::result::Result<String, &'static str> {
        let source = acceptance::Source {
            audience: &self.source.audience,
            runner_id: &self.source.runner_id,
            runner_owner: &self.source.runner_owner,
        };
        let accepted = acceptance::accept(opened, self.disposition.as_deref(), &source, url_ok)?;
        // Unreachable: serde writes the provenance's strings and enums.
        accepted
            .to_json()
            .ok_or("the accepted result could not be written")
    }
}

/// A large result's acceptance on the thread pool: opened, and accepted
/// there unless the answer turned on an `artifactUrl`, which is checked
/// again on the main thread, where `URL.canParse` is.
pub struct PooledAcceptance(ResultToAccept);

/// What the thread pool settled, or the opened result the main thread decides.
pub enum Pooled {
    Settled(std::result::Result<String, &'static str>),
    Recheck(std::result::Result<JsStr, OpenFailure>),
}

impl Task for PooledAcceptance {
    type Output = Pooled;
    type JsValue = JsResultAcceptance;

    fn compute(&mut self) -> Result<Pooled> {
        super::tasks::guard(|| {
            let opened = self.0.open();
            let asked = std::cell::Cell::new(false);
            let answer = self.0.accept(&opened, &|_| {
                asked.set(true);
                false
            });
            Ok(match answer {
                Err(_) if asked.get() => Pooled::Recheck(opened),
                answer => Pooled::Settled(answer),
            })
        })
    }

    fn resolve(&mut self, env: Env, output: Pooled) -> Result<JsResultAcceptance> {
        let answer = match output {
            Pooled::Settled(answer) => answer,
            Pooled::Recheck(opened) => self.0.accept(&opened, &super::requests::node_url_ok(&env)),
        };
        Ok(JsResultAcceptance::from_core(answer))
    }
}

// ---------------------------------------------------------------- SiteKeyring

/// A site's keys, parsed once and shared with the thread pool.
#[napi]
pub struct SiteKeyring {
    inner: Arc<KeyHandle>,
}

pub(super) fn device_from_js(device: &JsPublicIdentity) -> PublicIdentity {
    PublicIdentity {
        identity: device.identity.clone(),
        encryption: device.encryption.clone(),
        encryption_sig: device.encryption_sig.clone(),
    }
}

#[napi]
impl SiteKeyring {
    /// Parses both private keys; throws a clear error when they are not keys.
    /// Consistency of the public half is the engine's question.
    #[napi(constructor, catch_unwind)]
    pub fn new(keys: JsStoredKeys) -> Result<Self> {
        let handle =
            KeyHandle::new(keys.to_core()?).map_err(|e| invalid(format!("siteKeys: {e}")))?;
        Ok(SiteKeyring {
            inner: Arc::new(handle),
        })
    }

    #[napi(getter, catch_unwind)]
    pub fn key_id(&self) -> String {
        self.inner.key_id().to_string()
    }

    /// A payload validated as enqueue does and its canonical text sealed to
    /// the site itself, for storage at rest, in one call: the canonical text
    /// (as long as the payload) never crosses to JavaScript. Inline for a
    /// payload up to [`ASYNC_CRYPTO_THRESHOLD`] bytes, on the thread pool
    /// above (validation included: for a large payload it is milliseconds
    /// of parsing). A payload that is a plain
    /// object of string values may come as its `keys` and `values` instead
    /// of `payloadJson`: its JSON text is then written on the thread pool
    /// rather than by `JSON.stringify`, which scans a megabyte prompt a
    /// character at a time.
    #[allow(clippy::too_many_arguments)]
    #[napi(
        catch_unwind,
        ts_return_type = "{ ok: true; envelope: SealedEnvelope; sizeClass: string } | { ok: false; message: string } | Promise<{ ok: true; envelope: SealedEnvelope; sizeClass: string } | { ok: false; message: string }>"
    )]
    pub fn seal_checked(
        &self,
        kind: Unknown<'_>,
        payload_json: Option<String>,
        keys: Option<Vec<ExactString>>,
        values: Option<Vec<ExactString>>,
        job_id: String,
        deadline_at: f64,
    ) -> Result<NowOrLater<Checked, JsSealedPayload>> {
        let payload = PayloadSource::new("sealChecked", payload_json, keys, values)?;
        let checked = self.checked(kind, payload, job_id, deadline_at)?;
        let large = checked.payload.is_large();
        now_or_pooled(move || checked.seal(), JsSealedPayload::from_core, large)
    }

    /// [`Self::seal_checked`] on the thread pool for an enqueue on our
    /// `NativeMemoryStore` whose records leave envelopes out: the at-rest
    /// seal is left to the background thread (see
    /// `crate::envelope::deferred`), then the job is stored by
    /// `enqueuePrepared`.
    #[napi(
        catch_unwind,
        ts_return_type = "Promise<PreparedPayload | PayloadRefusal>"
    )]
    // The task's output (an at-rest seal) never leaves Rust.
    #[allow(private_interfaces)]
    pub fn prepare_checked_async(
        &self,
        kind: Unknown<'_>,
        payload_json: Option<String>,
        keys: Option<Vec<ExactString>>,
        values: Option<Vec<ExactString>>,
        job_id: String,
        deadline_at: f64,
    ) -> Result<AsyncTask<Work<Prepared, Either<PreparedPayload, JsPayloadRefusal>>>> {
        let payload = PayloadSource::new("prepareCheckedAsync", payload_json, keys, values)?;
        let checked = self.checked(kind, payload, job_id, deadline_at)?;
        let run = move || {
            let valid = match checked.validate() {
                Ok(valid) => valid,
                Err(message) => return Ok(Err(message)),
            };
            let size_class = valid.size_class.as_str();
            crate::payload::prepare_at_rest(
                &checked.handle,
                valid.canonical,
                &checked.job_id,
                checked.deadline_at,
                true,
            )
            .map(|at_rest| Ok((at_rest, size_class)))
            .map_err(seal_error)
        };
        let to_js = |prepared: Prepared| match prepared {
            Ok(prepared) => Either::A(PreparedPayload {
                prepared: Some(prepared),
            }),
            Err(message) => Either::B(JsPayloadRefusal { message }),
        };
        Ok(AsyncTask::new(Work::new(run, to_js)))
    }

    /// Open the at-rest payload and seal it to the claiming device (on the
    /// thread pool past [`ASYNC_CRYPTO_THRESHOLD`] bytes), with the fetch
    /// answer around it; `null` when the at-rest envelope does not open.
    #[napi(
        catch_unwind,
        ts_return_type = "FetchAnswer | null | Promise<FetchAnswer | null>"
    )]
    pub fn reseal_for_device(
        &self,
        at_rest: JsSealedEnvelope,
        job_id: String,
        created_at: f64,
        device: JsPublicIdentity,
    ) -> Result<NowOrLater<Option<SealedEnvelope>, Option<JsFetchAnswer>>> {
        let large = at_rest.ciphertext.0.len() > ASYNC_CRYPTO_THRESHOLD;
        let inputs = crate::payload::reseal::Inputs {
            site: self.inner.clone(),
            job_id,
            at_rest: crate::payload::reseal::AtRest::Sealed(at_rest.into()),
            created_at,
            device: device_from_js(&device),
        };
        let to_js = |sealed: Option<SealedEnvelope>| sealed.map(JsFetchAnswer::from);
        now_or_pooled(move || inputs.reseal().map_err(seal_error), to_js, large)
    }

    /// Open a device's result for `jobId` and accept it, or refuse it with
    /// the reference's message (`crate::result`): the one call per result of
    /// a store the engine does not run in place, and of the cloud lane (on the thread pool
    /// past [`ASYNC_CRYPTO_THRESHOLD`] bytes). Values a relay sent that are
    /// not even strings do not open: refused, not thrown.
    #[allow(clippy::too_many_arguments)]
    #[napi(
        catch_unwind,
        ts_args_type = "envelope: SealedEnvelope, jobId: string, deviceIdentity: string, disposition: string, source: ResultSource",
        ts_return_type = "{ ok: true; accepted: string } | { ok: false; why: string } | Promise<{ ok: true; accepted: string } | { ok: false; why: string }>"
    )]
    pub fn accept_result(
        &self,
        env: Env,
        envelope: Unknown<'_>,
        job_id: Unknown<'_>,
        device_identity: Unknown<'_>,
        disposition: Unknown<'_>,
        source: JsResultSource,
    ) -> Result<Either<JsResultAcceptance, AsyncTask<PooledAcceptance>>> {
        let relayed = || -> Result<(JsSealedEnvelope, String, String)> {
            Ok((
                JsSealedEnvelope::from_unknown(envelope)?,
                String::from_unknown(job_id)?,
                String::from_unknown(device_identity)?,
            ))
        };
        let Ok((envelope, job_id, device_identity)) = relayed() else {
            return Ok(Either::A(JsResultAcceptance::from_core(Err(
                NOT_FROM_DEVICE,
            ))));
        };
        let result = ResultToAccept {
            site: self.inner.clone(),
            envelope: envelope.into(),
            job_id,
            device_identity,
            disposition: super::rules::rule_text(disposition)?,
            source,
        };
        if result.envelope.ciphertext.len() > ASYNC_CRYPTO_THRESHOLD {
            return Ok(Either::B(AsyncTask::new(PooledAcceptance(result))));
        }
        let answer = result.accept(&result.open(), &super::requests::node_url_ok(&env));
        Ok(Either::A(JsResultAcceptance::from_core(answer)))
    }

    /// The site plane's request signature over `site/<endpoint>`.
    #[napi(catch_unwind)]
    pub fn sign_site_request(
        &self,
        endpoint: String,
        site_id: String,
        issued_at: f64,
        body: String,
    ) -> String {
        signing::sign_request(
            &self.inner,
            &signing::site_endpoint(&endpoint),
            &site_id,
            issued_at,
            &body,
        )
        .signature
    }
}

impl SiteKeyring {
    /// The parsed keys (for the store's calls that seal and open).
    pub(super) fn handle(&self) -> &Arc<KeyHandle> {
        &self.inner
    }

    /// `payload` of `kind` for validation and a seal (the seals and
    /// prepares share it).
    fn checked(
        &self,
        kind: Unknown<'_>,
        payload: PayloadSource,
        job_id: String,
        deadline_at: f64,
    ) -> Result<CheckedPayload> {
        let (kind_text, kind_display) = super::rules::payload_kind(kind)?;
        Ok(CheckedPayload {
            handle: self.inner.clone(),
            kind_text,
            kind_display,
            payload,
            job_id,
            deadline_at,
        })
    }
}
