//! Pairings and runners (store.md §11).
//!
//! Few and small, so they are kept as the JSON objects the caller gave
//! (`serde_json` with `preserve_order`): a write changes values in place and
//! appends new keys at the end, which is what the reference's object spread
//! does to key order.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde_json::{Map, Value};

pub type Record = Map<String, Value>;

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

#[derive(Default)]
pub struct PairingStore {
    /// Pairings in insertion order; an overwrite keeps the position.
    pairings: Vec<Record>,
    by_hash: HashMap<String, usize>,
    /// User code → positions of the pairings carrying it (the first wins).
    by_code: HashMap<String, BTreeSet<usize>>,
    runners: Vec<Record>,
    runner_at: HashMap<String, usize>,
    /// Positions of the pairings and runners written since the durable
    /// file last took them (`crate::store::durable`); `None` in memory only.
    pub(super) changes: Option<(Vec<usize>, Vec<usize>)>,
}

impl PairingStore {
    /// `createPairing`: store by `deviceCodeHash`; the same hash overwrites.
    pub fn create_pairing(&mut self, record: Record) {
        let key = hash_key(record.get("deviceCodeHash"));
        let code = record
            .get("userCode")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let at = match self.by_hash.get(&key) {
            Some(&at) => {
                let old_code = self
                    .pairings
                    .get(at)
                    .and_then(|p| p.get("userCode"))
                    .and_then(Value::as_str);
                if let Some(old) = old_code {
                    if let Some(set) = self.by_code.get_mut(old) {
                        set.remove(&at);
                        if set.is_empty() {
                            self.by_code.remove(old);
                        }
                    }
                }
                if let Some(slot) = self.pairings.get_mut(at) {
                    *slot = record;
                }
                at
            }
            None => {
                self.pairings.push(record);
                let at = self.pairings.len() - 1;
                self.by_hash.insert(key, at);
                at
            }
        };
        if let Some(code) = code {
            self.by_code.entry(code).or_default().insert(at);
        }
        self.pairing_changed(at);
    }

    fn pairing_changed(&mut self, at: usize) {
        if let Some((pairings, _)) = &mut self.changes {
            pairings.push(at);
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

    /// The pairing at position `at` (insertion order).
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn pairing_at(&self, at: usize) -> Option<&Record> {
        self.pairings.get(at)
    }

    /// The runner at position `at` (insertion order).
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn runner_at(&self, at: usize) -> Option<&Record> {
        self.runners.get(at)
    }

    pub fn pairing_by_hash(&self, hash: &str) -> Option<&Record> {
        self.by_hash.get(hash).and_then(|&at| self.pairings.get(at))
    }

    fn first_with_code(&self, code: &str) -> Option<usize> {
        self.by_code.get(code).and_then(|set| set.first().copied())
    }

    /// The first pairing (insertion order) with this user code, whatever its state.
    pub fn pairing_by_code(&self, code: &str) -> Option<&Record> {
        self.first_with_code(code)
            .and_then(|at| self.pairings.get(at))
    }

    /// `approvePairing`: create the runner from the pending pairing.
    pub fn approve(
        &mut self,
        code: &str,
        owner: &str,
        runner_id: &str,
        now: f64,
    ) -> Result<&Record, ApproveError> {
        let pairing_at = self
            .first_with_code(code)
            .ok_or_else(|| ApproveError::Unknown(code.to_string()))?;
        let pairing = self
            .pairings
            .get_mut(pairing_at)
            .ok_or_else(|| ApproveError::Unknown(code.to_string()))?;
        if pairing
            .get("expiresAt")
            .and_then(Value::as_f64)
            .is_some_and(|expires_at| expires_at <= now)
        {
            return Err(ApproveError::Expired);
        }
        if pairing.get("state").and_then(Value::as_str) != Some("pending") {
            return Err(ApproveError::Already(display(pairing.get("state"))));
        }
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
        self.pairing_changed(pairing_at);
        self.runner_changed(at);
        self.runners
            .get(at)
            .ok_or_else(|| ApproveError::Unknown(code.to_string()))
    }

    /// `denyPairing`: the first pairing with the code becomes `denied`, whatever it was.
    pub fn deny(&mut self, code: &str) {
        if let Some(at) = self.first_with_code(code) {
            if let Some(pairing) = self.pairings.get_mut(at) {
                pairing.insert("state".into(), Value::from("denied"));
                self.pairing_changed(at);
            }
        }
    }

    /// `consumePairingToken`: mark the approval collected (deliver once).
    pub fn consume(&mut self, hash: &str) {
        if let Some(&at) = self.by_hash.get(hash) {
            if let Some(pairing) = self.pairings.get_mut(at) {
                pairing.insert("collected".into(), Value::Bool(true));
                self.pairing_changed(at);
            }
        }
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
