//! The Node-API layer: conversions, async tasks, error mapping, panic guard.
//! Nothing outside this module knows about JavaScript.

mod crypto;
mod rules;
mod store;

use napi_derive::napi;

/// Version of the native core, for diagnostics.
#[napi]
pub fn native_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
