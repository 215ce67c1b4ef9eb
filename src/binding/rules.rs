//! The protocol-rules exports (their types: the generated `index.d.ts`):
//! an enqueue's kind, the stub deadline, the too-large message, the
//! audience vocabulary and runner availability. Request bodies are in
//! [`super::requests`].
//!
//! Conversions only; the rules live in `wire`, `engine::rules`, `audience`.

// `#[napi]` items compile to nothing under `cfg(test)`, leaving their helpers unused there.
#![cfg_attr(test, allow(dead_code))]

use napi::bindgen_prelude::*;
use napi::JsValue;
use napi_derive::napi;

use super::crypto::invalid;
use crate::audience::{self, Audience, CapabilityView, OfferScope, RunnerView};
use crate::wire;

// ------------------------------------------------------------ payloads

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
    OfferScope::parse(s).ok_or_else(|| invalid(format!("unknown offer scope: {s}")))
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
            .ok_or_else(|| invalid("runner record without owner"))?,
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
