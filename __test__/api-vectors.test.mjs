// The public API against the reference's recorded answers (tests/vectors/),
// with no reference package loaded, so it runs on Node 20 as well as 22:
// enqueue refusals and the stored record, siteKeysFromEnv's three errors,
// formatSiteKeys' exact text, the constructors' errors.
import { test } from "node:test";
import * as dev from "./helpers/device-crypto.mjs";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ByollmApp, ByollmHandlers, MemoryStore, formatSiteKeys, siteKeysFromEnv, createFetchHandler } from "../dist/index.js";


// The one message we word differently on purpose: the reference's advice,
// `npx --package @byollm/server keygen`, asks the registry for the reference
// when this package is installed under its alias; `npx --no keygen` runs the
// installed one under either name (docs/differences.md).
const keygenAdvice = (message) => message.replace("`npx --package @byollm/server keygen`", "`npx --no keygen`");
const vectors = new URL("../tests/vectors/", import.meta.url);
const misc = JSON.parse(readFileSync(new URL("misc.json", vectors), "utf8"));
const keys = JSON.parse(readFileSync(new URL("keys.json", vectors), "utf8"));
const SITE = keys.parties.site.storedKeys;

test("enqueue refusals: the exact messages of misc.json#enqueueRefusals", async () => {
  const app = new ByollmApp({ store: new MemoryStore(), siteKeys: SITE });
  assert.ok(misc.enqueueRefusals.length >= 10);
  for (const row of misc.enqueueRefusals) {
    await assert.rejects(app.enqueue(row.input), (error) => {
      assert.equal(error.name, row.result.error.name, row.name);
      assert.equal(error.message, row.result.error.message, row.name);
      return true;
    });
  }
  // Nothing was stored by a refused enqueue.
  assert.equal((await app.runners("alice")).length, 0);
});

test("enqueue stores the reference's record and seals the schema-ordered payload", async () => {
  const row = misc.enqueueStores;
  const store = new MemoryStore();
  const app = new ByollmApp({ store, siteKeys: SITE, now: () => row.now });
  const { record } = await app.enqueue(row.input);
  const expected = { ...row.record, envelope: { ...row.record.envelope, ciphertext: record.envelope.ciphertext } };
  // The vector went through JSON, which drops the keys the reference keeps
  // with value undefined (purpose, audienceAllow); compare through JSON too.
  assert.deepEqual(JSON.parse(JSON.stringify(record)), expected);
  assert.equal(JSON.stringify(record), JSON.stringify(expected));
  assert.ok("purpose" in record && record.purpose === undefined);
  assert.ok("audienceAllow" in record && record.audienceAllow === undefined);
  const opened = dev.open({
    envelope: record.envelope,
    recipientKeys: SITE,
    senderIdentityPublic: SITE.identityPublic,
    expected: { jobId: record.id, senderKeyId: keys.parties.site.keyId, recipientKeyId: keys.parties.site.keyId, direction: "payload" },
  });
  assert.deepEqual(opened, { ok: true, plaintext: row.sealedPlaintext });
});

test("siteKeysFromEnv: misc.json#siteKeysFromEnv, errors word for word", () => {
  for (const row of misc.siteKeysFromEnv) {
    const call = () => (row.variable === null ? siteKeysFromEnv(undefined, row.env) : siteKeysFromEnv(row.variable, row.env));
    if (row.result.ok) assert.deepEqual(call(), row.result.value, row.name);
    else assert.throws(call, (e) => e.name === row.result.error.name && e.message === row.result.error.message, row.name);
  }
  // The default env is process.env.
  process.env.D1_TEST_SITE_KEYS = keys.parties.site.siteKeysEnvValue;
  try {
    assert.deepEqual(siteKeysFromEnv("D1_TEST_SITE_KEYS"), SITE);
  } finally {
    delete process.env.D1_TEST_SITE_KEYS;
  }
});

test("formatSiteKeys: keys.json's exact text", () => {
  assert.equal(formatSiteKeys(SITE), keys.parties.site.formatSiteKeys);
});

test("constructors: inconsistent keys and bad base paths, with the reference's messages", () => {
  for (const row of misc.byollmHandlersConstructor) {
    const siteKeys = row.result.ok ? SITE : { ...SITE, encryptionPublic: keys.parties.device.storedKeys.encryptionPublic };
    const make = () => new ByollmHandlers({ store: new MemoryStore(), siteKeys, verificationUrl: "https://x.example" });
    if (row.result.ok) make();
    else assert.throws(make, (e) => e.message === keygenAdvice(row.result.error.message), row.name);
  }
  for (const row of misc.createFetchHandlerConstructor) {
    const make = () => createFetchHandler({ store: new MemoryStore(), siteKeys: SITE, verificationUrl: "https://x.example", basePath: row.basePath });
    if (row.result.ok) assert.equal(typeof make(), "function");
    else assert.throws(make, (e) => e.message === row.result.error.message, row.basePath);
  }
});
