// Our MemoryStore dropped into the REFERENCE server: @byollm/server's own
// ByollmApp and createFetchHandler, certified by @byollm/conformance@0.1.1
// (32 checks, a real daemon). If the reference app cannot tell our store
// from its own, the store keeps the contract the app relies on.
// Node 22: imports the reference packages.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { formatReport, CHECKS } from "@byollm/conformance";
import { certifyAllowingTimingRetries } from "./helpers/certify.mjs";
import { ByollmApp, createFetchHandler, generateSiteKeys } from "@byollm/server";
import { MemoryStore } from "../dist/memory.js";

const ORIGIN = "https://store-swap.byollm.test";
const LEASE_MS = 20_000;
const TTL_MS = 30_000;
const siteKeys = generateSiteKeys();
const dbDir = mkdtempSync(join(tmpdir(), "byollm-swap-"));
after(() => rmSync(dbDir, { recursive: true, force: true }));
let dbFiles = 0;

/**
 * The kit's daemon signs with Date.now(), so the server's clock is the real
 * clock plus an offset that advanceTime grows and reset() zeroes; everything
 * (store, app, handler) is rebuilt on reset.
 */
function swapTarget({ durable = false } = {}) {
  let offset = 0;
  const now = () => Date.now() + offset;
  let app;
  let handle;
  const rebuild = () => {
    offset = 0;
    const store = new MemoryStore({
      defaultTtlMs: TTL_MS,
      ...(durable ? { path: join(dbDir, `${(dbFiles += 1)}.db`) } : {}),
    });
    app = new ByollmApp({ store, siteKeys, now });
    handle = createFetchHandler({
      store,
      siteKeys,
      verificationUrl: `${ORIGIN}/pair`,
      leaseMs: LEASE_MS,
      now,
    });
  };
  rebuild();
  return {
    name: `reference ByollmApp + our ${durable ? "durable " : ""}MemoryStore`,
    origin: ORIGIN,
    leaseMs: LEASE_MS,
    ttlMs: TTL_MS,
    fetch: (request) => handle(request),
    async enqueue(input) {
      const job = await app.enqueue(input);
      return { id: job.id };
    },
    async approvePairing(userCode, owner) {
      await app.approvePairing({ userCode, owner });
    },
    async revokeRunner(runnerId) {
      await app.revokeRunner(runnerId);
    },
    async cancelJob(jobId) {
      await app.cancel(jobId);
    },
    async job(jobId) {
      const record = await app.job(jobId);
      if (record === null) return null;
      const view = { state: record.state };
      if (record.outcome !== null) view.outcome = record.outcome;
      if (record.provenance !== null) view.provenance = record.provenance;
      return view;
    },
    runnerAvailability: (input) => app.runnerAvailability(input),
    async sweep() {
      await app.sweep();
    },
    async advanceTime(ms) {
      offset += ms;
    },
    async reset() {
      rebuild();
    },
  };
}

for (const durable of [false, true]) {
  test(`the reference server certifies 32/32 with our ${durable ? "durable " : ""}MemoryStore`, { timeout: 120_000 }, async () => {
    const report = await certifyAllowingTimingRetries(swapTarget({ durable }));
    const failed = report.results.filter((result) => !result.passed);
    if (failed.length > 0) console.log(formatReport(report));
    assert.equal(CHECKS.length, 32);
    assert.equal(report.results.length, 32);
    assert.deepEqual(
      failed.map((result) => `${result.check.id}: ${result.error}`),
      [],
    );
    assert.equal(report.passed, true);
  });
}
