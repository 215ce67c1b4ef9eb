//! `expireDue`, which also runs before every claim: requeue jobs whose lease
//! lapsed, expire adopted and queued jobs past their deadline, prune expired
//! pairings, and forget ended jobs past retention.

use super::*;

impl Store {
    /// `expireDue`: the three-pass sweep, appending to `out` a JSON array of
    /// the records written, in order, each as it was at its write (a job
    /// requeued in pass 1 and expired in pass 3 appears twice, first as
    /// `queued`).
    pub(crate) fn expire_due_into(&mut self, now: f64, out: &mut String) {
        let start = out.len();
        out.push('[');
        self.sweep(now, Some((out, start + 1)));
        out.push(']');
    }

    /// `expireDue` without the list of what it changed (the changes still
    /// reach watchers through [`Store::drain_writes`]).
    pub(crate) fn expire_due_quietly(&mut self, now: f64) {
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

    pub(super) fn sweep(&mut self, now: f64, mut changed: Option<(&mut String, usize)>) {
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
            // It left the ended index above; it leaves the counts here.
            let state = job.state;
            self.idx.count(state, false);
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
}
