// The store contract against the reference MemoryStore (proving the suite),
// ours, and the plain JavaScript store a user would write
// (helpers/plain-store.mjs); then the three stores driven through the same
// seeded random operation sequences, every answer compared whole with the
// reference's: shape, key order, null vs undefined, with lease ids (random
// UUIDs in each) replaced by aliases.
// Node 22: imports @byollm/server.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { MemoryStore as ReferenceStore } from "@byollm/server";
import { MemoryStore } from "../dist/memory.js";
import { storeContract, envelope, capability, pairing, T0 } from "./store-contract.mjs";
import { PlainStore } from "./helpers/plain-store.mjs";
import { xorshift32 } from "../scripts/prng.mjs";

storeContract("reference @byollm/server MemoryStore", () => new ReferenceStore());
storeContract("native MemoryStore", () => new MemoryStore());
// A user writes `async approvePairing`, so its refusals are rejected
// promises; the contract accepts those (the reference throws synchronously).
storeContract("plain JS store (helpers/plain-store.mjs)", () => new PlainStore(), { approveThrowsSync: false });

/** xorshift32: seeded, so a failure replays. */
function rng(seed) {
  const unit = xorshift32(seed);
  // The generator's 32-bit state itself (exact: a multiple of 2^-32 times 2^32).
  const next = () => unit() * 2 ** 32;
  return {
    below: (n) => next() % n,
    pick: (items) => items[next() % items.length],
    chance: (p) => next() / 2 ** 32 < p,
  };
}

/** A store plus the aliases of the lease ids it minted, in order of first sight. */
class Side {
  /** `asyncApprove`: the store refuses an approval with a rejected promise, not a synchronous throw. */
  constructor(store, { asyncApprove = false } = {}) {
    this.store = store;
    this.asyncApprove = asyncApprove;
    this.alias = new Map(); // real -> alias
    this.real = new Map(); // alias -> real
    this.notified = new Map();
  }
  learn(value) {
    if (Array.isArray(value)) for (const v of value) this.learn(v);
    else if (value && typeof value === "object") {
      if (value.lease && typeof value.lease.id === "string" && !this.alias.has(value.lease.id)) {
        const name = `lease#${this.alias.size}`;
        this.alias.set(value.lease.id, name);
        this.real.set(name, value.lease.id);
      }
      for (const v of Object.values(value)) this.learn(v);
    }
  }
  /** Key-order-aware, undefined-aware form with lease ids aliased. */
  canon(value) {
    if (value === undefined) return "<undefined>";
    if (typeof value === "string") return this.alias.get(value) ?? value;
    if (Array.isArray(value)) return ["[", ...value.map((v) => this.canon(v))];
    if (value && typeof value === "object") {
      return ["{", ...Object.keys(value).map((k) => [k, this.canon(value[k])])];
    }
    return value;
  }
  /** Every job, in creation order (the plain store keeps them in a public Map). */
  allJobs() {
    return this.store.allJobs?.() ?? [...this.store.jobs.values()];
  }
  /** An alias (or any other string) back to this store's real value. */
  un(value) {
    return this.real.get(value) ?? value;
  }
}

async function outcome(fn) {
  try {
    return { value: await fn() };
  } catch (error) {
    return { error: error instanceof Error ? `${error.constructor.name}: ${error.message}` : String(error) };
  }
}

function syncOutcome(fn) {
  try {
    const value = fn();
    return { sync: true, value };
  } catch (error) {
    return { sync: true, thrown: error instanceof Error ? error.message : String(error) };
  }
}

const OWNERS = ["alice", "bob", "carol"];
const RUNNERS = [
  ["runner-a", "alice"],
  ["runner-b", "bob"],
  ["runner-c", "carol"],
  ["runner-a2", "alice"],
];
const CAPS = [
  capability(),
  capability({ offerScope: "private" }),
  capability({ kind: "llm.chat" }),
  capability({ backendId: "claude-cli", backendClass: "process" }),
  capability({ backendId: "openai" }),
];
const OUTCOMES = [
  { outcome: "ok", text: "fine", usage: { inputTokens: 1, outputTokens: 2 } },
  { outcome: "error", code: "backend", message: "boom" },
  { outcome: "canceled" },
];

describe("reference, native and plain stores agree on random operation sequences", () => {
  const activity = { claims: 0, completions: 0, expiries: 0, runners: 0 };
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    test(`seed ${seed}`, async () => {
      const r = rng(seed * 7919);
      const sides = [
        new Side(new ReferenceStore({ defaultTtlMs: 400 })),
        new Side(new MemoryStore({ defaultTtlMs: 400 })),
        new Side(new PlainStore({ defaultTtlMs: 400 }), { asyncApprove: true }),
      ];
      const watched = ["job-1", "job-2", "job-3"];
      for (const side of sides) {
        for (const id of watched) side.store.subscribe(id, () => side.notified.set(id, (side.notified.get(id) ?? 0) + 1));
      }
      let now = T0;
      const leases = []; // [jobId, leaseAlias, runnerId], every grant the reference handed out
      const seen = new Set();
      for (let step = 0; step < 300; step += 1) {
        now += r.below(40);
        const op = r.below(16);
        let plan; // (side) => Promise<outcome>
        const jobId = `job-${r.below(25)}`;
        const [runnerId, runnerOwner] = r.pick(RUNNERS);
        if (op <= 2) {
          const input = {
            id: jobId,
            kind: r.chance(0.8) ? "llm.generate" : "llm.chat",
            envelope: r.chance(0.9) ? envelope(now + 1000) : { ciphertext: "x", extra: [1, { y: null }] },
            sizeClass: "small",
            owner: r.pick(OWNERS),
            payload: { prompt: "plaintext" },
          };
          if (r.chance(0.5)) input.audience = r.pick(["private", "team"]);
          if (r.chance(0.3)) input.purpose = r.pick(["summaries", "chat"]);
          if (r.chance(0.3)) input.audienceAllow = [r.pick(OWNERS)];
          if (r.chance(0.3)) input.dependsOn = [`job-${r.below(25)}`];
          if (r.chance(0.4)) input.ttlMs = r.pick([0, 50, 300]);
          if (r.chance(0.2)) input.deadlineAt = now + r.below(500);
          plan = (s) => outcome(() => s.store.create(structuredClone(input), now));
        } else if (op <= 5) {
          const caps = [r.pick(CAPS), r.pick(CAPS)];
          const max = 1 + r.below(3);
          const leaseMs = 20 + r.below(150);
          plan = (s) => outcome(() => s.store.claim({ runnerId, runnerOwner, capabilities: caps, max, leaseMs, now }));
        } else if (op <= 7 && leases.length > 0) {
          const picked = [r.pick(leases), r.pick(leases)].map(([j, l]) => ({ jobId: j, leaseId: l }));
          const leaseMs = 20 + r.below(150);
          plan = (s) =>
            outcome(() =>
              s.store.renewLeases({
                runnerId,
                leases: picked.map((p) => ({ jobId: p.jobId, leaseId: s.un(p.leaseId) })),
                leaseMs,
                now,
              }),
            );
        } else if (op === 8 && leases.length > 0) {
          const [j, l, holder] = r.pick(leases);
          const reason = r.pick(["refused", "shutdown", "backend-down"]);
          const who = r.chance(0.8) ? holder : runnerId;
          plan = (s) => outcome(() => s.store.release({ runnerId: who, leases: [{ jobId: j, leaseId: s.un(l) }], reason, now }));
        } else if (op <= 10 && leases.length > 0) {
          const [j, l, holder] = r.pick(leases);
          const byLease = r.chance(0.7);
          const who = r.chance(0.85) ? holder : runnerId;
          const result = r.pick(OUTCOMES);
          plan = (s) =>
            outcome(() =>
              s.store.complete({
                jobId: j,
                runnerId: who,
                holder: byLease ? { by: "lease", leaseId: s.un(l) } : { by: "runner", runnerId: who },
                outcome: result,
                provenance: { audience: "private", runnerId: who, runnerOwner: "x", backendClass: "http", model: "m", untrusted: false },
                now,
              }),
            );
        } else if (op === 11) {
          plan = (s) => outcome(() => s.store.cancel(jobId, now));
        } else if (op === 12) {
          const leaseId = `relay-${r.below(2)}`;
          const expiresAt = now + r.below(100);
          plan = (s) => outcome(() => s.store.adopt({ jobId, leaseId, expiresAt, now }));
        } else if (op === 13) {
          plan = (s) => outcome(() => s.store.expireDue(now));
        } else if (op === 14) {
          plan = async (s) => ({
            get: await s.store.get(jobId),
            cancels: await s.store.listCancelRequests(runnerId),
            claimed: await s.store.listClaimedBy(runnerId),
          });
        } else {
          // Pairings and runners.
          // One code per device-code hash: where two pairings share a code
          // we differ on purpose (approval acts only on the pending,
          // unexpired one; bounds.test.mjs and src/store/tests.rs).
          const device = r.below(4);
          const code = `CODE-${device}`;
          const which = r.below(6);
          const record = pairing({ deviceCodeHash: `hash-${device}`, userCode: code, expiresAt: now + r.below(200) });
          const rid = `runner-${r.below(3)}`;
          const owner = r.pick(OWNERS);
          const caps = [r.pick(CAPS)];
          plan = async (s) => {
            if (which === 0) return outcome(() => s.store.createPairing(record));
            if (which === 1) {
              const sync = syncOutcome(() => s.store.approvePairing({ userCode: code, owner, runnerId: rid, now }));
              if (sync.thrown !== undefined || !s.asyncApprove) return sync.thrown !== undefined ? sync : { value: await sync.value };
              // A rejected promise stands for the reference's synchronous throw.
              return sync.value.then(
                (value) => ({ value }),
                (error) => ({ sync: true, thrown: error.message }),
              );
            }
            if (which === 2) return outcome(() => s.store.denyPairing(code, now));
            if (which === 3) return outcome(() => s.store.touchRunner({ runnerId: rid, capabilities: caps, daemonVersion: "0.2", now }));
            if (which === 4) return outcome(() => s.store.revokeRunner(rid, now));
            return {
              byCode: await s.store.getPairingByUserCode(code),
              byHash: await s.store.getPairingByDeviceCodeHash(record.deviceCodeHash),
              runner: await s.store.getRunner(rid),
              all: await s.store.listRunners(),
              mine: await s.store.listRunners("alice"),
              consumed: await s.store.consumePairingToken(record.deviceCodeHash),
            };
          };
        }
        if (!plan) continue;
        const results = [];
        for (const side of sides) {
          const result = await plan(side);
          side.learn(result);
          results.push(side.canon(result));
        }
        assert.deepEqual(results[1], results[0], `seed ${seed} step ${step} op ${op}`);
        assert.deepEqual(results[2], results[0], `plain store: seed ${seed} step ${step} op ${op}`);
        const v = results[0];
        const text = JSON.stringify(v);
        if (op >= 3 && op <= 5 && text.includes('"claimed"')) activity.claims += 1;
        if (op >= 9 && op <= 10 && text.includes('["accepted",true]')) activity.completions += 1;
        if (text.includes('"expired"')) activity.expiries += 1;
        if (text.includes('"revokedAt"')) activity.runners += 1;
        for (const side of sides.slice(1)) {
          assert.deepEqual(
            [...side.notified.entries()].sort(),
            [...sides[0].notified.entries()].sort(),
            `seed ${seed} step ${step}: watcher calls`,
          );
        }
        // Remember grants handed out, from the reference side's aliases.
        const ref = sides[0];
        const walk = (v) => {
          if (Array.isArray(v)) v.forEach(walk);
          else if (v && typeof v === "object") {
            if (v.lease && typeof v.lease.id === "string" && v.lease.runnerId && !seen.has(v.lease.id)) {
              seen.add(v.lease.id);
              leases.push([v.id, ref.alias.get(v.lease.id), v.lease.runnerId]);
            }
            Object.values(v).forEach(walk);
          }
        };
        walk(ref.store.allJobs());
      }
      for (const side of sides.slice(1)) assert.deepEqual(side.canon(side.allJobs()), sides[0].canon(sides[0].allJobs()));

    });
  }
  test("the sequences reached the interesting paths (or agreement would mean little)", () => {
    assert.ok(activity.claims >= 80, JSON.stringify(activity));
    assert.ok(activity.completions >= 15, JSON.stringify(activity));
    assert.ok(activity.expiries >= 20, JSON.stringify(activity));
    assert.ok(activity.runners >= 3, JSON.stringify(activity));
  });
});
