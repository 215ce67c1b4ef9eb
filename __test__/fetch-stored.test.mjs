// A large payload enqueued on our MemoryStore: its at-rest envelope made
// once, later, and the same refusals as through a store the app does not
// recognise. The end-to-end bytes of a large fetch are held by
// large-fetch.test.mjs. No reference package: runs on Node 20 too.
import { test } from "node:test";
import * as dev from "./helpers/device-crypto.mjs";
import assert from "node:assert/strict";
import { ByollmApp, MemoryStore, generateSiteKeys } from "../dist/index.js";

const SITE = generateSiteKeys();

test("a large payload enqueued on our store: its at-rest envelope is made later, once, and opens to it; refusals are the general path's", async () => {
  const lazy = new MemoryStore();
  const eager = new MemoryStore({ retentionMs: 1e12 });
  const prompt = "ü".repeat(70_000);
  const open = (envelope, id) =>
    dev.open({
      envelope,
      recipientKeys: SITE,
      senderIdentityPublic: SITE.identityPublic,
      expected: { jobId: id, senderKeyId: dev.keyId(SITE.identityPublic), recipientKeyId: dev.keyId(SITE.identityPublic), direction: "payload" },
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
