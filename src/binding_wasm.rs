//! The WebAssembly binding behind `edge/` (feature `wasm`).
//!
//! Why a hand-rolled ABI and not wasm-bindgen: the edge module only needs a
//! handful of calls that take and return strings, so one dispatcher over
//! UTF-8 JSON buffers is enough. It keeps the build to `cargo build --target
//! wasm32-unknown-unknown` (no `wasm-bindgen-cli` pinned to the crate version,
//! which would have to be compiled in CI on every fresh machine) and the JS
//! glue to one small, dependency-free file that runs in Deno, Workers and
//! browsers alike. A wasm-bindgen build of the same operations measured no
//! smaller (`.wasm` gzipped +1.3 %, glue 4.2 against 2.3 KB gzipped) and no
//! faster to start (1.01–1.16x the cold start); docs/edge.md has the table.
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

use std::cell::RefCell;

use crate::envelope::{self, Context, Expected, SealedEnvelope, Text};
use crate::fingerprint;
use crate::ids;
use crate::json::{self, Doc, JsStr, Node, NodeId};
use crate::keys::{self, KeyHandle, PublicIdentity, StoredKeys, MAX_SAFE_INTEGER};
use crate::signing::{self, RequestSignature};
use crate::site_keys;

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
pub(crate) extern "C" fn bx_alloc(len: usize) -> *mut u8 {
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
pub(crate) unsafe extern "C" fn bx_free(ptr: *mut u8, len: usize) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: guaranteed by the caller (see above): same allocation, same capacity.
    let mut buf = unsafe { Vec::from_raw_parts(ptr, 0, len) };
    // Arguments carry site keys and plaintexts: wiped (the whole capacity)
    // before the allocator reuses the memory.
    zeroize::Zeroize::zeroize(&mut buf);
}

/// Runs one operation; see the module documentation.
///
/// # Safety
/// Both (ptr, len) pairs must describe readable memory (buffers from
/// [`bx_alloc`] that the host filled), or have a zero length.
#[no_mangle]
pub(crate) unsafe extern "C" fn bx_call(
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
        Ok(answer) => (0, answer),
        Err(message) => (1, json::json_string(&message)),
    };
    RESULT.with(|r| {
        let mut last = r.borrow_mut();
        zeroize::Zeroize::zeroize(&mut *last);
        *last = text.into_bytes();
    });
    status
}

/// Wipes the last answer (it may be a plaintext or key material) once the
/// host has read it.
#[no_mangle]
pub(crate) extern "C" fn bx_result_clear() {
    RESULT.with(|r| zeroize::Zeroize::zeroize(&mut *r.borrow_mut()));
}

/// Where the last answer starts.
#[no_mangle]
pub(crate) extern "C" fn bx_result_ptr() -> *const u8 {
    RESULT.with(|r| r.borrow().as_ptr())
}

/// How long the last answer is.
#[no_mangle]
pub(crate) extern "C" fn bx_result_len() -> usize {
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

/// A JSON text on success, an error message otherwise.
type Outcome = Result<String, String>;

/// Decodes the operation name and its JSON argument array, then runs it.
/// Pure Rust: the unit tests drive it directly.
///
/// The arguments are read with the core's `JSON.parse`-compatible reader, so a
/// string holding a lone UTF-16 surrogate (which `JSON.stringify` writes as a
/// `\ud800` escape) reaches the core exactly, and answers are written the same
/// way back.
pub(crate) fn call(op: &[u8], args: &[u8]) -> Outcome {
    let op = std::str::from_utf8(op).map_err(|_| "operation name is not UTF-8".to_string())?;
    let text = std::str::from_utf8(args).map_err(|_| format!("{op}: arguments are not UTF-8"))?;
    let mut doc = json::parse(text).map_err(|e| format!("{op}: arguments are not JSON ({e})"))?;
    let Node::Array(items) = doc.node(doc.root()).clone() else {
        doc.wipe();
        return Err(format!("{op}: arguments must be a JSON array"));
    };
    let a = Args {
        op,
        doc: &doc,
        items,
    };
    let outcome = run(op, &a);
    // The arguments may hold site keys and plaintexts.
    doc.wipe();
    outcome
}

fn run(op: &str, a: &Args<'_>) -> Outcome {
    match op {
        "ping" => Ok(json::json_string("pong")),
        // Lets the JS tests prove that a panic (a trap on wasm32) reaches
        // callers as an ordinary Error and that the glue recovers with a fresh
        // instance. Nothing else can reach a panic on purpose.
        "__panicForTests" => panic!("deliberate panic for the trap-recovery test"),
        // ---- keys
        "generateKeys" => Ok(StoredKeys::generate(a.integer(0, "now")?).to_json()),
        "publicIdentityOf" => Ok(a.keys(0)?.public_identity().to_json()),
        "verifyPublicIdentity" => Ok(boolean(
            a.public_identity(0)
                .is_some_and(|id| keys::verify_public_identity(&id)),
        )),
        "fingerprint" => Ok(json::json_string(&fingerprint::key_id(
            a.str(0, "identityPublic")?,
        ))),
        "formatSiteKeys" => Ok(json::json_string(&site_keys::format_site_keys(&a.keys(0)?))),
        "siteKeysFromEnvValue" => {
            let variable = a.str(0, "variable")?;
            let value = match a.node(1) {
                Node::Null => None,
                Node::String(s) => Some(s.as_str()),
                _ => return Err(format!("{op}: value must be a string or null")),
            };
            site_keys::site_keys_from_env(variable, value)
                .map(|k| k.to_json())
                .map_err(|e| e.to_string())
        }
        // ---- envelopes
        "seal" => seal(a),
        "open" => open(a),
        // ---- request signatures
        "canonicalRequest" => Ok(json::json_string(&signing::canonical_request(
            a.str(0, "endpoint")?,
            a.str(1, "runnerId")?,
            a.number(2, "issuedAt")?,
            a.str(3, "body")?,
        ))),
        "signRequest" => sign_request(a, false),
        "signSiteRequest" => sign_request(a, true),
        "verifyRequest" => verify_request(a, false),
        "verifySiteRequest" => verify_request(a, true),
        // ---- ids and secrets
        "generateDeviceCode" => Ok(json::json_string(&ids::generate_device_code())),
        "generateUserCode" => Ok(json::json_string(&ids::generate_user_code())),
        "generateRunnerId" => Ok(json::json_string(&ids::generate_runner_id())),
        "generateJobId" => Ok(json::json_string(&ids::generate_job_id())),
        "generateLeaseId" => Ok(json::json_string(&ids::generate_lease_id())),
        "hashSecret" => Ok(json::json_string(&ids::hash_secret(a.str(0, "secret")?))),
        "secretsMatch" => Ok(boolean(ids::secrets_match(a.str(0, "a")?, a.str(1, "b")?))),
        "normalizeUserCode" => Ok(json::json_string(&ids::normalize_user_code(
            a.str(0, "input")?,
        ))),
        _ => Err(format!("unknown operation {op:?}")),
    }
}

/// `seal(plaintext, senderKeys, recipientEncryptionPublic, context)`.
/// Like the reference, only the sender's `identityPrivate` is read.
fn seal(a: &Args<'_>) -> Outcome {
    let plaintext = a.js_str(0, "plaintext")?;
    let text = match plaintext.lone_utf16() {
        Some(units) => Text::Utf16(units),
        None => Text::Utf8(plaintext.as_str()),
    };
    let sender = a.field_str(1, "identityPrivate", "senderKeys.identityPrivate")?;
    let recipient = a.str(2, "recipientEncryptionPublic")?;
    let context = Context {
        job_id: a.field_str(3, "jobId", "context.jobId")?.to_string(),
        sender_key_id: a
            .field_str(3, "senderKeyId", "context.senderKeyId")?
            .to_string(),
        recipient_key_id: a
            .field_str(3, "recipientKeyId", "context.recipientKeyId")?
            .to_string(),
        deadline_at: a.field_num(3, "deadlineAt", "context.deadlineAt")?,
        direction: a
            .field_str(3, "direction", "context.direction")?
            .to_string(),
    };
    let sealed =
        envelope::seal_with_keys(text, sender, recipient, &context).map_err(|e| e.to_string())?;
    Ok(sealed.to_json())
}

/// `open(envelope, recipientKeys, senderIdentityPublic, expected)`: failures
/// are answers (`{ok:false, reason}`), never errors, as in the reference.
fn open(a: &Args<'_>) -> Outcome {
    let text_or = |i, name, or: &str| a.opt_field_str(i, name).unwrap_or(or).to_string();
    // A field of the wrong type never equals what is expected: a sentinel no
    // real key id or direction can be keeps the reference's "not-for-us".
    const ABSENT: &str = "\u{0}absent";
    let envelope = SealedEnvelope {
        ciphertext: text_or(0, "ciphertext", ""),
        recipient_key_id: text_or(0, "recipientKeyId", ABSENT),
        sender_key_id: text_or(0, "senderKeyId", ABSENT),
        direction: text_or(0, "direction", ABSENT),
        deadline_at: a.opt_field_num(0, "deadlineAt").unwrap_or(f64::NAN),
    };
    let expected = Expected {
        job_id: text_or(3, "jobId", ABSENT),
        sender_key_id: text_or(3, "senderKeyId", ABSENT),
        recipient_key_id: text_or(3, "recipientKeyId", ABSENT),
        direction: text_or(3, "direction", ABSENT),
    };
    let private = a.opt_field_str(1, "encryptionPrivate").unwrap_or("");
    let sender = a.str(2, "senderIdentityPublic").unwrap_or("");
    Ok(
        match envelope::open_with_keys(&envelope, private, sender, &expected) {
            Ok(mut plaintext) => {
                let mut out = String::from("{\"ok\":true,\"plaintext\":");
                plaintext.write_json(&mut out);
                plaintext.wipe();
                out.push('}');
                out
            }
            Err(reason) => format!("{{\"ok\":false,\"reason\":\"{}\"}}", reason.as_str()),
        },
    )
}

/// The endpoint as signed: the site plane's namespacing comes from the core.
fn endpoint_of(a: &Args<'_>, i: usize, site: bool) -> Result<String, String> {
    let endpoint = a.str(i, "endpoint")?;
    Ok(if site {
        signing::site_endpoint(endpoint)
    } else {
        endpoint.to_string()
    })
}

/// `signRequest(keys, endpoint, runnerId, issuedAt, body)` (or the site
/// plane's, with the site id as runnerId): the signature text. The glue
/// returns the caller's own runnerId and issuedAt beside it.
fn sign_request(a: &Args<'_>, site: bool) -> Outcome {
    let handle = KeyHandle::new(a.keys(0)?).map_err(|e| format!("{}: {e}", a.op))?;
    let sig = signing::sign_request(
        &handle,
        &endpoint_of(a, 1, site)?,
        a.str(2, "runnerId")?,
        a.number(3, "issuedAt")?,
        a.str(4, "body")?,
    );
    Ok(json::json_string(&sig.signature))
}

/// `verifyRequest(identityPublic, endpoint, body, signature, now, maxSkewMs)`:
/// `null`, `"stale"` or `"bad-signature"`.
fn verify_request(a: &Args<'_>, site: bool) -> Outcome {
    let key = keys::verifying_key(a.str(0, "identityPublic")?);
    let signature = RequestSignature {
        // A missing field makes the reference's canonical text or clock
        // arithmetic differ (NaN is never stale), so it ends as bad-signature.
        runner_id: a.opt_field_str(3, "runnerId").unwrap_or("").to_string(),
        issued_at: a.opt_field_num(3, "issuedAt").unwrap_or(f64::NAN),
        signature: a.opt_field_str(3, "signature").unwrap_or("").to_string(),
    };
    let failure = signing::verify_request(
        key.as_ref(),
        &endpoint_of(a, 1, site)?,
        a.str(2, "body")?,
        &signature,
        a.number(4, "now")?,
        a.number(5, "maxSkewMs")?,
    );
    Ok(match failure {
        None => "null".to_string(),
        Some(f) => json::json_string(f.as_str()),
    })
}

fn boolean(b: bool) -> String {
    (if b { "true" } else { "false" }).to_string()
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

    fn js_str(&self, i: usize, name: &str) -> Result<&JsStr, String> {
        match self.node(i) {
            Node::String(s) => Ok(s),
            _ => Err(format!("{}: {name} must be a string", self.op)),
        }
    }

    fn str(&self, i: usize, name: &str) -> Result<&str, String> {
        self.js_str(i, name).map(JsStr::as_str)
    }

    fn number(&self, i: usize, name: &str) -> Result<f64, String> {
        match self.node(i) {
            Node::Number(n) => Ok(*n),
            _ => Err(format!("{}: {name} must be a number", self.op)),
        }
    }

    /// Field `key` of object argument `i`, when it is a string.
    fn opt_field_str(&self, i: usize, key: &str) -> Option<&str> {
        let obj = *self.items.get(i)?;
        let id = self.doc.get(obj, key)?;
        self.doc.str(id).map(JsStr::as_str)
    }

    fn opt_field_num(&self, i: usize, key: &str) -> Option<f64> {
        let obj = *self.items.get(i)?;
        match self.doc.node(self.doc.get(obj, key)?) {
            Node::Number(n) => Some(*n),
            _ => None,
        }
    }

    fn field_str(&self, i: usize, key: &str, name: &str) -> Result<&str, String> {
        self.opt_field_str(i, key)
            .ok_or_else(|| format!("{}: {name} must be a string", self.op))
    }

    fn field_num(&self, i: usize, key: &str, name: &str) -> Result<f64, String> {
        self.opt_field_num(i, key)
            .ok_or_else(|| format!("{}: {name} must be a number", self.op))
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
    use serde_json::{json, Value};

    /// Runs an operation and reads its answer back as JSON.
    fn run(op: &str, args: &str) -> Result<Value, String> {
        call(op.as_bytes(), args.as_bytes()).map(|text| {
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{op} answered bad JSON {text:?}: {e}"))
        })
    }

    #[test]
    fn unknown_operations_and_bad_arguments_are_errors_not_panics() {
        assert_eq!(run("ping", "[]"), Ok(json!("pong")));
        assert!(run("nope", "[]").unwrap_err().contains("unknown operation"));
        assert!(run("ping", "{").unwrap_err().contains("not JSON"));
        assert!(run("ping", "{}").unwrap_err().contains("JSON array"));
        assert!(call(&[0xff], b"[]").is_err());
        assert!(call(b"ping", &[0xff]).is_err());
    }

    /// `bx_call` as the host makes it: its status.
    fn host_call(op: &[u8], args: &[u8]) -> u32 {
        // SAFETY: both slices are readable for their lengths.
        unsafe { bx_call(op.as_ptr(), op.len(), args.as_ptr(), args.len()) }
    }

    #[test]
    fn the_abi_round_trips_through_the_result_buffer() {
        assert_eq!(host_call(b"ping", b"[]"), 0);
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

    #[test]
    fn seal_then_open_round_trips_even_a_lone_surrogate() {
        let id = run(
            "fingerprint",
            r#"["Q2P-JjbFOWxxaBF6axF_DKGNfBmZOcuZZvbcOTKgM_8"]"#,
        )
        .unwrap();
        let ctx = json!({"jobId": "j1", "senderKeyId": id, "recipientKeyId": id,
                         "deadlineAt": 1767312000000u64, "direction": "payload"});
        // JSON.stringify writes a lone surrogate as this escape.
        let args =
            format!(r#"["a\ud800b",{SITE},"NJxshyQhdZgYYiy-jmLS2il4TnsHIR2fd5f47qDmGUk",{ctx}]"#);
        let sealed = run("seal", &args).unwrap();
        assert_eq!(sealed["deadlineAt"], json!(1767312000000u64));
        assert_eq!(sealed["direction"], "payload");
        let expected =
            json!({"jobId": "j1", "senderKeyId": id, "recipientKeyId": id, "direction": "payload"});
        let open_args = format!(
            r#"[{sealed},{SITE},"Q2P-JjbFOWxxaBF6axF_DKGNfBmZOcuZZvbcOTKgM_8",{expected}]"#
        );
        let text = call(b"open", open_args.as_bytes()).unwrap();
        assert_eq!(text, r#"{"ok":true,"plaintext":"a\ud800b"}"#);
        let wrong = open_args.replace(r#""direction":"payload"}]"#, r#""direction":"result"}]"#);
        assert_eq!(
            run("open", &wrong).unwrap(),
            json!({"ok": false, "reason": "not-for-us"})
        );
        // Garbage envelopes are refusals, not errors.
        assert_eq!(
            run("open", "[{},null,5,{}]").unwrap(),
            json!({"ok": false, "reason": "unopenable"})
        );
        assert!(run("seal", &format!(r#"["x",{SITE},"short",{ctx}]"#))
            .unwrap_err()
            .contains("32 bytes"));
    }

    #[test]
    fn request_signatures_verify_and_refuse() {
        let sig = run(
            "signRequest",
            &format!(r#"[{SITE},"claim","r1",1767225660000,"{{}}"]"#),
        )
        .unwrap();
        let verify = |now: u64, body: &str| {
            run(
                "verifyRequest",
                &format!(
                    r#"["Q2P-JjbFOWxxaBF6axF_DKGNfBmZOcuZZvbcOTKgM_8","claim","{body}",{{"runnerId":"r1","issuedAt":1767225660000,"signature":{sig}}},{now},120000]"#
                ),
            )
            .unwrap()
        };
        assert_eq!(verify(1767225660000, "{}"), Value::Null);
        assert_eq!(verify(1767225660000, "[]"), json!("bad-signature"));
        assert_eq!(verify(1767226660000, "{}"), json!("stale"));
        let canonical = run("canonicalRequest", r#"["claim","r1",1767225660000,""]"#).unwrap();
        assert!(canonical
            .as_str()
            .is_some_and(|c| c.starts_with("byollm/v1/request\nclaim\nr1\n1767225660000\n")));
    }

    #[test]
    fn the_answer_is_wiped_once_read_and_secret_strings_after_each_call() {
        assert_eq!(host_call(b"generateKeys", b"[1767225600000]"), 0);
        assert!(bx_result_len() > 0);
        bx_result_clear();
        assert_eq!(bx_result_len(), 0);
        RESULT.with(|r| assert!(r.borrow().iter().all(|&b| b == 0)));

        let mut doc =
            json::parse(r#"[{"identityPrivate":"MC4CAQAwBQYDK2VwBCIEIsecret"},"plain \ud800"]"#)
                .unwrap();
        doc.wipe();
        for id in 0..doc.len() as json::NodeId {
            if let Node::String(s) = doc.node(id) {
                assert!(s.as_str().is_empty(), "{:?}", s.as_str());
            }
            if let Node::Object(members) = doc.node(id) {
                assert!(members.iter().all(|(k, _)| k.as_str().is_empty()));
            }
        }
    }

    #[test]
    fn ids_and_secrets() {
        let job = run("generateJobId", "[]").unwrap();
        assert_eq!(job.as_str().map(str::len), Some(36));
        assert_ne!(job, run("generateJobId", "[]").unwrap());
        assert!(run("generateRunnerId", "[]")
            .unwrap()
            .as_str()
            .is_some_and(|r| r.starts_with("runner_")));
        assert_eq!(
            run("hashSecret", r#"["abc"]"#).unwrap(),
            json!("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        assert_eq!(
            run("secretsMatch", r#"["ab","zz"]"#).unwrap(),
            Value::Bool(false)
        );
        assert_eq!(
            run("normalizeUserCode", r#"["abcdefgh"]"#).unwrap(),
            json!("ABCD-EFGH")
        );
        let err = run("siteKeysFromEnvValue", r#"["BYOLLM_SITE_KEYS",null]"#).unwrap_err();
        assert!(err.starts_with("BYOLLM_SITE_KEYS is not set."));
    }
}
