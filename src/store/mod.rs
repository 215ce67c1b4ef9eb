//! The in-memory store: job records, the job state machine, pairings and
//! runners, with the semantics of `MemoryStore` in `@byollm/server@0.1.1`
//! (the `ByollmStore` contract of `ts/types.ts`), but indexed.
//!
//! The reference walks (and for a claim, sorts) every stored job on every
//! claim, heartbeat and sweep. Here each job's membership in a handful of
//! ordered indexes is a pure function of its fields ([`Indexes::add`] /
//! [`Indexes::remove`]), and every write goes through [`Store::write`], which
//! takes the job out of the indexes, changes it and puts it back. That keeps
//! the indexes right by construction, and makes claim, renewal, the sweep,
//! result reads and unblocking cost O(log N) plus the work actually done.
//!
//! Records leave the store as compact JSON text ([`out`]); opaque values the
//! caller hands in (outcome, provenance, odd envelopes, pairing and runner
//! records) are kept as the JSON text they arrived as.
//!
//! A job's payload is here only sealed, or, from our own enqueue,
//! as a seal still to be made ([`crate::envelope::deferred`]): every way an
//! envelope leaves the store makes that seal first, so no reader ever sees
//! anything but the sealed envelope.

#[cfg(not(edge))]
pub(crate) mod durable;
mod index;
mod leases;
mod out;
mod people;
mod sweep;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

// The tests compare against the `base64` crate's encoder.
#[cfg(test)]
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine as _};

use crate::audience::Audience;
use crate::envelope::deferred::DeferredSeal;
use crate::vocabulary::vocabulary;
use index::{reach_of, Entry, Indexes, Key, Reach};

pub(crate) use out::{split_json_array, JOB_KEYS};
pub(crate) use people::{PairingStore, RUNNER_KEYS};

/// The reference's default time a claimable job may wait: 15 minutes.
pub(crate) const DEFAULT_TTL_MS: f64 = 900_000.0;

vocabulary! {
    /// A job's lifecycle state (protocol `JobState`), in the protocol's
    /// order (the metrics' order too).
    pub(crate) JobState {
        Queued => "queued",
        Claimed => "claimed",
        Running => "running",
        Ok => "ok",
        Error => "error",
        Canceled => "canceled",
        Expired => "expired",
    }
}

impl JobState {
    fn is_held(self) -> bool {
        matches!(self, JobState::Claimed | JobState::Running)
    }
}

/// Interned string id. Kinds, owners, key ids, runner ids and the like repeat
/// across thousands of jobs; storing them once keeps a job record small.
type Sym = u32;

struct Interner {
    ids: HashMap<Box<str>, Sym>,
    names: Vec<Box<str>>,
}

impl Default for Interner {
    /// Every interner starts with the empty string: [`ADOPTED`].
    fn default() -> Self {
        let mut syms = Interner {
            ids: HashMap::new(),
            names: Vec::new(),
        };
        let adopted = syms.intern("");
        debug_assert_eq!(adopted, ADOPTED);
        syms
    }
}

impl Interner {
    fn intern(&mut self, text: &str) -> Sym {
        if let Some(&sym) = self.ids.get(text) {
            return sym;
        }
        let sym = self.names.len() as Sym;
        self.names.push(text.into());
        self.ids.insert(text.into(), sym);
        sym
    }

    fn lookup(&self, text: &str) -> Option<Sym> {
        self.ids.get(text).copied()
    }

    fn name(&self, sym: Sym) -> &str {
        self.names.get(sym as usize).map_or("", |s| s)
    }
}

/// The interned empty string: the runner id of an adopted (relay-granted) lease.
const ADOPTED: Sym = 0;

/// The ciphertext of a sealed envelope. Kept as decoded bytes (3/4 the size
/// of its base64url text) when the text is canonical unpadded base64url, so
/// that re-encoding gives back exactly the string we were given.
#[derive(Debug, Clone)]
pub(crate) enum Ciphertext {
    Bytes(Box<[u8]>),
    Text(Box<str>),
}

impl Ciphertext {
    fn new(text: &str) -> Ciphertext {
        // The strict engine refuses padding and non-zero trailing bits, so
        // the bytes re-encode to exactly `text`.
        match crate::b64::decode_canonical_url(text) {
            Some(bytes) => Ciphertext::Bytes(bytes.into_boxed_slice()),
            None => Ciphertext::Text(text.into()),
        }
    }
}

/// The payload envelope as stored.
#[derive(Debug, Clone)]
enum Envelope {
    /// The shape `seal` produces (`{ciphertext, recipientKeyId, senderKeyId,
    /// direction, deadlineAt}` in that order), stored compactly.
    Sealed {
        ciphertext: Ciphertext,
        recipient: Sym,
        sender: Sym,
        direction: Sym,
        deadline_at: f64,
    },
    /// Anything else, kept as the JSON text it arrived as.
    Raw(Box<str>),
    /// Our own enqueue's at-rest seal, made when first needed (see
    /// [`crate::envelope::deferred`]); read as the sealed envelope it gives.
    Deferred(Arc<DeferredSeal>),
}

impl Envelope {
    /// The length of a sealed envelope's ciphertext text (base64url), made
    /// or not; `None` for a caller's own envelope of another shape.
    fn ciphertext_chars(&self) -> Option<usize> {
        match self {
            Envelope::Sealed {
                ciphertext: Ciphertext::Bytes(bytes),
                ..
            } => Some(bytes.len().saturating_mul(4).div_ceil(3)),
            Envelope::Sealed {
                ciphertext: Ciphertext::Text(text),
                ..
            } => Some(text.len()),
            Envelope::Raw(_) => None,
            Envelope::Deferred(deferred) => Some(deferred.ciphertext_chars()),
        }
    }
}

/// A deferred seal that has been made is kept in the compact sealed form
/// (its ciphertext as bytes, its key ids interned) from the job's next write
/// on: the same envelope, a few hundred bytes less per job.
fn settle_deferred(syms: &mut Interner, job: &mut Job) {
    let Envelope::Deferred(deferred) = &job.envelope else {
        return;
    };
    let Some(sealed) = deferred.made() else {
        return;
    };
    job.envelope = Envelope::Sealed {
        ciphertext: Ciphertext::new(&sealed.ciphertext),
        recipient: syms.intern(&sealed.recipient_key_id),
        sender: syms.intern(&sealed.sender_key_id),
        direction: syms.intern(&sealed.direction),
        deadline_at: sealed.deadline_at,
    };
}

/// Register `r` as waiting on each job it depends on (once per id), in the
/// order the waiting jobs were created.
fn note_dependents(
    dependents: &mut HashMap<Box<str>, Vec<JobRef>>,
    depends_on: &[Box<str>],
    r: JobRef,
) {
    let mut seen: HashSet<&str> = HashSet::new();
    for dep in depends_on {
        if seen.insert(dep) {
            dependents.entry(dep.clone()).or_default().push(r);
        }
    }
}

/// How a caller hands an envelope in.
pub(crate) enum EnvelopeInput<'a> {
    Sealed {
        ciphertext: &'a str,
        recipient_key_id: &'a str,
        sender_key_id: &'a str,
        direction: &'a str,
        deadline_at: f64,
    },
    /// JSON text of an envelope of any other shape.
    Raw(&'a str),
    /// Our own enqueue: a payload sealed to the site when first read.
    Deferred(Arc<DeferredSeal>),
}

#[derive(Debug, Clone)]
struct Lease {
    id: Box<str>,
    runner: Sym,
    expires_at: f64,
}

#[derive(Debug, Clone)]
struct Job {
    seq: u64,
    id: Box<str>,
    kind: Sym,
    envelope: Envelope,
    size_class: Sym,
    audience: Sym,
    /// JSON text of `purpose`; `None` = the key holds `undefined`.
    purpose: Option<Box<str>>,
    owner: Sym,
    audience_allow: Option<Box<[String]>>,
    depends_on: Box<[Box<str>]>,
    state: JobState,
    lease: Option<Lease>,
    completed_by_lease_id: Option<Box<str>>,
    created_at: f64,
    claimable_at: Option<f64>,
    ttl_ms: f64,
    deadline_at: Option<f64>,
    refused_by: Vec<Sym>,
    attempts: f64,
    /// JSON text of the outcome and provenance objects.
    outcome: Option<Box<str>>,
    provenance: Option<Box<str>>,
    /// `provenance.runnerId`, for the duplicate-result rule.
    provenance_runner: Option<Box<str>>,
    updated_at: f64,
}

/// What `create` takes (`StoredJobInput`; the plaintext payload enters only
/// inside a [`DeferredSeal`], which gives nothing but its sealed envelope).
pub(crate) struct JobInput<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub envelope: EnvelopeInput<'a>,
    pub size_class: &'a str,
    pub owner: &'a str,
    pub audience: Option<&'a str>,
    /// JSON text of `purpose`, `None` when not given.
    pub purpose_json: Option<&'a str>,
    pub audience_allow: Option<Vec<String>>,
    pub depends_on: Option<Vec<String>>,
    pub ttl_ms: Option<f64>,
    pub deadline_at: Option<f64>,
}

/// One capability of a claim, as far as the store looks at it: owned by the
/// engine's `claim` operation, borrowed ([`ClaimCapability::borrowed`]) by
/// the store's match.
#[derive(Debug, Clone)]
pub(crate) struct ClaimCapability<S = String> {
    pub kind: S,
    pub backend_id: S,
    pub offer_scope: S,
}

impl<S: AsRef<str>> ClaimCapability<S> {
    pub(crate) fn borrowed(&self) -> ClaimCapability<&str> {
        ClaimCapability {
            kind: self.kind.as_ref(),
            backend_id: self.backend_id.as_ref(),
            offer_scope: self.offer_scope.as_ref(),
        }
    }
}

pub(crate) struct ClaimArgs<'a> {
    pub runner_id: &'a str,
    pub runner_owner: &'a str,
    pub capabilities: &'a [ClaimCapability<&'a str>],
    pub max: f64,
    pub lease_ms: f64,
    pub now: f64,
}

/// `{jobId, leaseId}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseRef {
    pub job_id: String,
    pub lease_id: String,
}

/// Who claims to hold a job when completing it.
pub(crate) enum Holder<'a> {
    Runner(&'a str),
    Lease(&'a str),
}

pub(crate) struct CompleteArgs<'a> {
    pub job_id: &'a str,
    pub runner_id: &'a str,
    pub holder: Holder<'a>,
    /// The value of `outcome.outcome` (`""` when it is not a string).
    pub outcome_tag: &'a str,
    pub outcome_json: &'a str,
    pub provenance_json: &'a str,
    /// `provenance.runnerId` when it is a string.
    pub provenance_runner: Option<&'a str>,
    pub now: f64,
}

/// A handle on a stored job: its slot and its creation sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobRef {
    slot: u32,
    seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompleteResult {
    pub accepted: bool,
    pub duplicate: bool,
    pub job: Option<JobRef>,
}

/// What the engine reads of a stored job (see `crate::payload`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct JobView<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub audience: &'a str,
    pub owner: &'a str,
    /// JSON text of `purpose`; `None` = the key holds `undefined`.
    pub purpose_json: Option<&'a str>,
    pub size_class: &'a str,
    pub state: JobState,
    pub lease: Option<LeaseView<'a>>,
    pub created_at: f64,
    pub claimable_at: Option<f64>,
    pub ttl_ms: f64,
    pub deadline_at: Option<f64>,
    /// How many times it was claimed (1 right after its first claim).
    pub attempts: f64,
    /// The length of the ciphertext text of a sealed envelope; `None` for a
    /// caller's own envelope of another shape.
    pub sealed_ciphertext_chars: Option<usize>,
}

/// A job's lease as [`JobView`] shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LeaseView<'a> {
    pub id: &'a str,
    /// `""` for an adopted (relay-granted) lease.
    pub runner_id: &'a str,
    pub expires_at: f64,
}

/// Options of the store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoreOptions {
    pub default_ttl_ms: f64,
    /// Drop terminal jobs this long after they ended; `None` keeps them (the
    /// reference's behaviour).
    pub retention_ms: Option<f64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            default_ttl_ms: DEFAULT_TTL_MS,
            retention_ms: None,
        }
    }
}

/// The store.
#[derive(Default)]
pub(crate) struct Store {
    options: StoreOptions,
    syms: Interner,
    slots: Vec<Option<Job>>,
    free: Vec<u32>,
    by_id: HashMap<Box<str>, u32>,
    next_seq: u64,
    idx: Indexes,
    /// Blocked jobs by the ids they wait on, in creation order.
    dependents: HashMap<Box<str>, Vec<JobRef>>,
    /// Pending cancel requests: an insertion-ordered set of job ids.
    cancel_order: BTreeMap<u64, Box<str>>,
    cancel_ids: HashMap<Box<str>, u64>,
    next_cancel: u64,
    /// Job ids someone subscribed to, and the writes to them since the last drain.
    watched: HashSet<Box<str>>,
    write_log: Vec<String>,
    /// Tests replace random lease ids with a counter to compare runs.
    counter_lease_ids: Option<u64>,
    /// Records leave without a large sealed envelope (`[]` in its place);
    /// the caller asks for it by id when it needs it (see
    /// [`Store::sealed_envelope_parts`]).
    omit_envelopes: bool,
    /// Jobs created with a deferred seal, oldest first, until the seal is
    /// made and the job keeps it compact ([`Store::settle_made_seals`]).
    unsettled: VecDeque<JobRef>,
    /// The jobs written and dropped since the durable file last took them
    /// (see [`durable`]); `None` for a store that lives in memory only.
    changes: Option<Changes>,
    pub people: PairingStore,
}

/// Jobs changed since the last flush to the durable file: `(seq, slot)` of
/// each write (repeats allowed), and the creation numbers of dropped jobs.
#[derive(Default)]
struct Changes {
    written: Vec<(u64, u32)>,
    dropped: Vec<u64>,
}

impl Store {
    pub(crate) fn new(options: StoreOptions) -> Store {
        Store {
            options,
            ..Store::default()
        }
    }

    /// Leave large sealed envelopes out of the records this store writes
    /// as JSON (see [`out::OMIT_ENVELOPE_BYTES`]). Only
    /// sound for a caller that fetches an envelope by id later, which is
    /// exact as long as an id keeps its job (no retention: `create` on a
    /// known id returns the existing job, so its envelope never changes).
    pub(crate) fn set_omit_envelopes(&mut self, omit: bool) {
        self.omit_envelopes = omit;
    }

    /// Whether records leave envelopes out ([`Store::set_omit_envelopes`]),
    /// so an envelope is made no sooner than someone asks for it.
    pub(crate) fn omits_envelopes(&self) -> bool {
        self.omit_envelopes
    }

    /// Job `r`'s at-rest seal when it is one still to be made or made late
    /// ([`Envelope::Deferred`]).
    pub(crate) fn deferred_seal(&self, r: JobRef) -> Option<&Arc<DeferredSeal>> {
        match &self.live(r)?.envelope {
            Envelope::Deferred(deferred) => Some(deferred),
            _ => None,
        }
    }

    /// Stored jobs by state, in [`JobState::ALL`]'s order: kept with the
    /// indexes, so reading them costs nothing per job.
    pub(crate) fn state_counts(&self) -> [u64; 7] {
        self.idx.by_state
    }

    fn job(&self, slot: u32) -> Option<&Job> {
        self.slots.get(slot as usize).and_then(|s| s.as_ref())
    }

    fn job_ref(&self, slot: u32) -> Option<JobRef> {
        self.job(slot).map(|j| JobRef { slot, seq: j.seq })
    }

    fn live(&self, r: JobRef) -> Option<&Job> {
        self.job(r.slot).filter(|j| j.seq == r.seq)
    }

    fn slot_of(&self, id: &str) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    fn reach(&self, job: &Job) -> Reach {
        reach_of(&self.syms, job)
    }

    /// The one write path: out of the indexes, change, back in, log for watchers.
    fn write(&mut self, slot: u32, change: impl FnOnce(&mut Job)) {
        let retention = self.options.retention_ms.is_some();
        let Some(Some(job)) = self.slots.get_mut(slot as usize) else {
            return;
        };
        // Audience and allowlist never change after create, so neither does the reach.
        let reach = reach_of(&self.syms, job);
        self.idx.remove(job, slot, reach, retention);
        change(job);
        settle_deferred(&mut self.syms, job);
        self.idx.add(job, slot, reach, retention);
        if let Some(changes) = &mut self.changes {
            changes.written.push((job.seq, slot));
        }
        if !self.watched.is_empty() && self.watched.contains(&job.id) {
            self.write_log.push(job.id.to_string());
        }
    }

    /// Note a change to the job at `slot` that did not go through [`Store::write`].
    fn touched(&mut self, slot: u32) {
        if let (Some(changes), Some(job)) = (
            self.changes.as_mut(),
            self.slots.get(slot as usize).and_then(Option::as_ref),
        ) {
            changes.written.push((job.seq, slot));
        }
    }

    // -- jobs -------------------------------------------------------------

    /// `create`: idempotent by id; blocked while any dependency is not `ok`.
    pub(crate) fn create(&mut self, input: JobInput<'_>, now: f64) -> JobRef {
        if let Some(slot) = self.slot_of(input.id) {
            if let Some(r) = self.job_ref(slot) {
                return r;
            }
        }
        let depends_on: Box<[Box<str>]> = input
            .depends_on
            .unwrap_or_default()
            .into_iter()
            .map(String::into_boxed_str)
            .collect();
        let blocked = depends_on.iter().any(|dep| !self.is_ok(dep));
        let envelope = match input.envelope {
            EnvelopeInput::Sealed {
                ciphertext,
                recipient_key_id,
                sender_key_id,
                direction,
                deadline_at,
            } => Envelope::Sealed {
                ciphertext: Ciphertext::new(ciphertext),
                recipient: self.syms.intern(recipient_key_id),
                sender: self.syms.intern(sender_key_id),
                direction: self.syms.intern(direction),
                deadline_at,
            },
            EnvelopeInput::Raw(json) => Envelope::Raw(json.into()),
            EnvelopeInput::Deferred(deferred) => Envelope::Deferred(deferred),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let job = Job {
            seq,
            id: input.id.into(),
            kind: self.syms.intern(input.kind),
            envelope,
            size_class: self.syms.intern(input.size_class),
            audience: self.syms.intern(input.audience.unwrap_or("private")),
            purpose: input.purpose_json.map(Into::into),
            owner: self.syms.intern(input.owner),
            audience_allow: input.audience_allow.map(Vec::into_boxed_slice),
            depends_on,
            state: JobState::Queued,
            lease: None,
            completed_by_lease_id: None,
            created_at: now,
            claimable_at: if blocked { None } else { Some(now) },
            ttl_ms: input.ttl_ms.unwrap_or(self.options.default_ttl_ms),
            deadline_at: input.deadline_at,
            refused_by: Vec::new(),
            attempts: 0.0,
            outcome: None,
            provenance: None,
            provenance_runner: None,
            updated_at: now,
        };
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        let r = JobRef { slot, seq };
        if blocked {
            note_dependents(&mut self.dependents, &job.depends_on, r);
        }
        self.by_id.insert(job.id.clone(), slot);
        let reach = self.reach(&job);
        self.idx
            .add(&job, slot, reach, self.options.retention_ms.is_some());
        if !self.watched.is_empty() && self.watched.contains(&job.id) {
            self.write_log.push(job.id.to_string());
        }
        let deferred = matches!(job.envelope, Envelope::Deferred(_));
        if let Some(cell) = self.slots.get_mut(slot as usize) {
            *cell = Some(job);
        }
        if deferred {
            self.unsettled.push_back(r);
        }
        self.touched(slot);
        self.settle_made_seals();
        r
    }

    /// Jobs created with a deferred seal not yet kept compact.
    pub(crate) fn unsettled_seals(&self) -> usize {
        self.unsettled.len()
    }

    /// Keep the deferred seals the background thread has made in the
    /// compact sealed form, oldest first, a few per call (every create and
    /// claim makes one): a queued job otherwise holds its envelope as text
    /// beside the context it was made from, ≈ 1 KB more.
    fn settle_made_seals(&mut self) {
        const PER_CALL: usize = 4;
        for _ in 0..PER_CALL {
            let Some(&r) = self.unsettled.front() else {
                return;
            };
            match self.slots.get_mut(r.slot as usize) {
                Some(Some(job)) if job.seq == r.seq => {
                    let made = match &job.envelope {
                        Envelope::Deferred(deferred) => deferred.made().is_some(),
                        // Settled by a write already.
                        _ => true,
                    };
                    if !made {
                        // Seals are made in about the order they were queued.
                        return;
                    }
                    settle_deferred(&mut self.syms, job);
                }
                // Gone (retention) or its slot reused.
                _ => {}
            }
            self.unsettled.pop_front();
        }
    }

    fn is_ok(&self, id: &str) -> bool {
        self.slot_of(id)
            .and_then(|s| self.job(s))
            .is_some_and(|j| j.state == JobState::Ok)
    }

    /// `get`.
    pub(crate) fn get(&self, id: &str) -> Option<JobRef> {
        self.slot_of(id).and_then(|s| self.job_ref(s))
    }

    /// The fields of a job the engine reads, without a record's JSON.
    pub(crate) fn view(&self, r: JobRef) -> Option<JobView<'_>> {
        let job = self.live(r)?;
        let name = |sym| self.syms.name(sym);
        Some(JobView {
            id: &job.id,
            kind: name(job.kind),
            audience: name(job.audience),
            owner: name(job.owner),
            purpose_json: job.purpose.as_deref(),
            size_class: name(job.size_class),
            state: job.state,
            lease: job.lease.as_ref().map(|l| LeaseView {
                id: &l.id,
                runner_id: name(l.runner),
                expires_at: l.expires_at,
            }),
            created_at: job.created_at,
            claimable_at: job.claimable_at,
            ttl_ms: job.ttl_ms,
            deadline_at: job.deadline_at,
            attempts: job.attempts,
            sealed_ciphertext_chars: job.envelope.ciphertext_chars(),
        })
    }

    /// `cancel`: a queued job at once, a held one by request to its runner.
    pub(crate) fn cancel(&mut self, job_id: &str, now: f64) -> Option<JobRef> {
        let slot = self.slot_of(job_id)?;
        let job = self.job(slot)?;
        match job.state {
            JobState::Queued => {
                self.write(slot, |job| {
                    job.state = JobState::Canceled;
                    job.lease = None;
                    job.completed_by_lease_id = None;
                    job.updated_at = now;
                });
            }
            JobState::Claimed | JobState::Running if !self.cancel_ids.contains_key(job_id) => {
                let order = self.next_cancel;
                self.next_cancel += 1;
                self.cancel_ids.insert(job_id.into(), order);
                self.cancel_order.insert(order, job_id.into());
                self.touched(slot);
            }
            _ => {}
        }
        self.job_ref(slot)
    }

    /// `listClaimedBy`: jobs whose current lease is this runner's, in creation order.
    pub(crate) fn list_claimed_by(&self, runner_id: &str) -> Vec<JobRef> {
        self.syms
            .lookup(runner_id)
            .and_then(|runner| self.idx.held_by.get(&runner))
            .map(|held| {
                held.iter()
                    .map(|&(seq, slot)| JobRef { slot, seq })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `listCancelRequests`: requested jobs whose current lease is this runner's.
    pub(crate) fn list_cancel_requests(&self, runner_id: &str) -> Vec<LeaseRef> {
        let Some(runner) = self.syms.lookup(runner_id) else {
            return Vec::new();
        };
        self.cancel_order
            .values()
            .filter_map(|id| {
                let job = self.job(self.slot_of(id)?)?;
                let lease = job.lease.as_ref()?;
                (lease.runner == runner).then(|| LeaseRef {
                    job_id: id.to_string(),
                    lease_id: lease.id.to_string(),
                })
            })
            .collect()
    }

    /// Every stored job in creation order (`allJobs`).
    pub(crate) fn all_jobs(&self) -> Vec<JobRef> {
        let mut all: Vec<JobRef> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, job)| {
                job.as_ref().map(|j| JobRef {
                    slot: slot as u32,
                    seq: j.seq,
                })
            })
            .collect();
        all.sort_unstable_by_key(|r| r.seq);
        all
    }

    // -- watchers -----------------------------------------------------------

    /// Start logging writes to `job_id` (see [`Store::drain_writes`]).
    pub(crate) fn watch(&mut self, job_id: &str) {
        self.watched.insert(job_id.into());
    }

    pub(crate) fn unwatch(&mut self, job_id: &str) {
        self.watched.remove(job_id);
        if self.watched.is_empty() {
            self.write_log.clear();
        }
    }

    /// The ids of watched jobs written since the last call, one per write, in order.
    pub(crate) fn drain_writes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.write_log)
    }
}
