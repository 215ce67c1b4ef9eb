// A sweep that changes a great many jobs at once (after an outage, say), or
// allJobs() on a big store, describes more records than one JavaScript string
// may hold. The native store then answers in several JSON arrays; the wrapper
// must return every record, in order, exactly as a small answer would.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryStore } from "../dist/index.js";

test("a sweep and allJobs larger than one answer string return every record, in order", () => {
  const store = new MemoryStore();
  // ~3 KB per record: 30,000 of them are ~90 MB of JSON, over the 64 MiB cut.
  const ciphertext = "A".repeat(2_900);
  const envelope = { ciphertext, recipientKeyId: "K", senderKeyId: "K", direction: "payload", deadlineAt: 1 };
  const n = 30_000;
  const t0 = 1_000_000;
  return (async () => {
    for (let i = 0; i < n; i++) {
      await store.create({ id: `job-${i}`, kind: "llm.generate", envelope, sizeClass: "small", owner: "o", ttlMs: 10 }, t0);
    }
    const raw = store.native.expireDue(t0 + 10);
    assert.ok(Array.isArray(raw) && raw.length > 1, "the native answer came in several parts");
    // The sweep already happened; read the records through the public API.
    const all = store.allJobs();
    assert.equal(all.length, n);
    assert.deepEqual(all.map((j) => j.id).slice(0, 3), ["job-0", "job-1", "job-2"]);
    assert.equal(all[n - 1].id, `job-${n - 1}`);
    assert.ok(all.every((j) => j.state === "expired" && j.envelope.ciphertext === ciphertext));

    // And through expireDue itself, on a second batch.
    for (let i = 0; i < n; i++) {
      await store.create({ id: `late-${i}`, kind: "llm.generate", envelope, sizeClass: "small", owner: "o", ttlMs: 10 }, t0 + 100);
    }
    const changed = await store.expireDue(t0 + 110);
    assert.equal(changed.length, n);
    assert.equal(changed[0].id, "late-0");
    assert.equal(changed[n - 1].id, `late-${n - 1}`);
    assert.ok(changed.every((j) => j.state === "expired"));
  })();
});
