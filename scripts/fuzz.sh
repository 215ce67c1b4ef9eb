#!/usr/bin/env bash
# Fuzz the core's untrusted-input entry points (fuzz/: a stable-Rust mutation
# fuzzer; see fuzz/src/driver.rs).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 10 s, every target
#
#   FUZZ_COVERAGE=1   build with SanitizerCoverage counters (coverage-guided;
#                     its own target dir, a full build of the dependencies)
#   FUZZ_SEED=N       PRNG seed (default 24301); runs are reproducible per seed
#   FUZZ_CORPUS=DIR   keep inputs that found new coverage in DIR/<target>/
#
# Saved regression inputs (fuzz/regressions/<target>/) are replayed first.
# Prints executions and crashes per target; exits 1 if anything crashed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-10}"
shift || true
targets=("$@")

cd "$root/fuzz"
if [[ "${FUZZ_COVERAGE:-0}" == "1" ]]; then
  # --target keeps the instrumentation off build scripts and proc macros.
  triple="$(rustc -vV | sed -n 's/^host: //p')"
  export CARGO_TARGET_DIR="$root/fuzz/target-cov"
  RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=3 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters" \
    cargo build --quiet --target "$triple"
  bin="$CARGO_TARGET_DIR/$triple/debug/byollm-fuzz"
else
  # The main crate's target dir and the host triple named as `napi build
  # --platform` and npm test's cargo test name it: the dependencies they
  # compiled (target/<triple>/debug) are reused.
  triple="$(rustc -vV | sed -n 's/^host: //p')"
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
  cargo build --quiet --target "$triple"
  bin="$CARGO_TARGET_DIR/$triple/debug/byollm-fuzz"
fi

if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <("$bin" list)
fi

status=0
for t in "${targets[@]}"; do
  if [[ -d "$root/fuzz/regressions/$t" ]]; then
    "$bin" replay "$t" "$root/fuzz/regressions/$t" || status=1
  fi
done

echo "fuzz: ${secs}s per target, seed ${FUZZ_SEED:-24301}, coverage ${FUZZ_COVERAGE:-0}"
args=(--secs "$secs" --seed "${FUZZ_SEED:-24301}")
if [[ -n "${FUZZ_CORPUS:-}" ]]; then args+=(--corpus "$FUZZ_CORPUS"); fi
for t in "${targets[@]}"; do
  "$bin" run "$t" "${args[@]}" | grep -v '^total' || status=1
done
exit "$status"
