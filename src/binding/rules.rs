//! The protocol-rules exports (their types: the generated `index.d.ts`):
//! payload validation, the lease and stub rules, the too-large message, the
//! audience vocabulary, provenance, `capabilityFor` and runner availability. Request bodies are in [`super::requests`].
//!
//! Conversions only; the rules live in `wire`, `kinds`, `audience`.

// `#[napi]` items compile to nothing under `cfg(test)`, leaving their helpers unused there.
#![cfg_attr(test, allow(dead_code))]

use napi::bindgen_prelude::*;
use napi::JsValue;
use napi_derive::napi;

use super::requests::type_error;
use crate::audience::{
    self, Audience, BackendClass, CapabilityView, OfferScope, ProvenanceInput, RunnerView,
};
use crate::kinds;
use crate::wire;

// ------------------------------------------------------------ payloads

#[napi(object, js_name = "PayloadCheck")]
pub(super) struct JsPayloadCheck {
    pub ok: bool,
    pub canonical: Option<String>,
    pub text_length: Option<u32>,
    #[napi(ts_type = "\"small\" | \"medium\" | \"large\"")]
    pub size_class: Option<String>,
    pub message: Option<String>,
}

/// Validate `{kind, payload}` as enqueue does. `kind` may be any JS value
/// (the message prints it with `String(kind)`); `payloadJson` is
/// `JSON.stringify(payload)`, or `undefined` for an absent payload.
#[napi(
    catch_unwind,
    ts_args_type = "kind: unknown, payloadJson: string | undefined",
    ts_return_type = "{ ok: true; canonical: string; textLength: number; sizeClass: \"small\" | \"medium\" | \"large\" } | { ok: false; message: string }"
)]
pub(super) fn validate_payload(
    kind: Unknown<'_>,
    payload_json: Option<String>,
) -> Result<JsPayloadCheck> {
    let (kind_text, display) = payload_kind(kind)?;
    Ok(
        match kinds::validate_payload(kind_text.as_deref(), &display, payload_json.as_deref()) {
            Ok(v) => JsPayloadCheck {
                ok: true,
                canonical: Some(v.canonical),
                text_length: Some(u32::try_from(v.text_length).unwrap_or(u32::MAX)),
                size_class: Some(v.size_class.as_str().to_owned()),
                message: None,
            },
            Err(refusal) => JsPayloadCheck {
                ok: false,
                canonical: None,
                text_length: None,
                size_class: None,
                message: Some(refusal.to_string()),
            },
        },
    )
}

/// An enqueue's `kind` as the payload validator takes it: the string when it
/// is one, and the text its error message shows (`String(kind)`) either way.
pub(crate) fn payload_kind(kind: Unknown<'_>) -> Result<(Option<String>, String)> {
    let kind_text: Option<String> = match kind.get_type()? {
        ValueType::String => Some(String::from_unknown(kind)?),
        _ => None,
    };
    let display = match &kind_text {
        Some(s) => s.clone(),
        None => kind.coerce_to_string()?.into_utf8()?.as_str()?.to_owned(),
    };
    Ok((kind_text, display))
}

// ------------------------------------------------------------ the handlers' lease and stub rules

/// A JS value as the lease rules compare it: the string when it is one
/// (without lone surrogates, which no id of ours holds), else `None`, which
/// matches no string.
pub(super) fn rule_text(value: Unknown<'_>) -> Result<Option<String>> {
    if value.get_type()? != ValueType::String {
        return Ok(None);
    }
    let units = Utf16String::from_unknown(value)?;
    Ok(String::from_utf16(&units).ok())
}

/// The deadline a claim stub carries (`crate::engine::rules::deadline_for`).
#[napi(catch_unwind)]
pub(super) fn deadline_for(
    deadline_at: Option<f64>,
    claimable_at: Option<f64>,
    ttl_ms: f64,
    now: f64,
) -> f64 {
    crate::engine::rules::deadline_for(deadline_at, claimable_at, ttl_ms, now)
}

/// The too-large message for `bytes` (the limit is the body cap).
#[napi(catch_unwind)]
pub(super) fn too_large_message(bytes: f64) -> String {
    wire::too_large_message(bytes)
}

// ------------------------------------------------------------ audience

/// Whether `text` is an audience a new job may have (`"private"`, `"team"`).
#[napi(catch_unwind)]
pub(super) fn is_audience(text: String) -> bool {
    Audience::parse(&text).is_some()
}

fn offer_scope_of(s: &str) -> Result<OfferScope> {
    OfferScope::parse(s).ok_or_else(|| type_error(format!("unknown offer scope: {s}")))
}

#[napi(object, js_name = "ProvenanceInput")]
pub(super) struct JsProvenanceInput {
    /// The job's audience as stored (an unknown spelling is echoed, untrusted).
    pub audience: String,
    pub runner_id: String,
    pub runner_owner: String,
    #[napi(ts_type = "\"http\" | \"process\"")]
    pub backend_class: String,
    pub model: String,
    #[napi(ts_type = "\"end\" | \"length\" | \"stop-sequence\" | \"unknown\"")]
    pub stop: Option<String>,
    pub stop_reported: Option<bool>,
}

#[napi(object, js_name = "ResultProvenance")]
pub(super) struct JsResultProvenance {
    pub audience: String,
    pub runner_id: String,
    pub runner_owner: String,
    pub backend_class: String,
    pub model: String,
    pub untrusted: bool,
    pub stop: Option<String>,
    pub stop_reported: Option<bool>,
}

/// Provenance for a completed job; `untrusted` derived from the audience.
#[napi(catch_unwind)]
pub(super) fn provenance_for(input: JsProvenanceInput) -> Result<JsResultProvenance> {
    let backend_class = BackendClass::parse(&input.backend_class)
        .ok_or_else(|| type_error(format!("unknown backend class: {}", input.backend_class)))?;
    let stop = match &input.stop {
        Some(s) => Some(
            audience::StopReason::parse(s)
                .ok_or_else(|| type_error(format!("unknown stop reason: {s}")))?,
        ),
        None => None,
    };
    let p = audience::provenance_for(&ProvenanceInput {
        audience: &input.audience,
        runner_id: &input.runner_id,
        runner_owner: &input.runner_owner,
        backend_class,
        model: &input.model,
        stop,
        stop_reported: input.stop_reported,
    });
    Ok(JsResultProvenance {
        audience: p.audience,
        runner_id: p.runner_id,
        runner_owner: p.runner_owner,
        backend_class: p.backend_class.as_str().to_owned(),
        model: p.model,
        untrusted: p.untrusted,
        stop: p.stop.map(|s| s.as_str().to_owned()),
        stop_reported: p.stop_reported,
    })
}

/// The first capability whose `kind` is `kind` (the same object, not a
/// copy), or `undefined`.
#[napi(
    catch_unwind,
    ts_args_type = "caps: readonly Capability[], kind: string",
    ts_return_type = "Capability | undefined"
)]
pub(super) fn capability_for<'a>(
    caps: Array<'a>,
    kind: String,
) -> Result<Either<Object<'a>, Undefined>> {
    for i in 0..caps.len() {
        let Some(cap) = caps.get::<Object>(i)? else {
            continue;
        };
        let cap_kind: Option<Unknown> = cap.get("kind")?;
        let matches = match cap_kind {
            Some(k) if k.get_type()? == ValueType::String => String::from_unknown(k)? == kind,
            _ => false,
        };
        if matches {
            return Ok(Either::A(cap));
        }
    }
    // `Array.prototype.find` answers `undefined`, not `null`.
    Ok(Either::B(()))
}

#[napi(object, js_name = "AvailabilityCapability")]
pub(super) struct JsAvailabilityCapability {
    pub kind: String,
    pub offer_scope: String,
    pub backend_id: String,
}

/// The fields of a `RunnerRecord` availability reads.
struct RunnerFields {
    owner: String,
    /// The reference tests `revokedAt === null`, so anything else (even an
    /// absent key) counts as revoked.
    revoked: bool,
    last_heartbeat_at: f64,
    capabilities: Vec<JsAvailabilityCapability>,
}

/// Whether a runner record is revoked, and its `lastHeartbeatAt` (NaN when
/// it is not a number): what "online" reads.
pub(super) fn liveness_of(obj: &Object<'_>) -> Result<(bool, f64)> {
    let revoked_at: Option<Unknown> = obj.get("revokedAt")?;
    let revoked = match revoked_at {
        Some(v) => v.get_type()? != ValueType::Null,
        None => true,
    };
    Ok((revoked, obj.get("lastHeartbeatAt")?.unwrap_or(f64::NAN)))
}

fn read_runner(obj: &Object<'_>) -> Result<RunnerFields> {
    let (revoked, last_heartbeat_at) = liveness_of(obj)?;
    Ok(RunnerFields {
        owner: obj
            .get("owner")?
            .ok_or_else(|| type_error("runner record without owner"))?,
        revoked,
        last_heartbeat_at,
        capabilities: obj.get("capabilities")?.unwrap_or_default(),
    })
}

#[napi(object, js_name = "AvailabilityQuery")]
pub(super) struct JsAvailabilityQuery {
    pub kind: String,
    pub owner: String,
    /// Any spelling: an unknown one is matched as `private`, as the claim would.
    pub audience: Option<String>,
    #[napi(ts_type = "readonly string[]")]
    pub audience_allow: Option<Vec<String>>,
}

#[napi(object, js_name = "RunnerAvailability")]
pub(super) struct JsRunnerAvailability {
    pub available: bool,
    #[napi(
        ts_type = "\"no-runner-paired\" | \"no-runner-online\" | \"no-matching-capability\" | \"audience-admits-nobody\" | \"default-unusable\""
    )]
    pub reason: Option<String>,
    pub candidates: u32,
}

/// `ByollmApp.runnerAvailability` over runner records already read from
/// the store.
#[napi(
    catch_unwind,
    ts_args_type = "runners: readonly RunnerRecord[], query: AvailabilityQuery, now: number, livenessMs: number"
)]
pub(super) fn runner_availability(
    runners: Vec<Object<'_>>,
    query: JsAvailabilityQuery,
    now: f64,
    liveness_ms: f64,
) -> Result<JsRunnerAvailability> {
    let runners = runners
        .iter()
        .map(read_runner)
        .collect::<Result<Vec<_>>>()?;
    let mut caps: Vec<Vec<CapabilityView<'_>>> = Vec::with_capacity(runners.len());
    for r in &runners {
        let mut views = Vec::with_capacity(r.capabilities.len());
        for c in &r.capabilities {
            // Only capabilities of the asked kind are ever matched; an odd
            // scope on another kind must not fail the whole question.
            if c.kind != query.kind {
                continue;
            }
            views.push(CapabilityView {
                kind: &c.kind,
                offer_scope: offer_scope_of(&c.offer_scope)?,
                backend_id: &c.backend_id,
            });
        }
        caps.push(views);
    }
    let views: Vec<RunnerView<'_>> = runners
        .iter()
        .zip(caps.iter())
        .map(|(r, c)| RunnerView {
            owner: &r.owner,
            revoked: r.revoked,
            last_heartbeat_at: r.last_heartbeat_at,
            capabilities: c,
        })
        .collect();
    let q = audience::AvailabilityQuery {
        kind: &query.kind,
        owner: &query.owner,
        audience: Audience::matched_as(query.audience.as_deref().unwrap_or("private")),
        audience_allow: query.audience_allow.as_deref(),
    };
    let a = audience::runner_availability(&views, &q, now, liveness_ms);
    Ok(JsRunnerAvailability {
        available: a.available,
        reason: a.reason.map(|r| r.as_str().to_owned()),
        candidates: a.candidates,
    })
}
