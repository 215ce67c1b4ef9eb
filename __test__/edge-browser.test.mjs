// The edge module (edge/) in a real browser (Debian chromium through playwright-core,
// as __test__/browser.test.mjs uses): served as plain ES modules from a
// loopback server, imported by a page, and checked against the reference in
// both directions.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import * as protocol from "@byollm/protocol";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const executablePath = process.env.BYOLLM_CHROMIUM ?? "/usr/bin/chromium";
const fixture = JSON.parse(readFileSync(join(root, "tests", "vectors", "keys.fixture.json"), "utf8"));
const envelopes = JSON.parse(readFileSync(join(root, "tests", "vectors", "envelopes.json"), "utf8"));

let server;
let origin;
let context;
let profile;

before(async () => {
  // Fail, not skip: CI installs chromium, and a missing browser must be seen.
  assert.ok(existsSync(executablePath), `chromium is not installed at ${executablePath} (apt-get install chromium, or set BYOLLM_CHROMIUM)`);
  if (!existsSync(join(root, "edge", "wasm-inline.js"))) {
    const b = spawnSync(process.execPath, [join(root, "scripts", "build-wasm.mjs")], { cwd: root, stdio: "inherit" });
    assert.equal(b.status, 0, "scripts/build-wasm.mjs failed");
  }
  // Only edge/ is served, plus an empty page to import it from.
  server = createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    if (path === "/") {
      res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>edge</title>");
      return;
    }
    const file = normalize(join(root, path));
    if (!path.startsWith("/edge/") || !file.startsWith(join(root, "edge")) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    const type = file.endsWith(".js") ? "text/javascript" : file.endsWith(".wasm") ? "application/wasm" : "text/plain";
    res.writeHead(200, { "content-type": type }).end(readFileSync(file));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  origin = `http://127.0.0.1:${server.address().port}`;
  profile = mkdtempSync(join(tmpdir(), "byollm-edge-chromium-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    timeout: 30_000,
  });
});

after(async () => {
  await context?.close();
  server?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

test("edge module in chromium: vectors, interop with @byollm/protocol both ways, cold start", async () => {
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(origin + "/");
  const now = 1767225600000;
  const device = protocol.generateKeys(now);
  const context_ = {
    jobId: "job-browser",
    senderKeyId: protocol.keyId(fixture.site.identityPublic),
    recipientKeyId: protocol.keyId(device.identityPublic),
    deadlineAt: now + 86_400_000,
    direction: "payload",
  };
  const refSealed = await protocol.seal({ plaintext: "from the reference ✓", senderKeys: fixture.site, recipientEncryptionPublic: device.encryptionPublic, context: context_ });
  const vector = envelopes.cases.find((c) => c.kind === "base" && c.sealInput.plaintext !== undefined);
  const tampered = envelopes.cases.filter((c) => c.kind === "tampered" && !c.expectedResult.throws);

  const out = await page.evaluate(
    async ({ site, device, context_, refSealed, vector, tampered, fixture }) => {
      const t0 = performance.now();
      const edge = await import("/edge/index.js");
      const coldMs = performance.now() - t0;
      const { deadlineAt: _d, ...expected } = context_;
      const opened = await edge.open({ envelope: refSealed, recipientKeys: device, senderIdentityPublic: site.identityPublic, expected });
      const vectorOpened = await edge.open({
        envelope: vector.envelope,
        recipientKeys: fixture[vector.open.recipient],
        senderIdentityPublic: fixture[vector.open.senderIdentity].identityPublic,
        expected: vector.open.expected,
      });
      const reasons = [];
      for (const c of tampered) {
        const r = await edge.open({
          envelope: c.envelope,
          recipientKeys: fixture[c.open.recipient],
          senderIdentityPublic: fixture[c.open.senderIdentity]?.identityPublic ?? c.open.senderIdentity,
          expected: c.open.expected,
        });
        reasons.push(JSON.stringify(r) === JSON.stringify(c.expectedResult));
      }
      const back = await edge.seal({
        plaintext: "from the browser ✓",
        senderKeys: device,
        recipientEncryptionPublic: site.encryptionPublic,
        context: { ...context_, senderKeyId: context_.recipientKeyId, recipientKeyId: context_.senderKeyId, direction: "result" },
      });
      const keys = edge.generateKeys(Date.now());
      return { coldMs, opened, vectorOpened, reasons, back, keys, ua: navigator.userAgent };
    },
    { site: fixture.site, device, context_, refSealed, vector, tampered, fixture },
  );

  console.log(`# edge in ${out.ua.match(/(Headless)?Chrome\/[\d.]+/)?.[0]}: import + instantiate ${out.coldMs.toFixed(1)} ms`);
  assert.deepEqual(out.opened, { ok: true, plaintext: "from the reference ✓" });
  assert.deepEqual(out.vectorOpened, vector.expectedResult);
  assert.equal(out.reasons.length, tampered.length);
  assert.ok(out.reasons.every(Boolean), "every tampered vector gives the reference's reason in the browser");
  const res = await protocol.open({
    envelope: out.back,
    recipientKeys: fixture.site,
    senderIdentityPublic: device.identityPublic,
    expected: { jobId: "job-browser", senderKeyId: context_.recipientKeyId, recipientKeyId: context_.senderKeyId, direction: "result" },
  });
  assert.deepEqual(res, { ok: true, plaintext: "from the browser ✓" });
  assert.equal(protocol.verifyPublicIdentity(protocol.publicIdentityOf(out.keys)), true);
  assert.ok(out.coldMs < 1000, `edge import took ${out.coldMs} ms in the browser`);
});

test("edge/manual.js in chromium: init() with a streamed fetch of the .wasm", async () => {
  const page = await context.newPage();
  await page.goto(origin + "/");
  const out = await page.evaluate(async (identity) => {
    const edge = await import("/edge/manual.js");
    const before = edge.isReady();
    let early;
    try {
      edge.keyId(identity);
    } catch (err) {
      early = err.message;
    }
    const t0 = performance.now();
    await edge.init(fetch("/edge/byollm_edge.wasm"));
    const initMs = performance.now() - t0;
    return { before, early, after: edge.isReady(), keyId: edge.keyId(identity), initMs };
  }, fixture.site.identityPublic);
  console.log(`# edge/manual.js: init(fetch(.wasm)) ${out.initMs.toFixed(1)} ms`);
  assert.equal(out.before, false);
  assert.match(out.early, /not loaded yet/);
  assert.equal(out.after, true);
  assert.equal(out.keyId, "BYOLLM-EA1K-Z4XJ-89JV-57J7-CG5C-KY87");
  await page.close();
});
