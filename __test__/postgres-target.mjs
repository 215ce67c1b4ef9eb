// The conformance target over any SQL-backed store, shared by the Postgres and
// Supabase kit runs. The kit names people ("alice", "bob"); owner columns are
// uuids, so names map to fresh uuids (the kit's `ownerId` hook is for this).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { formatReport, CHECKS } from "@byollm/conformance";
import { certifyAllowingTimingRetries } from "./helpers/certify.mjs";

const ORIGIN = "https://sql.byollm.test";

/** Our ByollmApp + createFetchHandler (the modules behind dist/index.js). */
export async function ours() {
  const [{ ByollmApp }, { createFetchHandler }] = await Promise.all([import("../dist/app.js"), import("../dist/http.js")]);
  return { ByollmApp, createFetchHandler };
}

export const FAKE = { fakeClock: true, leaseMs: 20_000, ttlMs: 30_000 };
export const REAL = { fakeClock: false, leaseMs: 1_500, ttlMs: 1_200, pairingTtlMs: 1_500 };

export function makeTarget({ name, stack, makeStore, truncate, siteKeys, fakeClock, leaseMs, ttlMs, pairingTtlMs }) {
  const { ByollmApp, createFetchHandler } = stack;
  let offset = 0;
  const now = () => Date.now() + offset;
  const owners = new Map();
  const names = new Map();
  const ownerId = (who) => {
    let id = owners.get(who);
    if (id === undefined) {
      id = randomUUID();
      owners.set(who, id);
      names.set(id, who);
    }
    return id;
  };
  let app;
  let serve;
  const build = () => {
    offset = 0;
    const store = makeStore(ttlMs);
    app = new ByollmApp({ store, siteKeys: siteKeys, ...(fakeClock ? { now } : {}) });
    serve = createFetchHandler({
      store,
      siteKeys: siteKeys,
      verificationUrl: `${ORIGIN}/settings/runners`,
      leaseMs,
      ...(pairingTtlMs === undefined ? {} : { pairingTtlMs }),
      ...(fakeClock ? { now } : {}),
    });
  };
  build();
  return {
    name,
    origin: ORIGIN,
    leaseMs,
    ttlMs,
    fetch: (request) => serve(request),
    enqueue: async (input) => {
      const handle = await app.enqueue({
        ...input,
        owner: ownerId(input.owner),
        ...(input.audienceAllow === undefined ? {} : { audienceAllow: input.audienceAllow.map(ownerId) }),
      });
      return { id: handle.id };
    },
    approvePairing: async (userCode, owner) => {
      await app.approvePairing({ userCode, owner: ownerId(owner) });
    },
    revokeRunner: (runnerId) => app.revokeRunner(runnerId),
    cancelJob: async (jobId) => {
      await app.cancel(jobId);
    },
    job: async (jobId) => {
      const record = await app.job(jobId);
      if (!record) return null;
      return {
        state: record.state,
        ...(record.outcome === null ? {} : { outcome: record.outcome }),
        ...(record.provenance === null
          ? {}
          : { provenance: { ...record.provenance, runnerOwner: names.get(record.provenance.runnerOwner) ?? record.provenance.runnerOwner } }),
      };
    },
    runnerAvailability: (input) => app.runnerAvailability({ ...input, owner: ownerId(input.owner) }),
    sweep: async () => {
      await app.sweep();
    },
    ownerId: async (who) => ownerId(who),
    ...(fakeClock ? { advanceTime: async (ms) => void (offset += ms) } : {}),
    reset: async () => {
      // The previous check's daemon can still be finishing a request when the
      // kit resets; TRUNCATE then meets its row locks and PostgreSQL may pick
      // the TRUNCATE as a deadlock victim (40P01, seen once in CI). Clearing the
      // tables is scaffolding, not the store under test: try again.
      for (let attempt = 1; ; attempt++) {
        try {
          await truncate();
          break;
        } catch (error) {
          if (error?.code !== "40P01" || attempt >= 5) throw error;
          await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
        }
      }
      build();
    },
  };
}

export async function certifyAndReport(target) {
  const report = await certifyAllowingTimingRetries(target);
  const failed = report.results.filter((r) => !r.passed);
  if (failed.length > 0) console.log(formatReport(report));
  assert.equal(CHECKS.length, 32);
  assert.equal(report.results.length, 32);
  assert.deepEqual(
    failed.map((r) => `${r.check.id}: ${r.error}`),
    [],
  );
  assert.equal(report.passed, true);
}

