// An example Next.js app from examples/, installed the way `npm install`
// leaves it but without the network: copied to a temp dir, this package
// packed with `npm pack` and unpacked as node_modules/@byollm/server (what
// the npm alias install gives), its platform binary beside it, and the app's
// other dependencies linked from this repo's node_modules. A real directory
// matters: Next bundles a package whose real path is outside node_modules
// even when serverExternalPackages names it.
import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { hostPlatform } from "../../scripts/pack-release.mjs";
import { freePort } from "./net.mjs";
import { root } from "../site-harness.mjs";

const nodeModules = join(root, "node_modules");

export function run(cmd, args, options) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...options });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`${args.join(" ")} exited ${code}:\n${out}`))));
  });
}

export const nextBin = (app) => join(app, "node_modules", "next", "dist", "bin", "next");

/** Install examples/<name> into `work`; returns the app's directory and a `BYOLLM_SITE_KEYS=` line. */
export async function installExample(name, work, extraDeps = []) {
  if (!existsSync(join(root, "dist", "index.js"))) {
    throw new Error(`${root}/dist is missing: run \`npm run build:debug && npm run build:ts\` first`);
  }
  const app = join(work, name);
  cpSync(join(root, "examples", name), app, { recursive: true, filter: (src) => !/[\\/](node_modules|\.next)$/.test(src) });
  const installed = join(app, "node_modules", "@byollm", "server");
  mkdirSync(installed, { recursive: true });
  mkdirSync(join(app, "node_modules", "@types"), { recursive: true });
  mkdirSync(join(app, "node_modules", "@next"), { recursive: true });
  for (const pkg of ["next", "react", "react-dom", "typescript", "@types/node", "@types/react", ...extraDeps]) {
    symlinkSync(join(nodeModules, pkg), join(app, "node_modules", pkg), "dir");
  }
  // --ignore-scripts: the package's `prepare` would start a release build; the test uses what is built.
  const packed = JSON.parse(await run("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", work], { cwd: root }));
  await run("tar", ["-xzf", join(work, packed[0].filename), "-C", installed, "--strip-components=1"]);
  const platformDir = join(app, "node_modules", `byollm-server-native-${hostPlatform()}`);
  cpSync(join(root, "npm", hostPlatform()), platformDir, { recursive: true });
  cpSync(join(root, `byollm-server-native.${hostPlatform()}.node`), join(platformDir, `byollm-server-native.${hostPlatform()}.node`));
  const manifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
  for (const dep of Object.keys(manifest.dependencies ?? {})) {
    const target = join(app, "node_modules", dep);
    if (!existsSync(target)) {
      mkdirSync(dirname(target), { recursive: true });
      symlinkSync(join(nodeModules, dep), target, "dir");
    }
  }
  const lib = await import(pathToFileURL(join(installed, "dist", "index.js")).href);
  const keyLine = lib.formatSiteKeys(lib.generateSiteKeys()).split("\n").find((l) => l.startsWith("BYOLLM_SITE_KEYS="));
  return { app, keyLine };
}

/** `next start` on a free loopback port; resolves once it answers. */
export async function startNext(app, env) {
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const child = spawn(process.execPath, [nextBin(app), "start", "-p", String(port), "-H", "127.0.0.1"], {
    cwd: app,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`next start exited ${child.exitCode}:\n${out}`);
    try {
      await fetch(origin + "/");
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`next start did not answer in time:\n${out}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return { child, port, origin, output: () => out };
}

export async function stopChild(child) {
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
  }
}

/** A signed-in person without a browser: form posts and one session cookie. */
export class Browserless {
  constructor(origin, cookie = "") {
    this.origin = origin;
    this.cookie = cookie;
  }
  async request(path, { method = "GET", form } = {}) {
    const headers = {};
    if (this.cookie) headers.cookie = this.cookie;
    let body;
    if (form) {
      headers["content-type"] = "application/x-www-form-urlencoded";
      body = new URLSearchParams(form).toString();
    }
    const response = await fetch(this.origin + path, { method, headers, body, redirect: "manual" });
    const setCookie = response.headers.get("set-cookie");
    if (setCookie) this.cookie = setCookie.split(";")[0];
    return { status: response.status, location: response.headers.get("location"), text: await response.text() };
  }
}
