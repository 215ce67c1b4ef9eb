// Our MemoryStore on its own, with no reference package imported, so this
// runs under Node 20 as well as 22: the whole store contract, plus what only
// our store has (retention, odd envelopes, the native handle).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { MemoryStore } from "../dist/memory.js";
import { PROTOCOL } from "../dist/native.js";
import { storeContract, envelope, capability, T0, JOB_KEYS, RUNNER_KEYS } from "./store-contract.mjs";

storeContract("native MemoryStore (no reference loaded)", () => new MemoryStore());

const claimArgs = (now) => ({
  runnerId: "runner-1",
  runnerOwner: "alice",
  capabilities: [capability()],
  max: 10,
  leaseMs: 1000,
  now,
});

describe("native MemoryStore extras", () => {
  test("the core's record key lists, which every store's records follow, are the reference's", () => {
    assert.deepEqual(PROTOCOL.jobKeys, JOB_KEYS);
    assert.deepEqual(PROTOCOL.runnerKeys, RUNNER_KEYS);
    assert.deepEqual(PROTOCOL.envelopeKeys, Object.keys(envelope()));
  });

  test("retentionMs drops terminal jobs that long after they ended, and only those", async () => {
    const store = new MemoryStore({ retentionMs: 1000 });
    const done = await store.create({ id: "done", kind: "llm.generate", envelope: envelope(), sizeClass: "small", owner: "alice" }, T0);
    const live = await store.create({ id: "live", kind: "llm.generate", envelope: envelope(), sizeClass: "small", owner: "alice" }, T0);
    await store.cancel(done.id, T0 + 10);
    await store.expireDue(T0 + 1009);
    assert.notEqual(await store.get("done"), null);
    await store.expireDue(T0 + 1010);
    assert.equal(await store.get("done"), null, "dropped at end + retention");
    assert.equal((await store.get(live.id)).state, "queued");
    assert.deepEqual(store.allJobs().map((j) => j.id), ["live"]);
    // The id is free again: a new job, not the old record.
    const again = await store.create({ id: "done", kind: "llm.chat", envelope: envelope(), sizeClass: "small", owner: "bob" }, T0 + 2000);
    assert.equal(again.kind, "llm.chat");
    assert.equal(again.state, "queued");
  });

  test("without retentionMs nothing is ever dropped", async () => {
    const store = new MemoryStore();
    await store.create({ id: "a", kind: "llm.generate", envelope: envelope(), sizeClass: "small", owner: "alice" }, T0);
    await store.cancel("a", T0 + 1);
    await store.expireDue(T0 + 1e12);
    assert.equal((await store.get("a")).state, "canceled");
  });

  test("envelopes of any other shape come back deep-equal, key order kept", async () => {
    const store = new MemoryStore();
    const odd = [
      { deadlineAt: 5, ciphertext: "AAEC", recipientKeyId: "k", senderKeyId: "k", direction: "payload" },
      { ...envelope(), extra: { nested: [1, "two", null] } },
      { ...envelope(), ciphertext: "AAE=" }, // padded: kept as text, not re-encoded
      { ...envelope(), ciphertext: "not base64url!" },
      { ...envelope(), deadlineAt: 1.5 },
    ];
    for (const [at, env] of odd.entries()) {
      const job = await store.create({ id: `odd-${at}`, kind: "llm.generate", envelope: env, sizeClass: "small", owner: "alice" }, T0);
      assert.deepEqual(job.envelope, env);
      assert.deepEqual(Object.keys(job.envelope), Object.keys(env));
      assert.deepEqual((await store.get(job.id)).envelope, env);
    }
  });

  test("opaque values (outcome, provenance, capabilities) come back deep-equal", async () => {
    const store = new MemoryStore();
    await store.create({ id: "a", kind: "llm.generate", envelope: envelope(), sizeClass: "small", owner: "alice" }, T0);
    const [held] = await store.claim(claimArgs(T0 + 1));
    const outcome = { outcome: "ok", text: "ünïcödé \u2028 \"quoted\" \\ \n", usage: { inputTokens: 1, outputTokens: 2 } };
    const provenance = { audience: "private", runnerId: "runner-1", runnerOwner: "alice", backendClass: "http", model: "m", untrusted: false, stop: "length", stopReported: true };
    const result = await store.complete({ jobId: "a", runnerId: "runner-1", holder: { by: "lease", leaseId: held.lease.id }, outcome, provenance, now: T0 + 2 });
    assert.deepEqual(result.job.outcome, outcome);
    assert.deepEqual(result.job.provenance, provenance);
    assert.notEqual(result.job.outcome, outcome, "a copy, not the caller's object");
  });

  test("numbers survive exactly: fractions, large values, Infinity", async () => {
    const store = new MemoryStore();
    const job = await store.create(
      { id: "n", kind: "llm.generate", envelope: envelope(), sizeClass: "small", owner: "alice", ttlMs: Infinity, deadlineAt: 2 ** 53 + 2 },
      0.1 + 0.2,
    );
    assert.equal(job.createdAt, 0.1 + 0.2);
    assert.equal(job.ttlMs, Infinity);
    assert.equal(job.deadlineAt, 2 ** 53 + 2);
  });

  test("a claim is fast with many jobs this runner cannot take", async () => {
    const store = new MemoryStore();
    for (let i = 0; i < 20_000; i += 1) {
      const team = i % 2 === 0;
      await store.create(
        {
          id: `j${i}`,
          kind: "llm.generate",
          envelope: envelope(),
          sizeClass: "small",
          owner: `owner-${i % 100}`,
          ...(team ? { audience: "team", audienceAllow: ["someone-else"] } : {}),
        },
        T0,
      );
    }
    const start = process.hrtime.bigint();
    for (let i = 0; i < 200; i += 1) assert.deepEqual(await store.claim({ ...claimArgs(T0 + 1), runnerOwner: "stranger" }), []);
    const perClaimUs = Number(process.hrtime.bigint() - start) / 200 / 1000;
    // A scan of 20,000 jobs costs milliseconds even natively; the indexes make it microseconds.
    assert.ok(perClaimUs < 500, `claim took ${perClaimUs.toFixed(1)} µs`);
  });
});
