//! The protocol-rules exports (their types: the generated `index.d.ts`):
//! request inspection, the version check, the sealed outcome, payload
//! validation, the too-large message, the server-side audience match,
//! provenance, `capabilityFor` and runner availability.
//!
//! Conversions only; the rules live in `json`, `wire`, `kinds`, `audience`.
//! Validated bodies are built straight into JS objects from the validator's
//! output (keys in schema order, strings that hold lone surrogates handed
//! over as exact UTF-16), so JavaScript sees what zod's `safeParse` gives.

// `#[napi]` items compile to nothing under `cfg(test)`, leaving their helpers unused there.
#![cfg_attr(test, allow(dead_code))]

use napi::bindgen_prelude::*;
use napi::{sys, JsString, JsValue};
use napi_derive::napi;

use crate::audience::{
    self, Audience, BackendClass, CapabilityView, OfferScope, ProvenanceInput, RunnerView,
};
use crate::json::{self, Doc, JsStr};
use crate::kinds;
use crate::wire::schema::Out;
use crate::wire::{self, Endpoint, Inspection, SealedOutcomeResult, WireError};

// ------------------------------------------------------------ conversions

fn type_error(message: impl Into<String>) -> Error {
    Error::new(Status::InvalidArg, message.into())
}

fn endpoint(name: &str) -> Result<Endpoint> {
    Endpoint::parse(name).ok_or_else(|| type_error(format!("unknown protocol endpoint: {name}")))
}

/// A JS string with its lone surrogates intact.
struct JsText<'a>(&'a JsStr);

impl ToNapiValue for JsText<'_> {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        match val.0.lone_utf16() {
            Some(units) => Utf16String::to_napi_value(env, Utf16String::from(units.to_vec())),
            None => <&str>::to_napi_value(env, val.0.as_str()),
        }
    }
}

/// A validated value, converted on the way out.
struct OutValue<'a> {
    doc: &'a Doc,
    out: &'a Out,
}

impl ToNapiValue for OutValue<'_> {
    unsafe fn to_napi_value(raw_env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        let env = Env::from_raw(raw_env);
        match val.out {
            Out::Str(id) => match val.doc.str(*id) {
                Some(s) => JsText::to_napi_value(raw_env, JsText(s)),
                None => Null::to_napi_value(raw_env, Null),
            },
            Out::Owned(s) => JsText::to_napi_value(raw_env, JsText(s)),
            Out::Num(n) => f64::to_napi_value(raw_env, *n),
            Out::Bool(b) => bool::to_napi_value(raw_env, *b),
            Out::Arr(items) => {
                let len = u32::try_from(items.len()).map_err(|_| type_error("array too long"))?;
                let mut arr = env.create_array(len)?;
                for (i, item) in items.iter().enumerate() {
                    arr.set(
                        i as u32,
                        OutValue {
                            doc: val.doc,
                            out: item,
                        },
                    )?;
                }
                Array::to_napi_value(raw_env, arr)
            }
            Out::Obj(fields) => {
                let mut obj = Object::new(&env)?;
                for (k, v) in fields {
                    obj.set(
                        k,
                        OutValue {
                            doc: val.doc,
                            out: v,
                        },
                    )?;
                }
                Object::to_napi_value(raw_env, obj)
            }
        }
    }
}

/// A document shared by the parts of a reply that came from it.
pub type SharedDoc = std::rc::Rc<Doc>;

/// One value of a reply object.
pub enum ReplyValue {
    Static(&'static str),
    U32(u32),
    Bool(bool),
    Validated(SharedDoc, Out),
    Error(JsWireError),
    /// A value JavaScript already built.
    Js(sys::napi_value),
    /// The whole reply, already built (the only entry when present).
    Whole(sys::napi_value),
}

/// A plain JS object built field by field, in order, when napi converts
/// the return value (so no JS handle outlives its call).
pub struct Reply(Vec<(&'static str, ReplyValue)>);

impl ToNapiValue for Reply {
    unsafe fn to_napi_value(raw_env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        if let Some((_, ReplyValue::Whole(v))) = val.0.first() {
            return Ok(*v);
        }
        let env = Env::from_raw(raw_env);
        let mut obj = Object::new(&env)?;
        for (key, value) in val.0 {
            match value {
                ReplyValue::Static(s) => obj.set(key, s)?,
                ReplyValue::U32(n) => obj.set(key, n)?,
                ReplyValue::Bool(b) => obj.set(key, b)?,
                ReplyValue::Validated(doc, out) => obj.set(
                    key,
                    OutValue {
                        doc: &doc,
                        out: &out,
                    },
                )?,
                ReplyValue::Error(e) => obj.set(key, e)?,
                ReplyValue::Js(v) | ReplyValue::Whole(v) => {
                    obj.set(key, Unknown::from_raw_unchecked(raw_env, v))?
                }
            }
        }
        Object::to_napi_value(raw_env, obj)
    }
}

/// `WireErrorBody`: `{error, message, supported?, minimum?}`.
#[napi(object, js_name = "WireErrorBody")]
pub struct JsWireError {
    pub error: String,
    #[napi(ts_type = "string")]
    pub message: Either<String, Utf16String>,
    pub supported: Option<Vec<String>>,
    pub minimum: Option<String>,
}

impl From<WireError> for JsWireError {
    fn from(e: WireError) -> Self {
        let (supported, minimum) = match e.version {
            Some(v) => (
                Some(v.supported.iter().map(|s| (*s).to_owned()).collect()),
                Some(v.minimum.to_owned()),
            ),
            None => (None, None),
        };
        let message = match e.message.lone_utf16() {
            Some(units) => Either::B(Utf16String::from(units.to_vec())),
            None => Either::A(e.message.as_str().to_owned()),
        };
        JsWireError {
            error: e.error.as_str().to_owned(),
            message,
            supported,
            minimum,
        }
    }
}

// ------------------------------------------------------------ requests

thread_local! {
    /// Two JavaScript functions of the environment that last asked, held by
    /// references so the hot path skips their lookup: `JSON.parse`, and a
    /// tiny function that builds the whole `{stage: "ok", body}` reply in
    /// JavaScript (object literals are far cheaper there than through
    /// Node-API calls).
    static JS_FNS: std::cell::Cell<Option<(usize, usize, usize)>> = const { std::cell::Cell::new(None) };
}

/// The reply maker's source: constant text, no input ever reaches it.
const OK_REPLY_SOURCE: &str =
    "(function (text) { return { stage: \"ok\", body: JSON.parse(text) }; })";

fn status(code: sys::napi_status) -> Result<()> {
    if code == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(
            Status::GenericFailure,
            format!("napi call failed ({code})"),
        ))
    }
}

unsafe extern "C" fn forget_js_fns(_arg: *mut std::ffi::c_void) {
    JS_FNS.set(None);
}

/// `(JSON.parse, okReply)` of this environment.
fn js_fns(env: &Env) -> Result<(sys::napi_value, sys::napi_value)> {
    let raw_env = env.raw();
    if let Some((cached_env, parse_ref, reply_ref)) = JS_FNS.get() {
        if cached_env == raw_env as usize {
            let mut parse = std::ptr::null_mut();
            let mut reply = std::ptr::null_mut();
            // SAFETY: both references were created in this same environment,
            // and the cleanup hook clears them when it is torn down.
            unsafe {
                status(sys::napi_get_reference_value(
                    raw_env,
                    parse_ref as sys::napi_ref,
                    &mut parse,
                ))?;
                status(sys::napi_get_reference_value(
                    raw_env,
                    reply_ref as sys::napi_ref,
                    &mut reply,
                ))?;
            }
            if !parse.is_null() && !reply.is_null() {
                return Ok((parse, reply));
            }
        }
    }
    let global = env.get_global()?;
    let json_ns: Object = global.get_named_property_unchecked("JSON")?;
    let parse: Unknown = json_ns.get_named_property_unchecked("parse")?;
    let parse = parse.raw();
    let source = env.create_string(OK_REPLY_SOURCE)?;
    let mut reply = std::ptr::null_mut();
    let mut parse_ref = std::ptr::null_mut();
    let mut reply_ref = std::ptr::null_mut();
    // SAFETY: all values belong to `raw_env`; the cleanup hook forgets the
    // cached references when this environment is torn down, so a later
    // environment that happens to reuse the address never sees them.
    unsafe {
        status(sys::napi_run_script(raw_env, source.raw(), &mut reply))?;
        status(sys::napi_create_reference(
            raw_env,
            parse,
            1,
            &mut parse_ref,
        ))?;
        status(sys::napi_create_reference(
            raw_env,
            reply,
            1,
            &mut reply_ref,
        ))?;
        status(sys::napi_add_env_cleanup_hook(
            raw_env,
            Some(forget_js_fns),
            std::ptr::null_mut(),
        ))?;
    }
    JS_FNS.set(Some((
        raw_env as usize,
        parse_ref as usize,
        reply_ref as usize,
    )));
    Ok((parse, reply))
}

/// Call a function with one argument and `undefined` as `this`.
fn call1(env: &Env, f: sys::napi_value, arg: sys::napi_value) -> Result<sys::napi_value> {
    let raw_env = env.raw();
    let mut this = std::ptr::null_mut();
    let mut out = std::ptr::null_mut();
    let args = [arg];
    // SAFETY: all handles belong to `raw_env` and this call's scope.
    unsafe {
        status(sys::napi_get_undefined(raw_env, &mut this))?;
        status(sys::napi_call_function(
            raw_env,
            this,
            f,
            1,
            args.as_ptr(),
            &mut out,
        ))?;
    }
    Ok(out)
}

/// `JSON.parse(text)` in this realm, for text already known to be valid.
fn json_parse(env: &Env, text: JsString<'_>) -> Result<sys::napi_value> {
    let (parse, _) = js_fns(env)?;
    call1(env, parse, text.raw())
}

/// The URL check zod's `z.url()` makes: Node's own `URL.canParse`. Only
/// reached for a sealed outcome's `artifactUrl`.
fn node_url_ok(env: &Env) -> impl Fn(&str) -> bool + '_ {
    move |text: &str| -> bool {
        let can_parse = || -> Result<bool> {
            let global = env.get_global()?;
            // `URL` is a class (a function), so read it without the object
            // type check.
            let url: Object = global.get_named_property_unchecked("URL")?;
            let f: Function<String, bool> = url.get_named_property("canParse")?;
            f.apply(Some(&url), text.to_owned())
        };
        can_parse().unwrap_or(false)
    }
}

/// One parse of the raw body: JSON, protocol version, strict schema.
#[napi(
    catch_unwind,
    ts_args_type = "endpoint: string, rawBody: string",
    ts_return_type = "{ stage: \"ok\"; body: Record<string, unknown> } | { stage: \"json\" | \"version\" | \"schema\"; status: number; error: WireErrorBody }"
)]
pub fn inspect_request(
    env: Env,
    endpoint_name: JsString<'_>,
    raw_body: JsString<'_>,
) -> Result<Reply> {
    let ep = endpoint_of(&env, endpoint_name)?;
    let url_ok = node_url_ok(&env);
    BODY_BUF.with_borrow_mut(|buf| -> Result<Reply> {
        let text = read_utf8(&env, raw_body, buf)?;
        // The daemon's own bodies pass a one-pass, allocation-free check; then
        // V8's JSON.parse builds exactly the validated object.
        if wire::fast::canonical_ok(ep.schema(), text).is_some() {
            // V8 builds the whole reply: `{stage: "ok", body: JSON.parse(text)}`.
            let (_, ok_reply) = js_fns(&env)?;
            let reply = call1(&env, ok_reply, raw_body.raw())?;
            return Ok(Reply(vec![("", ReplyValue::Whole(reply))]));
        }
        inspect_slow(&env, ep, text, raw_body, &url_ok)
    })
}

thread_local! {
    /// The UTF-8 copy of the last body, reused so a request costs no
    /// allocation on the way in.
    static BODY_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Copy a JS string's UTF-8 into `buf` (one call when it fits).
fn read_utf8<'b>(env: &Env, s: JsString<'_>, buf: &'b mut Vec<u8>) -> Result<&'b str> {
    let raw_env = env.raw();
    let mut written = 0usize;
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    // SAFETY: the buffer has `capacity` writable bytes; napi writes at most
    // capacity - 1 plus a NUL and reports how many it wrote.
    unsafe {
        let cap = buf.capacity();
        status(sys::napi_get_value_string_utf8(
            raw_env,
            s.raw(),
            buf.as_mut_ptr().cast(),
            cap,
            &mut written,
        ))?;
        // V8 copies whole characters only: one of up to 4 bytes that did not
        // fit leaves up to 3 bytes of the buffer unused besides the NUL. So
        // the copy is known whole only if more than that was left over.
        if written + 4 >= cap {
            // Possibly cut short: ask for the length and read it whole.
            let mut len = 0usize;
            status(sys::napi_get_value_string_utf8(
                raw_env,
                s.raw(),
                std::ptr::null_mut(),
                0,
                &mut len,
            ))?;
            buf.reserve(len + 1);
            let cap = buf.capacity();
            status(sys::napi_get_value_string_utf8(
                raw_env,
                s.raw(),
                buf.as_mut_ptr().cast(),
                cap,
                &mut written,
            ))?;
        }
        buf.set_len(written);
    }
    // V8 writes well-formed UTF-8 (lone surrogates become U+FFFD).
    std::str::from_utf8(buf).map_err(|_| type_error("body is not UTF-8"))
}

/// The endpoint named by a JS string, without allocating.
fn endpoint_of(env: &Env, name: JsString<'_>) -> Result<Endpoint> {
    let mut buf = [0u8; 16];
    let mut written = 0usize;
    // SAFETY: `buf` has 16 writable bytes.
    status(unsafe {
        sys::napi_get_value_string_utf8(
            env.raw(),
            name.raw(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut written,
        )
    })?;
    let text = std::str::from_utf8(buf.get(..written).unwrap_or(&[])).unwrap_or("");
    // A name that (nearly) filled the buffer may have been cut short, at a
    // character boundary (see `read_utf8`), and names no endpoint.
    let found = if written + 4 >= buf.len() {
        None
    } else {
        Endpoint::parse(text)
    };
    found.ok_or_else(|| type_error(format!("unknown protocol endpoint: {text}")))
}

fn inspect_slow(
    env: &Env,
    ep: Endpoint,
    text: &str,
    raw_body: JsString<'_>,
    url_ok: &dyn Fn(&str) -> bool,
) -> Result<Reply> {
    let inspection = wire::inspect_request(ep, text, url_ok);
    let mut reply = vec![("stage", ReplyValue::Static(inspection.stage()))];
    match inspection {
        // The body as the daemon writes it: V8's own JSON.parse builds the
        // identical object faster than property-by-property calls can.
        Inspection::Ok {
            canonical: true, ..
        } => reply.push(("body", ReplyValue::Js(json_parse(env, raw_body)?))),
        Inspection::Ok { doc, body, .. } => {
            reply.push(("body", ReplyValue::Validated(SharedDoc::new(doc), body)))
        }
        other => {
            if let Some(error) = other.error(ep) {
                reply.push(("status", ReplyValue::U32(u32::from(error.status()))));
                reply.push(("error", ReplyValue::Error(JsWireError::from(error))));
            }
        }
    }
    Ok(Reply(reply))
}

/// The strict schema alone, for `ByollmHandlers.handle(endpoint, body)`
/// callers that already hold JSON text.
#[napi(
    catch_unwind,
    ts_return_type = "{ ok: true; body: Record<string, unknown> } | { ok: false }"
)]
pub fn validate_request_body(env: Env, endpoint_name: String, json_text: String) -> Result<Reply> {
    let ep = endpoint(&endpoint_name)?;
    let url_ok = node_url_ok(&env);
    let validated = json::parse(&json_text)
        .ok()
        .and_then(|doc| wire::validate_doc(ep, &doc, &url_ok).map(|out| (doc, out)));
    Ok(Reply(match validated {
        Some((doc, out)) => vec![
            ("ok", ReplyValue::Bool(true)),
            ("body", ReplyValue::Validated(SharedDoc::new(doc), out)),
        ],
        None => vec![("ok", ReplyValue::Bool(false))],
    }))
}

/// The HTTP layer's version check over JSON text; `null` when accepted.
/// Throws if the text is not JSON (the caller parsed it already).
#[napi(catch_unwind)]
pub fn check_protocol_version(json_text: String) -> Result<Option<JsWireError>> {
    let doc =
        json::parse(&json_text).map_err(|e| type_error(format!("checkProtocolVersion: {e}")))?;
    Ok(wire::check_protocol_version(&doc).map(JsWireError::from))
}

/// The plaintext of a result envelope: `{ok: true, outcome, ran}` or
/// `{ok: false, message}` with the reference's message.
#[napi(
    catch_unwind,
    ts_return_type = "{ ok: true; outcome: Record<string, unknown>; ran: Record<string, unknown> } | { ok: false; message: string }"
)]
pub fn parse_sealed_outcome(env: Env, plaintext: String) -> Result<Reply> {
    let url_ok = node_url_ok(&env);
    Ok(Reply(
        match wire::parse_sealed_outcome(&plaintext, &url_ok) {
            SealedOutcomeResult::Ok { doc, outcome } => {
                let doc = SharedDoc::new(doc);
                let mut reply = vec![("ok", ReplyValue::Bool(true))];
                for key in ["outcome", "ran"] {
                    if let Some(part) = outcome.field(key) {
                        reply.push((key, ReplyValue::Validated(doc.clone(), part.clone())));
                    }
                }
                reply
            }
            SealedOutcomeResult::Refused(message) => vec![
                ("ok", ReplyValue::Bool(false)),
                ("message", ReplyValue::Static(message)),
            ],
        },
    ))
}

// ------------------------------------------------------------ payloads

#[napi(object, js_name = "PayloadCheck")]
pub struct JsPayloadCheck {
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
pub fn validate_payload(kind: Unknown<'_>, payload_json: Option<String>) -> Result<JsPayloadCheck> {
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
            Err(message) => JsPayloadCheck {
                ok: false,
                canonical: None,
                text_length: None,
                size_class: None,
                message: Some(message),
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
fn rule_text(value: Unknown<'_>) -> Result<Option<String>> {
    if value.get_type()? != ValueType::String {
        return Ok(None);
    }
    let units = Utf16String::from_unknown(value)?;
    Ok(String::from_utf16(&units).ok())
}

/// The deadline a claim stub carries (`crate::direct::deadline_for`).
#[napi(catch_unwind)]
pub fn deadline_for(
    deadline_at: Option<f64>,
    claimable_at: Option<f64>,
    ttl_ms: f64,
    now: f64,
) -> f64 {
    crate::direct::deadline_for(deadline_at, claimable_at, ttl_ms, now)
}

/// Whether a fetch may have the payload (`crate::direct::fetch_lease_held`).
#[napi(catch_unwind)]
pub fn fetch_lease_held(
    lease_id: Unknown<'_>,
    lease_runner_id: Unknown<'_>,
    lease_expires_at: f64,
    asked_lease_id: String,
    runner_id: Unknown<'_>,
    now: f64,
) -> Result<bool> {
    Ok(crate::direct::fetch_lease_held(
        rule_text(lease_id)?.as_deref(),
        rule_text(lease_runner_id)?.as_deref(),
        lease_expires_at,
        &asked_lease_id,
        rule_text(runner_id)?.as_deref(),
        now,
    ))
}

/// Whether a result is refused before it is opened
/// (`crate::direct::result_lease_refused`); for a job that has a lease.
#[napi(catch_unwind)]
pub fn result_lease_refused(
    lease_id: Unknown<'_>,
    lease_runner_id: Unknown<'_>,
    lease_expires_at: f64,
    asked_lease_id: String,
    runner_id: Unknown<'_>,
    now: f64,
) -> Result<bool> {
    Ok(crate::direct::result_lease_refused(
        rule_text(lease_id)?.as_deref(),
        rule_text(lease_runner_id)?.as_deref(),
        lease_expires_at,
        &asked_lease_id,
        rule_text(runner_id)?.as_deref(),
        now,
    ))
}

/// The too-large message for `bytes` (the limit is the body cap).
#[napi(catch_unwind)]
pub fn too_large_message(bytes: f64) -> String {
    wire::too_large_message(bytes)
}

// ------------------------------------------------------------ audience

/// Whether `text` is an audience a new job may have (`"private"`, `"team"`).
#[napi(catch_unwind)]
pub fn is_audience(text: String) -> bool {
    Audience::parse(&text).is_some()
}

fn audience_of(s: &str) -> Result<Audience> {
    Audience::parse(s).ok_or_else(|| type_error(format!("unknown audience: {s}")))
}

fn offer_scope_of(s: &str) -> Result<OfferScope> {
    OfferScope::parse(s).ok_or_else(|| type_error(format!("unknown offer scope: {s}")))
}

#[napi(object, js_name = "AudienceJob")]
pub struct JsAudienceJob {
    pub owner: String,
    #[napi(ts_type = "\"private\" | \"team\"")]
    pub audience: String,
    pub audience_allow: Option<Vec<String>>,
}

#[napi(object, js_name = "OfferedCapability")]
pub struct JsOfferedCapability {
    #[napi(ts_type = "\"private\" | \"team\"")]
    pub offer_scope: String,
    pub backend_id: String,
}

/// The server's audience match (claim predicate): `null` when the runner's
/// capability may take the job, else the refusal id.
#[napi(catch_unwind)]
pub fn match_audience_server(
    job: JsAudienceJob,
    capability: JsOfferedCapability,
    runner_owner: String,
) -> Result<Option<String>> {
    let verdict = audience::server_admits(
        &job.owner,
        Audience::matched_as(&job.audience),
        job.audience_allow.as_deref(),
        offer_scope_of(&capability.offer_scope)?,
        &capability.backend_id,
        &runner_owner,
    );
    Ok(verdict.err().map(|r| r.as_str().to_owned()))
}

#[napi(object, js_name = "ProvenanceInput")]
pub struct JsProvenanceInput {
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
pub struct JsResultProvenance {
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
pub fn provenance_for(input: JsProvenanceInput) -> Result<JsResultProvenance> {
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
pub fn capability_for<'a>(caps: Array<'a>, kind: String) -> Result<Either<Object<'a>, Undefined>> {
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
pub struct JsAvailabilityCapability {
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

fn read_runner(obj: &Object<'_>) -> Result<RunnerFields> {
    let revoked_at: Option<Unknown> = obj.get("revokedAt")?;
    let revoked = match revoked_at {
        Some(v) => v.get_type()? != ValueType::Null,
        None => true,
    };
    Ok(RunnerFields {
        owner: obj
            .get("owner")?
            .ok_or_else(|| type_error("runner record without owner"))?,
        revoked,
        last_heartbeat_at: obj.get("lastHeartbeatAt")?.unwrap_or(f64::NAN),
        capabilities: obj.get("capabilities")?.unwrap_or_default(),
    })
}

#[napi(object, js_name = "AvailabilityQuery")]
pub struct JsAvailabilityQuery {
    pub kind: String,
    pub owner: String,
    /// Any spelling: an unknown one is matched as `private`, as the claim would.
    pub audience: Option<String>,
    #[napi(ts_type = "readonly string[]")]
    pub audience_allow: Option<Vec<String>>,
}

#[napi(object, js_name = "RunnerAvailability")]
pub struct JsRunnerAvailability {
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
pub fn runner_availability(
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

/// The full matcher, as the daemon runs it: `daemon.admits` is asked only
/// when the decision reaches it. `null` when allowed, else the refusal id.
#[napi(
    catch_unwind,
    ts_args_type = "job: AudienceJob, daemon: { owner: string; offerScope: \"private\" | \"team\"; cost: \"free\" | \"metered\" | \"subscription\"; spend?: { acknowledged: boolean; ceilingReached?: boolean }; admits: (owner: string) => boolean }"
)]
pub fn match_audience(job: JsAudienceJob, daemon: Object<'_>) -> Result<Option<String>> {
    let owner: String = daemon
        .get("owner")?
        .ok_or_else(|| type_error("daemon.owner is required"))?;
    let scope: String = daemon
        .get("offerScope")?
        .ok_or_else(|| type_error("daemon.offerScope is required"))?;
    let cost: String = daemon
        .get("cost")?
        .ok_or_else(|| type_error("daemon.cost is required"))?;
    let cost = audience::BackendCost::parse(&cost)
        .ok_or_else(|| type_error(format!("unknown cost: {cost}")))?;
    let spend = match daemon.get::<Object>("spend")? {
        Some(spend) => Some(audience::SpendConsent {
            acknowledged: spend.get::<bool>("acknowledged")?.unwrap_or(false),
            ceiling_reached: spend.get::<bool>("ceilingReached")?,
        }),
        None => None,
    };
    let admits_fn: Function<String, bool> = daemon
        .get("admits")?
        .ok_or_else(|| type_error("daemon.admits is required"))?;
    // A throwing predicate cannot unwind through the matcher; remember the
    // error and raise it once the match returns.
    let failure = std::cell::RefCell::new(None);
    let ask = |o: &str| match admits_fn.call(o.to_owned()) {
        Ok(answer) => answer,
        Err(e) => {
            failure.borrow_mut().get_or_insert(e);
            false
        }
    };
    let verdict = audience::match_audience(
        &audience::JobAudience {
            owner: &job.owner,
            audience: audience_of(&job.audience)?,
            audience_allow: job.audience_allow.as_deref(),
        },
        &audience::DaemonOffer {
            owner: &owner,
            offer_scope: offer_scope_of(&scope)?,
            cost,
            spend,
            admits: audience::Admits::Ask(&ask),
        },
    );
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    Ok(verdict.err().map(|r| r.as_str().to_owned()))
}

/// True when `rawBody` is valid for the endpoint **and** canonical: then
/// `JSON.parse(rawBody)` is exactly the validated body, and a caller in
/// JavaScript can skip `inspectRequest` and parse it itself (the fastest way
/// to build the object). False says nothing: call `inspectRequest`.
#[napi(catch_unwind, ts_args_type = "endpoint: string, rawBody: string")]
pub fn is_canonical_request_body(
    env: Env,
    endpoint_name: JsString<'_>,
    raw_body: JsString<'_>,
) -> Result<bool> {
    let ep = endpoint_of(&env, endpoint_name)?;
    BODY_BUF.with_borrow_mut(|buf| -> Result<bool> {
        let text = read_utf8(&env, raw_body, buf)?;
        Ok(wire::fast::canonical_ok(ep.schema(), text).is_some())
    })
}
