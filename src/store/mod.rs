//! The in-memory store: job records, the job state machine, pairings and
//! runners, with the semantics of `MemoryStore` in `@byollm/server@0.1.1`
//! (`shared/spec/store.md`), but indexed.
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
//! A job's payload is here only sealed, or, from the direct lane's enqueue,
//! as a seal still to be made ([`crate::envelope::deferred`]): every way an
//! envelope leaves the store makes that seal first, so no reader ever sees
//! anything but the sealed envelope.

#[cfg(not(target_arch = "wasm32"))]
pub mod durable;
mod out;
mod people;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

// The tests compare against the `base64` crate's encoder.
#[cfg(test)]
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine as _};

use crate::audience::{server_admits, Audience, OfferScope};
use crate::envelope::deferred::DeferredSeal;

pub use out::split_json_array;
pub use people::{ApproveError, PairingStore, MAX_PAIRINGS, PAIRING_GRACE_MS};

/// The reference's default time a claimable job may wait: 15 minutes.
pub const DEFAULT_TTL_MS: f64 = 900_000.0;

/// A job's lifecycle state (protocol `JobState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Queued,
    Claimed,
    Running,
    Ok,
    Error,
    Canceled,
    Expired,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Claimed => "claimed",
            JobState::Running => "running",
            JobState::Ok => "ok",
            JobState::Error => "error",
            JobState::Canceled => "canceled",
            JobState::Expired => "expired",
        }
    }

    fn is_held(self) -> bool {
        matches!(self, JobState::Claimed | JobState::Running)
    }
}

/// Interned string id. Kinds, owners, key ids, runner ids and the like repeat
/// across thousands of jobs; storing them once keeps a job record small.
type Sym = u32;

#[derive(Default)]
struct Interner {
    ids: HashMap<Box<str>, Sym>,
    names: Vec<Box<str>>,
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

/// An f64 ordered totally, for index keys. `-0` is folded into `0` because the
/// reference compares with `<`/`-`, where they are equal.
#[derive(Debug, Clone, Copy)]
struct Key(f64);

impl Key {
    fn new(value: f64) -> Key {
        Key(value + 0.0)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// An index entry: ordering key, then creation order, then the slot.
type Entry = (Key, u64, u32);

/// The ciphertext of a sealed envelope. Kept as decoded bytes (3/4 the size
/// of its base64url text) when the text is canonical unpadded base64url, so
/// that re-encoding gives back exactly the string we were given.
#[derive(Debug, Clone)]
pub enum Ciphertext {
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

/// How a caller hands an envelope in.
pub enum EnvelopeInput<'a> {
    Sealed {
        ciphertext: &'a str,
        recipient_key_id: &'a str,
        sender_key_id: &'a str,
        direction: &'a str,
        deadline_at: f64,
    },
    /// JSON text of an envelope of any other shape.
    Raw(&'a str),
    /// The direct lane's enqueue: a payload sealed to the site when first read.
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
pub struct JobInput<'a> {
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

/// One capability of a claim, as far as the store looks at it.
pub struct ClaimCapability<'a> {
    pub kind: &'a str,
    pub backend_id: &'a str,
    pub offer_scope: &'a str,
}

pub struct ClaimArgs<'a> {
    pub runner_id: &'a str,
    pub runner_owner: &'a str,
    pub capabilities: &'a [ClaimCapability<'a>],
    pub max: f64,
    pub lease_ms: f64,
    pub now: f64,
}

/// `{jobId, leaseId}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    pub job_id: String,
    pub lease_id: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RenewResult {
    pub renewed: Vec<(String, f64)>,
    pub lost: Vec<LeaseRef>,
}

/// Who claims to hold a job when completing it.
pub enum Holder<'a> {
    Runner(&'a str),
    Lease(&'a str),
}

pub struct CompleteArgs<'a> {
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
pub struct JobRef {
    slot: u32,
    seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompleteResult {
    pub accepted: bool,
    pub duplicate: bool,
    pub job: Option<JobRef>,
}

/// What the direct lane reads of a stored job (see `crate::direct`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobView<'a> {
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
    /// The length of the ciphertext text of a sealed envelope; `None` for a
    /// caller's own envelope of another shape.
    pub sealed_ciphertext_chars: Option<usize>,
}

/// A job's lease as [`JobView`] shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseView<'a> {
    pub id: &'a str,
    /// `""` for an adopted (relay-granted) lease.
    pub runner_id: &'a str,
    pub expires_at: f64,
}

/// The ordered indexes over the jobs.
#[derive(Default)]
struct Indexes {
    /// Claimable jobs by (kind, owner), keyed by `claimableAt`: a runner's own
    /// owner's jobs, which it may take whatever their audience.
    claim_own: HashMap<(Sym, Sym), BTreeSet<Entry>>,
    /// Claimable `team` jobs without an allowlist, by kind: any owner's
    /// runner whose offer admits strangers may take them.
    claim_shared: HashMap<Sym, BTreeSet<Entry>>,
    /// Claimable `team` jobs with an allowlist, by kind and then by each
    /// allowed owner, so a runner never walks jobs whose list excludes it.
    claim_allowed: HashMap<Sym, HashMap<Box<str>, BTreeSet<Entry>>>,
    /// Held jobs with a lease this store issued, by `lease.expiresAt`.
    lease_expiry: BTreeSet<Entry>,
    /// Held jobs by the runner holding the lease (`""` for adopted), in creation order.
    held_by: HashMap<Sym, BTreeSet<(u64, u32)>>,
    /// Held jobs with an adopted lease, by their deadline.
    adopted_deadline: BTreeSet<Entry>,
    /// Adopted jobs with no deadline and no `claimableAt`: their bound is
    /// `now + ttlMs`, which depends on the sweep's `now`; few, checked each sweep.
    adopted_floating: BTreeSet<(u64, u32)>,
    /// Queued jobs by the earlier of `deadlineAt` and `claimableAt + ttlMs`.
    queued_expiry: BTreeSet<Entry>,
    /// Terminal jobs by the time they ended (only with retention on).
    ended: BTreeSet<Entry>,
}

fn finite_or_none(value: f64) -> Option<Key> {
    (!value.is_nan()).then(|| Key::new(value))
}

impl Indexes {
    fn add(&mut self, job: &Job, slot: u32, reach: Reach, retention: bool) {
        self.apply(job, slot, reach, retention, true);
    }

    fn remove(&mut self, job: &Job, slot: u32, reach: Reach, retention: bool) {
        self.apply(job, slot, reach, retention, false);
    }

    fn apply(&mut self, job: &Job, slot: u32, reach: Reach, retention: bool, insert: bool) {
        fn put(set: &mut BTreeSet<Entry>, entry: Entry, insert: bool) {
            if insert {
                set.insert(entry);
            } else {
                set.remove(&entry);
            }
        }
        let seq = job.seq;
        match job.state {
            JobState::Queued => {
                // NaN times (only from a NaN `now`) are left out: the
                // reference's comparisons make such a job unclaimable in
                // practice and never expiring.
                if let Some(key) = job.claimable_at.and_then(finite_or_none) {
                    let own = self.claim_own.entry((job.kind, job.owner)).or_default();
                    put(own, (key, seq, slot), insert);
                    match reach {
                        Reach::Owner => {}
                        Reach::Anyone => {
                            let set = self.claim_shared.entry(job.kind).or_default();
                            put(set, (key, seq, slot), insert);
                        }
                        Reach::Allowlist => {
                            let by_owner = self.claim_allowed.entry(job.kind).or_default();
                            for allowed in job.audience_allow.iter().flatten() {
                                let set = by_owner.entry(allowed.as_str().into()).or_default();
                                put(set, (key, seq, slot), insert);
                            }
                        }
                    }
                }
                let by_ttl = job.claimable_at.map(|c| c + job.ttl_ms);
                let due = match (job.deadline_at, by_ttl) {
                    (Some(d), Some(t)) => Some(d.min(t)),
                    (d, t) => d.or(t),
                };
                if let Some(key) = due.and_then(finite_or_none) {
                    put(&mut self.queued_expiry, (key, seq, slot), insert);
                }
            }
            JobState::Claimed | JobState::Running => {
                if let Some(lease) = &job.lease {
                    let held = self.held_by.entry(lease.runner).or_default();
                    if insert {
                        held.insert((seq, slot));
                    } else {
                        held.remove(&(seq, slot));
                    }
                    if lease.runner != ADOPTED {
                        if let Some(key) = finite_or_none(lease.expires_at) {
                            put(&mut self.lease_expiry, (key, seq, slot), insert);
                        }
                    } else {
                        let bound = match (job.deadline_at, job.claimable_at) {
                            (Some(d), _) => Some(d),
                            (None, Some(c)) => Some(c + job.ttl_ms),
                            (None, None) => None,
                        };
                        match bound {
                            // The reference expires when `!(deadline > now)`,
                            // so a NaN deadline expires at once.
                            Some(d) => {
                                let key = if d.is_nan() {
                                    Key(f64::NEG_INFINITY)
                                } else {
                                    Key::new(d)
                                };
                                put(&mut self.adopted_deadline, (key, seq, slot), insert);
                            }
                            None => {
                                if insert {
                                    self.adopted_floating.insert((seq, slot));
                                } else {
                                    self.adopted_floating.remove(&(seq, slot));
                                }
                            }
                        }
                    }
                }
            }
            JobState::Ok | JobState::Error | JobState::Canceled | JobState::Expired => {
                if retention {
                    if let Some(key) = finite_or_none(job.updated_at) {
                        put(&mut self.ended, (key, seq, slot), insert);
                    }
                }
            }
        }
    }
}

/// Options of the store.
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
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
pub struct Store {
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

impl Default for Store {
    fn default() -> Self {
        Store::new(StoreOptions::default())
    }
}

impl Store {
    pub fn new(options: StoreOptions) -> Store {
        let mut syms = Interner::default();
        let adopted = syms.intern("");
        debug_assert_eq!(adopted, ADOPTED);
        Store {
            options,
            syms,
            slots: Vec::new(),
            free: Vec::new(),
            by_id: HashMap::new(),
            next_seq: 0,
            idx: Indexes::default(),
            dependents: HashMap::new(),
            cancel_order: BTreeMap::new(),
            cancel_ids: HashMap::new(),
            next_cancel: 0,
            watched: HashSet::new(),
            write_log: Vec::new(),
            counter_lease_ids: None,
            omit_envelopes: false,
            unsettled: VecDeque::new(),
            changes: None,
            people: PairingStore::default(),
        }
    }

    /// Leave large sealed envelopes out of the records this store writes
    /// as JSON (see [`out::OMIT_ENVELOPE_BYTES`]). Only
    /// sound for a caller that fetches an envelope by id later, which is
    /// exact as long as an id keeps its job (no retention: `create` on a
    /// known id returns the existing job, so its envelope never changes).
    pub fn set_omit_envelopes(&mut self, omit: bool) {
        self.omit_envelopes = omit;
    }

    /// Whether records leave envelopes out ([`Store::set_omit_envelopes`]),
    /// so an envelope is made no sooner than someone asks for it.
    pub fn omits_envelopes(&self) -> bool {
        self.omit_envelopes
    }

    /// Job `r`'s at-rest seal when it is one still to be made or made late
    /// ([`Envelope::Deferred`]).
    pub fn deferred_seal(&self, r: JobRef) -> Option<&Arc<DeferredSeal>> {
        match &self.live(r)?.envelope {
            Envelope::Deferred(deferred) => Some(deferred),
            _ => None,
        }
    }

    /// Number of stored jobs.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
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
    pub fn create(&mut self, input: JobInput<'_>, now: f64) -> JobRef {
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
            let mut seen: HashSet<&str> = HashSet::new();
            for dep in job.depends_on.iter() {
                if seen.insert(dep) {
                    self.dependents.entry(dep.clone()).or_default().push(r);
                }
            }
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
    pub fn unsettled_seals(&self) -> usize {
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
    pub fn get(&self, id: &str) -> Option<JobRef> {
        self.slot_of(id).and_then(|s| self.job_ref(s))
    }

    /// The fields of a job the direct lane reads, without a record's JSON.
    pub fn view(&self, r: JobRef) -> Option<JobView<'_>> {
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
            sealed_ciphertext_chars: match &job.envelope {
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
            },
        })
    }

    /// `claim`: sweep, then hand out up to `max` claimable jobs, oldest
    /// `claimableAt` first, ties in creation order.
    pub fn claim(&mut self, args: &ClaimArgs<'_>) -> Vec<JobRef> {
        self.settle_made_seals();
        self.sweep(args.now, None);
        let max = claim_limit(args.max);
        if max == 0 {
            return Vec::new();
        }
        let runner = self.syms.lookup(args.runner_id);
        let owner = self.syms.lookup(args.runner_owner);
        let now = Key::new(args.now);
        let upper: Entry = (now, u64::MAX, u32::MAX);

        // Only the first capability naming a kind counts.
        let mut kinds_seen: Vec<&str> = Vec::new();
        let mut streams: Vec<Stream<'_>> = Vec::new();
        for cap in args.capabilities {
            if kinds_seen.contains(&cap.kind) {
                continue;
            }
            kinds_seen.push(cap.kind);
            let Some(kind) = self.syms.lookup(cap.kind) else {
                continue;
            };
            let scope = OfferScope::parse(cap.offer_scope);
            if let Some(own) = owner.and_then(|o| self.idx.claim_own.get(&(kind, o))) {
                streams.push(Stream {
                    iter: own.range(..=upper).peekable(),
                    cap,
                    scope,
                    strangers_only: false,
                });
            }
            // Another owner's job can only be admitted when this capability
            // admits strangers at all. The decision for a stranger's job
            // depends on the job only through its owner, audience and
            // allowlist, so one probe with an owner that is not the runner's
            // and no allowlist tells whether the shared index is worth
            // walking; each candidate still gets the full check below.
            let Some(scope) = scope else { continue };
            let probe_owner = format!("{}\u{0}probe", args.runner_owner);
            let admits_strangers = server_admits(
                &probe_owner,
                Audience::Team,
                None,
                scope,
                cap.backend_id,
                args.runner_owner,
            )
            .is_ok();
            if admits_strangers {
                let allowed = self
                    .idx
                    .claim_allowed
                    .get(&kind)
                    .and_then(|by_owner| by_owner.get(args.runner_owner));
                for set in [self.idx.claim_shared.get(&kind), allowed]
                    .into_iter()
                    .flatten()
                {
                    streams.push(Stream {
                        iter: set.range(..=upper).peekable(),
                        cap,
                        scope: Some(scope),
                        strangers_only: true,
                    });
                }
            }
        }

        let mut picked: Vec<u32> = Vec::new();
        while picked.len() < max {
            // The stream whose head is oldest; streams are few (≤ 2 per kind).
            let mut best: Option<(usize, Entry)> = None;
            for (at, stream) in streams.iter_mut().enumerate() {
                if let Some(&&head) = stream.iter.peek() {
                    if best.is_none_or(|(_, b)| head < b) {
                        best = Some((at, head));
                    }
                }
            }
            let Some((at, (_, _, slot))) = best else {
                break;
            };
            let Some(stream) = streams.get_mut(at) else {
                break;
            };
            stream.iter.next();
            let Some(job) = self.job(slot) else { continue };
            if stream.strangers_only && Some(job.owner) == owner {
                continue; // the own stream yields it
            }
            if runner.is_some_and(|r| job.refused_by.contains(&r)) {
                continue;
            }
            if admits(&self.syms, job, stream.cap, stream.scope, args.runner_owner) {
                picked.push(slot);
            }
        }
        drop(streams);

        let runner_sym = self.syms.intern(args.runner_id);
        let expires_at = args.now + args.lease_ms;
        let mut claimed = Vec::with_capacity(picked.len());
        for slot in picked {
            let lease_id = match self.counter_lease_ids.as_mut() {
                Some(n) => {
                    *n += 1;
                    format!("lease-{n}")
                }
                // A fresh id per grant, so two claims of one job are distinguishable.
                None => uuid::Uuid::new_v4().to_string(),
            };
            self.write(slot, |job| {
                job.state = JobState::Claimed;
                job.lease = Some(Lease {
                    id: lease_id.into_boxed_str(),
                    runner: runner_sym,
                    expires_at,
                });
                job.attempts += 1.0;
                job.updated_at = args.now;
            });
            if let Some(r) = self.job_ref(slot) {
                claimed.push(r);
            }
        }
        claimed
    }

    /// `renewLeases`: sweep, then extend each named grant this runner holds.
    pub fn renew_leases(
        &mut self,
        runner_id: &str,
        leases: &[LeaseRef],
        lease_ms: f64,
        now: f64,
    ) -> RenewResult {
        let each = self.renew_leases_each(runner_id, leases, lease_ms, now);
        let mut result = RenewResult {
            renewed: Vec::new(),
            lost: Vec::new(),
        };
        for (lease_ref, renewed) in leases.iter().zip(each) {
            match renewed {
                Some(expires_at) => result.renewed.push((lease_ref.job_id.clone(), expires_at)),
                None => result.lost.push(lease_ref.clone()),
            }
        }
        result
    }

    /// `renewLeases`, answered per lease ref: the new expiry, or `None` = lost.
    pub fn renew_leases_each(
        &mut self,
        runner_id: &str,
        leases: &[LeaseRef],
        lease_ms: f64,
        now: f64,
    ) -> Vec<Option<f64>> {
        self.sweep(now, None);
        let runner = self.syms.lookup(runner_id);
        let mut each = Vec::with_capacity(leases.len());
        for lease_ref in leases {
            let slot = self.slot_of(&lease_ref.job_id);
            let holds = slot.and_then(|s| self.job(s)).is_some_and(|job| {
                job.state.is_held()
                    && job
                        .lease
                        .as_ref()
                        .is_some_and(|l| Some(l.runner) == runner && *l.id == *lease_ref.lease_id)
            });
            match slot {
                Some(slot) if holds => {
                    let expires_at = now + lease_ms;
                    self.write(slot, |job| {
                        job.state = JobState::Running;
                        if let Some(lease) = job.lease.as_mut() {
                            lease.expires_at = expires_at;
                        }
                        job.updated_at = now;
                    });
                    each.push(Some(expires_at));
                }
                _ => each.push(None),
            }
        }
        each
    }

    /// `adopt` (cloud lane): take a relay-granted lease on a queued job.
    pub fn adopt(
        &mut self,
        job_id: &str,
        lease_id: &str,
        expires_at: f64,
        now: f64,
    ) -> Option<JobRef> {
        let slot = self.slot_of(job_id)?;
        let job = self.job(slot)?;
        if !matches!(job.state, JobState::Queued | JobState::Claimed) {
            return None;
        }
        if job.lease.as_ref().is_some_and(|l| *l.id != *lease_id) {
            return None;
        }
        self.write(slot, |job| {
            job.state = JobState::Claimed;
            job.lease = Some(Lease {
                id: lease_id.into(),
                runner: ADOPTED,
                expires_at,
            });
            job.updated_at = now;
        });
        self.job_ref(slot)
    }

    /// `complete`: first terminal outcome wins; only the holder may write.
    pub fn complete(&mut self, args: &CompleteArgs<'_>) -> CompleteResult {
        let refused = |job: Option<JobRef>| CompleteResult {
            accepted: false,
            duplicate: false,
            job,
        };
        let Some(slot) = self.slot_of(args.job_id) else {
            return refused(None);
        };
        let Some(job) = self.job(slot) else {
            return refused(None);
        };
        let this = JobRef { slot, seq: job.seq };
        match job.state {
            JobState::Ok | JobState::Error | JobState::Canceled => {
                // A replay from the device *and* the grant that finished it is
                // told it is a duplicate; anyone else gets the refusal a
                // non-holder of a live job gets, so an id is no terminality probe.
                let same_device = job.provenance_runner.as_deref() == Some(args.runner_id);
                let same_grant = match args.holder {
                    Holder::Lease(lease_id) => {
                        job.completed_by_lease_id.as_deref() == Some(lease_id)
                    }
                    Holder::Runner(_) => false,
                };
                return CompleteResult {
                    accepted: false,
                    duplicate: same_device && same_grant,
                    job: Some(this),
                };
            }
            JobState::Expired => return refused(Some(this)),
            _ => {}
        }
        let holds = match (&job.lease, &args.holder) {
            (Some(lease), Holder::Runner(runner)) => self.syms.name(lease.runner) == *runner,
            (Some(lease), Holder::Lease(lease_id)) => *lease.id == **lease_id,
            (None, _) => false,
        };
        if !holds {
            return refused(Some(this));
        }
        let state = match args.outcome_tag {
            "ok" => JobState::Ok,
            "canceled" => JobState::Canceled,
            _ => JobState::Error,
        };
        let completed_by: Option<Box<str>> = match args.holder {
            Holder::Lease(lease_id) => Some(lease_id.into()),
            Holder::Runner(_) => job.lease.as_ref().map(|l| l.id.clone()),
        };
        self.write(slot, |job| {
            job.state = state;
            job.lease = None;
            job.completed_by_lease_id = completed_by;
            job.outcome = Some(args.outcome_json.into());
            job.provenance = Some(args.provenance_json.into());
            job.provenance_runner = args.provenance_runner.map(Into::into);
            job.updated_at = args.now;
        });
        if let Some(order) = self.cancel_ids.remove(args.job_id) {
            self.cancel_order.remove(&order);
        }
        if state == JobState::Ok {
            self.unblock_dependents(args.job_id, args.now);
        }
        CompleteResult {
            accepted: true,
            duplicate: false,
            job: Some(this),
        }
    }

    /// Start the TTL clock of every job that was waiting only on `done_id`.
    fn unblock_dependents(&mut self, done_id: &str, now: f64) {
        let Some(waiting) = self.dependents.remove(done_id) else {
            return;
        };
        let mut still_blocked = Vec::new();
        for r in waiting {
            let Some(job) = self.live(r) else { continue };
            if job.claimable_at.is_some() {
                continue;
            }
            if job.depends_on.iter().all(|dep| self.is_ok(dep)) {
                self.write(r.slot, |job| {
                    job.claimable_at = Some(now);
                    job.updated_at = now;
                });
            } else {
                // Kept: with retention a finished job can be dropped and its
                // id re-used, and a re-created dependency reaching `ok` must
                // still find the jobs waiting on it.
                still_blocked.push(r);
            }
        }
        if !still_blocked.is_empty() {
            self.dependents.insert(done_id.into(), still_blocked);
        }
    }

    /// `release`: back to the queue, remembering a refusal.
    pub fn release(
        &mut self,
        runner_id: &str,
        leases: &[LeaseRef],
        refused: bool,
        now: f64,
    ) -> Vec<String> {
        self.release_each(runner_id, leases, refused, now)
            .into_iter()
            .filter_map(|at| leases.get(at).map(|r| r.job_id.clone()))
            .collect()
    }

    /// `release`, answered as the positions of the refs that were released.
    pub fn release_each(
        &mut self,
        runner_id: &str,
        leases: &[LeaseRef],
        refused: bool,
        now: f64,
    ) -> Vec<usize> {
        let Some(runner) = self.syms.lookup(runner_id) else {
            return Vec::new();
        };
        let mut released = Vec::new();
        for (at, lease_ref) in leases.iter().enumerate() {
            let Some(slot) = self.slot_of(&lease_ref.job_id) else {
                continue;
            };
            let holds = self.job(slot).is_some_and(|job| {
                job.lease
                    .as_ref()
                    .is_some_and(|l| l.runner == runner && *l.id == *lease_ref.lease_id)
            });
            if !holds {
                continue;
            }
            self.write(slot, |job| {
                job.state = JobState::Queued;
                job.lease = None;
                job.completed_by_lease_id = None;
                job.claimable_at = Some(now);
                if refused && !job.refused_by.contains(&runner) {
                    job.refused_by.push(runner);
                }
                job.updated_at = now;
            });
            released.push(at);
        }
        released
    }

    /// `expireDue`: the three-pass sweep; a JSON array of the records
    /// written, in order, each as it was at its write (a job requeued in
    /// pass 1 and expired in pass 3 appears twice, first as `queued`).
    pub fn expire_due(&mut self, now: f64) -> String {
        let mut changed = String::new();
        self.expire_due_into(now, &mut changed);
        changed
    }

    /// [`Store::expire_due`], appending the JSON array to `out`.
    pub fn expire_due_into(&mut self, now: f64, out: &mut String) {
        let start = out.len();
        out.push('[');
        self.sweep(now, Some((out, start + 1)));
        out.push(']');
    }

    /// `expireDue` without the list of what it changed (the changes still
    /// reach watchers through [`Store::drain_writes`]).
    pub fn expire_due_quietly(&mut self, now: f64) {
        self.sweep(now, None);
    }

    /// Append the record at `slot` to a sweep's JSON array.
    /// `changed` is the output and the offset where the array's items start.
    fn snapshot(&self, slot: u32, changed: &mut Option<(&mut String, usize)>) {
        if let (Some((out, first)), Some(r)) = (changed.as_mut(), self.job_ref(slot)) {
            if out.len() > *first {
                out.push(',');
            }
            self.push_job_json(r, out);
        }
    }

    fn due(set: &BTreeSet<Entry>, now: f64) -> Vec<(u64, u32)> {
        let mut due: Vec<(u64, u32)> = set
            .range(..=(Key::new(now), u64::MAX, u32::MAX))
            .map(|&(_, seq, slot)| (seq, slot))
            .collect();
        // The reference's passes run in insertion order.
        due.sort_unstable();
        due
    }

    fn sweep(&mut self, now: f64, mut changed: Option<(&mut String, usize)>) {
        // Expired pairings go with the sweep (one comparison when none is due).
        self.people.prune(now);
        // Pass 1: leases this store issued that lapsed go back to the queue,
        // and the TTL clock restarts.
        for (_, slot) in Self::due(&self.idx.lease_expiry, now) {
            self.write(slot, |job| {
                job.state = JobState::Queued;
                job.lease = None;
                job.completed_by_lease_id = None;
                job.claimable_at = Some(now);
                job.updated_at = now;
            });
            self.snapshot(slot, &mut changed);
        }
        // Pass 2: adopted leases are the relay's; only their deadline ends them.
        let mut due = Self::due(&self.idx.adopted_deadline, now);
        for &(seq, slot) in &self.idx.adopted_floating {
            let bound = self.job(slot).map(|j| now + j.ttl_ms);
            // The reference expires unless `bound > now` (so NaN expires too).
            if bound.is_some_and(|b| b.partial_cmp(&now) != Some(std::cmp::Ordering::Greater)) {
                due.push((seq, slot));
            }
        }
        due.sort_unstable();
        for (_, slot) in due {
            self.write(slot, |job| expire(job, now));
            self.snapshot(slot, &mut changed);
        }
        // Pass 3: queued jobs past their deadline or TTL.
        for (_, slot) in Self::due(&self.idx.queued_expiry, now) {
            self.write(slot, |job| expire(job, now));
            self.snapshot(slot, &mut changed);
        }
        if let Some(retention) = self.options.retention_ms {
            self.drop_ended(now - retention);
        }

        fn expire(job: &mut Job, now: f64) {
            job.state = JobState::Expired;
            job.lease = None;
            job.completed_by_lease_id = None;
            job.updated_at = now;
        }
    }

    /// Retention: forget terminal jobs that ended at or before `cutoff`.
    fn drop_ended(&mut self, cutoff: f64) {
        let old: Vec<Entry> = self
            .idx
            .ended
            .range(..=(Key::new(cutoff), u64::MAX, u32::MAX))
            .copied()
            .collect();
        for entry in old {
            self.idx.ended.remove(&entry);
            let (_, _, slot) = entry;
            let Some(job) = self.job(slot) else { continue };
            // An `ok` job that blocked jobs still wait on stays: dropping it
            // would turn "waiting for one more dependency" into "blocked forever".
            let needed = job.state == JobState::Ok
                && self.dependents.get(&job.id).is_some_and(|w| {
                    w.iter()
                        .any(|&r| self.live(r).is_some_and(|d| d.claimable_at.is_none()))
                });
            if needed {
                continue;
            }
            let id = job.id.clone();
            let seq = job.seq;
            if let Some(changes) = &mut self.changes {
                changes.dropped.push(seq);
            }
            self.by_id.remove(&id);
            if let Some(order) = self.cancel_ids.remove(&id) {
                self.cancel_order.remove(&order);
            }
            if let Some(cell) = self.slots.get_mut(slot as usize) {
                *cell = None;
            }
            self.free.push(slot);
        }
    }

    /// `cancel`: a queued job at once, a held one by request to its runner.
    pub fn cancel(&mut self, job_id: &str, now: f64) -> Option<JobRef> {
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
    pub fn list_claimed_by(&self, runner_id: &str) -> Vec<JobRef> {
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
    pub fn list_cancel_requests(&self, runner_id: &str) -> Vec<LeaseRef> {
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
    pub fn all_jobs(&self) -> Vec<JobRef> {
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

    /// Deterministic lease ids (`lease-1`, `lease-2`, …), for tests that
    /// compare two stores operation by operation.
    #[doc(hidden)]
    pub fn use_counter_lease_ids(&mut self) {
        self.counter_lease_ids = Some(0);
    }

    // -- watchers -----------------------------------------------------------

    /// Start logging writes to `job_id` (see [`Store::drain_writes`]).
    pub fn watch(&mut self, job_id: &str) {
        self.watched.insert(job_id.into());
    }

    pub fn unwatch(&mut self, job_id: &str) {
        self.watched.remove(job_id);
        if self.watched.is_empty() {
            self.write_log.clear();
        }
    }

    /// The ids of watched jobs written since the last call, one per write, in order.
    pub fn drain_writes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.write_log)
    }
}

/// Which runners' claims can reach a job beyond its owner's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// `private`: only the owner's runners.
    Owner,
    /// `team` without an allowlist.
    Anyone,
    /// `team` with an allowlist: the owners on it.
    Allowlist,
}

fn reach_of(syms: &Interner, job: &Job) -> Reach {
    match Audience::matched_as(syms.name(job.audience)) {
        Audience::Private => Reach::Owner,
        Audience::Team if job.audience_allow.is_some() => Reach::Allowlist,
        Audience::Team => Reach::Anyone,
    }
}

/// How many jobs a claim may take. The reference stops once `claimed.length
/// >= max`, so a NaN `max` never stops it and a fractional one rounds up.
fn claim_limit(max: f64) -> usize {
    if max.is_nan() {
        usize::MAX
    } else if max <= 0.0 {
        0
    } else if max >= usize::MAX as f64 {
        usize::MAX
    } else {
        max.ceil() as usize
    }
}

/// One ordered source of claim candidates.
struct Stream<'a> {
    iter: std::iter::Peekable<std::collections::btree_set::Range<'a, Entry>>,
    cap: &'a ClaimCapability<'a>,
    scope: Option<OfferScope>,
    strangers_only: bool,
}

/// The claim predicate's audience half, through the shared matcher.
fn admits(
    syms: &Interner,
    job: &Job,
    cap: &ClaimCapability<'_>,
    scope: Option<OfferScope>,
    runner_owner: &str,
) -> bool {
    let job_owner = syms.name(job.owner);
    let audience = Audience::matched_as(syms.name(job.audience));
    let allow = job.audience_allow.as_deref();
    match scope {
        Some(scope) => server_admits(
            job_owner,
            audience,
            allow,
            scope,
            cap.backend_id,
            runner_owner,
        )
        .is_ok(),
        // An offer scope outside the vocabulary: the reference admits the
        // owner's own work before it looks at the scope, and fails the claim
        // for anyone else's; here the stranger is simply not admitted.
        None => {
            job_owner == runner_owner
                && server_admits(
                    job_owner,
                    audience,
                    allow,
                    OfferScope::Private,
                    cap.backend_id,
                    runner_owner,
                )
                .is_ok()
        }
    }
}
