// The fetch handler's reseal of a large envelope where our MemoryStore keeps
// it (SiteKeyring.resealStoredForDeviceAsync), and which records qualify
// (unreadEnvelopeStore). The end-to-end bytes are held by
// large-fetch.test.mjs; this pins the pieces. No reference package: runs on
// Node 20 too.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as native from "../index.js";
import { ByollmApp, MemoryStore, generateSiteKeys } from "../dist/index.js";
import { unreadEnvelopeStore } from "../dist/memory.js";

const SITE = generateSiteKeys();

async function setup(promptChars) {
  const store = new MemoryStore();
  const app = new ByollmApp({ store, siteKeys: SITE });
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "é".repeat(promptChars) }, owner: "alice" });
  return { store, app, id: handle.id };
}

test("unreadEnvelopeStore: a large envelope not yet read names our store; reading or assigning it ends that", async () => {
  const { store, id } = await setup(40_000);
  const a = await store.get(id);
  assert.equal(unreadEnvelopeStore(a), store.native);
  assert.equal(typeof a.envelope.ciphertext, "string");
  assert.equal(unreadEnvelopeStore(a), undefined, "read");

  const b = await store.get(id);
  b.envelope = { replaced: true };
  assert.equal(unreadEnvelopeStore(b), undefined, "assigned");
  assert.deepEqual(b.envelope, { replaced: true });

  const spread = { ...(await store.get(id)) };
  assert.equal(unreadEnvelopeStore(spread), undefined, "a copy is a plain object");

  // A small payload enqueued here is sealed at rest later (by the background
  // thread, or by its first reader): until then its records read it lazily too.
  const small = await setup(100);
  const early = await small.store.get(small.id);
  assert.equal(typeof early.envelope.ciphertext, "string");
  assert.equal(unreadEnvelopeStore(early), undefined, "read");
  assert.equal(unreadEnvelopeStore(await small.store.get(small.id)), undefined, "small sealed envelopes stay inline");
});

for (const chars of [40_000, 100]) {
  test(`resealStoredForDeviceAsync seals what resealForDeviceAsync seals from the same record (${chars}-char prompt)`, async () => {
    // 100 chars: a small payload whose at-rest seal may not be made yet.
    const { store, id } = await setup(chars);
    const ring = new native.SiteKeyring(SITE);
    const device = native.generateKeys(Date.now());
    const identity = native.publicIdentityOf(device);
    const record = await store.get(id);

    const fromStore = await ring.resealStoredForDeviceAsync(store.native, id, record.createdAt, identity);
    const fromRecord = await ring.resealForDeviceAsync(record.envelope, id, record.createdAt, identity);
    const openAsDevice = (envelope) =>
      native.open({
        envelope,
        recipientKeys: device,
        senderIdentityPublic: SITE.identityPublic,
        expected: { jobId: id, senderKeyId: ring.keyId, recipientKeyId: native.keyId(device.identityPublic), direction: "payload" },
      });
    const a = openAsDevice(fromStore);
    const b = openAsDevice(fromRecord);
    assert.equal(a.ok, true);
    assert.equal(a.plaintext, b.plaintext);
    assert.equal(JSON.parse(a.plaintext).prompt, "é".repeat(chars));
    const { ciphertext: _x, ...restA } = fromStore;
    const { ciphertext: _y, ...restB } = fromRecord;
    assert.deepEqual(restA, restB);

    assert.equal(await ring.resealStoredForDeviceAsync(store.native, "no-such-job", record.createdAt, identity), null);
    // Another store does not hold this id.
    const other = await setup(40_000);
    assert.equal(await ring.resealStoredForDeviceAsync(other.store.native, id, record.createdAt, identity), null);
    // A device key nothing can be sealed to rejects, as the record path does.
    assert.equal(await ring.resealStoredForDeviceAsync(store.native, id, record.createdAt, { ...identity, encryption: "AAAA" }).catch(() => "threw"), "threw");
  });
}
