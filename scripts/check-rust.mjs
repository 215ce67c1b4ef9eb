#!/usr/bin/env node
// Runs before the addon's build (npm run build:native, which `npm ci` runs
// through `prepare`): without a Rust toolchain napi fails with
// "Internal Error: cargo metadata failed to run" and a stack trace. This says
// what is missing in one line instead.
//
//   node scripts/check-rust.mjs          cargo, at the crate's rust-version
//   node scripts/check-rust.mjs --wasm   the same, plus the wasm32 target
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const WASM = "wasm32-unknown-unknown";
const RUSTUP = "https://rustup.rs";

/** The crate's minimum Rust, from Cargo.toml's `rust-version`. */
export function minimumRust() {
  const m = /^rust-version\s*=\s*"([\d.]+)"/m.exec(readFileSync(join(root, "Cargo.toml"), "utf8"));
  return m ? m[1] : undefined;
}

const older = (a, b) => {
  const [x, y] = [a, b].map((v) => v.split(".").map(Number));
  for (let i = 0; i < 3; i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) < (y[i] ?? 0);
  return false;
};

/** Every problem with the toolchain, one line each; empty when the build can run. */
export function rustProblems({ wasm = false } = {}) {
  const min = minimumRust();
  const cargo = spawnSync("cargo", ["--version"], { encoding: "utf8" });
  if (cargo.error || cargo.status !== 0) {
    const which = min ? `Rust ${min} or newer` : "Rust";
    return [`cargo was not found, and this package builds a Rust addon. Install ${which}: ${RUSTUP} (then \`rustup target add ${WASM}\`), and run the command again.`];
  }
  const problems = [];
  const version = /cargo (\d+\.\d+(?:\.\d+)?)/.exec(cargo.stdout)?.[1];
  if (min && version && older(version, min)) {
    problems.push(`Rust ${version} is older than this crate's rust-version ${min}: update it (\`rustup update\`, or ${RUSTUP}).`);
  }
  if (wasm) {
    const libdir = spawnSync("rustc", ["--print", "target-libdir", "--target", WASM], { encoding: "utf8" });
    const installed = libdir.status === 0 && existsSync(libdir.stdout.trim());
    const rustup = spawnSync("rustup", ["--version"], { encoding: "utf8" });
    if (!installed && (rustup.error || rustup.status !== 0)) {
      problems.push(`the ${WASM} target is missing and there is no rustup to add it: install Rust with rustup (${RUSTUP}), or add the target to your toolchain.`);
    }
  }
  return problems;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  const problems = rustProblems({ wasm: process.argv.includes("--wasm") });
  for (const p of problems) console.error(`byollm-server-native build: ${p}`);
  process.exit(problems.length ? 1 : 0);
}
