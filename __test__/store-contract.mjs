// The store contract (shared/spec/store.md) as a reusable node:test suite.
//
//   import { storeContract } from "./store-contract.mjs";
//   storeContract("my store", () => makeStore(), { ...opts });
//
// Every test gets a fresh store from `makeStore()` (sync or async) and drives
// it with explicit `now` values; nothing reads a clock. Ids are UUIDs so a SQL
// store with uuid columns can run the same suite.
//
// opts (all default to the memory store's behaviour):
//   approveThrowsSync   approvePairing throws synchronously (false: a rejected promise is accepted too)
//   expireDueRecords    expireDue returns the records it wrote (false: only the effects are checked)
//   keyOrder            records have the reference's key order
//   subscribe           subscribe() notifies synchronously after writes
//   approveUsesRunnerId approvePairing creates the runner under args.runnerId
//   runnerId()          mints the runner ids the suite uses (default "runner-<uuid>"; SQL stores: "runner_<uuid>")
//   relayLeaseId()      mints the relay lease ids given to adopt (default "relay-…"; SQL stores: uuids)
//   cleanup(store)      called after each test (e.g. to close a pool)
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

export const JOB_KEYS = [
  "id", "kind", "envelope", "sizeClass", "audience", "purpose", "owner", "audienceAllow", "dependsOn",
  "state", "lease", "completedByLeaseId", "createdAt", "claimableAt", "ttlMs", "deadlineAt", "refusedBy",
  "attempts", "outcome", "provenance", "updatedAt",
];
export const RUNNER_KEYS = [
  "id", "owner", "device", "label", "platform", "daemonVersion", "capabilities", "revokedAt",
  "lastHeartbeatAt", "createdAt",
];
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export const T0 = 1_764_500_000_000;

export function envelope(deadlineAt = T0 + 3_600_000) {
  return {
    ciphertext: "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQ",
    recipientKeyId: "site-key-id",
    senderKeyId: "site-key-id",
    direction: "payload",
    deadlineAt,
  };
}

export function capability(over = {}) {
  return {
    kind: "llm.generate",
    service: "default",
    backendId: "ollama",
    backendClass: "http",
    model: "llama3",
    offerScope: "team",
    ...over,
  };
}

export function outcomeOk(text = "hello") {
  return { outcome: "ok", text, usage: { inputTokens: 3, outputTokens: 5 } };
}

export function provenance(runnerId, over = {}) {
  return {
    audience: "private",
    runnerId,
    runnerOwner: "owner",
    backendClass: "http",
    model: "llama3",
    untrusted: false,
    stop: "end",
    ...over,
  };
}

export function pairing(over = {}) {
  return {
    deviceCodeHash: randomUUID().replace(/-/g, "").repeat(2),
    userCode: "ABCD-EFGH",
    state: "pending",
    owner: null,
    runnerId: null,
    collected: false,
    label: "laptop",
    platform: "linux",
    daemonVersion: "0.1.1",
    capabilities: [capability()],
    device: { identity: "id-key", encryption: "enc-key", encryptionSig: "sig" },
    expiresAt: T0 + 600_000,
    createdAt: T0,
    ...over,
  };
}

export function storeContract(name, makeStore, opts = {}) {
  const o = {
    approveThrowsSync: true,
    expireDueRecords: true,
    keyOrder: true,
    subscribe: true,
    approveUsesRunnerId: true,
    ...opts,
  };

  // One fresh store per test, with people and helpers around it.
  function it(title, body) {
    test(title, async () => {
      const store = await makeStore();
      const alice = randomUUID();
      const bob = randomUUID();
      const carol = randomUUID();
      const h = {
        store,
        alice,
        bob,
        carol,
        async create(over = {}, now = T0) {
          const input = {
            id: randomUUID(),
            kind: "llm.generate",
            envelope: envelope(),
            sizeClass: "small",
            owner: alice,
            ...over,
          };
          return store.create(input, now);
        },
        claim(runnerId, runnerOwner, now, over = {}) {
          return store.claim({
            runnerId,
            runnerOwner,
            capabilities: [capability()],
            max: 10,
            leaseMs: 60_000,
            now,
            ...over,
          });
        },
        complete(job, now, over = {}) {
          return store.complete({
            jobId: job.id,
            runnerId: job.lease.runnerId,
            holder: { by: "lease", leaseId: job.lease.id },
            outcome: outcomeOk(),
            provenance: provenance(job.lease.runnerId),
            now,
            ...over,
          });
        },
        ref(job) {
          return { jobId: job.id, leaseId: job.lease.id };
        },
      };
      try {
        await body(h);
      } finally {
        await o.cleanup?.(store);
      }
    });
  }

  const ids = (jobs) => jobs.map((j) => j.id);
  const newRunnerId = o.runnerId ?? (() => "runner-" + randomUUID());
  const R1 = newRunnerId();
  const R2 = newRunnerId();
  const R_ALICE = newRunnerId();
  const RELAY_1 = o.relayLeaseId?.() ?? "relay-1";
  const RELAY = o.relayLeaseId?.() ?? "relay";

  describe(`store contract: ${name}`, () => {
    // ---------------------------------------------------------------- create
    describe("create", () => {
      it("builds the record with the reference's fields, defaults and key order", async ({ create, alice }) => {
        const job = await create({ payload: { prompt: "secret plaintext" } }, T0);
        if (o.keyOrder) assert.deepEqual(Object.keys(job), JOB_KEYS);
        assert.equal("payload" in job, false, "the plaintext payload is not stored");
        assert.ok("purpose" in job && job.purpose === undefined);
        assert.ok("audienceAllow" in job && job.audienceAllow === undefined);
        assert.deepEqual(job.envelope, envelope());
        assert.equal(job.kind, "llm.generate");
        assert.equal(job.sizeClass, "small");
        assert.equal(job.audience, "private");
        assert.equal(job.owner, alice);
        assert.deepEqual(job.dependsOn, []);
        assert.equal(job.state, "queued");
        assert.equal(job.lease, null);
        assert.equal(job.completedByLeaseId, null);
        assert.equal(job.createdAt, T0);
        assert.equal(job.claimableAt, T0);
        assert.equal(job.ttlMs, 900_000);
        assert.equal(job.deadlineAt, null);
        assert.deepEqual(job.refusedBy, []);
        assert.equal(job.attempts, 0);
        assert.equal(job.outcome, null);
        assert.equal(job.provenance, null);
        assert.equal(job.updatedAt, T0);
      });

      it("keeps the given options: audience, purpose, allowlist copy, ttl 0, deadline", async ({ create, store, bob }) => {
        const allow = [bob];
        const job = await create({ audience: "team", purpose: "summaries", audienceAllow: allow, ttlMs: 0, deadlineAt: T0 + 5 });
        allow.push("late-addition");
        const read = await store.get(job.id);
        assert.equal(read.audience, "team");
        assert.equal(read.purpose, "summaries");
        assert.deepEqual(read.audienceAllow, [bob], "the allowlist is copied");
        assert.equal(read.ttlMs, 0, "ttl 0 is kept, not replaced by the default");
        assert.equal(read.deadlineAt, T0 + 5);
      });

      it("is idempotent by id: the existing record comes back unchanged", async ({ create, store, bob }) => {
        const first = await create({}, T0);
        const again = await store.create(
          { id: first.id, kind: "llm.chat", envelope: envelope(1), sizeClass: "large", owner: bob, ttlMs: 1 },
          T0 + 500,
        );
        assert.deepEqual(again, first);
        assert.deepEqual(await store.get(first.id), first);
      });

      it("is blocked (claimableAt null) while a dependency is unknown or not ok", async ({ create }) => {
        const dep = await create();
        const blockedKnown = await create({ dependsOn: [dep.id] }, T0 + 1);
        const blockedUnknown = await create({ dependsOn: [randomUUID()] }, T0 + 1);
        assert.equal(blockedKnown.claimableAt, null);
        assert.equal(blockedUnknown.claimableAt, null);
        assert.deepEqual(blockedKnown.dependsOn, [dep.id]);
      });

      it("is claimable at once when every dependency is already ok", async ({ create, claim, complete, alice }) => {
        const dep = await create();
        const [held] = await claim(R1, alice, T0 + 1);
        await complete(held, T0 + 2);
        const child = await create({ dependsOn: [dep.id] }, T0 + 3);
        assert.equal(child.claimableAt, T0 + 3);
      });

      it("get of an unknown id is null", async ({ store }) => {
        assert.equal(await store.get(randomUUID()), null);
      });
    });

    // ----------------------------------------------------------------- claim
    describe("claim", () => {
      it("hands out oldest claimableAt first, ties in creation order, up to max", async ({ create, claim, alice }) => {
        const late = await create({}, T0 + 20);
        const early1 = await create({}, T0 + 10);
        const early2 = await create({}, T0 + 10);
        const got = await claim(R1, alice, T0 + 30, { max: 2 });
        assert.deepEqual(ids(got), [early1.id, early2.id]);
        const rest = await claim(R1, alice, T0 + 31);
        assert.deepEqual(ids(rest), [late.id]);
        assert.deepEqual(await claim(R1, alice, T0 + 32), []);
      });

      it("writes a fresh UUID v4 lease, attempts + 1, updatedAt; leaves claimableAt and deadline", async ({ create, claim, alice }) => {
        const job = await create({ deadlineAt: T0 + 100_000 }, T0);
        const [got] = await claim(R1, alice, T0 + 7, { leaseMs: 1234 });
        assert.equal(got.id, job.id);
        assert.equal(got.state, "claimed");
        assert.match(got.lease.id, UUID_V4);
        assert.equal(got.lease.runnerId, R1);
        assert.equal(got.lease.expiresAt, T0 + 7 + 1234);
        assert.equal(got.attempts, 1);
        assert.equal(got.updatedAt, T0 + 7);
        assert.equal(got.claimableAt, T0);
        assert.equal(got.deadlineAt, T0 + 100_000);
        if (o.keyOrder) {
          assert.deepEqual(Object.keys(got), JOB_KEYS);
          assert.deepEqual(Object.keys(got.lease), ["id", "runnerId", "expiresAt"]);
        }
      });

      it("skips jobs not yet claimable, blocked, or in another state", async ({ create, claim, alice }) => {
        await create({}, T0 + 100); // claimable in the future
        await create({ dependsOn: [randomUUID()] }, T0); // blocked
        const held = await create({}, T0);
        await claim(R1, alice, T0 + 1);
        assert.deepEqual(await claim(R2, alice, T0 + 50), []);
        const later = await claim(R2, alice, T0 + 100);
        assert.equal(later.length, 1);
        assert.notEqual(later[0].id, held.id);
      });

      it("sweeps first: a job past its TTL is expired, not handed out", async ({ create, claim, store, alice }) => {
        const job = await create({ ttlMs: 10 }, T0);
        assert.deepEqual(await claim(R1, alice, T0 + 10), []);
        assert.equal((await store.get(job.id)).state, "expired");
      });

      it("needs a capability for the job's kind and uses the first one for that kind", async ({ create, claim, alice, bob }) => {
        const chat = await create({ kind: "llm.chat", audience: "team" });
        assert.deepEqual(await claim(R1, bob, T0 + 1, { capabilities: [] }), []);
        assert.deepEqual(await claim(R1, bob, T0 + 1), [], "a generate capability does not serve chat");
        const caps = [
          capability({ kind: "llm.chat", backendId: "claude-cli", backendClass: "process", offerScope: "private" }),
          capability({ kind: "llm.chat" }),
        ];
        assert.deepEqual(await claim(R1, bob, T0 + 1, { capabilities: caps }), [], "first chat capability is private");
        const got = await claim(R1, bob, T0 + 1, { capabilities: [capability({ kind: "llm.chat" })] });
        assert.deepEqual(ids(got), [chat.id]);
        void alice;
      });

      it("applies the audience rule on both sides", async ({ create, claim, alice, bob, carol }) => {
        const priv = await create({ audience: "private" }, T0);
        const team = await create({ audience: "team" }, T0 + 1);
        const allowCarol = await create({ audience: "team", audienceAllow: [carol] }, T0 + 2);
        // Subscription backends never serve anyone else's work.
        const sub = [capability({ backendId: "claude-cli", backendClass: "process", offerScope: "team" })];
        assert.deepEqual(await claim(R1, bob, T0 + 3, { capabilities: sub }), []);
        // A private offer serves only its owner.
        assert.deepEqual(await claim(R1, bob, T0 + 3, { capabilities: [capability({ offerScope: "private" })] }), []);
        // A team offer from bob: the team job without an allowlist only.
        assert.deepEqual(ids(await claim(R1, bob, T0 + 3)), [team.id]);
        // Carol is on the allowlist; a metered team backend counts as spend-acknowledged on the server.
        const metered = [capability({ backendId: "openai", offerScope: "team" })];
        assert.deepEqual(ids(await claim(R2, carol, T0 + 4, { capabilities: metered })), [allowCarol.id]);
        // The owner's own runner takes the private job at any scope, even a subscription.
        assert.deepEqual(ids(await claim(R_ALICE, alice, T0 + 5, { capabilities: sub })), [priv.id]);
      });

      it("max 0 claims nothing", async ({ create, claim, alice }) => {
        await create();
        assert.deepEqual(await claim(R1, alice, T0 + 1, { max: 0 }), []);
      });
    });

    // ---------------------------------------------------------------- leases
    describe("renewLeases", () => {
      it("renews held grants to running with the same lease id; echoes the rest as lost", async (h) => {
        const { create, claim, store, alice } = h;
        await create();
        const [held] = await claim(R1, alice, T0 + 1);
        const other = { jobId: randomUUID(), leaseId: randomUUID() };
        const wrongGrant = { jobId: held.id, leaseId: randomUUID() };
        const result = await store.renewLeases({
          runnerId: R1,
          leases: [h.ref(held), other, wrongGrant, h.ref(held)],
          leaseMs: 500,
          now: T0 + 10,
        });
        assert.deepEqual(result, {
          renewed: [
            { jobId: held.id, expiresAt: T0 + 510 },
            { jobId: held.id, expiresAt: T0 + 510 },
          ],
          lost: [other, wrongGrant],
        });
        if (o.keyOrder) assert.deepEqual(Object.keys(result), ["renewed", "lost"]);
        const read = await store.get(held.id);
        assert.equal(read.state, "running");
        assert.deepEqual(read.lease, { id: held.lease.id, runnerId: R1, expiresAt: T0 + 510 });
        assert.equal(read.updatedAt, T0 + 10);
        assert.equal(read.attempts, 1);
        // Another runner naming this grant loses it.
        const stolen = await store.renewLeases({ runnerId: R2, leases: [h.ref(held)], leaseMs: 500, now: T0 + 11 });
        assert.deepEqual(stolen, { renewed: [], lost: [h.ref(held)] });
      });

      it("sweeps first: a lapsed lease is lost, not renewed", async (h) => {
        const { create, claim, store, alice } = h;
        await create();
        const [held] = await claim(R1, alice, T0 + 1, { leaseMs: 100 });
        const result = await store.renewLeases({ runnerId: R1, leases: [h.ref(held)], leaseMs: 100, now: T0 + 101 });
        assert.deepEqual(result, { renewed: [], lost: [h.ref(held)] });
        const read = await store.get(held.id);
        assert.equal(read.state, "queued");
        assert.equal(read.claimableAt, T0 + 101);
      });

      it("a terminal job's grant is lost", async (h) => {
        const { create, claim, store, complete, alice } = h;
        await create();
        const [held] = await claim(R1, alice, T0 + 1);
        await complete(held, T0 + 2);
        const result = await store.renewLeases({ runnerId: R1, leases: [h.ref(held)], leaseMs: 100, now: T0 + 3 });
        assert.deepEqual(result.lost, [h.ref(held)]);
      });
    });

    describe("lease expiry and reclaim", () => {
      it("requeues with claimableAt = now, keeping attempts and refusals; a new claim is a new grant", async (h) => {
        const { create, claim, store, alice } = h;
        const job = await create({ ttlMs: 1000 });
        const [first] = await claim(R1, alice, T0 + 1, { leaseMs: 100 });
        await store.release({ runnerId: R1, leases: [h.ref(first)], reason: "refused", now: T0 + 2 });
        const [second] = await claim(R2, alice, T0 + 3, { leaseMs: 100 });
        assert.equal(second.attempts, 2);
        await store.expireDue(T0 + 103);
        const read = await store.get(job.id);
        assert.equal(read.state, "queued");
        assert.equal(read.lease, null);
        assert.equal(read.completedByLeaseId, null);
        assert.equal(read.claimableAt, T0 + 103, "the TTL clock restarts");
        assert.equal(read.updatedAt, T0 + 103);
        assert.equal(read.attempts, 2);
        assert.deepEqual(read.refusedBy, [R1]);
        const [third] = await claim(R2, alice, T0 + 104);
        assert.notEqual(third.lease.id, second.lease.id);
        assert.equal(third.attempts, 3);
        // TTL from the requeue: still alive just before, gone at requeue + ttl.
        await store.release({ runnerId: R2, leases: [h.ref(third)], reason: "shutdown", now: T0 + 105 });
        await store.expireDue(T0 + 105 + 999);
        assert.equal((await store.get(job.id)).state, "queued");
        await store.expireDue(T0 + 105 + 1000);
        assert.equal((await store.get(job.id)).state, "expired");
      });

      it("a holder whose lease lapsed but was not swept can still complete", async ({ create, claim, complete, alice }) => {
        await create();
        const [held] = await claim(R1, alice, T0 + 1, { leaseMs: 10 });
        const result = await complete(held, T0 + 500);
        assert.equal(result.accepted, true);
      });
    });

    describe("adopt", () => {
      it("takes a relay lease (runnerId '') on a queued job; same lease id refreshes, another is refused", async ({ create, store }) => {
        const job = await create();
        assert.equal(await store.adopt({ jobId: randomUUID(), leaseId: "L", expiresAt: T0 + 9, now: T0 }), null);
        const adopted = await store.adopt({ jobId: job.id, leaseId: RELAY_1, expiresAt: T0 + 50, now: T0 + 1 });
        assert.equal(adopted.state, "claimed");
        assert.deepEqual(adopted.lease, { id: RELAY_1, runnerId: "", expiresAt: T0 + 50 });
        assert.equal(adopted.attempts, 0, "adopt does not count as a claim");
        assert.equal(adopted.updatedAt, T0 + 1);
        assert.equal(await store.adopt({ jobId: job.id, leaseId: "relay-2", expiresAt: T0 + 60, now: T0 + 2 }), null);
        const again = await store.adopt({ jobId: job.id, leaseId: RELAY_1, expiresAt: T0 + 70, now: T0 + 3 });
        assert.equal(again.lease.expiresAt, T0 + 70);
      });

      it("never lapses by the lease clock; ends at its deadline", async ({ create, store }) => {
        const job = await create({ ttlMs: 10_000 });
        await store.adopt({ jobId: job.id, leaseId: RELAY, expiresAt: T0 + 5, now: T0 });
        await store.expireDue(T0 + 9_999);
        assert.equal((await store.get(job.id)).state, "claimed");
        await store.expireDue(T0 + 10_000);
        const read = await store.get(job.id);
        assert.equal(read.state, "expired");
        assert.equal(read.lease, null);
      });

      it("is refused for terminal jobs; release and renew never match an adopted lease", async ({ create, store }) => {
        const job = await create();
        const done = await create();
        await store.cancel(done.id, T0 + 1);
        assert.equal(await store.adopt({ jobId: done.id, leaseId: "x", expiresAt: T0 + 9, now: T0 + 2 }), null);
        await store.adopt({ jobId: job.id, leaseId: RELAY, expiresAt: T0 + 50, now: T0 });
        const ref = { jobId: job.id, leaseId: RELAY };
        assert.deepEqual(await store.release({ runnerId: R1, leases: [ref], reason: "shutdown", now: T0 + 1 }), []);
        assert.deepEqual((await store.renewLeases({ runnerId: R1, leases: [ref], leaseMs: 5, now: T0 + 1 })).lost, [ref]);
      });
    });

    // ----------------------------------------------------------------- sweep
    describe("expireDue", () => {
      it("expires queued jobs at TTL or deadline (<=), blocked ones only by deadline; idempotent", async ({ create, store }) => {
        const ttl = await create({ ttlMs: 100 }, T0);
        const deadline = await create({ deadlineAt: T0 + 50 }, T0);
        const blocked = await create({ dependsOn: [randomUUID()], ttlMs: 1 }, T0);
        const blockedDeadline = await create({ dependsOn: [randomUUID()], deadlineAt: T0 + 200 }, T0);
        const first = await store.expireDue(T0 + 49);
        if (o.expireDueRecords) assert.deepEqual(first, []);
        const second = await store.expireDue(T0 + 50);
        if (o.expireDueRecords) assert.deepEqual(ids(second), [deadline.id]);
        await store.expireDue(T0 + 100);
        assert.equal((await store.get(ttl.id)).state, "expired");
        const expired = await store.get(ttl.id);
        assert.equal(expired.updatedAt, T0 + 100);
        assert.equal((await store.get(blocked.id)).state, "queued");
        await store.expireDue(T0 + 200);
        assert.equal((await store.get(blockedDeadline.id)).state, "expired");
        assert.equal((await store.get(blocked.id)).state, "queued", "no TTL clock while blocked");
        const again = await store.expireDue(T0 + 200);
        if (o.expireDueRecords) assert.deepEqual(again, []);
      });

      it("runs three passes in order; a requeued job can expire in the same sweep", async (h) => {
        const { create, claim, store, alice } = h;
        const a = await create({ deadlineAt: T0 + 50 }, T0);
        const b = await create({}, T0 + 1);
        const c = await create({ ttlMs: 100 }, T0 + 2);
        await claim(R1, alice, T0 + 3, { leaseMs: 10, max: 2 });
        const changed = await store.expireDue(T0 + 102);
        if (o.expireDueRecords) {
          assert.deepEqual(
            changed.map((j) => [j.id, j.state]),
            [[a.id, "queued"], [b.id, "queued"], [a.id, "expired"], [c.id, "expired"]],
          );
          assert.equal(changed[0].claimableAt, T0 + 102);
        }
        assert.equal((await store.get(a.id)).state, "expired");
        assert.equal((await store.get(b.id)).state, "queued");
      });

      it("never expires a held (non-adopted) job, even past its deadline", async ({ create, claim, store, alice }) => {
        const job = await create({ deadlineAt: T0 + 10 });
        await claim(R1, alice, T0 + 1, { leaseMs: 1000 });
        await store.expireDue(T0 + 500);
        assert.equal((await store.get(job.id)).state, "claimed");
      });
    });

    // -------------------------------------------------------------- complete
    describe("complete", () => {
      it("maps the outcome to the state and records the grant, outcome and provenance", async (h) => {
        const { create, claim, store, alice } = h;
        for (const [outcome, state] of [
          [outcomeOk(), "ok"],
          [{ outcome: "canceled" }, "canceled"],
          [{ outcome: "error", code: "backend", message: "boom" }, "error"],
          [{ outcome: "refused", reason: "nope" }, "error"],
        ]) {
          const job = await create({}, T0);
          const [held] = (await claim(R1, alice, T0 + 1)).filter((j) => j.id === job.id);
          const prov = provenance(R1);
          const result = await store.complete({
            jobId: job.id,
            runnerId: R1,
            holder: { by: "lease", leaseId: held.lease.id },
            outcome,
            provenance: prov,
            now: T0 + 2,
          });
          if (o.keyOrder) assert.deepEqual(Object.keys(result), ["accepted", "job"]);
          assert.equal(result.accepted, true);
          assert.equal(result.job.state, state);
          assert.equal(result.job.lease, null);
          assert.equal(result.job.completedByLeaseId, held.lease.id);
          assert.deepEqual(result.job.outcome, outcome);
          assert.deepEqual(result.job.provenance, prov);
          assert.equal(result.job.updatedAt, T0 + 2);
          assert.deepEqual(await store.get(job.id), result.job);
        }
      });

      it("by runner: the runner must hold the lease; completedByLeaseId is the old lease", async ({ create, claim, store, alice }) => {
        const job = await create();
        const [held] = await claim(R1, alice, T0 + 1);
        const base = { jobId: job.id, runnerId: R2, outcome: outcomeOk(), provenance: provenance(R2), now: T0 + 2 };
        const wrong = await store.complete({ ...base, holder: { by: "runner", runnerId: R2 } });
        assert.equal(wrong.accepted, false);
        assert.equal(wrong.job.state, "claimed");
        const right = await store.complete({ ...base, runnerId: R1, holder: { by: "runner", runnerId: R1 } });
        assert.equal(right.accepted, true);
        assert.equal(right.job.completedByLeaseId, held.lease.id);
      });

      it("by lease: the lease id decides, the runner is not compared", async ({ create, claim, store, alice }) => {
        const job = await create();
        const [held] = await claim(R1, alice, T0 + 1);
        const base = { jobId: job.id, runnerId: R2, outcome: outcomeOk(), provenance: provenance(R2), now: T0 + 2 };
        assert.equal((await store.complete({ ...base, holder: { by: "lease", leaseId: randomUUID() } })).accepted, false);
        assert.equal((await store.complete({ ...base, holder: { by: "lease", leaseId: held.lease.id } })).accepted, true);
      });

      it("first terminal outcome wins; only the same device and grant is told duplicate", async ({ create, claim, complete, store, alice }) => {
        const job = await create();
        const [held] = await claim(R1, alice, T0 + 1);
        const first = await complete(held, T0 + 2);
        const replay = await complete(held, T0 + 3, { outcome: { outcome: "error", code: "x", message: "late" } });
        if (o.keyOrder) assert.deepEqual(Object.keys(replay), ["accepted", "duplicate", "job"]);
        assert.deepEqual(replay, { accepted: false, duplicate: true, job: first.job });
        const otherDevice = await complete(held, T0 + 3, { runnerId: R2, provenance: provenance(R2) });
        assert.deepEqual(otherDevice, { accepted: false, job: first.job });
        const byRunner = await complete(held, T0 + 3, { holder: { by: "runner", runnerId: R1 } });
        assert.deepEqual(byRunner, { accepted: false, job: first.job });
        const otherGrant = await complete(held, T0 + 3, { holder: { by: "lease", leaseId: randomUUID() } });
        assert.deepEqual(otherGrant, { accepted: false, job: first.job });
        assert.deepEqual(await store.get(job.id), first.job);
      });

      it("refuses unknown (job null), expired, and queued jobs", async ({ create, store }) => {
        const args = (jobId) => ({
          jobId,
          runnerId: R1,
          holder: { by: "runner", runnerId: R1 },
          outcome: outcomeOk(),
          provenance: provenance(R1),
          now: T0 + 5,
        });
        assert.deepEqual(await store.complete(args(randomUUID())), { accepted: false, job: null });
        const queued = await create();
        assert.deepEqual(await store.complete(args(queued.id)), { accepted: false, job: queued });
        const expired = await create({ ttlMs: 1 });
        await store.expireDue(T0 + 1);
        const result = await store.complete(args(expired.id));
        assert.equal(result.accepted, false);
        assert.equal(result.job.state, "expired");
      });

      it("unblocks dependents only when every dependency is ok", async ({ create, claim, complete, store, alice }) => {
        const d1 = await create({}, T0);
        const d2 = await create({}, T0);
        const bad = await create({}, T0);
        const child = await create({ dependsOn: [d1.id, d2.id] }, T0);
        const orphan = await create({ dependsOn: [bad.id] }, T0);
        const held = await claim(R1, alice, T0 + 1);
        const byId = new Map(held.map((j) => [j.id, j]));
        await complete(byId.get(d1.id), T0 + 2);
        assert.equal((await store.get(child.id)).claimableAt, null);
        await complete(byId.get(d2.id), T0 + 3);
        const ready = await store.get(child.id);
        assert.equal(ready.claimableAt, T0 + 3);
        assert.equal(ready.updatedAt, T0 + 3);
        await complete(byId.get(bad.id), T0 + 4, { outcome: { outcome: "error", code: "x", message: "y" } });
        assert.equal((await store.get(orphan.id)).claimableAt, null, "an error never unblocks");
        assert.deepEqual(ids(await claim(R1, alice, T0 + 5)), [child.id]);
      });
    });

    // --------------------------------------------------------------- release
    describe("release", () => {
      it("requeues only the named grant of this runner; refusal remembered once", async (h) => {
        const { create, claim, store, alice } = h;
        const job = await create();
        const [held] = await claim(R1, alice, T0 + 1);
        const ignored = await store.release({
          runnerId: R1,
          leases: [{ jobId: job.id, leaseId: randomUUID() }, { jobId: randomUUID(), leaseId: held.lease.id }],
          reason: "refused",
          now: T0 + 2,
        });
        assert.deepEqual(ignored, []);
        assert.deepEqual(await store.release({ runnerId: R2, leases: [h.ref(held)], reason: "refused", now: T0 + 2 }), []);
        const released = await store.release({ runnerId: R1, leases: [h.ref(held)], reason: "refused", now: T0 + 3 });
        assert.deepEqual(released, [job.id]);
        const read = await store.get(job.id);
        assert.equal(read.state, "queued");
        assert.equal(read.lease, null);
        assert.equal(read.claimableAt, T0 + 3);
        assert.equal(read.updatedAt, T0 + 3);
        assert.deepEqual(read.refusedBy, [R1]);
        assert.deepEqual(await claim(R1, alice, T0 + 4), [], "never offered again to the refusing runner");
        const [again] = await claim(R2, alice, T0 + 4);
        await store.release({ runnerId: R2, leases: [h.ref(again)], reason: "pause", now: T0 + 5 });
        assert.deepEqual((await store.get(job.id)).refusedBy, [R1], "only `refused` is remembered");
      });
    });

    // ---------------------------------------------------------------- cancel
    describe("cancel", () => {
      it("cancels a queued job at once; unknown is null; terminal unchanged", async ({ create, store }) => {
        assert.equal(await store.cancel(randomUUID(), T0), null);
        const job = await create();
        const canceled = await store.cancel(job.id, T0 + 1);
        assert.equal(canceled.state, "canceled");
        assert.equal(canceled.outcome, null);
        assert.equal(canceled.provenance, null);
        assert.equal(canceled.updatedAt, T0 + 1);
        assert.deepEqual(await store.cancel(job.id, T0 + 2), canceled);
      });

      it("a held job gets a cancel request for its holder, cleared by complete only", async (h) => {
        const { create, claim, store, complete, alice } = h;
        const job = await create();
        const [held] = await claim(R1, alice, T0 + 1);
        const unchanged = await store.cancel(job.id, T0 + 2);
        assert.deepEqual(unchanged, held);
        await store.cancel(job.id, T0 + 3);
        assert.deepEqual(await store.listCancelRequests(R1), [h.ref(held)]);
        assert.deepEqual(await store.listCancelRequests(R2), []);
        // Release keeps the request; the next holder hears it.
        await store.release({ runnerId: R1, leases: [h.ref(held)], reason: "shutdown", now: T0 + 4 });
        assert.equal((await store.get(job.id)).state, "queued");
        assert.deepEqual(await store.listCancelRequests(R1), []);
        const [next] = await claim(R2, alice, T0 + 5);
        assert.deepEqual(await store.listCancelRequests(R2), [h.ref(next)]);
        await complete(next, T0 + 6, { outcome: { outcome: "canceled" } });
        assert.equal((await store.get(job.id)).state, "canceled");
        assert.deepEqual(await store.listCancelRequests(R2), []);
      });

      it("listClaimedBy lists the jobs whose lease is this runner's", async ({ create, claim, store, alice }) => {
        const a = await create({}, T0);
        const b = await create({}, T0 + 1);
        await claim(R1, alice, T0 + 2, { max: 1 });
        await claim(R2, alice, T0 + 2, { max: 1 });
        assert.deepEqual(ids(await store.listClaimedBy(R1)), [a.id]);
        assert.deepEqual(ids(await store.listClaimedBy(R2)), [b.id]);
        assert.deepEqual(await store.listClaimedBy("nobody"), []);
      });
    });

    // --------------------------------------------------------------- pairing
    describe("pairings and runners", () => {
      it("stores pairings by hash (overwrite) and finds the first by user code", async ({ store }) => {
        const p1 = pairing({ userCode: "SAME-CODE" });
        const p2 = pairing({ userCode: "SAME-CODE" });
        await store.createPairing(p1);
        await store.createPairing(p2);
        assert.deepEqual(await store.getPairingByDeviceCodeHash(p2.deviceCodeHash), p2);
        assert.deepEqual(await store.getPairingByUserCode("SAME-CODE"), p1);
        assert.equal(await store.getPairingByUserCode("NONE-NONE"), null);
        assert.equal(await store.getPairingByDeviceCodeHash("0".repeat(64)), null);
        const replaced = { ...p1, userCode: "MOVED-AWAY" };
        await store.createPairing(replaced);
        assert.deepEqual(await store.getPairingByDeviceCodeHash(p1.deviceCodeHash), replaced);
        assert.deepEqual(await store.getPairingByUserCode("SAME-CODE"), p2);
      });

      it("approve refuses unknown, expired (<=) and non-pending codes with the reference's messages", async ({ store, alice }) => {
        const approve = (args) => {
          if (o.approveThrowsSync) {
            let error;
            try {
              store.approvePairing(args);
            } catch (e) {
              error = e;
            }
            assert.ok(error instanceof Error, "throws synchronously");
            return error;
          }
          return store.approvePairing(args).then(
            () => assert.fail("should refuse"),
            (e) => e,
          );
        };
        const args = (userCode, now = T0) => ({ userCode, owner: alice, runnerId: newRunnerId(), now });
        assert.equal((await approve(args("NOPE-NOPE"))).message, "unknown pairing code: NOPE-NOPE");
        await store.createPairing(pairing({ userCode: "LATE-CODE", expiresAt: T0 + 10 }));
        assert.equal((await approve(args("LATE-CODE", T0 + 10))).message, "pairing code has expired");
        await store.createPairing(pairing({ userCode: "GOOD-CODE" }));
        await store.approvePairing(args("GOOD-CODE"));
        assert.equal((await approve(args("GOOD-CODE"))).message, "pairing is already approved");
        await store.createPairing(pairing({ userCode: "DENY-CODE" }));
        await store.denyPairing("DENY-CODE", T0);
        assert.equal((await approve(args("DENY-CODE"))).message, "pairing is already denied");
      });

      it("approve creates the runner from the pairing and marks the pairing approved", async ({ store, alice }) => {
        const p = pairing({ userCode: "WXYZ-WXYZ" });
        await store.createPairing(p);
        const runnerId = newRunnerId();
        const runner = await store.approvePairing({ userCode: "WXYZ-WXYZ", owner: alice, runnerId, now: T0 + 5 });
        if (o.keyOrder) assert.deepEqual(Object.keys(runner), RUNNER_KEYS);
        if (o.approveUsesRunnerId) assert.equal(runner.id, runnerId);
        assert.equal(runner.owner, alice);
        assert.deepEqual(runner.device, p.device);
        assert.deepEqual(runner.capabilities, p.capabilities);
        assert.equal(runner.label, p.label);
        assert.equal(runner.platform, p.platform);
        assert.equal(runner.daemonVersion, p.daemonVersion);
        assert.equal(runner.revokedAt, null);
        assert.equal(runner.lastHeartbeatAt, T0 + 5);
        assert.equal(runner.createdAt, T0 + 5);
        assert.deepEqual(await store.getRunner(runner.id), runner);
        const after = await store.getPairingByDeviceCodeHash(p.deviceCodeHash);
        assert.equal(after.state, "approved");
        assert.equal(after.owner, alice);
        assert.equal(after.runnerId, runner.id);
        assert.equal(after.collected, false);
        if (o.keyOrder) assert.deepEqual(Object.keys(after), Object.keys(p));
        await store.consumePairingToken(p.deviceCodeHash);
        assert.equal((await store.getPairingByDeviceCodeHash(p.deviceCodeHash)).collected, true);
        // Deny works on an approved pairing; the runner survives.
        await store.denyPairing("WXYZ-WXYZ", T0 + 6);
        assert.equal((await store.getPairingByDeviceCodeHash(p.deviceCodeHash)).state, "denied");
        assert.notEqual(await store.getRunner(runner.id), null);
        await store.denyPairing("UNKNOWN-CODE", T0 + 6);
      });

      it("touch, revoke (one-way) and list runners", async ({ store, alice, bob }) => {
        const make = async (owner, code) => {
          await store.createPairing(pairing({ userCode: code }));
          return store.approvePairing({ userCode: code, owner, runnerId: newRunnerId(), now: T0 });
        };
        const a = await make(alice, "AAAA-AAAA");
        const b = await make(bob, "BBBB-BBBB");
        assert.equal(await store.getRunner("runner-unknown"), null);
        assert.equal(
          await store.touchRunner({ runnerId: "runner-unknown", capabilities: [], daemonVersion: "9", now: T0 }),
          null,
        );
        const caps = [capability({ kind: "llm.chat" })];
        const touched = await store.touchRunner({ runnerId: a.id, capabilities: caps, daemonVersion: "0.2.0", now: T0 + 9 });
        assert.deepEqual(touched.capabilities, caps);
        assert.equal(touched.daemonVersion, "0.2.0");
        assert.equal(touched.lastHeartbeatAt, T0 + 9);
        if (o.keyOrder) assert.deepEqual(Object.keys(touched), RUNNER_KEYS);
        await store.revokeRunner(a.id, T0 + 10);
        await store.revokeRunner(a.id, T0 + 20);
        assert.equal((await store.getRunner(a.id)).revokedAt, T0 + 10, "the first revocation time is kept");
        await store.revokeRunner("runner-unknown", T0);
        assert.deepEqual((await store.listRunners()).map((r) => r.id), [a.id, b.id]);
        assert.deepEqual((await store.listRunners(alice)).map((r) => r.id), [a.id], "revoked runners are listed");
        assert.deepEqual((await store.listRunners(randomUUID())).map((r) => r.id), []);
      });
    });

    // ------------------------------------------------------------- subscribe
    describe("subscribe", { skip: o.subscribe ? false : "this store has no synchronous subscribe" }, () => {
      it("calls a job's handlers after its writes; unsubscribe is idempotent and removes only that handler", async (h) => {
        const { create, claim, store, alice } = h;
        const id = randomUUID();
        const calls = [];
        const unA = store.subscribe(id, () => calls.push("a"));
        const unB = store.subscribe(id, () => {
          calls.push("b");
          throw new Error("a throwing handler is ignored");
        });
        store.subscribe(randomUUID(), () => calls.push("other job"));
        await create({ id }, T0);
        assert.deepEqual(calls, ["a", "b"]);
        await create({ id }, T0 + 1);
        assert.deepEqual(calls, ["a", "b"], "an idempotent create writes nothing");
        unA();
        unA();
        await claim(R1, alice, T0 + 2);
        assert.deepEqual(calls, ["a", "b", "b"]);
        unB();
        await store.cancel(id, T0 + 3);
        await store.expireDue(T0 + 10_000_000);
        assert.deepEqual(calls, ["a", "b", "b"]);
      });

      it("notifies writes made inside other operations (sweep inside claim, unblock inside complete)", async (h) => {
        const { create, claim, complete, store, alice } = h;
        const dep = await create({}, T0);
        const child = await create({ dependsOn: [dep.id] }, T0);
        const short = await create({ ttlMs: 5 }, T0 + 100);
        const seen = [];
        store.subscribe(child.id, () => seen.push("child"));
        store.subscribe(short.id, () => seen.push("short"));
        const [held] = await claim(R1, alice, T0 + 1, { max: 1 });
        await complete(held, T0 + 2);
        assert.deepEqual(seen, ["child"]);
        await claim(R2, alice, T0 + 105, { capabilities: [] });
        assert.deepEqual(seen, ["child", "short"]);
      });
    });
  });
}
