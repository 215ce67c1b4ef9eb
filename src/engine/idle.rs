//! The idle memo: what a runner with nothing to do was last told, so that
//! its next identical claim or heartbeat is answered without the store while
//! nothing that answer depends on has changed.
//!
//! A SQL store says when its answer goes stale by itself: an empty claim's
//! `wakeAt` (the earliest a job could become claimable without any row
//! changing), a heartbeat's `seenAt` (the stored liveness). Its
//! notification channel says when anything else may have changed, as keys:
//! `o:<owner>` (a job of this owner became claimable, or a cancel was asked),
//! `t` (a team job did), `r:<runnerId>` (the runner changed or was revoked),
//! `*` (anything did). An answer without `wakeAt` / `seenAt` (our own store,
//! a user's) is never remembered.
//!
//! Nothing is remembered or answered unless the shell reports the channel
//! healthy, and every change of health forgets everything: with no channel,
//! every request goes to the store.
//!
//! Races: an operation is stamped with the count of keys seen when the
//! engine asks for it, and its answer is remembered and used only while no
//! key affecting it has a later count; a change committed while the store
//! worked is notified after that, so it is never lost.
//!
//! A heartbeat answered here still refreshes the runner's liveness: when the
//! stored value is `LIVENESS_WRITE_MS` old the runner goes into the due set,
//! which the shell writes in batches (`byollm_touch_runners`); past
//! `LIVENESS_SLACK_MS` the heartbeat goes to the store. So the stored
//! liveness never lags a runner's last request by the slack or more.
//!
//! Sans-IO: every time is a request's `now`.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::MutexGuard;

use hashlink::{LinkedHashMap, LruCache};

use super::rules::{LIVENESS_SLACK_MS, LIVENESS_WRITE_MS};
use super::{ops, Site};
use crate::json::{self, Node, Obj};

/// Runners remembered (the least recently used forgotten first), runners
/// and owners whose last key is kept (past that, everything is forgotten),
/// and liveness writes waiting.
pub(crate) const MEMOS: usize = 262_144;

/// The longest an empty claim is trusted, whatever the channel says: a
/// safety net for a change that notified nobody (a row edited with the
/// triggers disabled).
const CLAIM_TRUST_MS: f64 = 300_000.0;

/// Liveness writes handed out at once (`byollm_touch_runners` takes 1,000).
const DUE_BATCH: usize = 1_000;

/// A remembered answer.
#[derive(Clone, Copy)]
struct Entry {
    stamp: u64,
    shape: u64,
    team: bool,
    /// A claim: trusted before this. A heartbeat: the stored liveness plus
    /// the slack.
    until: f64,
}

/// A runner's last empty claim (`[0]`) and last quiet heartbeat (`[1]`).
type Memo = [Option<Entry>; 2];

/// A claim or heartbeat as the memo files it.
pub(crate) struct Ask {
    beat: bool,
    /// A keyed hash of what the answer depends on in the request: the
    /// capabilities and `max`, or the capabilities and daemon version.
    shape: u64,
    /// The runner offers team scope (a `t` key concerns its claims).
    team: bool,
    stamp: u64,
    /// The memo answers it: an empty claim, a heartbeat with nothing to tell.
    pub answered: bool,
}

/// What a key makes the site forget of the runners it verified.
enum Forget<'a> {
    Nothing,
    Runner(&'a str),
    All,
}

pub(crate) struct Idle {
    healthy: bool,
    /// Keys and clears so far; an operation is stamped with it when asked.
    count: u64,
    /// Nothing stamped before this is used (the last clear).
    floor: u64,
    /// The count at the last `t`, and at the last `o:` / `r:` by name.
    team: u64,
    owners: HashMap<String, u64>,
    runners: HashMap<String, u64>,
    memos: LruCache<String, Memo>,
    /// Runners whose liveness write is due, with the time to write.
    due: LinkedHashMap<String, f64>,
    hasher: RandomState,
}

impl Idle {
    pub(crate) fn new() -> Idle {
        Idle {
            healthy: false,
            count: 0,
            floor: 0,
            team: 0,
            owners: HashMap::new(),
            runners: HashMap::new(),
            memos: LruCache::new(MEMOS),
            due: LinkedHashMap::new(),
            hasher: RandomState::new(),
        }
    }

    /// Whether an answer asked at `stamp` still stands (`owner`: a claim's).
    fn fresh(&self, stamp: u64, runner_id: &str, owner: Option<&str>, team: bool) -> bool {
        let quiet = |last: Option<&u64>| last.is_none_or(|&at| at <= stamp);
        self.healthy
            && stamp >= self.floor
            && quiet(self.runners.get(runner_id))
            && owner.is_none_or(|o| quiet(self.owners.get(o)))
            && (!team || self.team <= stamp)
    }

    /// `None` while the channel is not healthy: nothing asked then is remembered.
    fn ask(
        &mut self,
        beat: bool,
        shape: impl Hash,
        team: bool,
        runner: &ops::Runner,
        now: f64,
    ) -> Option<Ask> {
        if !self.healthy {
            return None;
        }
        let mut ask = Ask {
            beat,
            shape: self.hasher.hash_one(shape),
            team,
            stamp: self.count,
            answered: false,
        };
        let Some(Some(entry)) = self.memos.get(&runner.id).map(|m| m[usize::from(beat)]) else {
            return Some(ask);
        };
        let owner = (!beat).then_some(runner.owner.as_str());
        ask.answered = entry.shape == ask.shape
            && now < entry.until
            && self.fresh(entry.stamp, &runner.id, owner, entry.team);
        // The stored liveness is `LIVENESS_WRITE_MS` old: write it, without
        // the answer waiting (or, with no room to wait, at the store).
        if ask.answered && beat && now >= entry.until - LIVENESS_SLACK_MS + LIVENESS_WRITE_MS {
            if self.due.len() >= MEMOS && !self.due.contains_key(&runner.id) {
                ask.answered = false;
            } else {
                self.due.insert(runner.id.clone(), now);
            }
        }
        Some(ask)
    }

    fn answered(&mut self, ask: &Ask, runner: &ops::Runner, until: f64) {
        let owner = (!ask.beat).then_some(runner.owner.as_str());
        if !self.fresh(ask.stamp, &runner.id, owner, ask.team) {
            return;
        }
        let entry = Some(Entry {
            stamp: ask.stamp,
            shape: ask.shape,
            team: ask.team,
            until,
        });
        match self.memos.get_mut(&runner.id) {
            Some(memo) => memo[usize::from(ask.beat)] = entry,
            None => {
                let mut memo = [None; 2];
                memo[usize::from(ask.beat)] = entry;
                self.memos.insert(runner.id.clone(), memo);
            }
        }
    }

    fn clear(&mut self) {
        self.count += 1;
        self.floor = self.count;
        self.owners.clear();
        self.runners.clear();
        self.memos.clear();
    }

    fn key<'k>(&mut self, key: &'k str) -> Forget<'k> {
        self.count += 1;
        let at = self.count;
        let forget = match key.split_once(':') {
            _ if key == "t" => {
                self.team = at;
                Forget::Nothing
            }
            Some(("o", owner)) => {
                self.owners.insert(owner.to_owned(), at);
                Forget::Nothing
            }
            Some(("r", id)) => {
                self.runners.insert(id.to_owned(), at);
                self.memos.remove(id);
                Forget::Runner(id)
            }
            // `*`, and any key this engine does not know.
            _ => {
                self.clear();
                return Forget::All;
            }
        };
        if self.owners.len() + self.runners.len() > MEMOS {
            self.clear();
            return Forget::All;
        }
        forget
    }

    fn due(&mut self) -> String {
        let mut out = String::from("[");
        for _ in 0..DUE_BATCH {
            let Some((runner_id, now)) = self.due.pop_front() else {
                break;
            };
            if out.len() > 1 {
                out.push(',');
            }
            let mut entry = Obj::new();
            entry.str("runnerId", &runner_id).num("now", now);
            out.push_str(&entry.end());
        }
        out.push(']');
        out
    }

    /// `byollm_touch_runners`'s answer: each runner's stored liveness, or
    /// that it is gone (its ids, to forget). What is not understood is left.
    fn seen(&mut self, answer: &str) -> Vec<String> {
        let mut gone = Vec::new();
        let Ok(doc) = json::parse(answer) else {
            return gone;
        };
        let Node::Array(items) = doc.node(doc.root()) else {
            return gone;
        };
        for &item in items {
            let Some(id) = doc.get(item, "runnerId").and_then(|id| doc.str(id)) else {
                continue;
            };
            let id = id.as_str();
            let revoked = doc.node_at(doc.get(item, "revoked")) == Some(&Node::Bool(true));
            match doc.node_at(doc.get(item, "seenAt")) {
                Some(Node::Number(seen_at)) if !revoked => {
                    if let Some(Some(beat)) = self.memos.peek_mut(id).map(|m| &mut m[1]) {
                        beat.until = beat.until.max(seen_at + LIVENESS_SLACK_MS);
                    }
                }
                _ => {
                    self.memos.remove(id);
                    gone.push(id.to_owned());
                }
            }
        }
        gone
    }
}

impl Site {
    fn idle(&self) -> Option<MutexGuard<'_, Idle>> {
        self.idle.lock().ok()
    }

    /// A claim (`beat` false) or a heartbeat without leases, as the memo
    /// files it and whether it answers it.
    pub(crate) fn idle_ask(
        &self,
        beat: bool,
        shape: impl Hash,
        team: bool,
        runner: &ops::Runner,
        now: f64,
    ) -> Option<Ask> {
        self.idle()?.ask(beat, shape, team, runner, now)
    }

    /// The store's empty claim, trusted until `wake_at` (`INFINITY`: no job
    /// becomes claimable by itself).
    pub(crate) fn idle_claimed(&self, ask: &Ask, runner: &ops::Runner, wake_at: f64, now: f64) {
        if let Some(mut idle) = self.idle() {
            idle.answered(ask, runner, wake_at.min(now + CLAIM_TRUST_MS));
        }
    }

    /// The store's quiet heartbeat, with the runner's stored liveness.
    pub(crate) fn idle_beat(&self, ask: &Ask, runner: &ops::Runner, seen_at: f64) {
        if let Some(mut idle) = self.idle() {
            idle.answered(ask, runner, seen_at + LIVENESS_SLACK_MS);
        }
    }

    /// A notification key. `r:<id>` and `*` also forget the verified
    /// identity, so the runner's next request is read, and refused, at the store.
    pub(crate) fn idle_key(&self, key: &str) {
        let forget = match self.idle() {
            Some(mut idle) => match idle.key(key) {
                Forget::Nothing => return,
                Forget::Runner(id) => Some(id),
                Forget::All => None,
            },
            None => return,
        };
        match forget {
            Some(id) => self.remember(id, None),
            None => {
                if let Ok(mut known) = self.known.lock() {
                    known.clear();
                }
            }
        }
    }

    /// The channel's health changed: everything remembered is forgotten.
    /// (Liveness writes waiting are kept: they are true either way.)
    pub(crate) fn idle_health(&self, healthy: bool) {
        if let Some(mut idle) = self.idle() {
            idle.healthy = healthy;
            idle.clear();
        }
    }

    /// The liveness writes due, at most 1,000, as `[{"runnerId","now"}]`,
    /// handed out once.
    pub(crate) fn idle_due(&self) -> String {
        self.idle()
            .map_or_else(|| "[]".into(), |mut idle| idle.due())
    }

    /// What the liveness writes found (`byollm_touch_runners`'s answer).
    pub(crate) fn idle_seen(&self, answer: &str) {
        let gone = self.idle().map(|mut idle| idle.seen(answer));
        for id in gone.unwrap_or_default() {
            self.remember(&id, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::PublicIdentity;

    fn runner(n: usize) -> ops::Runner {
        ops::Runner {
            id: format!("r{n}"),
            owner: "bob".into(),
            device: PublicIdentity {
                identity: String::new(),
                encryption: String::new(),
                encryption_sig: String::new(),
            },
            revoked: false,
        }
    }

    /// An idle memo with a healthy channel and `n` runners' quiet heartbeats.
    fn with_beats(n: usize) -> Idle {
        let mut idle = Idle::new();
        idle.healthy = true;
        for at in 0..n {
            let r = runner(at);
            let ask = idle.ask(true, "caps", false, &r, 0.0).expect("healthy");
            idle.answered(&ask, &r, LIVENESS_SLACK_MS);
        }
        idle
    }

    fn answers(idle: &mut Idle, n: usize, now: f64) -> bool {
        idle.ask(true, "caps", false, &runner(n), now)
            .is_some_and(|ask| ask.answered)
    }

    #[test]
    fn memory_is_bounded_the_least_recently_used_runner_forgotten_first() {
        let mut idle = with_beats(MEMOS);
        assert!(answers(&mut idle, 0, 1.0), "used: now the most recent");
        let r = runner(MEMOS);
        let ask = idle.ask(true, "caps", false, &r, 0.0).expect("healthy");
        idle.answered(&ask, &r, LIVENESS_SLACK_MS);
        assert_eq!(idle.memos.len(), MEMOS);
        assert!(answers(&mut idle, 0, 1.0) && answers(&mut idle, MEMOS, 1.0));
        assert!(!answers(&mut idle, 1, 1.0), "the oldest is gone");
    }

    #[test]
    fn past_the_bound_of_keys_kept_everything_is_forgotten() {
        let mut idle = with_beats(2);
        for at in 0..MEMOS {
            idle.key(&format!("o:owner{at}"));
        }
        assert!(answers(&mut idle, 0, 1.0));
        assert!(matches!(idle.key("r:other"), Forget::All));
        assert!(!answers(&mut idle, 0, 1.0) && idle.owners.is_empty());
    }

    #[test]
    fn the_due_set_is_handed_out_a_thousand_at_a_time_and_is_bounded() {
        let mut idle = with_beats(2_500);
        let due_at = LIVENESS_WRITE_MS;
        for at in 0..2_500 {
            assert!(answers(&mut idle, at, due_at));
        }
        let count = |json: String| json.matches("runnerId").count();
        assert_eq!(count(idle.due()), 1_000);
        assert!(idle
            .due()
            .starts_with(r#"[{"runnerId":"r1000","now":45000}"#));
        assert_eq!(count(idle.due()), 500);
        assert_eq!(idle.due(), "[]");
        // Full: a heartbeat whose write cannot wait goes to the store.
        for at in 0..MEMOS {
            idle.due.insert(format!("x{at}"), 0.0);
        }
        assert!(!answers(&mut idle, 0, due_at));
        assert!(answers(&mut idle, 0, due_at - 1.0), "not due: answered");
    }
}
