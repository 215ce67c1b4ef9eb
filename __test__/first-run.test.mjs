// A newcomer's first commands: building without Rust says what to install in
// one line (not napi's stack trace).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";
import { root } from "./site-harness.mjs";

/** `PATH` without any directory that holds cargo or rustc. */
const pathWithoutRust = () =>
  (process.env.PATH ?? "")
    .split(delimiter)
    .filter((dir) => dir && !existsSync(join(dir, "cargo")) && !existsSync(join(dir, "rustc")))
    .join(delimiter);

const INSTALL_RUST = /^byollm-server-native build: cargo was not found, and this package builds a Rust addon\. Install Rust \d+\.\d+ or newer: https:\/\/rustup\.rs \(then `rustup target add wasm32-unknown-unknown`\), and run the command again\.$/m;

for (const script of ["build:native", "build:debug", "build:wasm"]) {
  test(`without cargo, \`npm run ${script}\` stops with one line that says to install Rust`, () => {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k.toUpperCase() !== "PATH"));
    env.PATH = pathWithoutRust();
    const r = spawnSync("npm", ["run", "--silent", script], { cwd: root, env, encoding: "utf8", shell: process.platform === "win32" });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, INSTALL_RUST, r.stderr);
    // The line is all: no napi internals, no stack trace.
    assert.doesNotMatch(r.stderr + r.stdout, /Internal Error|cargo metadata|\n\s+at /);
    assert.equal(r.stderr.split("\n").filter((l) => l.includes("byollm-server-native build:")).length, 1);
  });
}
