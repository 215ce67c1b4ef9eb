// Records from our MemoryStore (no retention) read a large sealed envelope
// from the native store on first access. These tests hold the lazy records to the
// eager ones (a store with retention keeps envelopes in its records): same
// keys in the same order, same JSON, deep-equal, assignable, freezable.
// No reference package is imported, so this runs under Node 20 too.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryStore } from "../dist/memory.js";
import { JOB_KEYS, envelope, capability, T0 } from "./store-contract.mjs";

/** A sealed envelope big enough (≥ 16 KiB of ciphertext) to be left out of records. */
const big = () => ({ ...envelope(), ciphertext: "q83vEjRWeJCrze8S".repeat(1500) });
const input = (id, env = big()) => ({ id, kind: "llm.generate", envelope: env, sizeClass: "small", owner: "alice" });
const claimArgs = (now) => ({
  runnerId: "runner-1",
  runnerOwner: "alice",
  capabilities: [capability()],
  max: 10,
  leaseMs: 1000,
  now,
});

/** Run the same operations on a lazy and an eager store; return both records of each step. */
async function bothWays(steps) {
  const lazy = new MemoryStore();
  // Retention far in the future: never drops anything here, but keeps records eager.
  const eager = new MemoryStore({ retentionMs: 1e12 });
  return [await steps(lazy), await steps(eager)];
}

test("lazy records equal eager ones through a whole cycle (keys, order, JSON, deep equality)", async () => {
  const odd = { ciphertext: "x", extra: [1, { a: null }] };
  const [lazy, eager] = await bothWays(async (store) => {
    const out = [];
    out.push(await store.create(input("a"), T0));
    out.push(await store.create(input("raw", odd), T0));
    out.push(await store.create(input("arr", [1, "two"]), T0));
    out.push(await store.create(input("small", envelope()), T0));
    const claimed = await store.claim(claimArgs(T0 + 1));
    assert.equal(claimed.length, 4);
    out.push(...claimed);
    out.push(await store.get("a"));
    const done = await store.complete({
      jobId: "a",
      runnerId: "runner-1",
      holder: { by: "lease", leaseId: claimed[0].lease.id },
      outcome: { outcome: "ok", text: "hi" },
      provenance: { runnerId: "runner-1" },
      now: T0 + 2,
    });
    out.push(done.job);
    out.push(...store.allJobs());
    return out;
  });
  assert.equal(lazy.length, eager.length);
  for (let at = 0; at < lazy.length; at += 1) {
    const l = lazy[at];
    const e = eager[at];
    assert.deepEqual(Object.keys(l), JOB_KEYS, `keys ${at}`);
    // Lease ids are random; line them up before comparing whole records.
    if (l.lease !== null) e.lease.id = l.lease.id;
    if (l.completedByLeaseId !== null) e.completedByLeaseId = l.completedByLeaseId;
    assert.equal(JSON.stringify(l), JSON.stringify(e), `JSON ${at}`);
    assert.deepStrictEqual(l, e, `record ${at}`);
  }
  assert.deepStrictEqual(lazy[0].envelope, big());
  assert.deepStrictEqual(lazy[1].envelope, odd);
  assert.deepStrictEqual(lazy[2].envelope, [1, "two"], "a caller's array is not read as sealed parts");
  assert.deepStrictEqual(lazy[3].envelope, envelope());
});

test("a lazy envelope reads once, then is a plain property; assignment and freezing behave as on a plain record", async () => {
  const store = new MemoryStore();
  const record = await store.create(input("a"), T0);
  assert.equal(typeof Object.getOwnPropertyDescriptor(record, "envelope").get, "function");
  const small = await store.create(input("small", envelope()), T0);
  assert.equal(Object.getOwnPropertyDescriptor(small, "envelope").get, undefined, "small envelopes stay inline");
  const first = record.envelope;
  assert.equal(record.envelope, first, "the same object on the second read");
  const settled = Object.getOwnPropertyDescriptor(record, "envelope");
  assert.equal(settled.value, first);
  assert.equal(settled.enumerable && settled.writable && settled.configurable, true);

  const assigned = await store.get("a");
  assigned.envelope = "mine";
  assert.equal(assigned.envelope, "mine");
  assert.deepEqual(Object.keys(assigned), JOB_KEYS);
  assert.deepStrictEqual((await store.get("a")).envelope, big(), "the store's copy is untouched");

  const frozen = Object.freeze(await store.get("a"));
  assert.deepStrictEqual(frozen.envelope, big());
  assert.deepStrictEqual({ ...frozen }.envelope, big());
  assert.throws(() => {
    frozen.envelope = 1;
  }, TypeError);
  assert.deepStrictEqual(frozen.envelope, big());

  const sealed = Object.seal(await store.get("a"));
  sealed.envelope = "sealed but writable";
  assert.equal(sealed.envelope, "sealed but writable");
  assert.equal(JSON.parse(JSON.stringify(sealed)).envelope, "sealed but writable");
});

test("lazy records keep V8's fast properties and share one hidden class", async () => {
  // %HaveSameMap and %HasFastProperties need V8's natives syntax, so the check runs in a child process.
  const { spawnSync } = await import("node:child_process");
  const url = new URL("../dist/memory.js", import.meta.url).href;
  const script = `
    const { MemoryStore } = await import(${JSON.stringify(url)});
    const store = new MemoryStore();
    const env = { ciphertext: "q83vEjRWeJCrze8S".repeat(1500), recipientKeyId: "r", senderKeyId: "s", direction: "payload", deadlineAt: 1 };
    const make = (id) => store.create({ id, kind: "llm.generate", envelope: env, sizeClass: "small", owner: "alice" }, 1);
    const a = await make("a");
    const b = await make("b");
    const lazy = typeof Object.getOwnPropertyDescriptor(a, "envelope").get === "function";
    console.log(JSON.stringify({ lazy, same: %HaveSameMap(a, b), fast: %HasFastProperties(a) && %HasFastProperties(b) }));
  `;
  const run = spawnSync(process.execPath, ["--allow-natives-syntax", "--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  // Dictionary mode (what giving a built record the accessor did) costs ≈ 0.3 KB a record.
  assert.deepEqual(JSON.parse(run.stdout), { lazy: true, same: true, fast: true });
});

test("a record inheriting a lazy record's accessor reads the same envelope", async () => {
  const store = new MemoryStore();
  const record = await store.create(input("a"), T0);
  const child = Object.create(record);
  assert.deepStrictEqual(child.envelope, big());
  assert.deepStrictEqual(record.envelope, big(), "the parent still reads it");
  const other = Object.create(await store.get("a"));
  other.envelope = "own";
  assert.equal(other.envelope, "own");
  assert.deepStrictEqual(Object.getPrototypeOf(other).envelope, big(), "assigning on the child leaves the parent's envelope");
});
