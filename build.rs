fn main() {
    // Only the Node binding needs napi's link setup; the core builds as a plain library.
    if std::env::var_os("CARGO_FEATURE_NODE").is_some() {
        napi_build::setup();
    }
}
