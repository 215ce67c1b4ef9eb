//! Pairings and runners (store.md §11).
//!
//! Few and small, so each is kept as the JSON text of its record (key order
//! kept, read with the core's own [`json`] model), beside the fields the
//! store's rules read. A change is an object spread on that text
//! ([`spread`]): a changed key keeps its place and a new one goes at the
//! end, which is what the reference's `{...record, ...changes}` does to key
//! order.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::json::{self, json_string, write_json_str, Doc, Node, NodeId};
use crate::keys::PublicIdentity;
use crate::metrics::RunnerCounts;

/// A runner record's keys in the reference's order, as an approval writes
/// them (the shell reads it through `protocolConstants().runnerKeys`).
pub(crate) const RUNNER_KEYS: [&str; 10] = [
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApproveError {
    #[error("unknown pairing code: {0}")]
    Unknown(String),
    #[error("pairing code has expired")]
    Expired,
    #[error("pairing is already {0}")]
    Already(String),
}

/// A record's JSON text parsed, when it is the text of an object.
fn object(json: &str) -> Option<(Doc, NodeId)> {
    let doc = json::parse(json).ok()?;
    let root = doc.root();
    matches!(doc.node(root), Node::Object(_)).then_some((doc, root))
}

/// `obj[key]` when it is a string (a lone surrogate reads as U+FFFD).
fn text(doc: &Doc, obj: NodeId, key: &str) -> Option<String> {
    doc.str(doc.get(obj, key)?).map(|s| s.as_str().to_owned())
}

fn number(doc: &Doc, obj: NodeId, key: &str) -> Option<f64> {
    match doc.node(doc.get(obj, key)?) {
        Node::Number(n) => Some(*n),
        _ => None,
    }
}

/// JS's `${obj[key]}` for the values a pairing state can hold.
fn display(doc: &Doc, obj: NodeId, key: &str) -> String {
    match doc.get(obj, key) {
        Some(id) => match doc.node(id) {
            Node::String(s) => s.as_str().to_owned(),
            _ => doc.to_json(id),
        },
        None => "undefined".to_string(),
    }
}

/// The map key of a pairing: its `deviceCodeHash`. A hash that is not a
/// string (only a hand-built record has one) is keyed by its JSON text
/// behind a NUL, so it never collides with a string; `null` keys as a
/// missing hash.
fn hash_key(doc: &Doc, obj: NodeId) -> String {
    match doc.get(obj, "deviceCodeHash").map(|id| (id, doc.node(id))) {
        Some((_, Node::String(s))) => s.as_str().to_owned(),
        Some((id, node)) if *node != Node::Null => format!("\u{0}{}", doc.to_json(id)),
        _ => "\u{0}undefined".to_string(),
    }
}

/// `{...record, ...changes}` on JSON texts (`changes` values are JSON
/// texts): a changed key keeps its place, a new one goes at the end. `None`
/// when `record` is not the text of an object.
fn spread(record: &str, changes: &[(&str, &str)]) -> Option<String> {
    let (doc, root) = object(record)?;
    let Node::Object(entries) = doc.node(root) else {
        return None;
    };
    let mut out = String::with_capacity(record.len() + 64);
    out.push('{');
    for (key, value) in entries {
        if out.len() > 1 {
            out.push(',');
        }
        key.write_json(&mut out);
        out.push(':');
        match changes.iter().find(|(changed, _)| key.is(changed)) {
            Some((_, new)) => out.push_str(new),
            None => out.push_str(&doc.to_json(*value)),
        }
    }
    for (key, value) in changes {
        if !entries.iter().any(|(k, _)| k.is(key)) {
            if out.len() > 1 {
                out.push(',');
            }
            write_json_str(key, &mut out);
            out.push(':');
            out.push_str(value);
        }
    }
    out.push('}');
    Some(out)
}

/// `JSON.stringify` of a number, for [`spread`].
fn json_num(n: f64) -> String {
    let mut out = String::new();
    json::push_json_number(&mut out, n);
    out
}

/// How long a pairing is kept after its `expiresAt`: the protocol's clock
/// window, so a daemon whose clock runs behind still hears `expired` (or
/// collects an approval made in time) before the pairing is pruned.
pub(crate) const PAIRING_GRACE_MS: f64 = 120_000.0;

/// Most pairings one store keeps. `pair start` is unauthenticated, so past
/// this the oldest pairing that is not an approval waiting to be collected
/// is dropped (its daemon hears `unknown device code` and starts over). With
/// a `pair start` body of at most [`crate::schema::MAX_PAIR_START_BYTES`],
/// this bounds what pairings hold (see docs/security.md).
pub(crate) const MAX_PAIRINGS: usize = 4096;

/// Most pending pairings one request source may hold (a 64th of
/// [`MAX_PAIRINGS`]): `pair start` past it is refused `rate-limited`, so
/// 64 sources must each fill their share before the store is full, and no
/// source can push out a pairing another started (see docs/security.md).
pub(crate) const SOURCE_SHARE: usize = MAX_PAIRINGS / 64;

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
    /// The keyed hash of the request source that started it (`None`:
    /// written by the app through `createPairing`, not by a request).
    source: Option<Box<str>>,
}

impl Pairing {
    /// A pairing from the JSON text of its record (`JSON.stringify`'s), kept
    /// as given, and the record's `createdAt`. `None` when it is not the
    /// text of a JSON object.
    fn parse(json: String) -> Option<(Pairing, Option<f64>)> {
        let (doc, root) = object(&json)?;
        let collected = doc.get(root, "collected").map(|id| doc.node(id));
        let pairing = Pairing {
            hash: hash_key(&doc, root),
            code: text(&doc, root, "userCode"),
            state: text(&doc, root, "state"),
            expires_at: number(&doc, root, "expiresAt"),
            collected: collected == Some(&Node::Bool(true)),
            json: json.into_boxed_str(),
            source: None,
        };
        Some((pairing, number(&doc, root, "createdAt")))
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

    /// Counted against its source's share: pending (expired or not, until
    /// it is pruned) and started by a request.
    fn held(&self) -> Option<&str> {
        self.source.as_deref().filter(|_| self.is("pending"))
    }

    /// An approval its daemon has not collected yet: never evicted.
    fn awaiting_collection(&self) -> bool {
        self.is("approved") && !self.collected
    }
}

/// One runner: the record as JSON text, and what the rules and a signed
/// request read of it.
struct Runner {
    json: Box<str>,
    id: Option<String>,
    owner: Option<String>,
    /// `revokedAt` holds `null`: the runner may still sign requests.
    active: bool,
    device: Option<PublicIdentity>,
    /// `lastHeartbeatAt` when it is a number.
    last_heartbeat_at: Option<f64>,
}

impl Runner {
    fn parse(json: String) -> Option<Runner> {
        // A runner record is built natively, where a lone surrogate is
        // U+FFFD (what one becomes crossing into Rust as a string anyway).
        let json = match json::lone_surrogates_replaced(&json) {
            std::borrow::Cow::Owned(replaced) => replaced,
            std::borrow::Cow::Borrowed(_) => json,
        };
        let (doc, root) = object(&json)?;
        let device = doc.get(root, "device");
        let key = |name| device.and_then(|device| text(&doc, device, name));
        let revoked_at = doc.get(root, "revokedAt").map(|id| doc.node(id));
        let runner = Runner {
            id: text(&doc, root, "id"),
            owner: text(&doc, root, "owner"),
            active: revoked_at == Some(&Node::Null),
            last_heartbeat_at: number(&doc, root, "lastHeartbeatAt"),
            device: key("identity")
                .zip(key("encryption"))
                .map(|(identity, encryption)| PublicIdentity {
                    identity,
                    encryption,
                    encryption_sig: key("encryptionSig").unwrap_or_default(),
                }),
            json: json.into_boxed_str(),
        };
        Some(runner)
    }
}

/// What a signed request is checked against: an unrevoked runner's id,
/// owner and device keys, all strings as the record holds them.
#[derive(Debug, Clone)]
pub(crate) struct RunnerFacts {
    pub id: String,
    pub owner: String,
    pub device: PublicIdentity,
}

#[derive(Default)]
pub(crate) struct PairingStore {
    /// Pairings by insertion sequence; an overwrite keeps the sequence.
    pairings: BTreeMap<u64, Pairing>,
    next_seq: u64,
    by_hash: HashMap<String, u64>,
    /// User code → sequences of the pairings carrying it.
    by_code: HashMap<String, BTreeSet<u64>>,
    /// Source → sequences of the pending pairings it holds (at most
    /// [`SOURCE_SHARE`] each, one entry per source holding any).
    by_source: HashMap<Box<str>, BTreeSet<u64>>,
    /// How many pairings the last prune left (prunes on create are amortised).
    pruned_to: usize,
    /// No pairing expires before this (a lower bound; `None`: none
    /// expires): a sweep with nothing to prune costs one comparison.
    next_expiry: Option<f64>,
    runners: Vec<Runner>,
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

    /// A runner read back from the durable file, after those before it;
    /// `false` when its text is not a JSON object.
    #[cfg(not(edge))]
    pub(super) fn load_runner(&mut self, json: String) -> bool {
        let Some(runner) = Runner::parse(json) else {
            return false;
        };
        if let Some(id) = runner.id.clone() {
            self.runner_at.insert(id, self.runners.len());
        }
        self.runners.push(runner);
        true
    }

    /// The pairing stored under `hash`: its insertion sequence and JSON text.
    #[cfg(not(edge))]
    pub(super) fn pairing_row(&self, hash: &str) -> Option<(u64, &str)> {
        let seq = *self.by_hash.get(hash)?;
        self.pairings.get(&seq).map(|p| (seq, &*p.json))
    }

    /// The source of the pairing stored under `hash`.
    #[cfg(not(edge))]
    pub(super) fn pairing_source(&self, hash: &str) -> Option<&str> {
        let seq = self.by_hash.get(hash)?;
        self.pairings.get(seq)?.source.as_deref()
    }

    /// A pairing read back from the durable file, with its source.
    #[cfg(not(edge))]
    pub(super) fn load_pairing(&mut self, json: String, source: Option<&str>) -> bool {
        let Some((mut pairing, created_at)) = Pairing::parse(json) else {
            return false;
        };
        pairing.source = source.map(Into::into);
        self.insert_pairing(pairing.hash.clone(), pairing, created_at);
        true
    }

    /// The runner at position `at` (insertion order).
    #[cfg(not(edge))]
    pub(super) fn runner_at(&self, at: usize) -> Option<&str> {
        self.runners.get(at).map(|r| &*r.json)
    }

    /// `createPairing`, for a record given as the JSON text of an object
    /// (`JSON.stringify`'s): stored by `deviceCodeHash`; the same hash
    /// overwrites. Expired pairings are pruned as the count doubles (the
    /// record's `createdAt` is the clock), and past [`MAX_PAIRINGS`] the
    /// oldest are dropped. `false` (nothing stored) when it is not the text
    /// of a JSON object.
    pub(crate) fn create_pairing_json(&mut self, json: String) -> bool {
        let Some((pairing, created_at)) = Pairing::parse(json) else {
            return false;
        };
        self.insert_pairing(pairing.hash.clone(), pairing, created_at);
        true
    }

    /// `pair start`'s write: [`Self::create_pairing_json`] for a pairing a
    /// request from `source` (a keyed hash) started at `now`, unless that
    /// source already holds its [`SOURCE_SHARE`] of pending pairings, or the
    /// store holds [`MAX_PAIRINGS`] and none of them may go instead (an
    /// app's own pending pairing, or one that is over: denied, or approved
    /// and collected): then nothing is stored and the answer is `false` (the
    /// request is refused `rate-limited`). A pairing a source started within
    /// its share is never dropped for another's.
    pub(crate) fn start_pairing_json(&mut self, json: String, source: &str, now: f64) -> bool {
        if self.source_full(source, now) {
            return false;
        }
        let Some((mut pairing, created_at)) = Pairing::parse(json) else {
            return false;
        };
        if self.pairings.len() >= MAX_PAIRINGS && !self.by_hash.contains_key(&pairing.hash) {
            self.prune(now);
            if self.pairings.len() >= MAX_PAIRINGS {
                let spare = self
                    .pairings
                    .iter()
                    .find(|(_, p)| p.held().is_none() && !p.awaiting_collection())
                    .map(|(&seq, _)| seq);
                match spare {
                    Some(seq) => self.remove(seq),
                    None => return false,
                }
            }
        }
        pairing.source = Some(source.into());
        self.insert_pairing(pairing.hash.clone(), pairing, created_at);
        true
    }

    /// Whether `source` holds its whole share at `now`, after the pairings
    /// of its that are past pruning went (at most [`SOURCE_SHARE`] looked at).
    fn source_full(&mut self, source: &str, now: f64) -> bool {
        let Some(held) = self.by_source.get(source) else {
            return false;
        };
        if held.len() < SOURCE_SHARE {
            return false;
        }
        let before = now - PAIRING_GRACE_MS;
        let stale: Vec<u64> = held
            .iter()
            .copied()
            .filter(|seq| {
                self.pairings
                    .get(seq)
                    .and_then(|p| p.expires_at)
                    .is_some_and(|at| at <= before)
            })
            .collect();
        for seq in stale {
            self.remove(seq);
        }
        self.by_source
            .get(source)
            .is_some_and(|held| held.len() >= SOURCE_SHARE)
    }

    fn index_source(&mut self, seq: u64) {
        if let Some(source) = self.pairings.get(&seq).and_then(Pairing::held) {
            let source: Box<str> = source.into();
            self.by_source.entry(source).or_default().insert(seq);
        }
    }

    fn unindex_source(&mut self, seq: u64) {
        let Some(source) = self.pairings.get(&seq).and_then(Pairing::held) else {
            return;
        };
        if let Some(set) = self.by_source.get_mut(source) {
            set.remove(&seq);
            if set.is_empty() {
                self.by_source.remove(source);
            }
        }
    }

    /// Replace the pairing at `seq`, keeping its source.
    fn replace(&mut self, seq: u64, mut pairing: Pairing) {
        self.unindex_source(seq);
        if let Some(old) = self.pairings.get_mut(&seq) {
            pairing.source = old.source.take();
        }
        self.pairings.insert(seq, pairing);
        self.index_source(seq);
    }

    fn insert_pairing(&mut self, key: String, pairing: Pairing, created_at: Option<f64>) {
        self.pairing_changed(&key);
        let seq = match self.by_hash.get(&key) {
            Some(&seq) => {
                self.unindex_code(seq);
                self.unindex_source(seq);
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
        self.index_source(seq);
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
    pub(crate) fn prune(&mut self, now: f64) -> usize {
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

    /// Over [`MAX_PAIRINGS`] (the app's own `createPairing` calls): drop
    /// the oldest pairings but `keep` and those awaiting collection, those
    /// no source holds first.
    fn evict_oldest(&mut self, keep: u64) {
        for sourced in [false, true] {
            let excess = self.pairings.len().saturating_sub(MAX_PAIRINGS);
            let gone: Vec<u64> = self
                .pairings
                .iter()
                .filter(|(&seq, p)| {
                    seq != keep && !p.awaiting_collection() && p.held().is_some() == sourced
                })
                .map(|(&seq, _)| seq)
                .take(excess)
                .collect();
            for seq in gone {
                self.remove(seq);
            }
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
        self.unindex_source(seq);
        if let Some(pairing) = self.pairings.remove(&seq) {
            if self.by_hash.get(&pairing.hash) == Some(&seq) {
                self.by_hash.remove(&pairing.hash);
            }
            self.pairing_changed(&pairing.hash);
        }
    }

    /// The record stored under this hash, as JSON text.
    pub(crate) fn pairing_json_by_hash(&self, hash: &str) -> Option<&str> {
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
    pub(crate) fn pairing_json_by_code(&self, code: &str) -> Option<&str> {
        self.named(code)
            .and_then(|seq| self.pairings.get(&seq))
            .map(|p| &*p.json)
    }

    /// `approvePairing`: create the runner from the pending, unexpired
    /// pairing with this code, answering its record's JSON text. Without
    /// one, the first pairing with the code says why (the reference's
    /// messages).
    pub(crate) fn approve(
        &mut self,
        code: &str,
        owner: &str,
        runner_id: &str,
        now: f64,
    ) -> Result<&str, ApproveError> {
        let unknown = || ApproveError::Unknown(code.to_string());
        let seqs = self.by_code.get(code).ok_or_else(unknown)?;
        let live = seqs
            .iter()
            .copied()
            .find(|seq| self.pairings.get(seq).is_some_and(|p| p.live(now)));
        let Some(seq) = live else {
            let first = seqs
                .first()
                .and_then(|seq| self.pairings.get(seq))
                .ok_or_else(unknown)?;
            if first.expired(now) {
                return Err(ApproveError::Expired);
            }
            let (doc, root) = object(&first.json).ok_or_else(unknown)?;
            return Err(ApproveError::Already(display(&doc, root, "state")));
        };
        let pairing = self.pairings.get(&seq).ok_or_else(unknown)?;
        let (doc, root) = object(&pairing.json).ok_or_else(unknown)?;
        let mut runner = format!(
            "{{\"id\":{},\"owner\":{}",
            json_string(runner_id),
            json_string(owner)
        );
        // Carried from the pairing: the user approved this machine.
        for field in [
            "device",
            "label",
            "platform",
            "daemonVersion",
            "capabilities",
        ] {
            if let Some(value) = doc.get(root, field) {
                runner.push_str(&format!(",\"{field}\":{}", doc.to_json(value)));
            }
        }
        let now = json_num(now);
        runner.push_str(&format!(
            ",\"revokedAt\":null,\"lastHeartbeatAt\":{now},\"createdAt\":{now}}}"
        ));
        let approved = spread(
            &pairing.json,
            &[
                ("state", "\"approved\""),
                ("owner", &json_string(owner)),
                ("runnerId", &json_string(runner_id)),
                ("collected", "false"),
            ],
        );
        let hash = pairing.hash.clone();
        self.pairing_changed(&hash);
        if let Some((approved, _)) = approved.and_then(Pairing::parse) {
            self.replace(seq, approved);
        }
        let runner = Runner::parse(runner).ok_or_else(unknown)?;
        let at = match self.runner_at.get(runner_id) {
            Some(&at) => at,
            None => {
                self.runner_at
                    .insert(runner_id.to_string(), self.runners.len());
                self.runners.len()
            }
        };
        if at == self.runners.len() {
            self.runners.push(runner);
        } else if let Some(slot) = self.runners.get_mut(at) {
            *slot = runner;
        }
        self.runner_changed(at);
        self.runners.get(at).map(|r| &*r.json).ok_or_else(unknown)
    }

    /// `denyPairing`: the pairing the code names ([`Self::named`]: a
    /// pending one first) becomes `denied`.
    pub(crate) fn deny(&mut self, code: &str) {
        if let Some(seq) = self.named(code) {
            self.rewrite(seq, &[("state", "\"denied\"")]);
        }
    }

    /// `consumePairingToken`: mark the approval collected (deliver once).
    pub(crate) fn consume(&mut self, hash: &str) {
        if let Some(&seq) = self.by_hash.get(hash) {
            self.rewrite(seq, &[("collected", "true")]);
        }
    }

    fn rewrite(&mut self, seq: u64, changes: &[(&str, &str)]) {
        let Some(stored) = self.pairings.get(&seq) else {
            return;
        };
        let Some((changed, _)) = spread(&stored.json, changes).and_then(Pairing::parse) else {
            return;
        };
        let hash = changed.hash.clone();
        if let Some(at) = changed.expires_at {
            self.next_expiry = Some(self.next_expiry.map_or(at, |next| next.min(at)));
        }
        self.replace(seq, changed);
        self.pairing_changed(&hash);
    }

    /// The runner's record as JSON text.
    pub(crate) fn runner(&self, id: &str) -> Option<&str> {
        self.find_runner(id).map(|r| &*r.json)
    }

    fn find_runner(&self, id: &str) -> Option<&Runner> {
        self.runner_at.get(id).and_then(|&at| self.runners.get(at))
    }

    /// What a signed request is checked against, revoked or not: the facts
    /// (`None` for a record without those strings) and whether it is revoked.
    pub(crate) fn runner_facts(&self, id: &str) -> Option<(Option<RunnerFacts>, bool)> {
        let runner = self.find_runner(id)?;
        let facts = (|| {
            Some(RunnerFacts {
                id: runner.id.clone()?,
                owner: runner.owner.clone()?,
                device: runner.device.clone()?,
            })
        })();
        Some((facts, !runner.active))
    }

    /// Spread `changes` onto runner `id`'s record; its new JSON text.
    fn change_runner(&mut self, id: &str, changes: &[(&str, &str)]) -> Option<&str> {
        let at = *self.runner_at.get(id)?;
        let changed = spread(&self.runners.get(at)?.json, changes).and_then(Runner::parse)?;
        *self.runners.get_mut(at)? = changed;
        self.runner_changed(at);
        self.runners.get(at).map(|r| &*r.json)
    }

    /// `touchRunner`: new capabilities and version (JSON texts), heartbeat now.
    pub(crate) fn touch(
        &mut self,
        id: &str,
        capabilities: &str,
        daemon_version: &str,
        now: f64,
    ) -> Option<&str> {
        let now = json_num(now);
        self.change_runner(
            id,
            &[
                ("capabilities", capabilities),
                ("daemonVersion", daemon_version),
                ("lastHeartbeatAt", &now),
            ],
        )
    }

    /// `revokeRunner`: one-way; the first revocation time is kept.
    pub(crate) fn revoke(&mut self, id: &str, now: f64) {
        if self.find_runner(id).is_some_and(|r| r.active) {
            self.change_runner(id, &[("revokedAt", &json_num(now))]);
        }
    }

    /// Runners by state at `now` (one pass over the runners, which are one
    /// per paired device): not revoked, of those online, and revoked.
    pub(crate) fn runner_counts(&self, now: f64, liveness_ms: f64) -> RunnerCounts {
        let mut counts = RunnerCounts::default();
        for runner in &self.runners {
            if !runner.active {
                counts.revoked += 1;
                continue;
            }
            counts.paired += 1;
            let heard = runner.last_heartbeat_at.unwrap_or(f64::NAN);
            if crate::audience::is_online(false, heard, now, liveness_ms) {
                counts.online += 1;
            }
        }
        counts
    }

    /// Pairings pending and not expired at `now` (at most [`MAX_PAIRINGS`]).
    pub(crate) fn pending_pairings(&self, now: f64) -> u64 {
        self.pairings.values().filter(|p| p.live(now)).count() as u64
    }

    /// `listRunners`: all, or one owner's, revoked included, in insertion
    /// order, as a JSON array.
    pub(crate) fn list_runners(&self, owner: Option<&str>) -> String {
        let listed: Vec<&str> = self
            .runners
            .iter()
            .filter(|r| owner.is_none_or(|o| r.owner.as_deref() == Some(o)))
            .map(|r| &*r.json)
            .collect();
        format!("[{}]", listed.join(","))
    }
}

/// What pairings hold, for the tests.
#[cfg(test)]
mod for_tests {
    use super::*;

    impl PairingStore {
        /// Pending pairings `source` holds.
        pub(crate) fn source_holds(&self, source: &str) -> usize {
            self.by_source.get(source).map_or(0, BTreeSet::len)
        }

        /// How many pairings are kept, and the bytes of their records.
        pub(crate) fn pairing_footprint(&self) -> (usize, usize) {
            let bytes = self.pairings.values().map(|p| p.json.len()).sum();
            (self.pairings.len(), bytes)
        }
    }
}
