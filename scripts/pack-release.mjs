#!/usr/bin/env node
// Builds the npm tarballs a release would publish, the way the release
// workflow does (.github/workflows/release.yml): `napi create-npm-dirs` writes
// the platform package manifests, the built .node goes into an artifacts
// folder, `napi artifacts` moves it into npm/<platform>/, and
// `napi pre-publish --skip-optional-publish` writes the main package's
// optionalDependencies. Everything happens in a copy under a temp folder, so
// the working tree (and its package.json) is never touched.
//
//   node scripts/pack-release.mjs [OUT_DIR]   pack into OUT_DIR and print the sizes
//   node scripts/pack-release.mjs --fallback-packages [DIR]
//        the WebAssembly fallback's packages in DIR/npm (default: this checkout),
//        as the release workflow runs it around `napi pre-publish`
//
// Used by __test__/package.test.mjs and __test__/dropin.test.mjs.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

// What `npm pack` of the main package reads (package.json "files", plus the
// README and LICENSE npm always adds), the platform package folders, and the
// edge package's folder (edge/, a package of its own).
const STAGED = ["package.json", "README.md", "LICENSE", "index.js", "index.d.ts", "dist", "edge", "bin", "supabase", "npm"];

/** The napi `platformArchABI` of this process, e.g. `linux-x64-gnu`. */
export function hostPlatform() {
  const base = `${process.platform}-${process.arch}`;
  if (process.platform === "linux") {
    const glibc = process.report?.getReport()?.header?.glibcVersionRuntime;
    return `${base}-${glibc ? "gnu" : "musl"}`;
  }
  return process.platform === "win32" ? `${base}-msvc` : base;
}

// npm is a .cmd script on Windows, which only a shell starts.
const shell = process.platform === "win32";

function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, encoding: "utf8", shell: shell && cmd === "npm" });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed in ${cwd}:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

function packInto(dir, out) {
  const name = run("npm", ["pack", "--ignore-scripts", "--silent", "--pack-destination", out], dir).trim().split("\n").pop();
  return join(out, name);
}

/**
 * Stages a release in `work` and packs it.
 *
 * `targets: "host"` keeps only this machine's target (optionalDependencies then
 * list just that one); `"all"` keeps every configured target and gives the
 * ones not built here a placeholder file instead of a binary, so the packages
 * exist for an install test that proves npm never picks them on this machine.
 *
 * Returns the main tarball, the platform tarballs by platform, and the staged
 * main package.json.
 */
export function stageRelease({ work, binary, binaries = {}, targets = "host" }) {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const binaryName = pkg.napi.binaryName;
  const host = hostPlatform();
  binary ??= join(root, `${binaryName}.${host}.node`);
  if (!existsSync(binary)) throw new Error(`no native build at ${binary}: run \`npm run build:debug\` or \`npm run build:native\``);

  const stage = join(work, "stage");
  mkdirSync(stage, { recursive: true });
  for (const entry of STAGED) {
    if (existsSync(join(root, entry))) cpSync(join(root, entry), join(stage, entry), { recursive: true });
  }

  const staged = JSON.parse(readFileSync(join(stage, "package.json"), "utf8"));
  if (targets === "host") {
    staged.napi.targets = staged.napi.targets.filter((t) => tripleToPlatform(t) === host);
    if (staged.napi.targets.length !== 1) throw new Error(`${host} is not among the configured napi targets`);
  }
  writeFileSync(join(stage, "package.json"), JSON.stringify(staged, null, 2) + "\n");

  // The shape `actions/download-artifact` leaves: one folder per build job.
  // Binaries built here (`built`, by platform) go in as they are, the others
  // as placeholder files; the WebAssembly fallback brings its napi loaders.
  const built = { [host]: binary, ...binaries };
  for (const triple of staged.napi.targets) {
    const platform = tripleToPlatform(triple);
    const folder = join(stage, "artifacts", `bindings-${triple}`);
    mkdirSync(folder, { recursive: true });
    if (platform === WASI) {
      const wasm = join(root, `${binaryName}.${WASI}.wasm`);
      for (const f of wasiLoaders(binaryName)) {
        if (existsSync(join(root, f))) cpSync(join(root, f), join(folder, f));
        else writeFileSync(join(folder, f), `// placeholder: the WebAssembly fallback is not built here (npm run build:wasi)\n`);
      }
      if (existsSync(wasm)) cpSync(wasm, join(folder, `${binaryName}.${WASI}.wasm`));
      else writeFileSync(join(folder, `${binaryName}.${WASI}.wasm`), "placeholder\n");
      continue;
    }
    const file = join(folder, `${binaryName}.${platform}.node`);
    if (built[platform] && existsSync(built[platform])) cpSync(built[platform], file);
    else writeFileSync(file, `placeholder for ${triple}: not built on this machine\n`);
  }
  const napi = join(root, "node_modules", "@napi-rs", "cli", "dist", "cli.js");
  run(process.execPath, [napi, "create-npm-dirs"], stage);
  run(process.execPath, [napi, "artifacts", "--output-dir", "artifacts", "--npm-dir", "npm"], stage);
  // As the release workflow does: the fallback's packages before pre-publish
  // (which publishes npm/<target>), and again after (it rewrites
  // optionalDependencies with napi's targets only).
  fallbackPackages(stage);
  run(process.execPath, [napi, "pre-publish", "-t", "npm", "--skip-optional-publish", "--no-gh-release"], stage);
  fallbackPackages(stage);

  const out = join(work, "tarballs");
  mkdirSync(out, { recursive: true });
  const platforms = {};
  const real = (platform) => platform === host || (built[platform] && existsSync(built[platform])) || (platform.startsWith(WASI) && existsSync(join(root, `${binaryName}.${WASI}.wasm`)));
  const packages = [...staged.napi.targets.map(tripleToPlatform), ...(existsSync(join(stage, "npm", WASI)) ? FALLBACK_ALIASES.map((a) => a.platform) : [])];
  for (const platform of packages) {
    const dir = join(stage, "npm", platform);
    if (real(platform)) {
      platforms[platform] = packInto(dir, out);
    } else {
      // A placeholder package is only ever served, never installed here: a
      // plain tar of its folder is enough and much quicker than `npm pack`.
      platforms[platform] = tarFolder(dir, join(out, `${pkg.name}-${platform}-${staged.version}.tgz`));
    }
  }
  const main = packInto(stage, out);
  // The WebAssembly build is its own package (edge/package.json), released
  // with the same version so the two are always installed as a pair.
  const edge = packInto(join(stage, "edge"), out);
  return { main, platforms, edge, host, manifest: JSON.parse(readFileSync(join(stage, "package.json"), "utf8")) };
}

/**
 * A registry-style tarball (files under `package/`) of a folder, without its
 * node_modules. Copies first so it needs no GNU-only tar option (macOS and
 * Windows ship bsdtar, Alpine busybox tar).
 */
export function tarFolder(dir, file) {
  const scratch = mkdtempSync(join(tmpdir(), "byollm-tar-"));
  try {
    cpSync(dir, join(scratch, "package"), { recursive: true, filter: (src) => !relative(dir, src).split(/[\\/]/).includes("node_modules") });
    run("tar", ["-czf", file, "-C", scratch, "package"], scratch);
    return file;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The napi platform name of the WebAssembly fallback's package. */
export const WASI = "wasm32-wasi";

/** The loaders `napi build` writes beside the fallback's `.wasm`, which its package carries. */
const wasiLoaders = (binaryName) => [
  `${binaryName}.wasi.cjs`,
  `${binaryName}.wasi.d.cts`,
  `${binaryName}.wasi-browser.js`,
  "wasi-worker.mjs",
  "wasi-worker-browser.mjs",
];

/**
 * The fallback's packages beside napi's own, the same files under other
 * names. napi's installs only where npm's cpu is "wasm32" (a Node that runs
 * in WebAssembly, or `npm install --cpu=wasm32`), and napi refuses to publish
 * it with any other cpu. These cover the other platforms without a binary, so
 * that with the seven native packages exactly one package matches any os/cpu
 * npm reports. ts/native-loader.ts lists them.
 */
export const FALLBACK_ALIASES = [
  { platform: `${WASI}-other-cpu`, cpu: ["!x64", "!arm64", "!wasm32"] },
  { platform: `${WASI}-any-os`, os: ["!linux", "!darwin", "!win32"], cpu: ["x64", "arm64"] },
  { platform: `${WASI}-win32-arm64`, os: ["win32"], cpu: ["arm64"] },
];

/**
 * The fallback's aliases next to napi's package (npm/<platform>), listed in
 * the main package's optionalDependencies.
 */
export function fallbackPackages(stage) {
  const wasiDir = join(stage, "npm", WASI);
  if (!existsSync(wasiDir)) return;
  const manifestOf = (dir) => JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const write = (dir, manifest) => writeFileSync(join(dir, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
  const wasi = manifestOf(wasiDir);
  const main = manifestOf(stage);
  for (const alias of FALLBACK_ALIASES) {
    const dir = join(stage, "npm", alias.platform);
    rmSync(dir, { recursive: true, force: true });
    cpSync(wasiDir, dir, { recursive: true });
    const { os: _os, cpu: _cpu, ...rest } = wasi;
    write(dir, { ...rest, name: `${main.name}-${alias.platform}`, ...(alias.os ? { os: alias.os } : {}), cpu: alias.cpu });
    main.optionalDependencies = { ...main.optionalDependencies, [`${main.name}-${alias.platform}`]: main.version };
  }
  write(stage, main);
}

/** Rust triple → napi platform folder name, for the triples in package.json. */
export function tripleToPlatform(triple) {
  if (triple.startsWith("wasm32-wasi")) return "wasm32-wasi";
  const arch = triple.startsWith("x86_64-") ? "x64" : triple.startsWith("aarch64-") ? "arm64" : triple.split("-")[0];
  if (triple.endsWith("-apple-darwin")) return `darwin-${arch}`;
  if (triple.endsWith("-pc-windows-msvc")) return `win32-${arch}-msvc`;
  if (triple.endsWith("-linux-gnu")) return `linux-${arch}-gnu`;
  if (triple.endsWith("-linux-musl")) return `linux-${arch}-musl`;
  throw new Error(`unknown target triple ${triple}`);
}

export const kb = (file) => `${(statSync(file).size / 1024).toFixed(1)} KB`;

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url) && process.argv[2] === "--fallback-packages") {
  // The release workflow's step around `napi pre-publish` (see fallbackPackages).
  fallbackPackages(resolve(process.argv[3] ?? root));
} else if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const out = process.argv[2] ? resolve(process.argv[2]) : mkdtempSync(join(tmpdir(), "byollm-release-"));
  const { main, platforms, edge } = stageRelease({ work: out });
  console.log(`main package      ${kb(main)}  ${main}`);
  console.log(`edge package      ${kb(edge)}  ${edge}`);
  for (const [platform, file] of Object.entries(platforms)) console.log(`${platform.padEnd(17)} ${kb(file)}  ${file}`);
}
