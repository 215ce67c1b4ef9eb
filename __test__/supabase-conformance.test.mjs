// The reference conformance kit (32 checks, a real daemon) against ByollmApp +
// createFetchHandler + supabaseStore, through supabase-js and the PostgREST
// STAND-IN (./supabase-standin.mjs) on a real PostgreSQL. The kit's fake clock
// reaches SQL because the store passes every `now` to the functions.
import { test, before, after } from "node:test";
import { createClient } from "@supabase/supabase-js";
import * as reference from "@byollm/server";
import { supabaseStore } from "../dist/supabase/index.js";
import { freshDatabase, TRUNCATE, testPool } from "./postgres-db.mjs";
import { startPostgrestStandIn, signJwt } from "./supabase-standin.mjs";
import { makeTarget, certifyAndReport, ours, FAKE } from "./postgres-target.mjs";

const SECRET = "stand-in-jwt-secret-for-tests-only-0123456789";
// Site keys are plain data; the reference's generator keeps this file
// loadable while the native addon is being rebuilt.
const siteKeys = reference.generateSiteKeys();

let db;
let pool;
let standIn;
let client;
before(async () => {
  db = await freshDatabase("supaconf");
  pool = testPool(db.url, 1);
  standIn = await startPostgrestStandIn({ connectionString: db.url, jwtSecret: SECRET });
  client = createClient(standIn.url, signJwt({ role: "service_role" }, SECRET), {
    auth: { persistSession: false, autoRefreshToken: false },
  });
});
after(async () => {
  await standIn?.close();
  await pool?.end();
  await db?.drop();
});

const target = (name, stack) =>
  makeTarget({
    name,
    stack,
    siteKeys,
    makeStore: (ttlMs) => supabaseStore({ client, defaultTtlMs: ttlMs }),
    truncate: () => pool.query(TRUNCATE),
    ...FAKE,
  });

test("certify: our ByollmApp + createFetchHandler + supabaseStore (supabase-js, stand-in PostgREST, fake clock)", { timeout: 120_000 }, async () => {
  await certifyAndReport(target("supabase (ours)", await ours()));
});
