#!/usr/bin/env node
// The runtime matrix: the native package's smoke test (scripts/runtime-smoke.mjs)
// under Node 20, 22, 24, Bun and Deno, one line per runtime.
//
//   node scripts/runtime-matrix.mjs            install what is missing, run, print
//   node scripts/runtime-matrix.mjs --json     the rows as JSON on the last line
//
// The runtimes come from the npm registry as ordinary packages, so this works
// wherever `npm ci` does: Node as the per-platform `node-<os>-<arch>` packages
// (the binary is in the tarball, no install script needed), Deno and Bun as
// `deno` / `bun` (their binaries arrive as optional platform dependencies).
// Node 22 is the project's own devDependency. They are installed once into
// $BYOLLM_RUNTIMES_DIR (default: <tmp>/byollm-runtimes) and reused.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const smoke = join(root, "scripts", "runtime-smoke.mjs");

// Major versions we claim; the registry's newest of each is used.
const WANT = { node20: "20", node24: "24", deno: "2", bun: "1" };

function nodePackage(major) {
  const os = { linux: "linux", darwin: "darwin", win32: "win" }[process.platform];
  const arch = { x64: "x64", arm64: "arm64" }[process.arch];
  if (!os || !arch) return undefined;
  return `node-${os}-${arch}@${major}`;
}

// The real binary inside the platform package that npm picked (e.g.
// @oven/bun-linux-x64/bin/bun, @deno/linux-x64-glibc/deno): the packages'
// own `bin` entries are JS shims that expect a postinstall step or re-spawn.
function platformBinary(dir, scope, rel) {
  const base = join(dir, "node_modules", scope);
  if (!existsSync(base)) return undefined;
  for (const pkg of readdirSync(base).sort()) {
    const candidate = join(base, pkg, rel);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/**
 * Installs the runtimes that are not there yet (all, or those named in
 * `only`); returns the binaries found.
 */
export function installRuntimes({ only = Object.keys(WANT), dir = process.env.BYOLLM_RUNTIMES_DIR || join(tmpdir(), "byollm-runtimes") } = {}) {
  mkdirSync(dir, { recursive: true });
  if (!existsSync(join(dir, "package.json"))) {
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "byollm-runtimes", private: true }) + "\n");
  }
  const exe = process.platform === "win32" ? ".exe" : "";
  const bins = {
    node20: join(dir, "node_modules", "node20", "bin", `node${exe}`),
    node22: join(root, "node_modules", "node", "bin", `node${exe}`),
    node24: join(dir, "node_modules", "node24", "bin", `node${exe}`),
  };
  const locate = () => {
    bins.deno = platformBinary(dir, "@deno", `deno${exe}`);
    bins.bun = platformBinary(dir, "@oven", join("bin", `bun${exe}`));
  };
  locate();
  const missing = [];
  for (const [name, major] of Object.entries(WANT)) {
    if (!only.includes(name) || (bins[name] && existsSync(bins[name]))) continue;
    if (name.startsWith("node")) {
      const pkg = nodePackage(major);
      if (pkg) missing.push(`${name}@npm:${pkg}`);
    } else {
      missing.push(`${name}@${major}`);
    }
  }
  if (missing.length) {
    console.error(`runtime-matrix: installing ${missing.join(" ")} into ${dir}`);
    // --ignore-scripts: every binary we need is inside a tarball; none of these
    // packages has to run code at install time (Bun's and Deno's postinstall
    // only re-link the binary the optional dependency already placed).
    // Saved into the folder's package.json: an install prunes whatever that
    // file does not list, so with --no-save the runtime matrix's install
    // removed the Deno an edge test had installed just before (on a machine
    // whose folder was new, every run).
    const r = spawnSync(
      "npm",
      ["install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", dir, ...missing],
      { stdio: ["ignore", "inherit", "inherit"], shell: process.platform === "win32" },
    );
    if (r.status !== 0) throw new Error(`npm install of the runtimes failed (${r.status})`);
    locate();
  }
  return bins;
}

function commandFor(name, bin) {
  if (name === "deno") {
    // The addon is loaded through FFI; reading the package, its env and the
    // platform (for the musl/glibc check in the loader) is what napi needs.
    return [bin, ["run", "--allow-ffi", "--allow-read", "--allow-env", "--allow-sys", "--no-prompt", smoke]];
  }
  if (name === "bun") return [bin, [smoke]];
  return [bin, [smoke]];
}

/** Runs the smoke test under each runtime; resolves to one row per runtime. */
export function runMatrix({ runtimes = ["node20", "node22", "node24", "bun", "deno"], bins = installRuntimes() } = {}) {
  const rows = [];
  for (const name of runtimes) {
    const bin = bins[name];
    if (!bin || !existsSync(bin)) {
      rows.push({ runtime: name, ok: false, error: `no ${name} binary at ${bin}` });
      continue;
    }
    const [cmd, args] = commandFor(name, bin);
    const t0 = performance.now();
    const r = spawnSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 120_000, env: { ...process.env, NO_COLOR: "1" } });
    const ms = Math.round(performance.now() - t0);
    const last = (r.stdout || "").trim().split("\n").filter(Boolean).pop() || "";
    let row;
    try {
      row = JSON.parse(last);
    } catch {
      row = { runtime: name, ok: false, error: `no result line (exit ${r.status}): ${(r.stderr || r.stdout || "").trim().slice(-400)}` };
    }
    if (r.status !== 0 && row.ok) row = { ...row, ok: false, error: `exit ${r.status}` };
    rows.push({ name, ms, ...row });
  }
  return rows;
}

export function formatRow(row) {
  const steps = row.steps ? Object.entries(row.steps).map(([k, v]) => `${k}=${v}`).join(", ") : "";
  return `${row.ok ? "ok  " : "FAIL"} ${String(row.runtime).padEnd(14)} ${String(row.ms ?? "").padStart(5)}ms  ${steps}${row.error ? `  ERROR ${row.error}` : ""}`;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const rows = runMatrix();
  for (const row of rows) console.log(formatRow(row));
  if (process.argv.includes("--json")) console.log(JSON.stringify(rows));
  process.exit(rows.every((r) => r.ok) ? 0 : 1);
}
