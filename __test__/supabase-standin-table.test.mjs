// The PostgREST stand-in serves what the reference's supabaseStore
// (@byollm/server 0.1.1) calls: its table API subset and its argument-less
// RPC. A full job cycle of the reference's own app and handlers, on the
// reference's own schema, through supabase-js and the stand-in; the bench
// (`npm run bench -- stores`) measures it side by side with ours this way.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { createClient } from "@supabase/supabase-js";
import * as reference from "@byollm/server";
import { supabaseStore as referenceSupabaseStore } from "@byollm/server/supabase";
import { startPostgrestStandIn, signJwt } from "./supabase-standin.mjs";
import { adminUrl } from "./postgres-db.mjs";
import { applyReferenceSchema } from "./helpers/reference-schema.mjs";
import { Device, ORIGIN } from "./helpers/device.mjs";

const SECRET = "stand-in-jwt-secret-for-tests-only-0123456789";
class NoRealtimeHere {
  constructor() {
    throw new Error("this test has no Realtime server");
  }
}
const CLIENT_OPTIONS = { auth: { persistSession: false, autoRefreshToken: false }, realtime: { transport: NoRealtimeHere } };

let name;
let url;
let admin;
let standIn;
let service;
before(async () => {
  name = `byollm_t_ref_${randomUUID().slice(0, 8)}`;
  const c = new pg.Client({ connectionString: adminUrl() });
  await c.connect();
  await c.query(`create database ${name}`);
  await c.end();
  const u = new URL(adminUrl());
  u.pathname = `/${name}`;
  url = u.toString();
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await applyReferenceSchema(admin);
  standIn = await startPostgrestStandIn({ connectionString: url, jwtSecret: SECRET });
  service = createClient(standIn.url, signJwt({ role: "service_role" }, SECRET), CLIENT_OPTIONS);
});
after(async () => {
  await standIn?.close();
  await admin?.end();
  const c = new pg.Client({ connectionString: adminUrl() });
  await c.connect();
  await c.query(`drop database if exists ${name} with (force)`);
  await c.end();
});

test("an RPC without arguments (byollm_expire_due) is served", async () => {
  const { data, error } = await service.rpc("byollm_expire_due");
  assert.equal(error, null);
  assert.equal(typeof data, "number");
});

test("the reference's supabaseStore runs a full cycle through the stand-in", async () => {
  const owner = randomUUID();
  await admin.query("insert into auth.users (id) values ($1)", [owner]);
  const store = referenceSupabaseStore({ client: service });
  const siteKeys = reference.generateSiteKeys();
  const app = new reference.ByollmApp({ store, siteKeys });
  const handler = reference.createFetchHandler({ store, siteKeys, verificationUrl: `${ORIGIN}/pair` });
  const device = new Device(handler);
  await device.pair(app, owner);
  assert.match(device.runnerId, /^[0-9a-f-]{36}$/);

  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "hello" }, owner });
  // An existing id: the upsert ignores the duplicate and the row is read back.
  const again = await store.create({ ...(await store.get(handle.id)), dependsOn: [] }, Date.now());
  assert.equal(again.id, handle.id);
  const claim = await device.claim();
  assert.equal(claim.status, 200);
  const [stub] = claim.body.jobs;
  assert.equal(stub.id, handle.id);
  const fetched = await device.fetchJob(stub);
  assert.equal(fetched.status, 200);
  assert.equal((await device.open(stub, fetched.body.envelope)).prompt, "hello");

  // Heartbeat: renew with `or=(and(...))`, the cancel list through the embedding.
  await app.cancel(handle.id);
  const beat = await device.heartbeat([{ jobId: stub.id, leaseId: stub.lease.id }]);
  assert.equal(beat.status, 200);
  assert.deepEqual(beat.body.lost, []);
  assert.deepEqual(beat.body.cancel, [{ jobId: stub.id, leaseId: stub.lease.id }]);

  const result = await device.result(stub, "hi there");
  assert.deepEqual(result.body, { accepted: true, state: "ok" });
  const delivered = await app.result(handle.id);
  assert.deepEqual([delivered.state, delivered.outcome.text], ["ok", "hi there"]);

  // Filters the cycle did not use: in.(...), is.null, and a single() miss.
  const { data: listed } = await service.from("byollm_jobs").select("id,state").in("id", [handle.id, randomUUID()]);
  assert.deepEqual(listed, [{ id: handle.id, state: "ok" }]);
  const { data: live } = await service.from("byollm_runners").select("id").is("revoked_at", null);
  assert.deepEqual(live, [{ id: device.runnerId }]);
  const { error } = await service.from("byollm_jobs").select().eq("id", randomUUID()).single();
  assert.equal(error.code, "PGRST116");
  // Anything beyond the subset is refused, not guessed at.
  const { error: unsupported } = await service.from("byollm_jobs").select("id").gt("attempts", 0);
  assert.equal(unsupported.code, "PGRST100");
});
