// Installed as a user would, for every platform: the release is staged and
// packed for all targets (scripts/pack-release.mjs; binaries not built here
// are placeholder files, the WebAssembly fallback is the real one), served by
// a registry on 127.0.0.1, and a fresh copy of the Next.js example installs
// it under the name apps import (`@byollm/server`, the npm alias) with
// `npm install --os=… --cpu=… --libc=…` for each platform. Each install must
// get exactly the package for that platform: a native one where a binary
// exists, one of the WebAssembly fallback's packages everywhere else.
// Then the install for a CPU without a binary (`--cpu=wasm32`, which has no
// .node at all) builds with `next build` and serves with `next start` under
// NAPI_RS_FORCE_WASI=1 on this machine, and a daemon-side client pairs and
// runs a job through it.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { FALLBACK_ALIASES, WASI, kb, root, stageRelease } from "../scripts/pack-release.mjs";
import { exec, npmEnv, packDependencies, serveRegistry } from "./helpers/registry.mjs";
import { freePort } from "./helpers/net.mjs";
import { TestDaemon } from "./site-daemon.mjs";

const NAME = "byollm-server-native";
const wasmBuilt = existsSync(join(root, `${NAME}.${WASI}.wasm`));
const skip = !wasmBuilt || !existsSync(join(root, "dist", "index.js")) ? "the WebAssembly fallback or dist/ is not built (npm run build)" : undefined;
if (skip) console.log(`# install-platforms.test.mjs skipped: ${skip}`);

// npm's --os/--cpu/--libc, and the one package each must get.
const MATRIX = [
  [["linux", "x64", "glibc"], "linux-x64-gnu"],
  [["linux", "x64", "musl"], "linux-x64-musl"],
  [["linux", "arm64", "glibc"], "linux-arm64-gnu"],
  [["linux", "arm64", "musl"], "linux-arm64-musl"],
  [["darwin", "x64"], "darwin-x64"],
  [["darwin", "arm64"], "darwin-arm64"],
  [["win32", "x64"], "win32-x64-msvc"],
  // No binary: the fallback, from whichever of its packages covers the platform.
  [["linux", "wasm32", "glibc"], WASI],
  [["linux", "riscv64", "glibc"], `${WASI}-other-cpu`],
  [["win32", "ia32"], `${WASI}-other-cpu`],
  [["freebsd", "x64"], `${WASI}-any-os`],
  [["android", "arm64"], `${WASI}-any-os`],
  [["win32", "arm64"], `${WASI}-win32-arm64`],
];

let work;
let registry;
let release;
let env;

const npm = (args, cwd) => exec("npm", args, { cwd, env });

/** A fresh copy of examples/next-app whose only registry dependency is this package, under the alias. */
function freshApp(dir) {
  cpSync(join(root, "examples", "next-app"), dir, { recursive: true, filter: (src) => !/[\\/](node_modules|\.next)$/.test(src) });
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  // next, react and the types come from this repository's node_modules below
  // (linked, for the build); the registry here serves only what is under test.
  manifest.dependencies = { "@byollm/server": `npm:${NAME}@${release.manifest.version}` };
  delete manifest.devDependencies;
  writeFileSync(join(dir, "package.json"), JSON.stringify(manifest, null, 2));
}

const platformPackages = (dir) =>
  existsSync(join(dir, "node_modules")) ? readdirSync(join(dir, "node_modules")).filter((n) => n.startsWith(`${NAME}-`)) : [];

before(async () => {
  if (skip) return;
  work = mkdtempSync(join(tmpdir(), "byollm-platforms-"));
  release = stageRelease({ work, targets: "all" });
  const wasiManifest = JSON.parse(spawnSync("tar", ["-xzOf", release.platforms[WASI], "package/package.json"], { encoding: "utf8" }).stdout);
  const deps = packDependencies(wasiManifest, join(work, "tarballs"));
  registry = await serveRegistry([release.main, ...Object.values(release.platforms), ...deps]);
  env = npmEnv(registry.url, work);
  console.log(`# main ${kb(release.main)}; WebAssembly fallback package ${kb(release.platforms[WASI])}`);
});

after(async () => {
  await registry?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

test("the fallback's packages: the same files, os/cpu that split the platforms without a binary, all optional", { skip }, () => {
  const listing = (file) => spawnSync("tar", ["-tzf", file], { encoding: "utf8" }).stdout.split("\n").filter(Boolean).sort();
  const manifestOf = (file) => JSON.parse(spawnSync("tar", ["-xzOf", file, "package/package.json"], { encoding: "utf8" }).stdout);
  const wasi = manifestOf(release.platforms[WASI]);
  assert.deepEqual(wasi.cpu, ["wasm32"], "napi's own package, as napi publishes it");
  assert.equal(wasi.os, undefined);
  assert.ok(listing(release.platforms[WASI]).includes(`package/${NAME}.${WASI}.wasm`));
  assert.ok(Object.keys(wasi.dependencies).includes("@napi-rs/wasm-runtime"));
  for (const alias of FALLBACK_ALIASES) {
    const file = release.platforms[alias.platform];
    assert.deepEqual(listing(file), listing(release.platforms[WASI]));
    const manifest = manifestOf(file);
    assert.equal(manifest.name, `${NAME}-${alias.platform}`);
    assert.deepEqual([manifest.os, manifest.cpu], [alias.os, alias.cpu]);
    assert.deepEqual(manifest.dependencies, wasi.dependencies);
  }
  // The main package is what every platform installs: no .wasm, no .node.
  assert.deepEqual(listing(release.main).filter((f) => /\.(wasm|node)$/.test(f) || f.includes("wasi")), []);
  assert.equal(Object.keys(release.manifest.optionalDependencies).length, 7 + 1 + FALLBACK_ALIASES.length);
});

for (const [[os, cpu, libc], expected] of MATRIX) {
  const flags = [`--os=${os}`, `--cpu=${cpu}`, ...(libc ? [`--libc=${libc}`] : [])];
  test(`npm install ${flags.join(" ")} gets ${NAME}-${expected} and no other platform package`, { skip, timeout: 120_000 }, async () => {
    const app = join(work, `app-${os}-${cpu}-${libc ?? "any"}`);
    freshApp(app);
    const r = await npm(["install", ...flags], app);
    assert.equal(r.status, 0, `npm install failed:\n${r.stdout}\n${r.stderr}`);
    assert.deepEqual(platformPackages(app), [`${NAME}-${expected}`]);
    assert.equal(JSON.parse(readFileSync(join(app, "node_modules", "@byollm", "server", "package.json"), "utf8")).name, NAME);
    const runtime = existsSync(join(app, "node_modules", "@napi-rs", "wasm-runtime"));
    assert.equal(runtime, expected.startsWith(WASI), "the WebAssembly runtime comes only with the fallback");
  });
}

test("the error's advice works: `npm install --force` adds the fallback beside this machine's binary", { skip, timeout: 120_000 }, async () => {
  const app = join(work, "app-host-forced");
  freshApp(app);
  let r = await npm(["install"], app);
  assert.equal(r.status, 0, r.stderr);
  r = await npm(["install", "--force", `${NAME}-${WASI}@${release.manifest.version}`], app);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(platformPackages(app).includes(`${NAME}-${WASI}`));
  const loader = pathToFileURL(join(app, "node_modules", "@byollm", "server", "dist", "native-loader.js")).href;
  const target = (force) =>
    spawnSync(process.execPath, ["--no-warnings", "--input-type=module", "-e", `const { binding } = await import(${JSON.stringify(loader)}); console.log(binding.__napiBindingTarget);`], {
      cwd: app,
      env: { ...process.env, NAPI_RS_FORCE_WASI: force },
      encoding: "utf8",
    });
  assert.equal(target("").stdout.trim(), "native");
  assert.equal(target("1").stdout.trim(), "wasm32-wasi");
});

test("the install without a binary builds with next build and serves under NAPI_RS_FORCE_WASI=1: a daemon pairs and runs a job", { skip, timeout: 600_000 }, async () => {
  const app = join(work, "app-linux-wasm32-glibc");
  assert.deepEqual(platformPackages(app), [`${NAME}-${WASI}`], "the --cpu=wasm32 install above is in place");
  assert.deepEqual(readdirSync(join(app, "node_modules"), { recursive: true }).filter((f) => String(f).endsWith(".node")), []);
  mkdirSync(join(app, "node_modules", "@types"), { recursive: true });
  for (const pkg of ["next", "react", "react-dom", "typescript", "@types/node", "@types/react"]) {
    symlinkSync(join(root, "node_modules", pkg), join(app, "node_modules", pkg), "dir");
  }
  const lib = await import(pathToFileURL(join(app, "node_modules", "@byollm", "server", "dist", "index.js")).href);
  const keys = lib.formatSiteKeys(lib.generateSiteKeys()).split("\n").find((l) => l.startsWith("BYOLLM_SITE_KEYS="));
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const runEnv = { ...process.env, NAPI_RS_FORCE_WASI: "1", NEXT_TELEMETRY_DISABLED: "1", NODE_ENV: "production", PUBLIC_ORIGIN: origin };
  const next = join(app, "node_modules", "next", "dist", "bin", "next");
  const built = spawnSync(process.execPath, [next, "build"], { cwd: app, env: runEnv, encoding: "utf8", timeout: 400_000 });
  assert.equal(built.status, 0, `next build failed:\n${built.stdout}\n${built.stderr}`);

  const server = spawn(process.execPath, [next, "start", "-p", String(port), "-H", "127.0.0.1"], {
    cwd: app,
    env: { ...runEnv, BYOLLM_SITE_KEYS: keys.slice("BYOLLM_SITE_KEYS=".length), SESSION_SECRET: "platforms-test-secret" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  server.stdout.on("data", (d) => (out += d));
  server.stderr.on("data", (d) => (out += d));
  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      assert.equal(server.exitCode, null, `next start exited:\n${out}`);
      try {
        await fetch(origin + "/");
        break;
      } catch {
        assert.ok(Date.now() < deadline, `next start did not answer:\n${out}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    let cookie = "";
    const post = async (path, form) => {
      const response = await fetch(origin + path, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", ...(cookie ? { cookie } : {}) },
        body: new URLSearchParams(form).toString(),
        redirect: "manual",
      });
      cookie = response.headers.get("set-cookie")?.split(";")[0] ?? cookie;
      return { status: response.status, text: await response.text() };
    };
    await post("/api/session", { name: "alice", next: "/pair" });
    const daemon = new TestDaemon(origin, { label: "wasi-workstation" });
    const started = await daemon.pairStart();
    assert.equal((await post("/api/pairings/approve", { code: started.userCode })).status, 200);
    assert.equal((await daemon.waitForApproval(started.deviceCode)).owner, "alice");
    const enqueued = await post("/api/prompts", { prompt: "hello from the fallback" });
    assert.equal(enqueued.status, 201, enqueued.text);
    const { result, payload } = await daemon.runOne((p) => `echo: ${p.prompt}`);
    assert.deepEqual(payload, { prompt: "hello from the fallback" });
    assert.deepEqual(result, { accepted: true, state: "ok" });
    const shown = await fetch(`${origin}/api/prompts/${JSON.parse(enqueued.text).id}`, { headers: { cookie } });
    assert.deepEqual((await shown.json()).outcome, { outcome: "ok", text: "echo: hello from the fallback" });
  } finally {
    const exited = new Promise((r) => server.once("exit", r));
    server.kill("SIGTERM");
    await exited;
  }
});
