//! The store's ordered indexes. A job's membership in each is a pure
//! function of its fields, so [`Indexes::add`] and [`Indexes::remove`] with
//! the same job are exact inverses, and [`super::Store`] keeps them right by
//! taking a job out before a write and putting it back after.

use std::collections::{BTreeSet, HashMap};

use super::{Interner, Job, JobState, Sym, ADOPTED};
use crate::audience::Audience;

/// An f64 ordered totally, for index keys. `-0` is folded into `0` because the
/// reference compares with `<`/`-`, where they are equal.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key(pub(super) f64);

impl Key {
    pub(super) fn new(value: f64) -> Key {
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
pub(super) type Entry = (Key, u64, u32);

/// The ordered indexes over the jobs.
#[derive(Default)]
pub(super) struct Indexes {
    /// Claimable jobs by (kind, owner), keyed by `claimableAt`: a runner's own
    /// owner's jobs, which it may take whatever their audience.
    pub(super) claim_own: HashMap<(Sym, Sym), BTreeSet<Entry>>,
    /// Claimable `team` jobs without an allowlist, by kind: any owner's
    /// runner whose offer admits strangers may take them.
    pub(super) claim_shared: HashMap<Sym, BTreeSet<Entry>>,
    /// Claimable `team` jobs with an allowlist, by kind and then by each
    /// allowed owner, so a runner never walks jobs whose list excludes it.
    pub(super) claim_allowed: HashMap<Sym, HashMap<Box<str>, BTreeSet<Entry>>>,
    /// Held jobs with a lease this store issued, by `lease.expiresAt`.
    pub(super) lease_expiry: BTreeSet<Entry>,
    /// Held jobs by the runner holding the lease (`""` for adopted), in creation order.
    pub(super) held_by: HashMap<Sym, BTreeSet<(u64, u32)>>,
    /// Held jobs with an adopted lease, by their deadline.
    pub(super) adopted_deadline: BTreeSet<Entry>,
    /// Adopted jobs with no deadline and no `claimableAt`: their bound is
    /// `now + ttlMs`, which depends on the sweep's `now`; few, checked each sweep.
    pub(super) adopted_floating: BTreeSet<(u64, u32)>,
    /// Queued jobs by the earlier of `deadlineAt` and `claimableAt + ttlMs`.
    pub(super) queued_expiry: BTreeSet<Entry>,
    /// Terminal jobs by the time they ended (only with retention on).
    pub(super) ended: BTreeSet<Entry>,
    /// How many jobs are in each state ([`JobState::ALL`]'s order).
    pub(super) by_state: [u64; 7],
}

impl Indexes {
    /// Count a job into (or out of) its state.
    pub(super) fn count(&mut self, state: JobState, insert: bool) {
        if let Some(at) = JobState::ALL.iter().position(|s| *s == state) {
            if let Some(n) = self.by_state.get_mut(at) {
                *n = if insert { *n + 1 } else { n.saturating_sub(1) };
            }
        }
    }
}

pub(super) fn finite_or_none(value: f64) -> Option<Key> {
    (!value.is_nan()).then(|| Key::new(value))
}

impl Indexes {
    pub(super) fn add(&mut self, job: &Job, slot: u32, reach: Reach, retention: bool) {
        self.apply(job, slot, reach, retention, true);
    }

    pub(super) fn remove(&mut self, job: &Job, slot: u32, reach: Reach, retention: bool) {
        self.apply(job, slot, reach, retention, false);
    }

    pub(super) fn apply(
        &mut self,
        job: &Job,
        slot: u32,
        reach: Reach,
        retention: bool,
        insert: bool,
    ) {
        pub(super) fn put(set: &mut BTreeSet<Entry>, entry: Entry, insert: bool) {
            if insert {
                set.insert(entry);
            } else {
                set.remove(&entry);
            }
        }
        let seq = job.seq;
        self.count(job.state, insert);
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

/// Which runners' claims can reach a job beyond its owner's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// `private`: only the owner's runners.
    Owner,
    /// `team` without an allowlist.
    Anyone,
    /// `team` with an allowlist: the owners on it.
    Allowlist,
}

pub(super) fn reach_of(syms: &Interner, job: &Job) -> Reach {
    match Audience::matched_as(syms.name(job.audience)) {
        Audience::Private => Reach::Owner,
        Audience::Team if job.audience_allow.is_some() => Reach::Allowlist,
        Audience::Team => Reach::Anyone,
    }
}
