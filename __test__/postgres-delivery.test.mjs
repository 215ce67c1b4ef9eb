// postgresDelivery: handle.result() hears of the job's end through
// LISTEN/NOTIFY when the ending transaction commits, from another app
// process, without polling the job.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { postgresStore, postgresDelivery } from "../dist/postgres.js";
import { ByollmApp, generateSiteKeys } from "../dist/index.js";
import { freshDatabase, testPool } from "./postgres-db.mjs";
import { HTTP_CAP as CAP, pairRunner, completeClaimed } from "./helpers/sql-jobs.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let db;
let poolA;
let poolB;
before(async () => {
  db = await freshDatabase("delivery");
  poolA = testPool(db.url, 3);
  poolB = testPool(db.url, 2);
});
after(async () => {
  await poolA?.end();
  await poolB?.end();
  await db?.drop();
});

for (const [label, target] of [
  ["its own connection", () => ({ connectionString: db.url })],
  ["a pool's connection", () => ({ pool: poolA })],
]) {
  test(`handle.result() resolves when another process's result commits (${label}), without polling the job`, async () => {
    const owner = randomUUID();
    const app = new ByollmApp({ store: postgresStore({ pool: poolA }), siteKeys: generateSiteKeys(), delivery: postgresDelivery(target()) });
    let reads = 0;
    const result = app.result.bind(app);
    app.result = (id) => {
      reads++;
      return result(id);
    };
    const other = postgresStore({ pool: poolB });
    const runner = await pairRunner(other, owner);
    const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "hi" }, owner });

    let resolvedAt = null;
    const waiting = handle.result({ timeoutMs: 30_000 }).then((r) => {
      resolvedAt = performance.now();
      return r;
    });
    // Long enough for a poller (every 500 ms) to have read the job several times.
    await sleep(1_600);
    assert.equal(resolvedAt, null);
    const readsWhileWaiting = reads;

    const completing = performance.now();
    const [claimed] = await other.claim({ runnerId: runner.id, runnerOwner: owner, capabilities: [CAP], max: 1, leaseMs: 60_000, now: Date.now() });
    assert.equal(claimed.id, handle.id);
    const done = await completeClaimed(other, claimed, runner, owner, { text: "heard" });
    const committedAt = performance.now();
    assert.equal(done.accepted, true);

    const delivered = await waiting;
    assert.deepEqual([delivered.state, delivered.outcome.text], ["ok", "heard"]);
    // Heard at the commit: possibly before the completing call's own answer
    // is back, never before that call began (and it read the ended job).
    assert.ok(resolvedAt >= completing, "resolved by the completion");
    // The first read, one after listening started, one on the notification:
    // nothing in between (no poll), whatever the wait's length.
    assert.ok(readsWhileWaiting <= 3, `${readsWhileWaiting} reads while waiting`);
    assert.equal(reads, readsWhileWaiting + 1);
    console.log(`# ${label}: resolved ${(resolvedAt - committedAt).toFixed(1)} ms after the completing call returned`);
  });
}

test("a wait for a job that already ended answers at once, and the listener is released after the last wait", async () => {
  const owner = randomUUID();
  const store = postgresStore({ pool: poolA });
  const app = new ByollmApp({ store, siteKeys: generateSiteKeys(), delivery: postgresDelivery({ pool: poolA }) });
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner });
  await app.cancel(handle.id);
  assert.equal((await handle.result()).state, "canceled");
  // Another job, ended while waiting; afterwards no connection is left listening.
  const second = await app.enqueue({ kind: "llm.generate", payload: { prompt: "y" }, owner });
  const waiting = second.result({ timeoutMs: 10_000 });
  await sleep(200);
  await app.cancel(second.id);
  assert.equal((await waiting).state, "canceled");
  await sleep(100);
  const { rows } = await poolB.query("select count(*)::int as n from pg_stat_activity where query ilike 'listen %' and datname = current_database()");
  assert.equal(rows[0].n, 0);
});
