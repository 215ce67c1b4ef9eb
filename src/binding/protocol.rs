//! The protocol's constants and header readings as the shell needs them:
//! the numbers the core uses, handed to the shell, so each is written once.

use napi_derive::napi;

use crate::{engine, envelope, payload, store, wire};

/// The protocol constants the core and the shell both use.
#[napi(object, js_name = "ProtocolConstants")]
pub(super) struct JsProtocolConstants {
    /// The protocol version this server speaks.
    #[napi(ts_type = "\"2\"")]
    pub version: String,
    /// The six endpoints, in the reference's order.
    #[napi(
        ts_type = "Array<\"pair\" | \"claim\" | \"fetch\" | \"heartbeat\" | \"result\" | \"release\">"
    )]
    pub endpoints: Vec<String>,
    /// Largest request body in bytes.
    pub max_body_bytes: f64,
    /// Envelopes and bodies from this many characters are sealed and opened
    /// on the thread pool, off the event loop.
    pub async_crypto_threshold: u32,
    /// How long a sealed payload stays valid after its enqueue.
    pub envelope_max_age_ms: f64,
    /// A job's time to live when the enqueue names none.
    pub default_ttl_ms: f64,
    /// A sealed envelope's keys in wire order.
    pub envelope_keys: Vec<String>,
    /// A job record's keys in the order every store's records have them.
    pub job_keys: Vec<String>,
    /// A runner record's keys in the order every store's records have them.
    pub runner_keys: Vec<String>,
    /// A SQL store writes a runner's liveness when the stored value is older.
    pub liveness_write_ms: f64,
    /// How far a SQL store's stored liveness may lag a runner's last request.
    pub liveness_slack_ms: f64,
}

#[napi(catch_unwind)]
pub(super) fn protocol_constants() -> JsProtocolConstants {
    JsProtocolConstants {
        version: wire::PROTOCOL_VERSION.to_owned(),
        endpoints: wire::Endpoint::ALL
            .iter()
            .map(|e| e.as_str().to_owned())
            .collect(),
        max_body_bytes: wire::MAX_BODY_BYTES as f64,
        async_crypto_threshold: payload::ASYNC_CRYPTO_THRESHOLD as u32,
        envelope_max_age_ms: envelope::ENVELOPE_MAX_AGE_MS,
        default_ttl_ms: store::DEFAULT_TTL_MS,
        envelope_keys: envelope::SEALED_ENVELOPE_KEYS.map(str::to_owned).to_vec(),
        job_keys: store::JOB_KEYS.map(str::to_owned).to_vec(),
        runner_keys: store::RUNNER_KEYS.map(str::to_owned).to_vec(),
        liveness_write_ms: engine::rules::LIVENESS_WRITE_MS,
        liveness_slack_ms: engine::rules::LIVENESS_SLACK_MS,
    }
}

/// The `x-byollm-issued-at` header as a timestamp (`Number(text)` when it
/// is finite, else `null`), as the engine reads it.
#[napi(catch_unwind)]
pub(super) fn issued_at_header(text: String) -> Option<f64> {
    wire::issued_at_header(&text)
}
