//! The engine, driven as each shell drives it: on our own store in place,
//! and step by step with canned store answers, as the TypeScript shell feeds
//! a JavaScript or SQL store's.

use super::rules::LIVENESS_SLACK_MS;
use super::*;
use crate::envelope::{self, Text};
use crate::json;
use crate::keys::StoredKeys;
use crate::payload::{seal_at_rest, AtRestSeal};
use crate::store::{JobInput, Store, StoreOptions};

const NOW: f64 = 1_764_500_000_000.0;

/// A daemon's ordinary claim body, as runner `r1`.
const CLAIM: &str = r#"{"protocolVersion":"2","runnerId":"r1","capabilities":[{"kind":"llm.generate","service":"s","backendId":"ollama","backendClass":"http","model":"m","offerScope":"private"}],"max":1}"#;

fn handle(seed: u8) -> KeyHandle {
    match KeyHandle::new(StoredKeys::from_secrets(
        &[seed; 32],
        &[seed.wrapping_add(1); 32],
        1,
    )) {
        Ok(h) => h,
        Err(e) => panic!("keys: {e}"),
    }
}

fn site_of(keys: &Arc<KeyHandle>) -> Arc<Site> {
    Arc::new(Site::new(
        Arc::clone(keys),
        Settings {
            lease_ms: 60_000.0,
            pairing_ttl_ms: 600_000.0,
            poll_interval_ms: 2_000.0,
            verification_url: "https://app.example/pair".into(),
            metrics: None,
        },
    ))
}

/// A store with runner `r1` (owner bob, paired with `device`) and one job
/// for bob, sealed at rest by `site` (now, or `deferred` as our enqueue does).
struct Fixture {
    store: Store,
    keys: Arc<KeyHandle>,
    site: Arc<Site>,
    device: KeyHandle,
}

fn fixture_with(deferred: bool) -> Fixture {
    let (keys, device) = (Arc::new(handle(1)), handle(7));
    let mut store = Store::new(StoreOptions::default());
    store.set_omit_envelopes(deferred);
    let identity = device.public_identity();
    let pairing = serde_json::json!({
        "deviceCodeHash": "h", "userCode": "CODE", "state": "pending",
        "device": {"identity": identity.identity, "encryption": identity.encryption, "encryptionSig": identity.encryption_sig},
    });
    assert!(store.people.create_pairing_json(pairing.to_string()));
    assert!(store.people.approve("CODE", "bob", "r1", NOW).is_ok());
    let deadline_at = NOW + envelope::ENVELOPE_MAX_AGE_MS;
    let at_rest = if deferred {
        seal_at_rest(
            &keys,
            &store,
            "{\"prompt\":\"hi\"}".into(),
            "job-1",
            deadline_at,
        )
    } else {
        envelope::seal_with_handle(
            Text::Utf8("{\"prompt\":\"hi\"}"),
            &keys,
            &keys.keys().encryption_public,
            &payload::at_rest_context(&keys, "job-1", deadline_at),
        )
        .map(AtRestSeal::Sealed)
    };
    let at_rest = at_rest.unwrap_or_else(|e| panic!("seal: {e}"));
    assert_eq!(matches!(at_rest, AtRestSeal::Deferred(_)), deferred);
    store.create(
        JobInput {
            id: "job-1",
            kind: "llm.generate",
            envelope: at_rest.as_input(),
            size_class: "small",
            owner: "bob",
            audience: None,
            purpose_json: None,
            audience_allow: None,
            depends_on: None,
            ttl_ms: None,
            deadline_at: None,
        },
        NOW - 1_000.0,
    );
    let site = site_of(&keys);
    Fixture {
        store,
        keys,
        site,
        device,
    }
}

fn signed(by: &KeyHandle, endpoint: Endpoint, body: &str, issued_at: f64) -> RequestSignature {
    signing::sign_request(by, endpoint.as_str(), "r1", issued_at, body)
}

fn request(endpoint: Endpoint, body: &str, signature: Option<RequestSignature>) -> Request {
    Request {
        endpoint,
        body: Some(body.to_owned()),
        signed: None,
        signature,
        mode: Mode::Http,
        now: NOW,
        rereads: false,
        source: None,
    }
}

/// Run a machine to its answer on our store, heavy work inline.
fn drive(machine: &mut Machine, store: &mut Store) -> Answer {
    loop {
        let got = match machine.step() {
            Step::Answer(answer) => return answer.clone(),
            Step::Store(op) => Got::Store(native::run(store, op)),
            Step::Urls(urls) => Got::Urls(urls.iter().map(|u| wire::basic_url_ok(u)).collect()),
            Step::Work => match machine.take_work() {
                Some(work) => Got::Work(work.run()),
                None => panic!("work asked for and not there"),
            },
        };
        machine.resume(got);
    }
}

fn serve(fx: &mut Fixture, endpoint: Endpoint, body: &str) -> Answer {
    let sig = signed(&fx.device, endpoint, body, NOW);
    let mut machine = Machine::start(Arc::clone(&fx.site), request(endpoint, body, Some(sig)));
    drive(&mut machine, &mut fx.store)
}

fn all_jobs(store: &Store) -> String {
    store.jobs_json(&store.all_jobs())
}

fn lease_id(store: &Store) -> String {
    match store
        .view(store.get("job-1").expect("stored"))
        .and_then(|j| j.lease)
    {
        Some(lease) => lease.id.to_string(),
        None => panic!("no lease"),
    }
}

fn result_body(fx: &Fixture, lease_id: &str, outcome: &str, disposition: &str) -> String {
    let context = envelope::Context {
        job_id: "job-1".into(),
        sender_key_id: fx.device.key_id().into(),
        recipient_key_id: fx.keys.key_id().into(),
        deadline_at: NOW + 1.0,
        direction: "result".into(),
    };
    let sealed = envelope::seal_with_handle(
        Text::Utf8(outcome),
        &fx.device,
        &fx.keys.keys().encryption_public,
        &context,
    )
    .expect("seal");
    format!(
        r#"{{"protocolVersion":"2","runnerId":"r1","jobId":"job-1","leaseId":"{lease_id}","envelope":{{"ciphertext":"{}","recipientKeyId":"{}","senderKeyId":"{}","direction":"result","deadlineAt":{}}},"disposition":"{disposition}"}}"#,
        sealed.ciphertext,
        sealed.recipient_key_id,
        sealed.sender_key_id,
        NOW + 1.0,
    )
}

const OUTCOME: &str = r#"{"outcome":{"outcome":"ok","text":"done"},"ran":{"model":"m","backendClass":"http","durationMs":4,"stop":"end"}}"#;

#[test]
fn a_signed_claim_fetch_and_result_are_served_end_to_end() {
    claim_fetch_result(false);
}

#[test]
fn the_same_for_a_payload_whose_seal_at_rest_is_deferred() {
    claim_fetch_result(true);
}

fn claim_fetch_result(deferred: bool) {
    let mut fx = fixture_with(deferred);
    let answer = serve(&mut fx, Endpoint::Claim, CLAIM);
    let lease_id = lease_id(&fx.store);
    let expected = format!(
        r#"{{"jobs":[{{"id":"job-1","kind":"llm.generate","audience":"private","owner":"bob","site":"{}","sizeClass":"small","streaming":false,"deadlineAt":{},"lease":{{"id":"{lease_id}","runnerId":"r1","expiresAt":{}}}}}],"leaseMs":60000}}"#,
        fx.keys.key_id(),
        NOW - 1_000.0 + 900_000.0,
        NOW + 60_000.0,
    );
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, expected.as_str())
    );

    let fetch = format!(
        r#"{{"protocolVersion":"2","runnerId":"r1","jobId":"job-1","leaseId":"{lease_id}"}}"#
    );
    let answer = serve(&mut fx, Endpoint::Fetch, &fetch);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let doc = json::parse(&answer.body).expect("the answer is JSON");
    let env = doc.get(doc.root(), "envelope").expect("an envelope");
    let text = |key: &str| {
        doc.str(doc.get(env, key).expect(key))
            .expect(key)
            .as_str()
            .to_string()
    };
    let for_device = SealedEnvelope {
        ciphertext: text("ciphertext"),
        recipient_key_id: text("recipientKeyId"),
        sender_key_id: text("senderKeyId"),
        direction: text("direction"),
        deadline_at: NOW - 1_000.0 + envelope::ENVELOPE_MAX_AGE_MS,
    };
    let expected = envelope::Expected {
        job_id: "job-1".into(),
        sender_key_id: fx.keys.key_id().into(),
        recipient_key_id: fx.device.key_id().into(),
        direction: "payload".into(),
    };
    let opened =
        envelope::open_with_handle(&for_device, &fx.device, fx.keys.identity_key(), &expected);
    assert_eq!(
        opened.map(|t| t.into_string()),
        Ok("{\"prompt\":\"hi\"}".to_string())
    );

    let result = result_body(&fx, &lease_id, OUTCOME, "ok");
    let answer = serve(&mut fx, Endpoint::Result, &result);
    assert_eq!(answer.body, r#"{"accepted":true,"state":"ok"}"#);
    let record = all_jobs(&fx.store);
    assert!(
        record.contains(r#"{"outcome":"ok","text":"done"}"#),
        "{record}"
    );
    assert!(
        record.contains(r#"{"audience":"private","runnerId":"r1","runnerOwner":"bob","backendClass":"http","model":"m","untrusted":false,"stop":"end"}"#),
        "{record}"
    );
    let replay = serve(&mut fx, Endpoint::Result, &result);
    assert_eq!(
        replay.body, r#"{"accepted":false,"duplicate":true,"state":"ok"}"#,
        "a replay"
    );
}

#[test]
fn a_deferred_seal_once_made_is_kept_compact_from_the_next_write() {
    let mut fx = fixture_with(true);
    let r = fx.store.get("job-1").expect("stored");
    let Some(deferred) = fx.store.deferred_seal(r).cloned() else {
        panic!("the enqueue did not defer");
    };
    deferred.seal_now();
    let mut made = String::new();
    assert!(fx.store.sealed_envelope_parts(r, &mut made).is_some());
    assert_eq!(serve(&mut fx, Endpoint::Claim, CLAIM).status, 200);
    assert!(
        fx.store.deferred_seal(r).is_none(),
        "still deferred after a write"
    );
    let mut again = String::new();
    assert!(fx.store.sealed_envelope_parts(r, &mut again).is_some());
    assert_eq!(again, made, "another envelope after settling");
    assert!(
        all_jobs(&fx.store).contains(&made),
        "a small sealed envelope rides in its record"
    );
}

#[test]
fn refusals_are_answered_in_the_order_the_protocol_gives_and_change_nothing() {
    let mut fx = fixture_with(false);
    let stranger = handle(42);
    let before = all_jobs(&fx.store);
    let refused =
        |fx: &mut Fixture, sig: Option<RequestSignature>, body: &str, endpoint: Endpoint| {
            let mut machine = Machine::start(Arc::clone(&fx.site), request(endpoint, body, sig));
            drive(&mut machine, &mut fx.store)
        };
    let good = signed(&fx.device, Endpoint::Claim, CLAIM, NOW);
    type Case<'a> = (
        &'a str,
        Option<RequestSignature>,
        String,
        Endpoint,
        u16,
        &'a str,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "no signature",
            None,
            CLAIM.into(),
            Endpoint::Claim,
            401,
            NOT_SIGNED,
        ),
        (
            "forged",
            Some(signed(&stranger, Endpoint::Claim, CLAIM, NOW)),
            CLAIM.into(),
            Endpoint::Claim,
            401,
            BAD_SIGNATURE,
        ),
        (
            "stale",
            Some(signed(&fx.device, Endpoint::Claim, CLAIM, NOW - 600_000.0)),
            CLAIM.into(),
            Endpoint::Claim,
            401,
            BAD_SIGNATURE,
        ),
        (
            "a fractional timestamp, signed as such",
            Some(signed(&fx.device, Endpoint::Claim, CLAIM, NOW + 0.5)),
            CLAIM.into(),
            Endpoint::Claim,
            401,
            NOT_SIGNED,
        ),
        (
            "unknown runner",
            Some(RequestSignature {
                runner_id: "r9".into(),
                ..good.clone()
            }),
            CLAIM.into(),
            Endpoint::Claim,
            401,
            NOT_RECOGNISED,
        ),
        (
            "signed for another endpoint",
            Some(good.clone()),
            CLAIM.into(),
            Endpoint::Fetch,
            401,
            BAD_SIGNATURE,
        ),
        (
            "schema failure, after the signature",
            Some(signed(
                &fx.device,
                Endpoint::Claim,
                "{\"protocolVersion\":\"2\"}",
                NOW,
            )),
            "{\"protocolVersion\":\"2\"}".into(),
            Endpoint::Claim,
            400,
            "request body failed schema validation",
        ),
        (
            "another runner in the body",
            Some(signed(
                &fx.device,
                Endpoint::Claim,
                &CLAIM.replace("\"r1\"", "\"r2\""),
                NOW,
            )),
            CLAIM.replace("\"r1\"", "\"r2\""),
            Endpoint::Claim,
            401,
            OTHER_RUNNER,
        ),
    ];
    for (name, sig, body, endpoint, status, message) in cases {
        let answer = refused(&mut fx, sig, &body, endpoint);
        assert_eq!(answer.status, status, "{name}: {}", answer.body);
        assert!(answer.body.contains(message), "{name}: {}", answer.body);
        assert_eq!(all_jobs(&fx.store), before, "{name}: nothing changed");
    }
    // From HTTP, JSON and version failures are answered before the signature.
    let answer = refused(&mut fx, None, "{nope", Endpoint::Claim);
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (
            400,
            r#"{"error":"bad-request","message":"request body is not valid JSON"}"#
        )
    );
    // A valid body in another key order is served all the same.
    let reordered = CLAIM.replace(
        r#""protocolVersion":"2","runnerId":"r1""#,
        r#""runnerId":"r1","protocolVersion":"2""#,
    );
    assert_eq!(serve(&mut fx, Endpoint::Claim, &reordered).status, 200);
    fx.store.people.revoke("r1", NOW);
    let answer = serve(&mut fx, Endpoint::Claim, CLAIM);
    assert_eq!(answer.status, 403, "{}", answer.body);
}

// ---------------------------------------------------------------- step by step

/// A machine fed canned store answers: each expected op's name, and the JSON
/// the store gives; the answer at the end.
fn script(req: Request, site: &Arc<Site>, steps: &[(&str, &str)]) -> (Answer, Vec<String>) {
    let mut machine = Machine::start(Arc::clone(site), req);
    let mut args = Vec::new();
    for (name, output) in steps {
        let got = match machine.step() {
            Step::Store(op) => {
                assert_eq!(op.name(), *name, "asked for");
                args.push(op.args_json());
                Got::Store(op.output_from_json(output))
            }
            Step::Answer(a) => panic!("answered before `{name}`: {}", a.body),
            _ => panic!("asked for something else before `{name}`"),
        };
        machine.resume(got);
    }
    match machine.step() {
        Step::Answer(answer) => (answer.clone(), args),
        Step::Store(op) => panic!("asked for `{}` after the script", op.name()),
        _ => panic!("not answered after the script"),
    }
}

fn runner_json(device: &KeyHandle, revoked: &str) -> String {
    let identity = device.public_identity();
    format!(
        r#"{{"id":"r1","owner":"bob","label":"l","device":{{"identity":"{}","encryption":"{}","encryptionSig":"{}"}},"revokedAt":{revoked}}}"#,
        identity.identity, identity.encryption, identity.encryption_sig
    )
}

#[test]
fn a_js_store_is_asked_for_one_operation_at_a_time_with_its_methods_arguments() {
    let fx = fixture_with(false);
    let runner = runner_json(&fx.device, "null");
    let sig = signed(&fx.device, Endpoint::Claim, CLAIM, NOW);
    let job = r#"{"id":"job-1","kind":"llm.generate","envelope":{},"sizeClass":"small","audience":"private","owner":"bob","dependsOn":[],"state":"claimed","lease":{"id":"L","runnerId":"r1","expiresAt":1764500060000},"createdAt":1,"claimableAt":1,"ttlMs":10,"deadlineAt":null}"#;
    let (answer, args) = script(
        request(Endpoint::Claim, CLAIM, Some(sig)),
        &fx.site,
        &[
            ("runner", &runner),
            ("claim", &format!(r#"{{"jobs":[{job}]}}"#)),
        ],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer
            .body
            .contains(r#""lease":{"id":"L","runnerId":"r1","expiresAt":1764500060000}"#),
        "{}",
        answer.body
    );
    assert_eq!(args[0], r#"{"runnerId":"r1"}"#);
    assert_eq!(
        args[1],
        r#"{"runnerId":"r1","runnerOwner":"bob","capabilities":[{"kind":"llm.generate","service":"s","backendId":"ollama","backendClass":"http","model":"m","offerScope":"private"}],"max":1,"leaseMs":60000,"now":1764500000000}"#
    );
}

#[test]
fn a_store_that_fails_or_answers_nonsense_gives_a_server_error_with_its_cause() {
    let fx = fixture_with(false);
    let runner = runner_json(&fx.device, "null");
    let claim = || {
        request(
            Endpoint::Claim,
            CLAIM,
            Some(signed(&fx.device, Endpoint::Claim, CLAIM, NOW)),
        )
    };
    for (name, output) in [
        ("not JSON", "{nope"),
        (
            "a claimed job without a lease",
            r#"{"jobs":[{"id":"j","kind":"k","audience":"private","owner":"o","sizeClass":"small","ttlMs":1}]}"#,
        ),
        (
            "a job with a number for its id",
            r#"{"jobs":[{"id":7,"kind":"k","audience":"private","owner":"o","sizeClass":"small","ttlMs":1}]}"#,
        ),
        ("not a list of jobs", r#"{"jobs":7}"#),
    ] {
        let (answer, _) = script(claim(), &fx.site, &[("runner", &runner), ("claim", output)]);
        assert_eq!(answer.status, 500, "{name}");
        assert_eq!(
            answer.body,
            r#"{"error":"server-error","message":"the site's store failed; try again later"}"#,
            "{name}"
        );
        assert!(
            answer.cause.is_some(),
            "{name}: the cause is kept for the log"
        );
    }
    // A throw (the shell's `fail`).
    let mut machine = Machine::start(Arc::clone(&fx.site), claim());
    machine.resume(Got::Store(Err(Fault::Store("connection reset".into()))));
    let answer = machine.answer().cloned().expect("answered");
    assert_eq!(
        (answer.status, answer.cause.as_deref()),
        (500, Some("connection reset"))
    );
    // Handed something it did not ask for.
    let mut machine = Machine::start(Arc::clone(&fx.site), claim());
    machine.resume(Got::Urls(vec![]));
    assert_eq!(machine.answer().map(|a| a.status), Some(500));
}

#[test]
fn with_a_store_that_rereads_the_runner_a_verified_identity_skips_the_read() {
    let fx = fixture_with(false);
    let site = site_of(&fx.keys);
    let runner = runner_json(&fx.device, "null");
    let claim = || Request {
        rereads: true,
        source: None,
        ..request(
            Endpoint::Claim,
            CLAIM,
            Some(signed(&fx.device, Endpoint::Claim, CLAIM, NOW)),
        )
    };
    let fresh = r#"{"runner":{"id":"r1","revokedAt":null},"jobs":[]}"#;
    let (first, _) = script(claim(), &site, &[("runner", &runner), ("claim", fresh)]);
    assert_eq!(first.body, r#"{"jobs":[],"leaseMs":60000}"#);
    let (second, _) = script(claim(), &site, &[("claim", fresh)]);
    assert_eq!(second.status, 200);
    // Revoked since: the work's own read refuses it, and it is read again next time.
    let (revoked, _) = script(
        claim(),
        &site,
        &[("claim", r#"{"runner":{"revokedAt":5},"jobs":[]}"#)],
    );
    assert_eq!(revoked.status, 403);
    let (gone, _) = script(claim(), &site, &[("runner", "null")]);
    assert_eq!(gone.status, 401);
    // A store that did no work for an unknown or revoked runner answers only
    // the runner (a SQL heartbeat does): the refusal, not a store failure.
    let beat = r#"{"protocolVersion":"2","runnerId":"r1","daemonVersion":"1","capabilities":[],"activeLeases":[]}"#;
    let heartbeat = || Request {
        rereads: true,
        source: None,
        ..request(
            Endpoint::Heartbeat,
            beat,
            Some(signed(&fx.device, Endpoint::Heartbeat, beat, NOW)),
        )
    };
    let (_, _) = script(
        heartbeat(),
        &site,
        &[
            ("runner", &runner),
            (
                "heartbeat",
                r#"{"runner":{"revokedAt":null},"lost":[],"cancel":[]}"#,
            ),
        ],
    );
    let (revoked, _) = script(
        heartbeat(),
        &site,
        &[("heartbeat", r#"{"runner":{"revokedAt":5}}"#)],
    );
    assert_eq!(revoked.status, 403, "{}", revoked.body);
    let (_, _) = script(
        heartbeat(),
        &site,
        &[
            ("runner", &runner),
            (
                "heartbeat",
                r#"{"runner":{"revokedAt":null},"lost":[],"cancel":[]}"#,
            ),
        ],
    );
    let (unknown, _) = script(heartbeat(), &site, &[("heartbeat", r#"{"runner":null}"#)]);
    assert_eq!(unknown.status, 401, "{}", unknown.body);
    // A forged request is refused against the remembered identity, with no read.
    let (_, _) = script(claim(), &site, &[("runner", &runner), ("claim", fresh)]);
    let forged = Request {
        rereads: true,
        source: None,
        ..request(
            Endpoint::Claim,
            CLAIM,
            Some(signed(&handle(9), Endpoint::Claim, CLAIM, NOW)),
        )
    };
    let (answer, _) = script(forged, &site, &[]);
    assert_eq!(answer.status, 401);
}

fn pair_start_body(device: &KeyHandle) -> String {
    let identity = device.public_identity();
    format!(
        r#"{{"protocolVersion":"2","action":"start","daemon":{{"version":"0.1.1","label":"l","platform":"linux"}},"device":{{"identity":"{}","encryption":"{}","encryptionSig":"{}"}},"capabilities":[]}}"#,
        identity.identity, identity.encryption, identity.encryption_sig
    )
}

#[test]
fn pair_start_draws_a_code_no_live_pairing_holds_and_gives_up_after_eight() {
    let fx = fixture_with(false);
    let body = pair_start_body(&fx.device);
    let held = format!(r#"{{"state":"pending","expiresAt":{}}}"#, NOW + 1.0);
    let lapsed = format!(r#"{{"state":"pending","expiresAt":{NOW}}}"#);
    let (answer, args) = script(
        request(Endpoint::Pair, &body, None),
        &fx.site,
        &[
            ("pairingByCode", &held),
            ("pairingByCode", &lapsed),
            ("createPairing", "null"),
        ],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let code = |args: &str| {
        args.trim_start_matches(r#"{"userCode":""#)
            .trim_end_matches(r#""}"#)
            .to_owned()
    };
    assert!(
        answer.body.contains(&code(&args[1])),
        "the lapsed pairing's code is free"
    );
    assert!(
        args[2].starts_with(r#"{"pairing":{"deviceCodeHash":""#),
        "{}",
        args[2]
    );
    assert!(args[2].contains(&format!(r#","userCode":"{}","state":"pending","owner":null,"runnerId":null,"collected":false,"label":"l","platform":"linux","daemonVersion":"0.1.1","capabilities":[],"device":"#, code(&args[1]))), "{}", args[2]);
    let all_held: Vec<(&str, &str)> = (0..USER_CODE_DRAWS)
        .map(|_| ("pairingByCode", held.as_str()))
        .collect();
    let (answer, _) = script(request(Endpoint::Pair, &body, None), &fx.site, &all_held);
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (
            500,
            r#"{"error":"server-error","message":"no free pairing code was found; try again"}"#
        )
    );
}

#[test]
fn pair_poll_answers_each_state_and_hands_out_an_approval_once() {
    let fx = fixture_with(false);
    let body = r#"{"protocolVersion":"2","action":"poll","deviceCode":"dc-0123456789abcdefghij"}"#;
    let poll =
        |steps: &[(&str, &str)]| script(request(Endpoint::Pair, body, None), &fx.site, steps).0;
    assert_eq!(poll(&[("pairingByHash", "null")]).status, 404);
    assert_eq!(
        poll(&[("pairingByHash", r#"{"state":"denied","expiresAt":1}"#)]).body,
        r#"{"status":"denied"}"#
    );
    assert_eq!(
        poll(&[(
            "pairingByHash",
            &format!(r#"{{"state":"pending","expiresAt":{NOW}}}"#)
        )])
        .body,
        r#"{"status":"expired"}"#
    );
    assert_eq!(
        poll(&[(
            "pairingByHash",
            &format!(r#"{{"state":"pending","expiresAt":{}}}"#, NOW + 1.0)
        )])
        .body,
        r#"{"status":"pending"}"#
    );
    let approved =
        r#"{"state":"approved","expiresAt":1,"collected":false,"runnerId":"r1","owner":"bob"}"#;
    let answer = poll(&[("pairingByHash", approved), ("consumePairing", "null")]);
    assert!(
        answer
            .body
            .starts_with(r#"{"status":"approved","runnerId":"r1","owner":"bob","sites":{""#),
        "{}",
        answer.body
    );
    let collected =
        r#"{"state":"approved","expiresAt":1,"collected":true,"runnerId":"r1","owner":"bob"}"#;
    assert_eq!(poll(&[("pairingByHash", collected)]).status, 404);
}

#[test]
fn a_release_cancels_the_released_jobs_the_owner_asked_to_stop() {
    let fx = fixture_with(false);
    let body = r#"{"protocolVersion":"2","runnerId":"r1","leases":[{"jobId":"a","leaseId":"1"},{"jobId":"b","leaseId":"2"}],"reason":"shutdown"}"#;
    let sig = signed(&fx.device, Endpoint::Release, body, NOW);
    let runner = runner_json(&fx.device, "null");
    let (answer, args) = script(
        request(Endpoint::Release, body, Some(sig)),
        &fx.site,
        &[
            ("runner", &runner),
            (
                "cancelRequests",
                r#"[{"jobId":"b","leaseId":"2"},{"jobId":"c","leaseId":"3"}]"#,
            ),
            ("release", r#"["a","b"]"#),
            ("cancel", "null"),
        ],
    );
    assert_eq!(answer.body, r#"{"released":["a","b"]}"#);
    assert_eq!(args[3], format!(r#"{{"jobIds":["b"],"now":{NOW}}}"#));
}

#[test]
fn from_handle_any_failure_of_the_body_is_its_schemas_after_the_signature() {
    let fx = fixture_with(false);
    let runner = runner_json(&fx.device, "null");
    let sig = signed(&fx.device, Endpoint::Claim, CLAIM, NOW);
    let req = Request {
        body: Some(CLAIM.replace("\"2\"", "\"1\"")),
        signed: Some(("claim".into(), CLAIM.into())),
        mode: Mode::Handle,
        ..request(Endpoint::Claim, CLAIM, Some(sig))
    };
    let (answer, _) = script(req, &fx.site, &[("runner", &runner)]);
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (
            400,
            r#"{"error":"bad-request","message":"request body failed schema validation"}"#
        )
    );
}

#[test]
fn every_request_asks_for_a_bounded_number_of_operations() {
    // A store that answers every read with "not there" and every write with
    // nothing: no request asks for more than MAX_OPS, whatever the endpoint.
    let fx = fixture_with(false);
    let runner = runner_json(&fx.device, "null");
    let bodies = [
        (Endpoint::Pair, pair_start_body(&fx.device)),
        (Endpoint::Claim, CLAIM.to_owned()),
        (
            Endpoint::Release,
            r#"{"protocolVersion":"2","runnerId":"r1","leases":[],"reason":"pause"}"#.to_owned(),
        ),
    ];
    for (endpoint, body) in bodies {
        let sig = signed(&fx.device, endpoint, &body, NOW);
        let mut machine = Machine::start(Arc::clone(&fx.site), request(endpoint, &body, Some(sig)));
        let mut ops = 0;
        while let Step::Store(op) = machine.step() {
            ops += 1;
            let output = match op.name() {
                "runner" => runner.clone(),
                "pairingByCode" => format!(r#"{{"state":"pending","expiresAt":{}}}"#, NOW + 1.0),
                "claim" => r#"{"jobs":[]}"#.into(),
                "cancelRequests" | "release" => "[]".into(),
                _ => "null".into(),
            };
            let got = Got::Store(op.output_from_json(&output));
            machine.resume(got);
        }
        assert!(ops <= MAX_OPS, "{endpoint:?}: {ops}");
        assert!(machine.answer().is_some());
    }
}

// ---------------------------------------------------------------- the idle memo

const BEAT: &str = r#"{"protocolVersion":"2","runnerId":"r1","daemonVersion":"0.1.1","capabilities":[],"activeLeases":[]}"#;
const TEAM_CLAIM: &str = r#"{"protocolVersion":"2","runnerId":"r1","capabilities":[{"kind":"llm.generate","service":"s","backendId":"ollama","backendClass":"http","model":"m","offerScope":"team"}],"max":1}"#;
const LIVE: &str = r#"{"id":"r1","revokedAt":null}"#;

/// A SQL store's request (it re-reads the runner with the work) at `now`.
fn sql(fx: &Fixture, endpoint: Endpoint, body: &str, now: f64) -> Request {
    Request {
        rereads: true,
        now,
        ..request(
            endpoint,
            body,
            Some(signed(&fx.device, endpoint, body, now)),
        )
    }
}

/// A SQL store's empty claim, with `wakeAt`.
fn empty_claim(wake_at: &str) -> String {
    format!(r#"{{"runner":{LIVE},"jobs":[],"wakeAt":{wake_at}}}"#)
}

/// A SQL store's quiet heartbeat, with `seenAt`.
fn quiet_beat(seen_at: f64) -> String {
    format!(r#"{{"runner":{LIVE},"lost":[],"cancel":[],"seenAt":{seen_at}}}"#)
}

/// A site whose channel is healthy, with `r1` verified and its empty claim
/// and quiet heartbeat remembered (liveness written at `NOW`).
fn idle_site(fx: &Fixture, claim: &str) -> Arc<Site> {
    let site = site_of(&fx.keys);
    site.idle_health(true);
    let runner = runner_json(&fx.device, "null");
    let (first, _) = script(
        sql(fx, Endpoint::Claim, claim, NOW),
        &site,
        &[("runner", &runner), ("claim", &empty_claim("null"))],
    );
    assert_eq!(first.status, 200);
    script(
        sql(fx, Endpoint::Heartbeat, BEAT, NOW),
        &site,
        &[("heartbeat", &quiet_beat(NOW))],
    );
    site
}

/// Whether the request is answered with no store operation (else it asks for `op`).
fn skipped(site: &Arc<Site>, req: Request) -> bool {
    !matches!(Machine::start(Arc::clone(site), req).step(), Step::Store(_))
}

#[test]
fn an_idle_runners_claim_and_heartbeat_are_answered_with_the_stores_own_bytes() {
    let fx = fixture_with(false);
    let site = idle_site(&fx, CLAIM);
    let later = NOW + 10_000.0;
    // Through the store, on a site that remembers nothing: the bytes to match.
    let plain = site_of(&fx.keys);
    let runner = runner_json(&fx.device, "null");
    let (claim, _) = script(
        sql(&fx, Endpoint::Claim, CLAIM, later),
        &plain,
        &[("runner", &runner), ("claim", &empty_claim("null"))],
    );
    let (beat, _) = script(
        sql(&fx, Endpoint::Heartbeat, BEAT, later),
        &plain,
        &[("heartbeat", &quiet_beat(NOW))],
    );
    // From the memo: no operation at all, the same bytes.
    assert_eq!(
        script(sql(&fx, Endpoint::Claim, CLAIM, later), &site, &[]).0,
        claim
    );
    assert_eq!(
        script(sql(&fx, Endpoint::Heartbeat, BEAT, later), &site, &[]).0,
        beat
    );
    // Another shape goes to the store: capabilities, max, daemon version, leases.
    let other_max = CLAIM.replace(r#""max":1"#, r#""max":2"#);
    let other_version = BEAT.replace("0.1.1", "0.1.2");
    let leases = BEAT.replace(
        r#""activeLeases":[]"#,
        r#""activeLeases":[{"jobId":"j","leaseId":"l"}]"#,
    );
    for (endpoint, body) in [
        (Endpoint::Claim, TEAM_CLAIM),
        (Endpoint::Claim, &other_max),
        (Endpoint::Heartbeat, &other_version),
        (Endpoint::Heartbeat, &leases),
    ] {
        assert!(!skipped(&site, sql(&fx, endpoint, body, later)), "{body}");
    }
}

#[test]
fn only_a_stores_answer_with_wake_at_or_seen_at_and_a_healthy_channel_is_remembered() {
    let fx = fixture_with(false);
    let runner = runner_json(&fx.device, "null");
    let site = site_of(&fx.keys);
    site.idle_health(true);
    script(
        sql(&fx, Endpoint::Claim, CLAIM, NOW),
        &site,
        &[
            ("runner", &runner),
            ("claim", &format!(r#"{{"runner":{LIVE},"jobs":[]}}"#)),
        ],
    );
    assert!(!skipped(&site, sql(&fx, Endpoint::Claim, CLAIM, NOW)));
    script(
        sql(&fx, Endpoint::Heartbeat, BEAT, NOW),
        &site,
        &[(
            "heartbeat",
            &format!(r#"{{"runner":{LIVE},"lost":[],"cancel":[]}}"#),
        )],
    );
    assert!(!skipped(&site, sql(&fx, Endpoint::Heartbeat, BEAT, NOW)));
    // A heartbeat that told of a cancel is not remembered.
    script(
        sql(&fx, Endpoint::Heartbeat, BEAT, NOW),
        &site,
        &[(
            "heartbeat",
            &format!(
                r#"{{"runner":{LIVE},"lost":[],"cancel":[{{"jobId":"j","leaseId":"l"}}],"seenAt":{NOW}}}"#
            ),
        )],
    );
    assert!(!skipped(&site, sql(&fx, Endpoint::Heartbeat, BEAT, NOW)));
    // A `wakeAt` or `seenAt` that is not a time is the store's fault.
    for (op, answer) in [
        (
            "claim",
            format!(r#"{{"runner":{LIVE},"jobs":[],"wakeAt":"soon"}}"#),
        ),
        (
            "heartbeat",
            format!(r#"{{"runner":{LIVE},"lost":[],"cancel":[],"seenAt":true}}"#),
        ),
    ] {
        let (endpoint, body) = match op {
            "claim" => (Endpoint::Claim, CLAIM),
            _ => (Endpoint::Heartbeat, BEAT),
        };
        let (answer, _) = script(sql(&fx, endpoint, body, NOW), &site, &[(op, &answer)]);
        assert_eq!(answer.status, 500, "{op}");
    }
    // The channel goes down: everything forgotten, nothing remembered.
    let site = idle_site(&fx, CLAIM);
    site.idle_health(false);
    assert!(!skipped(&site, sql(&fx, Endpoint::Claim, CLAIM, NOW)));
    script(
        sql(&fx, Endpoint::Claim, CLAIM, NOW),
        &site,
        &[("claim", &empty_claim("null"))],
    );
    assert!(!skipped(&site, sql(&fx, Endpoint::Claim, CLAIM, NOW)));
    // Back up: still forgotten.
    site.idle_health(true);
    assert!(!skipped(&site, sql(&fx, Endpoint::Claim, CLAIM, NOW)));
}

#[test]
fn a_key_makes_what_it_may_have_changed_go_to_the_store() {
    let fx = fixture_with(false);
    let later = NOW + 1.0;
    let claim = |site: &Arc<Site>| skipped(site, sql(&fx, Endpoint::Claim, CLAIM, later));
    let beat = |site: &Arc<Site>| skipped(site, sql(&fx, Endpoint::Heartbeat, BEAT, later));
    // Another owner's job, a team job for a private runner, a ping's kin: nothing.
    let site = idle_site(&fx, CLAIM);
    site.idle_key("o:alice");
    site.idle_key("r:r2");
    site.idle_key("t");
    assert!(claim(&site) && beat(&site));
    // Its owner's job: the claim asks; the heartbeat does not care.
    site.idle_key("o:bob");
    assert!(!claim(&site) && beat(&site));
    // A team job, for a runner that offers team scope.
    let site = idle_site(&fx, TEAM_CLAIM);
    site.idle_key("t");
    assert!(!skipped(
        &site,
        sql(&fx, Endpoint::Claim, TEAM_CLAIM, later)
    ));
    // The runner itself, and anything: both ask, and its identity is read again.
    for key in ["r:r1", "*", "something new"] {
        let site = idle_site(&fx, CLAIM);
        site.idle_key(key);
        for req in [
            sql(&fx, Endpoint::Claim, CLAIM, later),
            sql(&fx, Endpoint::Heartbeat, BEAT, later),
        ] {
            let machine = Machine::start(Arc::clone(&site), req);
            assert!(
                matches!(machine.step(), Step::Store(op) if op.name() == "runner"),
                "{key}"
            );
        }
    }
    // Revoked meanwhile: the read refuses it.
    let site = idle_site(&fx, CLAIM);
    site.idle_key("r:r1");
    let (answer, _) = script(
        sql(&fx, Endpoint::Claim, CLAIM, later),
        &site,
        &[("runner", &runner_json(&fx.device, "5"))],
    );
    assert_eq!(answer.status, 403);
}

#[test]
fn a_key_or_health_change_while_the_store_works_keeps_its_answer_from_being_remembered() {
    let fx = fixture_with(false);
    let runner = runner_json(&fx.device, "null");
    let change: [&dyn Fn(&Site); 4] = [
        &|s| s.idle_key("o:bob"),
        &|s| s.idle_key("r:r1"),
        &|s| s.idle_key("*"),
        &|s| s.idle_health(true),
    ];
    for (at, change) in change.iter().enumerate() {
        let site = site_of(&fx.keys);
        site.idle_health(true);
        let mut machine = Machine::start(Arc::clone(&site), sql(&fx, Endpoint::Claim, CLAIM, NOW));
        let Step::Store(op) = machine.step() else {
            panic!("asks the runner")
        };
        let got = Got::Store(op.output_from_json(&runner));
        machine.resume(got);
        let Step::Store(op) = machine.step() else {
            panic!("asks the claim")
        };
        let got = Got::Store(op.output_from_json(&empty_claim("null")));
        change(&site);
        machine.resume(got);
        assert_eq!(machine.answer().map(|a| a.status), Some(200));
        assert!(
            !skipped(&site, sql(&fx, Endpoint::Claim, CLAIM, NOW)),
            "change {at}"
        );
    }
    // A key before the claim is asked does not stop it being remembered.
    let site = site_of(&fx.keys);
    site.idle_health(true);
    site.idle_key("o:bob");
    script(
        sql(&fx, Endpoint::Claim, CLAIM, NOW),
        &site,
        &[("runner", &runner), ("claim", &empty_claim("null"))],
    );
    assert!(skipped(&site, sql(&fx, Endpoint::Claim, CLAIM, NOW)));
}

#[test]
fn an_empty_claim_is_trusted_until_its_wake_at_and_five_minutes_at_most() {
    let fx = fixture_with(false);
    let site = site_of(&fx.keys);
    site.idle_health(true);
    let runner = runner_json(&fx.device, "null");
    let wake = NOW + 30_000.0;
    script(
        sql(&fx, Endpoint::Claim, CLAIM, NOW),
        &site,
        &[
            ("runner", &runner),
            ("claim", &empty_claim(&wake.to_string())),
        ],
    );
    assert!(skipped(&site, sql(&fx, Endpoint::Claim, CLAIM, wake - 1.0)));
    assert!(!skipped(&site, sql(&fx, Endpoint::Claim, CLAIM, wake)));
    let site = idle_site(&fx, CLAIM);
    assert!(skipped(
        &site,
        sql(&fx, Endpoint::Claim, CLAIM, NOW + 299_999.0)
    ));
    assert!(!skipped(
        &site,
        sql(&fx, Endpoint::Claim, CLAIM, NOW + 300_000.0)
    ));
}

#[test]
fn a_skipped_heartbeat_puts_its_liveness_write_in_the_due_set_and_the_slack_bounds_it() {
    let fx = fixture_with(false);
    let site = idle_site(&fx, CLAIM);
    let at = |ms: f64| sql(&fx, Endpoint::Heartbeat, BEAT, NOW + ms);
    // Written at NOW: nothing due before 45 s.
    assert!(skipped(&site, at(44_999.0)));
    assert_eq!(site.idle_due(), "[]");
    assert!(skipped(&site, at(45_000.0)));
    assert!(skipped(&site, at(46_000.0)));
    let due = format!(r#"[{{"runnerId":"r1","now":{}}}]"#, NOW + 46_000.0);
    assert_eq!(site.idle_due(), due, "the latest time, once");
    assert_eq!(site.idle_due(), "[]", "handed out once");
    // Unwritten (the flush failed): at the slack, the store writes it.
    assert!(skipped(&site, at(LIVENESS_SLACK_MS - 1.0)));
    assert!(!skipped(&site, at(LIVENESS_SLACK_MS)));
    // Written by the flush: the runner is quiet for another 45 s.
    site.idle_seen(&format!(r#"[{{"runnerId":"r1","seenAt":{},"revoked":false}},{{"runnerId":"r9","seenAt":1,"revoked":false}}]"#, NOW + 46_000.0));
    site.idle_due();
    assert!(skipped(&site, at(90_999.0)));
    assert_eq!(site.idle_due(), "[]");
    assert!(skipped(&site, at(46_000.0 + LIVENESS_SLACK_MS - 1.0)));
    assert!(!skipped(&site, at(46_000.0 + LIVENESS_SLACK_MS)));
    // The flush finds it revoked: its memo and identity are forgotten.
    site.idle_seen(r#"[{"runnerId":"r1","seenAt":null,"revoked":true}]"#);
    let machine = Machine::start(Arc::clone(&site), at(1.0));
    assert!(matches!(machine.step(), Step::Store(op) if op.name() == "runner"));
    // Not understood: nothing changes, nothing breaks.
    for nonsense in ["", "{", "{}", "[1,{\"runnerId\":7}]"] {
        site.idle_seen(nonsense);
    }
}
