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
pub mod store;

#[cfg(feature = "node")]
mod binding;

// mimalloc for the addon: the store's many small, long-lived allocations and
// the chores thread's cross-thread frees no longer share (and fragment)
// glibc's main arena with node's own allocations. Measured in the full job
// cycle: 8-10% faster with 1,000 stored jobs, 20% with 1,000,000 ended ones,
// and 7% more RSS per stored job (its size classes round up more; see
// docs/performance.md, "What exists for speed"). `cargo test` keeps the
// system allocator.
#[cfg(all(
    feature = "node",
    any(
        all(target_os = "linux", target_env = "gnu"),
        target_os = "macos",
        target_os = "windows"
    )
))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The WebAssembly binding behind `edge/` (scripts/build-wasm.mjs).
#[cfg(feature = "wasm")]
mod binding_wasm;
