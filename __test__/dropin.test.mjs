// The drop-in claim, literally: `npm pack` this package, install the tarball
// into a fresh project under /tmp as `@byollm/server` (an npm alias), and run
// an unmodified consumer that imports `@byollm/server` and
// `@byollm/server/next` and drives a whole job with a daemon-side client built
// on @byollm/protocol, which the consumer declares itself (our package has no
// runtime dependency). No network and no warm npm cache: the tarballs are
// local, and the registry dependencies (@byollm/protocol and its own) are
// packed from this repository's node_modules and served on 127.0.0.1.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { stageRelease } from "../scripts/pack-release.mjs";
import { exec, npmEnv, packDependencies, serveRegistry } from "./helpers/registry.mjs";
// Imported so the runner keeps this file off Node 20 (the consumer uses @byollm/protocol).
import "@byollm/protocol";

const root = fileURLToPath(new URL("..", import.meta.url));

const CONSUMER = String.raw`
import assert from "node:assert/strict";
import { ByollmApp, MemoryStore, generateSiteKeys } from "@byollm/server";
import { createHandler } from "@byollm/server/next";
import { generateKeys, keyId, open, publicIdentityOf, seal, signRequest } from "@byollm/protocol";

const siteKeys = generateSiteKeys();
const store = new MemoryStore();
const app = new ByollmApp({ store, siteKeys });
export const { POST, GET, dynamic } = createHandler(() => ({
  store,
  siteKeys,
  verificationUrl: "https://app.example/settings/runners",
  basePath: "/api/byollm",
}));
assert.equal(dynamic, "force-dynamic");

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

const start = await call("pair", { action: "start", daemon: { version: "0.1.1", label: "laptop", platform: "linux" }, device: identity, capabilities }, false);
assert.equal(start.status, 200);
const runner = await app.approvePairing({ userCode: start.body.userCode, owner: "alice" });
runnerId = runner.id;
const poll = await call("pair", { action: "poll", deviceCode: start.body.deviceCode }, false);
assert.equal(poll.body.status, "approved");
const [siteKeyId, site] = Object.entries(poll.body.sites)[0];

const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "Say hi." }, owner: "alice" });
const claim = await call("claim", { runnerId, capabilities, max: 1 });
const stub = claim.body.jobs[0];
assert.equal(stub.id, handle.id);
const fetched = await call("fetch", { runnerId, jobId: stub.id, leaseId: stub.lease.id });
const opened = await open({
  envelope: fetched.body.envelope,
  recipientKeys: device,
  senderIdentityPublic: site.identity,
  expected: { jobId: stub.id, senderKeyId: siteKeyId, recipientKeyId: keyId(identity.identity), direction: "payload" },
});
assert.equal(opened.ok, true);
assert.equal(JSON.parse(opened.plaintext).prompt, "Say hi.");
const envelope = await seal({
  plaintext: JSON.stringify({ outcome: { outcome: "ok", text: "Hi there, from the drop-in." }, ran: { model: "llama3.2", backendClass: "http", durationMs: 5 } }),
  senderKeys: device,
  recipientEncryptionPublic: site.encryption,
  context: { jobId: stub.id, senderKeyId: keyId(identity.identity), recipientKeyId: siteKeyId, deadlineAt: Date.now() + 86400000, direction: "result" },
});
const result = await call("result", { runnerId, jobId: stub.id, leaseId: stub.lease.id, envelope, disposition: "ok" });
assert.deepEqual(result.body, { accepted: true, state: "ok" });
const delivered = await app.result(handle.id);
assert.equal(delivered.state, "ok");
assert.equal(delivered.outcome.text, "Hi there, from the drop-in.");
console.log("DROPIN-OK " + delivered.outcome.text);
`;

test("npm pack → install as @byollm/server → an unmodified consumer runs a whole job", { timeout: 240_000 }, async () => {
  const work = mkdtempSync(join(tmpdir(), "byollm-dropin-"));
  let registry;
  try {
    // Packed as a release is (scripts/pack-release.mjs): the main package, and
    // the .node in its platform package, which the main one lists as an optional dependency.
    const { main: tarball, platforms, host, manifest } = stageRelease({ work });
    const listing = spawnSync("tar", ["-tzf", tarball], { encoding: "utf8" }).stdout.split("\n");
    for (const needed of ["package/dist/index.js", "package/dist/next.js", "package/index.js", "package/bin/keygen.mjs"]) {
      assert.ok(listing.includes(needed), `${needed} is not in the tarball`);
    }
    const platformListing = spawnSync("tar", ["-tzf", platforms[host]], { encoding: "utf8" }).stdout.split("\n");
    assert.ok(platformListing.some((f) => /^package\/[^/]+\.node$/.test(f)), "the native .node file is not in the platform tarball");

    const project = join(work, "consumer");
    spawnSync("mkdir", ["-p", project]);
    writeFileSync(
      join(project, "package.json"),
      JSON.stringify({
        name: "consumer",
        private: true,
        type: "module",
        // The platform package by path: the registry below does not serve it by the version the main package names.
        // @byollm/protocol is the consumer's own: an app that imports it declares it (the reference's install
        // brought it along as a dependency of @byollm/server; ours has none).
        dependencies: {
          "@byollm/server": `file:${tarball}`,
          [`byollm-server-native-${host}`]: `file:${platforms[host]}`,
          "@byollm/protocol": "0.1.1",
        },
      }),
    );
    writeFileSync(join(project, "app.mjs"), CONSUMER);
    // A user installing our package gets no EBADENGINE warning on Node 20: it depends on nothing.
    assert.deepEqual(manifest.dependencies ?? {}, {}, "the package has no runtime dependencies");
    registry = await serveRegistry(packDependencies({ dependencies: { "@byollm/protocol": "0.1.1" } }, join(work, "tarballs")));
    const install = await exec("npm", ["install", "--ignore-scripts"], { cwd: project, env: npmEnv(registry.url, work) });
    assert.equal(install.status, 0, `npm install failed:\n${install.stdout}\n${install.stderr}`);
    assert.ok(registry.fetched.includes("@byollm/protocol"), `@byollm/protocol came from the loopback registry (fetched: ${registry.fetched.join(", ")})`);
    assert.ok(existsSync(join(project, "node_modules", "@byollm", "server", "dist", "index.js")));

    const node22 = join(root, "node_modules", "node", "bin", "node");
    const run = spawnSync(node22, ["app.mjs"], { cwd: project, encoding: "utf8" });
    assert.equal(run.status, 0, `consumer failed:\n${run.stdout}\n${run.stderr}`);
    assert.match(run.stdout, /^DROPIN-OK Hi there, from the drop-in\.$/m);

    // The bin, as `npx --no keygen` runs it (with whatever `node` is on PATH).
    const keygen = spawnSync(join(project, "node_modules", ".bin", "keygen"), [], { cwd: project, encoding: "utf8" });
    assert.equal(keygen.status, 0, keygen.stderr);
    assert.match(keygen.stdout, /^BYOLLM_SITE_KEYS=[A-Za-z0-9+/]+=*$/m);
    const help = spawnSync(join(project, "node_modules", ".bin", "keygen"), ["-h"], { cwd: project, encoding: "utf8" });
    assert.match(help.stdout, /^usage: npx --no keygen\n/);
  } finally {
    await registry?.close();
    rmSync(work, { recursive: true, force: true });
  }
});
