//! Store tests: the rules one by one, and a randomized comparison of the
//! indexed store against a naive model that scans every job the way the
//! written rules read.

use super::out::push_num;
use super::people::{ApproveError, MAX_PAIRINGS, PAIRING_GRACE_MS};
use super::*;
use crate::audience::{server_admits, OfferScope};
use crate::json::write_json_str;

/// `renewLeases` as the reference answers it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RenewResult {
    pub renewed: Vec<(String, f64)>,
    pub lost: Vec<LeaseRef>,
}

/// The store calls in the shapes the reference's interface answers with,
/// over the per-ref answers the binding uses.
impl Store {
    /// Deterministic lease ids (`lease-1`, `lease-2`, …), for tests that
    /// compare two stores operation by operation.
    pub(crate) fn use_counter_lease_ids(&mut self) {
        self.counter_lease_ids = Some(0);
    }

    /// `renewLeases`: sweep, then extend each named grant this runner holds.
    pub(crate) fn renew_leases(
        &mut self,
        runner_id: &str,
        leases: &[LeaseRef],
        lease_ms: f64,
        now: f64,
    ) -> RenewResult {
        let each = self.renew_leases_each(runner_id, leases, lease_ms, now);
        let mut result = RenewResult {
            renewed: Vec::new(),
            lost: Vec::new(),
        };
        for (lease_ref, renewed) in leases.iter().zip(each) {
            match renewed {
                Some(expires_at) => result.renewed.push((lease_ref.job_id.clone(), expires_at)),
                None => result.lost.push(lease_ref.clone()),
            }
        }
        result
    }

    /// `release`: back to the queue, remembering a refusal.
    pub(crate) fn release(
        &mut self,
        runner_id: &str,
        leases: &[LeaseRef],
        refused: bool,
        now: f64,
    ) -> Vec<String> {
        self.release_each(runner_id, leases, refused, now)
            .into_iter()
            .filter_map(|at| leases.get(at).map(|r| r.job_id.clone()))
            .collect()
    }

    /// `expireDue`: the three-pass sweep; a JSON array of the records
    /// written, in order, each as it was at its write (a job requeued in
    /// pass 1 and expired in pass 3 appears twice, first as `queued`).
    pub(crate) fn expire_due(&mut self, now: f64) -> String {
        let mut changed = String::new();
        self.expire_due_into(now, &mut changed);
        changed
    }
}

/// A record as a value.
pub(super) type Record = serde_json::Map<String, serde_json::Value>;

/// Pairings and runners as values.
impl PairingStore {
    pub(crate) fn create_pairing(&mut self, record: Record) {
        let json = serde_json::to_string(&record).unwrap_or_default();
        assert!(
            self.create_pairing_json(json),
            "a pairing record is an object"
        );
    }

    pub(crate) fn pairing_by_hash(&self, hash: &str) -> Option<Record> {
        self.pairing_json_by_hash(hash).and_then(as_record)
    }

    pub(crate) fn pairing_by_code(&self, code: &str) -> Option<Record> {
        self.pairing_json_by_code(code).and_then(as_record)
    }

    pub(crate) fn runner_record(&self, id: &str) -> Option<Record> {
        self.runner(id).and_then(as_record)
    }
}

fn as_record(json: &str) -> Option<Record> {
    serde_json::from_str(&crate::json::lone_surrogates_replaced(json)).ok()
}

const CT: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

fn input<'a>(id: &'a str, owner: &'a str) -> JobInput<'a> {
    JobInput {
        id,
        kind: "llm.generate",
        envelope: EnvelopeInput::Sealed {
            ciphertext: CT,
            recipient_key_id: "site",
            sender_key_id: "site",
            direction: "payload",
            deadline_at: 5000.0,
        },
        size_class: "small",
        owner,
        audience: None,
        purpose_json: None,
        audience_allow: None,
        depends_on: None,
        ttl_ms: None,
        deadline_at: None,
    }
}

fn cap<'a>(kind: &'a str, backend: &'a str, scope: &'a str) -> ClaimCapability<&'a str> {
    ClaimCapability {
        kind,
        backend_id: backend,
        offer_scope: scope,
    }
}

fn claim_args<'a>(
    runner: &'a str,
    owner: &'a str,
    caps: &'a [ClaimCapability<&'a str>],
    now: f64,
) -> ClaimArgs<'a> {
    ClaimArgs {
        runner_id: runner,
        runner_owner: owner,
        capabilities: caps,
        max: 10.0,
        lease_ms: 100.0,
        now,
    }
}

fn json(store: &Store, r: JobRef) -> serde_json::Value {
    serde_json::from_str(&store.job_json(r)).unwrap_or(serde_json::Value::Null)
}

fn ids(store: &Store, refs: &[JobRef]) -> Vec<String> {
    refs.iter()
        .filter_map(|&r| store.live(r).map(|j| j.id.to_string()))
        .collect()
}

/// The ids (and states) of the records a sweep returned.
fn swept(store: &mut Store, now: f64) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&store.expire_due(now)).unwrap_or_default();
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    format!(
                        "{}:{}",
                        r[0].as_str().unwrap_or(""),
                        r[9].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn state(store: &Store, id: &str) -> Option<JobState> {
    store.get(id).and_then(|r| store.live(r)).map(|j| j.state)
}

const OLLAMA: [ClaimCapability<&'static str>; 1] = [ClaimCapability {
    kind: "llm.generate",
    backend_id: "ollama",
    offer_scope: "team",
}];

#[test]
fn create_is_idempotent_and_the_record_has_the_reference_layout() {
    let mut store = Store::default();
    let a = store.create(input("a", "alice"), 10.0);
    let again = store.create(
        JobInput {
            ttl_ms: Some(1.0),
            ..input("a", "bob")
        },
        20.0,
    );
    assert_eq!(a, again);
    let record = json(&store, a);
    assert_eq!(
        record,
        serde_json::json!([
            "a",
            "llm.generate",
            [CT, "site", "site", "payload", 5000],
            "small",
            "private",
            0,
            "alice",
            0,
            [],
            "queued",
            null,
            null,
            10,
            10,
            900000,
            null,
            [],
            0,
            null,
            null,
            10
        ])
    );
    assert_eq!(record.as_array().map(Vec::len), Some(JOB_KEYS.len()));
}

#[test]
fn envelopes_round_trip_exactly() {
    let mut store = Store::default();
    for (id, ct) in [
        ("canon", CT),
        ("padded", "AAE="),
        ("odd", "AAF"),
        ("weird", "\"\\\n\u{1}é"),
    ] {
        let r = store.create(
            JobInput {
                envelope: EnvelopeInput::Sealed {
                    ciphertext: ct,
                    recipient_key_id: "r",
                    sender_key_id: "s",
                    direction: "payload",
                    deadline_at: 1.5,
                },
                ..input(id, "o")
            },
            0.0,
        );
        assert_eq!(
            json(&store, r)[2],
            serde_json::json!([ct, "r", "s", "payload", 1.5]),
            "{id}"
        );
    }
    let raw = r#"{"ciphertext":"x","extra":[1,{"a":null}]}"#;
    let r = store.create(
        JobInput {
            envelope: EnvelopeInput::Raw(raw),
            ..input("raw", "o")
        },
        0.0,
    );
    assert_eq!(
        json(&store, r)[2],
        serde_json::from_str::<serde_json::Value>(raw).unwrap_or_default()
    );
    let r = store.create(
        JobInput {
            envelope: EnvelopeInput::Raw(r#"["a","b","c","d",1]"#),
            ..input("raw-array", "o")
        },
        0.0,
    );
    assert_eq!(
        json(&store, r)[2],
        serde_json::json!([["a", "b", "c", "d", 1]]),
        "a caller's array is wrapped, never read as sealed parts"
    );
    assert!(matches!(
        store
            .live(store.get("canon").unwrap_or(r))
            .map(|j| &j.envelope),
        Some(Envelope::Sealed {
            ciphertext: Ciphertext::Bytes(_),
            ..
        })
    ));
}

#[test]
fn omitted_envelopes_read_back_by_id_exactly_as_in_the_full_record() {
    let mut store = Store::default();
    let big_ct = "AAAA".repeat(super::out::OMIT_ENVELOPE_BYTES / 3 + 1);
    let padded = format!("{big_ct}=");
    let sealed = |id, ct| JobInput {
        envelope: EnvelopeInput::Sealed {
            ciphertext: ct,
            recipient_key_id: "r",
            sender_key_id: "s",
            direction: "payload",
            deadline_at: 1.5,
        },
        ..input(id, "o")
    };
    let big = store.create(sealed("big", &big_ct), 0.0);
    let big_text = store.create(sealed("big-text", &padded), 0.0);
    let small = store.create(sealed("small", CT), 0.0);
    let raw = store.create(
        JobInput {
            envelope: EnvelopeInput::Raw(r#"[1,"x",{"a":null}]"#),
            ..input("raw", "o")
        },
        0.0,
    );
    let all = [big, big_text, small, raw];
    let full: Vec<serde_json::Value> = all.iter().map(|&r| json(&store, r)).collect();
    store.set_omit_envelopes(true);
    for (at, &r) in all.iter().enumerate() {
        let mut lean = json(&store, r);
        let omitted = at < 2;
        assert_eq!(lean[2] == serde_json::json!([]), omitted, "record {at}");
        let mut ct = String::new();
        let alone = store.sealed_envelope_parts(r, &mut ct).map(|p| {
            serde_json::json!([
                ct,
                p.recipient_key_id,
                p.sender_key_id,
                p.direction,
                p.deadline_at
            ])
        });
        let expected = full.get(at).map(|f| f[2].clone());
        if at < 3 {
            assert_eq!(alone, expected, "envelope {at}");
        } else {
            assert_eq!(alone, None, "a caller's own envelope is not sealed parts");
        }
        if omitted {
            lean[2] = alone.unwrap_or_default();
        }
        assert_eq!(Some(&lean), full.get(at), "record {at}");
    }
    let listed: serde_json::Value =
        serde_json::from_str(&store.jobs_json(&store.all_jobs())).unwrap_or_default();
    assert_eq!(listed[0][2], serde_json::json!([]));
    assert_eq!(listed[2][2], full[2][2]);
}

#[test]
fn numbers_survive_the_json_text() {
    let mut out = String::new();
    for n in [
        0.0,
        -0.0,
        1.5,
        1e21,
        1764500000000.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        5e-324,
        -2.25,
        -7.0,
        9_007_199_254_740_991.0,
        -9_007_199_254_740_991.0,
        9_007_199_254_740_992.0,
    ] {
        out.clear();
        push_num(&mut out, n);
        let back: f64 = if n.is_infinite() {
            if out.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        } else {
            out.parse().unwrap_or(f64::NAN)
        };
        assert_eq!(back.to_bits(), n.to_bits(), "{n} printed as {out}");
        if n.is_finite() && n != 0.0 {
            assert_eq!(out, crate::json::js_number_to_string(n));
        }
    }
}

#[test]
fn claim_order_is_oldest_claimable_first_then_creation_order() {
    let mut store = Store::default();
    store.create(input("late", "alice"), 20.0);
    store.create(input("early1", "alice"), 10.0);
    store.create(input("early2", "alice"), 10.0);
    let claimed = store.claim(&ClaimArgs {
        max: 2.0,
        ..claim_args("r1", "alice", &OLLAMA, 30.0)
    });
    assert_eq!(ids(&store, &claimed), ["early1", "early2"]);
    let lease = store.live(claimed[0]).and_then(|j| j.lease.clone());
    assert!(lease
        .as_ref()
        .is_some_and(|l| l.id.len() == 36 && l.expires_at == 130.0));
    assert_eq!(store.live(claimed[0]).map(|j| j.attempts), Some(1.0));
    // Not yet claimable: claimableAt in the future.
    store.create(input("future", "alice"), 100.0);
    let claimed = store.claim(&claim_args("r1", "alice", &OLLAMA, 40.0));
    assert_eq!(ids(&store, &claimed), ["late"]);
}

#[test]
fn claim_respects_capability_audience_and_refusals() {
    let mut store = Store::default();
    store.create(input("alice-private", "alice"), 0.0);
    store.create(
        JobInput {
            audience: Some("team"),
            ..input("alice-team", "alice")
        },
        1.0,
    );
    store.create(
        JobInput {
            audience: Some("team"),
            audience_allow: Some(vec!["carol".into()]),
            ..input("alice-team-carol", "alice")
        },
        2.0,
    );
    store.create(
        JobInput {
            kind: "llm.chat",
            ..input("alice-chat", "alice")
        },
        3.0,
    );
    // Bob's free team backend: only the team job without an allowlist.
    let got = store.claim(&claim_args("bob-1", "bob", &OLLAMA, 10.0));
    assert_eq!(ids(&store, &got), ["alice-team"]);
    // A subscription backend never serves strangers.
    let sub = [cap("llm.generate", "claude-cli", "team")];
    assert!(store
        .claim(&claim_args("carol-1", "carol", &sub, 10.0))
        .is_empty());
    // Carol is on the allowlist.
    let got = store.claim(&claim_args("carol-1", "carol", &OLLAMA, 10.0));
    assert_eq!(ids(&store, &got), ["alice-team-carol"]);
    // The owner's runner takes its own private job; the first capability for
    // a kind is the one used (here a private-scope one, fine for the owner).
    let caps = [
        cap("llm.chat", "ollama", "private"),
        cap("llm.generate", "ollama", "private"),
        cap("llm.generate", "nope", "team"),
    ];
    let got = store.claim(&claim_args("alice-1", "alice", &caps, 10.0));
    assert_eq!(ids(&store, &got), ["alice-private", "alice-chat"]);
    // Refusal memory.
    let lease = store
        .get("alice-private")
        .and_then(|r| store.live(r))
        .and_then(|j| j.lease.clone())
        .map(|l| l.id.to_string())
        .unwrap_or_default();
    let released = store.release(
        "alice-1",
        &[LeaseRef {
            job_id: "alice-private".into(),
            lease_id: lease,
        }],
        true,
        20.0,
    );
    assert_eq!(released, ["alice-private"]);
    assert!(store
        .claim(&claim_args("alice-1", "alice", &caps, 21.0))
        .is_empty());
    let got = store.claim(&claim_args("alice-2", "alice", &caps, 21.0));
    assert_eq!(ids(&store, &got), ["alice-private"]);
}

#[test]
fn sweep_requeues_lapsed_leases_then_expires_ttl_and_deadlines() {
    let mut store = Store::default();
    store.create(
        JobInput {
            ttl_ms: Some(50.0),
            ..input("a", "alice")
        },
        0.0,
    );
    store.create(
        JobInput {
            deadline_at: Some(30.0),
            ..input("b", "alice")
        },
        0.0,
    );
    store.create(
        JobInput {
            ttl_ms: Some(0.0),
            ..input("zero", "alice")
        },
        0.0,
    );
    // ttl 0 expires at once (<=).
    assert_eq!(swept(&mut store, 0.0), ["zero:expired"]);
    let got = store.claim(&claim_args("r", "alice", &OLLAMA, 10.0));
    assert_eq!(ids(&store, &got), ["a", "b"]);
    // Lease expiry at 110 requeues both; b is past its deadline and expires in pass 3.
    assert_eq!(
        swept(&mut store, 110.0),
        ["a:queued", "b:queued", "b:expired"]
    );
    assert_eq!(state(&store, "a"), Some(JobState::Queued));
    assert_eq!(state(&store, "b"), Some(JobState::Expired));
    let a = store
        .get("a")
        .and_then(|r| store.live(r))
        .map(|j| (j.claimable_at, j.attempts));
    assert_eq!(a, Some((Some(110.0), 1.0)));
    // TTL restarts at the requeue: not expired at 159, expired at 160.
    assert!(swept(&mut store, 159.0).is_empty());
    assert_eq!(swept(&mut store, 160.0), ["a:expired"]);
    assert!(swept(&mut store, 160.0).is_empty(), "idempotent");
}

#[test]
fn adopted_leases_end_only_at_their_deadline() {
    let mut store = Store::default();
    store.create(
        JobInput {
            ttl_ms: Some(100.0),
            ..input("a", "alice")
        },
        0.0,
    );
    assert!(store.adopt("a", "relay-lease", 5.0, 1.0).is_some());
    assert!(store.adopt("a", "other", 5.0, 1.0).is_none());
    assert!(store.adopt("a", "relay-lease", 50.0, 2.0).is_some());
    assert!(
        swept(&mut store, 99.0).is_empty(),
        "the lease clock does not apply"
    );
    assert_eq!(swept(&mut store, 100.0), ["a:expired"]);
    assert_eq!(state(&store, "a"), Some(JobState::Expired));
    // Adopting a blocked job: bound is now + ttl, so only ttl <= 0 expires.
    store.create(
        JobInput {
            depends_on: Some(vec!["missing".into()]),
            ..input("blocked", "alice")
        },
        0.0,
    );
    store.adopt("blocked", "l", 1.0, 0.0);
    assert!(swept(&mut store, 1e9).is_empty());
}

#[test]
fn renew_complete_and_the_duplicate_rule() {
    let mut store = Store::default();
    store.create(input("a", "alice"), 0.0);
    let got = store.claim(&claim_args("r", "alice", &OLLAMA, 0.0));
    let lease = store
        .live(got[0])
        .and_then(|j| j.lease.clone())
        .map(|l| l.id.to_string())
        .unwrap_or_default();
    let refs = vec![
        LeaseRef {
            job_id: "a".into(),
            lease_id: lease.clone(),
        },
        LeaseRef {
            job_id: "a".into(),
            lease_id: "wrong".into(),
        },
        LeaseRef {
            job_id: "nope".into(),
            lease_id: lease.clone(),
        },
    ];
    let renewed = store.renew_leases("r", &refs, 100.0, 50.0);
    assert_eq!(renewed.renewed, [("a".to_string(), 150.0)]);
    assert_eq!(renewed.lost, refs[1..]);
    assert_eq!(state(&store, "a"), Some(JobState::Running));
    assert_eq!(
        store.renew_leases("other", &refs[..1], 100.0, 50.0).lost,
        refs[..1]
    );

    let complete = |store: &mut Store, holder: Holder<'_>, runner: &str| {
        store.complete(&CompleteArgs {
            job_id: "a",
            runner_id: runner,
            holder,
            outcome_tag: "ok",
            outcome_json: r#"{"outcome":"ok"}"#,
            provenance_json: r#"{"runnerId":"r"}"#,
            provenance_runner: Some("r"),
            now: 60.0,
        })
    };
    assert!(!complete(&mut store, Holder::Lease("wrong"), "r").accepted);
    let done = complete(&mut store, Holder::Lease(&lease), "r");
    assert!(done.accepted && !done.duplicate);
    let record = done.job.map(|r| json(&store, r)).unwrap_or_default();
    assert_eq!(record[9], "ok");
    assert_eq!(record[10], serde_json::Value::Null);
    assert_eq!(record[11], lease.as_str());
    assert_eq!(record[18], serde_json::json!({"outcome": "ok"}));
    let again = complete(&mut store, Holder::Lease(&lease), "r");
    assert!(!again.accepted && again.duplicate);
    let other = complete(&mut store, Holder::Lease(&lease), "someone");
    assert!(!other.accepted && !other.duplicate);
    let by_runner = complete(&mut store, Holder::Runner("r"), "r");
    assert!(!by_runner.accepted && !by_runner.duplicate);
}

#[test]
fn dependencies_unblock_only_on_ok() {
    let mut store = Store::default();
    store.create(input("dep1", "alice"), 0.0);
    store.create(input("dep2", "alice"), 0.0);
    store.create(
        JobInput {
            depends_on: Some(vec!["dep1".into(), "dep2".into(), "dep1".into()]),
            ..input("child", "alice")
        },
        0.0,
    );
    let child = |store: &Store| {
        store
            .get("child")
            .and_then(|r| store.live(r))
            .map(|j| j.claimable_at)
    };
    assert_eq!(child(&store), Some(None));
    let got = store.claim(&claim_args("r", "alice", &OLLAMA, 1.0));
    assert_eq!(ids(&store, &got), ["dep1", "dep2"]);
    let finish = |store: &mut Store, id: &str, tag: &str, now: f64| {
        store.complete(&CompleteArgs {
            job_id: id,
            runner_id: "r",
            holder: Holder::Runner("r"),
            outcome_tag: tag,
            outcome_json: "{}",
            provenance_json: "{}",
            provenance_runner: None,
            now,
        })
    };
    assert!(finish(&mut store, "dep1", "ok", 5.0).accepted);
    assert_eq!(child(&store), Some(None));
    assert!(finish(&mut store, "dep2", "ok", 7.0).accepted);
    assert_eq!(child(&store), Some(Some(7.0)));
    // An error leaves dependents blocked.
    store.create(input("bad", "alice"), 10.0);
    store.create(
        JobInput {
            depends_on: Some(vec!["bad".into()]),
            ..input("child2", "alice")
        },
        10.0,
    );
    store.claim(&claim_args("r", "alice", &OLLAMA, 11.0));
    assert!(finish(&mut store, "bad", "boom", 12.0).accepted);
    assert_eq!(state(&store, "bad"), Some(JobState::Error));
    let c2 = store
        .get("child2")
        .and_then(|r| store.live(r))
        .map(|j| j.claimable_at);
    assert_eq!(c2, Some(None));
}

#[test]
fn cancel_queued_at_once_held_by_request() {
    let mut store = Store::default();
    store.create(input("q", "alice"), 0.0);
    store.create(input("h", "alice"), 1.0);
    assert!(store.cancel("nope", 0.0).is_none());
    store.cancel("q", 2.0);
    assert_eq!(state(&store, "q"), Some(JobState::Canceled));
    store.claim(&claim_args("r", "alice", &OLLAMA, 3.0));
    store.cancel("h", 4.0);
    store.cancel("h", 4.0);
    assert_eq!(state(&store, "h"), Some(JobState::Claimed));
    let requests = store.list_cancel_requests("r");
    assert_eq!(requests.len(), 1);
    assert!(store.list_cancel_requests("other").is_empty());
    // Release keeps the request; the next holder learns it.
    store.release("r", &requests, false, 5.0);
    store.claim(&claim_args("r2", "alice", &OLLAMA, 6.0));
    assert_eq!(store.list_cancel_requests("r2").len(), 1);
    assert_eq!(ids(&store, &store.list_claimed_by("r2")), ["h"]);
}

#[test]
fn retention_drops_finished_jobs_but_keeps_needed_dependencies() {
    let mut store = Store::new(StoreOptions {
        retention_ms: Some(100.0),
        ..StoreOptions::default()
    });
    store.create(input("gone", "alice"), 0.0);
    store.create(input("needed", "alice"), 0.0);
    store.create(input("other", "alice"), 0.0);
    store.create(
        JobInput {
            depends_on: Some(vec!["needed".into(), "other".into()]),
            ..input("child", "alice")
        },
        0.0,
    );
    store.cancel("gone", 10.0);
    store.claim(&claim_args("r", "alice", &OLLAMA, 10.0));
    store.complete(&CompleteArgs {
        job_id: "needed",
        runner_id: "r",
        holder: Holder::Runner("r"),
        outcome_tag: "ok",
        outcome_json: "{}",
        provenance_json: "{}",
        provenance_runner: None,
        now: 20.0,
    });
    store.expire_due(109.0);
    assert!(store.get("gone").is_some());
    store.expire_due(110.0);
    assert!(store.get("gone").is_none());
    store.expire_due(500.0);
    assert!(store.get("needed").is_some(), "child still waits on other");
    // The freed slot is reused and the old handle is dead.
    let fresh = store.create(input("new", "bob"), 600.0);
    assert_eq!(ids(&store, &[fresh]), ["new"]);
    assert_counts_agree(&store, "after retention");
}

/// The counts kept with the indexes equal a count over every stored job.
fn assert_counts_agree(store: &Store, ctx: &str) {
    let mut counted = [0u64; 7];
    for r in store.all_jobs() {
        let state = store.view(r).map(|j| j.state);
        if let Some(at) = JobState::ALL.iter().position(|s| Some(*s) == state) {
            counted[at] += 1;
        }
    }
    assert_eq!(store.state_counts(), counted, "{ctx}: jobs by state");
}

#[test]
fn watchers_see_each_write_in_order() {
    let mut store = Store::default();
    store.watch("a");
    store.create(input("a", "alice"), 0.0);
    store.create(input("b", "alice"), 0.0);
    store.create(input("a", "alice"), 0.0);
    store.claim(&claim_args("r", "alice", &OLLAMA, 1.0));
    assert_eq!(store.drain_writes(), ["a", "a"]);
    store.expire_due(1000.0);
    assert_eq!(store.drain_writes(), ["a"]);
    store.unwatch("a");
    store.cancel("a", 2000.0);
    assert!(store.drain_writes().is_empty());
}

#[test]
fn pairings_and_runners() {
    let mut people = PairingStore::default();
    let pairing = |hash: &str, code: &str, expires: f64| {
        serde_json::json!({"deviceCodeHash": hash, "userCode": code, "state": "pending", "owner": null,
            "runnerId": null, "collected": false, "label": "laptop", "platform": "linux", "daemonVersion": "0.1.1",
            "capabilities": [{"kind": "llm.generate"}], "device": {"identity": "i"}, "expiresAt": expires, "createdAt": 0})
        .as_object()
        .cloned()
        .unwrap_or_default()
    };
    people.create_pairing(pairing("h1", "CODE", 100.0));
    people.create_pairing(pairing("h2", "CODE", 100.0));
    people.create_pairing(pairing("h3", "OLD", 1.0));
    assert_eq!(
        people
            .approve("NOPE", "u", "r", 0.0)
            .err()
            .map(|e| e.to_string()),
        Some("unknown pairing code: NOPE".into())
    );
    assert_eq!(
        people.approve("OLD", "u", "r", 1.0).err(),
        Some(ApproveError::Expired)
    );
    let runner: Record = people
        .approve("CODE", "alice", "r1", 5.0)
        .ok()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    let keys: Vec<&str> = runner.keys().map(String::as_str).collect();
    assert_eq!(keys, RUNNER_KEYS);
    // Approval acts on the pending, unexpired pairing with the code: h2
    // (a second live pairing under one code exists only if a store was
    // handed one; pair start picks a fresh code).
    assert!(people.approve("CODE", "alice", "r2", 5.0).is_ok());
    let state = |people: &PairingStore, hash: &str| {
        people
            .pairing_by_hash(hash)
            .and_then(|p| p.get("state").cloned())
    };
    assert_eq!(state(&people, "h1"), Some(serde_json::json!("approved")));
    assert_eq!(state(&people, "h2"), Some(serde_json::json!("approved")));
    assert_eq!(
        people
            .approve("CODE", "alice", "r3", 5.0)
            .err()
            .map(|e| e.to_string()),
        Some("pairing is already approved".into())
    );
    people.create_pairing(pairing("h4", "CODE", 100.0));
    // The code names its pending pairing first, then the first one.
    assert_eq!(
        people
            .pairing_by_code("CODE")
            .and_then(|p| p.get("deviceCodeHash").cloned()),
        Some(serde_json::json!("h4"))
    );
    people.deny("CODE");
    assert_eq!(state(&people, "h4"), Some(serde_json::json!("denied")));
    assert_eq!(state(&people, "h1"), Some(serde_json::json!("approved")));
    let first = people.pairing_by_code("CODE").unwrap_or_default();
    assert_eq!(first.get("deviceCodeHash"), Some(&serde_json::json!("h1")));
    assert_eq!(first.get("runnerId"), Some(&serde_json::json!("r1")));
    people.consume("h1");
    assert_eq!(
        people
            .pairing_by_hash("h1")
            .and_then(|p| p.get("collected").cloned()),
        Some(serde_json::json!(true))
    );
    // Overwriting h1 with another code moves the code index.
    people.create_pairing(pairing("h1", "NEW", 100.0));
    assert_eq!(
        people
            .pairing_by_code("CODE")
            .and_then(|p| p.get("deviceCodeHash").cloned()),
        Some(serde_json::json!("h2"))
    );
    people.revoke("r1", 7.0);
    people.revoke("r1", 9.0);
    assert_eq!(
        people
            .runner_record("r1")
            .and_then(|r| r.get("revokedAt").and_then(serde_json::Value::as_f64)),
        Some(7.0)
    );
    assert!(people.touch("r1", "[]", "\"0.2\"", 10.0).is_some());
    assert!(people.touch("zz", "[]", "\"0.2\"", 10.0).is_none());
    let listed = |owner| {
        serde_json::from_str::<Vec<serde_json::Value>>(&people.list_runners(owner))
            .map_or(usize::MAX, |runners| runners.len())
    };
    assert_eq!(listed(Some("alice")), 2);
    assert_eq!(listed(Some("bob")), 0);
    assert_eq!(listed(None), 2);
}

fn pending(
    hash: &str,
    code: &str,
    created: f64,
    expires: f64,
) -> serde_json::Map<String, serde_json::Value> {
    serde_json::json!({"deviceCodeHash": hash, "userCode": code, "state": "pending", "owner": null,
        "runnerId": null, "collected": false, "label": "laptop", "platform": "linux", "daemonVersion": "0.1.1",
        "capabilities": [], "device": {"identity": "i"}, "expiresAt": expires, "createdAt": created})
    .as_object()
    .cloned()
    .unwrap_or_default()
}

#[test]
fn approval_acts_only_on_the_pending_unexpired_pairing_with_the_code() {
    let mut people = PairingStore::default();
    let state = |people: &PairingStore, hash: &str| {
        people
            .pairing_by_hash(hash)
            .and_then(|p| p.get("state").cloned())
    };
    // An expired pairing carries the code first.
    people.create_pairing(pending("old", "CODE", 0.0, 10.0));
    people.create_pairing(pending("live", "CODE", 0.0, 1_000.0));
    let runner = people
        .approve("CODE", "alice", "r1", 50.0)
        .map(str::to_owned);
    assert!(runner.is_ok(), "{runner:?}");
    assert_eq!(state(&people, "live"), Some(serde_json::json!("approved")));
    assert_eq!(state(&people, "old"), Some(serde_json::json!("pending")));
    // A denied one first.
    people.create_pairing(pending("no", "NO", 0.0, 1_000.0));
    people.deny("NO");
    people.create_pairing(pending("yes", "NO", 0.0, 1_000.0));
    assert!(people.approve("NO", "bob", "r2", 50.0).is_ok());
    assert_eq!(state(&people, "no"), Some(serde_json::json!("denied")));
    assert_eq!(state(&people, "yes"), Some(serde_json::json!("approved")));
    // With no live pairing the first one says why, as the reference does.
    assert_eq!(
        people.approve("CODE", "bob", "r3", 50.0).err(),
        Some(ApproveError::Expired)
    );
    assert_eq!(
        people
            .approve("NO", "bob", "r3", 50.0)
            .err()
            .map(|e| e.to_string()),
        Some("pairing is already denied".into())
    );
}

#[test]
fn expired_pairings_are_pruned_by_the_sweep_and_as_they_pile_up() {
    let mut store = Store::new(StoreOptions::default());
    for i in 0..10 {
        let at = f64::from(i) * 1_000.0;
        store.people.create_pairing(pending(
            &format!("h{i}"),
            &format!("C{i}"),
            at,
            at + 600_000.0,
        ));
    }
    store
        .people
        .approve("C9", "alice", "r9", 9_000.0)
        .map(|_| ())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(store.people.pairing_footprint().0, 10);
    // Expired, but inside the grace a late daemon still hears `expired`.
    store.expire_due(600_000.0 + 4_500.0);
    assert_eq!(store.people.pairing_footprint().0, 10);
    store.expire_due(600_000.0 + PAIRING_GRACE_MS + 4_500.0);
    assert_eq!(store.people.pairing_footprint().0, 5);
    assert!(store.people.pairing_by_hash("h4").is_none());
    assert!(store.people.pairing_by_code("C4").is_none());
    assert!(store.people.pairing_by_hash("h5").is_some());
    // The approval of C9 waits for its daemon; once collected it goes too.
    store.expire_due(f64::from(u32::MAX));
    assert_eq!(store.people.pairing_footprint().0, 1);
    store.people.consume("h9");
    store.expire_due(f64::from(u32::MAX));
    assert_eq!(store.people.pairing_footprint(), (0, 0));
    // The runner an approval made outlives its pairing.
    assert!(store.people.runner("r9").is_some());

    // Without sweeps, creating pairings prunes the expired ones as they pile up.
    let mut people = PairingStore::default();
    for i in 0..20_000u32 {
        let at = f64::from(i) * 1_000.0;
        people.create_pairing(pending(&format!("h{i}"), "X", at, at + 600_000.0));
        // At most 721 live (10 min and the 2 min window, one a second);
        // a prune runs whenever the count reaches 1,024 or doubles.
        assert!(people.pairing_footprint().0 <= 2048);
    }
}

#[test]
fn a_pairing_given_as_json_text_is_kept_as_given() {
    let mut people = PairingStore::default();
    assert!(!people.create_pairing_json("[1]".into()));
    assert!(!people.create_pairing_json("{\"deviceCodeHash\":".into()));
    let text = r#"{"deviceCodeHash":"h","userCode":"AB","state":"pending","label":"\ud800 x","expiresAt":1e21,"createdAt":5}"#;
    assert!(people.create_pairing_json(text.into()));
    assert_eq!(people.pairing_json_by_hash("h"), Some(text));
    assert_eq!(people.pairing_json_by_code("AB"), Some(text));
    assert_eq!(people.pairing_footprint(), (1, text.len()));
}

#[test]
fn an_approval_not_yet_collected_outlives_the_prune_until_its_daemon_collects_it() {
    let mut people = PairingStore::default();
    people.create_pairing(pending("h1", "C1", 0.0, 1_000.0));
    assert!(people.approve("C1", "alice", "r1", 500.0).is_ok());
    let late = 1_000.0 + PAIRING_GRACE_MS + 60_000.0;
    assert_eq!(people.prune(late), 0);
    assert!(people.pairing_by_hash("h1").is_some(), "still collectable");
    people.consume("h1");
    assert_eq!(people.prune(late), 1);
    assert!(people.pairing_by_hash("h1").is_none());
}

#[test]
fn a_pairing_whose_text_holds_a_lone_surrogate_approves_into_a_whole_runner() {
    let mut people = PairingStore::default();
    let text = r#"{"deviceCodeHash":"h","userCode":"AB","state":"pending","label":"\ud800 x","platform":"linux","expiresAt":1e21,"createdAt":5}"#;
    assert!(people.create_pairing_json(text.into()));
    let runner = people.approve("AB", "alice", "r1", 0.0);
    assert!(runner.is_ok(), "{runner:?}");
    let runner = people.runner_record("r1").unwrap_or_default();
    assert_eq!(runner.get("label"), Some(&serde_json::json!("\u{fffd} x")));
    assert_eq!(runner.get("platform"), Some(&serde_json::json!("linux")));
}

#[test]
fn past_the_cap_the_oldest_pairings_go_but_not_an_approval_awaiting_collection() {
    let mut people = PairingStore::default();
    people.create_pairing(pending("first", "FIRST", 0.0, 1e12));
    assert!(people.approve("FIRST", "alice", "r1", 0.0).is_ok());
    for i in 0..MAX_PAIRINGS + 100 {
        people.create_pairing(pending(&format!("h{i}"), &format!("C{i}"), 0.0, 1e12));
    }
    assert_eq!(people.pairing_footprint().0, MAX_PAIRINGS);
    assert!(people.pairing_by_hash("first").is_some());
    assert!(people.pairing_by_hash("h0").is_none());
    assert!(people.pairing_by_code("C100").is_none());
    assert!(people.pairing_by_hash("h101").is_some());
    assert!(people
        .pairing_by_hash(&format!("h{}", MAX_PAIRINGS + 99))
        .is_some());
}

// ---------------------------------------------------------------------------
// The naive model: every rule read literally, every operation a scan.

#[derive(Clone)]
struct MJob {
    id: String,
    kind: String,
    audience: String,
    owner: String,
    allow: Option<Vec<String>>,
    deps: Vec<String>,
    state: JobState,
    lease: Option<(String, String, f64)>,
    cbl: Option<String>,
    created_at: f64,
    claimable_at: Option<f64>,
    ttl: f64,
    deadline: Option<f64>,
    refused: Vec<String>,
    attempts: f64,
    outcome: Option<String>,
    prov: Option<String>,
    prov_runner: Option<String>,
    updated_at: f64,
}

impl MJob {
    fn to_json(&self) -> String {
        let mut o = String::from("[");
        write_json_str(&self.id, &mut o);
        o.push(',');
        write_json_str(&self.kind, &mut o);
        o.push_str(&format!(
            ",[\"{CT}\",\"site\",\"site\",\"payload\",5000],\"small\","
        ));
        write_json_str(&self.audience, &mut o);
        o.push_str(",0,");
        write_json_str(&self.owner, &mut o);
        o.push(',');
        let list = |o: &mut String, l: &[String]| {
            o.push('[');
            for (i, s) in l.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                write_json_str(s, o);
            }
            o.push(']');
        };
        match &self.allow {
            Some(l) => list(&mut o, l),
            None => o.push('0'),
        }
        o.push(',');
        list(&mut o, &self.deps);
        o.push_str(&format!(",\"{}\",", self.state.as_str()));
        match &self.lease {
            Some((id, runner, exp)) => {
                o.push('[');
                write_json_str(id, &mut o);
                o.push(',');
                write_json_str(runner, &mut o);
                o.push(',');
                push_num(&mut o, *exp);
                o.push(']');
            }
            None => o.push_str("null"),
        }
        o.push(',');
        match &self.cbl {
            Some(s) => write_json_str(s, &mut o),
            None => o.push_str("null"),
        }
        for n in [
            Some(self.created_at),
            self.claimable_at,
            Some(self.ttl),
            self.deadline,
        ] {
            o.push(',');
            match n {
                Some(n) => push_num(&mut o, n),
                None => o.push_str("null"),
            }
        }
        o.push(',');
        list(&mut o, &self.refused);
        o.push(',');
        push_num(&mut o, self.attempts);
        o.push(',');
        o.push_str(self.outcome.as_deref().unwrap_or("null"));
        o.push(',');
        o.push_str(self.prov.as_deref().unwrap_or("null"));
        o.push(',');
        push_num(&mut o, self.updated_at);
        o.push(']');
        o
    }
}

#[derive(Default)]
struct Model {
    jobs: Vec<MJob>,
    cancels: Vec<String>,
    leases: u64,
}

impl Model {
    fn find(&self, id: &str) -> Option<usize> {
        self.jobs.iter().position(|j| j.id == id)
    }

    fn is_ok(&self, id: &str) -> bool {
        self.find(id)
            .is_some_and(|i| self.jobs[i].state == JobState::Ok)
    }

    fn sweep(&mut self, now: f64) -> Vec<String> {
        let mut out = Vec::new();
        for j in self.jobs.iter_mut() {
            if matches!(j.state, JobState::Claimed | JobState::Running)
                && j.lease
                    .as_ref()
                    .is_some_and(|l| !l.1.is_empty() && l.2 <= now)
            {
                j.state = JobState::Queued;
                j.lease = None;
                j.cbl = None;
                j.claimable_at = Some(now);
                j.updated_at = now;
                out.push(j.to_json());
            }
        }
        for j in self.jobs.iter_mut() {
            if !matches!(j.state, JobState::Claimed | JobState::Running) {
                continue;
            }
            if j.lease.as_ref().is_none_or(|l| !l.1.is_empty()) {
                continue;
            }
            let deadline = j.deadline.unwrap_or(j.claimable_at.unwrap_or(now) + j.ttl);
            if deadline > now {
                continue;
            }
            j.state = JobState::Expired;
            j.lease = None;
            j.cbl = None;
            j.updated_at = now;
            out.push(j.to_json());
        }
        for j in self.jobs.iter_mut() {
            if j.state != JobState::Queued {
                continue;
            }
            let past_deadline = j.deadline.is_some_and(|d| d <= now);
            let past_ttl = j.claimable_at.is_some_and(|c| c + j.ttl <= now);
            if past_deadline || past_ttl {
                j.state = JobState::Expired;
                j.lease = None;
                j.cbl = None;
                j.updated_at = now;
                out.push(j.to_json());
            }
        }
        out
    }

    fn claim(
        &mut self,
        runner: &str,
        owner: &str,
        caps: &[(&str, &str, &str)],
        max: usize,
        lease_ms: f64,
        now: f64,
    ) -> Vec<String> {
        self.sweep(now);
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        order.sort_by(|&a, &b| {
            let key = |i: usize| self.jobs[i].claimable_at.unwrap_or(f64::INFINITY);
            key(a).total_cmp(&key(b))
        });
        let mut out = Vec::new();
        for i in order {
            if out.len() >= max {
                break;
            }
            let j = &self.jobs[i];
            if j.state != JobState::Queued || j.claimable_at.is_none_or(|c| c > now) {
                continue;
            }
            if j.refused.iter().any(|r| r == runner) {
                continue;
            }
            let Some(&(_, backend, scope)) = caps.iter().find(|c| c.0 == j.kind) else {
                continue;
            };
            let Some(scope) = OfferScope::parse(scope) else {
                continue;
            };
            let audience = Audience::parse(&j.audience).unwrap_or(Audience::Team);
            if server_admits(
                &j.owner,
                audience,
                j.allow.as_deref(),
                scope,
                backend,
                owner,
            )
            .is_err()
            {
                continue;
            }
            self.leases += 1;
            let j = &mut self.jobs[i];
            j.state = JobState::Claimed;
            j.lease = Some((
                format!("lease-{}", self.leases),
                runner.to_string(),
                now + lease_ms,
            ));
            j.attempts += 1.0;
            j.updated_at = now;
            out.push(j.to_json());
        }
        out
    }
}

/// xorshift64*: a seeded PRNG so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[test]
fn randomized_model_agreement() {
    let owners = ["alice", "bob", "carol"];
    let runners = [
        ("ra", "alice"),
        ("rb", "bob"),
        ("rc", "carol"),
        ("ra2", "alice"),
    ];
    let kinds = ["llm.generate", "llm.chat"];
    let backends = ["ollama", "openai", "claude-cli", "openai-http"];
    let scopes = ["private", "team"];
    // How often the interesting paths ran, so the test cannot pass vacuously.
    let (mut claimed_any, mut accepted, mut unblocked) = (0, 0, 0);
    for seed in 1..=25u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut store = Store::default();
        store.use_counter_lease_ids();
        let mut model = Model::default();
        let mut now = 0.0;
        for step in 0..400 {
            now += rng.below(25) as f64;
            let ctx = format!("seed {seed} step {step}");
            match rng.below(10) {
                0 | 1 => {
                    let id = format!("j{}", rng.below(60));
                    let owner = *rng.pick(&owners);
                    let kind = *rng.pick(&kinds);
                    let audience = *rng.pick(&["private", "team", "team"]);
                    let allow = (rng.below(3) == 0).then(|| vec![rng.pick(&owners).to_string()]);
                    let deps: Vec<String> = (0..rng.below(3))
                        .map(|_| format!("j{}", rng.below(60)))
                        .collect();
                    let ttl = *rng.pick(&[0.0, 40.0, 200.0, 900.0]);
                    let deadline = (rng.below(4) == 0).then(|| now + rng.below(400) as f64);
                    let r = store.create(
                        JobInput {
                            kind,
                            audience: Some(audience),
                            audience_allow: allow.clone(),
                            depends_on: Some(deps.clone()),
                            ttl_ms: Some(ttl),
                            deadline_at: deadline,
                            ..input(&id, owner)
                        },
                        now,
                    );
                    let expected = match model.find(&id) {
                        Some(i) => model.jobs[i].to_json(),
                        None => {
                            let blocked = deps.iter().any(|d| !model.is_ok(d));
                            let j = MJob {
                                id: id.clone(),
                                kind: kind.into(),
                                audience: audience.into(),
                                owner: owner.into(),
                                allow,
                                deps,
                                state: JobState::Queued,
                                lease: None,
                                cbl: None,
                                created_at: now,
                                claimable_at: if blocked { None } else { Some(now) },
                                ttl,
                                deadline,
                                refused: vec![],
                                attempts: 0.0,
                                outcome: None,
                                prov: None,
                                prov_runner: None,
                                updated_at: now,
                            };
                            model.jobs.push(j.clone());
                            j.to_json()
                        }
                    };
                    assert_eq!(store.job_json(r), expected, "{ctx} create");
                }
                2 | 3 => {
                    let &(runner, owner) = rng.pick(&runners);
                    let caps: Vec<(&str, &str, &str)> = (0..1 + rng.below(3))
                        .map(|_| (*rng.pick(&kinds), *rng.pick(&backends), *rng.pick(&scopes)))
                        .collect();
                    let max = 1 + rng.below(3) as usize;
                    let lease_ms = 20.0 + rng.below(100) as f64;
                    let claim_caps: Vec<ClaimCapability<&str>> =
                        caps.iter().map(|&(k, b, s)| cap(k, b, s)).collect();
                    let got = store.claim(&ClaimArgs {
                        max: max as f64,
                        lease_ms,
                        ..claim_args(runner, owner, &claim_caps, now)
                    });
                    let expected = model.claim(runner, owner, &caps, max, lease_ms, now);
                    claimed_any += usize::from(!expected.is_empty());
                    assert_eq!(
                        store.jobs_json(&got),
                        format!("[{}]", expected.join(",")),
                        "{ctx} claim"
                    );
                }
                4 => {
                    let &(runner, _) = rng.pick(&runners);
                    let refs = model_refs(&model, &mut rng, runner);
                    let lease_ms = 20.0 + rng.below(100) as f64;
                    let got = store.renew_leases(runner, &refs, lease_ms, now);
                    model.sweep(now);
                    let mut expected = RenewResult {
                        renewed: vec![],
                        lost: vec![],
                    };
                    for r in &refs {
                        let ok = model.find(&r.job_id).is_some_and(|i| {
                            let j = &model.jobs[i];
                            matches!(j.state, JobState::Claimed | JobState::Running)
                                && j.lease
                                    .as_ref()
                                    .is_some_and(|l| l.1 == runner && l.0 == r.lease_id)
                        });
                        match model.find(&r.job_id) {
                            Some(i) if ok => {
                                let j = &mut model.jobs[i];
                                j.state = JobState::Running;
                                if let Some(l) = j.lease.as_mut() {
                                    l.2 = now + lease_ms;
                                }
                                j.updated_at = now;
                                expected.renewed.push((r.job_id.clone(), now + lease_ms));
                            }
                            _ => expected.lost.push(r.clone()),
                        }
                    }
                    assert_eq!(got, expected, "{ctx} renew");
                }
                5 => {
                    let &(runner, _) = rng.pick(&runners);
                    let refs = model_refs(&model, &mut rng, runner);
                    let refused = rng.below(2) == 0;
                    let got = store.release(runner, &refs, refused, now);
                    let mut expected = vec![];
                    for r in &refs {
                        let Some(i) = model.find(&r.job_id) else {
                            continue;
                        };
                        let j = &mut model.jobs[i];
                        if !j
                            .lease
                            .as_ref()
                            .is_some_and(|l| l.1 == runner && l.0 == r.lease_id)
                        {
                            continue;
                        }
                        j.state = JobState::Queued;
                        j.lease = None;
                        j.cbl = None;
                        j.claimable_at = Some(now);
                        if refused && !j.refused.iter().any(|x| x == runner) {
                            j.refused.push(runner.to_string());
                        }
                        j.updated_at = now;
                        expected.push(r.job_id.clone());
                    }
                    assert_eq!(got, expected, "{ctx} release");
                }
                6 => {
                    let &(runner, _) = rng.pick(&runners);
                    let refs = model_refs(&model, &mut rng, runner);
                    let Some(r) = refs.first() else { continue };
                    let by_lease = rng.below(3) != 0;
                    let tag = *rng.pick(&["ok", "ok", "error", "canceled"]);
                    let outcome = format!("{{\"outcome\":\"{tag}\"}}");
                    let prov = format!("{{\"runnerId\":\"{runner}\"}}");
                    let holder = if by_lease {
                        Holder::Lease(&r.lease_id)
                    } else {
                        Holder::Runner(runner)
                    };
                    let got = store.complete(&CompleteArgs {
                        job_id: &r.job_id,
                        runner_id: runner,
                        holder,
                        outcome_tag: tag,
                        outcome_json: &outcome,
                        provenance_json: &prov,
                        provenance_runner: Some(runner),
                        now,
                    });
                    let got = (
                        got.accepted,
                        got.duplicate,
                        got.job.map(|j| store.job_json(j)),
                    );
                    let expected = model_complete(
                        &mut model,
                        &r.job_id,
                        runner,
                        by_lease,
                        &r.lease_id,
                        tag,
                        &outcome,
                        &prov,
                        now,
                    );
                    assert_eq!(got, expected, "{ctx} complete");
                    accepted += usize::from(got.0);
                }
                7 => {
                    let id = format!("j{}", rng.below(60));
                    let got = store.cancel(&id, now).map(|r| store.job_json(r));
                    let expected = model.find(&id).map(|i| {
                        let j = &mut model.jobs[i];
                        match j.state {
                            JobState::Queued => {
                                j.state = JobState::Canceled;
                                j.lease = None;
                                j.cbl = None;
                                j.updated_at = now;
                            }
                            JobState::Claimed | JobState::Running
                                if !model.cancels.contains(&id) =>
                            {
                                model.cancels.push(id.clone());
                            }
                            _ => {}
                        }
                        model.jobs[i].to_json()
                    });
                    assert_eq!(got, expected, "{ctx} cancel");
                }
                8 => {
                    let id = format!("j{}", rng.below(60));
                    let lease = format!("relay-{}", rng.below(3));
                    let expires = now + rng.below(100) as f64;
                    let got = store
                        .adopt(&id, &lease, expires, now)
                        .map(|r| store.job_json(r));
                    let expected = model.find(&id).and_then(|i| {
                        let j = &mut model.jobs[i];
                        if !matches!(j.state, JobState::Queued | JobState::Claimed) {
                            return None;
                        }
                        if j.lease.as_ref().is_some_and(|l| l.0 != lease) {
                            return None;
                        }
                        j.state = JobState::Claimed;
                        j.lease = Some((lease.clone(), String::new(), expires));
                        j.updated_at = now;
                        Some(j.to_json())
                    });
                    assert_eq!(got, expected, "{ctx} adopt");
                }
                _ => {
                    let got = store.expire_due(now);
                    let expected = model.sweep(now);
                    assert_eq!(got, format!("[{}]", expected.join(",")), "{ctx} sweep");
                    let &(runner, _) = rng.pick(&runners);
                    let expected: Vec<LeaseRef> = model
                        .cancels
                        .iter()
                        .filter_map(|id| {
                            let l = model.jobs[model.find(id)?].lease.as_ref()?;
                            (l.1 == runner).then(|| LeaseRef {
                                job_id: id.clone(),
                                lease_id: l.0.clone(),
                            })
                        })
                        .collect();
                    assert_eq!(
                        store.list_cancel_requests(runner),
                        expected,
                        "{ctx} cancel requests"
                    );
                    let held: Vec<String> = model
                        .jobs
                        .iter()
                        .filter(|j| j.lease.as_ref().is_some_and(|l| l.1 == runner))
                        .map(MJob::to_json)
                        .collect();
                    assert_eq!(
                        store.jobs_json(&store.list_claimed_by(runner)),
                        format!("[{}]", held.join(","))
                    );
                }
            }
        }
        unblocked += model
            .jobs
            .iter()
            .filter(|j| !j.deps.is_empty() && j.claimable_at.is_some_and(|c| c > j.created_at))
            .count();
        let all: Vec<String> = model.jobs.iter().map(MJob::to_json).collect();
        assert_counts_agree(&store, &format!("seed {seed}"));
        assert_eq!(
            store.jobs_json(&store.all_jobs()),
            format!("[{}]", all.join(",")),
            "seed {seed} final"
        );
    }
    assert!(
        claimed_any > 300 && accepted > 100 && unblocked > 5,
        "{claimed_any} {accepted} {unblocked}"
    );
    eprintln!("model runs: {claimed_any} claims, {accepted} completions, {unblocked} unblocked");
}

/// Lease refs a runner might send: its real grants, stale ones, garbage.
fn model_refs(model: &Model, rng: &mut Rng, runner: &str) -> Vec<LeaseRef> {
    let mut refs: Vec<LeaseRef> = model
        .jobs
        .iter()
        .filter_map(|j| {
            let l = j.lease.as_ref()?;
            (l.1 == runner || rng.below(8) == 0).then(|| LeaseRef {
                job_id: j.id.clone(),
                lease_id: l.0.clone(),
            })
        })
        .collect();
    if rng.below(3) == 0 {
        refs.push(LeaseRef {
            job_id: format!("j{}", rng.below(60)),
            lease_id: format!("lease-{}", rng.below(model.leases + 1)),
        });
    }
    if refs.len() > 1 && rng.below(2) == 0 {
        let first = refs.remove(0);
        refs.push(first);
    }
    refs.truncate(1 + rng.below(3) as usize);
    refs
}

#[allow(clippy::too_many_arguments)]
fn model_complete(
    model: &mut Model,
    id: &str,
    runner: &str,
    by_lease: bool,
    lease_id: &str,
    tag: &str,
    outcome: &str,
    prov: &str,
    now: f64,
) -> (bool, bool, Option<String>) {
    let Some(i) = model.find(id) else {
        return (false, false, None);
    };
    let j = &model.jobs[i];
    if matches!(j.state, JobState::Ok | JobState::Error | JobState::Canceled) {
        let dup = j.prov_runner.as_deref() == Some(runner)
            && by_lease
            && j.cbl.as_deref() == Some(lease_id);
        return (false, dup, Some(j.to_json()));
    }
    if j.state == JobState::Expired {
        return (false, false, Some(j.to_json()));
    }
    let holds = match &j.lease {
        Some(l) if by_lease => l.0 == lease_id,
        Some(l) => l.1 == runner,
        None => false,
    };
    if !holds {
        return (false, false, Some(j.to_json()));
    }
    let state = match tag {
        "ok" => JobState::Ok,
        "canceled" => JobState::Canceled,
        _ => JobState::Error,
    };
    let j = &mut model.jobs[i];
    j.cbl = if by_lease {
        Some(lease_id.to_string())
    } else {
        j.lease.as_ref().map(|l| l.0.clone())
    };
    j.state = state;
    j.lease = None;
    j.outcome = Some(outcome.to_string());
    j.prov = Some(prov.to_string());
    j.prov_runner = Some(runner.to_string());
    j.updated_at = now;
    let record = j.to_json();
    model.cancels.retain(|c| c != id);
    if state == JobState::Ok {
        for k in 0..model.jobs.len() {
            let d = &model.jobs[k];
            if d.claimable_at.is_some() || !d.deps.iter().any(|x| x == id) {
                continue;
            }
            if d.deps.iter().all(|x| model.is_ok(x)) {
                let d = &mut model.jobs[k];
                d.claimable_at = Some(now);
                d.updated_at = now;
            }
        }
    }
    (true, false, Some(record))
}

#[test]
#[ignore = "a measurement, not a check: cargo test --release -- --ignored --nocapture footprint"]
fn footprint() {
    fn rss() -> usize {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .nth(1)
                    .and_then(|p| p.parse::<usize>().ok())
            })
            .map_or(0, |pages| pages * 4096)
    }
    let n = 100_000;
    let cts: Vec<String> = (0..n)
        .map(|i| {
            let bytes: Vec<u8> = (0..1876u32).map(|b| (b as u8) ^ (i as u8)).collect();
            URL_SAFE_NO_PAD.encode(bytes)
        })
        .collect();
    let ids: Vec<String> = (0..n)
        .map(|i| format!("{:08x}-0000-4000-8000-{:012x}", i, i))
        .collect();
    let before = rss();
    let mut store = Store::default();
    for i in 0..n {
        let owner = format!("owner-{}", i % 1000);
        store.create(
            JobInput {
                envelope: EnvelopeInput::Sealed {
                    ciphertext: &cts[i],
                    recipient_key_id: "site",
                    sender_key_id: "site",
                    direction: "payload",
                    deadline_at: 5000.0,
                },
                ttl_ms: Some(1e12),
                ..input(&ids[i], &owner)
            },
            0.0,
        );
    }
    let after = rss();
    eprintln!("footprint: {} bytes per job", (after - before) / n);
}

#[test]
fn a_view_tells_the_sealed_ciphertext_length_without_encoding_it() {
    let mut store = Store::new(StoreOptions::default());
    let texts: Vec<String> = (0..12usize)
        .map(|n| URL_SAFE_NO_PAD.encode((0..n).map(|b| b as u8).collect::<Vec<u8>>()))
        .chain(["not base64url!".to_string()])
        .collect();
    for (at, text) in texts.iter().enumerate() {
        let id = format!("job-{at}");
        let mut job = input(&id, "bob");
        job.envelope = EnvelopeInput::Sealed {
            ciphertext: text,
            recipient_key_id: "site",
            sender_key_id: "site",
            direction: "payload",
            deadline_at: 5000.0,
        };
        let r = store.create(job, 1.0);
        let view = store.view(r).expect("a live job has a view");
        assert_eq!(view.sealed_ciphertext_chars, Some(text.len()), "{text:?}");
        let mut written = String::new();
        store.sealed_envelope_parts(r, &mut written);
        assert_eq!(&written, text);
    }
    let mut raw = input("raw", "bob");
    raw.envelope = EnvelopeInput::Raw("{\"custom\":1}");
    let r = store.create(raw, 1.0);
    assert_eq!(store.view(r).map(|v| v.sealed_ciphertext_chars), Some(None));
}

#[test]
fn the_result_view_holds_state_outcome_and_provenance_only() {
    let mut store = Store::new(StoreOptions::default());
    let a = store.create(input("a", "bob"), 1.0);
    let view = |store: &Store, r: JobRef| {
        let mut out = String::new();
        store.push_result_json(r, &mut out);
        out
    };
    assert_eq!(view(&store, a), r#"{"jobId":"a","state":"queued"}"#);
    let caps = [cap("llm.generate", "ollama", "private")];
    let claimed = store.claim(&claim_args("r", "bob", &caps, 2.0));
    let lease = store
        .view(claimed[0])
        .and_then(|j| j.lease)
        .map(|l| l.id.to_string())
        .unwrap_or_default();
    let done = store.complete(&CompleteArgs {
        job_id: "a",
        runner_id: "r",
        holder: Holder::Lease(&lease),
        outcome_tag: "ok",
        outcome_json: r#"{"outcome":"ok","text":"t"}"#,
        provenance_json: r#"{"runnerId":"r"}"#,
        provenance_runner: Some("r"),
        now: 3.0,
    });
    assert!(done.accepted);
    assert_eq!(
        view(&store, a),
        r#"{"jobId":"a","state":"ok","outcome":{"outcome":"ok","text":"t"},"provenance":{"runnerId":"r"}}"#
    );
    // An outcome given as `null` reads as none, as the app leaves out a null.
    let b = store.create(input("b", "bob"), 1.0);
    store.claim(&claim_args("r", "bob", &caps, 4.0));
    let lease = store
        .view(b)
        .and_then(|j| j.lease)
        .map(|l| l.id.to_string())
        .unwrap_or_default();
    store.complete(&CompleteArgs {
        job_id: "b",
        runner_id: "r",
        holder: Holder::Lease(&lease),
        outcome_tag: "",
        outcome_json: "null",
        provenance_json: "null",
        provenance_runner: None,
        now: 5.0,
    });
    assert_eq!(view(&store, b), r#"{"jobId":"b","state":"error"}"#);
}

fn start(people: &mut PairingStore, hash: &str, source: &str, now: f64) -> bool {
    let json =
        serde_json::to_string(&pending(hash, hash, now, now + 600_000.0)).unwrap_or_default();
    people.start_pairing_json(json, source, now)
}

#[test]
fn a_source_past_its_share_is_refused_and_evicts_nothing() {
    use crate::store::people::SOURCE_SHARE;
    let mut people = PairingStore::default();
    assert!(start(&mut people, "person", "home", 0.0));
    for i in 0..SOURCE_SHARE {
        assert!(start(&mut people, &format!("f{i}"), "flood", 1.0));
    }
    for i in 0..100_000 {
        assert!(!start(&mut people, &format!("x{i}"), "flood", 2.0));
    }
    assert_eq!(people.source_holds("flood"), SOURCE_SHARE);
    assert_eq!(people.pairing_footprint().0, SOURCE_SHARE + 1);
    assert!(people.approve("person", "alice", "r1", 3.0).is_ok());
    // An approval is no longer held against its source.
    assert_eq!(people.source_holds("home"), 0);
    // Once its pairings are past pruning, the source may start again.
    assert!(start(
        &mut people,
        "later",
        "flood",
        600_001.0 + PAIRING_GRACE_MS
    ));
    assert_eq!(people.source_holds("flood"), 1);
}

#[test]
fn a_full_store_refuses_rather_than_drop_a_pairing_held_within_its_share() {
    use crate::store::people::{MAX_PAIRINGS, SOURCE_SHARE};
    let mut people = PairingStore::default();
    // An app's own pairing (no source) is the one dropped first.
    people.create_pairing(pending("app", "APP", 0.0, 600_000.0));
    let sources = MAX_PAIRINGS / SOURCE_SHARE;
    let mut started = Vec::new();
    for s in 0..sources * 2 {
        for i in 0..SOURCE_SHARE {
            let hash = format!("s{s}p{i}");
            if start(&mut people, &hash, &format!("src{s}"), 1.0) {
                started.push(hash);
            }
        }
    }
    assert_eq!(started.len(), MAX_PAIRINGS);
    assert_eq!(people.pairing_footprint().0, MAX_PAIRINGS);
    assert!(people.pairing_by_hash("app").is_none());
    for hash in &started {
        assert!(people.pairing_by_hash(hash).is_some(), "{hash} was dropped");
    }
}

#[test]
fn sources_survive_a_rewrite_and_a_removal() {
    let mut people = PairingStore::default();
    assert!(start(&mut people, "a", "s", 0.0));
    assert!(start(&mut people, "b", "s", 0.0));
    people.deny("a");
    assert_eq!(people.source_holds("s"), 1);
    people.prune(600_000.0 + PAIRING_GRACE_MS + 1.0);
    assert_eq!(people.source_holds("s"), 0);
    assert_eq!(people.pairing_footprint().0, 0);
}

#[test]
fn a_full_store_drops_a_pairing_that_is_over_before_refusing() {
    use crate::store::people::{MAX_PAIRINGS, SOURCE_SHARE};
    let mut people = PairingStore::default();
    assert!(start(&mut people, "denied", "s0", 0.0));
    people.deny("denied");
    let mut n = 1;
    let mut s = 1;
    while n < MAX_PAIRINGS {
        for i in 0..SOURCE_SHARE.min(MAX_PAIRINGS - n) {
            assert!(start(
                &mut people,
                &format!("s{s}p{i}"),
                &format!("s{s}"),
                1.0
            ));
            n += 1;
        }
        s += 1;
    }
    assert!(start(&mut people, "newcomer", "fresh", 2.0));
    assert!(people.pairing_by_hash("denied").is_none());
    assert!(!start(&mut people, "refused", "fresher", 2.0));
}
