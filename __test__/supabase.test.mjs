// supabaseStore through supabase-js against a real PostgreSQL, with a
// PostgREST STAND-IN for the HTTP layer (./supabase-standin.mjs: PostgREST
// cannot be installed here; the stand-in serves only the calls made below).
// Also: row-level security for browser sessions (through supabase-js and in
// SQL directly), and supabaseRealtimeDelivery against a fake Realtime client.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createClient } from "@supabase/supabase-js";
import { supabaseStore, supabaseRealtimeDelivery } from "../dist/supabase/index.js";
import { NoRunnerAvailableError, ResultTimeoutError } from "../dist/errors.js";
import { freshDatabase, testPool } from "./postgres-db.mjs";
import { startPostgrestStandIn, signJwt } from "./supabase-standin.mjs";

const SECRET = "stand-in-jwt-secret-for-tests-only-0123456789";
const T0 = 1_767_225_600_000;
const KIND = "llm.generate";
const ENVELOPE = { ciphertext: "c2VhbGVk", recipientKeyId: "site", senderKeyId: "site", direction: "payload", deadlineAt: T0 + 1 };
const DEVICE = { identity: "id-pub", encryption: "enc-pub", encryptionSig: "sig" };
const CAP = { kind: KIND, service: "default", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };
const OK = { outcome: "ok", text: "done" };

// These clients never open Realtime (the stand-in has none). supabase-js on
// Node 20 (no global WebSocket) insists on a transport at construction; this
// one refuses to be used, so a test that did reach Realtime would fail loudly.
class NoRealtimeHere {
  constructor() {
    throw new Error("this test has no Realtime server");
  }
}
const CLIENT_OPTIONS = { auth: { persistSession: false, autoRefreshToken: false }, realtime: { transport: NoRealtimeHere } };

let db;
let pool;
let standIn;
let service;
let store;
const clientFor = (claims) =>
  createClient(standIn.url, signJwt({ role: "anon" }, SECRET), {
    ...CLIENT_OPTIONS,
    global: { headers: { Authorization: `Bearer ${signJwt(claims, SECRET)}` } },
  });

before(async () => {
  db = await freshDatabase("supa");
  pool = testPool(db.url, 2);
  standIn = await startPostgrestStandIn({ connectionString: db.url, jwtSecret: SECRET });
  service = createClient(standIn.url, signJwt({ role: "service_role" }, SECRET), CLIENT_OPTIONS);
  store = supabaseStore({ client: service, defaultTtlMs: 60_000 });
});
after(async () => {
  await standIn?.close();
  await pool?.end();
  await db?.drop();
});

async function pairRunner(owner, userCode, now = T0) {
  await store.createPairing({
    deviceCodeHash: `hash-${userCode}`,
    userCode,
    state: "pending",
    owner: null,
    runnerId: null,
    collected: false,
    label: "laptop",
    platform: "linux",
    daemonVersion: "0.1.1",
    capabilities: [CAP],
    device: DEVICE,
    expiresAt: now + 600_000,
    createdAt: now,
  });
  return store.approvePairing({ userCode, owner, runnerId: randomUUID(), now });
}

test("supabaseStore via supabase-js: a job's life, through /rpc calls only", async () => {
  const owner = randomUUID();
  const before = standIn.requests.length;
  const r = await pairRunner(owner, "SUPA-0001");
  assert.equal(r.owner, owner);
  assert.equal((await store.getPairingByUserCode("SUPA-0001")).state, "approved");
  await assert.rejects(store.approvePairing({ userCode: "SUPA-0001", owner, runnerId: randomUUID(), now: T0 }), { message: "pairing is already approved" });
  await assert.rejects(store.approvePairing({ userCode: "NONE-NONE", owner, runnerId: randomUUID(), now: T0 }), { message: "unknown pairing code: NONE-NONE" });

  const id = randomUUID();
  const created = await store.create({ id, kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner, payload: { prompt: "plaintext" } }, T0);
  assert.deepEqual([created.state, created.claimableAt, created.ttlMs, created.purpose], ["queued", T0, 60_000, undefined]);
  assert.deepEqual(created.envelope, ENVELOPE);
  const [claimed] = await store.claim({ runnerId: r.id, runnerOwner: owner, capabilities: [CAP], max: 5, leaseMs: 1_000, now: T0 + 1 });
  assert.equal(claimed.id, id);
  assert.equal(claimed.lease.runnerId, r.id);
  const lease = { jobId: id, leaseId: claimed.lease.id };
  assert.deepEqual(await store.renewLeases({ runnerId: r.id, leases: [lease], leaseMs: 1_000, now: T0 + 2 }), { renewed: [{ jobId: id, expiresAt: T0 + 1_002 }], lost: [] });
  await store.cancel(id, T0 + 3);
  assert.deepEqual(await store.listCancelRequests(r.id), [lease]);
  const done = await store.complete({
    jobId: id,
    runnerId: r.id,
    holder: { by: "lease", leaseId: lease.leaseId },
    outcome: OK,
    provenance: { audience: "private", runnerId: r.id, runnerOwner: owner, backendClass: "http", model: "m", untrusted: false },
    now: T0 + 4,
  });
  assert.deepEqual([done.accepted, done.job.state, done.job.completedByLeaseId], [true, "ok", lease.leaseId]);
  const again = await store.complete({ jobId: id, runnerId: r.id, holder: { by: "lease", leaseId: lease.leaseId }, outcome: OK, provenance: done.job.provenance, now: T0 + 5 });
  assert.deepEqual([again.accepted, again.duplicate], [false, true]);
  assert.deepEqual(await store.listCancelRequests(r.id), []);
  // Before the pairing's expiry plus the clock window: the sweep would prune it.
  assert.deepEqual(await store.expireDue(T0 + 500_000), []);
  assert.equal((await store.get("not-a-uuid")), null);
  await store.revokeRunner(r.id, T0 + 6);
  assert.equal((await store.getRunner(r.id)).revokedAt, T0 + 6);
  assert.deepEqual((await store.listRunners(owner)).map((x) => x.id), [r.id]);
  await store.consumePairingToken("hash-SUPA-0001");
  assert.equal((await store.getPairingByDeviceCodeHash("hash-SUPA-0001")).collected, true);
  await store.denyPairing("SUPA-0001", T0 + 7);

  const calls = standIn.requests.slice(before);
  assert.ok(calls.length > 10);
  assert.deepEqual(calls.filter((c) => !c.startsWith("POST /rest/v1/rpc/byollm_")), []);
  // And the rows are really in PostgreSQL, written at the caller's clock.
  const { rows } = await pool.query("select state, byollm_ms(updated_at) as t from byollm_jobs where id = $1", [id]);
  assert.deepEqual(rows, [{ state: "ok", t: String(T0 + 4) }]);
});

test("supabaseStore: runner ids are runner_<uuid>; a runner signing with its bare uuid is answered in that spelling", async () => {
  const owner = randomUUID();
  const r = await pairRunner(owner, "FORM-0001");
  assert.match(r.id, /^runner_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal((await store.getPairingByUserCode("FORM-0001")).runnerId, r.id);
  assert.deepEqual((await store.listRunners(owner)).map((x) => x.id), [r.id]);
  // A daemon paired by 0.1.1 holds the bare uuid.
  const bare = r.id.slice("runner_".length);
  assert.equal((await store.getRunner(bare)).id, bare);
  const id = "supabase-job/1";
  await store.create({ id, kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner }, T0);
  const [claimed] = await store.claim({ runnerId: bare, runnerOwner: owner, capabilities: [CAP], max: 1, leaseMs: 1_000, now: T0 + 1 });
  assert.deepEqual([claimed.id, claimed.lease.runnerId], [id, bare]);
  assert.equal((await store.get(id)).lease.runnerId, r.id);
  const lease = { jobId: id, leaseId: claimed.lease.id };
  assert.deepEqual((await store.renewLeases({ runnerId: bare, leases: [lease], leaseMs: 1_000, now: T0 + 2 })).lost, []);
  const done = await store.complete({
    jobId: id, runnerId: bare, holder: { by: "runner", runnerId: bare }, outcome: OK,
    provenance: { audience: "private", runnerId: bare, runnerOwner: owner, backendClass: "http", model: "m", untrusted: false }, now: T0 + 3,
  });
  assert.deepEqual([done.accepted, done.job.state], [true, "ok"]);
});

test("supabaseStore: a database error surfaces as an Error, not as data", async () => {
  await assert.rejects(
    store.claim({ runnerId: "runner-1", runnerOwner: randomUUID(), capabilities: [CAP], max: 1, leaseMs: 1, now: T0 }),
    /runner ids are runner_<uuid>/,
  );
  const anonStore = supabaseStore({ client: clientFor({ role: "anon" }) });
  await assert.rejects(anonStore.get(randomUUID()), /supabase: permission denied/);
});

// ------------------------------------------------------------------ RLS --

test("RLS through supabase-js: an authenticated session reads only its own rows; anon nothing; neither writes", async () => {
  const alice = randomUUID();
  const bob = randomUUID();
  const aliceJob = await store.create({ id: randomUUID(), kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner: alice }, T0);
  await store.create({ id: randomUUID(), kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner: bob }, T0);
  const aliceRunner = await pairRunner(alice, "RLSA-0001");
  await pairRunner(bob, "RLSB-0001");

  const asAlice = clientFor({ role: "authenticated", sub: alice });
  const jobs = await asAlice.from("byollm_jobs").select("*");
  assert.equal(jobs.error, null);
  assert.deepEqual(jobs.data.map((j) => j.id), [aliceJob.id]);
  // A runner row holds the runner's uuid: its id without `runner_`.
  const runners = await asAlice.from("byollm_runners").select("*");
  assert.deepEqual(runners.data.map((r) => `runner_${r.id}`), [aliceRunner.id]);
  const pairings = await asAlice.from("byollm_pairings").select("*");
  assert.deepEqual(pairings.data.map((p) => p.user_code), ["RLSA-0001"]);

  const asAnon = clientFor({ role: "anon" });
  for (const table of ["byollm_jobs", "byollm_runners", "byollm_pairings", "byollm_job_cancels"]) {
    const res = await asAnon.from(table).select("*");
    assert.equal(res.data, null, table);
    assert.match(res.error.message, /permission denied/, table);
  }
  // The store's functions are the server's, not a browser's.
  const claim = await asAlice.rpc("byollm_claim", { p_runner_id: aliceRunner.id, p_runner_owner: alice, p_capabilities: [CAP], p_max: 5, p_lease_ms: 1000, p_now: T0 });
  assert.match(claim.error.message, /permission denied/);
  const create = await asAlice.rpc("byollm_create_job", { p_job: { id: randomUUID() }, p_now: T0 });
  assert.match(create.error.message, /permission denied/);
});

test("the 0.1.1 browser approval RPC is the server's only: no browser session may guess codes over PostgREST", async () => {
  const carol = randomUUID();
  await store.createPairing({
    deviceCodeHash: "hash-BROW-0001", userCode: "BROW-0001", state: "pending", owner: null, runnerId: null, collected: false,
    label: "l", platform: "linux", daemonVersion: "0.1.1", capabilities: [CAP], device: DEVICE, expiresAt: Date.now() + 600_000, createdAt: T0,
  });
  const anon = await clientFor({ role: "anon" }).rpc("byollm_approve_pairing", { p_user_code: "BROW-0001" });
  assert.match(anon.error.message, /permission denied/);
  const res = await clientFor({ role: "authenticated", sub: carol }).rpc("byollm_approve_pairing", { p_user_code: "BROW-0001" });
  assert.match(res.error.message, /permission denied/);
  const p = await store.getPairingByUserCode("BROW-0001");
  assert.deepEqual([p.state, p.owner, p.runnerId], ["pending", null, null]);
  // The grant is gone from the catalog, not only refused in this session.
  const { rows } = await pool.query(
    "select has_function_privilege('authenticated', 'byollm_approve_pairing(text)', 'execute') as can",
  );
  assert.equal(rows[0].can, false);
});

test("RLS in SQL directly: authenticated sees own rows of every table, anon is refused", async () => {
  const dave = randomUUID();
  const r = await pairRunner(dave, "DAVE-0001");
  const j = await store.create({ id: randomUUID(), kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner: dave }, T0);
  await store.claim({ runnerId: r.id, runnerOwner: dave, capabilities: [CAP], max: 1, leaseMs: 10_000, now: T0 + 1 });
  await store.cancel(j.id, T0 + 2);
  const c = await pool.connect();
  try {
    const as = async (role, sub, sql) => {
      await c.query("begin");
      try {
        await c.query(`set local role ${role}`);
        await c.query("select set_config('request.jwt.claims', $1, true)", [JSON.stringify({ role, ...(sub ? { sub } : {}) })]);
        return (await c.query(sql)).rows;
      } finally {
        await c.query("rollback");
      }
    };
    assert.deepEqual(await as("authenticated", dave, "select auth.uid()::text as u"), [{ u: dave }]);
    assert.deepEqual(await as("authenticated", dave, "select id::text from byollm_jobs"), [{ id: j.id }]);
    assert.deepEqual(await as("authenticated", dave, "select job_id::text from byollm_job_cancels"), [{ job_id: j.id }]);
    assert.deepEqual(await as("authenticated", dave, "select 'runner_' || id::text as id from byollm_runners"), [{ id: r.id }]);
    assert.deepEqual(await as("authenticated", randomUUID(), "select id from byollm_jobs"), []);
    assert.deepEqual(await as("authenticated", null, "select id from byollm_jobs"), []);
    // The server's role is not filtered (BYPASSRLS, as on Supabase).
    const all = await as("service_role", null, "select count(distinct owner)::int as n from byollm_jobs");
    assert.ok(all[0].n > 1);
    await assert.rejects(as("authenticated", dave, "update byollm_runners set revoked_at = null"), /permission denied/);
    await assert.rejects(as("authenticated", dave, "delete from byollm_runners"), /permission denied/);
    await assert.rejects(as("authenticated", dave, `insert into byollm_job_cancels (job_id) values ('${j.id}')`), /permission denied/);
    await assert.rejects(as("anon", null, "select id from byollm_jobs"), /permission denied/);
    await assert.rejects(as("anon", null, "select byollm_get_job('x')"), /permission denied/);
  } finally {
    c.release();
  }
});

// ------------------------------------------------------- realtime delivery --

/** A FAKE of the Realtime part of a Supabase client: the test fires row events itself. */
function fakeRealtimeClient() {
  const channels = new Set();
  return {
    channels,
    channel(name) {
      const ch = {
        name,
        handlers: [],
        on(type, filter, cb) {
          ch.handlers.push({ type, filter, cb });
          return ch;
        },
        subscribe() {
          channels.add(ch);
          return ch;
        },
      };
      return ch;
    },
    async removeChannel(ch) {
      channels.delete(ch);
      return "ok";
    },
    fire(jobId) {
      for (const ch of [...channels]) for (const h of ch.handlers) if (h.filter.filter === `id=eq.${jobId}`) h.cb({});
    },
  };
}

test("supabaseRealtimeDelivery: resolves on the row event, concurrent waits stay apart, channels are removed", async () => {
  const client = fakeRealtimeClient();
  const states = new Map([
    ["a", "running"],
    ["b", "running"],
  ]);
  const read = async (jobId) => ({ jobId, state: states.get(jobId), ...(states.get(jobId) === "ok" ? { outcome: { outcome: "ok", text: jobId } } : {}) });
  const delivery = supabaseRealtimeDelivery(client)({ read });
  const waitA = delivery.waitFor("a", { timeoutMs: 5_000 });
  const waitB = delivery.waitFor("b", { timeoutMs: 5_000 });
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(client.channels.size, 2);
  const [ch] = [...client.channels].filter((c) => c.name === "byollm_job_a");
  assert.deepEqual(ch.handlers[0].filter, { event: "UPDATE", schema: "public", table: "byollm_jobs", filter: "id=eq.a" });
  states.set("a", "ok");
  client.fire("a");
  assert.deepEqual(await waitA, { jobId: "a", state: "ok", outcome: { outcome: "ok", text: "a" } });
  states.set("b", "ok");
  client.fire("b");
  assert.equal((await waitB).outcome.text, "b");
  assert.equal(client.channels.size, 0);
  // Already terminal: answered from the first read, no channel opened.
  assert.equal((await delivery.waitFor("a")).state, "ok");
  assert.equal(client.channels.size, 0);
});

test("supabaseRealtimeDelivery: timeout, abort, and a sustained no-runner signal (fallback labelled)", async () => {
  const client = fakeRealtimeClient();
  const read = async (jobId) => ({ jobId, state: "queued" });
  const delivery = supabaseRealtimeDelivery(client)({ read });
  await assert.rejects(delivery.waitFor("t", { timeoutMs: 30 }), ResultTimeoutError);
  const ac = new AbortController();
  const aborted = delivery.waitFor("x", { signal: ac.signal, timeoutMs: 5_000 });
  ac.abort(new Error("stop"));
  await assert.rejects(aborted, /stop/);
  assert.equal(client.channels.size, 0);

  // The availability poll runs every 2 s of real time; the injected clock
  // jumps past the grace period between two readings of it.
  let clock = 0;
  const noRunner = supabaseRealtimeDelivery(client)({
    read,
    availability: async (jobId) => ({ available: false, reason: "no-runner-online", blocked: jobId === "blocked" }),
    now: () => (clock += 20_000),
    graceMs: 10_000,
  });
  const [fb, none, blocked] = await Promise.allSettled([
    noRunner.waitFor("n", { timeoutMs: 20_000, onNoRunner: () => "hosted answer" }),
    noRunner.waitFor("m", { timeoutMs: 20_000 }),
    noRunner.waitFor("blocked", { timeoutMs: 2_500 }),
  ]);
  assert.deepEqual(fb.value, { jobId: "n", state: "ok", outcome: { outcome: "ok", text: "hosted answer" }, fallback: true });
  assert.ok(none.reason instanceof NoRunnerAvailableError);
  assert.equal(none.reason.reason, "no-runner-online");
  // A job waiting on a dependency is waiting, not stranded.
  assert.ok(blocked.reason instanceof ResultTimeoutError);
});
