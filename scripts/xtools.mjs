// Build tools that come from PyPI, installed with pip into target/xtools on
// first use: zig (package ziglang: the C compiler and linker for targets this
// host has no toolchain for) and cargo-zigbuild (cargo through zig). Used by
// scripts/build-wasi.mjs (SQLite for WebAssembly) and scripts/build-targets.mjs
// (every release target).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const xtools = join(root, "target", "xtools");
const VERSIONS = { ziglang: "0.17.1", "cargo-zigbuild": "0.24.1" };

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
