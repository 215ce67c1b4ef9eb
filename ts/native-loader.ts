// Loads the native addon through the napi-generated loader (`index.js` at the
// package root) and, when no binary fits this machine, replaces the loader's
// generic "Cannot find native binding" with an error that names the platform
// it saw, the package that would fit and what to do about it.
//
// A dynamic import with top-level await is the only way to catch the
// loader's failure in ESM: a static `import` of a module that throws cannot be
// wrapped. The package is import-only (no `require` condition), so top-level
// await costs nothing for its consumers.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

type Loaded = typeof import("../index.js");

const PACKAGE_NAME = "byollm-server-native";

/**
 * The WebAssembly fallback (the Node binding built for wasm32-wasip1-threads),
 * as four packages with the same files, so that npm installs exactly one of
 * them wherever no native binary fits and none elsewhere: napi's own
 * `-wasm32-wasi` where npm's cpu is "wasm32", `-wasm32-wasi-other-cpu` for
 * every other CPU but x64 and arm64, `-wasm32-wasi-any-os` for x64 and arm64
 * on an OS without binaries (FreeBSD, Android, …), `-wasm32-wasi-win32-arm64`
 * for Windows on arm64 (scripts/pack-release.mjs). napi's loader (`index.js`)
 * knows the first; the others are tried here.
 */
export const WASI_PACKAGES = [
  `${PACKAGE_NAME}-wasm32-wasi`,
  `${PACKAGE_NAME}-wasm32-wasi-other-cpu`,
  `${PACKAGE_NAME}-wasm32-wasi-any-os`,
  `${PACKAGE_NAME}-wasm32-wasi-win32-arm64`,
];

/** The napi `platformArchABI` for a Rust target triple we publish, e.g. `linux-x64-gnu`. */
export function platformOfTriple(triple: string): string {
  const arch = triple.startsWith("x86_64-") ? "x64" : triple.startsWith("aarch64-") ? "arm64" : triple.split("-")[0];
  if (triple.endsWith("-apple-darwin")) return `darwin-${arch}`;
  if (triple.endsWith("-pc-windows-msvc")) return `win32-${arch}-msvc`;
  if (triple.endsWith("-linux-gnu")) return `linux-${arch}-gnu`;
  if (triple.endsWith("-linux-musl")) return `linux-${arch}-musl`;
  return triple;
}

/** Which C library this Linux process runs on; `undefined` off Linux. */
export function detectLibc(): "glibc" | "musl" | undefined {
  if (process.platform !== "linux") return undefined;
  try {
    const report = process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
    return report?.header?.glibcVersionRuntime ? "glibc" : "musl";
  } catch {
    // A report can be disabled by policy; glibc is by far the common case.
    return "glibc";
  }
}

/** The platform package name this process would load, the way napi names them. */
export function hostPlatform(): string {
  const base = `${process.platform}-${process.arch}`;
  if (process.platform === "linux") return `${base}-${detectLibc() === "musl" ? "musl" : "gnu"}`;
  if (process.platform === "win32") return `${base}-msvc`;
  return base;
}

function packageJson(): { version?: string; napi?: { targets?: string[] } } {
  try {
    return JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  } catch {
    return {};
  }
}

function causeMessages(error: unknown, seen = new Set<string>()): string[] {
  for (let e: unknown = error, depth = 0; e && depth < 10; depth++) {
    if (e instanceof AggregateError) {
      for (const inner of e.errors) causeMessages(inner, seen);
      break;
    }
    const message = e instanceof Error ? e.message : String(e);
    const first = message.split("\n")[0]?.trim();
    if (first) seen.add(first);
    e = e instanceof Error ? e.cause : undefined;
  }
  return [...seen];
}

/** The error thrown when neither a native binary nor the WebAssembly fallback could be loaded; `cause` keeps the loaders' own. */
export function explainLoadFailure(error: unknown): Error {
  const pkg = packageJson();
  const version = pkg.version ?? "";
  const platform = hostPlatform();
  const supported = (pkg.napi?.targets ?? []).map(platformOfTriple).filter((p) => !p.startsWith("wasm32"));
  const fitting = `${PACKAGE_NAME}-${platform}`;
  const libc = detectLibc();
  const seen = `${process.platform} ${process.arch}${libc ? ` (${libc})` : ""}, Node ${process.versions.node}`;
  const at = version ? `@${version}` : "";
  const lines = [
    `${PACKAGE_NAME}: could not load the native addon on ${seen}, nor its WebAssembly fallback.`,
    `Tried: ./${PACKAGE_NAME}.${platform}.node (a build in the package folder), ${fitting} (this platform's binary), ` +
      `./${PACKAGE_NAME}.wasi.cjs and ${WASI_PACKAGES.join(", ")} (the WebAssembly fallback).`,
  ];
  const override = process.env.NAPI_RS_NATIVE_LIBRARY_PATH;
  if (override) {
    lines.push(`NAPI_RS_NATIVE_LIBRARY_PATH is set to ${override} and that file did not load; unset it or point it at a .node built for ${platform}.`);
  }
  if (supported.includes(platform)) {
    lines.push(
      `The binary for this platform ships in the package ${fitting}${version ? `@${version}` : ""}, an optional dependency that is missing or broken here.`,
      "To fix it, reinstall with optional dependencies enabled:",
      "  - npm: do not pass --omit=optional / --no-optional; if the lockfile was made on another platform, delete node_modules and package-lock.json and run `npm install` again (npm/cli#4828);",
      "  - pnpm / yarn: make sure supportedArchitectures (os, cpu, libc) include this machine;",
      "  - Docker: run `npm ci` inside the image (or for its platform), not on the host.",
    );
  } else {
    lines.push(`There is no prebuilt binary for ${platform} (${fitting} is not published).`);
  }
  lines.push(
    `Prebuilt platforms: ${supported.length ? supported.join(", ") : "(unknown: package.json lists no napi targets)"}.`,
    `Anywhere else the WebAssembly fallback runs (slower, the same API): npm installs it by itself where no binary fits, unless optional dependencies are left out. ` +
      `To add it by hand: \`npm install --force ${WASI_PACKAGES[0]}${at}\` (--force: its package.json names only the wasm32 CPU); ` +
      "where a native binary is installed too, NAPI_RS_FORCE_WASI=1 picks the fallback.",
    "Or build from source with a Rust toolchain: clone the repository, then `npm ci` (which runs `napi build` with cargo).",
  );
  const causes = causeMessages(error);
  if (causes.length) lines.push("What the loader tried:", ...causes.map((c) => `  - ${c}`));
  const explained = new Error(lines.join("\n"));
  explained.name = "NativeAddonMissing";
  explained.cause = error;
  return explained;
}

/** The fallback from one of the packages napi's loader does not know, or `undefined`. */
function loadWasiPackage(errors: unknown[]): Loaded | undefined {
  const require = createRequire(import.meta.url);
  for (const name of WASI_PACKAGES.slice(1)) {
    try {
      return require(name) as Loaded;
    } catch (error) {
      if ((error as { code?: string }).code !== "MODULE_NOT_FOUND") errors.push(error);
    }
  }
  return undefined;
}

// napi's loader reads NAPI_RS_FORCE_WASI as "true" (prefer the fallback) or
// "error" (the fallback or nothing); "1" is taken as "true" here, the spelling
// most switches have. Changed only while the loader runs.
const forceWasi = process.env.NAPI_RS_FORCE_WASI;
if (forceWasi === "1") process.env.NAPI_RS_FORCE_WASI = "true";
let loaded: Loaded;
try {
  loaded = await import("../index.js");
} catch (error) {
  const errors: unknown[] = [error];
  const fallback = loadWasiPackage(errors);
  if (!fallback) throw explainLoadFailure(errors.length > 1 ? new AggregateError(errors, (error as Error)?.message) : error);
  loaded = fallback;
} finally {
  if (forceWasi === "1") process.env.NAPI_RS_FORCE_WASI = forceWasi;
}

/** The napi-generated loader's exports: every native function and class. */
export const binding: Loaded = loaded;

/**
 * Whether the binding is the WebAssembly fallback. It sees the host's files
 * through WASI, from the root, with no working directory of its own: a
 * relative path is made absolute (against `process.cwd()`, as the native
 * binding reads it) before it is handed over.
 */
export const isWasi: boolean = (loaded as { __napiBindingTarget?: string }).__napiBindingTarget?.startsWith("wasm32") ?? false;
