// A large job through the fetch handler: the record's envelope is read lazily
// from the native store, and the fetch answer's text is written by the core
// with the reseal rather than JSON.stringify'd. Both must give exactly the bytes the plain
// path would. No reference package is imported, so this runs under Node 20 too.
import * as deviceKeys from "../scripts/device-keys.mjs";
import * as dev from "./helpers/device-crypto.mjs";
import { test } from "node:test";
import assert from "node:assert/strict";
import * as native from "../index.js";
import { ByollmApp, MemoryStore, createFetchHandler, generateSiteKeys } from "../dist/index.js";

const ORIGIN = "https://site.example";
const SITE = generateSiteKeys();

async function call(handler, keys, runnerId, endpoint, body, sign = true) {
  const text = JSON.stringify({ protocolVersion: "2", ...body });
  const headers = { "content-type": "application/json" };
  if (sign) {
    const sig = deviceKeys.signRequest(keys, { endpoint, runnerId, issuedAt: Date.now(), body: text });
    headers["x-byollm-runner"] = sig.runnerId;
    headers["x-byollm-issued-at"] = String(sig.issuedAt);
    headers["x-byollm-signature"] = sig.signature;
  }
  const response = await handler(new Request(`${ORIGIN}/byollm/${endpoint}`, { method: "POST", headers, body: text }));
  return { status: response.status, text: await response.text() };
}

test("a 300 KB prompt: fetch answers canonical JSON the device opens to the exact payload", async () => {
  const store = new MemoryStore();
  const app = new ByollmApp({ store, siteKeys: SITE });
  const handler = createFetchHandler({ store, siteKeys: SITE, verificationUrl: `${ORIGIN}/runners` });
  const keys = native.generateKeys(Date.now());
  const identity = deviceKeys.publicIdentityOf(keys);
  const capabilities = [{ kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m1", offerScope: "private" }];

  const start = await call(handler, keys, undefined, "pair", { action: "start", daemon: { version: "0.1.1", label: "t", platform: "linux" }, device: identity, capabilities }, false);
  const { deviceCode, userCode } = JSON.parse(start.text);
  const runner = await app.approvePairing({ userCode, owner: "alice" });
  const poll = JSON.parse((await call(handler, keys, undefined, "pair", { action: "poll", deviceCode }, false)).text);
  const site = Object.values(poll.sites)[0];

  const prompt = "long prompt ✓ ".repeat(22_000);
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: "alice" });
  const claim = JSON.parse((await call(handler, keys, runner.id, "claim", { runnerId: runner.id, capabilities, max: 1 })).text);
  assert.equal(claim.jobs.length, 1);
  const stub = claim.jobs[0];
  const fetched = await call(handler, keys, runner.id, "fetch", { runnerId: runner.id, jobId: stub.id, leaseId: stub.lease.id });
  assert.equal(fetched.status, 200);
  const body = JSON.parse(fetched.text);
  assert.equal(fetched.text, JSON.stringify(body), "the core's text is what JSON.stringify writes");
  assert.deepEqual(Object.keys(body.envelope), ["ciphertext", "recipientKeyId", "senderKeyId", "direction", "deadlineAt"]);
  assert.ok(body.envelope.ciphertext.length > 64 * 1024, "large enough for the thread pool");
  const opened = dev.open({
    envelope: body.envelope,
    recipientKeys: keys,
    senderIdentityPublic: site.identity,
    expected: { jobId: handle.id, senderKeyId: stub.site, recipientKeyId: dev.keyId(identity.identity), direction: "payload" },
  });
  assert.equal(opened.ok, true);
  assert.equal(JSON.parse(opened.plaintext).prompt, prompt);
  // The stored record still carries its own (site-sealed) envelope, read on demand.
  const record = await store.get(handle.id);
  assert.deepStrictEqual(record.envelope, handle.record.envelope);
  assert.equal(record.envelope.recipientKeyId, dev.keyId(SITE.identityPublic));
});
