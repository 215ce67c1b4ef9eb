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

type Loaded = typeof import("../index.js");

const PACKAGE_NAME = "byollm-server-native";

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

function causeMessages(error: unknown): string[] {
  const seen = new Set<string>();
  for (let e: unknown = error, depth = 0; e && depth < 10; depth++) {
    const message = e instanceof Error ? e.message : String(e);
    const first = message.split("\n")[0]?.trim();
    if (first) seen.add(first);
    e = e instanceof Error ? e.cause : undefined;
  }
  return [...seen];
}

/** The error thrown when no native binary could be loaded; `cause` keeps the loader's own. */
export function explainLoadFailure(error: unknown): Error {
  const pkg = packageJson();
  const version = pkg.version ?? "";
  const platform = hostPlatform();
  const supported = (pkg.napi?.targets ?? []).map(platformOfTriple);
  const fitting = `${PACKAGE_NAME}-${platform}`;
  const libc = detectLibc();
  const seen = `${process.platform} ${process.arch}${libc ? ` (${libc})` : ""}, Node ${process.versions.node}`;
  const lines = [`${PACKAGE_NAME}: could not load the native addon on ${seen}.`];
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
    "Anywhere else, build from source with a Rust toolchain: clone the repository, then `npm ci` (which runs `napi build` with cargo).",
    "Only the crypto exists without the addon, as WebAssembly: the package `byollm-server-native-edge`.",
  );
  const causes = causeMessages(error);
  if (causes.length) lines.push("What the loader tried:", ...causes.map((c) => `  - ${c}`));
  const explained = new Error(lines.join("\n"));
  explained.name = "NativeAddonMissing";
  explained.cause = error;
  return explained;
}

let loaded: Loaded;
try {
  loaded = await import("../index.js");
} catch (error) {
  throw explainLoadFailure(error);
}

/** The napi-generated loader's exports: every native function and class. */
export const binding: Loaded = loaded;
