#!/usr/bin/env bash
# Builds the x86_64-unknown-linux-musl addon (Alpine) on a glibc Linux host,
# with the distribution's musl toolchain instead of the release workflow's
# cargo-zigbuild. Not part of `npm test`: a release build takes minutes, and
# the result cannot be loaded by this machine's glibc Node anyway (it is
# tested in an Alpine container by .github/workflows/release.yml).
#
#   scripts/build-musl.sh [OUT_DIR]      default: target/musl-out
#
# Needs: rustup target x86_64-unknown-linux-musl, musl-gcc (Debian: musl-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/musl-out}"
target=x86_64-unknown-linux-musl

rustup target add "$target" >/dev/null
command -v musl-gcc >/dev/null || { echo "musl-gcc not found: apt-get install musl-tools" >&2; exit 1; }

# Rust's musl target links statically by default, and a static binary cannot be
# a Node addon: napi adds `-C target-feature=-crt-static` for musl targets. The
# dynamic link must then find musl's libc.so, not the host's glibc, hence
# musl-gcc as the linker (and as the C compiler, should a dependency build C).
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=musl-gcc
export CC_x86_64_unknown_linux_musl=musl-gcc
# A target dir of its own so this long build holds no lock others wait on.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/musl}"
# Without crt-static, Rust unwinds through the shared libgcc_s. musl-gcc hides
# the host's library folders (rightly: they hold glibc), so the link cannot
# find libgcc_s.so.1. Expose that one file and nothing else. Only its soname
# is recorded; at run time Alpine's own libgcc provides it (node:alpine has it).
gcc_s_dir="$CARGO_TARGET_DIR/musl-libgcc"
mkdir -p "$gcc_s_dir"
ln -sf "$(gcc -print-file-name=libgcc_s.so.1)" "$gcc_s_dir/libgcc_s.so.1"
# RUSTFLAGS replaces .cargo/config.toml's flags (napi build adds its musl flags
# there too, so per-target flags would be ignored): repeat the config's cfg that
# compiles in curve25519-dalek's IFMA backend.
export RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-L$(cd "$gcc_s_dir" && pwd) --cfg curve25519_dalek_backend=\"avx512\""

mkdir -p "$out"
npx napi build --platform --release --features node --esm --target "$target" --output-dir "$out" --no-js --dts musl.d.ts
file="$out/byollm-server-native.linux-x64-musl.node"
rm -f "$out/musl.d.ts"
ls -l "$file"
file "$file" 2>/dev/null || true
# Which C library it needs: the musl loader, never glibc's.
readelf -d "$file" | grep NEEDED || true
echo "size: $(stat -c %s "$file") bytes; gzip: $(gzip -9c "$file" | wc -c) bytes"
