//! The store operations the engine asks for, and what each gives back.
//!
//! One operation is one unit of work on the store: one method (or a short
//! fixed sequence of methods) of a JavaScript store, one SQL function call,
//! or one call into our own [`crate::store::Store`]. Its arguments travel as
//! a JSON object shaped like the argument of the store method it maps to
//! (`ClaimArgs`, `CompleteArgs`, …), so an adapter hands them on as they are;
//! its result comes back as JSON text (read here strictly, with
//! [`json::Doc`]: what an operation does not return is a fault) or, from our
//! own store, as values.

use crate::envelope::SealedEnvelope;
use crate::json::{self, Doc, JsStr, Node, NodeId, Obj};
use crate::keys::PublicIdentity;
use crate::payload::AtRestSeal;
use crate::store::{ClaimCapability, LeaseRef};

/// `{jobId, leaseId}` exactly as the request or the store spelled it (lone
/// surrogates too: the answers that list refs echo them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ref {
    pub job_id: JsStr,
    pub lease_id: JsStr,
}

impl Ref {
    /// As our store looks it up (a lone surrogate reads as U+FFFD, which no
    /// id it holds can match: ids holding one are refused at enqueue).
    pub(crate) fn to_store(&self) -> LeaseRef {
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

/// A store operation. Every `now` is the request's clock reading.
#[derive(Debug)]
pub(crate) enum Op {
    /// `getRunner`.
    Runner { runner_id: String },
    /// `getPairingByUserCode`.
    PairingByCode { user_code: String },
    /// `createPairing`, for a pairing `pair start` began: the record as JSON
    /// text, in the record's key order, and the request's source (a keyed
    /// hash). Our stores and the SQL ones may refuse it (the source holds
    /// its share); a user's store is given the record.
    CreatePairing {
        record: String,
        source: String,
        now: f64,
    },
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
    pub(crate) fn name(&self) -> &'static str {
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
    pub(crate) fn writes(&self) -> bool {
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
    pub(crate) fn args_json(&self) -> String {
        let mut w = Obj::new();
        match self {
            Op::Runner { runner_id } | Op::CancelRequests { runner_id } => {
                w.str("runnerId", runner_id);
            }
            Op::PairingByCode { user_code } => {
                w.str("userCode", user_code);
            }
            Op::CreatePairing {
                record,
                source,
                now,
            } => {
                w.raw("pairing", record)
                    .str("source", source)
                    .num("now", *now);
            }
            Op::PairingByHash { hash } | Op::ConsumePairing { hash } => {
                w.str("hash", hash);
            }
            Op::Claim {
                runner_id,
                runner_owner,
                capabilities,
                max,
                lease_ms,
                now,
                ..
            } => {
                w.str("runnerId", runner_id)
                    .str("runnerOwner", runner_owner)
                    .raw("capabilities", capabilities)
                    .num("max", *max)
                    .num("leaseMs", *lease_ms)
                    .num("now", *now);
            }
            Op::Job { runner_id, job_id } => {
                w.str("runnerId", runner_id).str("jobId", job_id);
            }
            Op::Heartbeat {
                runner_id,
                capabilities,
                daemon_version,
                leases,
                lease_ms,
                now,
            } => {
                w.str("runnerId", runner_id)
                    .raw("capabilities", capabilities)
                    .str("daemonVersion", daemon_version)
                    .with("leases", |out| push_refs(out, leases))
                    .num("leaseMs", *lease_ms)
                    .num("now", *now);
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
                w.str("runnerId", runner_id)
                    .str("jobId", job_id)
                    .str("leaseId", lease_id)
                    .str("audience", audience)
                    .raw("outcome", outcome)
                    .raw("provenance", provenance)
                    .num("now", *now);
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
                let mut holder = Obj::new();
                holder.str("by", "lease").str("leaseId", lease_id);
                w.str("jobId", job_id)
                    .str("runnerId", runner_id)
                    .raw("holder", &holder.end())
                    .raw("outcome", outcome)
                    .raw("provenance", provenance)
                    .num("now", *now);
            }
            Op::Release {
                runner_id,
                leases,
                reason,
                now,
            } => {
                w.str("runnerId", runner_id)
                    .with("leases", |out| push_refs(out, leases))
                    .str("reason", reason)
                    .num("now", *now);
            }
            Op::Cancel { job_ids, now } => {
                w.raw("jobIds", &json_list(job_ids)).num("now", *now);
            }
        }
        w.end()
    }
}

/// A JSON array of strings, lone surrogates and all.
pub(crate) fn json_list(items: &[JsStr]) -> String {
    let mut out = String::from("[");
    for (at, item) in items.iter().enumerate() {
        if at > 0 {
            out.push(',');
        }
        item.write_json(&mut out);
    }
    out.push(']');
    out
}

/// `[{"jobId":…,"leaseId":…},…]`.
pub(crate) fn push_refs(out: &mut String, refs: &[Ref]) {
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
/// Its text ([`std::fmt::Display`]) is for the server's log, never for the
/// caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The store threw, timed out or could not write: its own words.
    Store(String),
    /// The store's answer to an operation is not what the operation returns.
    Malformed { op: &'static str, why: String },
    /// An operation's output came back as another operation's.
    Mismatch(&'static str),
    /// A stored runner record lacks its id, owner or device identity.
    RunnerRecord,
    /// A claimed job without the lease the store contract requires.
    NoLease { job_id: String },
    /// The engine was handed something it did not ask for.
    Unasked,
    /// More store operations than any request makes.
    TooManyOps,
    /// A store operation went unanswered.
    Unanswered,
    /// Heavy work came back as something else.
    WorkMismatch,
    /// Heavy work went unanswered.
    WorkUnanswered,
    /// URLs went unchecked.
    Urls,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Store(cause) => f.write_str(cause),
            Fault::Malformed { op, why } => write!(
                f,
                "the store's answer to `{op}` is not what the operation returns: {why}"
            ),
            Fault::Mismatch(op) => write!(f, "`{op}` came back as another operation's output"),
            Fault::RunnerRecord => {
                f.write_str("a stored runner record lacks its id, owner or device identity")
            }
            Fault::NoLease { job_id } => write!(
                f,
                "store returned job {job_id} from claim with no lease; the store contract requires a claimed job to hold one"
            ),
            Fault::Unasked => f.write_str("the engine was handed something it did not ask for"),
            Fault::TooManyOps => f.write_str(
                "the engine asked for more store operations than any request makes",
            ),
            Fault::Unanswered => f.write_str("a store operation went unanswered"),
            Fault::WorkMismatch => f.write_str("heavy work came back as something else"),
            Fault::WorkUnanswered => f.write_str("heavy work went unanswered"),
            Fault::Urls => f.write_str("URLs went unchecked"),
        }
    }
}

impl Fault {
    fn malformed(op: &'static str, why: impl std::fmt::Display) -> Fault {
        Fault::Malformed {
            op,
            why: why.to_string(),
        }
    }
}

/// A runner as a signed request is checked against.
#[derive(Debug, Clone)]
pub(crate) struct Runner {
    pub id: String,
    pub owner: String,
    pub device: PublicIdentity,
    /// `revokedAt` holds anything but `null` (an absent key counts as revoked).
    pub revoked: bool,
}

/// The runner a store read again with a request's work: `None` when it did
/// not (then the one read before stands), `Some(None)` for an unknown runner.
pub(crate) type Fresh = Option<Option<Revocation>>;

/// What the engine reads of a runner read again: whether it is revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Revocation {
    pub revoked: bool,
}

/// What a pairing's poll and the search for a free user code read.
#[derive(Debug, Clone)]
pub(crate) struct Pairing {
    pub state: Option<String>,
    pub expires_at: f64,
    pub collected: bool,
    /// JSON text of `runnerId` and `owner`; `None` for `null` or absent.
    pub runner_id: Option<String>,
    pub owner: Option<String>,
}

/// A job's lease as the lease rules read it.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub id: String,
    /// `""` for an adopted (relay-granted) lease.
    pub runner_id: String,
    pub expires_at: f64,
}

/// A claimed job, as its stub is written from it.
#[derive(Debug, Clone)]
pub(crate) struct Stub {
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
pub(crate) struct Job {
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
pub(crate) enum Output {
    Done,
    /// The store refused the write: its source holds its share.
    Refused,
    Runner(Option<Runner>),
    Pairing(Option<Pairing>),
    /// `wake_at`: of an empty claim, when it could find a job with no row
    /// changing (`INFINITY`: never), as a SQL store tells it; `None` when
    /// the store does not (the idle memo reads it).
    Claimed {
        runner: Fresh,
        jobs: Vec<Stub>,
        wake_at: Option<f64>,
    },
    Job {
        runner: Fresh,
        job: Option<Job>,
    },
    /// `seen_at`: the runner's stored liveness after the call, as a SQL
    /// store tells it.
    Heartbeat {
        runner: Fresh,
        lost: Vec<Ref>,
        cancel: Vec<Ref>,
        seen_at: Option<f64>,
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
    /// Anything that is not what the operation returns is a fault: the
    /// daemon hears `server-error` and the cause is logged, rather than a
    /// wrong value reaching the wire.
    pub(crate) fn output_from_json(&self, text: &str) -> Result<Output, Fault> {
        let op = self.name();
        if matches!(self, Op::ConsumePairing { .. } | Op::Cancel { .. }) {
            return Ok(Output::Done);
        }
        if let Op::CreatePairing { .. } = self {
            // `{"started":false}` from ours and the SQL stores; anything
            // else (a user's store answers nothing) stored it.
            let refused = json::parse_any_depth(text).ok().is_some_and(|doc| {
                doc.get(doc.root(), "started")
                    .is_some_and(|id| doc.node(id) == &Node::Bool(false))
            });
            return Ok(if refused {
                Output::Refused
            } else {
                Output::Done
            });
        }
        let doc = json::parse_any_depth(text).map_err(|e| Fault::malformed(op, e))?;
        let r = Read { doc: &doc, op };
        let root = doc.root();
        // A runner the work re-read as unknown or revoked is refused: the
        // store did no work, and nothing else of its answer is read.
        let fresh = match self {
            Op::Claim { .. } | Op::Job { .. } | Op::Heartbeat { .. } | Op::ResultFor { .. } => {
                r.fresh(root)?
            }
            _ => None,
        };
        if matches!(fresh, Some(None) | Some(Some(Revocation { revoked: true }))) {
            return Ok(match self {
                Op::Claim { .. } => Output::Claimed {
                    runner: fresh,
                    jobs: Vec::new(),
                    wake_at: None,
                },
                Op::Heartbeat { .. } => Output::Heartbeat {
                    runner: fresh,
                    lost: Vec::new(),
                    cancel: Vec::new(),
                    seen_at: None,
                },
                Op::ResultFor { .. } => Output::ResultFor {
                    runner: fresh,
                    accepted: None,
                    job: None,
                },
                _ => Output::Job {
                    runner: fresh,
                    job: None,
                },
            });
        }
        Ok(match self {
            Op::Runner { .. } => Output::Runner(r.maybe(root, Read::runner)?),
            Op::PairingByCode { .. } | Op::PairingByHash { .. } => {
                Output::Pairing(r.maybe(root, Read::pairing)?)
            }
            Op::Claim { .. } => Output::Claimed {
                runner: fresh,
                jobs: r.list(r.field(root, "jobs")?, Read::stub)?,
                // Present and `null`: nothing becomes claimable by itself.
                wake_at: match doc.get(root, "wakeAt") {
                    Some(id) => Some(
                        r.maybe(id, |r, id| r.number(id, "wakeAt"))?
                            .unwrap_or(f64::INFINITY),
                    ),
                    None => None,
                },
            },
            Op::Job { .. } => Output::Job {
                runner: fresh,
                job: r.maybe(r.field(root, "job")?, Read::job)?,
            },
            Op::Heartbeat { .. } => Output::Heartbeat {
                runner: fresh,
                lost: r.list(r.field(root, "lost")?, Read::lease_ref)?,
                cancel: r.list(r.field(root, "cancel")?, Read::lease_ref)?,
                seen_at: r.optional(root, "seenAt")?,
            },
            Op::ResultFor { .. } => {
                let accepted = r.flag(root, "accepted")?;
                Output::ResultFor {
                    runner: fresh,
                    accepted: match accepted {
                        true => Some((
                            r.state(root)?,
                            r.number(r.field(root, "createdAt")?, "createdAt")?,
                        )),
                        false => None,
                    },
                    job: match doc.get(root, "job") {
                        Some(job) => r.maybe(job, Read::job)?,
                        None => None,
                    },
                }
            }
            Op::Complete { .. } => Output::Completed {
                accepted: r.flag(root, "accepted")?,
                duplicate: r.flag(root, "duplicate")?,
                state: match doc.get(root, "job") {
                    Some(job) => r.maybe(job, Read::state)?,
                    None => None,
                },
            },
            Op::CancelRequests { .. } => Output::Refs(r.list(root, Read::lease_ref)?),
            Op::Release { .. } => Output::Ids(r.list(root, |r, id| {
                r.doc
                    .str(id)
                    .cloned()
                    .ok_or_else(|| r.bad("a released job id is not a string"))
            })?),
            Op::CreatePairing { .. } | Op::ConsumePairing { .. } | Op::Cancel { .. } => {
                Output::Done
            }
        })
    }
}

/// A sealed envelope from its JSON text, whatever its key order; `None`
/// when it is not one.
pub(crate) fn sealed_from_json(text: &str) -> Option<SealedEnvelope> {
    let doc = json::parse(text).ok()?;
    Read { doc: &doc, op: "" }.sealed(doc.root())
}

/// A store's parsed answer, read for what an operation returns.
struct Read<'d> {
    doc: &'d Doc,
    op: &'static str,
}

impl Read<'_> {
    fn bad(&self, why: impl std::fmt::Display) -> Fault {
        Fault::malformed(self.op, why)
    }

    fn node(&self, id: NodeId) -> &Node {
        self.doc.node(id)
    }

    /// `obj[key]`, which must be there (`null` counts as there).
    fn field(&self, obj: NodeId, key: &str) -> Result<NodeId, Fault> {
        match self.node(obj) {
            Node::Object(_) => self
                .doc
                .get(obj, key)
                .ok_or_else(|| self.bad(format!("`{key}` is missing"))),
            _ => Err(self.bad("a record is not an object")),
        }
    }

    /// The value, unless absent or `null`.
    fn some(&self, id: Option<NodeId>) -> Option<NodeId> {
        id.filter(|&id| !matches!(self.node(id), Node::Null))
    }

    /// `read(id)`, or `None` for `null`.
    fn maybe<T>(
        &self,
        id: NodeId,
        read: impl Fn(&Self, NodeId) -> Result<T, Fault>,
    ) -> Result<Option<T>, Fault> {
        match self.node(id) {
            Node::Null => Ok(None),
            _ => read(self, id).map(Some),
        }
    }

    fn list<T>(
        &self,
        id: NodeId,
        read: impl Fn(&Self, NodeId) -> Result<T, Fault>,
    ) -> Result<Vec<T>, Fault> {
        match self.node(id) {
            Node::Array(items) => items.iter().map(|&item| read(self, item)).collect(),
            _ => Err(self.bad("a list is not an array")),
        }
    }

    fn string(&self, obj: NodeId, key: &str) -> Result<String, Fault> {
        let id = self.field(obj, key)?;
        self.doc
            .str(id)
            .map(|s| s.as_str().to_owned())
            .ok_or_else(|| self.bad(format!("`{key}` is not a string")))
    }

    fn number(&self, id: NodeId, key: &str) -> Result<f64, Fault> {
        match self.node(id) {
            Node::Number(n) => Ok(*n),
            _ => Err(self.bad(format!("`{key}` is not a number"))),
        }
    }

    /// A number or nothing (`null` or absent).
    fn optional(&self, obj: NodeId, key: &str) -> Result<Option<f64>, Fault> {
        match self.doc.get(obj, key) {
            Some(id) => self.maybe(id, |r, id| r.number(id, key)),
            None => Ok(None),
        }
    }

    /// `obj[key] === true`; absent is `false`, anything but a boolean a fault.
    fn flag(&self, obj: NodeId, key: &str) -> Result<bool, Fault> {
        match self.doc.node_at(self.doc.get(obj, key)) {
            None => Ok(false),
            Some(Node::Bool(b)) => Ok(*b),
            Some(_) => Err(self.bad(format!("`{key}` is not a boolean"))),
        }
    }

    /// A job state: a string, kept as its JSON text.
    fn state(&self, obj: NodeId) -> Result<String, Fault> {
        let id = self.field(obj, "state")?;
        match self.doc.str(id) {
            Some(_) => Ok(self.doc.to_json(id)),
            None => Err(self.bad("`state` is not a string")),
        }
    }

    fn lease_ref(&self, id: NodeId) -> Result<Ref, Fault> {
        let field = |key| {
            self.doc
                .str(self.field(id, key)?)
                .cloned()
                .ok_or_else(|| self.bad(format!("a lease ref's `{key}` is not a string")))
        };
        Ok(Ref {
            job_id: field("jobId")?,
            lease_id: field("leaseId")?,
        })
    }

    /// The runner its store read again with the work (`runner` absent: it did not).
    fn fresh(&self, root: NodeId) -> Result<Fresh, Fault> {
        let Some(runner) = self.doc.get(root, "runner") else {
            return Ok(None);
        };
        self.maybe(runner, |r, id| {
            Ok(Revocation {
                revoked: r.revoked(id)?,
            })
        })
        .map(Some)
    }

    /// `revokedAt` is a time: revoked. `null`: not. An absent key reads as
    /// JavaScript reads `revokedAt !== null`: revoked.
    fn revoked(&self, runner: NodeId) -> Result<bool, Fault> {
        match self.doc.get(runner, "revokedAt") {
            None => Ok(true),
            Some(id) => Ok(self.maybe(id, |r, id| r.number(id, "revokedAt"))?.is_some()),
        }
    }

    fn runner(&self, id: NodeId) -> Result<Runner, Fault> {
        let device = self.field(id, "device")?;
        Ok(Runner {
            id: self.string(id, "id")?,
            owner: self.string(id, "owner")?,
            device: PublicIdentity {
                identity: self.string(device, "identity")?,
                encryption: self.string(device, "encryption")?,
                encryption_sig: self.string(device, "encryptionSig")?,
            },
            revoked: self.revoked(id)?,
        })
    }

    fn pairing(&self, id: NodeId) -> Result<Pairing, Fault> {
        let given = |key| -> Result<Option<String>, Fault> {
            match self.doc.get(id, key) {
                None => Ok(None),
                Some(v) => self.maybe(v, |r, v| match r.doc.str(v) {
                    Some(_) => Ok(r.doc.to_json(v)),
                    None => Err(r.bad(format!("`{key}` is not a string"))),
                }),
            }
        };
        Ok(Pairing {
            state: Some(self.string(id, "state")?),
            expires_at: self.number(self.field(id, "expiresAt")?, "expiresAt")?,
            collected: self.flag(id, "collected")?,
            runner_id: given("runnerId")?,
            owner: given("owner")?,
        })
    }

    fn lease(&self, obj: NodeId) -> Result<Option<Lease>, Fault> {
        let Some(lease) = self.doc.get(obj, "lease") else {
            return Ok(None);
        };
        self.maybe(lease, |r, lease| {
            Ok(Lease {
                id: r.string(lease, "id")?,
                runner_id: r.string(lease, "runnerId")?,
                expires_at: r.number(r.field(lease, "expiresAt")?, "expiresAt")?,
            })
        })
    }

    fn stub(&self, id: NodeId) -> Result<Stub, Fault> {
        Ok(Stub {
            id: self.string(id, "id")?,
            kind: self.string(id, "kind")?,
            audience: self.string(id, "audience")?,
            owner: self.string(id, "owner")?,
            // Opaque: what the app enqueued, written back as it is (`null`
            // or absent: none).
            purpose: self
                .some(self.doc.get(id, "purpose"))
                .map(|p| self.doc.to_json(p)),
            size_class: self.string(id, "sizeClass")?,
            deadline_at: self.optional(id, "deadlineAt")?,
            claimable_at: self.optional(id, "claimableAt")?,
            ttl_ms: self.number(self.field(id, "ttlMs")?, "ttlMs")?,
            lease: self.lease(id)?,
            created_at: self.number(self.field(id, "createdAt")?, "createdAt")?,
            attempts: self.optional(id, "attempts")?.unwrap_or(f64::NAN),
        })
    }

    fn sealed(&self, id: NodeId) -> Option<SealedEnvelope> {
        let text = |key| Some(self.doc.str(self.doc.get(id, key)?)?.as_str().to_owned());
        Some(SealedEnvelope {
            ciphertext: text("ciphertext")?,
            recipient_key_id: text("recipientKeyId")?,
            sender_key_id: text("senderKeyId")?,
            direction: text("direction")?,
            deadline_at: json::js_to_number(self.doc, self.doc.get(id, "deadlineAt")?),
        })
    }

    fn job(&self, id: NodeId) -> Result<Job, Fault> {
        // An envelope not of the sealed shape is the fetch's own refusal
        // (its payload cannot be opened), not the store's fault.
        let envelope = self.doc.get(id, "envelope").and_then(|e| self.sealed(e));
        Ok(Job {
            audience: self.string(id, "audience")?,
            state: self.state(id)?,
            lease: self.lease(id)?,
            created_at: self.number(self.field(id, "createdAt")?, "createdAt")?,
            ciphertext_chars: envelope.as_ref().map_or(0, |e| e.ciphertext.len()),
            envelope: envelope.map(AtRestSeal::Sealed),
        })
    }
}
