// Distribution, end to end: `npm install` needs no Rust toolchain.
//
// The release is staged exactly as the release workflow does it
// (scripts/pack-release.mjs: `napi artifacts`, then `napi pre-publish
// --skip-optional-publish`), for all seven configured targets: this machine's
// binary goes into its platform package, the six not built here get a
// placeholder file. The tarballs are served by a registry on 127.0.0.1 (the
// main package's dependencies are packed from this repository's
// node_modules), so `npm install` resolves the optionalDependencies the way it
// does from npmjs.org: it must fetch only the package for this
// os/cpu/libc. Installs run with cargo and rustc stripped from PATH and with
// install scripts enabled, so anything that tried to compile would fail.
//
// Then, from the fresh projects: a whole in-memory job cycle (the daemon side
// uses our WebAssembly crypto, the separate byollm-server-native-edge
// package), `npx keygen`, once under the package's own name and once aliased
// as `@byollm/server`; and the loader's error when the platform package is
// missing.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { WASI, hostPlatform, kb, root, stageRelease } from "../scripts/pack-release.mjs";
import { exec, npmEnv, packDependencies, serveRegistry } from "./helpers/registry.mjs";

const NAME = "byollm-server-native";
const EDGE = "byollm-server-native-edge";
const host = hostPlatform();
const binary = join(root, `${NAME}.${host}.node`);
// Any platform works: the release workflow runs this next to each platform's binary.
const skipReason =
  !existsSync(binary) || !existsSync(join(root, "dist", "index.js")) || !existsSync(join(root, "edge", "byollm_edge.wasm"))
    ? `the ${host} addon, dist/ or the edge .wasm is not built (npm run build:debug && npm run build:ts && npm run build:wasm)`
    : undefined;
if (skipReason) console.log(`# package.test.mjs skipped: ${skipReason}`);

const CONSUMER = String.raw`
import assert from "node:assert/strict";
import { ByollmApp, MemoryStore, generateSiteKeys } from "PKG";
import { createHandler } from "PKG/next";
import { generateKeys, keyId, open, publicIdentityOf, seal, signRequest } from "EDGE";

const siteKeys = generateSiteKeys();
const store = new MemoryStore();
const app = new ByollmApp({ store, siteKeys });
const { POST } = createHandler(() => ({ store, siteKeys, verificationUrl: "https://app.example/runners", basePath: "/api/byollm" }));

const device = generateKeys(Date.now());
const identity = publicIdentityOf(device);
const capabilities = [{ kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "llama3.2", offerScope: "private" }];
let runnerId;
async function call(endpoint, body, signed = true) {
  const text = JSON.stringify({ protocolVersion: "2", ...body });
  const headers = { "content-type": "application/json" };
  if (signed) {
    const s = signRequest(device, { endpoint, runnerId, issuedAt: Date.now(), body: text });
    Object.assign(headers, { "x-byollm-runner": s.runnerId, "x-byollm-issued-at": String(s.issuedAt), "x-byollm-signature": s.signature });
  }
  const response = await POST(new Request("https://app.example/api/byollm/" + endpoint, { method: "POST", headers, body: text }));
  return { status: response.status, body: await response.json() };
}

const start = await call("pair", { action: "start", daemon: { version: "0.1.1", label: "ci", platform: "linux" }, device: identity, capabilities }, false);
assert.equal(start.status, 200);
runnerId = (await app.approvePairing({ userCode: start.body.userCode, owner: "alice" })).id;
const poll = await call("pair", { action: "poll", deviceCode: start.body.deviceCode }, false);
const [siteKeyId, site] = Object.entries(poll.body.sites)[0];
const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "Ping." }, owner: "alice" });
const stub = (await call("claim", { runnerId, capabilities, max: 1 })).body.jobs[0];
assert.equal(stub.id, handle.id);
const fetched = await call("fetch", { runnerId, jobId: stub.id, leaseId: stub.lease.id });
const opened = await open({
  envelope: fetched.body.envelope, recipientKeys: device, senderIdentityPublic: site.identity,
  expected: { jobId: stub.id, senderKeyId: siteKeyId, recipientKeyId: keyId(identity.identity), direction: "payload" },
});
assert.equal(JSON.parse(opened.plaintext).prompt, "Ping.");
const envelope = await seal({
  plaintext: JSON.stringify({ outcome: { outcome: "ok", text: "Pong." }, ran: { model: "llama3.2", backendClass: "http", durationMs: 1 } }),
  senderKeys: device, recipientEncryptionPublic: site.encryption,
  context: { jobId: stub.id, senderKeyId: keyId(identity.identity), recipientKeyId: siteKeyId, deadlineAt: Date.now() + 3600000, direction: "result" },
});
const result = await call("result", { runnerId, jobId: stub.id, leaseId: stub.lease.id, envelope, disposition: "ok" });
assert.deepEqual(result.body, { accepted: true, state: "ok" });
const delivered = await app.result(handle.id);
assert.equal(delivered.outcome.text, "Pong.");
console.log("PACKAGE-OK " + delivered.state + " " + delivered.outcome.text);
`;

let work;
let registry;
let release;
// The environment every npm and consumer run gets: no Rust toolchain on PATH,
// none of the npm_* variables of an enclosing `npm test`, our registry, a cache
// of its own.
let env;

/** `PATH` without any directory that holds cargo or rustc. */
function pathWithoutRust() {
  return (process.env.PATH ?? "")
    .split(delimiter)
    .filter((dir) => dir && !existsSync(join(dir, "cargo")) && !existsSync(join(dir, "rustc")))
    .join(delimiter);
}

// Asynchronous (helpers/registry.mjs): the registry answers from this same process.
const npm = (args, cwd) => exec("npm", args, { cwd, env });

/** README.md's keygen command, read from its bash block, never retyped here. */
function readmeKeygenCommand() {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const lines = [...readme.matchAll(/```bash\n([\s\S]*?)```/g)].flatMap((m) => m[1].split("\n"));
  const commands = lines.map((l) => l.replace(/\s+#.*$/, "").trim()).filter((l) => /\bkeygen\b/.test(l));
  assert.equal(commands.length, 1, `README.md has one keygen command in its bash blocks (found ${JSON.stringify(commands)})`);
  return commands[0];
}

/**
 * Runs README.md's keygen command in `project` with no terminal (stdin is a
 * pipe) and checks that it printed keys from the installed package without
 * asking any registry for anything.
 */
async function runReadmeKeygen(project) {
  const command = readmeKeygenCommand();
  registry.asked.length = 0;
  // Split on spaces (the line has no quotes), so it runs the same way on Windows, where npx is a .cmd.
  const [cmd, ...args] = command.split(/\s+/);
  const r = await exec(cmd, args, { cwd: project, env });
  assert.equal(r.status, 0, `\`${command}\` failed:\n${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /^BYOLLM_SITE_KEYS=[A-Za-z0-9+/]+=*$/m, `\`${command}\` printed no keys`);
  assert.deepEqual(registry.asked, [], `\`${command}\` asked the registry for packages`);
  return command;
}

/** A fresh project depending on `spec` under `name`, installed from the loopback registry. */
async function installProject(dir, name, spec) {
  mkdirSync(dir, { recursive: true });
  const dependencies = { [name]: spec, [EDGE]: release.edgeManifest.version };
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module", dependencies }));
  writeFileSync(join(dir, "app.mjs"), CONSUMER.replaceAll("PKG", name).replaceAll("EDGE", EDGE));
  const started = Date.now();
  const r = await npm(["install"], dir);
  assert.equal(r.status, 0, `npm install failed:\n${r.stdout}\n${r.stderr}`);
  console.log(`# npm install ${name}@${spec}: ${Date.now() - started} ms`);
  // npm 11 lists every dependency that declares install scripts; ours declares none.
  assert.doesNotMatch(r.stderr, /install-scripts|gyp|cargo/, r.stderr);
  return r;
}

before(async () => {
  if (skipReason) return;
  work = mkdtempSync(join(tmpdir(), "byollm-package-"));
  const started = Date.now();
  // A debug build is ~30 MB of mostly DWARF; packing and copying that dominates
  // the run on a busy machine. Its stripped copy is the same code. (The sizes
  // printed below mean something only for a release build: `npm run build:native`.)
  let addon = binary;
  if (statSync(binary).size > 10 * 1024 * 1024) {
    const stripped = join(work, `${NAME}.${host}.node`);
    if (spawnSync("strip", ["--strip-debug", "-o", stripped, binary]).status === 0) addon = stripped;
  }
  release = stageRelease({ work, binary: addon, targets: "all" });
  release.edgeManifest = JSON.parse(spawnSync("tar", ["-xzOf", release.edge, "package/package.json"], { encoding: "utf8" }).stdout);
  // The WebAssembly fallback's packages are served too (npm resolves every
  // optional dependency before it skips those for other platforms), with the
  // runtime they depend on.
  const wasiManifest = JSON.parse(spawnSync("tar", ["-xzOf", release.platforms[WASI], "package/package.json"], { encoding: "utf8" }).stdout);
  const deps = [...packDependencies(release.manifest, join(work, "tarballs")), ...packDependencies(wasiManifest, join(work, "tarballs"))];
  registry = await serveRegistry([release.main, release.edge, ...Object.values(release.platforms), ...deps]);
  // (PATH is dropped in any spelling too: Windows calls it Path, and two copies would race.)
  env = Object.fromEntries(Object.entries(npmEnv(registry.url, work)).filter(([k]) => k.toUpperCase() !== "PATH"));
  env.PATH = pathWithoutRust();
  console.log(`# staged and packed in ${Date.now() - started} ms`);
  const build = addon === binary ? (statSync(binary).size > 10 * 1024 * 1024 ? "debug build" : "release build") : "debug build, stripped";
  console.log(`# main package ${kb(release.main)} (target <= 200 KB); ${host} package ${kb(release.platforms[host])} (${build}; target <= 3 MB); ${EDGE} ${kb(release.edge)}`);
});

after(async () => {
  await registry?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

test("the packed packages: the binary is in the platform package only, optionalDependencies name every target", { skip: skipReason }, () => {
  const listing = (file) => spawnSync("tar", ["-tzf", file], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);
  const main = listing(release.main);
  assert.deepEqual(main.filter((f) => f.endsWith(".node")), [], "the main package carries no .node file");
  for (const needed of ["package/dist/index.js", "package/dist/native-loader.js", "package/index.js", "package/bin/keygen.mjs"]) {
    assert.ok(main.includes(needed), `${needed} is not in the main tarball`);
  }
  // The WebAssembly lives in its own package, at the main package's version.
  assert.deepEqual(main.filter((f) => f.endsWith(".wasm") || f.startsWith("package/edge/") || f.endsWith(".map")), []);
  const edge = listing(release.edge);
  for (const needed of ["package/index.js", "package/workers.js", "package/manual.js", "package/byollm_edge.wasm", "package/wasm-inline.js", "package/index.d.ts"]) {
    assert.ok(edge.includes(needed), `${needed} is not in the edge tarball`);
  }
  assert.equal(release.edgeManifest.name, EDGE);
  assert.equal(release.edgeManifest.version, release.manifest.version);
  assert.ok(statSync(release.main).size <= 200 * 1024, `main package ${kb(release.main)} is over 200 KB`);
  assert.deepEqual(listing(release.platforms[host]).sort(), ["package/README.md", `package/${NAME}.${host}.node`, "package/package.json"]);
  const expected = Object.fromEntries(Object.keys(release.platforms).map((p) => [`${NAME}-${p}`, release.manifest.version]));
  // Seven binaries and the WebAssembly fallback's four packages (install-platforms.test.mjs).
  assert.equal(Object.keys(expected).length, 11);
  assert.deepEqual(release.manifest.optionalDependencies, expected);
  assert.equal(release.manifest.scripts?.install, undefined);
  assert.equal(release.manifest.scripts?.postinstall, undefined);
});

test("installed by its own name: only this platform's binary is fetched, nothing compiles, a job runs, keygen prints keys", { skip: skipReason, timeout: 60_000 }, async () => {
  const project = join(work, "own");
  registry.fetched.length = 0;
  await installProject(project, NAME, release.manifest.version);
  // The other platform packages (six binaries, the WebAssembly fallback's four) are declared but npm must skip them by os/cpu/libc (musl included).
  assert.deepEqual(
    registry.fetched.filter((n) => n.startsWith(`${NAME}-`) && n !== EDGE),
    [`${NAME}-${host}`],
  );
  const modules = readdirSync(join(project, "node_modules"));
  assert.deepEqual(modules.filter((n) => n.startsWith(`${NAME}-`) && n !== EDGE), [`${NAME}-${host}`]);
  assert.ok(modules.includes(EDGE));
  assert.ok(existsSync(join(project, "node_modules", `${NAME}-${host}`, `${NAME}.${host}.node`)));
  assert.deepEqual(readdirSync(join(project, "node_modules", NAME)).filter((f) => f.endsWith(".node")), []);

  const run = await exec(process.execPath, ["app.mjs"], { cwd: project, env });
  assert.equal(run.status, 0, `consumer failed:\n${run.stdout}\n${run.stderr}`);
  assert.match(run.stdout, /^PACKAGE-OK ok Pong\.$/m);

  const keygen = await npm(["exec", "--offline", "--", "keygen"], project);
  assert.equal(keygen.status, 0, keygen.stderr);
  assert.match(keygen.stdout, /^BYOLLM_SITE_KEYS=[A-Za-z0-9+/]+=*$/m);
  await runReadmeKeygen(project);
});

test("installed as @byollm/server (npm alias): the same job and keygen", { skip: skipReason, timeout: 60_000 }, async () => {
  const project = join(work, "alias");
  await installProject(project, "@byollm/server", `npm:${NAME}@${release.manifest.version}`);
  assert.equal(JSON.parse(readFileSync(join(project, "node_modules", "@byollm", "server", "package.json"), "utf8")).name, NAME);
  assert.ok(existsSync(join(project, "node_modules", `${NAME}-${host}`, `${NAME}.${host}.node`)));

  const run = await exec(process.execPath, ["app.mjs"], { cwd: project, env });
  assert.equal(run.status, 0, `consumer failed:\n${run.stdout}\n${run.stderr}`);
  assert.match(run.stdout, /^PACKAGE-OK ok Pong\.$/m);

  const keygen = await npm(["exec", "--offline", "--", "keygen"], project);
  assert.equal(keygen.status, 0, keygen.stderr);
  assert.match(keygen.stdout, /^BYOLLM_SITE_KEYS=[A-Za-z0-9+/]+=*$/m);
});

test("README.md's keygen command, as written, runs the package installed as @byollm/server and asks no registry for anything", { skip: skipReason, timeout: 60_000 }, async () => {
  const project = join(work, "alias");
  assert.ok(existsSync(join(project, "node_modules", "@byollm", "server")), "the alias install of the test above is in place");
  const command = await runReadmeKeygen(project);
  console.log(`# ran README.md's \`${command}\` in the alias project`);
});

test("without the platform package, importing says which platform it saw and what to do", { skip: skipReason, timeout: 60_000 }, async () => {
  const project = join(work, "no-optional");
  mkdirSync(project, { recursive: true });
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module", dependencies: { [NAME]: release.manifest.version } }));
  // What users get from `npm install --omit=optional` (or a lockfile made on another platform).
  const r = await npm(["install", "--omit=optional"], project);
  assert.equal(r.status, 0, `npm install failed:\n${r.stdout}\n${r.stderr}`);
  assert.equal(existsSync(join(project, "node_modules", `${NAME}-${host}`)), false);

  const run = await exec(process.execPath, ["--input-type=module", "-e", `await import(${JSON.stringify(NAME)})`], { cwd: project, env });
  assert.notEqual(run.status, 0);
  const stderr = run.stderr;
  const libc = process.platform === "linux" ? ` (${host.endsWith("-musl") ? "musl" : "glibc"})` : "";
  const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  assert.ok(
    stderr.includes(`NativeAddonMissing: ${NAME}: could not load the native addon on ${process.platform} ${process.arch}${libc}, Node ${process.versions.node}, nor its WebAssembly fallback.`),
    stderr,
  );
  // One message: what was tried, and how to get the fallback.
  assert.match(stderr, new RegExp(escape(`Tried: ./${NAME}.${host}.node (a build in the package folder), ${NAME}-${host} (this platform's binary), ./${NAME}.wasi.cjs and ${NAME}-${WASI}, `)));
  assert.match(stderr, new RegExp(escape(`npm install --force ${NAME}-${WASI}@${release.manifest.version}`)));
  assert.match(stderr, /NAPI_RS_FORCE_WASI=1/);
  assert.match(stderr, new RegExp(escape(`ships in the package ${NAME}-${host}@${release.manifest.version},`)));
  assert.match(stderr, /--omit=optional/);
  assert.match(stderr, /Prebuilt platforms: linux-x64-gnu, linux-x64-musl, linux-arm64-gnu, linux-arm64-musl, darwin-x64, darwin-arm64, win32-x64-msvc\./);
  assert.match(stderr, /build from source with a Rust toolchain/);
  assert.match(stderr, new RegExp(escape(`Cannot find module '${NAME}-${host}'`)));
});
