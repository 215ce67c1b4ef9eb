// Metrics on PostgreSQL: byollm_metrics's job counts (maintained deltas,
// folded) equal count(*) by state through every kind of write (the cycle,
// bulk inserts, deletes, the sweep, truncate, concurrent writers), runners
// and pending pairings are counted by the in-memory store's rules, and a
// result accepted in one call is timed.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { ByollmApp, createFetchHandler, createMetricsHandler, generateSiteKeys } from "../dist/index.js";
import { PROTOCOL } from "../dist/native.js";
import { postgresStore } from "../dist/postgres.js";
import { Device, ORIGIN } from "./helpers/device.mjs";
import { parseExposition, sampleValue } from "./helpers/prometheus.mjs";
import { freshDatabase, TRUNCATE, testPool } from "./postgres-db.mjs";

const OWNER = "owner-pg-1";
let db;
let pool;
let store;

before(async () => {
  db = await freshDatabase("metrics");
  pool = testPool(db.url, 8);
  store = postgresStore({ pool });
});
after(async () => {
  await pool.end();
  await db.drop();
});

/** count(*) by state, the truth the counts must equal. */
async function truth() {
  const { rows } = await pool.query("select state::text, count(*)::int as n from byollm_jobs group by state");
  const out = { queued: 0, claimed: 0, running: 0, ok: 0, error: 0, canceled: 0, expired: 0 };
  for (const r of rows) out[r.state] = r.n;
  return out;
}

const deltaRows = async () => (await pool.query("select count(*)::int as n from byollm_job_state_counts")).rows[0].n;

test("the counts follow the job cycle, bulk writes, deletes, the sweep and truncate", async () => {
  await pool.query(TRUNCATE);
  const siteKeys = generateSiteKeys();
  let now = Date.now();
  const app = new ByollmApp({ store, siteKeys, now: () => now });
  const handler = createFetchHandler({ store, siteKeys, verificationUrl: `${ORIGIN}/pair`, now: () => now });
  const device = new Device(handler);
  await device.pair(app, OWNER);

  const handles = [];
  for (let i = 0; i < 6; i += 1) handles.push(await app.enqueue({ kind: "llm.generate", payload: { prompt: `p${i}` }, owner: OWNER, ttlMs: 60_000 }));
  for (let i = 0; i < 2; i += 1) {
    const [stub] = (await device.claim()).body.jobs;
    await device.fetchJob(stub);
    assert.equal((await device.result(stub, "done")).body.accepted, true);
  }
  await device.claim(); // one held
  await app.cancel(handles[5].id);
  let m = await app.metrics();
  assert.deepEqual(m.jobs, await truth());
  assert.deepEqual(m.jobs, { queued: 2, claimed: 1, running: 0, ok: 2, error: 0, canceled: 1, expired: 0 });
  assert.equal(m.jobLatency.total.count, 2, "results accepted in one SQL call are timed");
  assert.equal(m.jobLatency.queueWait.count, 3);

  // Bulk: 5,000 jobs in one statement, some deleted, then the sweep expires the queued ones.
  await pool.query(
    `insert into byollm_jobs (id, kind, envelope, owner, state, claimable_at, ttl_ms)
       select 'bulk-' || g, 'llm.generate', '{}'::jsonb, 'someone', (array['queued','ok','error'])[1 + g % 3]::byollm_job_state, now(), 1
         from generate_series(1, 5000) g`,
  );
  await pool.query("delete from byollm_jobs where id like 'bulk-%' and id like '%7'");
  assert.deepEqual((await app.metrics()).jobs, await truth());
  now += 3_600_000;
  await app.sweep();
  m = await app.metrics();
  assert.deepEqual(m.jobs, await truth());
  assert.ok(m.jobs.expired > 1000);
  assert.ok((await deltaRows()) <= 7, "a read folds the deltas");

  // The exposition says the same, through Prometheus's parser.
  const families = parseExposition(await (await createMetricsHandler(app, { public: true })(new Request(`${ORIGIN}/metrics`))).text());
  for (const [state, n] of Object.entries(await truth())) assert.equal(sampleValue(families, "byollm_jobs", { state }), n);

  await pool.query(TRUNCATE);
  assert.deepEqual((await app.metrics()).jobs, await truth());
  assert.equal((await app.metrics()).jobs.queued, 0);
});

test("runners and pending pairings by the in-memory store's rules", async () => {
  await pool.query(TRUNCATE);
  const siteKeys = generateSiteKeys();
  let now = Date.now();
  const app = new ByollmApp({ store, siteKeys, now: () => now, livenessMs: 10_000 });
  const handler = createFetchHandler({ store, siteKeys, verificationUrl: `${ORIGIN}/pair`, now: () => now });
  const a = new Device(handler);
  const b = new Device(handler);
  await a.pair(app, OWNER);
  await b.pair(app, OWNER);
  // One more pairing left pending.
  await a.post("pair", { protocolVersion: "2", action: "start", daemon: { version: "0.1.1", label: "x", platform: "linux" }, device: a.publicIdentity(), capabilities: [] }, false);
  await app.revokeRunner(b.runnerId);
  let m = await app.metrics();
  assert.deepEqual(m.runners, { paired: 1, online: 1, revoked: 1 });
  assert.equal(m.pairings.pending, 1);
  // A SQL store writes liveness coalesced: its window is livenessMs plus the
  // core's slack.
  now += 10_000 + PROTOCOL.livenessSlackMs;
  assert.equal((await app.metrics()).runners.online, 1, "within livenessMs + the slack");
  now += 1;
  m = await app.metrics();
  assert.deepEqual(m.runners, { paired: 1, online: 0, revoked: 1 }, "silent past the liveness window");
  now += 3_600_000;
  assert.equal((await app.metrics()).pairings.pending, 0, "expired");
});

test("concurrent writers: appends never wait on each other, and the counts stay exact while folds run", async () => {
  await pool.query(TRUNCATE);
  const writers = 6;
  const per = 300;
  const folding = (async () => {
    for (let i = 0; i < 30; i += 1) await pool.query("select byollm_metrics(0, 1)");
  })();
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      for (let i = 0; i < per; i += 1) {
        const id = `c-${w}-${i}`;
        await pool.query(`insert into byollm_jobs (id, kind, envelope, owner, claimable_at) values ($1, 'llm.generate', '{}', 'o', now())`, [id]);
        await pool.query(`update byollm_jobs set state = 'claimed' where id = $1`, [id]);
        if (i % 2 === 0) await pool.query(`update byollm_jobs set state = 'ok' where id = $1`, [id]);
      }
    }),
  );
  await folding;
  const { rows } = await pool.query("select byollm_metrics(0, 1) as m");
  const [queued, claimed, running, ok] = rows[0].m.jobs;
  const t = await truth();
  assert.deepEqual({ queued, claimed, running, ok }, { queued: t.queued, claimed: t.claimed, running: t.running, ok: t.ok });
  assert.equal(claimed + ok, writers * per);
});
