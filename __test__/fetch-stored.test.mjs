// The fetch handler's reseal of a large envelope where our MemoryStore keeps
// it (NativeMemoryStore.resealForDeviceAsync), and which records qualify
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
  test(`the store's resealForDeviceAsync seals what resealForDevice seals from the same record (${chars}-char prompt)`, async () => {
    // 100 chars: a small payload whose at-rest seal may not be made yet.
    const { store, id } = await setup(chars);
    const ring = new native.SiteKeyring(SITE);
    const device = native.generateKeys(Date.now());
    const identity = native.publicIdentityOf(device);
    const record = await store.get(id);

    const stored = await store.native.resealForDeviceAsync(ring, id, record.createdAt, identity);
    const fromStore = stored.envelope;
    assert.equal(stored.text, JSON.stringify({ envelope: fromStore }));
    const fromRecord = (await ring.resealForDevice(record.envelope, id, record.createdAt, identity)).envelope;
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

    assert.equal(await store.native.resealForDeviceAsync(ring, "no-such-job", record.createdAt, identity), null);
    // Another store does not hold this id.
    const other = await setup(40_000);
    assert.equal(await other.store.native.resealForDeviceAsync(ring, id, record.createdAt, identity), null);
    // A device key nothing can be sealed to rejects, as the record path does.
    assert.equal(await store.native.resealForDeviceAsync(ring, id, record.createdAt, { ...identity, encryption: "AAAA" }).catch(() => "threw"), "threw");
  });
}

test("a large payload enqueued on our store: its at-rest envelope is made later, once, and opens to it; refusals are the general path's", async () => {
  const lazy = new MemoryStore();
  const eager = new MemoryStore({ retentionMs: 1e12 });
  const prompt = "ü".repeat(70_000);
  const open = (envelope, id) =>
    native.open({
      envelope,
      recipientKeys: SITE,
      senderIdentityPublic: SITE.identityPublic,
      expected: { jobId: id, senderKeyId: native.keyId(SITE.identityPublic), recipientKeyId: native.keyId(SITE.identityPublic), direction: "payload" },
    });
  for (const store of [lazy, eager]) {
    const app = new ByollmApp({ store, siteKeys: SITE });
    // A plain object of strings (written natively) and one that is not.
    for (const payload of [{ prompt }, { prompt, system: "s", extra: undefined }, { messages: [{ role: "user", content: prompt }] }]) {
      const kind = "messages" in payload ? "llm.chat" : "llm.generate";
      const handle = await app.enqueue({ kind, payload, owner: "alice" });
      const fromStore = (await store.get(handle.id)).envelope;
      assert.deepEqual(handle.record.envelope, fromStore, "one envelope");
      assert.deepEqual((await store.get(handle.id)).envelope, fromStore);
      const opened = open(fromStore, handle.id);
      assert.equal(opened.ok, true);
      assert.deepEqual(JSON.parse(opened.plaintext), JSON.parse(JSON.stringify(payload)));
    }
    // The same refusals as through a store the app does not recognise (the general path).
    const wrapped = Object.fromEntries(
      ["create", "get", "claim", "complete", "expireDue", "getRunner"].map((m) => [m, (...a) => store[m](...a)]),
    );
    const general = new ByollmApp({ store: wrapped, siteKeys: SITE });
    const outcome = (target, input) => target.enqueue(input).then(() => "stored", (e) => `${e.constructor.name}: ${e.message}`);
    for (const bad of [{ kind: "llm.embed", payload: { prompt } }, { kind: "llm.generate", payload: { prompt: 7, system: prompt } }]) {
      const input = { ...bad, owner: "alice" };
      const viaGeneral = await outcome(general, input);
      assert.notEqual(viaGeneral, "stored");
      assert.equal(await outcome(app, input), viaGeneral);
    }
  }
});
