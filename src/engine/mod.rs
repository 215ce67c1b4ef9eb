//! The engine: the order of operations of the six protocol endpoints, once,
//! for every store.
//!
//! It does no I/O. A request goes in (the endpoint, the exact body text, the
//! signature, the time); what comes out is either the wire answer or the one
//! thing it needs next: a store operation ([`Op`]), heavy crypto to run off
//! the event loop ([`Work`]), or Node's verdict on some URLs. Whoever holds
//! the store performs the operation and hands the result back
//! ([`Machine::resume`]) until the answer. Our own store runs its operations
//! in place ([`native`]); the TypeScript shell maps them to a SQL function
//! call or to a user store's methods.
//!
//! The endpoints are written as plain `async` functions: awaiting an
//! operation suspends the machine until its result is fed back, so the order
//! of operations reads top to bottom, the way the protocol describes it. The
//! future is only ever polled by [`Machine`], with a no-op waker.
//!
//! Every request makes a bounded number of operations ([`MAX_OPS`]): a
//! signed request at most one runner read plus its endpoint's work (three
//! for `release`), `pair start` at most eight user-code lookups and one write.

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use hashlink::LruCache;

use crate::envelope::{OpenFailure, SealedEnvelope};
use crate::ids;
use crate::json::{write_json_str, Doc, JsStr, Obj};
use crate::keys::{self, KeyHandle, PublicIdentity};
use crate::metrics::{Metrics, PairingEvent, Refusal};
use crate::payload::{self, reseal};
use crate::schema::Out;
use crate::signing::{self, RequestSignature};
use crate::sources::{self, Sources};
use crate::wire::{self, Endpoint, ErrorCode, Inspection, WireError};

mod idle;
pub(crate) mod native;
pub(crate) mod ops;
pub(crate) mod rules;

pub(crate) use ops::{Fault, Op, Output};

/// The most store operations one request makes (`pair start`: eight user
/// code lookups and the write). The machine answers `server-error` rather
/// than ask for more.
pub(crate) const MAX_OPS: usize = 9;

/// How many runners' identities a site remembers for stores that re-read
/// the runner with each request's work (the oldest read is forgotten first):
/// a fleet's idle requests skip the store only for runners remembered here
/// (about 0.5 kB each).
const KNOWN_RUNNERS: usize = 65_536;

/// How many fresh user codes `pair start` tries before it gives up.
const USER_CODE_DRAWS: usize = 8;

// The refusals, worded as the reference words them.
const NOT_SIGNED: &str = "this request is not signed";
const NOT_RECOGNISED: &str = "this runner is not recognised";
const BAD_SIGNATURE: &str = "this request's signature is not valid";
const REVOKED: &str = "this runner has been revoked by its owner";
const OTHER_RUNNER: &str = "runner id does not match the signing key";
const NO_LEASE: &str = "no such lease on this job";
const UNSEALABLE_DEVICE: &str = "this device's encryption key cannot be sealed to";
const UNOPENABLE_PAYLOAD: &str = "this job's payload could not be opened";
const UNKNOWN_JOB: &str = "unknown job";
const UNKNOWN_DEVICE_CODE: &str = "unknown device code";
const COLLECTED: &str = "this pairing has already been collected";
const NO_FREE_CODE: &str = "no free pairing code was found; try again";
const TOO_MANY_PAIRINGS: &str = "too many pairings are pending from this source; try again later";
const TOO_MANY_UNKNOWN: &str = "too many unknown device codes from this source; try again later";
const UNKNOWN_ENDPOINT: &str = "unknown endpoint";
/// A store that failed: the cause goes to the server's log, not to the caller.
const STORE_FAILED: &str = "the site's store failed; try again later";

/// One site's side of the protocol: its keys and settings, and the
/// identities of runners it has verified (see [`Request::rereads`]).
pub(crate) struct Site {
    keys: Arc<KeyHandle>,
    lease_ms: f64,
    pairing_ttl_ms: f64,
    poll_interval_ms: f64,
    verification_url: String,
    /// `{"<site key id>":{identity,encryption,encryptionSig}}`, written once.
    sites_json: String,
    known: Mutex<LruCache<String, ops::Runner>>,
    /// What idle runners were last told (see [`idle`]).
    idle: Mutex<idle::Idle>,
    /// Where what only the engine sees is counted (`None`: metrics off).
    metrics: Option<Arc<Metrics>>,
    /// Request sources as kept, and their failure budgets.
    sources: Sources,
}

/// A site's settings, as `createFetchHandler` takes them.
pub(crate) struct Settings {
    pub lease_ms: f64,
    pub pairing_ttl_ms: f64,
    pub poll_interval_ms: f64,
    pub verification_url: String,
    pub metrics: Option<Arc<Metrics>>,
}

impl Site {
    pub(crate) fn new(keys: Arc<KeyHandle>, settings: Settings) -> Site {
        let mut sites_json = String::from("{");
        write_json_str(keys.key_id(), &mut sites_json);
        sites_json.push(':');
        sites_json.push_str(&identity_json(&keys.public_identity()));
        sites_json.push('}');
        let sources = Sources::new(keys.derived_key("byollm request sources"));
        Site {
            keys,
            lease_ms: settings.lease_ms,
            pairing_ttl_ms: settings.pairing_ttl_ms,
            poll_interval_ms: settings.poll_interval_ms,
            verification_url: settings.verification_url,
            sites_json,
            known: Mutex::new(LruCache::new(KNOWN_RUNNERS)),
            idle: Mutex::new(idle::Idle::new()),
            metrics: settings.metrics,
            sources,
        }
    }

    fn count(&self, record: impl FnOnce(&Metrics)) {
        if let Some(metrics) = &self.metrics {
            record(metrics);
        }
    }

    fn known(&self, runner_id: &str) -> Option<ops::Runner> {
        self.known.lock().ok()?.get(runner_id).cloned()
    }

    /// Remember a live runner's identity; forget a revoked or removed one.
    fn remember(&self, runner_id: &str, runner: Option<&ops::Runner>) {
        let Ok(mut known) = self.known.lock() else {
            return;
        };
        match runner {
            Some(r) if !r.revoked => {
                known.insert(runner_id.to_owned(), r.clone());
            }
            _ => {
                known.remove(runner_id);
            }
        }
    }
}

fn identity_json(identity: &PublicIdentity) -> String {
    let mut out = Obj::new();
    out.str("identity", &identity.identity)
        .str("encryption", &identity.encryption)
        .str("encryptionSig", &identity.encryption_sig);
    out.end()
}

/// How a transport hands a request over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// From HTTP: a body that is not JSON, or declares the wrong protocol
    /// version, is answered at once, before the signature is looked at.
    Http,
    /// From `ByollmHandlers.handle`, with a body the caller parsed: every
    /// failure of the body is its schema's, answered after the signature.
    Handle,
}

/// One request, as the engine takes it.
pub(crate) struct Request {
    pub endpoint: Endpoint,
    /// The text checked against the endpoint's schema (`None`: the caller's
    /// body could not be written as JSON, a schema failure).
    pub body: Option<String>,
    /// The endpoint and text the signature covers, when they are not
    /// `endpoint` and `body` (`handle` is told them separately).
    pub signed: Option<(String, String)>,
    /// `None` when the request carries none.
    pub signature: Option<RequestSignature>,
    pub mode: Mode,
    pub now: f64,
    /// The store reads the runner again with each request's work (the SQL
    /// stores), so a runner verified before may check a signature without a
    /// read of its own; whether it still exists and is not revoked comes back
    /// with the work.
    pub rereads: bool,
    /// Where the request came from, as the host names it (`None`: it names
    /// none, and every such request is one source).
    pub source: Option<String>,
}

/// The wire answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub status: u16,
    /// The JSON text of the body.
    pub body: String,
    /// The error code of a refusal.
    pub error: Option<ErrorCode>,
    /// Why the store failed, for the server's log (never sent).
    pub cause: Option<String>,
}

impl Answer {
    fn ok(body: String) -> Answer {
        Answer {
            status: 200,
            body,
            error: None,
            cause: None,
        }
    }

    fn refuse(error: ErrorCode, message: &str) -> Answer {
        Answer::wire(WireError::new(error, message))
    }

    fn wire(error: WireError) -> Answer {
        Answer {
            status: error.status(),
            body: error.to_json(),
            error: Some(error.error),
            cause: None,
        }
    }

    /// `rate-limited`, with how long to wait (the reference's key order).
    fn rate_limited(message: &str) -> Answer {
        let mut body = Obj::new();
        body.str("error", ErrorCode::RateLimited.as_str())
            .str("message", message)
            .num("retryAfter", f64::from(sources::RETRY_AFTER_SECONDS));
        Answer {
            body: body.end(),
            ..Answer::refuse(ErrorCode::RateLimited, message)
        }
    }

    fn store_failed(fault: Fault) -> Answer {
        Answer {
            cause: Some(fault.to_string()),
            ..Answer::refuse(ErrorCode::ServerError, STORE_FAILED)
        }
    }
}

impl From<Fault> for Answer {
    fn from(fault: Fault) -> Answer {
        Answer::store_failed(fault)
    }
}

/// Work the engine wants run off the event loop (a large payload's crypto);
/// its result is handed back with [`Machine::resume`] as [`Got::Work`].
pub(crate) struct Work(Box<dyn FnOnce() -> Box<dyn Any + Send> + Send>);

impl Work {
    pub(crate) fn run(self) -> Box<dyn Any + Send> {
        (self.0)()
    }
}

/// What the machine waits for.
pub(crate) enum Need {
    Store(Op),
    Work(Work),
    /// `URL.canParse` of each (a sealed outcome's `artifactUrl`).
    Urls(Vec<String>),
}

/// What the machine is handed back (one at a time, moved once: not boxed).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Got {
    Store(Result<Output, Fault>),
    Work(Box<dyn Any + Send>),
    Urls(Vec<bool>),
}

/// Where a machine stands.
pub(crate) enum Step<'a> {
    Answer(&'a Answer),
    Store(&'a Op),
    Work,
    Urls(&'a [String]),
}

#[derive(Default)]
struct Io {
    need: RefCell<Option<Need>>,
    got: RefCell<Option<Got>>,
}

/// A suspension point: hands `need` out, then waits to be given what it asked for.
struct Ask<'a> {
    io: &'a Io,
    need: Option<Need>,
}

impl Future for Ask<'_> {
    type Output = Got;

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Got> {
        if let Some(need) = self.need.take() {
            *self.io.need.borrow_mut() = Some(need);
            return Poll::Pending;
        }
        match self.io.got.borrow_mut().take() {
            Some(got) => Poll::Ready(got),
            None => Poll::Pending,
        }
    }
}

/// One request in progress.
pub(crate) struct Machine {
    /// `None` once answered: what the request held is freed with it.
    future: Option<Pin<Box<dyn Future<Output = Answer>>>>,
    io: Rc<Io>,
    waiting: Option<Need>,
    answer: Option<Answer>,
    ops: usize,
}

impl Machine {
    /// Start serving `request` for `site`; it runs until its first need.
    pub(crate) fn start(site: Arc<Site>, request: Request) -> Machine {
        let io = Rc::new(Io::default());
        let inner = Rc::clone(&io);
        let future = Box::pin(async move {
            let cx = Cx {
                site: &site,
                io: &inner,
                req: &request,
            };
            match serve(&cx).await {
                Ok(answer) | Err(answer) => answer,
            }
        });
        let mut machine = Machine {
            future: Some(future),
            io,
            waiting: None,
            answer: None,
            ops: 0,
        };
        machine.poll();
        machine
    }

    /// The answer to a request for an endpoint this engine does not serve.
    pub(crate) fn unknown_endpoint() -> Answer {
        Answer::refuse(ErrorCode::NotFound, UNKNOWN_ENDPOINT)
    }

    pub(crate) fn step(&self) -> Step<'_> {
        if let Some(answer) = &self.answer {
            return Step::Answer(answer);
        }
        match &self.waiting {
            Some(Need::Store(op)) => Step::Store(op),
            Some(Need::Work(_)) => Step::Work,
            Some(Need::Urls(urls)) => Step::Urls(urls),
            // Unreachable: `poll` leaves either an answer or a need.
            None => Step::Work,
        }
    }

    /// The answer, once there is one.
    #[cfg(test)]
    pub(crate) fn answer(&self) -> Option<&Answer> {
        self.answer.as_ref()
    }

    /// The answer, moved out.
    pub(crate) fn take_answer(&mut self) -> Option<Answer> {
        self.answer.take()
    }

    /// The work the machine waits for, to run elsewhere; feed its result back.
    pub(crate) fn take_work(&mut self) -> Option<Work> {
        match self.waiting.take() {
            Some(Need::Work(work)) => Some(work),
            other => {
                self.waiting = other;
                None
            }
        }
    }

    /// Hand back what the machine waits for. Anything but the kind it asked
    /// for (a caller's mistake) ends the request with `server-error`.
    pub(crate) fn resume(&mut self, got: Got) {
        if self.answer.is_some() {
            return;
        }
        let fits = matches!(
            (&self.waiting, &got),
            (Some(Need::Store(_)), Got::Store(_))
                | (Some(Need::Work(_)) | None, Got::Work(_))
                | (Some(Need::Urls(_)), Got::Urls(_))
        );
        if !fits {
            self.finish(Answer::store_failed(Fault::Unasked));
            return;
        }
        self.waiting = None;
        *self.io.got.borrow_mut() = Some(got);
        self.poll();
    }

    /// The answer, and what the request held freed.
    fn finish(&mut self, answer: Answer) {
        self.answer = Some(answer);
        self.future = None;
        self.waiting = None;
    }

    fn poll(&mut self) {
        let Some(future) = self.future.as_mut() else {
            return;
        };
        let mut cx = Context::from_waker(Waker::noop());
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(answer) => self.finish(answer),
            Poll::Pending => {
                let need = self.io.need.borrow_mut().take();
                if matches!(need, Some(Need::Store(_))) {
                    self.ops += 1;
                }
                if need.is_none() || self.ops > MAX_OPS {
                    self.finish(Answer::store_failed(Fault::TooManyOps));
                } else {
                    self.waiting = need;
                }
            }
        }
    }
}

// ---------------------------------------------------------------- the endpoints

/// A refusal or a finished answer short-circuits with `?`.
type Flow<T> = Result<T, Answer>;

struct Cx<'a> {
    site: &'a Site,
    io: &'a Io,
    req: &'a Request,
}

/// A body that passed its schema: the document and the validated output.
struct Body {
    doc: Doc,
    out: Out,
}

impl Body {
    fn field(&self, key: &str) -> Option<&Out> {
        self.out.field(key)
    }

    /// A string field; lone surrogates read as U+FFFD (no id holds one).
    fn text(&self, key: &str) -> &str {
        self.field(key)
            .and_then(|v| v.as_js_str(&self.doc))
            .map_or("", JsStr::as_str)
    }

    fn js_text(&self, key: &str) -> Option<&JsStr> {
        self.field(key).and_then(|v| v.as_js_str(&self.doc))
    }

    fn json(&self, key: &str) -> String {
        let mut out = String::new();
        match self.field(key) {
            Some(value) => value.write_json(&self.doc, &mut out),
            None => out.push_str("null"),
        }
        out
    }

    fn number(&self, key: &str) -> f64 {
        match self.field(key) {
            Some(Out::Num(n)) => *n,
            _ => f64::NAN,
        }
    }

    fn refs(&self, key: &str) -> Vec<ops::Ref> {
        let Some(Out::Arr(items)) = self.field(key) else {
            return Vec::new();
        };
        let text = |item: &Out, key: &str| {
            item.field(key)
                .and_then(|v| v.as_js_str(&self.doc))
                .cloned()
                .unwrap_or_else(|| JsStr::new(""))
        };
        items
            .iter()
            .map(|item| ops::Ref {
                job_id: text(item, "jobId"),
                lease_id: text(item, "leaseId"),
            })
            .collect()
    }
}

impl Cx<'_> {
    /// The request's source as kept (a keyed hash; see [`Request::source`]).
    fn source(&self) -> String {
        let named = self.req.source.as_deref().unwrap_or(sources::UNNAMED);
        self.site.sources.hash(named)
    }

    async fn ask(&self, need: Need) -> Got {
        Ask {
            io: self.io,
            need: Some(need),
        }
        .await
    }

    async fn op(&self, op: Op) -> Flow<Output> {
        match self.ask(Need::Store(op)).await {
            Got::Store(result) => result.map_err(Answer::from),
            _ => Err(Answer::store_failed(Fault::Unanswered)),
        }
    }

    /// Run `f` here, or off the event loop when `heavy`.
    async fn work<T: Send + 'static>(
        &self,
        heavy: bool,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Flow<T> {
        if !heavy {
            return Ok(f());
        }
        let work = Work(Box::new(move || Box::new(f()) as Box<dyn Any + Send>));
        match self.ask(Need::Work(work)).await {
            Got::Work(done) => done
                .downcast::<T>()
                .map(|t| *t)
                .map_err(|_| Answer::store_failed(Fault::WorkMismatch)),
            _ => Err(Answer::store_failed(Fault::WorkUnanswered)),
        }
    }

    /// The body against its endpoint's schema, or the refusal its failure
    /// gets after the signature checks. From HTTP, a body that is not JSON
    /// or declares another protocol version is answered here and now.
    fn inspect(&self) -> Flow<Result<Body, Answer>> {
        let endpoint = self.req.endpoint;
        let schema_failure =
            || Answer::refuse(ErrorCode::BadRequest, endpoint.schema_failure_message());
        let Some(text) = self.req.body.as_deref() else {
            return Ok(Err(schema_failure()));
        };
        // Request schemas hold no URLs; only a sealed outcome's do.
        match wire::inspect_request(endpoint, text, &|_| false) {
            Inspection::Ok { doc, body, .. } => Ok(Ok(Body { doc, out: body })),
            failed @ (Inspection::Json { .. } | Inspection::Version(_))
                if self.req.mode == Mode::Http =>
            {
                Err(failed
                    .error(endpoint)
                    .map_or_else(schema_failure, Answer::wire))
            }
            // Over one of our bounds: the message names the field and the bound.
            failed @ Inspection::Schema { .. } => Ok(Err(failed
                .error(endpoint)
                .map_or_else(schema_failure, Answer::wire))),
            _ => Ok(Err(schema_failure())),
        }
    }
}

async fn serve(cx: &Cx<'_>) -> Flow<Answer> {
    let body = cx.inspect()?;
    if cx.req.endpoint == Endpoint::Pair {
        return pair(cx, &body?).await;
    }
    let (runner, body) = authenticate(cx, body).await?;
    match cx.req.endpoint {
        Endpoint::Claim => claim(cx, &runner, &body).await,
        Endpoint::Fetch => fetch(cx, &runner, &body).await,
        Endpoint::Heartbeat => heartbeat(cx, &runner, &body).await,
        Endpoint::Result => result(cx, &runner, &body).await,
        Endpoint::Release => release(cx, &runner, &body).await,
        Endpoint::Pair => Err(Machine::unknown_endpoint()),
    }
}

/// A signed request's runner, in this order: a signature at all, the runner
/// (known or read), the signature against the identity pinned at approval
/// (one message for stale and forged, so a forger learns nothing), revoked,
/// then the schema (so a stranger probing learns nothing of the wire
/// format), then the body naming the signer.
async fn authenticate(cx: &Cx<'_>, body: Result<Body, Answer>) -> Flow<(ops::Runner, Body)> {
    let sig = cx
        .req
        .signature
        .as_ref()
        .filter(|s| {
            !s.runner_id.is_empty()
                && !s.signature.is_empty()
                && keys::is_positive_safe_integer(s.issued_at)
        })
        .ok_or_else(|| Answer::refuse(ErrorCode::Unauthorized, NOT_SIGNED))?;
    // Only a request whose own work re-reads the runner may skip the read.
    let rereads = cx.req.rereads && body.is_ok() && cx.req.endpoint != Endpoint::Release;
    let runner = match rereads.then(|| cx.site.known(&sig.runner_id)).flatten() {
        Some(known) => known,
        None => {
            let read = match cx
                .op(Op::Runner {
                    runner_id: sig.runner_id.clone(),
                })
                .await?
            {
                Output::Runner(runner) => runner,
                _ => return Err(mismatch("runner")),
            };
            if cx.req.rereads {
                cx.site.remember(&sig.runner_id, read.as_ref());
            }
            read.ok_or_else(|| Answer::refuse(ErrorCode::Unauthorized, NOT_RECOGNISED))?
        }
    };
    let (endpoint, signed_body) = match &cx.req.signed {
        Some((endpoint, text)) => (endpoint.as_str(), text.as_str()),
        None => (
            cx.req.endpoint.as_str(),
            cx.req.body.as_deref().unwrap_or(""),
        ),
    };
    let key = signing::pinned_key(&runner.device.identity);
    if signing::verify_request(
        key.as_ref(),
        endpoint,
        signed_body,
        sig,
        cx.req.now,
        signing::MAX_CLOCK_SKEW_MS,
    )
    .is_some()
    {
        return Err(Answer::refuse(ErrorCode::Unauthorized, BAD_SIGNATURE));
    }
    if runner.revoked {
        return Err(Answer::refuse(ErrorCode::Revoked, REVOKED));
    }
    let body = body?;
    // Every signed body names its runner, which must be the signer.
    if !body.js_text("runnerId").is_some_and(|id| id.is(&runner.id)) {
        return Err(Answer::refuse(ErrorCode::Unauthorized, OTHER_RUNNER));
    }
    Ok((runner, body))
}

/// An operation's output that is not the one it returns (our own store's bug).
fn mismatch(op: &'static str) -> Answer {
    Answer::store_failed(Fault::Mismatch(op))
}

/// The refusal for a runner its store read again with the request's work.
fn check_fresh(cx: &Cx<'_>, runner: &ops::Runner, fresh: ops::Fresh) -> Flow<()> {
    match fresh {
        None => Ok(()),
        Some(None) => {
            cx.site.remember(&runner.id, None);
            Err(Answer::refuse(ErrorCode::Unauthorized, NOT_RECOGNISED))
        }
        Some(Some(r)) if r.revoked => {
            cx.site.remember(&runner.id, None);
            Err(Answer::refuse(ErrorCode::Revoked, REVOKED))
        }
        Some(Some(_)) => Ok(()),
    }
}

async fn claim(cx: &Cx<'_>, runner: &ops::Runner, body: &Body) -> Flow<Answer> {
    let now = cx.req.now;
    let mut matched = Vec::new();
    if let Some(Out::Arr(items)) = body.field("capabilities") {
        for item in items {
            let text = |key: &str| {
                item.field(key)
                    .and_then(|v| v.as_js_str(&body.doc))
                    .map_or_else(String::new, |s| s.as_str().to_owned())
            };
            matched.push(crate::store::ClaimCapability {
                kind: text("kind"),
                backend_id: text("backendId"),
                offer_scope: text("offerScope"),
            });
        }
    }
    let capabilities = body.json("capabilities");
    let max = body.number("max");
    let team = matched.iter().any(|c| c.offer_scope == "team");
    let ask = cx
        .site
        .idle_ask(false, (&capabilities, max.to_bits()), team, runner, now);
    if ask.as_ref().is_some_and(|ask| ask.answered) {
        return claim_answer(&[], cx.site.keys.key_id(), cx.site.lease_ms, now).map(Answer::ok);
    }
    // The capabilities of this request, not the stored ones: a daemon that
    // just lost a backend must not be handed work for it.
    let out = cx
        .op(Op::Claim {
            runner_id: runner.id.clone(),
            runner_owner: runner.owner.clone(),
            capabilities,
            matched,
            max,
            lease_ms: cx.site.lease_ms,
            now,
        })
        .await?;
    let Output::Claimed {
        runner: fresh,
        jobs,
        wake_at,
    } = out
    else {
        return Err(mismatch("claim"));
    };
    check_fresh(cx, runner, fresh)?;
    if let (Some(ask), Some(wake_at), true) = (&ask, wake_at, jobs.is_empty()) {
        cx.site.idle_claimed(ask, runner, wake_at, now);
    }
    cx.site.count(|m| {
        for job in jobs.iter().filter(|job| job.attempts == 1.0) {
            m.record_queue_wait(&job.id, now - job.created_at);
        }
    });
    Ok(Answer::ok(claim_answer(
        &jobs,
        cx.site.keys.key_id(),
        cx.site.lease_ms,
        now,
    )?))
}

/// `{"jobs":[stub…],"leaseMs":…}`: each stub exactly the fields the daemon
/// parses (never `audienceAllow`), in the wire's key order.
fn claim_answer(jobs: &[ops::Stub], site_id: &str, lease_ms: f64, now: f64) -> Flow<String> {
    let mut stubs = String::from("[");
    for job in jobs {
        let Some(lease) = &job.lease else {
            return Err(Answer::store_failed(Fault::NoLease {
                job_id: job.id.clone(),
            }));
        };
        if stubs.len() > 1 {
            stubs.push(',');
        }
        let mut stub = Obj::new();
        stub.str("id", &job.id)
            .str("kind", &job.kind)
            .str("audience", &job.audience)
            .str("owner", &job.owner)
            .str("site", site_id);
        if let Some(purpose) = &job.purpose {
            stub.raw("purpose", purpose);
        }
        let deadline = rules::deadline_for(job.deadline_at, job.claimable_at, job.ttl_ms, now);
        let mut held = Obj::new();
        held.str("id", &lease.id)
            .str("runnerId", &lease.runner_id)
            .num("expiresAt", lease.expires_at);
        stub.str("sizeClass", &job.size_class)
            .raw("streaming", "false")
            .num("deadlineAt", deadline)
            .raw("lease", &held.end());
        stubs.push_str(&stub.end());
    }
    stubs.push(']');
    let mut out = Obj::new();
    out.raw("jobs", &stubs).num("leaseMs", lease_ms);
    Ok(out.end())
}

async fn fetch(cx: &Cx<'_>, runner: &ops::Runner, body: &Body) -> Flow<Answer> {
    let job_id = body.text("jobId");
    let out = cx
        .op(Op::Job {
            runner_id: runner.id.clone(),
            job_id: job_id.to_owned(),
        })
        .await?;
    let Output::Job { runner: fresh, job } = out else {
        return Err(mismatch("job"));
    };
    check_fresh(cx, runner, fresh)?;
    // One answer for "no such job", "not yours" and "a lease you no longer hold".
    let job = job
        .filter(|job| {
            rules::lease_check(
                job.lease.as_ref(),
                body.text("leaseId"),
                &runner.id,
                cx.req.now,
            )
            .fetch_held
        })
        .ok_or_else(|| Answer::refuse(ErrorCode::NotFound, NO_LEASE))?;
    let heavy = job.ciphertext_chars > payload::ASYNC_CRYPTO_THRESHOLD;
    let at_rest = job
        .envelope
        .ok_or_else(|| Answer::refuse(ErrorCode::ServerError, UNOPENABLE_PAYLOAD))?;
    let inputs = reseal::Inputs {
        site: Arc::clone(&cx.site.keys),
        job_id: job_id.to_owned(),
        at_rest,
        created_at: job.created_at,
        device: runner.device.clone(),
    };
    // Written with the reseal: a megabyte answer is never copied again.
    let answer = cx
        .work(heavy, move || {
            inputs
                .reseal()
                .map(|sealed| sealed.map(|e| payload::fetch_answer(&e)))
        })
        .await?;
    match answer {
        Ok(Some(text)) => Ok(Answer::ok(text)),
        Ok(None) => Err(Answer::refuse(ErrorCode::ServerError, UNOPENABLE_PAYLOAD)),
        // The device's pinned encryption key is not a key anything can be
        // sealed to (signed, so it passed pairing): the client's key, a 400.
        Err(_) => Err(Answer::refuse(ErrorCode::BadRequest, UNSEALABLE_DEVICE)),
    }
}

async fn heartbeat(cx: &Cx<'_>, runner: &ops::Runner, body: &Body) -> Flow<Answer> {
    let now = cx.req.now;
    let capabilities = body.json("capabilities");
    let daemon_version = body.text("daemonVersion");
    let leases = body.refs("activeLeases");
    let ask = leases.is_empty().then(|| {
        let shape = (&capabilities, daemon_version);
        cx.site.idle_ask(true, shape, false, runner, now)
    });
    let ask = ask.flatten();
    if ask.as_ref().is_some_and(|ask| ask.answered) {
        return Ok(heartbeat_answer(cx, &[], &[]));
    }
    let out = cx
        .op(Op::Heartbeat {
            runner_id: runner.id.clone(),
            capabilities,
            daemon_version: daemon_version.to_owned(),
            leases,
            lease_ms: cx.site.lease_ms,
            now,
        })
        .await?;
    let Output::Heartbeat {
        runner: fresh,
        lost,
        cancel,
        seen_at,
    } = out
    else {
        return Err(mismatch("heartbeat"));
    };
    check_fresh(cx, runner, fresh)?;
    if let (Some(ask), Some(seen_at), true) = (&ask, seen_at, lost.is_empty() && cancel.is_empty())
    {
        cx.site.idle_beat(ask, runner, seen_at);
    }
    Ok(heartbeat_answer(cx, &cancel, &lost))
}

fn heartbeat_answer(cx: &Cx<'_>, cancel: &[ops::Ref], lost: &[ops::Ref]) -> Answer {
    let mut out = Obj::new();
    out.raw("sites", &cx.site.sites_json)
        .raw("awaitingConsent", "[]")
        .with("cancel", |out| ops::push_refs(out, cancel))
        .with("lost", |out| ops::push_refs(out, lost))
        .num("serverTime", cx.req.now);
    Answer::ok(out.end())
}

/// A device's result, opened: the plaintext, or why it did not open.
type Opened = Result<JsStr, OpenFailure>;

/// Whether an accepted result is one, and what to store with it.
struct Acceptance {
    tag: String,
    outcome: String,
    provenance: String,
}

async fn result(cx: &Cx<'_>, runner: &ops::Runner, body: &Body) -> Flow<Answer> {
    let now = cx.req.now;
    let job_id = body.text("jobId");
    let lease_id = body.text("leaseId");
    let disposition = body.text("disposition");
    let sealed = sealed_envelope(body);
    let heavy = sealed.ciphertext.len() > payload::ASYNC_CRYPTO_THRESHOLD;
    // The result is sealed to the job id it names, so it opens before the
    // job is read; as a private job's (the common case), a store that can
    // completes it in the same call as it reads the job.
    let (site, id, identity) = (
        Arc::clone(&cx.site.keys),
        job_id.to_owned(),
        runner.device.identity.clone(),
    );
    let opened: Opened = cx
        .work(heavy, move || {
            crate::result::open_result(&site, &sealed, &id, &identity)
        })
        .await?;
    let private = accept(cx, &opened, disposition, runner, "private").await?;
    let out = match &private {
        Ok(accepted) => {
            cx.op(Op::ResultFor {
                runner_id: runner.id.clone(),
                job_id: job_id.to_owned(),
                lease_id: lease_id.to_owned(),
                audience: "private".into(),
                outcome: accepted.outcome.clone(),
                provenance: accepted.provenance.clone(),
                now,
            })
            .await?
        }
        Err(_) => {
            cx.op(Op::Job {
                runner_id: runner.id.clone(),
                job_id: job_id.to_owned(),
            })
            .await?
        }
    };
    let (fresh, accepted, job) = match out {
        Output::ResultFor {
            runner,
            accepted,
            job,
        } => (runner, accepted, job),
        Output::Job { runner, job } => (runner, None, job),
        _ => return Err(mismatch("resultFor")),
    };
    check_fresh(cx, runner, fresh)?;
    if let Some((state, created_at)) = accepted {
        cx.site
            .count(|m| m.record_job_done(job_id, now - created_at));
        return Ok(Answer::ok(result_answer(true, false, &state)));
    }
    let job = job.ok_or_else(|| Answer::refuse(ErrorCode::NotFound, UNKNOWN_JOB))?;
    // A live lease answers only to the runner it was granted to, and only
    // until it expires; refused with the store's own non-holder answer.
    if rules::lease_check(job.lease.as_ref(), lease_id, &runner.id, now).result_refused {
        return Ok(Answer::ok(result_answer(false, false, &job.state)));
    }
    let accepted = if job.audience == "private" {
        private
    } else {
        accept(cx, &opened, disposition, runner, &job.audience).await?
    };
    let accepted = accepted.map_err(|why| Answer::refuse(ErrorCode::BadRequest, why))?;
    let out = cx
        .op(Op::Complete {
            job_id: job_id.to_owned(),
            runner_id: runner.id.clone(),
            // The holder is the grant: any paired runner presenting the live
            // lease id and a result sealed with its own key is accepted.
            lease_id: lease_id.to_owned(),
            outcome_tag: accepted.tag,
            outcome: accepted.outcome,
            provenance: accepted.provenance,
            now,
        })
        .await?;
    let Output::Completed {
        accepted,
        duplicate,
        state,
    } = out
    else {
        return Err(mismatch("complete"));
    };
    if accepted && !duplicate {
        cx.site
            .count(|m| m.record_job_done(job_id, now - job.created_at));
    }
    let state = state.unwrap_or(job.state);
    Ok(Answer::ok(result_answer(accepted, duplicate, &state)))
}

/// The result's envelope as the request carries it.
fn sealed_envelope(body: &Body) -> SealedEnvelope {
    let envelope = body.field("envelope");
    let text = |key: &str| {
        envelope
            .and_then(|e| e.field(key))
            .and_then(|v| v.as_js_str(&body.doc))
            .map_or_else(String::new, |s| s.as_str().to_owned())
    };
    SealedEnvelope {
        ciphertext: text("ciphertext"),
        recipient_key_id: text("recipientKeyId"),
        sender_key_id: text("senderKeyId"),
        direction: text("direction"),
        deadline_at: match envelope.and_then(|e| e.field("deadlineAt")) {
            Some(Out::Num(n)) => *n,
            _ => f64::NAN,
        },
    }
}

/// A device's opened result accepted for a job of `audience`, or the
/// reference's refusal. An `artifactUrl` in it is checked by Node's own
/// `URL.canParse`, asked for when one is there.
async fn accept(
    cx: &Cx<'_>,
    opened: &Opened,
    disposition: &str,
    runner: &ops::Runner,
    audience: &str,
) -> Flow<Result<Acceptance, &'static str>> {
    let source = crate::result::Source {
        audience,
        runner_id: &runner.id,
        runner_owner: &runner.owner,
    };
    let asked = RefCell::new(Vec::new());
    let first = crate::result::accept(opened, Some(disposition), &source, &|url| {
        asked.borrow_mut().push(url.to_owned());
        false
    });
    let asked = asked.into_inner();
    let accepted = if asked.is_empty() {
        first
    } else {
        let verdicts = match cx.ask(Need::Urls(asked.clone())).await {
            Got::Urls(verdicts) => verdicts,
            _ => return Err(Answer::store_failed(Fault::Urls)),
        };
        crate::result::accept(opened, Some(disposition), &source, &|url| {
            asked
                .iter()
                .position(|u| u == url)
                .and_then(|at| verdicts.get(at).copied())
                .unwrap_or(false)
        })
    };
    Ok(accepted.and_then(|a| {
        Ok(Acceptance {
            outcome: a.outcome_json(),
            provenance: a
                .provenance_json()
                .ok_or("the accepted result could not be written")?,
            tag: a.tag,
        })
    }))
}

/// `{"accepted":…[,"duplicate":true],"state":…}`; `state` is JSON text.
fn result_answer(accepted: bool, duplicate: bool, state: &str) -> String {
    let mut out = String::with_capacity(64);
    out.push_str(if accepted {
        "{\"accepted\":true"
    } else {
        "{\"accepted\":false"
    });
    if duplicate {
        out.push_str(",\"duplicate\":true");
    }
    out.push_str(",\"state\":");
    out.push_str(state);
    out.push('}');
    out
}

async fn release(cx: &Cx<'_>, runner: &ops::Runner, body: &Body) -> Flow<Answer> {
    let now = cx.req.now;
    // A cancel request outlives a release in the store (it is keyed by job,
    // and only a completion clears it), so the job would go back to the
    // queue and the request reach whichever runner claims it next. The
    // owner asked for a cancel: a released job that was asked to stop ends
    // canceled instead.
    let Output::Refs(pending) = cx
        .op(Op::CancelRequests {
            runner_id: runner.id.clone(),
        })
        .await?
    else {
        return Err(mismatch("cancelRequests"));
    };
    let Output::Ids(released) = cx
        .op(Op::Release {
            runner_id: runner.id.clone(),
            leases: body.refs("leases"),
            reason: body.text("reason").to_owned(),
            now,
        })
        .await?
    else {
        return Err(mismatch("release"));
    };
    let asked: Vec<JsStr> = released
        .iter()
        .filter(|id| pending.iter().any(|r| &r.job_id == *id))
        .cloned()
        .collect();
    if !asked.is_empty() {
        cx.op(Op::Cancel {
            job_ids: asked,
            now,
        })
        .await?;
    }
    // The daemon's own audience rules refused these jobs.
    if body.text("reason") == "refused" {
        let refused = body.refs("leases").len() as u64;
        cx.site
            .count(|m| m.record_refusals(Refusal::Audience, refused));
    }
    let mut out = Obj::new();
    out.raw("released", &ops::json_list(&released));
    Ok(Answer::ok(out.end()))
}

async fn pair(cx: &Cx<'_>, body: &Body) -> Flow<Answer> {
    if body.text("action") == "start" {
        pair_start(cx, body).await
    } else {
        pair_poll(cx, body).await
    }
}

async fn pair_start(cx: &Cx<'_>, body: &Body) -> Flow<Answer> {
    let now = cx.req.now;
    let field = |obj: &str, key: &str| {
        body.field(obj)
            .and_then(|o| o.field(key))
            .and_then(|v| v.as_js_str(&body.doc))
    };
    let plain =
        |obj: &str, key: &str| field(obj, key).map_or_else(String::new, |s| s.as_str().to_owned());
    let device = PublicIdentity {
        identity: plain("device", "identity"),
        encryption: plain("device", "encryption"),
        encryption_sig: plain("device", "encryptionSig"),
    };
    // Otherwise a caller could pair someone's identity with an encryption
    // key it holds the secret for, and read everything later sealed to it;
    // and what is kept is exactly the keys, never keys padded with junk.
    if let Some(refusal) = keys::device_identity_refusal(&device) {
        return Err(Answer::refuse(ErrorCode::BadRequest, refusal));
    }
    let device_code = ids::generate_device_code();
    let expires_at = now + cx.site.pairing_ttl_ms;
    // A code a live pairing holds is never handed out twice: approving it
    // would pair whichever device the approver did not mean.
    let mut free = None;
    for _ in 0..USER_CODE_DRAWS {
        let user_code = ids::generate_user_code();
        let Output::Pairing(holder) = cx
            .op(Op::PairingByCode {
                user_code: user_code.clone(),
            })
            .await?
        else {
            return Err(mismatch("pairingByCode"));
        };
        let held = holder
            .is_some_and(|p| p.state.as_deref() == Some("pending") && !expired(p.expires_at, now));
        if !held {
            free = Some(user_code);
            break;
        }
    }
    let user_code = free.ok_or_else(|| Answer::refuse(ErrorCode::ServerError, NO_FREE_CODE))?;
    let empty = JsStr::new("");
    let daemon = |key| field("daemon", key).unwrap_or(&empty);
    let mut record = Obj::new();
    record
        .str("deviceCodeHash", &ids::hash_secret(&device_code))
        .str("userCode", &user_code)
        .raw("state", "\"pending\"")
        .raw("owner", "null")
        .raw("runnerId", "null")
        .raw("collected", "false")
        .js("label", daemon("label"))
        .js("platform", daemon("platform"))
        .js("daemonVersion", daemon("version"))
        .raw("capabilities", &body.json("capabilities"))
        .raw("device", &identity_json(&device))
        .num("expiresAt", expires_at)
        .num("createdAt", now);
    let started = cx
        .op(Op::CreatePairing {
            record: record.end(),
            source: cx.source(),
            now,
        })
        .await?;
    if let Output::Refused = started {
        return Err(Answer::rate_limited(TOO_MANY_PAIRINGS));
    }
    cx.site.count(|m| m.record_pairing(PairingEvent::Started));
    let mut out = Obj::new();
    out.str("deviceCode", &device_code)
        .str("userCode", &user_code)
        .str("verificationUrl", &cx.site.verification_url)
        .num("expiresAt", expires_at)
        .num("pollIntervalMs", cx.site.poll_interval_ms);
    Ok(Answer::ok(out.end()))
}

/// `expiresAt <= now`, as JavaScript compares (a NaN never has).
fn expired(expires_at: f64, now: f64) -> bool {
    expires_at <= now
}

async fn pair_poll(cx: &Cx<'_>, body: &Body) -> Flow<Answer> {
    let source = cx.source();
    let now = cx.req.now;
    if cx.site.sources.spent(&source, now) {
        return Err(Answer::rate_limited(TOO_MANY_UNKNOWN));
    }
    let hash = ids::hash_secret(body.text("deviceCode"));
    let Output::Pairing(pairing) = cx.op(Op::PairingByHash { hash: hash.clone() }).await? else {
        return Err(mismatch("pairingByHash"));
    };
    let pairing = pairing.ok_or_else(|| {
        cx.site.sources.failed(&source, now);
        Answer::refuse(ErrorCode::NotFound, UNKNOWN_DEVICE_CODE)
    })?;
    let status = |s: &str| Answer::ok(format!("{{\"status\":\"{s}\"}}"));
    match pairing.state.as_deref() {
        Some("denied") => Ok(status("denied")),
        Some("pending") if expired(pairing.expires_at, cx.req.now) => {
            cx.site.count(|m| m.record_pairing(PairingEvent::Expired));
            Ok(status("expired"))
        }
        Some("approved") => match (&pairing.runner_id, &pairing.owner, pairing.collected) {
            (Some(runner_id), Some(owner), false) => {
                // The site's keys travel only with an approval, and only once.
                cx.op(Op::ConsumePairing { hash }).await?;
                cx.site.count(|m| m.record_pairing(PairingEvent::Collected));
                Ok(Answer::ok(format!(
                    "{{\"status\":\"approved\",\"runnerId\":{runner_id},\"owner\":{owner},\"sites\":{}}}",
                    cx.site.sites_json
                )))
            }
            _ => Err(Answer::refuse(ErrorCode::NotFound, COLLECTED)),
        },
        _ => Ok(status("pending")),
    }
}

#[cfg(test)]
mod tests;
