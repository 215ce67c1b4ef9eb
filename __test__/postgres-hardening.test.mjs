// Issue 25's SQL side on a real PostgreSQL: pairings pruned and unambiguous,
// audiences that fail closed, a fixed search path on every SECURITY DEFINER
// function. (The approval RPC's grant is checked through PostgREST in
// supabase.test.mjs.)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { postgresMigrations, postgresStore } from "../dist/postgres.js";
import { adminUrl, freshDatabase, testPool, TRUNCATE } from "./postgres-db.mjs";
import { completeClaimed } from "./helpers/sql-jobs.mjs";

const T0 = 1_767_225_600_000;
const KIND = "llm.generate";
const ENVELOPE = { ciphertext: "c2VhbGVk", recipientKeyId: "site", senderKeyId: "site", direction: "payload", deadlineAt: T0 + 86_400_000 };
const DEVICE = { identity: "id-pub", encryption: "enc-pub", encryptionSig: "sig" };
const cap = (offerScope) => ({ kind: KIND, service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope });

let db;
let pool;
let store;
before(async () => {
  db = await freshDatabase("hardening");
  pool = testPool(db.url, 2);
  store = postgresStore({ pool });
});
after(async () => {
  await store?.close();
  await pool?.end();
  await db?.drop();
});

let n = 0;
const pairing = (userCode, extra = {}) => ({
  deviceCodeHash: `hash-${++n}`,
  userCode,
  state: "pending",
  owner: null,
  runnerId: null,
  collected: false,
  label: "l",
  platform: "linux",
  daemonVersion: "0.1.1",
  capabilities: [cap("private")],
  device: DEVICE,
  expiresAt: T0 + 600_000,
  createdAt: T0,
  ...extra,
});

test("the sweep prunes pairings expired for longer than the clock window (120 s), an approval once its daemon collected it", async () => {
  await pool.query(TRUNCATE);
  const old = pairing("OLD0-0001", { expiresAt: T0 + 10 });
  const approved = pairing("OLD0-0002", { expiresAt: T0 + 10 });
  const live = pairing("LIVE-0001");
  for (const p of [old, approved, live]) await store.createPairing(p);
  await store.approvePairing({ userCode: "OLD0-0002", owner: randomUUID(), runnerId: randomUUID(), now: T0 + 1 });

  await store.expireDue(T0 + 10 + 119_999);
  assert.notEqual(await store.getPairingByDeviceCodeHash(old.deviceCodeHash), null, "still in the window: the daemon hears `expired`");
  await store.expireDue(T0 + 10 + 120_000);
  assert.equal(await store.getPairingByDeviceCodeHash(old.deviceCodeHash), null);
  // An approval its daemon has not collected waits for it (it may come at any time).
  assert.equal((await store.getPairingByDeviceCodeHash(approved.deviceCodeHash)).state, "approved");
  await store.consumePairingToken(approved.deviceCodeHash);
  await store.expireDue(T0 + 10 + 120_001);
  assert.equal(await store.getPairingByDeviceCodeHash(approved.deviceCodeHash), null);
  assert.deepEqual(await store.getPairingByDeviceCodeHash(live.deviceCodeHash), live);
  const { rows } = await pool.query("select count(*)::int as n from byollm_pairings");
  assert.equal(rows[0].n, 1);
});

test("a user code names its pending pairing first; approval acts only on a pending, unexpired one", async () => {
  await pool.query(TRUNCATE);
  const owner = randomUUID();
  // An older pairing with the code that is no longer pending, then a live one.
  const denied = pairing("SAME-CODE");
  const pending = pairing("SAME-CODE");
  await store.createPairing(denied);
  await store.denyPairing("SAME-CODE", T0);
  await store.createPairing(pending);
  assert.equal((await store.getPairingByUserCode("SAME-CODE")).deviceCodeHash, pending.deviceCodeHash);
  const runner = await store.approvePairing({ userCode: "SAME-CODE", owner, runnerId: randomUUID(), now: T0 + 1 });
  assert.equal((await store.getPairingByDeviceCodeHash(pending.deviceCodeHash)).runnerId, runner.id);
  assert.equal((await store.getPairingByDeviceCodeHash(denied.deviceCodeHash)).state, "denied");

  // An expired pending pairing is never approved; a live one with the same code is.
  const expired = pairing("LATE-CODE", { expiresAt: T0 + 5 });
  const fresh = pairing("LATE-CODE", { expiresAt: T0 + 600_000 });
  await store.createPairing(expired);
  await store.createPairing(fresh);
  const second = await store.approvePairing({ userCode: "LATE-CODE", owner, runnerId: randomUUID(), now: T0 + 10 });
  assert.equal((await store.getPairingByDeviceCodeHash(fresh.deviceCodeHash)).runnerId, second.id);
  assert.equal((await store.getPairingByDeviceCodeHash(expired.deviceCodeHash)).state, "pending");

  // With no live pairing, the first one with the code says why.
  await store.createPairing(pairing("GONE-CODE", { expiresAt: T0 + 5 }));
  await assert.rejects(store.approvePairing({ userCode: "GONE-CODE", owner, runnerId: randomUUID(), now: T0 + 5 }), { message: "pairing code has expired" });
  await assert.rejects(store.approvePairing({ userCode: "SAME-CODE", owner, runnerId: randomUUID(), now: T0 + 20 }), { message: "pairing is already denied" });
});

test("an audience other than team is the owner's alone; a job stored with one still completes", async () => {
  await pool.query(TRUNCATE);
  const owner = randomUUID();
  const stranger = randomUUID();
  const mine = await store.approvePairing(
    await store.createPairing(pairing("MINE-0001")).then(() => ({ userCode: "MINE-0001", owner, runnerId: randomUUID(), now: T0 })),
  );
  const theirs = await store.approvePairing(
    await store.createPairing(pairing("THEM-0001")).then(() => ({ userCode: "THEM-0001", owner: stranger, runnerId: randomUUID(), now: T0 })),
  );
  // As an older deployment stored it: `public` is in the enum.
  const job = await store.create({ id: randomUUID(), kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner }, T0);
  await pool.query("update byollm_jobs set audience = 'public' where id = $1", [job.id]);

  const strangerClaim = await store.claim({ runnerId: theirs.id, runnerOwner: stranger, capabilities: [cap("team")], max: 5, leaseMs: 10_000, now: T0 + 1 });
  assert.deepEqual(strangerClaim, []);
  const { rows } = await pool.query("select byollm_server_refusal($1, 'public', null, $2, 'team', 'ollama') as r", [owner, stranger]);
  assert.equal(rows[0].r, "audience-self-other-owner");

  const [claimed] = await store.claim({ runnerId: mine.id, runnerOwner: owner, capabilities: [cap("private")], max: 5, leaseMs: 10_000, now: T0 + 2 });
  assert.equal(claimed.id, job.id);
  const done = await completeClaimed(store, claimed, mine, owner, { now: T0 + 3 });
  assert.deepEqual([done.accepted, done.job.state], [true, "ok"]);
});

test("every SECURITY DEFINER function has search_path pg_catalog, public, pg_temp and no JIT", async () => {
  const { rows } = await pool.query(
    `select p.oid::regprocedure::text as f, coalesce(p.proconfig, '{}') as config
       from pg_proc p where p.pronamespace = 'public'::regnamespace and p.proname like 'byollm\\_%' and p.prosecdef`,
  );
  assert.ok(rows.length > 20, `${rows.length} functions`);
  for (const { f, config } of rows) {
    assert.ok(config.includes("search_path=pg_catalog, public, pg_temp"), `${f}: ${config}`);
    assert.ok(config.includes("jit=off"), `${f}: ${config}`);
  }
});

// The ids a write touched are noted once per statement (over its transition
// table): a row trigger appending each id to one growing string makes a bulk
// write quadratic (an expiring backlog, an operator's bulk update).
test("the triggers on byollm_jobs that note written ids fire once per statement", async () => {
  const { rows } = await pool.query(
    `select t.tgname, (t.tgtype & 1) = 1 as per_row
       from pg_trigger t join pg_proc p on p.oid = t.tgfoid
      where t.tgrelid = 'byollm_jobs'::regclass and not t.tgisinternal and p.proname = 'byollm_note_changes'`,
  );
  assert.ok(rows.length >= 1, "a trigger notes written ids");
  for (const { tgname, per_row } of rows) assert.equal(per_row, false, `${tgname} fires per row`);
});

// A new function is executable by PUBLIC by default and each migration file
// commits on its own, so every file that creates a byollm function revokes
// that before it commits: on a fresh database no file leaves one callable by
// PUBLIC, not even until a later file's grants.
test("after each migration file on a fresh database, no byollm function is executable by PUBLIC", async () => {
  const name = `byollm_t_public_${randomUUID().slice(0, 8)}`;
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  await admin.query(`create database ${name}`);
  const url = new URL(adminUrl());
  url.pathname = `/${name}`;
  const c = new pg.Client({ connectionString: url.toString() });
  await c.connect();
  try {
    const files = await postgresMigrations();
    assert.ok(files.length >= 5);
    for (const { name: file, sql } of files) {
      await c.query("begin");
      await c.query(sql);
      await c.query("commit");
      const { rows } = await c.query(
        `select p.oid::regprocedure::text as f from pg_proc p
          where p.pronamespace = 'public'::regnamespace and p.proname like 'byollm\\_%'
            and (p.proacl is null
                 or exists (select 1 from aclexplode(p.proacl) a where a.grantee = 0 and a.privilege_type = 'EXECUTE'))`,
      );
      assert.deepEqual(rows.map((r) => r.f), [], `after ${file}`);
    }
    const { rows } = await c.query("select count(*)::int as n from pg_proc where proname in ('byollm_create_job', 'byollm_claim', 'byollm_complete_job')");
    assert.equal(rows[0].n, 3);
  } finally {
    await c.end();
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
});
