// A read-only npm registry on 127.0.0.1 for install tests: it serves tarballs
// packed from this repository's node_modules, so a fresh project can be
// installed with no network and no warm npm cache (`npm install --offline`
// needs the packuments of every registry dependency in the cache, which
// `npm ci` never fetches).
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createServer } from "node:http";
import { readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { root, tarFolder } from "../../scripts/pack-release.mjs";

/** Packs an installed package folder as a registry tarball (its files are already the published ones). */
export function packInstalled(dir, out) {
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  return tarFolder(dir, join(out, `${manifest.name.replace("/", "-").replace("@", "")}-${manifest.version}.tgz`));
}

/** A package manifest's runtime dependencies and theirs, packed from this repository's node_modules. */
export function packDependencies(manifest, out) {
  const files = [];
  const queue = Object.keys(manifest.dependencies ?? {});
  const done = new Set();
  while (queue.length) {
    const name = queue.shift();
    if (done.has(name)) continue;
    done.add(name);
    const dir = join(root, "node_modules", name);
    files.push(packInstalled(dir, out));
    queue.push(...Object.keys(JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).dependencies ?? {}));
  }
  return files;
}

/**
 * Serves exactly these tarballs, one version each; records which tarballs were
 * fetched and which package names were asked for (served or not).
 */
export async function serveRegistry(tarballs) {
  const packages = new Map();
  const fetched = [];
  const asked = [];
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname.slice(1));
    if (!path.startsWith("-/")) asked.push(path);
    if (path.startsWith("-/tarballs/")) {
      const entry = [...packages.values()].find((p) => p.file === path.slice("-/tarballs/".length));
      if (!entry) return res.writeHead(404).end();
      fetched.push(entry.manifest.name);
      return res.writeHead(200, { "content-type": "application/octet-stream" }).end(entry.bytes);
    }
    const entry = packages.get(path);
    if (!entry) return res.writeHead(404, { "content-type": "application/json" }).end('{"error":"Not found"}');
    const { manifest, bytes, file } = entry;
    const version = {
      ...manifest,
      _id: `${manifest.name}@${manifest.version}`,
      dist: {
        tarball: `http://127.0.0.1:${server.address().port}/-/tarballs/${file}`,
        integrity: `sha512-${createHash("sha512").update(bytes).digest("base64")}`,
        shasum: createHash("sha1").update(bytes).digest("hex"),
      },
    };
    const packument = { name: manifest.name, "dist-tags": { latest: manifest.version }, versions: { [manifest.version]: version } };
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(packument));
  });
  for (const file of tarballs) {
    const manifest = JSON.parse(spawnSync("tar", ["-xzOf", file, "package/package.json"], { encoding: "utf8" }).stdout);
    packages.set(manifest.name, { manifest, bytes: readFileSync(file), file: basename(file) });
  }
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}/`, fetched, asked, close: () => new Promise((r) => server.close(r)) };
}

/**
 * Runs a command without blocking this process, which may be the one serving
 * the registry the command installs from.
 */
export function exec(cmd, args, { cwd, env }) {
  return new Promise((resolve, reject) => {
    // npm and npx are .cmd scripts on Windows, which only a shell starts.
    const child = spawn(cmd, args, { cwd, env, shell: process.platform === "win32" && (cmd === "npm" || cmd === "npx") });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

/**
 * The environment for npm runs against `registryUrl`: none of the npm_*
 * variables of an enclosing `npm test`, a cache and an empty user config of
 * its own under `work` (written here).
 */
export function npmEnv(registryUrl, work, extra = {}) {
  writeFileSync(join(work, "npmrc"), "");
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  return {
    ...env,
    npm_config_registry: registryUrl,
    npm_config_cache: join(work, "npm-cache"),
    npm_config_userconfig: join(work, "npmrc"),
    npm_config_audit: "false",
    npm_config_fund: "false",
    npm_config_update_notifier: "false",
    ...extra,
  };
}
