//! The thread-pool side of `SiteKeyring`'s calls: large payloads are
//! validated, sealed, resealed and opened off the main thread.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use super::crypto::{invalid, seal_error};
use super::strings::ExactString;
use crate::envelope;
use crate::keys::KeyHandle;

/// One call's crypto as thread-pool work: `run` there, its answer made a
/// JavaScript value by `to_js` back on the main thread.
pub struct Work<O, J> {
    run: Option<Box<dyn FnOnce() -> Result<O> + Send>>,
    to_js: fn(O) -> J,
}

impl<O, J> Work<O, J> {
    pub(super) fn new(run: impl FnOnce() -> Result<O> + Send + 'static, to_js: fn(O) -> J) -> Self {
        Work {
            run: Some(Box::new(run)),
            to_js,
        }
    }
}

impl<O: Send + 'static, J: ToNapiValue + TypeName> Task for Work<O, J> {
    type Output = O;
    type JsValue = J;

    fn compute(&mut self) -> Result<O> {
        match self.run.take() {
            Some(run) => guard(run),
            None => Err(Error::new(
                Status::GenericFailure,
                "byollm-server-native: a crypto task ran twice",
            )),
        }
    }

    fn resolve(&mut self, _env: Env, output: O) -> Result<J> {
        Ok((self.to_js)(output))
    }
}

/// A keyring call's answer: now, or a promise of it from the thread pool.
pub(super) type NowOrLater<O, J> = Either<J, AsyncTask<Work<O, J>>>;

/// `run` done now, on the main thread, or on the thread pool when `large`:
/// each keyring call has one entry point, which picks by the size it knows.
pub(super) fn now_or_pooled<O: Send + 'static, J: ToNapiValue + TypeName>(
    run: impl FnOnce() -> Result<O> + Send + 'static,
    to_js: fn(O) -> J,
    large: bool,
) -> Result<NowOrLater<O, J>> {
    if large {
        return Ok(Either::B(AsyncTask::new(Work::new(run, to_js))));
    }
    run().map(|output| Either::A(to_js(output)))
}

/// An enqueue payload as it reaches the keyring.
pub(super) enum PayloadSource {
    /// `JSON.stringify(payload)`, or `None` when there is none.
    Json(Option<String>),
    /// A plain object of string values, as keys and values.
    Fields(Vec<ExactString>, Vec<ExactString>),
}

impl PayloadSource {
    /// The payload as its JSON text, or as `keys` and `values` when given
    /// (refused, for `method`, unless there are as many values as keys).
    pub(super) fn new(
        method: &str,
        json: Option<String>,
        keys: Option<Vec<ExactString>>,
        values: Option<Vec<ExactString>>,
    ) -> Result<PayloadSource> {
        match (keys, values) {
            (None, None) => Ok(PayloadSource::Json(json)),
            (Some(keys), Some(values)) if keys.len() == values.len() => {
                Ok(PayloadSource::Fields(keys, values))
            }
            _ => Err(invalid(format!(
                "{method}: keys and values differ in length"
            ))),
        }
    }

    /// Worth the thread pool: JSON text over
    /// [`crate::payload::ASYNC_CRYPTO_THRESHOLD`] bytes, or fields (only a
    /// large payload is handed over as its fields).
    pub(super) fn is_large(&self) -> bool {
        match self {
            PayloadSource::Json(json) => json
                .as_ref()
                .is_some_and(|json| json.len() > crate::payload::ASYNC_CRYPTO_THRESHOLD),
            PayloadSource::Fields(..) => true,
        }
    }

    /// `work` given the payload's JSON text (written here for fields).
    fn with_json<T>(&self, work: impl FnOnce(Option<&str>) -> T) -> T {
        match self {
            PayloadSource::Json(json) => work(json.as_deref()),
            PayloadSource::Fields(keys, values) => work(Some(&string_fields_json(keys, values))),
        }
    }
}

/// An enqueue payload of `kind`, to validate and seal at rest (or prepare)
/// with the keyring that made it.
pub(super) struct CheckedPayload {
    pub(super) handle: Arc<KeyHandle>,
    pub(super) kind_text: Option<String>,
    pub(super) kind_display: String,
    pub(super) payload: PayloadSource,
    pub(super) job_id: String,
    pub(super) deadline_at: f64,
}

impl CheckedPayload {
    /// The payload checked for an enqueue: its canonical text and size
    /// class, or the validator's message.
    pub(super) fn validate(&self) -> std::result::Result<crate::kinds::ValidPayload, String> {
        self.payload.with_json(|payload_json| {
            crate::payload::validate_for_enqueue(
                &self.handle,
                self.kind_text.as_deref(),
                &self.kind_display,
                payload_json,
                &self.job_id,
                self.deadline_at,
            )
            .map_err(|refusal| refusal.to_string())
        })
    }

    /// Validate the payload, then seal its canonical text at rest in the
    /// same step: the canonical text (as long as the payload) never crosses
    /// to JavaScript and back. The validator's message is the inner `Err`.
    pub(super) fn seal(
        &self,
    ) -> Result<std::result::Result<(envelope::SealedEnvelope, &'static str), String>> {
        let valid = match self.validate() {
            Ok(valid) => valid,
            Err(message) => return Ok(Err(message)),
        };
        crate::payload::seal_at_rest_now(
            &self.handle,
            &valid.canonical,
            &self.job_id,
            self.deadline_at,
        )
        .map(|sealed| Ok((sealed, valid.size_class.as_str())))
        .map_err(seal_error)
    }
}

/// A large payload validated on the thread pool, its at-rest seal left for
/// later where it can be ([`crate::payload::prepare_at_rest`]), waiting to
/// be stored by `SiteKeyring.enqueuePrepared`. Used once.
#[napi]
pub struct PreparedPayload {
    pub(super) prepared: Option<(crate::payload::AtRestSeal, &'static str)>,
}

/// `catch_unwind` for work on the thread pool, where the attribute does not
/// reach: a panic becomes a rejected promise.
pub(super) fn guard<T>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|_| {
        Err(Error::new(
            Status::GenericFailure,
            "byollm-server-native: internal error (panic) in a crypto task",
        ))
    })
}

/// `JSON.stringify` of an object whose own enumerable properties are these
/// keys with these string values, in this order (the caller checked that
/// shape, so nothing else can change the text).
fn string_fields_json(keys: &[ExactString], values: &[ExactString]) -> String {
    let size: usize = keys
        .iter()
        .chain(values)
        .map(|s| s.0.as_str().len() + 3)
        .sum();
    let mut out = String::with_capacity(size + 2);
    out.push('{');
    for (at, (key, value)) in keys.iter().zip(values).enumerate() {
        if at > 0 {
            out.push(',');
        }
        key.0.write_json(&mut out);
        out.push(':');
        value.0.write_json(&mut out);
    }
    out.push('}');
    out
}
