//! The store operations the engine asks for, and what each gives back.
//!
//! One operation is one unit of work on the store: one method (or a short
//! fixed sequence of methods) of a JavaScript store, one SQL function call,
//! or one call into our own [`crate::store::Store`]. Its arguments travel as
//! a JSON object shaped like the argument of the store method it maps to
//! (`ClaimArgs`, `CompleteArgs`, …), so an adapter hands them on as they are;
//! its result comes back as JSON text (read here with serde, leniently where
//! a store's records may be odd) or, from our own store, as values.

use serde::de::Deserializer;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::direct::AtRestSeal;
use crate::envelope::SealedEnvelope;
use crate::json::{self, write_json_str, Doc, JsStr, Node, NodeId};
use crate::keys::PublicIdentity;
use crate::store::LeaseRef;

/// `{jobId, leaseId}` exactly as the request or the store spelled it (lone
/// surrogates too: the answers that list refs echo them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    pub job_id: JsStr,
    pub lease_id: JsStr,
}

impl Ref {
    /// As our store looks it up (a lone surrogate reads as U+FFFD, which no
    /// id it holds can match: ids holding one are refused at enqueue).
    pub fn to_store(&self) -> LeaseRef {
        LeaseRef {
            job_id: self.job_id.as_str().to_owned(),
            lease_id: self.lease_id.as_str().to_owned(),
        }
    }
}

impl From<LeaseRef> for Ref {
    fn from(r: LeaseRef) -> Ref {
        Ref {
            job_id: JsStr::new(r.job_id),
            lease_id: JsStr::new(r.lease_id),
        }
    }
}

/// One capability of a claim, as the store's match reads it.
#[derive(Debug, Clone)]
pub struct ClaimCapability {
    pub kind: String,
    pub backend_id: String,
    pub offer_scope: String,
}

/// A store operation. Every `now` is the request's clock reading.
#[derive(Debug)]
pub enum Op {
    /// `getRunner`.
    Runner { runner_id: String },
    /// `getPairingByUserCode`.
    PairingByCode { user_code: String },
    /// `createPairing`; the record as JSON text, in the record's key order.
    CreatePairing { record: String },
    /// `getPairingByDeviceCodeHash`.
    PairingByHash { hash: String },
    /// `consumePairingToken`.
    ConsumePairing { hash: String },
    /// `claim`. `capabilities`: the request's, as JSON text.
    Claim {
        runner_id: String,
        runner_owner: String,
        capabilities: String,
        matched: Vec<ClaimCapability>,
        max: f64,
        lease_ms: f64,
        now: f64,
    },
    /// `get`, for a request of `runner_id` (a SQL store also re-reads the runner).
    Job { runner_id: String, job_id: String },
    /// `touchRunner`, `renewLeases`, `listCancelRequests`.
    Heartbeat {
        runner_id: String,
        capabilities: String,
        daemon_version: String,
        leases: Vec<Ref>,
        lease_ms: f64,
        now: f64,
    },
    /// `get`; a store may also complete the job in the same transaction when
    /// the request plainly holds it (its live lease, named by its holder) and
    /// its audience is the one `provenance` was written for. Ours and a
    /// user's store only read.
    ResultFor {
        runner_id: String,
        job_id: String,
        lease_id: String,
        audience: String,
        outcome: String,
        provenance: String,
        now: f64,
    },
    /// `complete` by the lease the request presents.
    Complete {
        job_id: String,
        runner_id: String,
        lease_id: String,
        outcome_tag: String,
        outcome: String,
        provenance: String,
        now: f64,
    },
    /// `listCancelRequests`.
    CancelRequests { runner_id: String },
    /// `release`.
    Release {
        runner_id: String,
        leases: Vec<Ref>,
        reason: String,
        now: f64,
    },
    /// `cancel`, for each job.
    Cancel { job_ids: Vec<JsStr>, now: f64 },
}

impl Op {
    /// The operation's name, as adapters look it up.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Runner { .. } => "runner",
            Op::PairingByCode { .. } => "pairingByCode",
            Op::CreatePairing { .. } => "createPairing",
            Op::PairingByHash { .. } => "pairingByHash",
            Op::ConsumePairing { .. } => "consumePairing",
            Op::Claim { .. } => "claim",
            Op::Job { .. } => "job",
            Op::Heartbeat { .. } => "heartbeat",
            Op::ResultFor { .. } => "resultFor",
            Op::Complete { .. } => "complete",
            Op::CancelRequests { .. } => "cancelRequests",
            Op::Release { .. } => "release",
            Op::Cancel { .. } => "cancel",
        }
    }

    /// Whether the operation writes (a SQL store runs it in its own transaction either way).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            Op::Runner { .. }
                | Op::PairingByCode { .. }
                | Op::PairingByHash { .. }
                | Op::Job { .. }
                | Op::CancelRequests { .. }
        )
    }

    /// The arguments as a JSON object, shaped like the store method's.
    pub fn args_json(&self) -> String {
        let mut w = Obj::new();
        match self {
            Op::Runner { runner_id } | Op::CancelRequests { runner_id } => {
                w.str("runnerId", runner_id)
            }
            Op::PairingByCode { user_code } => w.str("userCode", user_code),
            Op::CreatePairing { record } => w.raw("pairing", record),
            Op::PairingByHash { hash } | Op::ConsumePairing { hash } => w.str("hash", hash),
            Op::Claim {
                runner_id,
                runner_owner,
                capabilities,
                max,
                lease_ms,
                now,
                ..
            } => {
                w.str("runnerId", runner_id);
                w.str("runnerOwner", runner_owner);
                w.raw("capabilities", capabilities);
                w.num("max", *max);
                w.num("leaseMs", *lease_ms);
                w.num("now", *now);
            }
            Op::Job { runner_id, job_id } => {
                w.str("runnerId", runner_id);
                w.str("jobId", job_id);
            }
            Op::Heartbeat {
                runner_id,
                capabilities,
                daemon_version,
                leases,
                lease_ms,
                now,
            } => {
                w.str("runnerId", runner_id);
                w.raw("capabilities", capabilities);
                w.str("daemonVersion", daemon_version);
                w.refs("leases", leases);
                w.num("leaseMs", *lease_ms);
                w.num("now", *now);
            }
            Op::ResultFor {
                runner_id,
                job_id,
                lease_id,
                audience,
                outcome,
                provenance,
                now,
            } => {
                w.str("runnerId", runner_id);
                w.str("jobId", job_id);
                w.str("leaseId", lease_id);
                w.str("audience", audience);
                w.raw("outcome", outcome);
                w.raw("provenance", provenance);
                w.num("now", *now);
            }
            Op::Complete {
                job_id,
                runner_id,
                lease_id,
                outcome,
                provenance,
                now,
                ..
            } => {
                w.str("jobId", job_id);
                w.str("runnerId", runner_id);
                let mut holder = Obj::new();
                holder.str("by", "lease");
                holder.str("leaseId", lease_id);
                w.raw("holder", &holder.end());
                w.raw("outcome", outcome);
                w.raw("provenance", provenance);
                w.num("now", *now);
            }
            Op::Release {
                runner_id,
                leases,
                reason,
                now,
            } => {
                w.str("runnerId", runner_id);
                w.refs("leases", leases);
                w.str("reason", reason);
                w.num("now", *now);
            }
            Op::Cancel { job_ids, now } => {
                w.key("jobIds");
                w.out.push('[');
                for (at, id) in job_ids.iter().enumerate() {
                    if at > 0 {
                        w.out.push(',');
                    }
                    id.write_json(&mut w.out);
                }
                w.out.push(']');
                w.num("now", *now);
            }
        }
        w.end()
    }
}

/// A JSON object written key by key.
struct Obj {
    out: String,
}

impl Obj {
    fn new() -> Obj {
        Obj {
            out: String::from("{"),
        }
    }
    fn key(&mut self, key: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        write_json_str(key, &mut self.out);
        self.out.push(':');
    }
    fn str(&mut self, key: &str, value: &str) {
        self.key(key);
        write_json_str(value, &mut self.out);
    }
    fn raw(&mut self, key: &str, json: &str) {
        self.key(key);
        self.out.push_str(json);
    }
    fn num(&mut self, key: &str, value: f64) {
        self.key(key);
        json::push_json_number(&mut self.out, value);
    }
    fn refs(&mut self, key: &str, refs: &[Ref]) {
        self.key(key);
        push_refs(&mut self.out, refs);
    }
    fn end(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// `[{"jobId":…,"leaseId":…},…]`.
pub fn push_refs(out: &mut String, refs: &[Ref]) {
    out.push('[');
    for (at, r) in refs.iter().enumerate() {
        if at > 0 {
            out.push(',');
        }
        out.push_str("{\"jobId\":");
        r.job_id.write_json(out);
        out.push_str(",\"leaseId\":");
        r.lease_id.write_json(out);
        out.push('}');
    }
    out.push(']');
}

// ---------------------------------------------------------------- outputs

/// Why an operation gave the engine nothing it can use: the store threw,
/// timed out, or answered something that is not what the operation returns.
/// The text is for the server's log, never for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault(pub String);

impl Fault {
    fn malformed(op: &str, error: impl std::fmt::Display) -> Fault {
        Fault(format!(
            "the store's answer to `{op}` is not what the operation returns: {error}"
        ))
    }
}

/// A runner as a signed request is checked against.
#[derive(Debug, Clone)]
pub struct Runner {
    pub id: String,
    pub owner: String,
    pub device: PublicIdentity,
    /// `revokedAt` holds anything but `null` (an absent key counts as revoked).
    pub revoked: bool,
}

/// The runner a store read again with a request's work: `None` when it did
/// not (then the one read before stands), `Some(None)` for an unknown runner.
pub type Fresh = Option<Option<Revocation>>;

/// What the engine reads of a runner read again: whether it is revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revocation {
    pub revoked: bool,
}

/// What a pairing's poll and the search for a free user code read.
#[derive(Debug, Clone)]
pub struct Pairing {
    pub state: Option<String>,
    pub expires_at: f64,
    pub collected: bool,
    /// JSON text of `runnerId` and `owner`; `None` for `null` or absent.
    pub runner_id: Option<String>,
    pub owner: Option<String>,
}

/// A job's lease as the lease rules read it.
#[derive(Debug, Clone)]
pub struct Lease {
    /// `None`: not a string (a JS store's odd record), which matches nothing.
    pub id: Option<String>,
    pub runner_id: Option<String>,
    /// `Number(expiresAt)`.
    pub expires_at: f64,
}

/// A claimed job, as its stub is written from it.
#[derive(Debug, Clone)]
pub struct Stub {
    pub id: String,
    pub kind: String,
    pub audience: String,
    pub owner: String,
    /// JSON text of `purpose`; `None` when the job has none.
    pub purpose: Option<String>,
    pub size_class: String,
    pub deadline_at: Option<f64>,
    pub claimable_at: Option<f64>,
    pub ttl_ms: f64,
    pub lease: Option<Lease>,
    /// When it was enqueued, and its claims so far (this one included): a
    /// first claim's wait is counted.
    pub created_at: f64,
    pub attempts: f64,
}

/// A job read for a fetch or a result.
#[derive(Debug, Clone)]
pub struct Job {
    pub audience: String,
    /// JSON text of `state`.
    pub state: String,
    pub lease: Option<Lease>,
    pub created_at: f64,
    /// The payload at rest; `None` when the record's envelope is not a
    /// sealed envelope (which no fetch can open).
    pub envelope: Option<AtRestSeal>,
    /// Characters of the at-rest ciphertext (what decides the thread pool).
    pub ciphertext_chars: usize,
}

/// What each operation gives back.
#[derive(Debug)]
pub enum Output {
    Done,
    Runner(Option<Runner>),
    Pairing(Option<Pairing>),
    Claimed {
        runner: Fresh,
        jobs: Vec<Stub>,
    },
    Job {
        runner: Fresh,
        job: Option<Job>,
    },
    Heartbeat {
        runner: Fresh,
        lost: Vec<Ref>,
        cancel: Vec<Ref>,
    },
    /// `accepted`: the job's end state (JSON text) and its enqueue time,
    /// when the store completed it.
    ResultFor {
        runner: Fresh,
        accepted: Option<(String, f64)>,
        job: Option<Job>,
    },
    Completed {
        accepted: bool,
        duplicate: bool,
        /// JSON text of the job's state after the call.
        state: Option<String>,
    },
    Refs(Vec<Ref>),
    Ids(Vec<JsStr>),
}

impl Op {
    /// Read a JavaScript or SQL store's answer to this operation.
    pub fn output_from_json(&self, text: &str) -> Result<Output, Fault> {
        let op = self.name();
        let bad = |e: serde_json::Error| Fault::malformed(op, e);
        Ok(match self {
            Op::CreatePairing { .. } | Op::ConsumePairing { .. } | Op::Cancel { .. } => {
                Output::Done
            }
            Op::Runner { .. } => {
                let runner: Option<RunnerJson> = serde_json::from_str(text).map_err(bad)?;
                Output::Runner(runner.map(RunnerJson::into_runner).transpose()?)
            }
            Op::PairingByCode { .. } | Op::PairingByHash { .. } => {
                let pairing: Option<PairingJson> = serde_json::from_str(text).map_err(bad)?;
                Output::Pairing(pairing.map(PairingJson::into_pairing))
            }
            Op::Claim { .. } => {
                let out: ClaimedJson = serde_json::from_str(text).map_err(bad)?;
                Output::Claimed {
                    runner: fresh(out.runner),
                    jobs: out
                        .jobs
                        .into_iter()
                        .map(StubJson::into_stub)
                        .collect::<Result<_, _>>()?,
                }
            }
            Op::Job { .. } => {
                let out: JobForJson = serde_json::from_str(text).map_err(bad)?;
                Output::Job {
                    runner: fresh(out.runner),
                    job: out.job.map(JobJson::into_job).transpose()?,
                }
            }
            // Lists a store echoes back are read exactly, lone surrogates too.
            Op::Heartbeat { .. } => {
                let doc = json::parse(text).map_err(|e| Fault::malformed(op, e))?;
                let root = doc.root();
                Output::Heartbeat {
                    runner: fresh_in(&doc, root),
                    lost: refs_in(&doc, doc.get(root, "lost")),
                    cancel: refs_in(&doc, doc.get(root, "cancel")),
                }
            }
            Op::ResultFor { .. } => {
                let out: ResultForJson = serde_json::from_str(text).map_err(bad)?;
                let accepted = match (out.accepted, out.state) {
                    (true, Some(state)) => Some((state.get().to_owned(), out.created_at)),
                    (true, None) => {
                        return Err(Fault::malformed(op, "an acceptance with no state"))
                    }
                    (false, _) => None,
                };
                Output::ResultFor {
                    runner: fresh(out.runner),
                    accepted,
                    job: out.job.map(JobJson::into_job).transpose()?,
                }
            }
            Op::Complete { .. } => {
                let out: CompletedJson = serde_json::from_str(text).map_err(bad)?;
                Output::Completed {
                    accepted: out.accepted,
                    duplicate: out.duplicate == Some(true),
                    state: out
                        .job
                        .and_then(|job| job.state)
                        .map(|s| s.get().to_owned()),
                }
            }
            Op::CancelRequests { .. } => {
                let doc = json::parse(text).map_err(|e| Fault::malformed(op, e))?;
                Output::Refs(refs_in(&doc, Some(doc.root())))
            }
            Op::Release { .. } => {
                let doc = json::parse(text).map_err(|e| Fault::malformed(op, e))?;
                let ids = match doc.node(doc.root()) {
                    Node::Array(items) => items.iter().map(|&id| js_string(&doc, id)).collect(),
                    _ => Vec::new(),
                };
                Output::Ids(ids)
            }
        })
    }
}

/// `String(value)` for the values a store's lists hold.
fn js_string(doc: &Doc, id: NodeId) -> JsStr {
    match doc.str(id) {
        Some(s) => s.clone(),
        None => JsStr::new(match doc.node(id) {
            Node::Number(n) => json::js_number_to_string(*n),
            _ => doc.to_json(id),
        }),
    }
}

/// The refs of an array of `{jobId, leaseId}`.
fn refs_in(doc: &Doc, list: Option<NodeId>) -> Vec<Ref> {
    let Some(Node::Array(items)) = list.map(|id| doc.node(id)) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|&item| {
            let field = |key| {
                doc.get(item, key)
                    .map_or_else(|| JsStr::new("undefined"), |id| js_string(doc, id))
            };
            Ref {
                job_id: field("jobId"),
                lease_id: field("leaseId"),
            }
        })
        .collect()
}

/// The `runner` a store read again, from a parsed answer.
fn fresh_in(doc: &Doc, root: NodeId) -> Fresh {
    let runner = doc.get(root, "runner")?;
    Some(match doc.node(runner) {
        Node::Null => None,
        _ => Some(Revocation {
            revoked: !matches!(
                doc.get(runner, "revokedAt").map(|id| doc.node(id)),
                Some(Node::Null)
            ),
        }),
    })
}

// The JSON shapes, as lenient as the handlers' reads of a record were.

/// A value that must be present but may be of any type: `Some(text)` for a string.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// `Number(value)` of a JSON value.
fn js_number<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::Null => 0.0,
        Value::Bool(b) => f64::from(u8::from(b)),
        Value::String(s) => json::string_to_number(&s),
        _ => f64::NAN,
    })
}

/// Present-and-`null` apart from absent: `Some(None)` is `null`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

fn fresh(runner: Option<Option<RevocationJson>>) -> Fresh {
    runner.map(|r| {
        r.map(|r| Revocation {
            revoked: !matches!(r.revoked_at, Some(None)),
        })
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunnerJson {
    id: Value,
    owner: Value,
    device: Option<IdentityJson>,
    #[serde(default, deserialize_with = "present")]
    revoked_at: Option<Option<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdentityJson {
    identity: String,
    encryption: String,
    #[serde(default)]
    encryption_sig: String,
}

impl RunnerJson {
    fn into_runner(self) -> Result<Runner, Fault> {
        let (Value::String(id), Value::String(owner), Some(device)) =
            (self.id, self.owner, self.device)
        else {
            return Err(Fault::malformed(
                "runner",
                "a runner record needs string `id` and `owner` and a `device` identity",
            ));
        };
        Ok(Runner {
            id,
            owner,
            device: PublicIdentity {
                identity: device.identity,
                encryption: device.encryption,
                encryption_sig: device.encryption_sig,
            },
            revoked: !matches!(self.revoked_at, Some(None)),
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RevocationJson {
    #[serde(default, deserialize_with = "present")]
    revoked_at: Option<Option<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PairingJson {
    #[serde(default, deserialize_with = "text")]
    state: Option<String>,
    #[serde(default = "nan", deserialize_with = "js_number")]
    expires_at: f64,
    #[serde(default)]
    collected: Value,
    #[serde(default)]
    runner_id: Option<Box<RawValue>>,
    #[serde(default)]
    owner: Option<Box<RawValue>>,
}

fn nan() -> f64 {
    f64::NAN
}

/// JS truthiness of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0 && !n.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

impl PairingJson {
    fn into_pairing(self) -> Pairing {
        let given =
            |raw: Option<Box<RawValue>>| raw.map(|r| r.get().to_owned()).filter(|r| r != "null");
        Pairing {
            state: self.state,
            expires_at: self.expires_at,
            collected: truthy(&self.collected),
            runner_id: given(self.runner_id),
            owner: given(self.owner),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaseJson {
    #[serde(default, deserialize_with = "text")]
    id: Option<String>,
    #[serde(default, deserialize_with = "text")]
    runner_id: Option<String>,
    #[serde(default = "nan", deserialize_with = "js_number")]
    expires_at: f64,
}

impl From<LeaseJson> for Lease {
    fn from(l: LeaseJson) -> Lease {
        Lease {
            id: l.id,
            runner_id: l.runner_id,
            expires_at: l.expires_at,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StubJson {
    id: Value,
    kind: Value,
    audience: Value,
    owner: Value,
    #[serde(default)]
    purpose: Option<Box<RawValue>>,
    size_class: Value,
    #[serde(default)]
    deadline_at: Option<f64>,
    #[serde(default)]
    claimable_at: Option<f64>,
    ttl_ms: f64,
    #[serde(default)]
    lease: Option<LeaseJson>,
    #[serde(default = "nan", deserialize_with = "js_number")]
    created_at: f64,
    #[serde(default = "nan", deserialize_with = "js_number")]
    attempts: f64,
}

impl StubJson {
    fn into_stub(self) -> Result<Stub, Fault> {
        let string = |v: Value, field: &str| match v {
            Value::String(s) => Ok(s),
            _ => Err(Fault::malformed(
                "claim",
                format!("a claimed job's `{field}` is not a string"),
            )),
        };
        Ok(Stub {
            id: string(self.id, "id")?,
            kind: string(self.kind, "kind")?,
            audience: string(self.audience, "audience")?,
            owner: string(self.owner, "owner")?,
            purpose: self.purpose.map(|p| p.get().to_owned()),
            size_class: string(self.size_class, "sizeClass")?,
            deadline_at: self.deadline_at,
            claimable_at: self.claimable_at,
            ttl_ms: self.ttl_ms,
            lease: self.lease.map(Lease::from),
            created_at: self.created_at,
            attempts: self.attempts,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimedJson {
    #[serde(default, deserialize_with = "present")]
    runner: Option<Option<RevocationJson>>,
    jobs: Vec<StubJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobJson {
    #[serde(default)]
    audience: Value,
    state: Box<RawValue>,
    #[serde(default)]
    lease: Option<LeaseJson>,
    #[serde(default = "nan", deserialize_with = "js_number")]
    created_at: f64,
    #[serde(default)]
    envelope: Option<SealedJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SealedJson {
    #[serde(default, deserialize_with = "text")]
    ciphertext: Option<String>,
    #[serde(default, deserialize_with = "text")]
    recipient_key_id: Option<String>,
    #[serde(default, deserialize_with = "text")]
    sender_key_id: Option<String>,
    #[serde(default, deserialize_with = "text")]
    direction: Option<String>,
    #[serde(default = "nan", deserialize_with = "js_number")]
    deadline_at: f64,
}

impl SealedJson {
    fn into_sealed(self) -> Option<SealedEnvelope> {
        Some(SealedEnvelope {
            ciphertext: self.ciphertext?,
            recipient_key_id: self.recipient_key_id?,
            sender_key_id: self.sender_key_id?,
            direction: self.direction?,
            deadline_at: self.deadline_at,
        })
    }
}

/// A sealed envelope from its JSON text, whatever its key order; `None`
/// when it is not one.
pub fn sealed_from_json(text: &str) -> Option<SealedEnvelope> {
    serde_json::from_str::<SealedJson>(text)
        .ok()
        .and_then(SealedJson::into_sealed)
}

impl JobJson {
    fn into_job(self) -> Result<Job, Fault> {
        let envelope = self.envelope.and_then(SealedJson::into_sealed);
        Ok(Job {
            // An audience that is not a string matches as `private`, as the claim reads it.
            audience: match self.audience {
                Value::String(s) => s,
                _ => String::from("private"),
            },
            state: self.state.get().to_owned(),
            lease: self.lease.map(Lease::from),
            created_at: self.created_at,
            ciphertext_chars: envelope.as_ref().map_or(0, |e| e.ciphertext.len()),
            envelope: envelope.map(AtRestSeal::Sealed),
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobForJson {
    #[serde(default, deserialize_with = "present")]
    runner: Option<Option<RevocationJson>>,
    job: Option<JobJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResultForJson {
    #[serde(default, deserialize_with = "present")]
    runner: Option<Option<RevocationJson>>,
    #[serde(default)]
    accepted: bool,
    #[serde(default)]
    state: Option<Box<RawValue>>,
    #[serde(default = "nan", deserialize_with = "js_number")]
    created_at: f64,
    #[serde(default)]
    job: Option<JobJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CompletedJson {
    #[serde(default)]
    accepted: bool,
    #[serde(default)]
    duplicate: Option<bool>,
    #[serde(default)]
    job: Option<StateJson>,
}

#[derive(Deserialize)]
struct StateJson {
    #[serde(default)]
    state: Option<Box<RawValue>>,
}
