//! The fuzz targets. Each takes raw bytes, drives one untrusted-input entry
//! point of the core, and asserts properties that must hold for every input
//! (a failed assertion is a panic, which the driver records as a crash).

use std::collections::HashSet;

use byollm_server_native::envelope::{self, Context, Expected, SealedEnvelope, Text};
use byollm_server_native::keys::{self, KeyHandle, PublicIdentity, StoredKeys};
use byollm_server_native::wire::{self, Endpoint, Inspection};
use byollm_server_native::{b64, ids, json, signing, site_keys};
use ed25519_dalek::Signer;
use x25519_dalek::StaticSecret;

use crate::driver::Target;

const ENDPOINTS: [&str; 6] = ["pair", "claim", "fetch", "heartbeat", "result", "release"];

/// Deterministic keys so a crash replays exactly.
fn fixed_keys(tag: u8) -> StoredKeys {
    StoredKeys::from_secrets(&[tag; 32], &[tag.wrapping_add(100); 32], 1_767_225_600_000)
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Split `data` at `\n` into exactly `n` parts (missing ones empty).
fn parts(data: &[u8], n: usize) -> Vec<String> {
    let mut out: Vec<String> = data.splitn(n, |&b| b == b'\n').map(text).collect();
    out.resize(n, String::new());
    out
}

const JSON_DICT: &[&[u8]] = &[
    b"\"protocolVersion\":\"2\"",
    b"\"protocolVersion\":\"10\"",
    b"\"protocolVersion\":2",
    b"null",
    b"true",
    b"false",
    b"1e309",
    b"-0",
    b"9007199254740993",
    b"0.1",
    b"\"\"",
    b"\\u0000",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\xef\xbb\xbf",
    b"\xed\xa0\x80",
    b"{}",
    b"[]",
    b"\"runnerId\":",
    b"\"capabilities\":[",
    b"\"envelope\":{",
    b"\"__proto__\":",
    b"\"constructor\":",
    b"\"kind\":\"chat\"",
    b"\"audience\":\"team\"",
    b"\"max\":",
];

// ---------------------------------------------------------------------------

/// Request parsing: JSON, version, strict schema, over any bytes.
pub fn inspect(seeds: Vec<Vec<u8>>) -> Target {
    Target {
        name: "inspect",
        seeds,
        dict: JSON_DICT.to_vec(),
        run: Box::new(|data: &[u8]| {
            let (ep_byte, rest) = match data.split_first() {
                Some((b, r)) => (*b, r),
                None => (0, data),
            };
            let name = ENDPOINTS[usize::from(ep_byte) % ENDPOINTS.len()];
            let ep = Endpoint::parse(name).expect("known endpoint");
            let raw = text(rest);
            let inspection = wire::inspect_request(ep, &raw, &wire::basic_url_ok);
            // A body the canonical check takes (and hands on parsed) is one
            // the full inspection accepts.
            if wire::canonical_doc(ep.schema(), &raw, &wire::basic_url_ok).is_some() {
                assert!(
                    matches!(inspection, Inspection::Ok { .. }),
                    "canonical check took a body the inspection does not ({})",
                    inspection.stage()
                );
            }
            match &inspection {
                Inspection::Ok { .. } => {
                    assert!(inspection.error(ep).is_none());
                }
                other => {
                    let err = other.error(ep).expect("a failed stage has an error body");
                    assert_eq!(err.status(), 400);
                    let body = err.to_json();
                    assert!(json::parse(&body).is_ok(), "error body is not JSON: {body}");
                }
            }
            // A parsed document re-serialises without panicking either.
            if let Ok(doc) = json::parse(&raw) {
                let _ = wire::check_protocol_version(&doc);
            }
            let _ = wire::parse_sealed_outcome(&raw, &wire::basic_url_ok);
        }),
    }
}

// ---------------------------------------------------------------------------

struct OpenFixture {
    site: KeyHandle,
    device: KeyHandle,
    device_key: ed25519_dalek::SigningKey,
    expected: Expected,
    deadline: f64,
}

impl OpenFixture {
    fn new() -> OpenFixture {
        let site = KeyHandle::new(fixed_keys(1)).expect("fixed keys parse");
        let device = KeyHandle::new(fixed_keys(2)).expect("fixed keys parse");
        let device_key = device.signing_key().clone();
        let expected = Expected {
            job_id: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b".into(),
            sender_key_id: device.key_id().to_string(),
            recipient_key_id: site.key_id().to_string(),
            direction: "result".into(),
        };
        OpenFixture {
            site,
            device,
            device_key,
            expected,
            deadline: 1_767_312_007_000.0,
        }
    }

    fn context(&self) -> Context {
        Context {
            job_id: self.expected.job_id.clone(),
            sender_key_id: self.expected.sender_key_id.clone(),
            recipient_key_id: self.expected.recipient_key_id.clone(),
            deadline_at: self.deadline,
            direction: self.expected.direction.clone(),
        }
    }

    fn envelope(&self, ciphertext: String) -> SealedEnvelope {
        SealedEnvelope {
            ciphertext,
            recipient_key_id: self.expected.recipient_key_id.clone(),
            sender_key_id: self.expected.sender_key_id.clone(),
            direction: self.expected.direction.clone(),
            deadline_at: self.deadline,
        }
    }

    /// Box `inner` to the site with a fixed ephemeral key (reproducible).
    fn seal_inner(&self, inner: &[u8]) -> String {
        let eph = StaticSecret::from([7u8; 32]);
        let sealed = envelope::sealed_box::seal_box_with_ephemeral(&eph, self.site.encryption_public(), inner)
            .expect("site key is not small-order");
        b64::encode_url(&sealed)
    }

    fn open(&self, ciphertext: String) -> Result<json::JsStr, envelope::OpenFailure> {
        let env = self.envelope(ciphertext);
        envelope::open_with_handle(&env, &self.site, self.device.identity_key(), &self.expected)
    }
}

/// Envelope open. The first byte picks the layer the rest replaces:
/// 0 = the ciphertext text, 1 = the boxed inner JSON, 2 = the signed body
/// (then properly signed, so the body's own parsing and checks are reached).
pub fn open() -> Target {
    let fx = OpenFixture::new();
    let good_plain = r#"{"outcome":"ok","text":"hi"}"#;
    let good = envelope::seal_with_handle(
        Text::Utf8(good_plain),
        &fx.device,
        &fx.site.keys().encryption_public,
        &fx.context(),
    )
    .expect("seal");
    let body = envelope::signed::signed_body(&fx.context(), Text::Utf8(good_plain));
    let sig = b64::encode_url(&fx.device_key.sign(&body).to_bytes());
    let inner = envelope::signed::inner_json(&body, &sig);
    let mut seeds = Vec::new();
    for (mode, bytes) in [
        (0u8, good.ciphertext.as_bytes().to_vec()),
        (1, inner.clone()),
        (2, body.clone()),
        (1, br#"{"body":null,"signature":"x"}"#.to_vec()),
        (1, b"null".to_vec()),
        (2, b"null".to_vec()),
    ] {
        let mut s = vec![mode];
        s.extend_from_slice(&bytes);
        seeds.push(s);
    }
    let mut dict = JSON_DICT.to_vec();
    dict.extend_from_slice(&[
        b"\"plaintext\":" as &[u8],
        b"\"v\":\"byollm/v1/envelope\"",
        b"\"direction\":\"payload\"",
        b"\"deadlineAt\":",
        b"\"body\":",
        b"\"signature\":",
    ]);
    Target {
        name: "open",
        seeds,
        dict,
        run: Box::new(move |data: &[u8]| {
            let (mode, rest) = match data.split_first() {
                Some((b, r)) => (*b % 3, r),
                None => (0, data),
            };
            let result = match mode {
                0 => fx.open(text(rest)),
                1 => fx.open(fx.seal_inner(rest)),
                _ => {
                    let sig = b64::encode_url(&fx.device_key.sign(rest).to_bytes());
                    fx.open(fx.seal_inner(&envelope::signed::inner_json(rest, &sig)))
                }
            };
            if let Ok(plain) = result {
                // Whatever opened must be exactly what a seal of that
                // plaintext in this context signs: the checks let nothing
                // else through.
                if mode == 2 {
                    let again = envelope::signed::signed_body(&fx.context(), Text::Utf8(plain.as_str()));
                    if !plain.has_lone_surrogate() {
                        let reparsed = json::parse(&String::from_utf8_lossy(&again));
                        assert!(reparsed.is_ok(), "re-signed body is not JSON");
                    }
                }
            }
        }),
    }
}

// ---------------------------------------------------------------------------

/// Request signature verification. Input: `endpoint\nrunnerId\nissuedAt\nbody\nsignature`.
/// Property: nothing verifies unless its canonical request is one we signed
/// (unforgeability through every parsing layer), and a verified signature
/// text is exactly the base64url of its bytes (no junk, no alternate alphabet).
pub fn verify() -> Target {
    let device = KeyHandle::new(fixed_keys(2)).expect("fixed keys parse");
    let public = device.keys().identity_public.clone();
    let key = keys::verifying_key(&public).expect("identity decodes");
    let mut signed: HashSet<String> = HashSet::new();
    let mut seeds = Vec::new();
    for (i, ep) in ENDPOINTS.iter().enumerate() {
        let body = format!("{{\"protocolVersion\":\"2\",\"runnerId\":\"r{i}\"}}");
        let issued = 1_767_225_600_000.0 + i as f64;
        let sig = signing::sign_request(&device, ep, &format!("r{i}"), issued, &body);
        signed.insert(signing::canonical_request(
            ep,
            &sig.runner_id,
            issued,
            &body,
        ));
        seeds.push(format!("{ep}\nr{i}\n{issued}\n{body}\n{}", sig.signature).into_bytes());
    }
    Target {
        name: "verify",
        seeds,
        dict: vec![
            b"\n",
            b"=",
            b"+",
            b"/",
            b"-",
            b"_",
            b" ",
            b"\xc3\xa9",
            b"1e3",
        ],
        run: Box::new(move |data: &[u8]| {
            let p = parts(data, 5);
            let issued_at = p[2].trim().parse::<f64>().unwrap_or(f64::NAN);
            let sig = signing::RequestSignature {
                runner_id: p[1].clone(),
                issued_at,
                signature: p[4].clone(),
            };
            let now = if issued_at.is_finite() {
                issued_at
            } else {
                0.0
            };
            let verdict = signing::verify_request(Some(&key), &p[0], &p[3], &sig, now, 300_000.0);
            if verdict.is_none() {
                let canonical = signing::canonical_request(&p[0], &p[1], issued_at, &p[3]);
                assert!(
                    signed.contains(&canonical),
                    "a request nobody signed verified"
                );
                let bytes = b64::decode_lenient(&sig.signature);
                assert_eq!(
                    b64::encode_url(&bytes),
                    sig.signature,
                    "a signature verified with a non-canonical text"
                );
            }
            // The same text as an identity key must never crash.
            let _ = keys::verify_with(&p[4], p[3].as_bytes(), &p[0]);
            let _ = keys::verifying_key(&p[1]);
        }),
    }
}

// ---------------------------------------------------------------------------

/// Key parsing: the keys JSON, the SITE_KEYS env value, public identities.
pub fn keys_target() -> Target {
    let k = fixed_keys(3);
    let mut seeds = Vec::new();
    let mut s = vec![0u8];
    s.extend_from_slice(k.to_json().as_bytes());
    seeds.push(s);
    let mut s = vec![1u8];
    s.extend_from_slice(b64::encode_std(k.to_json().as_bytes()).as_bytes());
    seeds.push(s);
    let id = k.public_identity();
    let mut s = vec![2u8];
    s.extend_from_slice(
        format!("{}\n{}\n{}", id.identity, id.encryption, id.encryption_sig).as_bytes(),
    );
    seeds.push(s);
    let mut dict = JSON_DICT.to_vec();
    dict.extend_from_slice(&[
        b"\"version\":1" as &[u8],
        b"\"createdAt\":",
        b"MC4CAQAwBQYDK2Vw",
    ]);
    Target {
        name: "keys",
        seeds,
        dict,
        run: Box::new(|data: &[u8]| {
            let (mode, rest) = match data.split_first() {
                Some((b, r)) => (*b % 3, r),
                None => (0, data),
            };
            let parsed = match mode {
                0 => json::parse(&text(rest))
                    .ok()
                    .and_then(|doc| StoredKeys::from_json(&doc).ok()),
                1 => site_keys::site_keys_from_env("SITE_KEYS", Some(&text(rest))).ok(),
                _ => {
                    let p = parts(rest, 3);
                    let id = PublicIdentity {
                        identity: p[0].clone(),
                        encryption: p[1].clone(),
                        encryption_sig: p[2].clone(),
                    };
                    let _ = keys::verify_public_identity(&id);
                    let _ = byollm_server_native::fingerprint::key_id(&p[0]);
                    None
                }
            };
            if let Some(stored) = parsed {
                // Accepted keys survive both encodings unchanged.
                let doc = json::parse(&stored.to_json()).expect("to_json is JSON");
                assert_eq!(StoredKeys::from_json(&doc).as_ref(), Ok(&stored));
                let env = b64::encode_std(stored.to_json().as_bytes());
                assert_eq!(
                    site_keys::site_keys_from_env("X", Some(&env)).as_ref(),
                    Ok(&stored)
                );
                if let Ok(handle) = KeyHandle::new(stored.clone()) {
                    let _ = handle.is_consistent();
                    let _ = keys::verify_public_identity(&handle.public_identity());
                }
            }
        }),
    }
}

// ---------------------------------------------------------------------------
// Independent models of the decoders, written from the spec rather than the
// code under test, for differential checks.

fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    }
}

fn groups_to_bytes(vals: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for g in vals.chunks(4) {
        let v = |i: usize| u32::from(*g.get(i).unwrap_or(&0));
        let n = (v(0) << 18) | (v(1) << 12) | (v(2) << 6) | v(3);
        let take = match g.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => 0,
        };
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    out
}

/// Node's lenient decode: every UTF-16 unit read as its low byte, skip junk,
/// stop at `=`, whole bytes only.
fn model_lenient(text: &str) -> Vec<u8> {
    let input: Vec<u8> = text.encode_utf16().map(|u| (u & 0xFF) as u8).collect();
    let end = input.iter().position(|&c| c == b'=').unwrap_or(input.len());
    let vals: Vec<u8> = input[..end].iter().filter_map(|&c| sextet(c)).collect();
    groups_to_bytes(&vals)
}

/// The inner-body decoder: base64url symbols only, length not 1 mod 4.
fn model_inner(input: &[u8]) -> Option<Vec<u8>> {
    if input.len() % 4 == 1 {
        return None;
    }
    let mut vals = Vec::with_capacity(input.len());
    for &c in input {
        if c == b'+' || c == b'/' {
            return None;
        }
        vals.push(sextet(c)?);
    }
    Some(groups_to_bytes(&vals))
}

fn model_hex(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for pair in input.chunks_exact(2) {
        let s = std::str::from_utf8(pair).ok();
        match s.and_then(|s| u8::from_str_radix(s, 16).ok()) {
            Some(b) if pair.iter().all(|c| c.is_ascii_hexdigit()) => out.push(b),
            _ => break,
        }
    }
    out
}

/// Base64/hex decoding and the secret comparison, differentially.
pub fn b64_target() -> Target {
    let seeds = vec![
        b"AAECAwQFBgcICQoLDA0ODw".to_vec(),
        b"AAECAwQFBgcICQoLDA0ODw==".to_vec(),
        b"+/+/-_-_".to_vec(),
        b"QUJD\nREVG".to_vec(),
        b"e3b0c44298fc1c149afbf4c8996fb924\nE3B0C44298FC1C149AFBF4C8996FB924".to_vec(),
    ];
    Target {
        name: "b64",
        seeds,
        dict: vec![
            b"=",
            b"==",
            b"-",
            b"_",
            b"+",
            b"/",
            b" ",
            b"\n",
            b"\xc3\xa9",
            b"\xc5\x81",
            b"\xc4\xbd",
            b"%",
        ],
        run: Box::new(|data: &[u8]| {
            let t = text(data);
            let bytes = t.as_bytes();
            assert_eq!(b64::decode_lenient(&t), model_lenient(&t), "lenient decode");
            assert_eq!(
                b64::decode_inner_body(&t),
                model_inner(bytes),
                "inner-body decode"
            );
            assert_eq!(b64::decode_hex_lenient(&t), model_hex(bytes), "hex decode");
            // The buffer-reusing forms clear what the buffer held before.
            let mut buf = vec![0xAA; 7];
            b64::decode_lenient_into(&t, &mut buf);
            assert_eq!(buf, model_lenient(&t), "lenient decode into a used buffer");
            let mut buf = vec![0x55; 5];
            let ok = b64::decode_inner_body_into(bytes, &mut buf);
            assert_eq!(
                ok.then_some(buf),
                model_inner(bytes),
                "inner-body decode into a used buffer"
            );
            if let Some(decoded) = b64::decode_inner_body(&t) {
                // Re-encoding a strict decode gives back the text, up to the
                // ignored trailing bits of the last symbol.
                let again = b64::encode_url(&decoded);
                assert_eq!(again.len(), t.len(), "strict round trip length");
            }
            let p = parts(data, 2);
            let m = ids::secrets_match(&p[0], &p[1]);
            assert_eq!(
                m,
                ids::secrets_match(&p[1], &p[0]),
                "secretsMatch is symmetric"
            );
            // Only strict hex (non-empty, even length) can be equal.
            let strict = |t: &str| {
                !t.is_empty() && t.len().is_multiple_of(2) && t.bytes().all(|c| c.is_ascii_hexdigit())
            };
            let expect = strict(&p[0]) && strict(&p[1]) && {
                let (a, b) = (model_hex(p[0].as_bytes()), model_hex(p[1].as_bytes()));
                a.len() == b.len() && a == b
            };
            assert_eq!(m, expect, "secretsMatch");
            let _ = ids::normalize_user_code(&t);
            let _ = ids::hash_secret(&t);
        }),
    }
}

pub fn all(inspect_seeds: Vec<Vec<u8>>) -> Vec<Target> {
    vec![
        inspect(inspect_seeds),
        open(),
        verify(),
        keys_target(),
        b64_target(),
    ]
}
