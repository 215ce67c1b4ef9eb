//! The protocol rules checked against the golden vectors made by the
//! reference packages (tests/vectors/*.json).

use byollm_server_native::audience::{
    self, Admits, Audience, BackendClass, BackendCost, DaemonOffer, JobAudience, OfferScope,
    ProvenanceInput, Refusal, SpendConsent, StopReason,
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
fn audience_vocabularies_and_messages() {
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
    let messages = v["refusalMessages"].as_object().unwrap();
    assert_eq!(messages.len(), Refusal::ALL.len());
    for r in Refusal::ALL {
        assert_eq!(messages[r.as_str()].as_str(), Some(r.message()), "{r}");
    }
}

#[test]
fn backend_registry_matches() {
    let v = vector("audience.json");
    let rows = v["backends"].as_array().unwrap();
    assert_eq!(rows.len(), audience::BACKENDS.len());
    for (row, b) in rows.iter().zip(audience::BACKENDS.iter()) {
        assert_eq!(s(row, "id"), b.id);
        assert_eq!(s(row, "label"), b.label);
        assert_eq!(s(row, "class"), b.class.as_str());
        assert_eq!(
            row["cost"].as_str(),
            b.cost.map(BackendCost::as_str),
            "{}",
            b.id
        );
        assert_eq!(s(row, "adversarialCorpus"), b.adversarial_corpus.as_str());
        assert_eq!(
            row["defaultBaseUrl"].as_str(),
            b.default_base_url,
            "{}",
            b.id
        );
    }
}

#[test]
fn match_audience_full_table() {
    let v = vector("audience.json");
    let rows = v["matchAudience"].as_array().unwrap();
    assert_eq!(rows.len(), 768);
    for row in rows {
        let allow = allow_list(s(row, "audienceAllow"));
        let job = JobAudience {
            owner: "alice",
            audience: Audience::parse(s(row, "audience")).unwrap(),
            audience_allow: allow.as_deref(),
        };
        let spend = match s(row, "spend") {
            "absent" => None,
            "not-acknowledged" => Some(SpendConsent {
                acknowledged: false,
                ceiling_reached: None,
            }),
            "acknowledged" => Some(SpendConsent {
                acknowledged: true,
                ceiling_reached: None,
            }),
            "acknowledged-ceiling-reached" => Some(SpendConsent {
                acknowledged: true,
                ceiling_reached: Some(true),
            }),
            other => panic!("spend {other}"),
        };
        let cost = BackendCost::parse(s(row, "cost")).unwrap();
        let scope = OfferScope::parse(s(row, "offerScope")).unwrap();
        let daemon = DaemonOffer {
            owner: if s(row, "owner") == "same" {
                "alice"
            } else {
                "bob"
            },
            offer_scope: scope,
            cost,
            spend,
            admits: Admits::Always(row["admits"].as_bool().unwrap()),
        };
        assert_eq!(
            audience::match_audience(&job, &daemon),
            expected_result(&row["result"]),
            "{row}"
        );
        let acknowledged = spend.is_some_and(|s| s.acknowledged);
        assert_eq!(
            audience::effective_offer_scope(scope, cost, acknowledged).as_str(),
            s(row, "effectiveOfferScope"),
            "{row}"
        );
    }
}

#[test]
fn server_side_table() {
    let v = vector("audience.json");
    let rows = v["server"].as_array().unwrap();
    assert_eq!(rows.len(), 608);
    for row in rows {
        let id = s(row, "backendId");
        assert_eq!(audience::server_cost(id).as_str(), s(row, "serverCost"));
        let allow = allow_list(s(row, "audienceAllow"));
        let got = audience::server_admits(
            "alice",
            Audience::parse(s(row, "audience")).unwrap(),
            allow.as_deref(),
            OfferScope::parse(s(row, "offerScope")).unwrap(),
            id,
            if s(row, "owner") == "same" {
                "alice"
            } else {
                "bob"
            },
        );
        assert_eq!(got, expected_result(&row["result"]), "{row}");
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
            audience: Audience::parse(s(input, "audience")).unwrap(),
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
