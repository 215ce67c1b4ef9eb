// The reference conformance kit (@byollm/conformance@0.1.1, 32 checks driving
// a real daemon) against our ByollmApp + HTTP handler: with our MemoryStore,
// through the ./next mount, with the reference MemoryStore passed in (any JS
// store must work), with a plain JS store written from the store contract
// (helpers/plain-store.mjs: a user's own store, served through its methods)
// through both mounts, on the durable store (a SQLite file), and on the real clock.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { formatReport, CHECKS } from "@byollm/conformance";
import { certifyAllowingTimingRetries } from "./helpers/certify.mjs";
import { PlainStore } from "./helpers/plain-store.mjs";
import { MemoryStore as ReferenceMemoryStore } from "@byollm/server";
import { ByollmApp, MemoryStore, createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { createHandler } from "../dist/next.js";

const ORIGIN = "https://conformance.byollm.test";

// Durable stores: a fresh file per store (a reset builds a new one).
const dbDir = mkdtempSync(join(tmpdir(), "byollm-conformance-"));
after(() => {
  try {
    rmSync(dbDir, { recursive: true, force: true });
  } catch (error) {
    // Windows deletes no file a process holds open, and the stores stay open
    // until the process ends: the temp folder is left there.
    if (process.platform !== "win32" || error.code !== "EBUSY") throw error;
  }
});
let dbFiles = 0;
const durableStore = (ttl) => new MemoryStore({ defaultTtlMs: ttl, path: join(dbDir, `${(dbFiles += 1)}.db`) });
const SITE_KEYS = generateSiteKeys();

/**
 * A target over one store, app and handler, rebuilt on reset. With a fake
 * clock, `now` is the real clock plus an offset: the kit's daemon signs with
 * Date.now(), so the server's clock must stay within the signature window.
 */
function makeTarget({ name, makeStore, mount, fakeClock, leaseMs, ttlMs, pairingTtlMs }) {
  let offset = 0;
  const now = () => Date.now() + offset;
  let app;
  let serve;
  const build = () => {
    offset = 0;
    const store = makeStore(ttlMs);
    app = new ByollmApp({ store, siteKeys: SITE_KEYS, ...(fakeClock ? { now } : {}) });
    const config = {
      store,
      siteKeys: SITE_KEYS,
      verificationUrl: `${ORIGIN}/settings/runners`,
      leaseMs,
      ...(pairingTtlMs === undefined ? {} : { pairingTtlMs }),
      ...(fakeClock ? { now } : {}),
    };
    serve = mount(config);
  };
  build();
  return {
    name,
    origin: ORIGIN,
    leaseMs,
    ttlMs,
    fetch: (request) => serve(request),
    enqueue: async (input) => ({ id: (await app.enqueue(input)).id }),
    approvePairing: async (userCode, owner) => {
      await app.approvePairing({ userCode, owner });
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
        ...(record.provenance === null ? {} : { provenance: record.provenance }),
      };
    },
    runnerAvailability: (input) => app.runnerAvailability(input),
    sweep: async () => {
      await app.sweep();
    },
    ...(fakeClock
      ? {
          advanceTime: async (ms) => {
            offset += ms;
          },
        }
      : {}),
    reset: async () => build(),
  };
}

const viaFetchHandler = (config) => createFetchHandler(config);
const viaNext = (config) => {
  // The lazy form, as a Next.js route would write it.
  const route = createHandler(() => config);
  assert.equal(route.dynamic, "force-dynamic");
  return (request) => route.POST(request);
};

async function certifyAndReport(target) {
  const report = await certifyAllowingTimingRetries(target);
  const failed = report.results.filter((r) => !r.passed);
  if (failed.length > 0) console.log(formatReport(report));
  assert.equal(report.results.length, CHECKS.length);
  assert.equal(CHECKS.length, 32);
  assert.deepEqual(
    failed.map((r) => `${r.check.id}: ${r.error}`),
    [],
  );
  assert.equal(report.passed, true);
}

// Short lease and TTL even on the fake clock: an advance of more than the
// two-minute signature window would make the kit's own daemon stale.
const FAKE = { fakeClock: true, leaseMs: 20_000, ttlMs: 30_000 };

test("certify: ByollmApp + createFetchHandler + our MemoryStore (fake clock)", { timeout: 120_000 }, async () => {
  await certifyAndReport(
    makeTarget({ name: "native (memory)", makeStore: (ttl) => new MemoryStore({ defaultTtlMs: ttl }), mount: viaFetchHandler, ...FAKE }),
  );
});

test("certify: through the ./next createHandler (fake clock)", { timeout: 120_000 }, async () => {
  await certifyAndReport(
    makeTarget({ name: "native (next)", makeStore: (ttl) => new MemoryStore({ defaultTtlMs: ttl }), mount: viaNext, ...FAKE }),
  );
});

test("certify: with the reference MemoryStore passed in (a JS store)", { timeout: 120_000 }, async () => {
  await certifyAndReport(
    makeTarget({
      name: "native (reference store)",
      makeStore: (ttl) => new ReferenceMemoryStore({ defaultTtlMs: ttl }),
      mount: viaFetchHandler,
      ...FAKE,
    }),
  );
});

test("certify: a plain JS store (a user's own ByollmStore) through createFetchHandler (fake clock)", { timeout: 120_000 }, async () => {
  await certifyAndReport(
    makeTarget({ name: "native (plain JS store)", makeStore: (ttl) => new PlainStore({ defaultTtlMs: ttl }), mount: viaFetchHandler, ...FAKE }),
  );
});

test("certify: a plain JS store through the ./next createHandler (fake clock)", { timeout: 120_000 }, async () => {
  await certifyAndReport(
    makeTarget({ name: "native (plain JS store, next)", makeStore: (ttl) => new PlainStore({ defaultTtlMs: ttl }), mount: viaNext, ...FAKE }),
  );
});

test("certify: our durable MemoryStore (a SQLite file), fake clock", { timeout: 120_000 }, async () => {
  await certifyAndReport(makeTarget({ name: "native (durable)", makeStore: durableStore, mount: viaFetchHandler, ...FAKE }));
});

test("certify: our durable MemoryStore, real clock", { timeout: 180_000 }, async () => {
  await certifyAndReport(
    makeTarget({
      name: "native (durable, real clock)",
      makeStore: durableStore,
      mount: viaFetchHandler,
      fakeClock: false,
      leaseMs: 1_500,
      ttlMs: 1_200,
      pairingTtlMs: 1_500,
    }),
  );
});

test("certify: real clock (no advanceTime), short lease/TTL/pairing TTL", { timeout: 180_000 }, async () => {
  await certifyAndReport(
    makeTarget({
      name: "native (real clock)",
      makeStore: (ttl) => new MemoryStore({ defaultTtlMs: ttl }),
      mount: viaFetchHandler,
      fakeClock: false,
      leaseMs: 1_500,
      ttlMs: 1_200,
      pairingTtlMs: 1_500,
    }),
  );
});
