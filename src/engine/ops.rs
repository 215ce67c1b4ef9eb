//! The store operations the engine asks for, and what each gives back.
//!
//! One operation is one unit of work on the store: one method (or a short
//! fixed sequence of methods) of a JavaScript store, one SQL function call,
//! or one call into our own [`crate::store::Store`]. Its arguments travel as
//! a JSON object shaped like the argument of the store method it maps to
//! (`ClaimArgs`, `CompleteArgs`, …), so an adapter hands them on as they are;
//! its result comes back as JSON text (read here with serde, leniently where
//! a store's records may be odd) or, from our own store, as values.

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
    /// Read a JavaScript or SQL store's answer to this operation (with the
    /// core's one JSON model, so what a store echoes keeps lone surrogates).
    pub fn output_from_json(&self, text: &str) -> Result<Output, Fault> {
        let op = self.name();
        if matches!(
            self,
            Op::CreatePairing { .. } | Op::ConsumePairing { .. } | Op::Cancel { .. }
        ) {
            return Ok(Output::Done);
        }
        let doc = json::parse(text).map_err(|e| Fault::malformed(op, e))?;
        let r = Read { doc: &doc, op };
        let root = doc.root();
        let field = |key| doc.get(root, key);
        Ok(match self {
            Op::Runner { .. } => {
                Output::Runner(r.some(Some(root)).map(|id| r.runner(id)).transpose()?)
            }
            Op::PairingByCode { .. } | Op::PairingByHash { .. } => {
                Output::Pairing(r.some(Some(root)).map(|id| r.pairing(id)))
            }
            Op::Claim { .. } => Output::Claimed {
                runner: r.fresh(),
                jobs: r
                    .items(field("jobs"))?
                    .iter()
                    .map(|&id| r.stub(id))
                    .collect::<Result<_, _>>()?,
            },
            Op::Job { .. } => Output::Job {
                runner: r.fresh(),
                job: r.some(field("job")).map(|id| r.job(id)).transpose()?,
            },
            Op::Heartbeat { .. } => Output::Heartbeat {
                runner: r.fresh(),
                lost: r.refs(field("lost")),
                cancel: r.refs(field("cancel")),
            },
            Op::ResultFor { .. } => Output::ResultFor {
                runner: r.fresh(),
                accepted: match doc.node_at(field("accepted")) {
                    Some(Node::Bool(true)) => Some((
                        r.raw(field("state"))
                            .ok_or_else(|| Fault::malformed(op, "an acceptance with no state"))?,
                        r.number(field("createdAt")),
                    )),
                    _ => None,
                },
                job: r.some(field("job")).map(|id| r.job(id)).transpose()?,
            },
            Op::Complete { .. } => Output::Completed {
                accepted: matches!(doc.node_at(field("accepted")), Some(Node::Bool(true))),
                duplicate: matches!(doc.node_at(field("duplicate")), Some(Node::Bool(true))),
                state: r
                    .some(field("job"))
                    .and_then(|job| r.raw(doc.get(job, "state"))),
            },
            Op::CancelRequests { .. } => Output::Refs(r.refs(Some(root))),
            Op::Release { .. } => Output::Ids(
                r.items(Some(root))?
                    .iter()
                    .map(|&id| js_string(&doc, id))
                    .collect(),
            ),
            Op::CreatePairing { .. } | Op::ConsumePairing { .. } | Op::Cancel { .. } => {
                Output::Done
            }
        })
    }
}

/// A sealed envelope from its JSON text, whatever its key order; `None`
/// when it is not one.
pub fn sealed_from_json(text: &str) -> Option<SealedEnvelope> {
    let doc = json::parse(text).ok()?;
    Read { doc: &doc, op: "" }.sealed(doc.root())
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

/// A store's parsed answer, read as leniently as the handlers' reads of a
/// record always were (a JavaScript store's records may be odd).
struct Read<'d> {
    doc: &'d Doc,
    op: &'static str,
}

impl Read<'_> {
    /// The value, unless absent or `null`.
    fn some(&self, id: Option<NodeId>) -> Option<NodeId> {
        id.filter(|&id| !matches!(self.doc.node(id), Node::Null))
    }

    fn text(&self, obj: NodeId, key: &str) -> Option<String> {
        Some(self.doc.str(self.doc.get(obj, key)?)?.as_str().to_owned())
    }

    /// A string the operation's answer must hold.
    fn string(&self, obj: NodeId, key: &str) -> Result<String, Fault> {
        self.text(obj, key)
            .ok_or_else(|| Fault::malformed(self.op, format!("`{key}` is not a string")))
    }

    /// `Number(value)`; NaN when absent.
    fn number(&self, id: Option<NodeId>) -> f64 {
        id.map_or(f64::NAN, |id| json::js_to_number(self.doc, id))
    }

    /// A number or nothing (`null` or absent).
    fn optional(&self, obj: NodeId, key: &str) -> Result<Option<f64>, Fault> {
        match self
            .some(self.doc.get(obj, key))
            .map(|id| self.doc.node(id))
        {
            None => Ok(None),
            Some(Node::Number(n)) => Ok(Some(*n)),
            Some(_) => Err(Fault::malformed(
                self.op,
                format!("`{key}` is not a number"),
            )),
        }
    }

    /// `JSON.stringify` of the value.
    fn raw(&self, id: Option<NodeId>) -> Option<String> {
        id.map(|id| self.doc.to_json(id))
    }

    fn items(&self, id: Option<NodeId>) -> Result<&[NodeId], Fault> {
        match id.map(|id| self.doc.node(id)) {
            Some(Node::Array(items)) => Ok(items),
            _ => Err(Fault::malformed(self.op, "a list is not an array")),
        }
    }

    /// The refs of an array of `{jobId, leaseId}` (nothing for anything else).
    fn refs(&self, list: Option<NodeId>) -> Vec<Ref> {
        let field = |item, key| {
            self.doc
                .get(item, key)
                .map_or_else(|| JsStr::new("undefined"), |id| js_string(self.doc, id))
        };
        self.items(list)
            .unwrap_or(&[])
            .iter()
            .map(|&item| Ref {
                job_id: field(item, "jobId"),
                lease_id: field(item, "leaseId"),
            })
            .collect()
    }

    /// The `runner` a store read again with the work.
    fn fresh(&self) -> Fresh {
        let runner = self.doc.get(self.doc.root(), "runner")?;
        Some(self.some(Some(runner)).map(|runner| Revocation {
            revoked: !matches!(
                self.doc.node_at(self.doc.get(runner, "revokedAt")),
                Some(Node::Null)
            ),
        }))
    }

    fn runner(&self, id: NodeId) -> Result<Runner, Fault> {
        let device = self.doc.get(id, "device");
        let key = |name| device.and_then(|d| self.text(d, name));
        Ok(Runner {
            id: self.string(id, "id")?,
            owner: self.string(id, "owner")?,
            device: PublicIdentity {
                identity: key("identity")
                    .ok_or_else(|| Fault::malformed(self.op, "a runner has no device identity"))?,
                encryption: key("encryption").unwrap_or_default(),
                encryption_sig: key("encryptionSig").unwrap_or_default(),
            },
            // `revokedAt` holding anything but null, an absent key included.
            revoked: !matches!(
                self.doc.node_at(self.doc.get(id, "revokedAt")),
                Some(Node::Null)
            ),
        })
    }

    fn pairing(&self, id: NodeId) -> Pairing {
        let given = |key| {
            self.some(self.doc.get(id, key))
                .map(|v| self.doc.to_json(v))
        };
        Pairing {
            state: self.text(id, "state"),
            expires_at: self.number(self.doc.get(id, "expiresAt")),
            collected: self
                .doc
                .get(id, "collected")
                .is_some_and(|v| self.doc.truthy(v)),
            runner_id: given("runnerId"),
            owner: given("owner"),
        }
    }

    fn lease(&self, obj: NodeId) -> Option<Lease> {
        let lease = self.some(self.doc.get(obj, "lease"))?;
        Some(Lease {
            id: self.text(lease, "id"),
            runner_id: self.text(lease, "runnerId"),
            expires_at: self.number(self.doc.get(lease, "expiresAt")),
        })
    }

    fn stub(&self, id: NodeId) -> Result<Stub, Fault> {
        Ok(Stub {
            id: self.string(id, "id")?,
            kind: self.string(id, "kind")?,
            audience: self.string(id, "audience")?,
            owner: self.string(id, "owner")?,
            purpose: self.raw(self.doc.get(id, "purpose")),
            size_class: self.string(id, "sizeClass")?,
            deadline_at: self.optional(id, "deadlineAt")?,
            claimable_at: self.optional(id, "claimableAt")?,
            ttl_ms: self.optional(id, "ttlMs")?.unwrap_or(f64::NAN),
            lease: self.lease(id),
            created_at: self.number(self.doc.get(id, "createdAt")),
            attempts: self.number(self.doc.get(id, "attempts")),
        })
    }

    fn sealed(&self, id: NodeId) -> Option<SealedEnvelope> {
        Some(SealedEnvelope {
            ciphertext: self.text(id, "ciphertext")?,
            recipient_key_id: self.text(id, "recipientKeyId")?,
            sender_key_id: self.text(id, "senderKeyId")?,
            direction: self.text(id, "direction")?,
            deadline_at: self.number(self.doc.get(id, "deadlineAt")),
        })
    }

    fn job(&self, id: NodeId) -> Result<Job, Fault> {
        let envelope = self
            .some(self.doc.get(id, "envelope"))
            .and_then(|e| self.sealed(e));
        Ok(Job {
            // An audience that is not a string matches as `private`, as the claim reads it.
            audience: self
                .text(id, "audience")
                .unwrap_or_else(|| "private".into()),
            state: self
                .raw(self.doc.get(id, "state"))
                .ok_or_else(|| Fault::malformed(self.op, "a job has no state"))?,
            lease: self.lease(id),
            created_at: self.number(self.doc.get(id, "createdAt")),
            ciphertext_chars: envelope.as_ref().map_or(0, |e| e.ciphertext.len()),
            envelope: envelope.map(AtRestSeal::Sealed),
        })
    }
}
