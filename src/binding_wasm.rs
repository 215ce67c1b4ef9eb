//! The WebAssembly binding behind `edge/` (feature `wasm`).
//!
//! Why a hand-rolled ABI and not wasm-bindgen: the edge module only needs a
//! handful of calls that take and return strings, so one dispatcher over
//! UTF-8 JSON buffers is enough. It keeps the build to `cargo build --target
//! wasm32-unknown-unknown` (no `wasm-bindgen-cli` pinned to the crate version,
//! which would have to be compiled in CI on every fresh machine) and the JS
//! glue to one small, dependency-free file that runs in Deno, Workers and
//! browsers alike.
//!
//! The ABI (all lengths in bytes):
//!
//! * `bx_alloc(len) -> ptr` / `bx_free(ptr, len)`: buffers the host writes
//!   arguments into. A zero length gets a dangling, never-dereferenced pointer.
//! * `bx_call(op_ptr, op_len, args_ptr, args_len) -> status`: runs operation
//!   `op` (ASCII name) over `args` (a JSON array of arguments) and keeps the
//!   answer, a JSON text, until the next call; `status` is 0 for a value and 1
//!   for an error message (a JSON string).
//! * `bx_result_ptr()` / `bx_result_len()`: where that answer lives.
//! * import `env.bx_random(ptr, len)`: fill `len` bytes with cryptographically
//!   secure randomness (the host uses `crypto.getRandomValues`); it backs
//!   `getrandom`'s "custom" source, so every key and nonce the core makes comes
//!   from the host's CSPRNG.
//!
//! Every operation calls the same core functions the Node binding calls; this
//! file only converts JSON to Rust values and back.

use serde_json::{json, Value};
use std::cell::RefCell;

use crate::fingerprint;
use crate::json::{self, Doc, Node, NodeId};
use crate::keys::{self, PublicIdentity, StoredKeys, MAX_SAFE_INTEGER};

// ---------------------------------------------------------------- randomness

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod random {
    #[link(wasm_import_module = "env")]
    extern "C" {
        fn bx_random(ptr: *mut u8, len: usize);
    }

    /// getrandom's custom source. The host cannot fail (getRandomValues either
    /// fills the buffer or throws, and a throw traps the instance), so this
    /// always reports success.
    fn fill(dest: &mut [u8]) -> Result<(), getrandom::Error> {
        if !dest.is_empty() {
            // SAFETY: `dest` is a valid, writable region of linear memory of
            // exactly `dest.len()` bytes for the duration of the call.
            unsafe { bx_random(dest.as_mut_ptr(), dest.len()) };
        }
        Ok(())
    }

    getrandom::register_custom_getrandom!(fill);

    /// The same source for getrandom 0.3+ (uuid's v4 ids), whose custom
    /// backend is this well-known symbol when built with
    /// `--cfg getrandom_backend="custom"`.
    ///
    /// # Safety
    /// Called by getrandom with a writable region of `len` bytes.
    #[no_mangle]
    unsafe extern "Rust" fn __getrandom_v03_custom(
        dest: *mut u8,
        len: usize,
    ) -> Result<(), getrandom04::Error> {
        if len > 0 {
            // SAFETY: getrandom passes a valid writable region of `len` bytes.
            unsafe { bx_random(dest, len) };
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- the ABI

thread_local! {
    // wasm32-unknown-unknown is single-threaded; a thread-local keeps this safe
    // on the host too, where the unit tests below run.
    static RESULT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Hands the host a buffer of `len` bytes to write arguments into.
#[no_mangle]
pub extern "C" fn bx_alloc(len: usize) -> *mut u8 {
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    let ptr = buf.as_mut_ptr();
    std::mem::forget(buf);
    ptr
}

/// Returns a buffer from [`bx_alloc`].
///
/// # Safety
/// `ptr` and `len` must be exactly what one earlier `bx_alloc(len)` returned
/// and received, and the buffer must not be freed twice.
#[no_mangle]
pub unsafe extern "C" fn bx_free(ptr: *mut u8, len: usize) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: guaranteed by the caller (see above): same allocation, same capacity.
    drop(unsafe { Vec::from_raw_parts(ptr, 0, len) });
}

/// Runs one operation; see the module documentation.
///
/// # Safety
/// Both (ptr, len) pairs must describe readable memory (buffers from
/// [`bx_alloc`] that the host filled), or have a zero length.
#[no_mangle]
pub unsafe extern "C" fn bx_call(
    op_ptr: *const u8,
    op_len: usize,
    args_ptr: *const u8,
    args_len: usize,
) -> u32 {
    // SAFETY: guaranteed by the caller.
    let op = unsafe { bytes_at(op_ptr, op_len) };
    // SAFETY: guaranteed by the caller.
    let args = unsafe { bytes_at(args_ptr, args_len) };
    let (status, text) = match call(op, args) {
        Ok(value) => (0, value.to_string()),
        Err(message) => (1, Value::String(message).to_string()),
    };
    RESULT.with(|r| *r.borrow_mut() = text.into_bytes());
    status
}

/// Where the last answer starts.
#[no_mangle]
pub extern "C" fn bx_result_ptr() -> *const u8 {
    RESULT.with(|r| r.borrow().as_ptr())
}

/// How long the last answer is.
#[no_mangle]
pub extern "C" fn bx_result_len() -> usize {
    RESULT.with(|r| r.borrow().len())
}

/// # Safety
/// `ptr` must point at `len` readable bytes unless `len` is zero.
unsafe fn bytes_at<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 || ptr.is_null() {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

// ---------------------------------------------------------------- dispatch

type Outcome = Result<Value, String>;

/// Decodes the operation name and its JSON argument array, then runs it.
/// Pure Rust: the unit tests drive it directly.
///
/// The arguments are read with the core's `JSON.parse`-compatible reader, so a
/// lone UTF-16 surrogate written by `JSON.stringify` (as `\ud800`) arrives
/// exactly as the native addon would see it (U+FFFD in the text).
pub(crate) fn call(op: &[u8], args: &[u8]) -> Outcome {
    let op = std::str::from_utf8(op).map_err(|_| "operation name is not UTF-8".to_string())?;
    let text = std::str::from_utf8(args).map_err(|_| format!("{op}: arguments are not UTF-8"))?;
    let doc = json::parse(text).map_err(|e| format!("{op}: arguments are not JSON ({e})"))?;
    let Node::Array(items) = doc.node(doc.root()).clone() else {
        return Err(format!("{op}: arguments must be a JSON array"));
    };
    let a = Args {
        op,
        doc: &doc,
        items,
    };
    match op {
        "ping" => Ok(json!("pong")),
        // ---- keys
        "generateKeys" => {
            let now = a.integer(0, "now")?;
            to_value(&StoredKeys::generate(now))
        }
        "publicIdentityOf" => to_value(&a.keys(0)?.public_identity()),
        "verifyPublicIdentity" => Ok(Value::Bool(
            a.public_identity(0)
                .is_some_and(|id| keys::verify_public_identity(&id)),
        )),
        "fingerprint" => Ok(Value::String(fingerprint::key_id(
            a.str(0, "identityPublic")?,
        ))),
        _ => Err(format!("unknown operation {op:?}")),
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Outcome {
    serde_json::to_value(v).map_err(|e| format!("could not encode the answer: {e}"))
}

/// Positional arguments of one call, with typed accessors whose errors name
/// the operation and the argument.
struct Args<'a> {
    op: &'a str,
    doc: &'a Doc,
    items: Vec<NodeId>,
}

impl Args<'_> {
    fn node(&self, i: usize) -> &Node {
        const NULL: Node = Node::Null;
        match self.items.get(i) {
            Some(id) => self.doc.node(*id),
            None => &NULL,
        }
    }

    fn str(&self, i: usize, name: &str) -> Result<&str, String> {
        match self.node(i) {
            Node::String(s) => Ok(s.as_str()),
            _ => Err(format!("{}: {name} must be a string", self.op)),
        }
    }

    /// A non-negative integer that a JS number holds exactly (epoch ms).
    fn integer(&self, i: usize, name: &str) -> Result<u64, String> {
        match self.node(i) {
            Node::Number(n)
                if n.is_finite() && n.fract() == 0.0 && *n >= 0.0 && *n <= MAX_SAFE_INTEGER =>
            {
                Ok(*n as u64)
            }
            _ => Err(format!(
                "{}: {name} must be a non-negative integer",
                self.op
            )),
        }
    }

    /// Argument `i` as a document of its own, for the core's parsers that
    /// read a whole JSON value (re-encoding a small object costs little).
    fn sub_doc(&self, i: usize) -> Result<Doc, String> {
        let text = match self.items.get(i) {
            Some(id) => self.doc.to_json(*id),
            None => "null".to_string(),
        };
        json::parse(&text).map_err(|e| format!("{}: {e}", self.op))
    }

    /// A StoredKeys object under the core's strict schema.
    fn keys(&self, i: usize) -> Result<StoredKeys, String> {
        StoredKeys::from_json(&self.sub_doc(i)?).map_err(|e| format!("{}: {e}", self.op))
    }

    /// A PublicIdentity, or None when a field is missing or not a string
    /// (which verification treats as a failed check, never an error).
    fn public_identity(&self, i: usize) -> Option<PublicIdentity> {
        let obj = *self.items.get(i)?;
        let field = |name: &str| {
            let id = self.doc.get(obj, name)?;
            self.doc.str(id).map(|s| s.as_str().to_string())
        };
        Some(PublicIdentity {
            identity: field("identity")?,
            encryption: field("encryption")?,
            encryption_sig: field("encryptionSig")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: &str, args: &str) -> Outcome {
        call(op.as_bytes(), args.as_bytes())
    }

    #[test]
    fn unknown_operations_and_bad_arguments_are_errors_not_panics() {
        assert_eq!(run("ping", "[]"), Ok(json!("pong")));
        assert!(run("nope", "[]").unwrap_err().contains("unknown operation"));
        assert!(run("ping", "{").unwrap_err().contains("not JSON"));
        assert!(run("ping", "{}").unwrap_err().contains("JSON array"));
        assert!(call(&[0xff], b"[]").is_err());
    }

    #[test]
    fn the_abi_round_trips_through_the_result_buffer() {
        let op = b"ping";
        let args = b"[]";
        // SAFETY: both slices are valid for their lengths.
        let status = unsafe { bx_call(op.as_ptr(), op.len(), args.as_ptr(), args.len()) };
        assert_eq!(status, 0);
        // SAFETY: the result buffer is alive until the next bx_call.
        let out = unsafe { bytes_at(bx_result_ptr(), bx_result_len()) };
        assert_eq!(out, b"\"pong\"");
        let p = bx_alloc(16);
        // SAFETY: p came from bx_alloc(16).
        unsafe { bx_free(p, 16) };
        let z = bx_alloc(0);
        // SAFETY: z came from bx_alloc(0).
        unsafe { bx_free(z, 0) };
    }

    const SITE: &str = r#"{"version":1,"identityPublic":"Q2P-JjbFOWxxaBF6axF_DKGNfBmZOcuZZvbcOTKgM_8","identityPrivate":"MC4CAQAwBQYDK2VwBCIEIDZZEz0gcRbA/0EvjU+uL4Wf8TMzRsxUdym3Rr/Yl3z7","encryptionPublic":"NJxshyQhdZgYYiy-jmLS2il4TnsHIR2fd5f47qDmGUk","encryptionPrivate":"MC4CAQAwBQYDK2VuBCIEIKDJQadK3vkw6v83lf2xrLDXETXNMA//14vlSYZCUgRV","encryptionSig":"sCVfmSy4ACDj76PrTckBKaczhSSWESLYA4iNh9lLkTJZR2QX4H41Rf9bRk_mnLs8U7SaIEtdAGUTPM0rhZ2TBA","createdAt":1767225600000}"#;

    #[test]
    fn key_operations_answer_like_the_fixture() {
        let id = run("publicIdentityOf", &format!("[{SITE}]")).unwrap();
        assert_eq!(
            id["identity"],
            "Q2P-JjbFOWxxaBF6axF_DKGNfBmZOcuZZvbcOTKgM_8"
        );
        assert_eq!(
            run("verifyPublicIdentity", &format!("[{id}]")),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run(
                "fingerprint",
                r#"["Q2P-JjbFOWxxaBF6axF_DKGNfBmZOcuZZvbcOTKgM_8"]"#
            ),
            Ok(json!("BYOLLM-EA1K-Z4XJ-89JV-57J7-CG5C-KY87"))
        );
        let fresh = run("generateKeys", "[1767225600000]").unwrap();
        assert_eq!(fresh["createdAt"], 1767225600000u64);
        let fresh_id = run("publicIdentityOf", &format!("[{fresh}]")).unwrap();
        assert_eq!(
            run("verifyPublicIdentity", &format!("[{fresh_id}]")),
            Ok(Value::Bool(true))
        );
    }

    #[test]
    fn malformed_key_input_is_refused_with_a_message() {
        assert_eq!(
            run("verifyPublicIdentity", "[null]"),
            Ok(Value::Bool(false))
        );
        assert_eq!(
            run(
                "verifyPublicIdentity",
                r#"[{"identity":1,"encryption":"a","encryptionSig":"b"}]"#
            ),
            Ok(Value::Bool(false))
        );
        assert!(run("publicIdentityOf", r#"[{"version":2}]"#)
            .unwrap_err()
            .starts_with("publicIdentityOf: not a valid StoredKeys"));
        assert!(run("generateKeys", "[-1]")
            .unwrap_err()
            .contains("non-negative integer"));
        assert!(run("generateKeys", "[1.5]").is_err());
        assert!(run("fingerprint", "[5]")
            .unwrap_err()
            .contains("must be a string"));
    }
}
