//! `NativeMemoryStore`: the Rust store as JS sees it. `ts/memory.ts` wraps it
//! in the reference's async `MemoryStore` interface.
//!
//! Arguments arrive as flat strings and numbers (the wrapper unpacks the JS
//! objects, which V8 does faster than property reads through Node-API), and
//! records leave as JSON text in the layout of `store::out`, which the
//! wrapper parses with one `JSON.parse` and shapes into the reference's
//! record objects.

use std::fmt::Write;

use napi::bindgen_prelude::*;
use napi::JsString;
use napi_derive::napi;

use super::crypto::{invalid, seal_error};
use super::keyring::{JsPayloadRefusal, SiteKeyring};
use super::metrics::JsStoreCounts;
use super::tasks::PreparedPayload;
use crate::store::durable::{Durable, Sync};
use crate::store::{
    split_json_array, ClaimArgs, ClaimCapability, CompleteArgs, EnvelopeInput, Holder, JobInput,
    JobRef, LeaseRef, Store, StoreOptions, DEFAULT_TTL_MS,
};

/// Above this, an answer that can list every job (a sweep, `allJobs`) goes to
/// JS as several JSON arrays: one string may not exceed what V8 and Node-API
/// accept (about 512 M characters; Node-API refuses 2 GiB with `InvalidArg`,
/// after the sweep has already changed the jobs).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// A whole answer as one JSON array text, or several when it is too large.
fn chunked(json: String) -> Either<String, Vec<String>> {
    if json.len() <= MAX_ANSWER_BYTES {
        Either::A(json)
    } else {
        Either::B(split_json_array(&json, MAX_ANSWER_BYTES))
    }
}

/// Pairs `[jobId0, leaseId0, jobId1, leaseId1, …]` into lease refs.
fn lease_refs(flat: Vec<String>) -> Vec<LeaseRef> {
    let mut refs = Vec::with_capacity(flat.len() / 2);
    let mut items = flat.into_iter();
    while let (Some(job_id), Some(lease_id)) = (items.next(), items.next()) {
        refs.push(LeaseRef { job_id, lease_id });
    }
    refs
}

/// A JSON text from the shell (`JSON.stringify`'s), or `null` when it is
/// not one: what a record holds in its place.
fn json_or_null(json: &str) -> &str {
    if crate::json::parse(json).is_ok() {
        json
    } else {
        "null"
    }
}

/// A store's refusal as a JS `Error` with its message.
fn failed(error: impl std::fmt::Display) -> Error {
    Error::from_reason(error.to_string())
}

/// `text` as a JS string. Most answers are pure ASCII (ids, base64url,
/// numbers); V8 takes those as Latin-1 without a UTF-8 decoding pass.
pub(super) fn js_text<'env>(env: &'env Env, text: &str) -> Result<JsString<'env>> {
    if super::LATIN1_IS_CHEAP && text.is_ascii() {
        env.create_string_latin1(text.as_bytes())
    } else {
        env.create_string(text)
    }
}

#[napi]
pub struct NativeMemoryStore {
    inner: Store,
    /// The file the store is written through to, for a durable store.
    durable: Option<Durable>,
    /// Reused for every record-bearing answer. A fresh multi-kilobyte String
    /// per call, freed between two long-lived allocations, fragments the
    /// heap by about a kilobyte per stored job (measured).
    out: String,
}

impl NativeMemoryStore {
    /// Write what the last call changed to the durable file (nothing for a
    /// store in memory only) before the call answers.
    pub(super) fn persist(&mut self) -> Result<()> {
        match self.durable.as_mut() {
            Some(file) => file.flush(&mut self.inner).map_err(failed),
            None => Ok(()),
        }
    }

    /// Hand the answer built in `out` to JS as a string.
    fn send<'env>(&mut self, env: &'env Env) -> Result<JsString<'env>> {
        let text = js_text(env, &self.out);
        self.reset_out();
        text
    }

    fn reset_out(&mut self) {
        self.out.clear();
        if self.out.capacity() > 1 << 20 {
            // A huge answer (allJobs) does not pin its buffer for good.
            self.out = String::new();
        }
    }

    fn send_job<'env>(
        &mut self,
        env: &'env Env,
        r: Option<JobRef>,
    ) -> Result<Option<JsString<'env>>> {
        match r {
            Some(r) => {
                self.out.clear();
                self.inner.push_job_json(r, &mut self.out);
                self.send(env).map(Some)
            }
            None => Ok(None),
        }
    }

    fn send_jobs<'env>(&mut self, env: &'env Env, refs: &[JobRef]) -> Result<JsString<'env>> {
        self.out.clear();
        self.inner.push_jobs_json(refs, &mut self.out);
        self.send(env)
    }
}

impl NativeMemoryStore {
    /// One of the engine's operations, performed here and written through
    /// to the durable file before the engine sees its result.
    pub(super) fn run_op(
        &mut self,
        op: &crate::engine::Op,
    ) -> std::result::Result<crate::engine::Output, crate::engine::Fault> {
        let output = crate::engine::native::run(&mut self.inner, op)?;
        if op.writes() {
            self.persist()
                .map_err(|e| crate::engine::Fault::Store(e.reason.clone()))?;
        }
        Ok(output)
    }

    /// `create`, answering the new record's row (also `enqueue`'s).
    pub(super) fn create_job<'env>(
        &mut self,
        env: &'env Env,
        input: JobInput<'_>,
        now: f64,
    ) -> Result<JsString<'env>> {
        let r = self.inner.create(input, now);
        self.persist()?;
        self.out.clear();
        self.inner.push_job_json(r, &mut self.out);
        self.send(env)
    }
}

#[napi]
impl NativeMemoryStore {
    /// A store in memory, or, given `path`, one written through to that
    /// SQLite file and read back from it (see `crate::store::durable`);
    /// `fullSync` fsyncs every commit (durable across a power loss).
    #[napi(constructor, catch_unwind)]
    pub fn new(
        default_ttl_ms: Option<f64>,
        retention_ms: Option<f64>,
        path: Option<String>,
        full_sync: Option<bool>,
    ) -> Result<Self> {
        let options = StoreOptions {
            default_ttl_ms: default_ttl_ms.unwrap_or(DEFAULT_TTL_MS),
            retention_ms,
        };
        let (inner, durable) = match path {
            Some(path) => {
                let sync = if full_sync == Some(true) {
                    Sync::Full
                } else {
                    Sync::Normal
                };
                let (file, store) =
                    Durable::open(std::path::Path::new(&path), options, sync).map_err(failed)?;
                (store, Some(file))
            }
            None => (Store::new(options), None),
        };
        Ok(NativeMemoryStore {
            inner,
            durable,
            out: String::new(),
        })
    }

    /// Write anything pending and close the file (releasing it for another
    /// process). Later changes throw. Nothing for a store in memory.
    #[napi(catch_unwind)]
    pub fn close(&mut self) -> Result<()> {
        match self.durable.as_mut() {
            Some(file) => file.close(&mut self.inner).map_err(failed),
            None => Ok(()),
        }
    }

    /// From now on records carry `[]` in place of a large sealed envelope
    /// (16 KiB of ciphertext and up); `sealedEnvelope(id)` reads it. A 1 MB prompt's envelope would
    /// otherwise cross into JS on every create, claim, get and complete,
    /// although only the fetch handler reads it.
    #[napi(catch_unwind)]
    pub fn omit_envelopes(&mut self) {
        self.inner.set_omit_envelopes(true);
    }

    /// A job's sealed envelope as the object `seal` produces (keys in its
    /// order), or nothing for an unknown job or an unsealed envelope. Built
    /// here rather than sent as JSON: parsing a 1.8 MB text costs more than
    /// the copy into a V8 string.
    #[napi(catch_unwind)]
    pub fn sealed_envelope<'env>(
        &mut self,
        env: &'env Env,
        id: String,
    ) -> Result<Option<Object<'env>>> {
        let Some(r) = self.inner.get(&id) else {
            return Ok(None);
        };
        self.out.clear();
        let Some(parts) = self.inner.sealed_envelope_parts(r, &mut self.out) else {
            return Ok(None);
        };
        let ciphertext = js_text(env, &self.out)?;
        let mut obj = Object::new(env)?;
        obj.set("ciphertext", ciphertext)?;
        obj.set("recipientKeyId", parts.recipient_key_id)?;
        obj.set("senderKeyId", parts.sender_key_id)?;
        obj.set("direction", parts.direction)?;
        obj.set("deadlineAt", parts.deadline_at)?;
        self.reset_out();
        Ok(Some(obj))
    }

    /// What the store counts for the metrics: jobs by state (kept with the
    /// indexes), runners by state and pending pairings at `now` (one pass
    /// over each, one per device and at most 4,096).
    #[napi(catch_unwind)]
    pub fn store_counts(&self, now: f64, liveness_ms: f64) -> JsStoreCounts {
        let people = &self.inner.people;
        crate::metrics::StoreCounts {
            ok: true,
            jobs: Some(self.inner.state_counts()),
            runners: Some(people.runner_counts(now, liveness_ms)),
            pairings_pending: Some(people.pending_pairings(now)),
        }
        .into()
    }

    /// `create`. The envelope comes either as its five parts (the shape `seal`
    /// produces) or, for any other shape, as `envelopeJson`.
    /// The job's fields come as arguments, as in `enqueue`, rather than as
    /// one `EnqueuedJob` object: napi reading the object's eight fields
    /// measured 12-20% slower per `create` (0.6-1.1 µs of 5-6 µs).
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind)]
    pub fn create<'env>(
        &mut self,
        id: String,
        kind: String,
        size_class: String,
        owner: String,
        audience: Option<String>,
        purpose_json: Option<String>,
        audience_allow: Option<Vec<String>>,
        depends_on: Option<Vec<String>>,
        ttl_ms: Option<f64>,
        deadline_at: Option<f64>,
        envelope_parts: Option<Vec<String>>,
        envelope_deadline_at: f64,
        envelope_json: Option<String>,
        now: f64,
        env: &'env Env,
    ) -> Result<JsString<'env>> {
        let envelope = match (envelope_parts.as_deref(), &envelope_json) {
            (Some([ciphertext, recipient_key_id, sender_key_id, direction]), _) => {
                EnvelopeInput::Sealed {
                    ciphertext,
                    recipient_key_id,
                    sender_key_id,
                    direction,
                    deadline_at: envelope_deadline_at,
                }
            }
            (_, Some(json)) => EnvelopeInput::Raw(json),
            _ => EnvelopeInput::Raw("null"),
        };
        let mut job = JsEnqueuedJob {
            id,
            owner,
            audience,
            purpose_json,
            audience_allow,
            depends_on,
            ttl_ms,
            deadline_at,
        };
        self.create_job(env, job.input(&kind, envelope, &size_class), now)
    }

    #[napi(catch_unwind)]
    pub fn get<'env>(&mut self, env: &'env Env, id: String) -> Result<Option<JsString<'env>>> {
        let r = self.inner.get(&id);
        self.send_job(env, r)
    }

    /// `claim`; `capabilities` is flat `[kind, backendId, offerScope, …]`.
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind)]
    pub fn claim<'env>(
        &mut self,
        runner_id: String,
        runner_owner: String,
        capabilities: Vec<String>,
        max: f64,
        lease_ms: f64,
        now: f64,
        env: &'env Env,
    ) -> Result<JsString<'env>> {
        let caps: Vec<ClaimCapability<&str>> = capabilities
            .chunks_exact(3)
            .filter_map(|c| match c {
                [kind, backend_id, offer_scope] => Some(ClaimCapability {
                    kind: kind.as_str(),
                    backend_id: backend_id.as_str(),
                    offer_scope: offer_scope.as_str(),
                }),
                _ => None,
            })
            .collect();
        let claimed = self.inner.claim(&ClaimArgs {
            runner_id: &runner_id,
            runner_owner: &runner_owner,
            capabilities: &caps,
            max,
            lease_ms,
            now,
        });
        self.persist()?;
        self.send_jobs(env, &claimed)
    }

    /// `renewLeases`: per lease ref, the new expiry or `null` (lost).
    #[napi(catch_unwind)]
    pub fn renew_leases(
        &mut self,
        runner_id: String,
        leases: Vec<String>,
        lease_ms: f64,
        now: f64,
    ) -> Result<Vec<Option<f64>>> {
        let refs = lease_refs(leases);
        let renewed = self
            .inner
            .renew_leases_each(&runner_id, &refs, lease_ms, now);
        self.persist()?;
        Ok(renewed)
    }

    #[napi(catch_unwind)]
    pub fn adopt(
        &mut self,
        job_id: String,
        lease_id: String,
        expires_at: f64,
        now: f64,
    ) -> Result<Option<String>> {
        let adopted = self.inner.adopt(&job_id, &lease_id, expires_at, now);
        self.persist()?;
        Ok(adopted.map(|r| self.inner.job_json(r)))
    }

    /// `complete`: JSON `[accepted, duplicate, record | null]`.
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind)]
    pub fn complete<'env>(
        &mut self,
        job_id: String,
        runner_id: String,
        holder_is_lease: bool,
        holder: String,
        outcome_tag: String,
        outcome_json: String,
        provenance_json: String,
        provenance_runner: Option<String>,
        now: f64,
        env: &'env Env,
    ) -> Result<JsString<'env>> {
        let result = self.inner.complete(&CompleteArgs {
            job_id: &job_id,
            runner_id: &runner_id,
            holder: if holder_is_lease {
                Holder::Lease(&holder)
            } else {
                Holder::Runner(&holder)
            },
            outcome_tag: &outcome_tag,
            outcome_json: &outcome_json,
            provenance_json: &provenance_json,
            provenance_runner: provenance_runner.as_deref(),
            now,
        });
        self.persist()?;
        self.out.clear();
        let (accepted, duplicate) = (u8::from(result.accepted), u8::from(result.duplicate));
        let _ = write!(self.out, "[{accepted},{duplicate},");
        match result.job {
            Some(r) => self.inner.push_job_json(r, &mut self.out),
            None => self.out.push_str("null"),
        }
        self.out.push(']');
        self.send(env)
    }

    /// `release`: the positions of the lease refs that were released.
    #[napi(catch_unwind)]
    pub fn release(
        &mut self,
        runner_id: String,
        leases: Vec<String>,
        refused: bool,
        now: f64,
    ) -> Result<Vec<u32>> {
        let refs = lease_refs(leases);
        let released = self.inner.release_each(&runner_id, &refs, refused, now);
        self.persist()?;
        Ok(released.into_iter().map(|at| at as u32).collect())
    }

    /// `ByollmApp.result` on this store in one call: the expiry sweep, then
    /// the job's `{jobId, state, outcome?, provenance?}` as JSON, or `null`
    /// for an unknown job.
    #[napi(catch_unwind)]
    pub fn swept_result<'env>(
        &mut self,
        env: &'env Env,
        id: String,
        now: f64,
    ) -> Result<Option<JsString<'env>>> {
        self.inner.expire_due_quietly(now);
        self.persist()?;
        match self.inner.get(&id) {
            Some(r) => {
                self.out.clear();
                self.inner.push_result_json(r, &mut self.out);
                self.send(env).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The records the sweep changed, as one JSON array text or (for a sweep
    /// that changed a great many) several.
    #[napi(catch_unwind, ts_return_type = "string | string[]")]
    pub fn expire_due<'env>(
        &mut self,
        env: &'env Env,
        now: f64,
    ) -> Result<Either<JsString<'env>, Vec<String>>> {
        self.out.clear();
        self.inner.expire_due_into(now, &mut self.out);
        self.persist()?;
        if self.out.len() <= MAX_ANSWER_BYTES {
            return self.send(env).map(Either::A);
        }
        let chunks = split_json_array(&self.out, MAX_ANSWER_BYTES);
        self.out = String::new();
        Ok(Either::B(chunks))
    }

    #[napi(catch_unwind)]
    pub fn cancel<'env>(
        &mut self,
        env: &'env Env,
        job_id: String,
        now: f64,
    ) -> Result<Option<JsString<'env>>> {
        let r = self.inner.cancel(&job_id, now);
        self.persist()?;
        self.send_job(env, r)
    }

    #[napi(catch_unwind)]
    pub fn list_claimed_by(&self, runner_id: String) -> String {
        self.inner
            .jobs_json(&self.inner.list_claimed_by(&runner_id))
    }

    #[napi(catch_unwind)]
    pub fn list_cancel_requests(&self, runner_id: String) -> String {
        Store::lease_refs_json(&self.inner.list_cancel_requests(&runner_id))
    }

    #[napi(catch_unwind, ts_return_type = "string | string[]")]
    pub fn all_jobs(&self) -> Either<String, Vec<String>> {
        chunked(self.inner.jobs_json(&self.inner.all_jobs()))
    }

    // -- watchers -----------------------------------------------------------

    #[napi(catch_unwind)]
    pub fn watch(&mut self, job_id: String) {
        self.inner.watch(&job_id);
    }

    #[napi(catch_unwind)]
    pub fn unwatch(&mut self, job_id: String) {
        self.inner.unwatch(&job_id);
    }

    /// Ids of watched jobs written since the last call, one per write.
    #[napi(catch_unwind)]
    pub fn drain_writes(&mut self) -> Vec<String> {
        self.inner.drain_writes()
    }

    // -- pairings and runners (JSON text in and out) -----------------------

    #[napi(catch_unwind)]
    pub fn create_pairing(&mut self, record_json: String) -> Result<()> {
        if !self.inner.people.create_pairing_json(record_json) {
            return Err(invalid("a pairing record must be a JSON-compatible object"));
        }
        self.persist()
    }

    #[napi(catch_unwind)]
    pub fn pairing_by_hash(&self, hash: String) -> Option<String> {
        self.inner
            .people
            .pairing_json_by_hash(&hash)
            .map(str::to_owned)
    }

    #[napi(catch_unwind)]
    pub fn pairing_by_code(&self, user_code: String) -> Option<String> {
        self.inner
            .people
            .pairing_json_by_code(&user_code)
            .map(str::to_owned)
    }

    /// `approvePairing`; throws the reference's messages.
    #[napi(catch_unwind)]
    pub fn approve_pairing(
        &mut self,
        user_code: String,
        owner: String,
        runner_id: String,
        now: f64,
    ) -> Result<String> {
        let runner = self
            .inner
            .people
            .approve(&user_code, &owner, &runner_id, now)
            .map(str::to_owned)
            .map_err(failed)?;
        self.persist()?;
        Ok(runner)
    }

    #[napi(catch_unwind)]
    pub fn deny_pairing(&mut self, user_code: String) -> Result<()> {
        self.inner.people.deny(&user_code);
        self.persist()
    }

    #[napi(catch_unwind)]
    pub fn consume_pairing(&mut self, hash: String) -> Result<()> {
        self.inner.people.consume(&hash);
        self.persist()
    }

    #[napi(catch_unwind)]
    pub fn runner(&self, runner_id: String) -> Option<String> {
        self.inner.people.runner(&runner_id).map(str::to_owned)
    }

    #[napi(catch_unwind)]
    pub fn touch_runner(
        &mut self,
        runner_id: String,
        capabilities_json: String,
        daemon_version_json: String,
        now: f64,
    ) -> Result<Option<String>> {
        let runner = self
            .inner
            .people
            .touch(
                &runner_id,
                json_or_null(&capabilities_json),
                json_or_null(&daemon_version_json),
                now,
            )
            .map(str::to_owned);
        self.persist()?;
        Ok(runner)
    }

    #[napi(catch_unwind)]
    pub fn revoke_runner(&mut self, runner_id: String, now: f64) -> Result<()> {
        self.inner.people.revoke(&runner_id, now);
        self.persist()
    }

    #[napi(catch_unwind)]
    pub fn list_runners(&self, owner: Option<String>) -> String {
        self.inner.people.list_runners(owner.as_deref())
    }
}

/// An enqueued job's fields besides its kind and payload, as `create` takes
/// them (`purposeJson`: `JSON.stringify` of `purpose`), for `enqueue` and
/// `enqueuePrepared`.
#[napi(object, js_name = "EnqueuedJob")]
pub struct JsEnqueuedJob {
    pub id: String,
    pub owner: String,
    pub audience: Option<String>,
    pub purpose_json: Option<String>,
    pub audience_allow: Option<Vec<String>>,
    pub depends_on: Option<Vec<String>>,
    pub ttl_ms: Option<f64>,
    pub deadline_at: Option<f64>,
}

impl JsEnqueuedJob {
    /// The job `create` stores: these fields, with its kind, envelope and
    /// size class (the id lists move into it).
    fn input<'a>(
        &'a mut self,
        kind: &'a str,
        envelope: EnvelopeInput<'a>,
        size_class: &'a str,
    ) -> JobInput<'a> {
        JobInput {
            id: &self.id,
            kind,
            envelope,
            size_class,
            owner: &self.owner,
            audience: self.audience.as_deref(),
            purpose_json: self.purpose_json.as_deref(),
            audience_allow: self.audience_allow.take(),
            depends_on: self.depends_on.take(),
            ttl_ms: self.ttl_ms,
            deadline_at: self.deadline_at,
        }
    }
}

// -- calls that also need the site's keys -----------------------------------

#[napi]
impl NativeMemoryStore {
    /// `sealChecked` and `create` in one call, for an enqueue: the at-rest
    /// envelope never becomes a JS object only to be handed back. The new
    /// record's row (see `create`), or the validator's refusal (nothing
    /// stored).
    #[allow(clippy::too_many_arguments)]
    #[napi(catch_unwind, ts_return_type = "string | { message: string }")]
    pub fn enqueue<'env>(
        &mut self,
        env: &'env Env,
        keyring: &SiteKeyring,
        kind: Unknown<'_>,
        payload_json: Option<String>,
        envelope_deadline_at: f64,
        mut job: JsEnqueuedJob,
        now: f64,
    ) -> Result<Either<JsString<'env>, JsPayloadRefusal>> {
        let (kind_text, display) = super::rules::payload_kind(kind)?;
        let valid = match crate::payload::validate_for_enqueue(
            keyring.handle(),
            kind_text.as_deref(),
            &display,
            payload_json.as_deref(),
            &job.id,
            envelope_deadline_at,
        ) {
            Ok(valid) => valid,
            Err(refusal) => {
                return Ok(Either::B(JsPayloadRefusal {
                    message: refusal.to_string(),
                }))
            }
        };
        let at_rest = crate::payload::seal_at_rest(
            keyring.handle(),
            &self.inner,
            valid.canonical,
            &job.id,
            envelope_deadline_at,
        )
        .map_err(seal_error)?;
        // The validator accepted the kind, so it is a string.
        let kind = kind_text.unwrap_or_default();
        let input = job.input(&kind, at_rest.as_input(), valid.size_class.as_str());
        self.create_job(env, input, now).map(Either::A)
    }

    /// Store a payload `SiteKeyring.prepareCheckedAsync` validated, as
    /// `enqueue` stores one: the new record's row. `kind` is the one it was
    /// prepared with. Throws if `prepared` was used already.
    #[napi(catch_unwind)]
    pub fn enqueue_prepared<'env>(
        &mut self,
        env: &'env Env,
        prepared: &mut PreparedPayload,
        kind: String,
        mut job: JsEnqueuedJob,
        now: f64,
    ) -> Result<JsString<'env>> {
        let Some((at_rest, size_class)) = prepared.prepared.take() else {
            return Err(invalid("enqueuePrepared: this payload was stored already"));
        };
        // A job under this id already: `create` answers with it, and this
        // payload's seal is never needed.
        if self.inner.get(&job.id).is_none() {
            crate::payload::seal_later(&at_rest);
        }
        let input = job.input(&kind, at_rest.as_input(), size_class);
        self.create_job(env, input, now)
    }
}
