//! The request exports (their types: the generated `index.d.ts`): a body's
//! inspection as the engine makes it, for the tests that hold it to the
//! reference's zod schemas and for the validation benchmark. The validated
//! body and a refusal leave as JSON text (lone surrogates escaped), which
//! `JSON.parse` turns into what zod's `safeParse(...).data` would be, or the
//! refusal the engine answers with.

// `#[napi]` items compile to nothing under `cfg(test)`, leaving their helpers unused there.
#![cfg_attr(test, allow(dead_code))]

use napi::bindgen_prelude::*;
use napi_derive::napi;

use super::crypto::invalid;
use crate::wire::{self, Endpoint, Inspection};

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

/// A body's inspection: the stage it reached (`ok`, `json`, `version`,
/// `schema`), the answer a failed stage gets (its status and JSON body, as
/// the engine sends it), the validated body's JSON text.
#[napi(object, js_name = "Inspection")]
pub(super) struct JsInspection {
    pub stage: String,
    pub status: Option<u32>,
    pub error: Option<String>,
    pub body: Option<String>,
}

/// One parse of the raw body: JSON, protocol version, strict schema (the
/// engine's `wire::inspect_request`).
#[napi(catch_unwind)]
pub(super) fn inspect_request(endpoint: String, raw_body: String) -> Result<JsInspection> {
    let ep = Endpoint::parse(&endpoint)
        .ok_or_else(|| invalid(format!("unknown protocol endpoint: {endpoint}")))?;
    // Request schemas hold no URLs.
    let inspection = wire::inspect_request(ep, &raw_body, &|_| false);
    let stage = inspection.stage().to_owned();
    let error = inspection.error(ep);
    let body = match &inspection {
        Inspection::Ok { doc, body, .. } => {
            let mut text = String::new();
            body.write_json(doc, &mut text);
            Some(text)
        }
        _ => None,
    };
    Ok(JsInspection {
        stage,
        status: error.as_ref().map(|e| u32::from(e.status())),
        error: error.map(|e| e.to_json()),
        body,
    })
}
