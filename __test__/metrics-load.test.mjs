// A load run over the real daemon protocol on postgresStore: 4 app processes
// (node:http, ByollmApp + createFetchHandler) and 16 simulated daemons
// draining 10,000 jobs (bench/stores-concurrency.mjs). Afterwards every app's
// snapshot counts the same jobs by state as count(*) in SQL, and the app
// processes' own counters add up to the jobs they served.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { concurrency } from "../bench/stores-concurrency.mjs";
import { freshDatabase, testPool } from "./postgres-db.mjs";

const JOBS = 10_000;
let db;

before(async () => {
  db = await freshDatabase("metrics_load");
});
after(async () => {
  await db.drop();
});

test(`${JOBS.toLocaleString("en")} jobs through 4 app processes: the snapshots' counts equal the store's truth`, { timeout: 600_000 }, async () => {
  const pool = testPool(db.url, 2);
  try {
    const run = await concurrency({
      dbUrl: db.url,
      postgresCpu: () => null,
      jobs: JOBS,
      onDrained: async (snapshots) => {
        const { rows } = await pool.query("select state::text, count(*)::int as n from byollm_jobs group by state");
        return { snapshots, truth: Object.fromEntries(rows.map((r) => [r.state, r.n])) };
      },
    });
    const { snapshots, truth } = run.drained;
    console.log(`# ${run.jobs} jobs, ${run.jobsPerSec.toFixed(0)} jobs/s, truth ${JSON.stringify(truth)}, snapshot ${JSON.stringify(snapshots[0].jobs)}`);
    assert.equal(run.jobs, JOBS);
    assert.equal(run.lost, 0);
    assert.equal(truth.ok, JOBS);
    for (const s of snapshots) {
      for (const [state, n] of Object.entries(s.jobs)) assert.equal(n, truth[state] ?? 0, `${state}`);
    }
    const sum = (pick) => snapshots.reduce((n, s) => n + pick(s), 0);
    assert.equal(sum((s) => s.enqueued), JOBS);
    assert.equal(sum((s) => s.endpoints.result.statuses["200"]), JOBS);
    assert.equal(sum((s) => s.jobLatency.total.count), JOBS);
    assert.equal(sum((s) => s.jobLatency.queueWait.count), JOBS);
    assert.equal(sum((s) => s.refusals.unauthorized + s.refusals.revoked + s.refusals.badRequest), 0);
  } finally {
    await pool.end();
  }
});
