// The reference conformance kit (@byollm/conformance@0.1.1, 32 checks with a
// real daemon) against ByollmApp + createFetchHandler + postgresStore on a real
// PostgreSQL (scripts/pg-start.sh): with our app on a fake clock (the store
// takes every `now` from the caller, so the kit's advanceTime works through
// SQL) and on the real clock with short lease/TTL/pairing TTL; and under the
// reference app, which isolates the store from our HTTP layer.
import { test, before, after } from "node:test";
import * as reference from "@byollm/server";
import { postgresStore } from "../dist/postgres.js";
import { freshDatabase, TRUNCATE, testPool } from "./postgres-db.mjs";
import { makeTarget, certifyAndReport, ours, FAKE, REAL } from "./postgres-target.mjs";

// Site keys are plain data; the reference's generator keeps this file
// loadable while the native addon is being rebuilt.
const siteKeys = reference.generateSiteKeys();

let db;
let pool;
before(async () => {
  db = await freshDatabase("conf");
  pool = testPool(db.url, 4);
});
after(async () => {
  await pool?.end();
  await db?.drop();
});

const target = (name, stack, clock) =>
  makeTarget({
    name,
    stack,
    siteKeys,
    makeStore: (ttlMs) => postgresStore({ pool, defaultTtlMs: ttlMs }),
    truncate: () => pool.query(TRUNCATE),
    ...clock,
  });

test("certify: our ByollmApp + createFetchHandler + postgresStore, fake clock through SQL", { timeout: 120_000 }, async () => {
  await certifyAndReport(target("postgres (fake clock)", await ours(), FAKE));
});

test("certify: our ByollmApp + createFetchHandler + postgresStore, real clock", { timeout: 180_000 }, async () => {
  await certifyAndReport(target("postgres (real clock)", await ours(), REAL));
});

test("certify: the reference ByollmApp + createFetchHandler + postgresStore (fake clock)", { timeout: 120_000 }, async () => {
  await certifyAndReport(target("postgres under the reference app", reference, FAKE));
});
