// What the SQL functions behind the engine's operations answer
// (supabase/migrations/20260901000900_byollm_engine.sql): exactly what
// src/engine/ops.rs reads, so the envelope the engine already holds and the
// runner record it already verified against are not sent back. The store
// methods still answer whole records. And the plans those calls keep for the
// session: the claim's answer is not planned again on every call, and a
// completion's dependents lookup stays on its index as the table grows.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { postgresStore } from "../dist/postgres.js";
import { sqlStorePaths } from "../dist/sql-store.js";
import { PROTOCOL } from "../dist/native.js";
import { freshDatabase, testPool, TRUNCATE } from "./postgres-db.mjs";
import { HTTP_CAP as CAP, pairRunner } from "./helpers/sql-jobs.mjs";

const T0 = 1_767_225_600_000;
const KIND = "llm.generate";
const ENVELOPE = { ciphertext: "c2VhbGVkLXBheWxvYWQ", recipientKeyId: "site", senderKeyId: "site", direction: "payload", deadlineAt: T0 + 86_400_000 };
const STUB_KEYS = ["attempts", "audience", "claimableAt", "createdAt", "deadlineAt", "id", "kind", "lease", "owner", "purpose", "sizeClass", "ttlMs"];

let db;
let pool;
let store;
let ops;
before(async () => {
  db = await freshDatabase("engine");
  pool = testPool(db.url, 1);
  store = postgresStore({ pool });
  ops = async (op, args) => sqlStorePaths(store).operations(op, JSON.stringify(args));
});
after(async () => {
  await pool?.end();
  await db?.drop();
});

const job = (owner, extra = {}) => ({ id: randomUUID(), kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner, ttlMs: 3_600_000, ...extra });
const claimArgs = (runner, now = T0 + 1) => ({ runnerId: runner.id, runnerOwner: runner.owner, capabilities: [CAP], max: 1, leaseMs: 60_000, now });
const sorted = (o) => Object.keys(o).sort();

test("the engine's operations answer what it reads: the runner as {revokedAt}, claimed jobs as stubs, the fetch's job with its envelope, a result's without", async () => {
  await pool.query(TRUNCATE);
  const owner = randomUUID();
  const runner = await pairRunner(store, owner);
  const queued = await store.create(job(owner, { purpose: "summary" }), T0);

  const claimText = await ops("claim", claimArgs(runner));
  assert.ok(!claimText.includes(ENVELOPE.ciphertext), claimText);
  const claimed = JSON.parse(claimText);
  assert.deepEqual(sorted(claimed), ["jobs", "runner"]);
  assert.deepEqual(claimed.runner, { revokedAt: null });
  assert.equal(claimed.jobs.length, 1);
  const [stub] = claimed.jobs;
  assert.deepEqual(sorted(stub), STUB_KEYS);
  assert.deepEqual(
    { ...stub, lease: { ...stub.lease, id: "-" } },
    { id: queued.id, kind: KIND, audience: "private", owner, purpose: "summary", sizeClass: "small", deadlineAt: null, claimableAt: T0, ttlMs: 3_600_000, lease: { id: "-", runnerId: runner.id, expiresAt: T0 + 60_001 }, createdAt: T0, attempts: 1 },
  );

  const fetched = JSON.parse(await ops("job", { runnerId: runner.id, jobId: queued.id }));
  assert.deepEqual(fetched.runner, { revokedAt: null });
  assert.deepEqual(sorted(fetched.job), ["audience", "createdAt", "envelope", "lease", "state"]);
  assert.deepEqual(fetched.job.envelope, ENVELOPE);
  assert.deepEqual([fetched.job.state, fetched.job.createdAt, fetched.job.lease], ["claimed", T0, stub.lease]);

  const beat = JSON.parse(
    await ops("heartbeat", { runnerId: runner.id, capabilities: [CAP], daemonVersion: "0.1.1", leases: [{ jobId: queued.id, leaseId: stub.lease.id }], leaseMs: 60_000, now: T0 + 2 }),
  );
  // seenAt: the stored liveness (the approval's, on the real clock, is later than T0).
  assert.deepEqual(beat, { runner: { revokedAt: null }, lost: [], cancel: [], seenAt: (await store.getRunner(runner.id)).lastHeartbeatAt });

  // Not the holder's lease: nothing written, the job as the engine checks a lease on it.
  const outcome = { outcome: "ok", text: "done" };
  const provenance = { audience: "private", runnerId: runner.id, runnerOwner: owner, backendClass: "http", model: "m", untrusted: false };
  const declined = JSON.parse(
    await ops("resultFor", { runnerId: runner.id, jobId: queued.id, leaseId: randomUUID(), audience: "private", outcome, provenance, now: T0 + 3 }),
  );
  assert.deepEqual(sorted(declined), ["job", "runner"]);
  assert.deepEqual(declined.job, { audience: "private", state: "running", lease: { ...stub.lease, expiresAt: T0 + 60_002 }, createdAt: T0 });

  const done = JSON.parse(
    await ops("resultFor", { runnerId: runner.id, jobId: queued.id, leaseId: stub.lease.id, audience: "private", outcome, provenance, now: T0 + 4 }),
  );
  assert.deepEqual(done, { runner: { revokedAt: null }, accepted: true, state: "ok", createdAt: T0 });
  const unknownJob = JSON.parse(await ops("resultFor", { runnerId: runner.id, jobId: randomUUID(), leaseId: randomUUID(), audience: "private", outcome, provenance, now: T0 + 5 }));
  assert.deepEqual(unknownJob, { runner: { revokedAt: null }, job: null });

  // Revoked: the time it was revoked; unknown: null. No work is done for either.
  await store.create(job(owner), T0 + 6);
  await store.revokeRunner(runner.id, T0 + 7);
  const stranger = `runner_${randomUUID()}`;
  for (const [id, expected] of [[runner.id, { revokedAt: T0 + 7 }], [stranger, null]]) {
    const claim = JSON.parse(await ops("claim", { ...claimArgs(runner, T0 + 8), runnerId: id }));
    assert.deepEqual(claim, { runner: expected, jobs: [] });
    assert.deepEqual(JSON.parse(await ops("job", { runnerId: id, jobId: queued.id })).runner, expected);
    const heartbeat = JSON.parse(await ops("heartbeat", { runnerId: id, capabilities: [CAP], daemonVersion: "0.1.1", leases: [], leaseMs: 60_000, now: T0 + 8 }));
    assert.deepEqual(heartbeat, { runner: expected });
    const result = JSON.parse(await ops("resultFor", { runnerId: id, jobId: queued.id, leaseId: stub.lease.id, audience: "private", outcome, provenance, now: T0 + 8 }));
    assert.deepEqual(result, { runner: expected });
  }
  assert.equal((await pool.query("select count(*)::int as n from byollm_jobs where state = 'queued'")).rows[0].n, 1);
});

test("a runner that signs with its bare uuid finds its lease spelled so in the stub and in the job a fetch reads", async () => {
  await pool.query(TRUNCATE);
  const owner = randomUUID();
  const runner = await pairRunner(store, owner);
  const bare = runner.id.slice("runner_".length);
  const queued = await store.create(job(owner), T0);
  const [stub] = JSON.parse(await ops("claim", { ...claimArgs(runner), runnerId: bare })).jobs;
  assert.equal(stub.lease.runnerId, bare);
  assert.equal(JSON.parse(await ops("job", { runnerId: bare, jobId: queued.id })).job.lease.runnerId, bare);
  // Records the app reads spell it as records do.
  assert.equal((await store.get(queued.id)).lease.runnerId, runner.id);
});

test("the store's claim still answers whole records, from the same claim query", async () => {
  await pool.query(TRUNCATE);
  const owner = randomUUID();
  const runner = await pairRunner(store, owner);
  const first = await store.create(job(owner), T0);
  const second = await store.create(job(owner), T0 + 1);
  const records = await store.claim({ ...claimArgs(runner, T0 + 2), max: 2 });
  assert.deepEqual(records.map((r) => r.id), [first.id, second.id]);
  for (const r of records) {
    assert.deepEqual(Object.keys(r), PROTOCOL.jobKeys);
    assert.deepEqual(r.envelope, ENVELOPE);
    assert.equal(r.state, "claimed");
    assert.equal(r.lease.runnerId, runner.id);
  }
});

test("create: the database answers a new job without its envelope, the store's record carries the caller's; an existing id answers the stored record whole", async () => {
  await pool.query(TRUNCATE);
  const owner = randomUUID();
  const input = job(owner);
  const sent = JSON.stringify({ ...input, audience: "private", purpose: null, audienceAllow: null, dependsOn: [], deadlineAt: null });
  const { rows } = await pool.query("select byollm_create_job($1::jsonb, $2) as r", [sent, T0]);
  assert.equal(rows[0].r.created, true);
  assert.equal("envelope" in rows[0].r.job, false);
  assert.deepEqual((await store.get(input.id)).envelope, ENVELOPE);

  // Through the store, in the envelope's own key order.
  const envelope = { deadlineAt: ENVELOPE.deadlineAt, direction: "payload", senderKeyId: "site", recipientKeyId: "site", ciphertext: "b3RoZXI" };
  const created = await store.create({ ...job(owner), envelope }, T0 + 1);
  assert.deepEqual(Object.keys(created), PROTOCOL.jobKeys);
  assert.deepEqual(created.envelope, envelope);
  assert.deepEqual(Object.keys(created.envelope), PROTOCOL.envelopeKeys);
  assert.deepEqual(created, await store.get(created.id));

  // The same id again, another envelope: the stored job, whole and unchanged.
  const again = await store.create({ ...job(owner), id: created.id, envelope: ENVELOPE, ttlMs: 5 }, T0 + 2);
  assert.deepEqual(again, await store.get(created.id));
  assert.deepEqual(again.envelope, envelope);
  assert.equal(again.ttlMs, 3_600_000);
});

/** Plans PostgreSQL runs inside the store's calls on `pool`'s one connection, as NOTICEs (auto_explain). */
async function plansOf(work) {
  const client = await pool.connect();
  const notices = [];
  const hear = (n) => notices.push(n.message);
  client.on("notice", hear);
  try {
    await client.query("load 'auto_explain'");
    await client.query(
      "set auto_explain.log_min_duration = 0; set auto_explain.log_nested_statements = on; set auto_explain.log_verbose = on; set auto_explain.log_level = notice",
    );
  } finally {
    client.release();
  }
  try {
    await work();
  } finally {
    const again = await pool.connect();
    await again.query("set auto_explain.log_min_duration = -1");
    again.off("notice", hear);
    again.release();
  }
  return notices;
}

test("the claim's answer keeps its session plan: after the first claims it runs the generic plan, not one planned for this call", async () => {
  await pool.query(TRUNCATE);
  const owner = randomUUID();
  const runner = await pairRunner(store, owner);
  // PL/pgSQL tries custom plans for a statement's first five runs.
  for (let i = 0; i < 8; i++) {
    await store.create(job(owner), T0);
    assert.equal(JSON.parse(await ops("claim", claimArgs(runner, T0 + 1 + i))).jobs.length, 1);
  }
  await store.create(job(owner), T0);
  const plans = await plansOf(async () => {
    assert.equal(JSON.parse(await ops("claim", claimArgs(runner, T0 + 20))).jobs.length, 1);
  });
  const answer = plans.find((p) => p.includes("from byollm_claim_rows(p_runner_id"));
  assert.ok(answer, plans.join("\n---\n"));
  // A plan made for this call would carry the runner id as a constant.
  assert.match(answer, /Function Call: byollm_claim_rows\(\$\d+,/);
  assert.ok(!answer.includes(runner.id), answer);
});

test("a completion's dependents lookup stays on its index when the session's first completion came at an empty table", async () => {
  await pool.query(TRUNCATE);
  const owner = randomUUID();
  const runner = await pairRunner(store, owner);
  const cycle = async (now) => {
    const queued = await store.create(job(owner), now);
    const [stub] = JSON.parse(await ops("claim", claimArgs(runner, now + 1))).jobs;
    const outcome = { outcome: "ok", text: "done" };
    const provenance = { audience: "private", runnerId: runner.id, runnerOwner: owner, backendClass: "http", model: "m", untrusted: false };
    const done = JSON.parse(await ops("resultFor", { runnerId: runner.id, jobId: queued.id, leaseId: stub.lease.id, audience: "private", outcome, provenance, now: now + 2 }));
    assert.equal(done.accepted, true);
  };
  // The plans are made now, at a table of one job (PL/pgSQL settles on a
  // generic plan after five runs).
  for (let i = 0; i < 7; i++) await cycle(T0 + i * 10);
  // Then the table grows, with no ANALYZE to make the session plan again.
  await pool.query(
    `insert into byollm_jobs (id, kind, envelope, size_class, owner, state, claimable_at, created_at, updated_at)
     select gen_random_uuid()::text, 'llm.generate', $1::jsonb, 'small', $2, 'ok', now(), now(), now() from generate_series(1, 2000)`,
    [JSON.stringify(ENVELOPE), randomUUID()],
  );
  const plans = await plansOf(() => cycle(T0 + 1000));
  const lookup = plans.find((p) => p.includes("d.depends_on @> array[v_row.id]") && p.includes("order by d.byollm_seq"));
  assert.ok(lookup, plans.join("\n---\n"));
  assert.match(lookup, /Bitmap Index Scan on byollm_jobs_blocked_idx/);
  assert.doesNotMatch(lookup, /Seq Scan/);
});
