#!/usr/bin/env node
// Builds the WebAssembly fallback of the Node binding, the way napi-rs builds
// one: `napi build --target wasm32-wasip1-threads` writes
// byollm-server-native.wasm32-wasi.wasm and its loaders
// (byollm-server-native.wasi.cjs, wasi-worker.mjs) next to index.js, which
// loads them when no native binary fits the machine or NAPI_RS_FORCE_WASI is
// set (docs/distribution.md).
//
//   node scripts/build-wasi.mjs          (npm run build:wasi; part of npm run build)
//
// Needs cargo, the wasm32-wasip1-threads target (added with rustup when
// missing) and a C compiler for wasm32-wasi, for SQLite (the durable store):
// WASI_SDK_PATH when it is set (napi then uses that wasi-sdk), else zig, from
// its PyPI package `ziglang`, installed with pip into target/xtools/zig on the
// first build (about 10 s and 60 MB downloaded, 410 MB on disk). ZIG names
// another zig. A separate target dir keeps this build from waiting on (or
// invalidating) the native build's lock and artifacts.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { rustProblems } from "./check-rust.mjs";
import { xtools, zigBinary } from "./xtools.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const TARGET = "wasm32-wasip1-threads";
const BINARY = "byollm-server-native";

function run(cmd, args, env = process.env) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", env });
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
}

function fail(message) {
  console.error(`byollm-server-native build: ${message}`);
  process.exit(1);
}

const problems = rustProblems();
if (problems.length) {
  for (const p of problems) console.error(`byollm-server-native build: ${p}`);
  process.exit(1);
}

const targetInstalled = () => {
  const r = spawnSync("rustc", ["--print", "target-libdir", "--target", TARGET], { encoding: "utf8" });
  return r.status === 0 && existsSync(r.stdout.trim());
};
if (!targetInstalled()) {
  console.log(`build-wasi: adding the ${TARGET} target with rustup`);
  const r = spawnSync("rustup", ["target", "add", TARGET], { stdio: "inherit" });
  if (r.status !== 0) fail(`the ${TARGET} target is missing and rustup could not add it: install Rust with rustup (https://rustup.rs) and run \`rustup target add ${TARGET}\`.`);
}

const env = { ...process.env, CARGO_TARGET_DIR: join(root, "target", "wasi") };
if (!process.env.WASI_SDK_PATH && !process.env.CC_wasm32_wasip1_threads) {
  // cc (the crate that compiles SQLite) passes clang a --target=wasm32-wasip1-threads
  // zig does not know; zig's own name for it is wasm32-wasi with the threads
  // target features, which the Rust objects are built with too (a shared memory
  // links only objects that have them).
  let zig;
  try {
    zig = zigBinary();
  } catch (error) {
    fail(`SQLite's C source needs a C compiler for WebAssembly: ${error.message}. Set ZIG to a zig binary, or WASI_SDK_PATH to a wasi-sdk.`);
  }
  mkdirSync(xtools, { recursive: true });
  const cc = join(xtools, "zig-wasi-cc");
  writeFileSync(
    cc,
    `#!/bin/sh\n# Written by scripts/build-wasi.mjs: zig's clang for wasm32-wasip1-threads objects.\n` +
      `for a; do shift; case "$a" in --target=*) ;; *) set -- "$@" "$a" ;; esac; done\n` +
      `exec ${JSON.stringify(zig)} cc -target wasm32-wasi -mcpu=generic+atomics+bulk_memory+mutable_globals "$@"\n`,
  );
  const ar = join(xtools, "zig-ar");
  writeFileSync(ar, `#!/bin/sh\nexec ${JSON.stringify(zig)} ar "$@"\n`);
  chmodSync(cc, 0o755);
  chmodSync(ar, 0o755);
  env.CC_wasm32_wasip1_threads = cc;
  env.AR_wasm32_wasip1_threads = ar;
}

const napi = join(root, "node_modules", "@napi-rs", "cli", "dist", "cli.js");
run(process.execPath, [napi, "build", "--platform", "--release", "--features", "node", "--esm", "--target", TARGET], env);

// napi also writes a copy with DWARF and names, which its loader prefers to the
// release one when present; the published package never has it (napi leaves it
// out), so neither does a checkout: the tests run what ships.
rmSync(join(root, `${BINARY}.wasm32-wasi.debug.wasm`), { force: true });
const wasm = join(root, `${BINARY}.wasm32-wasi.wasm`);
console.log(`build-wasi: ${BINARY}.wasm32-wasi.wasm ${(statSync(wasm).size / 1024).toFixed(1)} KB`);
