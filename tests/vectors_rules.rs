//! The protocol rules checked against the golden vectors made by the
//! reference packages (tests/vectors/*.json).

use byollm_server_native::audience::{
    self, Audience, BackendClass, BackendCost, OfferScope, ProvenanceInput, Refusal, StopReason,
};
use serde_json::Value;

fn vector(name: &str) -> Value {
    let path = format!("{}/tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {path}: {e}"))
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn expected_result(v: &Value) -> Result<(), Refusal> {
    if v["ok"] == Value::Bool(true) {
        Ok(())
    } else {
        Err(Refusal::parse(s(v, "refusal")).expect("known refusal"))
    }
}

fn allow_list(shape: &str) -> Option<Vec<String>> {
    match shape {
        "absent" => None,
        "empty" => Some(vec![]),
        "includes-daemon-owner" => Some(vec!["bob".into(), "carol".into()]),
        "excludes-daemon-owner" => Some(vec!["carol".into()]),
        other => panic!("unknown allowlist shape {other}"),
    }
}

#[test]
fn audience_vocabularies() {
    let v = vector("audience.json");
    let names = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names("audiences"),
        Audience::ALL.iter().map(|a| a.as_str()).collect::<Vec<_>>()
    );
    assert_eq!(
        names("offerScopes"),
        OfferScope::ALL
            .iter()
            .map(|a| a.as_str())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        names("refusals"),
        Refusal::ALL.iter().map(|a| a.as_str()).collect::<Vec<_>>()
    );
}

#[test]
fn backend_registry_matches() {
    let v = vector("audience.json");
    let rows = v["backends"].as_array().unwrap();
    assert_eq!(rows.len(), audience::BACKENDS.len());
    for (row, (id, cost)) in rows.iter().zip(audience::BACKENDS.iter()) {
        assert_eq!(s(row, "id"), *id);
        // The server reads the one backend without a registry cost as metered.
        assert_eq!(
            row["cost"].as_str().unwrap_or("metered"),
            cost.as_str(),
            "{id}"
        );
    }
}

/// The server's audience decision for a table row: a job owned by `alice`,
/// the runner's owner `alice` ("same") or `bob`, offering `backend`.
fn admits(row: &Value, backend: &str) -> Result<(), Refusal> {
    let allow = allow_list(s(row, "audienceAllow"));
    audience::server_admits(
        "alice",
        Audience::parse(s(row, "audience")).unwrap(),
        allow.as_deref(),
        OfferScope::parse(s(row, "offerScope")).unwrap(),
        backend,
        if s(row, "owner") == "same" {
            "alice"
        } else {
            "bob"
        },
    )
}

/// The reference's full matcher table, on the rows whose device-side facts
/// are the ones the server assumes (spend acknowledged, everyone admitted),
/// with a registered backend of the row's cost.
#[test]
fn match_audience_table_server_rows() {
    let v = vector("audience.json");
    let rows = v["matchAudience"].as_array().unwrap();
    assert_eq!(rows.len(), 768);
    let mut checked = 0;
    for row in rows {
        if s(row, "spend") != "acknowledged" || row["admits"] != Value::Bool(true) {
            continue;
        }
        let backend = match BackendCost::parse(s(row, "cost")).unwrap() {
            BackendCost::Free => "ollama",
            BackendCost::Metered => "openai",
            BackendCost::Subscription => "claude-cli",
        };
        assert_eq!(
            admits(row, backend),
            expected_result(&row["result"]),
            "{row}"
        );
        checked += 1;
    }
    assert_eq!(checked, 96);
}

#[test]
fn server_side_table() {
    let v = vector("audience.json");
    let rows = v["server"].as_array().unwrap();
    assert_eq!(rows.len(), 608);
    for row in rows {
        let id = s(row, "backendId");
        assert_eq!(audience::server_cost(id).as_str(), s(row, "serverCost"));
        assert_eq!(admits(row, id), expected_result(&row["result"]), "{row}");
    }
}

#[test]
fn provenance_cases() {
    let v = vector("provenance.json");
    let cases = v["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let input = &case["input"];
        let p = audience::provenance_for(&ProvenanceInput {
            audience: s(input, "audience"),
            runner_id: s(input, "runnerId"),
            runner_owner: s(input, "runnerOwner"),
            backend_class: BackendClass::parse(s(input, "backendClass")).unwrap(),
            model: s(input, "model"),
            stop: input["stop"]
                .as_str()
                .map(|x| StopReason::parse(x).unwrap()),
            stop_reported: input["stopReported"].as_bool(),
        });
        // Compare the serialised text so key order is checked too.
        let ours = serde_json::to_string(&p).unwrap();
        let theirs = serde_json::to_string(&case["expected"]).unwrap();
        assert_eq!(ours, theirs, "{case}");
    }
}

// ---------------------------------------------------------------------------
// misc.json: the rule parts

use byollm_server_native::json;
use byollm_server_native::kinds::{self, SizeClass};
use byollm_server_native::wire::{self, Endpoint, ErrorCode, Inspection};

#[test]
fn misc_constants() {
    let v = vector("misc.json");
    let c = &v["constants"];
    assert_eq!(s(c, "PROTOCOL_VERSION"), wire::PROTOCOL_VERSION);
    assert_eq!(s(c, "MIN_PROTOCOL_VERSION"), wire::MIN_PROTOCOL_VERSION);
    assert_eq!(s(c, "UPGRADE_COMMAND"), wire::UPGRADE_COMMAND);
    assert_eq!(c["MAX_BODY_BYTES"].as_u64(), Some(wire::MAX_BODY_BYTES));
    assert_eq!(
        c["MAX_ENVELOPE_BYTES"].as_u64(),
        Some(wire::MAX_ENVELOPE_BYTES)
    );
    let endpoints: Vec<&str> = c["ENDPOINTS"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        endpoints,
        Endpoint::ALL.iter().map(|e| e.as_str()).collect::<Vec<_>>()
    );
    let statuses = c["ERROR_STATUS"].as_object().unwrap();
    assert_eq!(statuses.len(), ErrorCode::ALL.len());
    for (code, status) in statuses {
        let ours = ErrorCode::parse(code).unwrap_or_else(|| panic!("code {code}"));
        assert_eq!(u64::from(ours.status()), status.as_u64().unwrap(), "{code}");
    }
    let limits = &c["PAYLOAD_LIMITS"];
    assert_eq!(
        limits["maxTextChars"].as_u64(),
        Some(u64::from(kinds::MAX_TEXT_CHARS))
    );
    assert_eq!(
        limits["maxMessages"].as_u64(),
        Some(u64::from(kinds::MAX_MESSAGES))
    );
    assert_eq!(
        limits["maxTotalChars"].as_u64(),
        Some(kinds::MAX_TOTAL_CHARS as u64)
    );
}

#[test]
fn misc_check_protocol_version() {
    let v = vector("misc.json");
    let cases = v["checkProtocolVersion"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let doc = json::parse(&serde_json::to_string(&case["body"]).unwrap()).unwrap();
        let ours = wire::check_protocol_version(&doc).map(|r| r.to_json());
        let theirs =
            (!case["refusal"].is_null()).then(|| serde_json::to_string(&case["refusal"]).unwrap());
        assert_eq!(ours, theirs, "{case}");
    }
}

#[test]
fn misc_sizes_and_lengths() {
    let v = vector("misc.json");
    for case in v["sizeClassOf"].as_array().unwrap() {
        let n = case["textChars"].as_f64().unwrap();
        assert_eq!(
            kinds::size_class_of(n),
            SizeClass::parse(s(case, "sizeClass")).unwrap(),
            "{case}"
        );
    }
    for case in v["payloadTextLength"].as_array().unwrap() {
        let input = &case["input"];
        let payload = serde_json::to_string(&input["payload"]).unwrap();
        let kind = s(input, "kind");
        let ok = kinds::validate_payload(Some(kind), kind, Some(&payload)).unwrap();
        assert_eq!(
            ok.text_length as u64,
            case["payloadTextLength"].as_u64().unwrap(),
            "{case}"
        );
    }
    for case in v["tooLarge"].as_array().unwrap() {
        let bytes = case["bytes"].as_f64().unwrap();
        assert_eq!(wire::describe_bytes(bytes), s(case, "describeBytes"));
        assert_eq!(wire::too_large_message(bytes), s(case, "tooLargeMessage"));
    }
}

#[test]
fn misc_enqueue_payload_refusals_and_canonical_form() {
    let v = vector("misc.json");
    let mut checked = 0;
    for case in v["enqueueRefusals"].as_array().unwrap() {
        let message = case["result"]["error"]["message"].as_str().unwrap();
        if !message.starts_with("invalid ") {
            continue; // unknown-option refusals belong to the TS shell
        }
        let input = &case["input"];
        let kind = input["kind"].as_str();
        let display = kind.unwrap_or("undefined");
        let payload = (!input["payload"].is_null())
            .then(|| serde_json::to_string(&input["payload"]).unwrap());
        let got = kinds::validate_payload(kind, display, payload.as_deref());
        assert_eq!(
            got.err().map(|refusal| refusal.to_string()).as_deref(),
            Some(message),
            "{case}"
        );
        checked += 1;
    }
    assert!(checked >= 7, "only {checked} payload refusals checked");
    let stores = &v["enqueueStores"];
    let payload = serde_json::to_string(&stores["input"]["payload"]).unwrap();
    let kind = s(&stores["input"], "kind");
    let ok = kinds::validate_payload(Some(kind), kind, Some(&payload)).unwrap();
    assert_eq!(ok.canonical, s(stores, "sealedPlaintext"));
    assert_eq!(ok.size_class.as_str(), s(&stores["record"], "sizeClass"));
}

// ---------------------------------------------------------------------------
// http-transcript.json: request bodies and the stage the reference answered at

/// Placeholders (`<runnerId>`, `<ciphertext: 710 bytes>`) stand for minted
/// values; give them a realistic long value so length rules see real data.
fn fill_placeholders(v: &mut Value) {
    match v {
        Value::String(s) if s.starts_with('<') && s.ends_with('>') => *s = "x".repeat(43),
        Value::Array(items) => items.iter_mut().for_each(fill_placeholders),
        Value::Object(map) => map.values_mut().for_each(fill_placeholders),
        _ => {}
    }
}

#[test]
fn transcript_request_bodies() {
    let v = vector("http-transcript.json");
    let mut checked = 0;
    for step in v["steps"].as_array().unwrap() {
        let Some(request) = step.get("request") else {
            continue;
        };
        if request["method"] != "POST" {
            continue;
        }
        let Some(endpoint) = request["path"]
            .as_str()
            .and_then(|p| p.strip_prefix("/api/byollm/"))
            .and_then(Endpoint::parse)
        else {
            continue;
        };
        let raw = match &request["body"] {
            Value::String(text) => text.clone(),
            body => {
                let mut body = body.clone();
                fill_placeholders(&mut body);
                serde_json::to_string(&body).unwrap()
            }
        };
        let status = step["status"].as_u64().unwrap();
        let response = &step["response"];
        let message = response["message"].as_str().unwrap_or("");
        let got = wire::inspect_request(endpoint, &raw, &wire::basic_url_ok);
        let name = s(step, "name");
        match (status, response["error"].as_str(), message) {
            (400, Some("unsupported-protocol-version"), _) => {
                assert_eq!(got.stage(), "version", "{name}");
                let body = got.error(endpoint).unwrap();
                assert_eq!(
                    body.to_json(),
                    serde_json::to_string(response).unwrap(),
                    "{name}"
                );
            }
            (400, _, "request body is not valid JSON") => {
                assert_eq!(got.stage(), "json", "{name}");
                assert_eq!(
                    got.error(endpoint).unwrap().to_json(),
                    serde_json::to_string(response).unwrap()
                );
            }
            (400, _, m) if m.ends_with("failed schema validation") => {
                assert_eq!(got.stage(), "schema", "{name}");
                assert_eq!(
                    got.error(endpoint).unwrap().to_json(),
                    serde_json::to_string(response).unwrap()
                );
            }
            // Everything the handler got past validation with must validate.
            (200, _, _) | (403, _, _) | (404, _, _) => {
                assert_eq!(got.stage(), "ok", "{name}");
            }
            // Refused by size before any parsing.
            (400, _, m) if m.starts_with("this message is") => continue,
            (400, _, m) if !m.is_empty() => assert_eq!(got.stage(), "ok", "{name}: {m}"),
            _ => continue, // 401s: refused before the schema ran
        }
        if let Inspection::Ok { doc, body } = &got {
            // The validated body re-serialises to the request as sent (the
            // transcript's bodies are already in schema order).
            let mut text = String::new();
            body.write_json(doc, &mut text);
            if endpoint != Endpoint::Heartbeat {
                assert_eq!(text, raw, "{name}");
            }
        }
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} transcript requests checked");
}
