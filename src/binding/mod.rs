//! The Node-API layer: conversions, async tasks, error mapping, panic guard.
//! Nothing outside this module knows about JavaScript.
//!
//! Panic guard: every exported function and method is `#[napi(catch_unwind)]`,
//! so a bug in the core surfaces in JavaScript as a thrown `Error` carrying the
//! panic message instead of aborting the host process (a panic unwinding
//! across the C ABI is undefined behaviour, in practice an abort).
//! `__test__/hardening-panic.test.mjs` proves it with the `test-panic`
//! export below and checks every export carries the attribute.

mod crypto;
mod engine;
mod keyring;
mod metrics;
mod protocol;
mod requests;
mod rules;
mod sql_text;
mod store;
mod strings;
mod tasks;

/// Whether a JavaScript string is best read and made as Latin-1 when it is
/// ASCII. In Node's own Node-API, V8 copies a one-byte string's bytes
/// straight across. In the WebAssembly fallback (wasm32-wasip1-threads),
/// Node-API is emnapi's JavaScript, whose Latin-1 calls go one character at a
/// time through a fresh view of the shared memory (the UTF-8 calls copy in
/// bulk), so there every string takes the UTF-8 (or UTF-16) path.
pub(crate) const LATIN1_IS_CHEAP: bool = !cfg!(target_arch = "wasm32");

use napi_derive::napi;

/// Version of the native core, for diagnostics.
#[napi(catch_unwind)]
pub(crate) fn native_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Panics on purpose, so a test can watch the guard turn a panic into a JS
/// `Error`. Only in builds with the `test-panic` feature, never shipped.
#[cfg(feature = "test-panic")]
#[napi(catch_unwind)]
pub fn test_panic(message: String) -> String {
    panic!("test-panic: {message}");
}

/// A panic from inside an object method too: indexing out of range, the
/// shape of bug the house rules forbid on input-derived data.
#[cfg(feature = "test-panic")]
#[napi(catch_unwind)]
pub fn test_panic_index(values: Vec<u32>, at: u32) -> u32 {
    values[at as usize]
}
