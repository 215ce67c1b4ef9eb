//! byollm-server-native: the Rust core of a byte-compatible `@byollm/server`.
//!
//! Every module below is plain Rust, testable with `cargo test` alone. Only
//! `binding` (compiled with the `node` feature) knows about Node-API.

// --- encodings and keys
pub mod b64;
pub mod fingerprint;
pub mod keys;
pub mod site_keys;

// --- envelopes, request signatures, identifiers
pub mod envelope;
pub mod ids;
pub mod secretbox;
pub mod signing;

// --- protocol rules
pub mod audience;
pub mod json;
pub mod kinds;
pub mod wire;

// --- the in-memory store, and the direct lane served on it
pub mod chores;
pub mod direct;
pub mod engine;
pub mod sources;
pub mod store;

// --- what operators watch
pub mod metrics;

#[cfg(feature = "node")]
mod binding;

// The WebAssembly binding behind `edge/` (scripts/build-wasm.mjs).
#[cfg(feature = "wasm")]
mod binding_wasm;
