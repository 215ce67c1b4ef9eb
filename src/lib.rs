//! byollm-server-native: the Rust core of a byte-compatible `@byollm/server`.
//!
//! Every module below is plain Rust, testable with `cargo test` alone. Only
//! `binding` (compiled with the `node` feature) knows about Node-API.
//!
//! What nothing outside needs is `pub(crate)` (`unreachable_pub`, see
//! Cargo.toml), so the compiler finds dead code in the build that ships, the
//! Node binding's; without it the engine and the stores are reached by tests
//! alone.
#![cfg_attr(not(feature = "node"), allow(dead_code, unused_imports))]

// --- encodings and keys
pub mod b64;
pub mod fingerprint;
pub mod keys;
pub mod site_keys;

// --- envelopes, request signatures, identifiers
pub mod envelope;
pub mod ids;
mod secretbox;
pub mod signing;

// --- protocol rules
pub mod audience;
pub mod json;
pub mod kinds;
mod schema;
mod vocabulary;
pub mod wire;

// --- the stores, the engine that serves them, a job's payload and result
mod chores;
mod engine;
mod payload;
mod result;
mod sources;
mod sql_text;
mod store;

// --- what operators watch
mod metrics;

#[cfg(feature = "node")]
mod binding;

// The WebAssembly binding behind `edge/` (scripts/build-wasm.mjs).
#[cfg(feature = "wasm")]
mod binding_wasm;
