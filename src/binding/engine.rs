//! The engine as JavaScript drives it: `Engine` (one per site) starts a
//! `PendingRequest` per request, which asks for store operations until it
//! has the answer. On our own store the operations run in place
//! (`serveNative`, `runOn`); heavy crypto runs on the thread pool (`work`).

// `#[napi]` items compile to nothing under `cfg(test)`, leaving their helpers unused there.
#![cfg_attr(test, allow(dead_code))]

use std::any::Any;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::{JsString, KeyCollectionMode, KeyConversion, KeyFilter, ValueType};
use napi_derive::napi;

use super::keyring::SiteKeyring;
use super::metrics::NativeMetrics;
use super::requests::node_url_ok;
use super::store::NativeMemoryStore;
use super::tasks;
use crate::engine::{Answer, Fault, Got, Machine, Mode, Request, Settings, Site, Step};
use crate::signing::RequestSignature;
use crate::wire::{self, Endpoint};

/// A site's settings, as `createFetchHandler` resolved them.
#[napi(object, js_name = "EngineSettings")]
pub struct JsEngineSettings {
    pub lease_ms: f64,
    pub pairing_ttl_ms: f64,
    pub poll_interval_ms: f64,
    pub verification_url: String,
}

/// The engine for one site.
#[napi]
pub struct Engine {
    site: Arc<Site>,
    /// The status of the last answer `serveNative` or `handleNative` gave as text.
    last_status: std::cell::Cell<u16>,
}

/// The `x-byollm-*` header values as one signature; `None` when any is
/// missing or the timestamp is not a number (`Number()`'s reading).
fn header_signature(
    runner_id: Option<String>,
    issued_at: Option<String>,
    signature: Option<String>,
) -> Option<RequestSignature> {
    Some(RequestSignature {
        issued_at: wire::issued_at_header(&issued_at?)?,
        runner_id: runner_id?,
        signature: signature?,
    })
}

/// `auth.signature` of `ByollmHandlers.handle`: exactly the keys `runnerId`,
/// `issuedAt` and `signature` (own, enumerable), of types string, number
/// and string; anything else is no signature.
fn object_signature(value: Unknown<'_>) -> Result<Option<RequestSignature>> {
    if value.get_type()? != ValueType::Object || value.is_array()? {
        return Ok(None);
    }
    // SAFETY: the value was just checked to be an object.
    let object: Object = unsafe { value.cast()? };
    // `Object.keys`: own, enumerable, symbols left out.
    let keys = object.get_all_property_names(
        KeyCollectionMode::OwnOnly,
        KeyFilter::Enumerable,
        KeyConversion::NumbersToStrings,
    )?;
    for at in 0..keys.get_array_length()? {
        let key: Unknown = keys.get_element(at)?;
        if key.get_type()? != ValueType::String {
            continue;
        }
        // SAFETY: checked to be a string.
        let key: String = unsafe { key.cast()? };
        if !matches!(key.as_str(), "runnerId" | "issuedAt" | "signature") {
            return Ok(None);
        }
    }
    let text = |name: &str| -> Result<Option<String>> {
        let v: Unknown = object.get_named_property(name)?;
        Ok(if v.get_type()? == ValueType::String {
            // SAFETY: checked to be a string.
            Some(unsafe { v.cast::<String>()? })
        } else {
            None
        })
    };
    let issued_at: Unknown = object.get_named_property("issuedAt")?;
    if issued_at.get_type()? != ValueType::Number {
        return Ok(None);
    }
    // SAFETY: checked to be a number.
    let issued_at: f64 = unsafe { issued_at.cast()? };
    Ok(text("runnerId")?
        .zip(text("signature")?)
        .map(|(runner_id, signature)| RequestSignature {
            runner_id,
            issued_at,
            signature,
        }))
}

#[napi]
impl Engine {
    #[napi(constructor, catch_unwind)]
    pub fn new(
        keyring: &SiteKeyring,
        settings: JsEngineSettings,
        metrics: Option<&NativeMetrics>,
    ) -> Result<Self> {
        // Keys whose encryption half the identity half did not sign: every
        // daemon would refuse this site, one pairing at a time.
        if !keyring.handle().is_consistent() {
            return Err(Error::from_reason(
                "siteKeys are not internally consistent: the encryption key is not signed by the identity key. \
                 Generate a fresh pair with `npx --no keygen`.",
            ));
        }
        let site = Site::new(
            Arc::clone(keyring.handle()),
            Settings {
                lease_ms: settings.lease_ms,
                pairing_ttl_ms: settings.pairing_ttl_ms,
                poll_interval_ms: settings.poll_interval_ms,
                verification_url: settings.verification_url,
                metrics: metrics.map(|m| Arc::clone(&m.inner)),
            },
        );
        Ok(Engine {
            site: Arc::new(site),
            last_status: std::cell::Cell::new(0),
        })
    }

    fn pending(&self, endpoint: &str, request: impl FnOnce(Endpoint) -> Request) -> PendingRequest {
        let machine = match Endpoint::parse(endpoint) {
            Some(endpoint) => Ok(Machine::start(Arc::clone(&self.site), request(endpoint))),
            None => Err(Machine::unknown_endpoint()),
        };
        PendingRequest {
            machine: Some(Box::new(machine)),
            done: Arc::new(Mutex::new(None)),
        }
    }

    /// A request from HTTP: the body text and the `x-byollm-*` header values.
    /// `rereads`: the store reads the runner again with each request's work.
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind)]
    pub fn request(
        &self,
        endpoint: String,
        body: String,
        runner_id: Option<String>,
        issued_at: Option<String>,
        signature: Option<String>,
        now: f64,
        rereads: bool,
        source: Option<String>,
    ) -> PendingRequest {
        self.pending(&endpoint, |endpoint| Request {
            endpoint,
            body: Some(body),
            signed: None,
            signature: header_signature(runner_id, issued_at, signature),
            mode: Mode::Http,
            now,
            rereads,
            source,
        })
    }

    /// A request from `ByollmHandlers.handle`: the parsed body written as
    /// JSON (`undefined` when it cannot be), and what the signature covers.
    #[allow(clippy::too_many_arguments)]
    #[napi(
        catch_unwind,
        ts_args_type = "endpoint: string, body: string | undefined, signedEndpoint: string, signedBody: string, signature: unknown, now: number, rereads: boolean, source?: string"
    )]
    pub fn handle(
        &self,
        endpoint: String,
        body: Option<String>,
        signed_endpoint: String,
        signed_body: String,
        signature: Unknown<'_>,
        now: f64,
        rereads: bool,
        source: Option<String>,
    ) -> Result<PendingRequest> {
        let signature = object_signature(signature)?;
        Ok(self.pending(&endpoint, |endpoint| Request {
            endpoint,
            body,
            signed: Some((signed_endpoint, signed_body)),
            signature,
            mode: Mode::Handle,
            now,
            rereads,
            source,
        }))
    }

    /// Serve `pending` on our own store, in place: the answer's text (its
    /// status in `status`) when it is reached without the thread pool and
    /// the store did not fail, else the request (answered, or waiting for
    /// `work`). No object per request on the common path: its memory is
    /// freed before this returns.
    fn in_place<'env>(
        &self,
        env: &'env Env,
        store: &mut NativeMemoryStore,
        mut pending: PendingRequest,
    ) -> Result<Either<JsString<'env>, PendingRequest>> {
        pending.run_on(*env, store);
        match pending.answer() {
            Some(answer) if answer.cause.is_none() => {
                self.last_status.set(answer.status);
                let body = pending.take().unwrap_or_default();
                super::store::js_text(env, &body).map(Either::A)
            }
            _ => Ok(Either::B(pending)),
        }
    }

    /// `request`, served on our own store in place (see `status`).
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind)]
    pub fn serve_native<'env>(
        &self,
        env: &'env Env,
        store: &mut NativeMemoryStore,
        endpoint: String,
        body: String,
        runner_id: Option<String>,
        issued_at: Option<String>,
        signature: Option<String>,
        now: f64,
        source: Option<String>,
    ) -> Result<Either<JsString<'env>, PendingRequest>> {
        let pending = self.request(
            endpoint, body, runner_id, issued_at, signature, now, false, source,
        );
        self.in_place(env, store, pending)
    }

    /// `handle`, served on our own store in place (see `status`).
    #[allow(clippy::too_many_arguments)]
    #[napi(
        catch_unwind,
        ts_args_type = "store: NativeMemoryStore, endpoint: string, body: string | undefined, signedEndpoint: string, signedBody: string, signature: unknown, now: number, source?: string"
    )]
    pub fn handle_native<'env>(
        &self,
        env: &'env Env,
        store: &mut NativeMemoryStore,
        endpoint: String,
        body: Option<String>,
        signed_endpoint: String,
        signed_body: String,
        signature: Unknown<'_>,
        now: f64,
        source: Option<String>,
    ) -> Result<Either<JsString<'env>, PendingRequest>> {
        let pending = self.handle(
            endpoint,
            body,
            signed_endpoint,
            signed_body,
            signature,
            now,
            false,
            source,
        )?;
        self.in_place(env, store, pending)
    }

    /// A key of the store's notification channel (`o:<owner>`, `t`,
    /// `r:<runnerId>`, `*`): what idle runners were told that it may change
    /// is forgotten.
    #[napi(catch_unwind)]
    pub fn idle_key(&self, key: String) {
        self.site.idle_key(&key);
    }

    /// The channel is (or is no longer) proven live. Idle requests are
    /// answered from memory only while it is; every change forgets everything.
    #[napi(catch_unwind)]
    pub fn idle_health(&self, healthy: bool) {
        self.site.idle_health(healthy);
    }

    /// The liveness writes due, `[{"runnerId","now"}]` (at most 1,000),
    /// handed out once: for `byollm_touch_runners`.
    #[napi(catch_unwind)]
    pub fn idle_due(&self) -> String {
        self.site.idle_due()
    }

    /// `byollm_touch_runners`'s answer, as JSON text.
    #[napi(catch_unwind)]
    pub fn idle_seen(&self, answer: String) {
        self.site.idle_seen(&answer);
    }

    /// The status of the answer the last `serveNative` or `handleNative`
    /// call returned as text.
    #[napi(getter, catch_unwind)]
    pub fn status(&self) -> u32 {
        u32::from(self.last_status.get())
    }
}

/// One request in progress (see `Engine`).
#[napi]
pub struct PendingRequest {
    /// `Err`: answered before the engine saw it (an unknown endpoint);
    /// `None` once `take` handed the answer over and freed the rest.
    machine: Option<Box<std::result::Result<Machine, Answer>>>,
    /// Where the thread pool leaves heavy work's result.
    done: Arc<Mutex<Option<Box<dyn Any + Send>>>>,
}

impl PendingRequest {
    fn running(&mut self) -> Option<&mut Machine> {
        self.machine.as_deref_mut().and_then(|m| m.as_mut().ok())
    }

    /// Hand over what the thread pool finished, and answer URL checks here.
    fn settle(&mut self, env: &Env) {
        let finished = self.done.lock().ok().and_then(|mut slot| slot.take());
        let Some(machine) = self.running() else {
            return;
        };
        if let Some(done) = finished {
            machine.resume(Got::Work(done));
        }
        while let Step::Urls(urls) = machine.step() {
            let url_ok = node_url_ok(env);
            let verdicts = urls.iter().map(|u| url_ok(u)).collect();
            machine.resume(Got::Urls(verdicts));
        }
    }

    fn step(&self) -> Option<Step<'_>> {
        match self.machine.as_deref()? {
            Ok(machine) => Some(machine.step()),
            Err(answer) => Some(Step::Answer(answer)),
        }
    }

    fn answer(&self) -> Option<&Answer> {
        match self.step()? {
            Step::Answer(answer) => Some(answer),
            _ => None,
        }
    }
}

#[napi]
impl PendingRequest {
    /// What the request needs next: a store operation's name, `"work"`
    /// (call `work()`), or `null` once answered.
    #[napi(catch_unwind)]
    pub fn next(&mut self, env: Env) -> Option<&'static str> {
        self.settle(&env);
        match self.step()? {
            Step::Answer(_) => None,
            Step::Store(op) => Some(op.name()),
            Step::Work | Step::Urls(_) => Some("work"),
        }
    }

    /// The arguments of the operation asked for, as JSON text.
    #[napi(getter, catch_unwind)]
    pub fn args(&self) -> Option<String> {
        match self.step()? {
            Step::Store(op) => Some(op.args_json()),
            _ => None,
        }
    }

    /// The store's result of the operation asked for, as JSON text.
    #[napi(catch_unwind)]
    pub fn resume(&mut self, result: String) {
        if let Some(machine) = self.running() {
            if let Step::Store(op) = machine.step() {
                let output = op.output_from_json(&result);
                machine.resume(Got::Store(output));
            }
        }
    }

    /// The store failed the operation asked for (threw, or never answered).
    #[napi(catch_unwind)]
    pub fn fail(&mut self, cause: String) {
        if let Some(machine) = self.running() {
            if let Step::Store(_) = machine.step() {
                machine.resume(Got::Store(Err(Fault::Store(cause))));
            }
        }
    }

    /// Run the heavy work asked for on the thread pool; `next()` afterwards.
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn work(&mut self) -> Result<AsyncTask<tasks::Work<(), ()>>> {
        let work = self.running().and_then(Machine::take_work).ok_or_else(|| {
            Error::from_reason("byollm-server-native: this request has no work waiting")
        })?;
        let slot = Arc::clone(&self.done);
        Ok(AsyncTask::new(tasks::Work::new(
            move || {
                let done = work.run();
                if let Ok(mut slot) = slot.lock() {
                    *slot = Some(done);
                }
                Ok(())
            },
            |()| (),
        )))
    }

    /// Perform the operations asked for on our own store, until the answer
    /// or heavy work; whether it is answered.
    #[napi(catch_unwind)]
    pub fn run_on(&mut self, env: Env, store: &mut NativeMemoryStore) -> bool {
        loop {
            self.settle(&env);
            let Some(machine) = self.running() else {
                return true;
            };
            let output = match machine.step() {
                Step::Answer(_) => return true,
                Step::Work | Step::Urls(_) => return false,
                Step::Store(op) => store.run_op(op),
            };
            machine.resume(Got::Store(output));
        }
    }

    #[napi(getter, catch_unwind)]
    pub fn status(&self) -> u32 {
        self.answer().map_or(0, |a| u32::from(a.status))
    }

    /// Why the store failed, for the server's log.
    #[napi(getter, catch_unwind)]
    pub fn cause(&self) -> Option<String> {
        self.answer().and_then(|a| a.cause.clone())
    }

    /// The answer's JSON text, handed over once: everything the request
    /// held is freed now, not when the garbage collector gets to this object.
    #[napi(catch_unwind)]
    pub fn take(&mut self) -> Option<String> {
        let taken = self.machine.take()?;
        match *taken {
            Ok(mut machine) => machine.take_answer().map(|a| a.body),
            Err(answer) => Some(answer.body),
        }
    }
}

/// A budget of lookups that found nothing, per source (the core's
/// [`crate::sources::Sources`]): what `ByollmApp.approvePairing` spends on
/// unknown user codes. In memory only.
#[napi]
pub struct FailureBudget {
    sources: crate::sources::Sources,
}

#[napi]
#[allow(clippy::new_without_default)]
impl FailureBudget {
    #[napi(constructor, catch_unwind)]
    pub fn new() -> Self {
        FailureBudget {
            sources: crate::sources::Sources::new([0; 32]),
        }
    }

    /// Whether `source` has spent its budget at `now`.
    #[napi(catch_unwind)]
    pub fn spent(&self, source: String, now: f64) -> bool {
        self.sources.spent(&source, now)
    }

    /// Count one lookup of `source` that found nothing.
    #[napi(catch_unwind)]
    pub fn failed(&self, source: String, now: f64) {
        self.sources.failed(&source, now);
    }

    /// `retryAfter` of a refusal, in seconds.
    #[napi(getter, catch_unwind)]
    pub fn retry_after(&self) -> u32 {
        crate::sources::RETRY_AFTER_SECONDS
    }
}
