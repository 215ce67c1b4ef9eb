//! Claims, lease renewal and release, adoption of a relay-granted lease, and
//! completion (which unblocks dependents): the calls that move a job between
//! `queued`, held and terminal on a runner's behalf.

use super::*;
use crate::audience::{server_admits, OfferScope};

impl Store {
    /// `claim`: sweep, then hand out up to `max` claimable jobs, oldest
    /// `claimableAt` first, ties in creation order.
    pub(crate) fn claim(&mut self, args: &ClaimArgs<'_>) -> Vec<JobRef> {
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

    /// `renewLeases`, answered per lease ref: the new expiry, or `None` = lost.
    pub(crate) fn renew_leases_each(
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
    pub(crate) fn adopt(
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
    pub(crate) fn complete(&mut self, args: &CompleteArgs<'_>) -> CompleteResult {
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

    /// `release`, answered as the positions of the refs that were released.
    pub(crate) fn release_each(
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
    cap: &'a ClaimCapability<&'a str>,
    scope: Option<OfferScope>,
    strangers_only: bool,
}

/// The claim predicate's audience half, through the shared matcher.
fn admits(
    syms: &Interner,
    job: &Job,
    cap: &ClaimCapability<&str>,
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
