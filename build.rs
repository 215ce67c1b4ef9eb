fn main() {
    // `edge`: the edge module's wasm32-unknown-unknown build (scripts/build-wasm.mjs),
    // which has no libc (so no SQLite) and is kept small. The WebAssembly fallback of
    // the Node binding (wasm32-wasip1-threads) is not `edge`: it has the native build's
    // store and crypto tables, and lacks only threads, as every wasm32 target here does.
    println!("cargo::rustc-check-cfg=cfg(edge)");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if arch == "wasm32" && os == "unknown" {
        println!("cargo:rustc-cfg=edge");
    }
    // Only the Node binding needs napi's link setup; the core builds as a plain library.
    if std::env::var_os("CARGO_FEATURE_NODE").is_some() {
        napi_build::setup();
    }
}
