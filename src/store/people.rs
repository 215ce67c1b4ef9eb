//! Pairings and runners (store.md §11).
//!
//! Few and small, so they are kept as the JSON objects the caller gave
//! (`serde_json` with `preserve_order`): a write changes values in place and
//! appends new keys at the end, which is what the reference's object spread
//! does to key order.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde_json::{Map, Value};

pub type Record = Map<String, Value>;

/// A runner record's keys in the reference's order, as an approval writes
/// them (the shell reads it through `protocolConstants().runnerKeys`).
pub const RUNNER_KEYS: [&str; 10] = [
    "id",
    "owner",
    "device",
    "label",
    "platform",
    "daemonVersion",
    "capabilities",
    "revokedAt",
    "lastHeartbeatAt",
    "createdAt",
];

/// Why `approvePairing` refused; `Display` is the reference's exact message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApproveError {
    Unknown(String),
    Expired,
    Already(String),
}

impl fmt::Display for ApproveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApproveError::Unknown(code) => write!(f, "unknown pairing code: {code}"),
            ApproveError::Expired => f.write_str("pairing code has expired"),
            ApproveError::Already(state) => write!(f, "pairing is already {state}"),
        }
    }
}

impl std::error::Error for ApproveError {}

/// The map key of a pairing: its `deviceCodeHash`. A non-string hash (only a
/// hand-built record has one) is keyed by its JSON text behind a NUL, so it
/// never collides with a string.
fn hash_key(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(other) => format!("\u{0}{other}"),
        None => "\u{0}undefined".to_string(),
    }
}

/// JS's `${value}` for the values a pairing state can hold.
fn display(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "undefined".to_string(),
    }
}

/// How long a pairing is kept after its `expiresAt`: the protocol's clock
/// window, so a daemon whose clock runs behind still hears `expired` (or
/// collects an approval made in time) before the pairing is pruned.
pub const PAIRING_GRACE_MS: f64 = 120_000.0;

/// Most pairings one store keeps. `pair start` is unauthenticated, so past
/// this the oldest pairing that is not an approval waiting to be collected
/// is dropped (its daemon hears `unknown device code` and starts over). With
/// a `pair start` body of at most [`crate::wire::MAX_PAIR_START_BYTES`],
/// this bounds what pairings hold (see docs/security.md).
pub const MAX_PAIRINGS: usize = 4096;

/// One pairing: the record as compact JSON text (its key order kept), and
/// the fields the store's rules read.
struct Pairing {
    /// Its key in `by_hash` (see [`hash_key`]).
    hash: String,
    json: Box<str>,
    code: Option<String>,
    state: Option<String>,
    expires_at: Option<f64>,
    collected: bool,
}

/// The fields of a pairing record the store's rules read; the rest of the
/// text is checked to be JSON and skipped.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    device_code_hash: Option<Value>,
    user_code: Option<Value>,
    state: Option<Value>,
    expires_at: Option<Value>,
    collected: Option<Value>,
    created_at: Option<Value>,
}

impl Pairing {
    /// A pairing from the JSON text of its record (`JSON.stringify`'s), kept
    /// as given: only the fields the rules read are taken out of it, and
    /// the record's `createdAt`. `None` when it is not the text of a JSON
    /// object.
    fn parse(json: String) -> Option<(Pairing, Option<f64>)> {
        if !json.trim_start().starts_with('{') {
            return None;
        }
        let head =
            serde_json::from_str::<Head>(&crate::json::lone_surrogates_replaced(&json)).ok()?;
        let text = |value: Option<Value>| match value {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let number = |value: Option<Value>| value.as_ref().and_then(Value::as_f64);
        let pairing = Pairing {
            hash: hash_key(head.device_code_hash.as_ref()),
            json: json.into_boxed_str(),
            code: text(head.user_code),
            state: text(head.state),
            expires_at: number(head.expires_at),
            collected: head.collected == Some(Value::Bool(true)),
        };
        Some((pairing, number(head.created_at)))
    }

    /// A pairing from its record as a value.
    fn from_record(record: &Record) -> Option<Pairing> {
        // Serialising a map of JSON values cannot fail.
        let json = serde_json::to_string(record).unwrap_or_default();
        Pairing::parse(json).map(|(pairing, _)| pairing)
    }

    /// The record as a value. The text is `JSON.stringify`'s, which writes a
    /// lone surrogate as an escape serde_json refuses: it is read as U+FFFD
    /// (what a lone surrogate becomes crossing into Rust anyway), so a label
    /// holding one still gives a whole runner record.
    fn record(&self) -> Record {
        serde_json::from_str(&crate::json::lone_surrogates_replaced(&self.json)).unwrap_or_default()
    }

    fn is(&self, state: &str) -> bool {
        self.state.as_deref() == Some(state)
    }

    /// `expiresAt <= now`, as the reference reads it (no number: never).
    fn expired(&self, now: f64) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// Pending and not expired: the only pairing an approval acts on.
    fn live(&self, now: f64) -> bool {
        self.is("pending") && !self.expired(now)
    }

    /// An approval its daemon has not collected yet: never evicted.
    fn awaiting_collection(&self) -> bool {
        self.is("approved") && !self.collected
    }
}

#[derive(Default)]
pub struct PairingStore {
    /// Pairings by insertion sequence; an overwrite keeps the sequence.
    pairings: BTreeMap<u64, Pairing>,
    next_seq: u64,
    by_hash: HashMap<String, u64>,
    /// User code → sequences of the pairings carrying it.
    by_code: HashMap<String, BTreeSet<u64>>,
    /// How many pairings the last prune left (prunes on create are amortised).
    pruned_to: usize,
    /// No pairing expires before this (a lower bound; `None`: none
    /// expires): a sweep with nothing to prune costs one comparison.
    next_expiry: Option<f64>,
    runners: Vec<Record>,
    runner_at: HashMap<String, usize>,
    /// The pairings (by device code hash) and runners (by position) written
    /// since the durable file last took them (`crate::store::durable`);
    /// `None` in memory only.
    pub(super) changes: Option<(Vec<String>, Vec<usize>)>,
}

impl PairingStore {
    fn pairing_changed(&mut self, hash: &str) {
        if let Some((pairings, _)) = &mut self.changes {
            pairings.push(hash.to_owned());
        }
    }

    fn runner_changed(&mut self, at: usize) {
        if let Some((_, runners)) = &mut self.changes {
            runners.push(at);
        }
    }

    /// A runner read back from the durable file, after those before it.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn load_runner(&mut self, record: Record) {
        let id = record.get("id").and_then(Value::as_str).map(str::to_owned);
        self.runners.push(record);
        if let Some(id) = id {
            self.runner_at.insert(id, self.runners.len() - 1);
        }
    }

    /// The pairing stored under `hash`: its insertion sequence and JSON text.
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn pairing_row(&self, hash: &str) -> Option<(u64, &str)> {
        let seq = *self.by_hash.get(hash)?;
        self.pairings.get(&seq).map(|p| (seq, &*p.json))
    }

    /// The runner at position `at` (insertion order).
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn runner_at(&self, at: usize) -> Option<&Record> {
        self.runners.get(at)
    }

    /// `createPairing`, for a record given as the JSON text of an object
    /// (`JSON.stringify`'s): stored by `deviceCodeHash`; the same hash
    /// overwrites. Expired pairings are pruned as the count doubles (the
    /// record's `createdAt` is the clock), and past [`MAX_PAIRINGS`] the
    /// oldest are dropped. `false` (nothing stored) when it is not the text
    /// of a JSON object.
    pub fn create_pairing_json(&mut self, json: String) -> bool {
        let Some((pairing, created_at)) = Pairing::parse(json) else {
            return false;
        };
        self.insert_pairing(pairing.hash.clone(), pairing, created_at);
        true
    }

    fn insert_pairing(&mut self, key: String, pairing: Pairing, created_at: Option<f64>) {
        self.pairing_changed(&key);
        let seq = match self.by_hash.get(&key) {
            Some(&seq) => {
                self.unindex_code(seq);
                seq
            }
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.by_hash.insert(key, seq);
                seq
            }
        };
        if let Some(code) = &pairing.code {
            self.by_code.entry(code.clone()).or_default().insert(seq);
        }
        if let Some(at) = pairing.expires_at {
            self.next_expiry = Some(self.next_expiry.map_or(at, |next| next.min(at)));
        }
        self.pairings.insert(seq, pairing);
        if let Some(now) = created_at {
            if self.pairings.len() >= (2 * self.pruned_to).max(1024) {
                self.prune(now);
            }
        }
        if self.pairings.len() > MAX_PAIRINGS {
            self.evict_oldest(seq);
        }
    }

    /// The sweep's part: drop pairings whose `expiresAt` is more than
    /// [`PAIRING_GRACE_MS`] past. Returns how many went. An approval its
    /// daemon has not collected stays until it is (a daemon may collect one
    /// at any time, as in the reference): approvals are a signed-in person's
    /// act, so these cannot pile up from unauthenticated traffic.
    pub fn prune(&mut self, now: f64) -> usize {
        let before = now - PAIRING_GRACE_MS;
        if self.next_expiry.is_none_or(|next| next > before) {
            return 0;
        }
        let mut next: Option<f64> = None;
        let mut gone = Vec::new();
        for (&seq, pairing) in &self.pairings {
            if pairing.awaiting_collection() {
                // Prunable again once collected (`consume` lowers the bound).
                continue;
            }
            match pairing.expires_at {
                Some(at) if at <= before => gone.push(seq),
                Some(at) if !at.is_nan() => next = Some(next.map_or(at, |n| n.min(at))),
                _ => {}
            }
        }
        for &seq in &gone {
            self.remove(seq);
        }
        self.next_expiry = next;
        self.pruned_to = self.pairings.len();
        gone.len()
    }

    /// Over [`MAX_PAIRINGS`]: drop the oldest pairings but `keep` and those
    /// awaiting collection.
    fn evict_oldest(&mut self, keep: u64) {
        let excess = self.pairings.len().saturating_sub(MAX_PAIRINGS);
        let gone: Vec<u64> = self
            .pairings
            .iter()
            .filter(|(&seq, p)| seq != keep && !p.awaiting_collection())
            .map(|(&seq, _)| seq)
            .take(excess)
            .collect();
        for seq in gone {
            self.remove(seq);
        }
    }

    fn unindex_code(&mut self, seq: u64) {
        let Some(code) = self.pairings.get(&seq).and_then(|p| p.code.clone()) else {
            return;
        };
        if let Some(set) = self.by_code.get_mut(&code) {
            set.remove(&seq);
            if set.is_empty() {
                self.by_code.remove(&code);
            }
        }
    }

    fn remove(&mut self, seq: u64) {
        self.unindex_code(seq);
        if let Some(pairing) = self.pairings.remove(&seq) {
            if self.by_hash.get(&pairing.hash) == Some(&seq) {
                self.by_hash.remove(&pairing.hash);
            }
            self.pairing_changed(&pairing.hash);
        }
    }

    /// The record stored under this hash, as JSON text.
    pub fn pairing_json_by_hash(&self, hash: &str) -> Option<&str> {
        self.by_hash
            .get(hash)
            .and_then(|seq| self.pairings.get(seq))
            .map(|p| &*p.json)
    }

    /// The pairing a user code names: the first pending one (insertion
    /// order), else the first with the code whatever its state.
    fn named(&self, code: &str) -> Option<u64> {
        let seqs = self.by_code.get(code)?;
        seqs.iter()
            .copied()
            .find(|seq| self.pairings.get(seq).is_some_and(|p| p.is("pending")))
            .or_else(|| seqs.first().copied())
    }

    /// [`Self::named`]'s record as JSON text.
    pub fn pairing_json_by_code(&self, code: &str) -> Option<&str> {
        self.named(code)
            .and_then(|seq| self.pairings.get(&seq))
            .map(|p| &*p.json)
    }

    /// `approvePairing`: create the runner from the pending, unexpired
    /// pairing with this code. Without one, the first pairing with the code
    /// says why (the reference's messages).
    pub fn approve(
        &mut self,
        code: &str,
        owner: &str,
        runner_id: &str,
        now: f64,
    ) -> Result<&Record, ApproveError> {
        let seqs = self
            .by_code
            .get(code)
            .ok_or_else(|| ApproveError::Unknown(code.to_string()))?;
        let live = seqs
            .iter()
            .copied()
            .find(|seq| self.pairings.get(seq).is_some_and(|p| p.live(now)));
        let Some(seq) = live else {
            let first = seqs
                .first()
                .and_then(|seq| self.pairings.get(seq))
                .ok_or_else(|| ApproveError::Unknown(code.to_string()))?;
            if first.expired(now) {
                return Err(ApproveError::Expired);
            }
            return Err(ApproveError::Already(display(first.record().get("state"))));
        };
        let (mut pairing, hash) = self
            .pairings
            .get(&seq)
            .map(|p| (p.record(), p.hash.clone()))
            .ok_or_else(|| ApproveError::Unknown(code.to_string()))?;
        let mut runner = Record::new();
        runner.insert("id".into(), Value::from(runner_id));
        runner.insert("owner".into(), Value::from(owner));
        // Carried from the pairing: the user approved this machine.
        for field in [
            "device",
            "label",
            "platform",
            "daemonVersion",
            "capabilities",
        ] {
            if let Some(value) = pairing.get(field) {
                runner.insert(field.into(), value.clone());
            }
        }
        runner.insert("revokedAt".into(), Value::Null);
        runner.insert("lastHeartbeatAt".into(), Value::from(now));
        runner.insert("createdAt".into(), Value::from(now));
        pairing.insert("state".into(), Value::from("approved"));
        pairing.insert("owner".into(), Value::from(owner));
        pairing.insert("runnerId".into(), Value::from(runner_id));
        pairing.insert("collected".into(), Value::Bool(false));
        self.pairing_changed(&hash);
        if let Some(approved) = Pairing::from_record(&pairing) {
            self.pairings.insert(seq, approved);
        }
        let at = match self.runner_at.get(runner_id) {
            Some(&at) => {
                if let Some(slot) = self.runners.get_mut(at) {
                    *slot = runner;
                }
                at
            }
            None => {
                self.runners.push(runner);
                let at = self.runners.len() - 1;
                self.runner_at.insert(runner_id.to_string(), at);
                at
            }
        };
        self.runner_changed(at);
        self.runners
            .get(at)
            .ok_or_else(|| ApproveError::Unknown(code.to_string()))
    }

    /// `denyPairing`: the pairing the code names ([`Self::named`]: a
    /// pending one first) becomes `denied`.
    pub fn deny(&mut self, code: &str) {
        if let Some(seq) = self.named(code) {
            self.rewrite(seq, |pairing| {
                pairing.insert("state".into(), Value::from("denied"));
            });
        }
    }

    /// `consumePairingToken`: mark the approval collected (deliver once).
    pub fn consume(&mut self, hash: &str) {
        if let Some(&seq) = self.by_hash.get(hash) {
            self.rewrite(seq, |pairing| {
                pairing.insert("collected".into(), Value::Bool(true));
            });
        }
    }

    fn rewrite(&mut self, seq: u64, change: impl FnOnce(&mut Record)) {
        let Some(stored) = self.pairings.get_mut(&seq) else {
            return;
        };
        let mut record = stored.record();
        change(&mut record);
        let Some(changed) = Pairing::from_record(&record) else {
            return;
        };
        *stored = changed;
        let hash = stored.hash.clone();
        if let Some(at) = stored.expires_at {
            self.next_expiry = Some(self.next_expiry.map_or(at, |next| next.min(at)));
        }
        self.pairing_changed(&hash);
    }

    pub fn runner(&self, id: &str) -> Option<&Record> {
        self.runner_at.get(id).and_then(|&at| self.runners.get(at))
    }

    /// `touchRunner`: new capabilities and version, heartbeat now.
    pub fn touch(
        &mut self,
        id: &str,
        capabilities: Value,
        daemon_version: Value,
        now: f64,
    ) -> Option<&Record> {
        let at = *self.runner_at.get(id)?;
        let runner = self.runners.get_mut(at)?;
        runner.insert("capabilities".into(), capabilities);
        runner.insert("daemonVersion".into(), daemon_version);
        runner.insert("lastHeartbeatAt".into(), Value::from(now));
        self.runner_changed(at);
        self.runners.get(at)
    }

    /// `revokeRunner`: one-way; the first revocation time is kept.
    pub fn revoke(&mut self, id: &str, now: f64) {
        let Some(&at) = self.runner_at.get(id) else {
            return;
        };
        if let Some(runner) = self.runners.get_mut(at) {
            if runner.get("revokedAt") == Some(&Value::Null) {
                runner.insert("revokedAt".into(), Value::from(now));
                self.runner_changed(at);
            }
        }
    }

    /// `listRunners`: all, or one owner's, revoked included, in insertion order.
    pub fn list_runners(&self, owner: Option<&str>) -> Vec<&Record> {
        self.runners
            .iter()
            .filter(|r| owner.is_none_or(|o| r.get("owner").and_then(Value::as_str) == Some(o)))
            .collect()
    }
}

/// Pairings as values, and what they hold, for the tests.
#[cfg(test)]
impl PairingStore {
    pub fn create_pairing(&mut self, record: Record) {
        let json = serde_json::to_string(&record).unwrap_or_default();
        assert!(
            self.create_pairing_json(json),
            "a pairing record is an object"
        );
    }

    /// How many pairings are kept, and the bytes of their records.
    pub fn pairing_footprint(&self) -> (usize, usize) {
        let bytes = self.pairings.values().map(|p| p.json.len()).sum();
        (self.pairings.len(), bytes)
    }

    pub fn pairing_by_hash(&self, hash: &str) -> Option<Record> {
        self.by_hash
            .get(hash)
            .and_then(|seq| self.pairings.get(seq))
            .map(Pairing::record)
    }

    pub fn pairing_by_code(&self, code: &str) -> Option<Record> {
        self.named(code)
            .and_then(|seq| self.pairings.get(&seq))
            .map(Pairing::record)
    }
}
