//! Reseal ahead: when the direct lane grants a lease, the payload's reseal
//! for the device holding it starts at once on a background thread, so the
//! `fetch` the daemon sends next finds its envelope ready instead of opening
//! and sealing on the event loop.
//!
//! A daemon fetches every job it claims, right after the claim; the reseal
//! it needs depends only on the job's at-rest envelope, the site's keys and
//! the device's public keys, all known at claim time. So the work is the
//! same work, done earlier and on the other core, while the claim's answer
//! travels and the daemon reads it.
//!
//! What is kept is exactly what `fetch` would compute: a sealed envelope
//! (ciphertext for the device) or the failure the reseal gave. A fetch uses
//! it only when every input it was computed from is still the input the
//! fetch has (the job, its at-rest envelope, the site's keys, the device's
//! keys); anything else is computed inline. Nothing here decides
//! whether a fetch is allowed: the lane checks the signature and the lease
//! first, then asks for the envelope.
//!
//! Bounded: at most [`MAX_KEPT`] reseals are kept (a claimed job that is
//! never fetched is dropped oldest first); the one background thread of
//! [`crate::chores`] does the work, ahead of its other chores; one still
//! queued when its fetch comes is taken back and done inline. A fetch waits
//! for a reseal already running only until it has run about twice as long
//! as reseals usually take here (never more than [`MAX_WAIT`]): past that
//! the thread has most likely lost its core (a busy or shared machine), and
//! doing the reseal inline is quicker than waiting for it. No thread
//! (WebAssembly, or a spawn refused) means every reseal is done inline.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::envelope::deferred::DeferredSeal;
use crate::envelope::{SealError, SealedEnvelope};
use crate::keys::{KeyHandle, PublicIdentity};

/// Reseals kept at once (about 5 KB each: the at-rest copy and the result).
pub const MAX_KEPT: usize = 1024;
/// How long a fetch spins for a running reseal before it sleeps.
const SPIN: Duration = Duration::from_micros(200);
/// The longest a fetch waits for a reseal the thread is running.
pub const MAX_WAIT: Duration = Duration::from_millis(20);
/// The least a fetch waits for a running reseal, however quick they are.
const MIN_PATIENCE: Duration = Duration::from_micros(50);
/// What reseals are assumed to take before the first one is timed.
const FIRST_TYPICAL: Duration = Duration::from_micros(200);

/// What a reseal gives: the envelope for the device, `Ok(None)` when the
/// at-rest envelope does not open, `Err` when the device's key cannot be
/// sealed to ([`super::reseal_for_device`]).
pub type Resealed = Result<Option<SealedEnvelope>, SealError>;

/// The payload as the store holds it.
#[derive(Clone)]
pub enum AtRest {
    Sealed(SealedEnvelope),
    /// Sealed when first needed; the same seal for every reader.
    Deferred(Arc<DeferredSeal>),
}

impl PartialEq for AtRest {
    fn eq(&self, other: &AtRest) -> bool {
        match (self, other) {
            (AtRest::Sealed(a), AtRest::Sealed(b)) => a == b,
            (AtRest::Deferred(a), AtRest::Deferred(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Everything a reseal is computed from.
pub struct Inputs {
    pub site: Arc<KeyHandle>,
    pub job_id: String,
    pub at_rest: AtRest,
    pub created_at: f64,
    pub device: PublicIdentity,
}

impl Inputs {
    /// The payload sealed for the device ([`super::reseal_for_device`]).
    /// A payload whose at-rest seal is not made yet is sealed for the
    /// device from its text: what opening that seal would give.
    pub fn reseal(&self) -> Resealed {
        let at_rest = match &self.at_rest {
            AtRest::Sealed(sealed) => sealed,
            AtRest::Deferred(deferred) => {
                // Only where the open would succeed: the same site's keys,
                // this job. Otherwise the seal is made and opened as any.
                let opens = same_site(deferred.site(), &self.site)
                    && deferred.context().job_id == self.job_id;
                if let Some(text) = deferred.plaintext().filter(|_| opens) {
                    return super::seal_for_device(
                        &self.site,
                        &text,
                        &self.job_id,
                        self.created_at,
                        &self.device,
                    )
                    .map(Some);
                }
                match deferred.sealed() {
                    Ok(sealed) => sealed,
                    Err(_) => return Ok(None),
                }
            }
        };
        super::reseal_for_device(
            &self.site,
            at_rest,
            &self.job_id,
            self.created_at,
            &self.device,
        )
    }

    /// Whether a reseal computed from `self` is the one `other` asks for.
    /// Equal public keys mean equal secrets (both are derived from them).
    fn serves(&self, other: &Inputs) -> bool {
        same_site(&self.site, &other.site)
            && self.job_id == other.job_id
            && self.created_at.to_bits() == other.created_at.to_bits()
            && self.device == other.device
            && self.at_rest == other.at_rest
    }
}

/// Whether two handles hold the same site keys. Equal public keys mean
/// equal secrets (both are derived from them).
fn same_site(a: &Arc<KeyHandle>, b: &Arc<KeyHandle>) -> bool {
    Arc::ptr_eq(a, b)
        || (a.key_id() == b.key_id()
            && a.encryption_public() == b.encryption_public()
            && a.signing_key().verifying_key() == b.signing_key().verifying_key())
}

enum Slot {
    Queued(Arc<Inputs>),
    /// Since when.
    Running(Arc<Inputs>, Instant),
    Done(Arc<Inputs>, Resealed),
}

impl Slot {
    fn inputs(&self) -> &Arc<Inputs> {
        match self {
            Slot::Queued(i) | Slot::Running(i, _) | Slot::Done(i, _) => i,
        }
    }
}

#[derive(Default)]
struct State {
    /// By job id.
    slots: HashMap<String, Slot>,
    /// Job ids in the order they were started, for eviction (may name jobs
    /// already taken; compacted when it grows past twice the bound).
    order: VecDeque<String>,
}

struct Shared {
    state: Mutex<State>,
    /// Fetches wait here for a running reseal.
    done: Condvar,
    /// How long a reseal on the thread takes, smoothed (nanoseconds).
    typical_ns: AtomicU64,
}

impl Shared {
    /// How long a fetch waits for a reseal from the moment it started.
    fn patience(&self) -> Duration {
        let typical = Duration::from_nanos(self.typical_ns.load(Ordering::Relaxed));
        typical.saturating_mul(2).clamp(MIN_PATIENCE, MAX_WAIT)
    }

    /// Fold one reseal's time into the typical time, an eighth of the way.
    /// One sample counts for at most twice the typical time, so a reseal
    /// the thread was stalled in barely moves it, while reseals that really
    /// take longer (larger payloads) raise it within a few.
    fn timed(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .typical_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let sample = took.min(old.saturating_mul(2)).max(1);
                Some((old - old / 8).saturating_add(sample / 8))
            });
    }
}

/// Reseals started ahead, computed on the background thread
/// ([`crate::chores`]).
pub struct Reseals {
    shared: Arc<Shared>,
}

impl Reseals {
    /// The process's own, for every site and store in it; `None` where
    /// there is no background thread (the lane reseals inline).
    pub fn global() -> Option<&'static Reseals> {
        static GLOBAL: OnceLock<Option<Reseals>> = OnceLock::new();
        GLOBAL.get_or_init(Reseals::new).as_ref()
    }

    /// A new, empty set; `None` where there is no background thread.
    pub fn new() -> Option<Reseals> {
        crate::chores::available().then(|| Reseals {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                done: Condvar::new(),
                typical_ns: AtomicU64::new(
                    u64::try_from(FIRST_TYPICAL.as_nanos()).unwrap_or(u64::MAX),
                ),
            }),
        })
    }

    /// Start the reseal `inputs` describe (replacing one kept for the same job).
    pub fn start(&self, inputs: Inputs) {
        let Ok(mut state) = self.shared.state.lock() else {
            return;
        };
        let job_id = inputs.job_id.clone();
        while state.slots.len() >= MAX_KEPT {
            let Some(oldest) = state.order.pop_front() else {
                break;
            };
            state.slots.remove(&oldest);
        }
        if state.order.len() > 2 * MAX_KEPT {
            let State { slots, order, .. } = &mut *state;
            order.retain(|id| slots.contains_key(id));
        }
        let inputs = Arc::new(inputs);
        state
            .slots
            .insert(job_id.clone(), Slot::Queued(Arc::clone(&inputs)));
        state.order.push_back(job_id);
        drop(state);
        let (shared, queued) = (Arc::clone(&self.shared), Arc::clone(&inputs));
        if !crate::chores::run_first(move || compute(&shared, &queued)) {
            // No room on the thread: its fetch reseals. (Only this slot: a
            // start from another thread may have replaced it meanwhile.)
            if let Ok(mut state) = self.shared.state.lock() {
                let ours = matches!(
                    state.slots.get(&inputs.job_id),
                    Some(Slot::Queued(kept)) if Arc::ptr_eq(kept, &inputs)
                );
                if ours {
                    state.slots.remove(&inputs.job_id);
                }
            }
        }
    }

    /// The reseal kept for `inputs`, taken out (waiting for it if the thread
    /// is running it, within the patience described above); `None` when
    /// there is none to use and the caller reseals.
    pub fn take(&self, inputs: &Inputs) -> Option<Resealed> {
        let shared = &*self.shared;
        let mut state = shared.state.lock().ok()?;
        let asked = Instant::now();
        let spin_until = asked.checked_add(SPIN).unwrap_or(asked);
        let patience = shared.patience();
        loop {
            match state.slots.get(&inputs.job_id) {
                Some(Slot::Running(kept, since)) if kept.serves(inputs) => {
                    let now = Instant::now();
                    let end = since.checked_add(patience);
                    let Some(left) = end.and_then(|end| end.checked_duration_since(now)) else {
                        // Overdue: the fetch reseals, and the thread's
                        // answer, when it comes, finds no slot to fill.
                        state.slots.remove(&inputs.job_id);
                        return None;
                    };
                    if now < spin_until {
                        // It finishes within microseconds: blocking would
                        // cost more in waking up than the wait itself.
                        drop(state);
                        for _ in 0..64 {
                            std::hint::spin_loop();
                        }
                        state = shared.state.lock().ok()?;
                    } else {
                        let (next, _) = shared.done.wait_timeout(state, left).ok()?;
                        state = next;
                    }
                }
                Some(Slot::Done(kept, _)) if kept.serves(inputs) => {
                    return match state.slots.remove(&inputs.job_id) {
                        Some(Slot::Done(_, resealed)) => Some(resealed),
                        _ => None,
                    };
                }
                Some(_) => {
                    // Still queued (the caller is as quick), or computed
                    // from other inputs.
                    state.slots.remove(&inputs.job_id);
                    return None;
                }
                None => return None,
            }
        }
    }

    #[cfg(test)]
    fn kept(&self) -> usize {
        self.shared.state.lock().map_or(0, |s| s.slots.len())
    }

    #[cfg(test)]
    fn finished(&self, job_id: &str) -> bool {
        self.shared.state.lock().is_ok_and(|s| {
            !matches!(
                s.slots.get(job_id),
                Some(Slot::Queued(_) | Slot::Running(..))
            )
        })
    }
}

/// On the background thread: compute the reseal `inputs` describe, if its
/// slot still waits for it, and keep the result there.
fn compute(shared: &Shared, inputs: &Arc<Inputs>) {
    let job_id = &inputs.job_id;
    {
        let Ok(mut state) = shared.state.lock() else {
            return;
        };
        match state.slots.get_mut(job_id) {
            Some(slot @ Slot::Queued(_)) if Arc::ptr_eq(slot.inputs(), inputs) => {
                *slot = Slot::Running(Arc::clone(inputs), Instant::now());
            }
            // Taken back by its fetch, replaced, or evicted.
            _ => return,
        }
    }
    // Wake the fetch waiting for this slot however the reseal ends (if it
    // unwinds, the slot goes and the fetch reseals itself).
    struct Finish<'a> {
        shared: &'a Shared,
        inputs: &'a Arc<Inputs>,
        resealed: Option<Resealed>,
    }
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            if let Ok(mut state) = self.shared.state.lock() {
                let job_id = &self.inputs.job_id;
                let ours = matches!(
                    state.slots.get(job_id),
                    Some(Slot::Running(kept, _)) if Arc::ptr_eq(kept, self.inputs)
                );
                if ours {
                    match self.resealed.take() {
                        Some(r) => {
                            state
                                .slots
                                .insert(job_id.clone(), Slot::Done(Arc::clone(self.inputs), r));
                        }
                        None => {
                            state.slots.remove(job_id);
                        }
                    }
                }
            }
            self.shared.done.notify_all();
        }
    }
    let mut finish = Finish {
        shared,
        inputs,
        resealed: None,
    };
    let started = Instant::now();
    finish.resealed = Some(inputs.reseal());
    shared.timed(started.elapsed());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{self, Text};
    use crate::keys::StoredKeys;

    fn handle(seed: u8) -> Arc<KeyHandle> {
        match KeyHandle::new(StoredKeys::from_secrets(
            &[seed; 32],
            &[seed.wrapping_add(1); 32],
            1,
        )) {
            Ok(h) => Arc::new(h),
            Err(e) => panic!("keys: {e}"),
        }
    }

    fn inputs(site: &Arc<KeyHandle>, device: &KeyHandle, job_id: &str) -> Inputs {
        let context = envelope::Context {
            job_id: job_id.into(),
            sender_key_id: site.key_id().into(),
            recipient_key_id: site.key_id().into(),
            deadline_at: 1_000.0 + envelope::ENVELOPE_MAX_AGE_MS,
            direction: "payload".into(),
        };
        let at_rest = match envelope::seal_with_handle(
            Text::Utf8("{\"prompt\":\"hi\"}"),
            site,
            &site.keys().encryption_public,
            &context,
        ) {
            Ok(s) => s,
            Err(e) => panic!("seal: {e}"),
        };
        Inputs {
            site: Arc::clone(site),
            job_id: job_id.into(),
            at_rest: AtRest::Sealed(at_rest),
            created_at: 1_000.0,
            device: device.public_identity(),
        }
    }

    fn opens_for(device: &KeyHandle, site: &KeyHandle, job_id: &str, sealed: &SealedEnvelope) {
        let expected = envelope::Expected {
            job_id: job_id.into(),
            sender_key_id: site.key_id().into(),
            recipient_key_id: device.key_id().into(),
            direction: "payload".into(),
        };
        match envelope::open_with_handle(sealed, device, site.identity_key(), &expected) {
            Ok(text) => assert_eq!(text.as_str(), "{\"prompt\":\"hi\"}"),
            Err(e) => panic!("the device could not open the kept reseal: {e:?}"),
        }
    }

    fn reseals() -> Reseals {
        match Reseals::new() {
            Some(r) => r,
            None => panic!("no thread"),
        }
    }

    /// Wait until the thread has finished the reseal for `job_id`.
    fn settle(reseals: &Reseals, job_id: &str) {
        for _ in 0..5_000 {
            if reseals.finished(job_id) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the reseal for {job_id} never finished");
    }

    /// Start a reseal of a fresh at-rest envelope for `job_id`, wait for
    /// it, and give the envelope it was made from.
    fn started(
        reseals: &Reseals,
        site: &Arc<KeyHandle>,
        device: &KeyHandle,
        job_id: &str,
    ) -> AtRest {
        let first = inputs(site, device, job_id);
        let at_rest = first.at_rest.clone();
        reseals.start(first);
        settle(reseals, job_id);
        at_rest
    }

    /// What a fetch of `job_id` asks with, for that at-rest envelope.
    fn asking(site: &Arc<KeyHandle>, device: &KeyHandle, job_id: &str, at_rest: AtRest) -> Inputs {
        Inputs {
            at_rest,
            ..inputs(site, device, job_id)
        }
    }

    #[test]
    fn a_started_reseal_is_taken_once_and_opens_for_the_device() {
        let reseals = reseals();
        let (site, device) = (handle(31), handle(37));
        reseals.start(inputs(&site, &device, "job-1"));
        settle(&reseals, "job-1");
        // A fresh at-rest seal of the same text is another envelope:
        // what was kept does not serve it.
        assert!(reseals.take(&inputs(&site, &device, "job-1")).is_none());

        let at_rest = started(&reseals, &site, &device, "job-2");
        let same = asking(&site, &device, "job-2", at_rest);
        match reseals.take(&same) {
            Some(Ok(Some(sealed))) => opens_for(&device, &site, "job-2", &sealed),
            Some(Ok(None)) => panic!("kept as not opening"),
            Some(Err(e)) => panic!("kept as a seal error: {e}"),
            None => panic!("nothing kept"),
        }
        assert!(reseals.take(&same).is_none(), "taken twice");
    }

    #[test]
    fn a_fetch_right_after_the_claim_gets_the_reseal_or_reseals_inline() {
        // No settling: the take races the thread. Whatever it finds, a kept
        // reseal opens for the device and nothing is handed out twice.
        let reseals = reseals();
        let (site, device) = (handle(71), handle(73));
        for n in 0..50 {
            let job_id = format!("race-{n}");
            let first = inputs(&site, &device, &job_id);
            let at_rest = first.at_rest.clone();
            reseals.start(first);
            let same = asking(&site, &device, &job_id, at_rest);
            if let Some(kept) = reseals.take(&same) {
                match kept {
                    Ok(Some(sealed)) => opens_for(&device, &site, &job_id, &sealed),
                    _ => panic!("a good at-rest envelope kept as a failure"),
                }
            }
            assert!(reseals.take(&same).is_none(), "taken twice");
        }
    }

    #[test]
    fn a_reseal_running_past_its_patience_is_given_up_to_the_fetch() {
        let reseals = reseals();
        let (site, device) = (handle(61), handle(67));
        // As if the thread had lost its core a second into this reseal.
        let stalled = Arc::new(inputs(&site, &device, "stalled"));
        let ask = asking(&site, &device, "stalled", stalled.at_rest.clone());
        let since = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .unwrap_or_else(Instant::now);
        if let Ok(mut state) = reseals.shared.state.lock() {
            state
                .slots
                .insert("stalled".into(), Slot::Running(Arc::clone(&stalled), since));
        }
        let asked = Instant::now();
        assert!(reseals.take(&ask).is_none(), "waited for a stalled reseal");
        assert!(asked.elapsed() < MAX_WAIT, "gave up only after MAX_WAIT");
        // The slot is gone, so the thread's late answer has nowhere to go
        // and the next fetch does not wait either.
        assert_eq!(reseals.kept(), 0);
    }

    #[test]
    fn patience_follows_the_typical_reseal_and_a_stall_barely_moves_it() {
        let reseals = reseals();
        let shared = &reseals.shared;
        let us = Duration::from_micros;
        shared.typical_ns.store(100_000, Ordering::Relaxed);
        assert_eq!(shared.patience(), us(200));
        // A 50 ms stall counts as twice the typical time, an eighth of the way.
        shared.timed(Duration::from_millis(50));
        assert_eq!(shared.patience(), us(225));
        // Reseals that really take longer raise it within a few dozen.
        for _ in 0..40 {
            shared.timed(us(400));
        }
        let raised = shared.patience();
        assert!(raised > us(760) && raised <= us(800), "{raised:?}");
        // Never below the floor, never above MAX_WAIT.
        for _ in 0..200 {
            shared.timed(Duration::ZERO);
        }
        assert_eq!(shared.patience(), MIN_PATIENCE);
        shared.typical_ns.store(u64::MAX / 4, Ordering::Relaxed);
        assert_eq!(shared.patience(), MAX_WAIT);
    }

    #[test]
    fn a_reseal_for_another_device_is_not_used_and_the_same_keys_are_the_same_site() {
        let reseals = reseals();
        let (site, device, other) = (handle(41), handle(43), handle(47));
        let at_rest = started(&reseals, &site, &device, "job-3");
        let for_other = asking(&site, &other, "job-3", at_rest.clone());
        assert!(reseals.take(&for_other).is_none(), "another device");
        let right = asking(&site, &device, "job-3", at_rest);
        assert!(reseals.take(&right).is_none(), "dropped after the mismatch");

        let twin = handle(41);
        let at_rest = started(&reseals, &site, &device, "job-4");
        let via_twin = asking(&twin, &device, "job-4", at_rest);
        assert!(
            matches!(reseals.take(&via_twin), Some(Ok(Some(_)))),
            "the same keys through another handle"
        );
    }

    #[test]
    fn a_deferred_payload_is_sealed_for_the_device_only_by_its_own_site() {
        let (site, other, device) = (handle(71), handle(73), handle(79));
        let deadline = 1_000.0 + envelope::ENVELOPE_MAX_AGE_MS;
        let deferred = match crate::envelope::deferred::DeferredSeal::new(
            &site,
            "{\"prompt\":\"hi\"}".into(),
            crate::direct::at_rest_context(&site, "job-6", deadline),
        ) {
            Ok(d) => d,
            Err(_) => panic!("own keys defer"),
        };
        let ask = |by: &Arc<KeyHandle>| Inputs {
            at_rest: AtRest::Deferred(Arc::clone(&deferred)),
            ..inputs(by, &device, "job-6")
        };
        let resealed_by_own_site = || match ask(&site).reseal() {
            Ok(Some(sealed)) => opens_for(&device, &site, "job-6", &sealed),
            _ => panic!("not resealed for the device"),
        };
        // From the text, the at-rest seal not made yet.
        resealed_by_own_site();
        assert!(!deferred.is_sealed());
        // Another site's keys get what opening the at-rest seal gives them.
        assert!(matches!(ask(&other).reseal(), Ok(None)));
        assert!(deferred.is_sealed());
        // And from the at-rest seal, once made.
        resealed_by_own_site();
    }

    #[test]
    fn a_failed_reseal_is_kept_as_the_failure() {
        let reseals = reseals();
        let (site, device) = (handle(51), handle(53));
        let mut broken = inputs(&site, &device, "job-5");
        if let AtRest::Sealed(sealed) = &mut broken.at_rest {
            sealed.ciphertext.replace_range(0..4, "AAAA");
        }
        let at_rest = broken.at_rest.clone();
        reseals.start(broken);
        settle(&reseals, "job-5");
        let asked = asking(&site, &device, "job-5", at_rest);
        assert!(matches!(reseals.take(&asked), Some(Ok(None))));
    }

    #[test]
    fn at_most_max_kept_reseals_are_kept_and_the_newest_survive() {
        let reseals = reseals();
        let (site, device) = (handle(61), handle(67));
        let template = inputs(&site, &device, "bound");
        let for_job = |n: usize| Inputs {
            site: Arc::clone(&site),
            job_id: format!("bound-{n}"),
            at_rest: template.at_rest.clone(),
            created_at: template.created_at,
            device: template.device.clone(),
        };
        let last = MAX_KEPT + 10;
        for n in 0..=last {
            reseals.start(for_job(n));
        }
        assert!(reseals.kept() <= MAX_KEPT, "{} kept", reseals.kept());
        settle(&reseals, &format!("bound-{last}"));
        assert!(
            reseals.take(&for_job(0)).is_none(),
            "the oldest was dropped"
        );
        // Wrong job id in the at-rest context: it does not open, and that
        // failure is what is kept.
        assert!(matches!(reseals.take(&for_job(last)), Some(Ok(None))));
    }
}
