// Bounded work and bounded data in the SQL store (the bounds migration,
// supabase/migrations/20260901000700_byollm_bounds.sql), on a real
// PostgreSQL: lease renewal and release are one statement whatever the
// number of leases, a heartbeat leaves unchanged capabilities where they
// are, pending pairings are capped as in the in-memory store, pruning goes
// in bounded batches, and the identity sequences are not the browser
// roles'.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import { migratePostgres, postgresStore } from "../dist/postgres.js";
import { ByollmApp, createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { freshDatabase, testPool, TRUNCATE } from "./postgres-db.mjs";
import { Device, ORIGIN } from "./helpers/device.mjs";
import { pairingRecord, pairRunner } from "./helpers/sql-jobs.mjs";

const T0 = 1_767_225_600_000;
const KIND = "llm.generate";
const ENVELOPE = { ciphertext: "c2VhbGVk", recipientKeyId: "site", senderKeyId: "site", direction: "payload", deadlineAt: T0 + 86_400_000 };
const CAP = { kind: KIND, service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };
const MAX_PAIRINGS = 4096;
const PRUNE_BATCH = 512;

let db;
let pool;
let store;
before(async () => {
  db = await freshDatabase("bounds");
  pool = testPool(db.url, 3);
  store = postgresStore({ pool });
});
after(async () => {
  await store?.close();
  await pool?.end();
  await db?.drop();
});

const pairing = (extra = {}) => pairingRecord({ expiresAt: T0 + 600_000, createdAt: T0, ...extra });

const pairedRunner = (owner = randomUUID(), capabilities = [CAP]) => pairRunner(store, owner, capabilities);

/** `count` jobs of `owner`'s, claimed by `runner`: their lease refs. */
async function heldLeases(runner, count) {
  for (let i = 0; i < count; i++) {
    await store.create({ id: randomUUID(), kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner: runner.owner, ttlMs: 3_600_000 }, T0);
  }
  const claimed = await store.claim({ runnerId: runner.id, runnerOwner: runner.owner, capabilities: [CAP], max: count, leaseMs: 60_000, now: T0 + 1 });
  assert.equal(claimed.length, count);
  return claimed.map((j) => ({ jobId: j.id, leaseId: j.lease.id }));
}

const unknownLeases = (count) => Array.from({ length: count }, () => ({ jobId: randomUUID(), leaseId: randomUUID() }));

/**
 * Runs `sql` in a transaction and answers its result with what it wrote to
 * byollm_jobs: the statement-level triggers there append each statement's
 * ids and then one comma, so a statement that wrote no row leaves a comma
 * alone. `empty`: how many such statements ran (a loop of one UPDATE per
 * lease leaves one for every lease it did not find).
 */
async function withWrites(sql, args) {
  const c = await pool.connect();
  try {
    await c.query("begin");
    const { rows } = await c.query(sql, args);
    const { rows: noted } = await c.query("select byollm_take_changes() as t");
    await c.query("commit");
    const text = noted[0].t;
    const commas = (text.match(/,/g) ?? []).length;
    const ids = text.split(",").filter((s) => s !== "").length;
    return { r: rows[0].r, empty: commas - ids, ids };
  } finally {
    c.release();
  }
}

test("renewLeases answers each lease in order, a repeated one twice, with no statement per lease", async () => {
  await pool.query(TRUNCATE);
  const runner = await pairedRunner();
  const other = await pairedRunner(runner.owner);
  const [a, b, c] = await heldLeases(runner, 3);
  const foreign = (await heldLeases(other, 1))[0];
  const stranger = unknownLeases(1)[0];
  const wrongLease = { jobId: b.jobId, leaseId: randomUUID() };
  const upper = { jobId: c.jobId, leaseId: c.leaseId.toUpperCase() };
  const leases = [a, stranger, b, foreign, a, wrongLease, upper, c];
  const answer = await store.renewLeases({ runnerId: runner.id, leases, leaseMs: 30_000, now: T0 + 2 });
  const at = T0 + 2 + 30_000;
  assert.deepEqual(answer.renewed, [
    { jobId: a.jobId, expiresAt: at },
    { jobId: b.jobId, expiresAt: at },
    { jobId: a.jobId, expiresAt: at },
    { jobId: c.jobId, expiresAt: at },
  ]);
  assert.deepEqual(answer.lost, [stranger, foreign, wrongLease, upper]);
  for (const l of [a, b, c]) {
    const job = await store.get(l.jobId);
    assert.deepEqual([job.state, job.lease.expiresAt], ["running", at]);
  }
  assert.equal((await store.get(foreign.jobId)).state, "claimed", "another runner's lease is not renewed");

  // A lease that lapsed (and was swept) is lost, not renewed.
  const lapsed = await store.renewLeases({ runnerId: runner.id, leases: [a], leaseMs: 30_000, now: at });
  assert.deepEqual([lapsed.renewed, lapsed.lost], [[], [a]]);

  // 2 held and 300 unknown leases: the two are written, and no statement
  // ran per unknown lease (a loop makes one UPDATE per lease).
  const [d, e] = await heldLeases(runner, 2);
  const many = [d, ...unknownLeases(300), e];
  const { r, empty, ids } = await withWrites("select byollm_renew_leases($1, $2, 60000, $3) as r", [runner.id, JSON.stringify(many), at + 1]);
  assert.equal(r.renewed.length, 2);
  assert.equal(r.lost.length, 300);
  assert.deepEqual([ids, empty], [2, 0]);
});

test("release releases each held lease once, in the order given, with no statement per lease", async () => {
  await pool.query(TRUNCATE);
  const runner = await pairedRunner();
  const other = await pairedRunner(runner.owner);
  const [a, b, c] = await heldLeases(runner, 3);
  const foreign = (await heldLeases(other, 1))[0];
  const leases = [c, unknownLeases(1)[0], { jobId: a.jobId, leaseId: randomUUID() }, foreign, a, c];
  const released = await store.release({ runnerId: runner.id, leases, reason: "refused", now: T0 + 5 });
  assert.deepEqual(released, [c.jobId, a.jobId]);
  for (const l of [a, c]) {
    const job = await store.get(l.jobId);
    assert.deepEqual([job.state, job.lease, job.claimableAt, job.refusedBy], ["queued", null, T0 + 5, [runner.id]]);
  }
  assert.equal((await store.get(b.jobId)).state, "claimed");
  assert.equal((await store.get(foreign.jobId)).state, "claimed");

  const [d] = await heldLeases(runner, 1);
  const many = [...unknownLeases(300), d, b];
  const { r, empty, ids } = await withWrites("select byollm_release($1, $2, 'shutdown', $3) as r", [runner.id, JSON.stringify(many), T0 + 6]);
  assert.deepEqual(r, [d.jobId, b.jobId]);
  assert.deepEqual([ids, empty], [2, 0]);
  assert.deepEqual((await store.get(d.jobId)).refusedBy, [], "not refused: the reason was shutdown");
});

// A heartbeat's capabilities are large when a device offers many models; a
// TOASTed value written again on every heartbeat is that many bytes of new
// row versions each time. Unchanged, it keeps its stored chunks (same chunk
// id); changed, it is written.
test("a heartbeat writes the runner's capabilities only when they changed", async () => {
  await pool.query(TRUNCATE);
  const caps = Array.from({ length: 8 }, (_, i) => ({ ...CAP, service: `s${i}`, model: randomBytes(1500).toString("base64") }));
  const runner = await pairedRunner(randomUUID(), caps);
  const { rows: t } = await pool.query("select reltoastrelid::regclass::text as t from pg_class where relname = 'byollm_runners'");
  const chunks = async () => (await pool.query(`select array_agg(distinct chunk_id::text order by chunk_id::text) as a from ${t[0].t}`)).rows[0].a;
  const before = await chunks();
  assert.equal(before.length, 1, "the capabilities are TOASTed");
  for (let i = 1; i <= 3; i++) {
    await pool.query("select byollm_heartbeat_for($1, $2, '0.1.1', '[]', 60000, $3)", [runner.id, JSON.stringify(caps), T0 + i]);
  }
  await store.touchRunner({ runnerId: runner.id, capabilities: caps, daemonVersion: "0.1.1", now: T0 + 4 });
  assert.deepEqual(await chunks(), before, "the same value keeps its stored copy");
  assert.equal((await store.getRunner(runner.id)).lastHeartbeatAt, T0 + 4);

  const changed = caps.map((c, i) => (i === 0 ? { ...c, model: "other" } : c));
  await pool.query("select byollm_heartbeat_for($1, $2, '0.1.2', '[]', 60000, $3)", [runner.id, JSON.stringify(changed), T0 + 5]);
  assert.notDeepEqual(await chunks(), before);
  const stored = await store.getRunner(runner.id);
  assert.deepEqual([stored.capabilities[0].model, stored.daemonVersion, stored.lastHeartbeatAt], ["other", "0.1.2", T0 + 5]);
});

async function insertPairings(count, { expiresAt = T0 + 600_000, state = "pending" } = {}) {
  await pool.query(
    `select byollm_create_pairing(jsonb_build_object(
        'deviceCodeHash', $1::text || g, 'userCode', 'U' || g, 'state', $4::text, 'owner', null, 'runnerId', null,
        'collected', false, 'label', 'l', 'platform', 'linux', 'daemonVersion', '1', 'capabilities', '[]'::jsonb,
        'device', '{}'::jsonb, 'expiresAt', $2::bigint, 'createdAt', $3::bigint))
       from generate_series(1, $5::int) g`,
    [`bulk-${randomUUID()}-`, expiresAt, T0, state, count],
  );
}

const pairingCount = async () => (await pool.query("select count(*)::int as n from byollm_pairings")).rows[0].n;

test("at most 4,096 pairings: past that the oldest that is not an approval awaiting collection is dropped", async () => {
  await pool.query(TRUNCATE);
  const approved = pairing();
  const collected = pairing();
  await store.createPairing(approved);
  await store.createPairing(collected);
  const owner = randomUUID();
  await store.approvePairing({ userCode: approved.userCode, owner, runnerId: `runner_${randomUUID()}`, now: T0 });
  await store.approvePairing({ userCode: collected.userCode, owner, runnerId: `runner_${randomUUID()}`, now: T0 });
  await store.consumePairingToken(collected.deviceCodeHash);
  const second = pairing();
  await store.createPairing(second);
  await insertPairings(MAX_PAIRINGS - 3);
  assert.equal(await pairingCount(), MAX_PAIRINGS);

  const newest = pairing();
  await store.createPairing(newest);
  assert.equal(await pairingCount(), MAX_PAIRINGS);
  assert.notEqual(await store.getPairingByDeviceCodeHash(approved.deviceCodeHash), null, "an approval awaiting collection stays");
  assert.equal(await store.getPairingByDeviceCodeHash(collected.deviceCodeHash), null, "the oldest other one went");
  assert.notEqual(await store.getPairingByDeviceCodeHash(second.deviceCodeHash), null);
  assert.deepEqual(await store.getPairingByDeviceCodeHash(newest.deviceCodeHash), newest);

  await insertPairings(200);
  assert.equal(await pairingCount(), MAX_PAIRINGS);
  assert.equal(await store.getPairingByDeviceCodeHash(second.deviceCodeHash), null);
  assert.notEqual(await store.getPairingByDeviceCodeHash(approved.deviceCodeHash), null);

  // Overwriting a stored pairing (same hash) keeps the count.
  await store.createPairing({ ...newest, label: "again" });
  assert.equal(await pairingCount(), MAX_PAIRINGS);
  assert.equal((await store.getPairingByDeviceCodeHash(newest.deviceCodeHash)).label, "again");
});

test("when full, pairings expired past the clock window go before live ones", async () => {
  await pool.query(TRUNCATE);
  const stale = pairing({ expiresAt: T0 - 200_000, createdAt: T0 - 800_000 });
  await store.createPairing(stale);
  const live = pairing();
  await store.createPairing(live);
  await insertPairings(MAX_PAIRINGS - 2);
  assert.equal(await pairingCount(), MAX_PAIRINGS);
  const newest = pairing();
  await store.createPairing(newest);
  assert.equal(await pairingCount(), MAX_PAIRINGS);
  assert.equal(await store.getPairingByDeviceCodeHash(stale.deviceCodeHash), null);
  assert.notEqual(await store.getPairingByDeviceCodeHash(live.deviceCodeHash), null, "the oldest live pairing is kept while an expired one can go");
});

test("pruning deletes at most 512 expired pairings a call; the sweeps take the rest", async () => {
  await pool.query(TRUNCATE);
  await insertPairings(1_300, { expiresAt: T0 });
  const live = pairing({ expiresAt: T0 + 10_000_000 });
  await store.createPairing(live);
  const later = T0 + 120_001;
  const { rows } = await pool.query("select byollm_prune_pairings($1) as gone", [later]);
  assert.equal(rows[0].gone, PRUNE_BATCH);
  assert.equal(await pairingCount(), 1_301 - PRUNE_BATCH);
  await store.expireDue(later);
  assert.equal(await pairingCount(), 1_301 - 2 * PRUNE_BATCH);
  await store.expireDue(later);
  assert.equal(await pairingCount(), 1);
  assert.deepEqual(await store.getPairingByDeviceCodeHash(live.deviceCodeHash), live);
});

// Supabase's default privileges hand `anon` and `authenticated` every
// privilege on a new sequence in `public`: granted here as it would have
// done, then the migrations (idempotent, run at every start) take them back.
test("the four byollm_seq identity sequences are not granted to anon or authenticated", async () => {
  const seqs = (
    await pool.query(
      `select pg_get_serial_sequence(t, 'byollm_seq') as s
         from unnest(array['byollm_jobs', 'byollm_runners', 'byollm_pairings', 'byollm_job_cancels']) t`,
    )
  ).rows.map((r) => r.s);
  assert.equal(seqs.filter(Boolean).length, 4);
  for (const s of seqs) await pool.query(`grant all on sequence ${s} to anon, authenticated`);
  const granted = async () =>
    (
      await pool.query(
        `select s, r from unnest($1::text[]) s, unnest(array['anon', 'authenticated']) r
          where has_sequence_privilege(r, s, 'USAGE') or has_sequence_privilege(r, s, 'SELECT')
             or has_sequence_privilege(r, s, 'UPDATE')`,
        [seqs],
      )
    ).rows;
  assert.equal((await granted()).length, 8, "granted as a platform's defaults would");
  await migratePostgres({ connectionString: db.url, createRoles: true });
  assert.deepEqual(await granted(), []);
});

test("the bounds migration is applied: its functions exist and are the server's alone", async () => {
  const { rows } = await pool.query(
    `select p.proname, has_function_privilege('anon', p.oid, 'EXECUTE') as anon,
            has_function_privilege('service_role', p.oid, 'EXECUTE') as service
       from pg_proc p where p.proname in ('byollm_max_pairings', 'byollm_named_leases', 'byollm_prune_batch') order by 1`,
  );
  assert.deepEqual(rows, [
    { proname: "byollm_max_pairings", anon: false, service: true },
    { proname: "byollm_named_leases", anon: false, service: true },
    { proname: "byollm_prune_batch", anon: false, service: true },
  ]);
  const limits = await pool.query("select byollm_max_pairings() as m, byollm_prune_batch() as b");
  assert.deepEqual(limits.rows[0], { m: MAX_PAIRINGS, b: PRUNE_BATCH });
});

// The wire bounds are checked with the schema, before any store call: on a
// SQL store a heartbeat naming more leases than the bound costs the runner's
// read (for the signature check) and nothing else.
test("on postgresStore a heartbeat over the lease bound is refused without calling the heartbeat function", async () => {
  await pool.query(TRUNCATE);
  const texts = [];
  const query = pool.query.bind(pool);
  const watched = Object.create(pool);
  watched.query = (...args) => {
    texts.push(typeof args[0] === "string" ? args[0] : args[0]?.text ?? "");
    return query(...args);
  };
  // Without the notification channel, whose pings go through the pool too:
  // what is counted here is the store's calls.
  const watchedStore = postgresStore({ pool: watched, notifications: false });
  const siteKeys = generateSiteKeys();
  const app = new ByollmApp({ store: watchedStore, siteKeys });
  const handler = createFetchHandler({ store: watchedStore, siteKeys, verificationUrl: `${ORIGIN}/pair` });
  const device = new Device(handler);
  await device.pair(app, randomUUID());
  texts.length = 0;
  const leases = Array.from({ length: 1025 }, () => ({ jobId: randomUUID(), leaseId: randomUUID() }));
  assert.deepEqual(await device.heartbeat(leases), {
    status: 400,
    body: { error: "bad-request", message: "activeLeases has 1025 items and the limit is 1024" },
  });
  assert.deepEqual(texts.filter((t) => /byollm_(heartbeat_for|renew_leases|touch_runner)/.test(t)), []);
  assert.ok(texts.length <= 1, `at most the runner's read: ${texts.join(" | ")}`);
  const ok = await device.heartbeat(leases.slice(0, 1024));
  assert.deepEqual([ok.status, ok.body.lost.length], [200, 1024]);
});
