// The idle fleet on PostgreSQL (supabase/migrations/20260901001100_byollm_idle.sql
// and postgresStore's notification channel): an idle heartbeat writes no row
// until its liveness is due, an empty claim says when to ask again, liveness
// of many runners is written in one call, every change that can make an idle
// answer stale sends its key on `byollm_work` (and nothing else does), the
// channel proves itself live and comes back after a loss, and the liveness
// counts of a SQL store allow for the coalesced writes.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { ByollmApp, generateSiteKeys, MemoryStore } from "../dist/index.js";
import { postgresStore } from "../dist/postgres.js";
import { sqlStorePaths } from "../dist/sql-store.js";
import { PROTOCOL } from "../dist/native.js";
import { freshDatabase, testPool, TRUNCATE } from "./postgres-db.mjs";
import { HTTP_CAP as CAP, completeClaimed, pairRunner } from "./helpers/sql-jobs.mjs";

const TEAM_CAP = { ...CAP, offerScope: "team" };
const KIND = CAP.kind;
const ENVELOPE = { ciphertext: "c2VhbGVk", recipientKeyId: "site", senderKeyId: "site", direction: "payload", deadlineAt: null };
// Later than any approval's Date.now(), so the first heartbeat's liveness is due.
const T = Date.now() + 3_600_000;

let db;
let pool;
let store;
let ops;
let listener;
let heard = [];
before(async () => {
  db = await freshDatabase("idle");
  pool = testPool(db.url, 4);
  store = postgresStore({ pool, notifications: false });
  ops = async (op, args) => JSON.parse(await sqlStorePaths(store).operations(op, JSON.stringify(args)));
  listener = new pg.Client({ connectionString: db.url });
  await listener.connect();
  listener.on("notification", (n) => heard.push(n.payload));
  await listener.query("listen byollm_work");
});
after(async () => {
  await listener?.end();
  await pool?.end();
  await db?.drop();
});

const job = (owner, extra = {}) => ({ id: randomUUID(), kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner, ttlMs: 86_400_000, ...extra });
const heartbeat = (runner, now, extra = {}) =>
  ops("heartbeat", { runnerId: runner.id, capabilities: runner.capabilities, daemonVersion: runner.daemonVersion, leases: [], leaseMs: 60_000, now, ...extra });
const claim = (runner, now, capabilities = runner.capabilities) => ops("claim", { runnerId: runner.id, capabilities, max: 1, leaseMs: 60_000, now });
const xmin = async (runner) => (await pool.query("select xmin::text as x from byollm_runners where id = byollm_runner_key($1)", [runner.id])).rows[0].x;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** The keys `step` sent, in the order heard, once every notification has arrived. */
async function keysOf(step) {
  heard = [];
  await step();
  await pool.query("select pg_notify('byollm_work', 'ping:fence')");
  for (let i = 0; i < 200 && !heard.includes("ping:fence"); i += 1) await sleep(10);
  return heard.filter((k) => k !== "ping:fence");
}

test("the SQL file's liveness write interval is the core's", async () => {
  const { rows } = await pool.query("select byollm_liveness_write_ms() as c");
  assert.equal(Number(rows[0].c), PROTOCOL.livenessWriteMs);
  assert.equal(PROTOCOL.livenessWriteMs, 45_000);
  assert.ok(PROTOCOL.livenessSlackMs > PROTOCOL.livenessWriteMs);
});

test("an idle heartbeat writes its runner only when liveness is due or its capabilities or version changed; seenAt says what is stored", async () => {
  await pool.query(TRUNCATE);
  const runner = await pairRunner(store, "owner-hb");
  let out = await heartbeat(runner, T);
  assert.deepEqual(out, { runner: { revokedAt: null }, lost: [], cancel: [], seenAt: T });
  const written = await xmin(runner);

  for (const dt of [10_000, 20_000, 45_000]) {
    out = await heartbeat(runner, T + dt);
    assert.equal(out.seenAt, T, `${dt} ms later: not due`);
    assert.equal(await xmin(runner), written, `${dt} ms later: no row version written`);
  }
  out = await heartbeat(runner, T + 45_001);
  assert.equal(out.seenAt, T + 45_001, "older than 45 s: written");
  const second = await xmin(runner);
  assert.notEqual(second, written);

  out = await heartbeat(runner, T + 46_000, { capabilities: [CAP, TEAM_CAP] });
  assert.equal(out.seenAt, T + 46_000, "a changed capability list is written, with liveness");
  const third = await xmin(runner);
  assert.notEqual(third, second);
  assert.deepEqual((await store.getRunner(runner.id)).capabilities, [CAP, TEAM_CAP]);
  out = await heartbeat(runner, T + 47_000, { capabilities: [CAP, TEAM_CAP], daemonVersion: "0.2.0" });
  assert.notEqual(await xmin(runner), third, "a changed daemon version is written");
  assert.equal((await store.getRunner(runner.id)).daemonVersion, "0.2.0");

  // Liveness never moves back, and a revoked runner is only read.
  out = await heartbeat(runner, T, { capabilities: [CAP], daemonVersion: "0.2.0" });
  assert.equal(out.seenAt, T + 47_000);
  await store.revokeRunner(runner.id, T + 48_000);
  assert.deepEqual(await heartbeat(runner, T + 200_000), { runner: { revokedAt: T + 48_000 } });
});

test("row writes per idle tick at the daemon's 10 s spacing: one in five", async () => {
  await pool.query(TRUNCATE);
  const runner = await pairRunner(store, "owner-ticks");
  let last = await xmin(runner);
  let writes = 0;
  for (let i = 0; i < 50; i += 1) {
    await heartbeat(runner, T + i * 10_000);
    assert.equal((await claim(runner, T + i * 10_000)).jobs.length, 0);
    const now = await xmin(runner);
    if (now !== last) writes += 1;
    last = now;
  }
  assert.equal(writes, 10);
});

test("an empty claim answers wakeAt: a later claimableAt, a lease that lapses, team jobs; null when nothing can come without a change", async () => {
  await pool.query(TRUNCATE);
  const a = await pairRunner(store, "owner-w");
  const b = await pairRunner(store, "owner-w");
  const teamRunner = await pairRunner(store, "owner-team", [TEAM_CAP]);
  const other = await pairRunner(store, "owner-else");

  assert.deepEqual(await claim(a, T), { runner: { revokedAt: null }, jobs: [], wakeAt: null });
  // Another owner's private job is nobody else's.
  await store.create(job("owner-z"), T);
  assert.equal((await claim(a, T)).wakeAt, null);
  assert.equal((await claim(teamRunner, T)).wakeAt, null);

  // Claimable later than the claim's now (another process's clock ran ahead).
  await store.create(job("owner-w"), T + 5_000);
  assert.deepEqual((await claim(a, T)).wakeAt, T + 5_000);
  assert.equal((await claim(other, T)).wakeAt, null, "not for another owner's runner");
  const [taken] = (await claim(a, T + 5_000)).jobs;
  assert.ok(taken);
  // Held by a: b can take it once the lease lapses, with no row changing.
  assert.equal((await claim(b, T + 6_000)).wakeAt, T + 65_000);
  assert.equal((await claim(b, T + 65_000)).jobs[0]?.id, taken.id, "offered at wakeAt");

  // A kind the runner has no capability for does not wake it.
  await store.create(job("owner-w", { kind: "other.kind" }), T + 70_000);
  assert.equal((await claim(a, T + 66_000)).wakeAt, T + 125_000, "only the lapse of b's lease");

  // Team jobs wake team-offering runners of other owners.
  await store.create(job("owner-z", { audience: "team" }), T + 200_000);
  assert.equal((await claim(teamRunner, T + 100_000)).wakeAt, T + 200_000);
  assert.equal((await claim(other, T + 100_000)).wakeAt, null, "a runner offering no team scope");
  const [team] = (await claim(teamRunner, T + 200_000)).jobs;
  assert.equal(team.audience, "team");
  assert.equal((await claim(teamRunner, T + 200_001)).wakeAt, T + 260_000, "its lease's lapse");

  // A claimable job nobody took because its row was locked: ask again at once.
  await pool.query(TRUNCATE);
  const c = await pairRunner(store, "owner-lock");
  const locked = await store.create(job("owner-lock"), T);
  const holder = await pool.connect();
  try {
    await holder.query("begin");
    await holder.query("select 1 from byollm_jobs where id = $1 for update", [locked.id]);
    assert.deepEqual((await claim(c, T + 1)).jobs, []);
    assert.equal((await claim(c, T + 1)).wakeAt, T + 2);
  } finally {
    await holder.query("rollback");
    holder.release();
  }
  assert.equal((await claim(c, T + 3)).jobs[0]?.id, locked.id);
});

test("byollm_touch_runners writes each live runner's liveness when older, and answers every entry in order", async () => {
  await pool.query(TRUNCATE);
  const a = await pairRunner(store, "owner-t");
  const b = await pairRunner(store, "owner-t");
  const revoked = await pairRunner(store, "owner-t");
  await store.revokeRunner(revoked.id, T);
  await heartbeat(b, T + 10_000);
  const bVersion = await xmin(b);
  const unknown = `runner_${randomUUID()}`;
  const answer = await sqlStorePaths(store).touchRunners(
    [
      { runnerId: a.id, now: T + 5_000 },
      { runnerId: b.id, now: T + 9_000 },
      { runnerId: revoked.id, now: T + 5_000 },
      { runnerId: unknown, now: T + 5_000 },
      { runnerId: a.id, now: T + 7_000 },
    ],
    T + 9_000,
  );
  assert.deepEqual(answer, [
    { runnerId: a.id, seenAt: T + 7_000, revoked: false },
    { runnerId: b.id, seenAt: T + 10_000, revoked: false },
    { runnerId: revoked.id, seenAt: null, revoked: true },
    { runnerId: unknown, seenAt: null, revoked: true },
    { runnerId: a.id, seenAt: T + 7_000, revoked: false },
  ]);
  assert.equal(await xmin(b), bVersion, "a newer stored value is left alone");
  assert.equal((await store.getRunner(a.id)).lastHeartbeatAt, T + 7_000);
  assert.deepEqual(await sqlStorePaths(store).touchRunners([], T), []);
  const many = Array.from({ length: 1001 }, () => ({ runnerId: a.id, now: T }));
  await assert.rejects(sqlStorePaths(store).touchRunners(many, T), /at most 1000/);
});

test("byollm_work: each change that can make an idle answer stale sends its key, and nothing else does", async () => {
  await pool.query(TRUNCATE);
  const owner = "owner-n";
  const runner = await pairRunner(store, owner);
  const teamRunner = await pairRunner(store, "owner-n2", [TEAM_CAP]);
  const bare = runner.id.slice("runner_".length);
  const r = [`r:${runner.id}`, `r:${bare}`];

  assert.deepEqual(await keysOf(() => store.create(job(owner), T)), [`o:${owner}`], "enqueued");
  assert.deepEqual((await keysOf(() => store.create(job("owner-z", { audience: "team" }), T))).sort(), ["o:owner-z", "t"], "a team job");
  let held;
  assert.deepEqual(await keysOf(async () => ([held] = (await claim(runner, T)).jobs)), [], "a claim");
  assert.deepEqual(await keysOf(() => claim(teamRunner, T)), [], "a team claim");
  assert.deepEqual(
    await keysOf(() => heartbeat(runner, T + 1_000, { leases: [{ jobId: held.id, leaseId: held.lease.id }] })),
    [],
    "a lease renewal (and the liveness write with it)",
  );
  assert.deepEqual(await keysOf(() => heartbeat(runner, T + 60_000)), [], "a liveness write");
  assert.deepEqual(await keysOf(() => sqlStorePaths(store).touchRunners([{ runnerId: runner.id, now: T + 120_000 }], T)), [], "a batched liveness write");
  assert.deepEqual((await keysOf(() => store.cancel(held.id, T + 2_000))).sort(), [`o:${owner}`, ...r].sort(), "a cancel asked for");
  assert.deepEqual(
    await keysOf(() => store.release({ runnerId: runner.id, leases: [{ jobId: held.id, leaseId: held.lease.id }], reason: "shutdown", now: T + 3_000 })),
    [`o:${owner}`],
    "released",
  );

  // A lapsed lease requeued by the sweep; a completion; an unblocked dependent.
  const [again] = (await claim(runner, T + 4_000)).jobs;
  assert.deepEqual(
    (await keysOf(() => store.expireDue(T + 70_000))).sort(),
    [`o:${owner}`, "o:owner-z", "t"],
    "requeued after their leases lapsed (teamRunner's team job too)",
  );
  const [last] = (await claim(runner, T + 70_000)).jobs;
  assert.equal(last.id, again.id);
  const dependent = await store.create(job(owner, { dependsOn: [last.id] }), T + 70_000);
  assert.equal(dependent.claimableAt, null);
  assert.deepEqual(await keysOf(() => completeClaimed(store, last, runner, owner, { now: T + 71_000 })), [`o:${owner}`], "the dependent, unblocked");
  const [dep] = (await claim(runner, T + 72_000)).jobs;
  assert.equal(dep.id, dependent.id);
  assert.deepEqual(await keysOf(() => completeClaimed(store, dep, runner, owner, { now: T + 73_000 })), [], "a plain completion");
  assert.deepEqual(await keysOf(() => store.create(job(owner, { ttlMs: 0 }), T + 80_000)), [`o:${owner}`]);
  assert.deepEqual(await keysOf(() => store.expireDue(T + 80_001)), [], "expiry");

  assert.deepEqual((await keysOf(() => store.revokeRunner(runner.id, T + 90_000))).sort(), r.sort(), "revoked");
  assert.deepEqual((await keysOf(() => pool.query("delete from byollm_runners where id = byollm_runner_key($1)", [teamRunner.id]))).sort(), [`r:${teamRunner.id}`, `r:${teamRunner.id.slice(7)}`].sort(), "deleted");
  assert.deepEqual(await keysOf(() => store.create(job("x".repeat(7_001)), T)), ["*"], "a key too long for a notification");
  // A bulk insert: one key per owner.
  assert.deepEqual(
    (await keysOf(() => pool.query(`insert into byollm_jobs (id, kind, envelope, owner, claimable_at) select 'bulk-' || g, 'k', '{}', 'bulk-' || (g % 2), now() from generate_series(1, 50) g`))).sort(),
    ["o:bulk-0", "o:bulk-1"],
  );
});

/** A store of its own with the channel on, and what its subscriber heard. */
function channelStore() {
  const own = postgresStore({ connectionString: db.url, poolConfig: { max: 2 } });
  const seen = { keys: [], health: [] };
  const unsubscribe = sqlStorePaths(own).idle.subscribe(
    (key) => seen.keys.push(key),
    (healthy) => seen.health.push(healthy),
  );
  return { own, seen, unsubscribe };
}
/** The backends listening on byollm_work, but this file's own listener. */
const listening = async () =>
  (await pool.query("select pid from pg_stat_activity where datname = current_database() and query = 'listen byollm_work' and pid <> $1", [listener.processID])).rows.map((r) => r.pid);
async function until(what, f, ms = 10_000) {
  const end = Date.now() + ms;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

test("the channel: healthy once its ping is heard, keys delivered, a lost connection noticed at once, logged once, and back", async () => {
  await pool.query(TRUNCATE);
  assert.equal(sqlStorePaths(store).idle, undefined, "notifications: false has no channel");
  const warnings = [];
  const warn = console.warn;
  console.warn = (...args) => warnings.push(args.join(" "));
  const { own, seen, unsubscribe } = channelStore();
  try {
    await until("healthy", () => seen.health.at(-1) === true);
    assert.deepEqual(seen.health, [true]);
    await store.create(job("owner-c"), T);
    await until("the key", () => seen.keys.includes("o:owner-c"));
    assert.ok(!seen.keys.some((k) => k.startsWith("ping:")), "pings are not keys");

    const pids = await listening();
    assert.equal(pids.length, 1, "one listening connection");
    await pool.query("select pg_terminate_backend($1)", [pids[0]]);
    await until("unhealthy", () => seen.health.at(-1) === false, 2_000);
    await until("healthy again", () => seen.health.at(-1) === true);
    assert.deepEqual(seen.health, [true, false, true]);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /idle daemon requests now go to the database/);
    await store.create(job("owner-c2"), T);
    await until("a key after the reconnect", () => seen.keys.includes("o:owner-c2"));

    unsubscribe();
    await until("closed", async () => (await listening()).length === 0);
  } finally {
    console.warn = warn;
    await own.close();
  }
});

test("a process that never closes its store still exits", async () => {
  const script = `
    import { postgresStore } from ${JSON.stringify(new URL("../dist/postgres.js", import.meta.url).href)};
    import { sqlStorePaths } from ${JSON.stringify(new URL("../dist/sql-store.js", import.meta.url).href)};
    const store = postgresStore({ connectionString: process.argv[1], poolConfig: { allowExitOnIdle: true } });
    // The channel keeps nothing alive, so the wait for it must.
    const wait = setInterval(() => {}, 1000);
    await new Promise((resolve) => sqlStorePaths(store).idle.subscribe(() => {}, (h) => h && resolve()));
    clearInterval(wait);
    await store.listRunners();
    console.log("healthy");
  `;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script, db.url], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const started = Date.now();
  const code = await new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.kill();
      resolve("still running");
    }, 8_000);
    child.on("exit", (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
  assert.equal(code, 0);
  assert.equal(out.trim(), "healthy");
  assert.ok(Date.now() - started < 8_000);
});

test("liveness counts of a SQL store use livenessMs + the slack; MemoryStore keeps the exact window", async () => {
  await pool.query(TRUNCATE);
  const siteKeys = generateSiteKeys();
  let now = T;
  const query = { kind: KIND, owner: "owner-l" };
  const runner = await pairRunner(store, "owner-l");
  await pool.query("update byollm_runners set last_heartbeat_at = byollm_at($1) where id = byollm_runner_key($2)", [T - 60_000, runner.id]);
  const app = new ByollmApp({ store, siteKeys, now: () => now, livenessMs: 35_000 });
  const window = 35_000 + PROTOCOL.livenessSlackMs;
  assert.ok(window > 60_000);
  assert.equal((await app.runnerAvailability(query)).available, true, "seen 60 s ago: within 35 s + the slack");
  assert.equal((await app.metrics()).runners.online, 1);
  now = T - 60_000 + window;
  assert.equal((await app.runnerAvailability(query)).available, true, "at the window's end");
  now += 1_000;
  assert.deepEqual(await app.runnerAvailability(query), { available: false, reason: "no-runner-online", candidates: 0 }, "past it");
  assert.equal((await app.metrics()).runners.online, 0);

  const memory = new MemoryStore();
  const mine = await pairRunner(memory, "owner-l");
  await memory.touchRunner({ runnerId: mine.id, capabilities: [CAP], daemonVersion: "0.1.1", now: T - 36_000 });
  const memApp = new ByollmApp({ store: memory, siteKeys, now: () => T, livenessMs: 35_000 });
  assert.equal((await memApp.runnerAvailability(query)).available, false, "36 s ago, exact window");
  assert.equal((await memApp.metrics()).runners.online, 0);
});
