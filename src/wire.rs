//! The wire contract: endpoints, request schemas, the protocol-version check,
//! the error vocabulary with its HTTP statuses, the too-large message, and
//! [`inspect_request`], which takes a raw body through JSON, version and
//! schema in one parse (protocol.md §2, §4, §6).

use crate::audience::{BackendClass, OfferScope, StopReason};
use crate::json::{self, Doc, JsStr};
use crate::kinds::JobKind;
use crate::schema::{
    self, array, bounded, int, object, opt, req, text, Field, Measure, Out, Presence, Schema,
};

pub use crate::schema::{Issue, IssueKind, Seg, Validated};
use crate::vocabulary::vocabulary;

/// The protocol version this server speaks.
pub const PROTOCOL_VERSION: &str = "2";
/// Every version accepted (first = minimum).
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &[PROTOCOL_VERSION];
/// The oldest supported version.
pub const MIN_PROTOCOL_VERSION: &str = PROTOCOL_VERSION;
/// Quoted in version refusals.
pub const UPGRADE_COMMAND: &str = "npm i -g byollm@latest";
/// Largest sealed envelope.
pub const MAX_ENVELOPE_BYTES: u64 = 6 * 1024 * 1024;
/// Largest request body (an envelope plus room for the JSON around it).
pub const MAX_BODY_BYTES: u64 = MAX_ENVELOPE_BYTES + 512 * 1024;

/// The `x-byollm-issued-at` header as a timestamp, read as `Number(text)`
/// reads it (white space trimmed, hex and exponents parse); `None` when
/// that is not a finite number, which leaves the request unsigned. Both
/// paths read it here; the signature check then wants a positive safe
/// integer.
pub fn issued_at_header(text: &str) -> Option<f64> {
    Some(json::string_to_number(text)).filter(|n| n.is_finite())
}

vocabulary! {
    /// The six protocol endpoints, in the reference's order.
    pub Endpoint {
        Pair => "pair",
        Claim => "claim",
        Fetch => "fetch",
        Heartbeat => "heartbeat",
        Result => "result",
        Release => "release",
    }
}

impl Endpoint {
    /// The strict request schema of this endpoint.
    pub fn schema(self) -> &'static Schema {
        match self {
            Endpoint::Pair => &PAIR_REQUEST,
            Endpoint::Claim => &CLAIM_REQUEST,
            Endpoint::Fetch => &FETCH_REQUEST,
            Endpoint::Heartbeat => &HEARTBEAT_REQUEST,
            Endpoint::Result => &RESULT_REQUEST,
            Endpoint::Release => &RELEASE_REQUEST,
        }
    }

    /// The message of a schema failure on this endpoint.
    pub fn schema_failure_message(self) -> &'static str {
        match self {
            Endpoint::Pair => "pair request failed schema validation",
            _ => "request body failed schema validation",
        }
    }
}

// ---------------------------------------------------------------------------
// Error vocabulary

vocabulary! {
    /// Every wire error code (its HTTP status: [`ErrorCode::status`]).
    pub ErrorCode {
        BadRequest => "bad-request",
        UnsupportedProtocolVersion => "unsupported-protocol-version",
        DaemonBelowFloor => "daemon-below-floor",
        Unauthorized => "unauthorized",
        Forbidden => "forbidden",
        Revoked => "revoked",
        NotFound => "not-found",
        NotReady => "not-ready",
        TooLate => "too-late",
        ClockSkew => "clock-skew",
        RateLimited => "rate-limited",
        ServerError => "server-error",
    }
}

impl ErrorCode {
    /// The HTTP status the reference pairs with this code.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::BadRequest | ErrorCode::UnsupportedProtocolVersion => 400,
            ErrorCode::Unauthorized | ErrorCode::ClockSkew => 401,
            ErrorCode::Forbidden | ErrorCode::Revoked => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::NotReady | ErrorCode::TooLate => 409,
            ErrorCode::DaemonBelowFloor => 426,
            ErrorCode::RateLimited => 429,
            ErrorCode::ServerError => 500,
        }
    }
}

/// A wire error body: `{error, message}` plus, on a version refusal,
/// `supported` and `minimum` (in that order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    pub error: ErrorCode,
    /// A `JsStr` because a version refusal quotes the declared version, and
    /// that may hold a lone surrogate the reply must echo exactly.
    pub message: JsStr,
    pub version: Option<VersionFields>,
}

/// The extra fields of an `unsupported-protocol-version` refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionFields {
    pub supported: &'static [&'static str],
    pub minimum: &'static str,
}

impl WireError {
    pub fn new(error: ErrorCode, message: impl Into<String>) -> WireError {
        WireError {
            error,
            message: JsStr::new(message.into()),
            version: None,
        }
    }

    pub fn status(&self) -> u16 {
        self.error.status()
    }

    /// The compact JSON body, keys in the reference's order.
    pub fn to_json(&self) -> String {
        let mut out = json::Obj::new();
        out.str("error", self.error.as_str())
            .js("message", &self.message);
        if let Some(v) = &self.version {
            out.with("supported", |out| {
                for (i, s) in v.supported.iter().enumerate() {
                    out.push(if i == 0 { '[' } else { ',' });
                    json::write_json_str(s, out);
                }
                out.push(']');
            })
            .str("minimum", v.minimum);
        }
        out.end()
    }
}

// ---------------------------------------------------------------------------
// Protocol version

fn version_refusal(message: JsStr) -> WireError {
    WireError {
        error: ErrorCode::UnsupportedProtocolVersion,
        message,
        version: Some(VersionFields {
            supported: SUPPORTED_PROTOCOL_VERSIONS,
            minimum: MIN_PROTOCOL_VERSION,
        }),
    }
}

/// The version check of the HTTP layer (protocol.md §2.4). Only an own
/// `protocolVersion` key of an object counts; a non-string or empty value
/// is "no version". Older/newer is decided by plain UTF-16 string
/// comparison with the minimum, as the reference does, so `"10"` reads as
/// older than `"2"`.
pub fn check_protocol_version(doc: &Doc) -> Option<WireError> {
    let declared = doc
        .get(doc.root(), "protocolVersion")
        .and_then(|v| doc.str(v));
    let declared = match declared {
        Some(s) if s.utf16_len() > 0 => s,
        _ => {
            return Some(version_refusal(JsStr::new(format!(
            "this request declared no protocol version. Upgrade the daemon: `{UPGRADE_COMMAND}`."
        ))))
        }
    };
    if SUPPORTED_PROTOCOL_VERSIONS.iter().any(|v| declared.is(v)) {
        return None;
    }
    let older = match declared.lone_utf16() {
        Some(units) => {
            units
                < MIN_PROTOCOL_VERSION
                    .encode_utf16()
                    .collect::<Vec<_>>()
                    .as_slice()
        }
        None => declared
            .as_str()
            .encode_utf16()
            .lt(MIN_PROTOCOL_VERSION.encode_utf16()),
    };
    let advice = if older {
        format!("Upgrade the daemon: `{UPGRADE_COMMAND}`.")
    } else {
        "This daemon is newer than the server; the server needs upgrading.".to_owned()
    };
    let head = format!(
        "this server speaks protocol {} and the daemon asked for ",
        SUPPORTED_PROTOCOL_VERSIONS.join(", ")
    );
    let tail = format!(". {advice}");
    let message = match declared.lone_utf16() {
        None => JsStr::new(format!("{head}{}{tail}", declared.as_str())),
        Some(units) => {
            let mut all: Vec<u16> = head.encode_utf16().collect();
            all.extend_from_slice(units);
            all.extend(tail.encode_utf16());
            JsStr::from_utf16(&all)
        }
    };
    Some(version_refusal(message))
}

// ---------------------------------------------------------------------------
// Size

/// `describeBytes`: megabytes rounded **up** to one decimal, e.g. `6.6 MB`.
pub fn describe_bytes(bytes: f64) -> String {
    let tenths = (bytes / (1024.0 * 1024.0) * 10.0).ceil() / 10.0;
    // toFixed(1) switches to the plain number text from 1e21 up (and for
    // non-finite values); below that one decimal digit is exact here.
    if !tenths.is_finite() || tenths.abs() >= 1e21 {
        return format!("{} MB", json::js_number_to_string(tenths));
    }
    let text = format!("{tenths:.1}");
    // toFixed never prints a negative zero.
    let text = if text == "-0.0" {
        "0.0".to_owned()
    } else {
        text
    };
    format!("{text} MB")
}

/// The refusal of a body whose arrays and objects nest deeper than
/// [`json::MAX_DEPTH`] (ours: `JSON.parse` has no such limit). Answered
/// where a body that is not JSON is, before the signature is checked: it
/// says nothing about the wire format.
pub fn too_deep_message() -> String {
    format!(
        "request body nests arrays and objects deeper than {} levels",
        json::MAX_DEPTH
    )
}

/// The message for a body over [`MAX_BODY_BYTES`] (U+2014 dash).
pub fn too_large_message(bytes: f64) -> String {
    format!(
        "this message is {} and the limit is {} \u{2014} it is a limit on one message rather than on how many you send. Split the work into smaller jobs and send them separately.",
        describe_bytes(bytes),
        describe_bytes(MAX_BODY_BYTES as f64)
    )
}

// ---------------------------------------------------------------------------
// Bounds: ours, not the reference's
//
// Every list a request carries, and every text a runner's record keeps, has a
// bound far above what a daemon sends, checked with the schema, before any
// store call: a request over one is refused with 400 `bad-request` naming the
// field and the bound (answered where a schema failure is, after the
// signature checks). The reference has none of these; docs/security.md lists
// them.

/// Leases a heartbeat's `activeLeases` may name. A daemon holds at most its
/// concurrency (32 at most in byollm@0.1.1) and a claim grants at most 64.
pub const MAX_ACTIVE_LEASES: u32 = 1024;
/// Leases one `release` may name (the same reasoning).
pub const MAX_RELEASE_LEASES: u32 = 1024;
/// Capabilities a claim, a heartbeat or a `pair start` may carry. A daemon
/// sends one per job kind it serves.
pub const MAX_CAPABILITIES: u32 = 32;
/// The capabilities of a claim or heartbeat as compact JSON: a heartbeat's
/// are kept in the runner's record. A `pair start` whole is at most
/// [`schema::MAX_PAIR_START_BYTES`], so any daemon that could pair fits.
pub const MAX_CAPABILITIES_BYTES: u32 = 16 * 1024;
/// `knownModels` in one capability (byollm@0.1.1 sends at most 6).
pub const MAX_KNOWN_MODELS: u32 = 64;
/// Entries of a heartbeat's `withheld` (at most one per job kind).
pub const MAX_WITHHELD: u32 = 32;
/// `claimants` of one `withheld` entry (one per configured service).
pub const MAX_CLAIMANTS: u32 = 64;
/// A heartbeat's `daemonVersion`, kept in the runner's record (the same
/// bound as a `pair start`'s `daemon.version`).
pub const MAX_DAEMON_VERSION_CHARS: u32 = 64;

// ---------------------------------------------------------------------------
// Schemas (protocol.md §4.0–4.6)

const S: Schema = text(None, None);
const S1: Schema = text(Some(1), None);
const POSITIVE_INT: Schema = Schema::Int {
    min: None,
    max: None,
    gt_zero: true,
};
const VERSION: Schema = Schema::Enum(&[PROTOCOL_VERSION]);
const OFFER_SCOPE: Schema = Schema::Enum(OfferScope::NAMES);
const BACKEND_CLASS: Schema = Schema::Enum(BackendClass::NAMES);
const JOB_KIND: Schema = Schema::Enum(JobKind::NAMES);
const BACKEND_IDS: [&str; 19] = {
    let mut ids = [""; 19];
    let mut i = 0;
    while i < 19 {
        ids[i] = crate::audience::BACKENDS[i].0;
        i += 1;
    }
    ids
};
const BACKEND_ID: Schema = Schema::Enum(&BACKEND_IDS);

pub static CAPABILITY: Schema = object(&[
    req("kind", &JOB_KIND),
    req("service", &S1),
    req("backendId", &BACKEND_ID),
    req("backendClass", &BACKEND_CLASS),
    req("model", &S1),
    opt(
        "knownModels",
        &bounded(&array(&S1, None, None), MAX_KNOWN_MODELS, Measure::Items),
    ),
    req("offerScope", &OFFER_SCOPE),
]);

static CAPABILITY_LIST: Schema = array(&CAPABILITY, None, None);

static CAPABILITIES: Schema = bounded(
    &bounded(&CAPABILITY_LIST, MAX_CAPABILITIES_BYTES, Measure::JsonBytes),
    MAX_CAPABILITIES,
    Measure::Items,
);

pub static GRANT_REF: Schema = object(&[req("jobId", &S1), req("leaseId", &S1)]);

static GRANT_REFS: Schema = array(&GRANT_REF, None, None);

static WITHHELD_KIND: Schema = object(&[
    req("kind", &JOB_KIND),
    req(
        "claimants",
        &bounded(
            &array(
                &object(&[req("service", &S1), req("offer", &OFFER_SCOPE)]),
                Some(2),
                None,
            ),
            MAX_CLAIMANTS,
            Measure::Items,
        ),
    ),
]);

pub static SEALED_ENVELOPE: Schema = object(&[
    req("ciphertext", &S1),
    req("recipientKeyId", &S1),
    req("senderKeyId", &S1),
    req("direction", &Schema::Enum(&["payload", "result"])),
    req("deadlineAt", &POSITIVE_INT),
]);

/// What `pair start` may carry is bounded (ours, not the reference's: it is
/// kept, and anyone may send one): key texts of at most 128 characters
/// (a device's are 43, 43 and 86), a version of at most 64, at most
/// [`MAX_CAPABILITIES`] capabilities, and the whole body at most
/// [`schema::MAX_PAIR_START_BYTES`].
const PAIR_KEY_TEXT: Schema = text(Some(1), Some(128));

static PAIR_DEVICE: Schema = object(&[
    req("identity", &PAIR_KEY_TEXT),
    req("encryption", &PAIR_KEY_TEXT),
    req("encryptionSig", &PAIR_KEY_TEXT),
]);

static PAIR_CAPABILITIES: Schema = bounded(&CAPABILITY_LIST, MAX_CAPABILITIES, Measure::Items);

pub static PAIR_START_REQUEST: Schema = Schema::Object {
    fields: &[
        req("protocolVersion", &VERSION),
        req("action", &Schema::Enum(&["start"])),
        req(
            "daemon",
            &object(&[
                req("version", &text(Some(1), Some(64))),
                req("label", &text(Some(1), Some(120))),
                req("platform", &Schema::Enum(&["darwin", "linux", "win32"])),
            ]),
        ),
        req("device", &PAIR_DEVICE),
        req("capabilities", &PAIR_CAPABILITIES),
    ],
    refine: Some(schema::Refine::PairStartBytes),
};

pub static PAIR_POLL_REQUEST: Schema = object(&[
    req("protocolVersion", &VERSION),
    req("action", &Schema::Enum(&["poll"])),
    req("deviceCode", &text(Some(20), None)),
]);

pub static PAIR_REQUEST: Schema = Schema::Union {
    key: "action",
    options: &[("start", &PAIR_START_REQUEST), ("poll", &PAIR_POLL_REQUEST)],
};

pub static CLAIM_REQUEST: Schema = object(&[
    req("protocolVersion", &VERSION),
    req("runnerId", &S1),
    req("capabilities", &CAPABILITIES),
    req("max", &int(Some(1.0), Some(64.0))),
]);

pub static FETCH_REQUEST: Schema = object(&[
    req("protocolVersion", &VERSION),
    req("runnerId", &S1),
    req("jobId", &S1),
    req("leaseId", &S1),
]);

pub static HEARTBEAT_REQUEST: Schema = object(&[
    req("protocolVersion", &VERSION),
    req("runnerId", &S1),
    req(
        "daemonVersion",
        &bounded(&S1, MAX_DAEMON_VERSION_CHARS, Measure::Chars),
    ),
    req("capabilities", &CAPABILITIES),
    Field {
        name: "withheld",
        schema: &bounded(
            &array(&WITHHELD_KIND, None, None),
            MAX_WITHHELD,
            Measure::Items,
        ),
        presence: Presence::DefaultEmptyArray,
    },
    req(
        "activeLeases",
        &bounded(&GRANT_REFS, MAX_ACTIVE_LEASES, Measure::Items),
    ),
]);

pub static RESULT_REQUEST: Schema = object(&[
    req("protocolVersion", &VERSION),
    req("runnerId", &S1),
    req("jobId", &S1),
    req("leaseId", &S1),
    req("envelope", &SEALED_ENVELOPE),
    req("disposition", &Schema::Enum(&["ok", "error", "canceled"])),
]);

pub static RELEASE_REQUEST: Schema = object(&[
    req("protocolVersion", &VERSION),
    req("runnerId", &S1),
    req(
        "leases",
        &bounded(&GRANT_REFS, MAX_RELEASE_LEASES, Measure::Items),
    ),
    req(
        "reason",
        &Schema::Enum(&["shutdown", "pause", "revoked", "backend-down", "refused"]),
    ),
]);

static JOB_OUTCOME: Schema = Schema::Union {
    key: "outcome",
    options: &[
        (
            "ok",
            &object(&[
                req("outcome", &Schema::Enum(&["ok"])),
                req("text", &S),
                opt("artifactUrl", &Schema::Url),
            ]),
        ),
        (
            "error",
            &object(&[
                req("outcome", &Schema::Enum(&["error"])),
                req("code", &S1),
                req("message", &S1),
                req("retryable", &Schema::Bool),
            ]),
        ),
        (
            "canceled",
            &object(&[req("outcome", &Schema::Enum(&["canceled"]))]),
        ),
    ],
};

static RUN_METADATA: Schema = object(&[
    req("model", &S1),
    req("backendClass", &BACKEND_CLASS),
    req("durationMs", &int(Some(0.0), None)),
    opt("stop", &Schema::Enum(StopReason::NAMES)),
    opt("stopReported", &Schema::Bool),
]);

/// The plaintext of a result envelope: `{outcome, ran}`.
pub static SEALED_OUTCOME: Schema =
    object(&[req("outcome", &JOB_OUTCOME), req("ran", &RUN_METADATA)]);

// ---------------------------------------------------------------------------
// Request inspection

/// The stage at which a request body was answered.
#[derive(Debug)]
pub enum Inspection {
    /// Valid: the parsed document and the schema's output (what zod's
    /// `safeParse(...).data` would be).
    Ok { doc: Doc, body: Out },
    /// Not JSON: 400 `bad-request` "request body is not valid JSON", or,
    /// for arrays and objects nested deeper than [`json::MAX_DEPTH`]
    /// (`too_deep`, refused where the first one too many opens), a message
    /// saying so.
    Json { too_deep: bool },
    /// Version refusal: 400 with the refusal body.
    Version(WireError),
    /// Strict schema failure: 400 `bad-request` with the endpoint's
    /// message, or, when the body is over one of our bounds, a message
    /// naming the field and the bound (`bound`).
    Schema { bound: Option<String> },
}

impl Inspection {
    /// The HTTP error body for a failed stage (`None` for `Ok`).
    pub fn error(&self, endpoint: Endpoint) -> Option<WireError> {
        match self {
            Inspection::Ok { .. } => None,
            Inspection::Json { too_deep: false } => Some(WireError::new(
                ErrorCode::BadRequest,
                "request body is not valid JSON",
            )),
            Inspection::Json { too_deep: true } => {
                Some(WireError::new(ErrorCode::BadRequest, too_deep_message()))
            }
            Inspection::Version(refusal) => Some(refusal.clone()),
            Inspection::Schema {
                bound: Some(message),
            } => Some(WireError::new(ErrorCode::BadRequest, message.as_str())),
            Inspection::Schema { bound: None } => Some(WireError::new(
                ErrorCode::BadRequest,
                endpoint.schema_failure_message(),
            )),
        }
    }

    pub fn stage(&self) -> &'static str {
        match self {
            Inspection::Ok { .. } => "ok",
            Inspection::Json { .. } => "json",
            Inspection::Version(_) => "version",
            Inspection::Schema { .. } => "schema",
        }
    }
}

/// URL acceptance for cores without a JS engine at hand: a scheme, a colon
/// and something after it, and for the special schemes a non-empty host.
/// The Node binding passes Node's own `URL.canParse` instead, which is what
/// zod calls, so this approximation only serves plain-Rust callers.
pub fn basic_url_ok(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return false;
    }
    let special = ["http", "https", "ws", "wss", "ftp"]
        .iter()
        .any(|sp| scheme.eq_ignore_ascii_case(sp));
    if special {
        let host = rest.trim_start_matches(['/', '\\']);
        let host = host.split(['/', '\\', '?', '#']).next().unwrap_or("");
        let host = host.rsplit('@').next().unwrap_or("");
        return !host.is_empty() && !host.starts_with(':');
    }
    true
}

/// One parse of a raw request body: JSON, then the protocol version, then
/// the endpoint's strict schema.
pub fn inspect_request(endpoint: Endpoint, raw: &str, url_ok: &dyn Fn(&str) -> bool) -> Inspection {
    let doc = match json::parse(raw) {
        Ok(doc) => doc,
        Err(e) => {
            return Inspection::Json {
                too_deep: e.too_deep,
            }
        }
    };
    if let Some(refusal) = check_protocol_version(&doc) {
        return Inspection::Version(refusal);
    }
    let v = schema::validate(&doc, Some(doc.root()), endpoint.schema(), url_ok, 1);
    match v.out {
        Some(body) if v.issues.is_empty() => Inspection::Ok { doc, body },
        _ => Inspection::Schema {
            bound: v.issues.first().and_then(Issue::bound_refusal),
        },
    }
}

/// `text` parsed, when it is valid for `schema` **and** canonical: then
/// `JSON.parse(text)` is exactly the validated body, and a caller may take
/// the parsed document (or let V8 parse the text) as it is. `None` says
/// nothing about validity; the full inspection decides.
pub fn canonical_doc(schema: &Schema, text: &str, url_ok: &dyn Fn(&str) -> bool) -> Option<Doc> {
    let doc = json::parse(text).ok()?;
    let v = schema::validate(&doc, Some(doc.root()), schema, url_ok, 1);
    v.canonical().then_some(doc)
}

/// The result of opening a sealed outcome's plaintext.
#[derive(Debug)]
pub enum SealedOutcomeResult {
    Ok { doc: Doc, outcome: Out },
    Refused(&'static str),
}

/// Parse and check the plaintext of a result envelope. The messages are
/// the reference's (`the sealed result was not valid JSON` / `… not an
/// outcome`).
pub fn parse_sealed_outcome(plaintext: &str, url_ok: &dyn Fn(&str) -> bool) -> SealedOutcomeResult {
    let Ok(doc) = json::parse(plaintext) else {
        return SealedOutcomeResult::Refused("the sealed result was not valid JSON");
    };
    let v = schema::validate(&doc, Some(doc.root()), &SEALED_OUTCOME, url_ok, 1);
    match v.out {
        Some(outcome) if v.issues.is_empty() => SealedOutcomeResult::Ok { doc, outcome },
        _ => SealedOutcomeResult::Refused("the sealed result was not an outcome"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inspect(endpoint: Endpoint, raw: &str) -> Inspection {
        inspect_request(endpoint, raw, &basic_url_ok)
    }

    #[test]
    fn the_issued_at_header_is_read_as_number_reads_it() {
        for (text, n) in [
            ("1764500000000", 1_764_500_000_000.0),
            (" 01\t", 1.0),
            ("1e3", 1_000.0),
            ("0x10", 16.0),
            ("+1", 1.0),
            ("-1", -1.0),
            ("1.5", 1.5),
            ("", 0.0),
        ] {
            assert_eq!(issued_at_header(text), Some(n), "{text:?}");
        }
        for other in ["Infinity", "1e400", "abc", "1 2", "١٢", "0x"] {
            assert_eq!(issued_at_header(other), None, "{other:?}");
        }
    }

    const CAP: &str = r#"{"kind":"llm.generate","service":"local","backendId":"ollama","backendClass":"http","model":"llama3.2","offerScope":"private"}"#;

    #[test]
    fn claim_stages() {
        assert_eq!(inspect(Endpoint::Claim, "{not json").stage(), "json");
        assert_eq!(inspect(Endpoint::Claim, r#"{"max":1}"#).stage(), "version");
        let ok =
            format!(r#"{{"protocolVersion":"2","runnerId":"r","capabilities":[{CAP}],"max":5.0}}"#);
        let Inspection::Ok { doc, body } = inspect(Endpoint::Claim, &ok) else {
            panic!("claim should pass")
        };
        assert!(
            canonical_doc(Endpoint::Claim.schema(), &ok, &basic_url_ok).is_some(),
            "5.0 parses to the same number; the keys are in order"
        );
        let mut text = String::new();
        body.write_json(&doc, &mut text);
        assert_eq!(
            text,
            format!(r#"{{"protocolVersion":"2","runnerId":"r","capabilities":[{CAP}],"max":5}}"#)
        );
        for bad in [
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":0}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":65}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1.5}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1e400}"#,
            r#"{"protocolVersion":"2","runnerId":"","capabilities":[],"max":1}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1,"x":0}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":null,"max":1}"#,
        ] {
            assert_eq!(inspect(Endpoint::Claim, bad).stage(), "schema", "{bad}");
        }
    }

    fn refusal(endpoint: Endpoint, raw: &str) -> String {
        let inspection = inspect(endpoint, raw);
        assert_eq!(inspection.stage(), "schema", "{raw:.200}");
        let error = inspection.error(endpoint).expect("an error body");
        assert_eq!((error.status(), error.error), (400, ErrorCode::BadRequest));
        error.message.as_str().to_owned()
    }

    fn leases(n: usize) -> String {
        let one = r#"{"jobId":"j","leaseId":"l"}"#;
        format!("[{}]", vec![one; n].join(","))
    }

    fn heartbeat(daemon_version: &str, capabilities: &str, withheld: &str, active: &str) -> String {
        format!(
            r#"{{"protocolVersion":"2","runnerId":"r","daemonVersion":"{daemon_version}","capabilities":{capabilities},"withheld":{withheld},"activeLeases":{active}}}"#
        )
    }

    #[test]
    fn every_list_a_request_carries_is_bounded_and_a_refusal_names_the_field_and_the_bound() {
        let caps = |n: usize| format!("[{}]", vec![CAP; n].join(","));
        let ok = |raw: &str, ep| assert_eq!(inspect(ep, raw).stage(), "ok", "{raw:.200}");
        let hb = Endpoint::Heartbeat;
        // At each bound: accepted.
        ok(
            &heartbeat(&"v".repeat(64), &caps(32), "[]", &leases(1024)),
            hb,
        );
        // One over: refused with the field and the bound.
        assert_eq!(
            refusal(hb, &heartbeat("1", "[]", "[]", &leases(1025))),
            "activeLeases has 1025 items and the limit is 1024"
        );
        assert_eq!(
            refusal(hb, &heartbeat("1", &caps(33), "[]", "[]")),
            "capabilities has 33 items and the limit is 32"
        );
        assert_eq!(
            refusal(hb, &heartbeat(&"v".repeat(65), "[]", "[]", "[]")),
            "daemonVersion has 65 characters and the limit is 64"
        );
        let models = |n: usize| format!("[{}]", vec![r#""m""#; n].join(","));
        let with_models = |n: usize| {
            format!(
                r#"[{CAP},{{"kind":"llm.chat","service":"s","backendId":"ollama","backendClass":"http","model":"m","knownModels":{},"offerScope":"private"}}]"#,
                models(n)
            )
        };
        ok(&heartbeat("1", &with_models(64), "[]", "[]"), hb);
        assert_eq!(
            refusal(hb, &heartbeat("1", &with_models(65), "[]", "[]")),
            "capabilities[1].knownModels has 65 items and the limit is 64"
        );
        let claimant = r#"{"service":"s","offer":"private"}"#;
        let withheld = |kinds: usize, claimants: usize| {
            let one = format!(
                r#"{{"kind":"llm.generate","claimants":[{}]}}"#,
                vec![claimant; claimants].join(",")
            );
            format!("[{}]", vec![one.as_str(); kinds].join(","))
        };
        ok(&heartbeat("1", "[]", &withheld(32, 64), "[]"), hb);
        assert_eq!(
            refusal(hb, &heartbeat("1", "[]", &withheld(33, 2), "[]")),
            "withheld has 33 items and the limit is 32"
        );
        assert_eq!(
            refusal(hb, &heartbeat("1", "[]", &withheld(1, 65), "[]")),
            "withheld[0].claimants has 65 items and the limit is 64"
        );

        // The capabilities a runner's record keeps, in bytes.
        let wide = |model_chars: usize| {
            let one = format!(
                r#"{{"kind":"llm.generate","service":"s","backendId":"ollama","backendClass":"http","model":"{}","offerScope":"private"}}"#,
                "m".repeat(model_chars)
            );
            format!("[{}]", vec![one.as_str(); 16].join(","))
        };
        let fits = wide(900);
        assert!(
            fits.len() <= MAX_CAPABILITIES_BYTES as usize,
            "{}",
            fits.len()
        );
        ok(&heartbeat("1", &fits, "[]", "[]"), hb);
        let over = wide(1100);
        assert_eq!(
            refusal(hb, &heartbeat("1", &over, "[]", "[]")),
            format!(
                "capabilities is {} bytes as JSON and the limit is 16384",
                over.len()
            )
        );

        // The same capabilities bounds on a claim, the release list, pair start's.
        let claim = |c: &str| {
            format!(r#"{{"protocolVersion":"2","runnerId":"r","capabilities":{c},"max":1}}"#)
        };
        ok(&claim(&caps(32)), Endpoint::Claim);
        assert_eq!(
            refusal(Endpoint::Claim, &claim(&caps(33))),
            "capabilities has 33 items and the limit is 32"
        );
        assert_eq!(
            refusal(Endpoint::Claim, &claim(&over)),
            format!(
                "capabilities is {} bytes as JSON and the limit is 16384",
                over.len()
            )
        );
        let release = |l: &str| {
            format!(r#"{{"protocolVersion":"2","runnerId":"r","leases":{l},"reason":"shutdown"}}"#)
        };
        ok(&release(&leases(1024)), Endpoint::Release);
        assert_eq!(
            refusal(Endpoint::Release, &release(&leases(1025))),
            "leases has 1025 items and the limit is 1024"
        );
        let pair = |c: &str| {
            format!(
                r#"{{"protocolVersion":"2","action":"start","daemon":{{"version":"1","label":"l","platform":"linux"}},"device":{{"identity":"i","encryption":"e","encryptionSig":"s"}},"capabilities":{c}}}"#
            )
        };
        ok(&pair(&caps(32)), Endpoint::Pair);
        assert_eq!(
            refusal(Endpoint::Pair, &pair(&caps(33))),
            "capabilities has 33 items and the limit is 32"
        );
    }

    #[test]
    fn a_list_over_its_bound_is_refused_before_its_items_are_looked_at() {
        // Items that are not even objects: the count alone decides.
        let junk = format!("[{}]", vec!["7"; 5000].join(","));
        assert_eq!(
            refusal(Endpoint::Heartbeat, &heartbeat("1", "[]", "[]", &junk)),
            "activeLeases has 5000 items and the limit is 1024"
        );
        // A failure earlier in the body is the first issue: the usual message.
        let raw = format!(
            r#"{{"protocolVersion":"2","runnerId":"","daemonVersion":"1","capabilities":[],"activeLeases":{}}}"#,
            leases(2000)
        );
        assert_eq!(
            refusal(Endpoint::Heartbeat, &raw),
            "request body failed schema validation"
        );
        // The canonical check never takes a body over a bound.
        let claim = format!(
            r#"{{"protocolVersion":"2","runnerId":"r","capabilities":[{}],"max":1}}"#,
            vec![CAP; 33].join(",")
        );
        assert!(canonical_doc(Endpoint::Claim.schema(), &claim, &basic_url_ok).is_none());
    }

    #[test]
    fn the_json_length_of_an_output_is_the_length_of_its_text() {
        for raw in [
            format!(
                r#"{{"protocolVersion":"2","runnerId":"r\ud800\n\"é","capabilities":[{CAP},{CAP}],"max":64}}"#
            ),
            r#"{"protocolVersion":"2","runnerId":"\u0001x","capabilities":[],"max":1.0}"#
                .to_owned(),
        ] {
            let Inspection::Ok { doc, body, .. } = inspect(Endpoint::Claim, &raw) else {
                panic!("{raw}")
            };
            let mut text = String::new();
            body.write_json(&doc, &mut text);
            assert_eq!(body.json_len(&doc), text.len(), "{text}");
        }
    }

    #[test]
    fn a_body_nested_too_deep_is_refused_at_the_json_stage_with_its_own_message() {
        let brackets = "[".repeat(6 << 20);
        for endpoint in Endpoint::ALL {
            let inspection = inspect(*endpoint, &brackets);
            assert_eq!(inspection.stage(), "json");
            let error = inspection.error(*endpoint).expect("an error body");
            assert_eq!(
                error.to_json(),
                r#"{"error":"bad-request","message":"request body nests arrays and objects deeper than 64 levels"}"#
            );
        }
        let deep_key = format!(
            r#"{{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1,"x":{}{}}}"#,
            "[".repeat(64),
            "]".repeat(64)
        );
        assert_eq!(
            inspect(Endpoint::Claim, &deep_key)
                .error(Endpoint::Claim)
                .map(|e| e.message.as_str().to_owned()),
            Some(too_deep_message())
        );
        // Unterminated but shallow: the usual answer.
        assert_eq!(
            inspect(Endpoint::Claim, "[[[")
                .error(Endpoint::Claim)
                .map(|e| e.message.as_str().to_owned()),
            Some("request body is not valid JSON".to_owned())
        );
    }

    #[test]
    fn heartbeat_defaults_withheld_in_schema_order() {
        let raw = r#"{"activeLeases":[],"capabilities":[],"daemonVersion":"1","runnerId":"r","protocolVersion":"2"}"#;
        let Inspection::Ok { doc, body } = inspect(Endpoint::Heartbeat, raw) else {
            panic!()
        };
        assert!(
            canonical_doc(Endpoint::Heartbeat.schema(), raw, &basic_url_ok).is_none(),
            "keys out of order and a default filled in"
        );
        let mut text = String::new();
        body.write_json(&doc, &mut text);
        assert_eq!(
            text,
            r#"{"protocolVersion":"2","runnerId":"r","daemonVersion":"1","capabilities":[],"withheld":[],"activeLeases":[]}"#
        );
    }

    #[test]
    fn version_check_is_lexicographic() {
        let msg = |raw: &str| {
            check_protocol_version(&json::parse(raw).unwrap())
                .map(|e| e.message.as_str().to_owned())
        };
        assert_eq!(msg(r#"{"protocolVersion":"2"}"#), None);
        assert!(msg(r#"{"protocolVersion":"10"}"#)
            .unwrap()
            .ends_with("Upgrade the daemon: `npm i -g byollm@latest`."));
        assert!(msg(r#"{"protocolVersion":"2 "}"#)
            .unwrap()
            .ends_with("the server needs upgrading."));
        assert!(msg(r#"{"protocolVersion":"\ud800"}"#)
            .unwrap()
            .ends_with("the server needs upgrading."));
        assert!(msg(r#"{"protocolVersion":"!"}"#)
            .unwrap()
            .ends_with("`npm i -g byollm@latest`."));
        assert!(msg(r#"[]"#)
            .unwrap()
            .contains("declared no protocol version"));
        let refusal = check_protocol_version(&json::parse("5").unwrap()).unwrap();
        assert_eq!(
            refusal.to_json(),
            r#"{"error":"unsupported-protocol-version","message":"this request declared no protocol version. Upgrade the daemon: `npm i -g byollm@latest`.","supported":["2"],"minimum":"2"}"#
        );
    }

    #[test]
    fn describe_bytes_rounds_up() {
        assert_eq!(describe_bytes(0.0), "0.0 MB");
        assert_eq!(describe_bytes(6815745.0), "6.6 MB");
        assert_eq!(describe_bytes(f64::INFINITY), "Infinity MB");
    }

    #[test]
    fn error_table() {
        assert_eq!(ErrorCode::ALL.len(), 12);
        assert_eq!(
            ErrorCode::parse("clock-skew").map(ErrorCode::status),
            Some(401)
        );
        assert_eq!(ErrorCode::DaemonBelowFloor.status(), 426);
    }

    #[test]
    fn sealed_outcome() {
        let ok = r#"{"outcome":{"outcome":"ok","text":"","artifactUrl":" https://x.example/a\n "},"ran":{"model":"m","backendClass":"http","durationMs":0}}"#;
        let SealedOutcomeResult::Ok { doc, outcome } = parse_sealed_outcome(ok, &basic_url_ok)
        else {
            panic!()
        };
        let mut text = String::new();
        outcome.write_json(&doc, &mut text);
        assert!(
            text.contains(r#""artifactUrl":"https://x.example/a""#),
            "{text}"
        );
        for bad in [
            "nope",
            r#"{"outcome":{"outcome":"ok"},"ran":{"model":"m","backendClass":"http","durationMs":0}}"#,
            r#"{"outcome":{"outcome":"ok","text":""},"ran":{"model":"m","backendClass":"http","durationMs":-1}}"#,
            r#"{"outcome":{"outcome":"done"},"ran":{"model":"m","backendClass":"http","durationMs":0}}"#,
        ] {
            assert!(
                matches!(
                    parse_sealed_outcome(bad, &basic_url_ok),
                    SealedOutcomeResult::Refused(_)
                ),
                "{bad}"
            );
        }
    }
}
