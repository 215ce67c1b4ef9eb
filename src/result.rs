//! A device's result opened and accepted or refused: a sealed outcome
//! inside the envelope opened with the device's pinned identity, the
//! clear-text disposition equal to the sealed one (it travels in the clear
//! for routing, so it is checked, never believed), and the provenance the
//! site writes, built from the job and the authenticated runner, never from
//! the daemon's word.

use crate::audience::{self, BackendClass, ProvenanceInput, ResultProvenance, StopReason};
use crate::envelope::{self, OpenFailure};
use crate::json::{self, Doc, JsStr, Node, NodeId};
use crate::keys::KeyHandle;
use crate::wire::{self, SealedOutcomeResult};
use crate::{fingerprint, signing};

/// The refusal of a result that does not open as this device's, sealed to
/// this site, for this job.
pub(crate) const NOT_FROM_DEVICE: &str = "the result did not verify as coming from this device";

/// The refusal of a result whose clear-text disposition is not the sealed one.
pub(crate) const OTHER_DISPOSITION: &str =
    "the declared disposition is not the one that was sealed";

/// The refusal for a document the sealed-outcome schema let through without
/// the fields it requires; the schema makes it unreachable.
const NOT_AN_OUTCOME: &str = "the sealed result was not an outcome";

/// Open a device's sealed result for `job_id`, checking it was signed by
/// the device's pinned identity.
pub(crate) fn open_result(
    site: &KeyHandle,
    sealed: &envelope::SealedEnvelope,
    job_id: &str,
    device_identity: &str,
) -> Result<JsStr, OpenFailure> {
    let expected = envelope::Expected {
        job_id: job_id.to_string(),
        sender_key_id: fingerprint::key_id(device_identity),
        recipient_key_id: site.key_id().to_string(),
        direction: "result".into(),
    };
    let sender = signing::pinned_key(device_identity);
    envelope::open_with_handle(sealed, site, sender.as_ref(), &expected)
}

/// An opened result parsed, when it is a sealed outcome in canonical form
/// (what `JSON.stringify` writes), so the caller may also parse it plainly.
pub(crate) fn canonical_outcome(plaintext: &JsStr) -> Option<Doc> {
    if plaintext.lone_utf16().is_some() {
        return None;
    }
    wire::canonical_doc(&wire::SEALED_OUTCOME, plaintext.as_str(), &|_| false)
}

/// Who a result is accepted from, as the site knows it: the job's audience
/// (as stored; an unknown spelling is echoed, untrusted) and the
/// authenticated runner.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub audience: &'a str,
    pub runner_id: &'a str,
    pub runner_owner: &'a str,
}

/// An accepted result: the sealed outcome and the provenance to store with it.
#[derive(Debug)]
pub(crate) struct Accepted {
    doc: Doc,
    outcome: NodeId,
    /// The outcome's tag (`ok`, `error`, …), equal to the disposition.
    pub tag: String,
    pub provenance: ResultProvenance,
}

impl Accepted {
    /// The outcome as JSON text, as `JSON.stringify` writes it.
    pub(crate) fn outcome_json(&self) -> String {
        self.doc.to_json(self.outcome)
    }

    /// The provenance as JSON text, in the record's key order (`None`
    /// only if serde could not write plain strings, which it always can).
    pub(crate) fn provenance_json(&self) -> Option<String> {
        serde_json::to_string(&self.provenance).ok()
    }

    /// `{"outcome":…,"provenance":…}`: what a store the engine does not run in
    /// place is handed.
    pub(crate) fn to_json(&self) -> Option<String> {
        let provenance = self.provenance_json()?;
        let mut out = json::Obj::new();
        out.raw("outcome", &self.outcome_json())
            .raw("provenance", &provenance);
        Some(out.end())
    }
}

/// Accept the opened result of a device, or refuse it with the reference's
/// message. `disposition` is the request's (`None`: not a string, which no
/// tag equals); `url_ok` answers `URL.canParse` for the outcome's
/// `artifactUrl`. A canonical outcome (what `JSON.stringify` writes) is
/// taken as parsed; any other is rewritten as the schema reads it.
pub(crate) fn accept(
    opened: &Result<JsStr, OpenFailure>,
    disposition: Option<&str>,
    source: &Source<'_>,
    url_ok: &dyn Fn(&str) -> bool,
) -> Result<Accepted, &'static str> {
    let plaintext = opened.as_ref().map_err(|_| NOT_FROM_DEVICE)?;
    let doc = match canonical_outcome(plaintext) {
        Some(doc) => doc,
        None => rewritten(plaintext, url_ok)?,
    };
    let root = doc.root();
    let outcome = doc.get(root, "outcome").ok_or(NOT_AN_OUTCOME)?;
    let ran = doc.get(root, "ran").ok_or(NOT_AN_OUTCOME)?;
    let text = |obj: NodeId, key: &str| {
        doc.get(obj, key)
            .and_then(|id| doc.str(id))
            .map(JsStr::as_str)
            .ok_or(NOT_AN_OUTCOME)
    };
    let tag = text(outcome, "outcome")?;
    if disposition != Some(tag) {
        return Err(OTHER_DISPOSITION);
    }
    let stop = match doc.get(ran, "stop") {
        Some(_) => Some(StopReason::parse(text(ran, "stop")?).ok_or(NOT_AN_OUTCOME)?),
        None => None,
    };
    let stop_reported = match doc.get(ran, "stopReported").map(|id| doc.node(id)) {
        Some(Node::Bool(reported)) => Some(*reported),
        Some(_) => return Err(NOT_AN_OUTCOME),
        None => None,
    };
    let provenance = audience::provenance_for(&ProvenanceInput {
        audience: source.audience,
        runner_id: source.runner_id,
        runner_owner: source.runner_owner,
        backend_class: BackendClass::parse(text(ran, "backendClass")?).ok_or(NOT_AN_OUTCOME)?,
        model: text(ran, "model")?,
        stop,
        stop_reported,
    });
    let tag = tag.to_owned();
    Ok(Accepted {
        doc,
        outcome,
        tag,
        provenance,
    })
}

/// A sealed outcome that is valid but not canonical, as the schema reads
/// it (keys in the schema's order, URLs trimmed), or the reference's refusal.
fn rewritten(plaintext: &JsStr, url_ok: &dyn Fn(&str) -> bool) -> Result<Doc, &'static str> {
    match wire::parse_sealed_outcome(plaintext.as_str(), url_ok) {
        SealedOutcomeResult::Ok { doc, outcome } => {
            let mut text = String::new();
            outcome.write_json(&doc, &mut text);
            json::parse(&text).map_err(|_| NOT_AN_OUTCOME)
        }
        SealedOutcomeResult::Refused(message) => Err(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: Source<'static> = Source {
        audience: "team",
        runner_id: "r1",
        runner_owner: "bob",
    };

    fn accepted(plaintext: &str, disposition: &str) -> Result<String, &'static str> {
        accept(
            &Ok(JsStr::new(plaintext)),
            Some(disposition),
            &SOURCE,
            &wire::basic_url_ok,
        )
        .map(|a| a.to_json().unwrap_or_default())
    }

    #[test]
    fn a_canonical_outcome_is_accepted_with_the_sites_provenance() {
        let text = r#"{"outcome":{"outcome":"ok","text":"done"},"ran":{"model":"m","backendClass":"http","durationMs":4,"stop":"end","stopReported":true}}"#;
        assert_eq!(
            accepted(text, "ok").as_deref(),
            Ok(
                r#"{"outcome":{"outcome":"ok","text":"done"},"provenance":{"audience":"team","runnerId":"r1","runnerOwner":"bob","backendClass":"http","model":"m","untrusted":true,"stop":"end","stopReported":true}}"#
            )
        );
    }

    #[test]
    fn another_spelling_is_accepted_as_the_schema_reads_it() {
        let text = r#"{"ran":{"durationMs":4,"backendClass":"process","model":"m"},"outcome":{"text":"","outcome":"ok","artifactUrl":" https://x.example/a\n "}}"#;
        let Ok(json) = accepted(text, "ok") else {
            panic!("refused: {:?}", accepted(text, "ok"));
        };
        assert!(
            json.starts_with(r#"{"outcome":{"outcome":"ok","text":"","artifactUrl":"https://x.example/a"},"provenance":{"audience":"team","runnerId":"r1","runnerOwner":"bob","backendClass":"process","model":"m","untrusted":true}}"#),
            "{json}"
        );
    }

    #[test]
    fn refusals_carry_the_reference_messages() {
        let text = r#"{"outcome":{"outcome":"ok","text":"done"},"ran":{"model":"m","backendClass":"http","durationMs":4}}"#;
        assert_eq!(accepted(text, "error"), Err(OTHER_DISPOSITION));
        assert_eq!(
            accept(&Ok(JsStr::new(text)), None, &SOURCE, &|_| false).map(|a| a.tag),
            Err(OTHER_DISPOSITION)
        );
        assert_eq!(
            accepted("{", "ok"),
            Err("the sealed result was not valid JSON")
        );
        assert_eq!(accepted("null", "ok"), Err(NOT_AN_OUTCOME));
        assert_eq!(
            accept(&Err(OpenFailure::NotForUs), Some("ok"), &SOURCE, &|_| true).map(|a| a.tag),
            Err(NOT_FROM_DEVICE)
        );
    }
}
