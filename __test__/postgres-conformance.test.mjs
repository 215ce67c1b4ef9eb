// The reference conformance kit (@byollm/conformance@0.1.1, 32 checks with a
// real daemon) against our ByollmApp + createFetchHandler + postgresStore on a
// real PostgreSQL (scripts/pg-start.sh). Once on a fake clock (the store takes
// every `now` from the caller, so the kit's advanceTime works through SQL),
// once on the real clock with short lease/TTL/pairing TTL.
//
// Owners: the kit names people ("alice", "bob"); the schema's owner columns are
// uuids, so the target maps names to uuids (the kit's `ownerId` hook exists for
// exactly this).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { certify, formatReport, CHECKS } from "@byollm/conformance";
import * as reference from "@byollm/server";
import { postgresStore } from "../dist/postgres.js";
import { freshDatabase } from "./postgres-db.mjs";

const ORIGIN = "https://postgres.byollm.test";
// The site keys are plain data; the reference's generator is used so that
// this file loads even while the native addon is being rebuilt.
const SITE_KEYS = reference.generateSiteKeys();

// Our ByollmApp + createFetchHandler (the modules behind dist/index.js).
async function ours() {
  const [{ ByollmApp }, { createFetchHandler }] = await Promise.all([import("../dist/app.js"), import("../dist/http.js")]);
  return { ByollmApp, createFetchHandler };
}

let db;
let pool;
before(async () => {
  db = await freshDatabase("conf");
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
});
after(async () => {
  await pool?.end();
  await db?.drop();
});

function makeTarget({ name, stack, fakeClock, leaseMs, ttlMs, pairingTtlMs }) {
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
    const store = postgresStore({ pool, defaultTtlMs: ttlMs });
    app = new ByollmApp({ store, siteKeys: SITE_KEYS, ...(fakeClock ? { now } : {}) });
    serve = createFetchHandler({
      store,
      siteKeys: SITE_KEYS,
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
      await pool.query("truncate byollm_job_cancels, byollm_jobs, byollm_pairings, byollm_runners cascade");
      build();
    },
  };
}

async function certifyAndReport(target) {
  const report = await certify(target);
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

const FAKE = { fakeClock: true, leaseMs: 20_000, ttlMs: 30_000 };
const REAL = { fakeClock: false, leaseMs: 1_500, ttlMs: 1_200, pairingTtlMs: 1_500 };

test("certify: our ByollmApp + createFetchHandler + postgresStore, fake clock through SQL", { timeout: 120_000 }, async () => {
  await certifyAndReport(makeTarget({ name: "postgres (fake clock)", stack: await ours(), ...FAKE }));
});

test("certify: our ByollmApp + createFetchHandler + postgresStore, real clock", { timeout: 180_000 }, async () => {
  await certifyAndReport(makeTarget({ name: "postgres (real clock)", stack: await ours(), ...REAL }));
});

// The store is any JS store to the reference app too: the same kit through
// @byollm/server's ByollmApp/createFetchHandler isolates the store from our
// HTTP layer.
test("certify: the reference ByollmApp + createFetchHandler + postgresStore (fake clock)", { timeout: 120_000 }, async () => {
  await certifyAndReport(makeTarget({ name: "postgres under the reference app", stack: reference, ...FAKE }));
});
