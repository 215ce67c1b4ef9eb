//! The request exports (their types: the generated `index.d.ts`): request
//! inspection, body validation, the canonical-body check and the sealed
//! outcome.
//!
//! Conversions only; the rules live in `json` and `wire`. Validated bodies
//! are built straight into JS objects from the validator's output (keys in
//! schema order, strings that hold lone surrogates handed over as exact
//! UTF-16), so JavaScript sees what zod's `safeParse` gives.

// `#[napi]` items compile to nothing under `cfg(test)`, leaving their helpers unused there.
#![cfg_attr(test, allow(dead_code))]

use napi::bindgen_prelude::*;
use napi::{sys, JsString, JsValue};
use napi_derive::napi;

use crate::json::{Doc, JsStr};
use crate::wire::schema::Out;
use crate::wire::{self, Endpoint, Inspection, SealedOutcomeResult, WireError};

// ------------------------------------------------------------ conversions

pub(super) fn type_error(message: impl Into<String>) -> Error {
    Error::new(Status::InvalidArg, message.into())
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
}

/// A plain JS object built field by field, in order, when napi converts
/// the return value (so no JS handle outlives its call).
pub struct Reply(Vec<(&'static str, ReplyValue)>);

impl ToNapiValue for Reply {
    unsafe fn to_napi_value(raw_env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
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
                ReplyValue::Js(v) => obj.set(key, Unknown::from_raw_unchecked(raw_env, v))?,
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
    let json_ns: Object = env.get_global()?.get_named_property_unchecked("JSON")?;
    let parse: Unknown = json_ns.get_named_property_unchecked("parse")?;
    call1(env, parse.raw(), text.raw())
}

/// The URL check zod's `z.url()` makes: Node's own `URL.canParse`. Only
/// reached for a sealed outcome's `artifactUrl`.
pub(super) fn node_url_ok(env: &Env) -> impl Fn(&str) -> bool + '_ {
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
    // The body is read into the reused buffer and parsed there; only the
    // verdict and the validated parts outlive the borrow.
    let inspection = BODY_BUF.with_borrow_mut(|buf| -> Result<Inspection> {
        Ok(wire::inspect_request(
            ep,
            read_utf8(&env, raw_body, buf)?,
            &url_ok,
        ))
    })?;
    let mut reply = vec![("stage", ReplyValue::Static(inspection.stage()))];
    match inspection {
        // The body as the daemon writes it: V8's own JSON.parse builds the
        // identical object faster than property-by-property calls can.
        Inspection::Ok {
            canonical: true, ..
        } => reply.push(("body", ReplyValue::Js(json_parse(&env, raw_body)?))),
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

thread_local! {
    /// The UTF-8 copy of the last body, reused so a request costs no
    /// allocation on the way in.
    static BODY_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Copy a JS string's UTF-8 into `buf` (one call when it fits).
fn read_utf8<'b>(env: &Env, s: JsString<'_>, buf: &'b mut Vec<u8>) -> Result<&'b str> {
    let raw_env = env.raw();
    let copy = |ptr: *mut u8, cap: usize, written: &mut usize| {
        // SAFETY: `ptr` is null with `cap` 0 (napi then reports the length),
        // or has `cap` writable bytes, of which napi writes at most cap - 1
        // plus a NUL, reporting how many it wrote.
        status(unsafe {
            sys::napi_get_value_string_utf8(raw_env, s.raw(), ptr.cast(), cap, written)
        })
    };
    let mut written = 0usize;
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    copy(buf.as_mut_ptr(), buf.capacity(), &mut written)?;
    // V8 copies whole characters only: one of up to 4 bytes that did not
    // fit leaves up to 3 bytes of the buffer unused besides the NUL. So the
    // copy is known whole only if more than that was left over.
    if written + 4 >= buf.capacity() {
        // Possibly cut short: ask for the length and read it whole.
        let mut len = 0usize;
        copy(std::ptr::null_mut(), 0, &mut len)?;
        buf.reserve(len + 1);
        copy(buf.as_mut_ptr(), buf.capacity(), &mut written)?;
    }
    // SAFETY: napi wrote `written` initialised bytes, fewer than the capacity.
    unsafe { buf.set_len(written) };
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
