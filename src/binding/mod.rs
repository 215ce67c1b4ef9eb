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
mod store;
mod strings;
mod tasks;

use napi_derive::napi;

/// Version of the native core, for diagnostics.
#[napi(catch_unwind)]
pub fn native_version() -> String {
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
