// One database round trip per daemon request on postgresStore, and the
// runner re-read inside that call: a runner revoked or removed by another
// process is refused on its next request though this process read it before.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { postgresStore } from "../dist/postgres.js";
import { ByollmApp, createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { freshDatabase, testPool } from "./postgres-db.mjs";
import { CAP, Device, ORIGIN } from "./helpers/device.mjs";

const CAP_TEAM = { ...CAP, offerScope: "team" };

let db;
let pool;
let other;
before(async () => {
  db = await freshDatabase("paths");
  pool = testPool(db.url, 2);
  other = testPool(db.url, 1);
});
after(async () => {
  await pool?.end();
  await other?.end();
  await db?.drop();
});

/** The pool's queries, counted (every store call is one query). */
function counting(p) {
  const counter = { n: 0 };
  const query = p.query.bind(p);
  const wrapped = Object.create(p);
  wrapped.query = (...args) => {
    counter.n++;
    return query(...args);
  };
  return { pool: wrapped, counter };
}

async function site() {
  const { pool: counted, counter } = counting(pool);
  // The round trips of requests that reach the database: no notification
  // channel (its pings would be counted, its memo would answer idle ones).
  const store = postgresStore({ pool: counted, notifications: false });
  const siteKeys = generateSiteKeys();
  const app = new ByollmApp({ store, siteKeys });
  const handler = createFetchHandler({ store, siteKeys, verificationUrl: `${ORIGIN}/pair` });
  return { store, app, handler, counter };
}

test("one round trip per claim, fetch, heartbeat and result, one per enqueue and app.result", async () => {
  const { app, handler, counter } = await site();
  const owner = randomUUID();
  const device = new Device(handler);
  await device.pair(app, owner);
  // The first signed request reads the runner once; later ones reuse that read.
  assert.equal((await device.heartbeat()).status, 200);

  const trips = {};
  const measure = async (name, work) => {
    const before = counter.n;
    const out = await work();
    trips[name] = counter.n - before;
    return out;
  };
  const handle = await measure("enqueue", () => app.enqueue({ kind: "llm.generate", payload: { prompt: "hi" }, owner }));
  const claim = await measure("claim", () => device.claim());
  assert.equal(claim.status, 200);
  const [stub] = claim.body.jobs;
  assert.equal(stub.id, handle.id);
  assert.equal((await measure("fetch", () => device.fetchJob(stub))).status, 200);
  const beat = await measure("heartbeat", () => device.heartbeat([{ jobId: stub.id, leaseId: stub.lease.id }]));
  assert.deepEqual([beat.status, beat.body.lost, beat.body.cancel], [200, [], []]);
  const result = await measure("result", () => device.result(stub, "done"));
  assert.deepEqual(result.body, { accepted: true, state: "ok" });
  const delivered = await measure("app.result", () => app.result(handle.id));
  assert.equal(delivered.outcome.text, "done");
  assert.deepEqual(trips, { enqueue: 1, claim: 1, fetch: 1, heartbeat: 1, result: 1, "app.result": 1 });
  assert.deepEqual([delivered.provenance.audience, delivered.provenance.untrusted], ["private", false]);

  // A job of another audience: the one-call completion declines (the
  // provenance it was given is for a private job) and the result completes
  // with the job's own audience in a second call.
  const team = await app.enqueue({ kind: "llm.generate", payload: { prompt: "hi" }, owner, audience: "team", audienceAllow: [owner] });
  const [teamStub] = (await device.claim()).body.jobs;
  assert.equal(teamStub.id, team.id);
  const teamResult = await measure("result", () => device.result(teamStub, "done"));
  assert.deepEqual(teamResult.body, { accepted: true, state: "ok" });
  assert.equal(trips.result, 2);
  const teamJob = await app.result(team.id);
  assert.deepEqual([teamJob.provenance.audience, teamJob.provenance.untrusted], ["team", true]);
});

test("a runner revoked by another process is refused on its next request; no job is claimed for it", async () => {
  const { app, handler } = await site();
  const owner = randomUUID();
  const device = new Device(handler);
  await device.pair(app, owner);
  const first = await app.enqueue({ kind: "llm.generate", payload: { prompt: "a" }, owner });
  const claim = await device.claim();
  assert.equal(claim.body.jobs[0].id, first.id);
  const stub = claim.body.jobs[0];
  const queued = await app.enqueue({ kind: "llm.generate", payload: { prompt: "b" }, owner });

  // Another app process, its own pool and store.
  const elsewhere = postgresStore({ pool: other });
  await new ByollmApp({ store: elsewhere, siteKeys: generateSiteKeys() }).revokeRunner(device.runnerId);

  const revoked = { error: "revoked", message: "this runner has been revoked by its owner" };
  for (const answer of [await device.claim(), await device.fetchJob(stub), await device.heartbeat(), await device.result(stub, "x")]) {
    assert.deepEqual([answer.status, answer.body], [403, revoked]);
  }
  assert.equal((await app.job(queued.id)).state, "queued");
  assert.equal((await app.job(first.id)).state, "claimed");

  // Removed altogether (an owner's account deleted): unknown, as before.
  await other.query("update byollm_jobs set lease_runner = null, lease_id = null, lease_expires_at = null, state = 'queued'");
  await other.query("delete from byollm_runners where id = byollm_runner_key($1)", [device.runnerId]);
  const unknown = { error: "unauthorized", message: "this runner is not recognised" };
  for (const answer of [await device.claim(), await device.fetchJob(stub), await device.heartbeat(), await device.result(stub, "x")]) {
    assert.deepEqual([answer.status, answer.body], [401, unknown]);
  }
  assert.equal((await app.job(queued.id)).state, "queued");

  // A live runner this process has read, removed by another process: the
  // request's own call finds it gone.
  const live = new Device(handler);
  await live.pair(app, owner);
  assert.equal((await live.heartbeat()).status, 200);
  await other.query("delete from byollm_runners where id = byollm_runner_key($1)", [live.runnerId]);
  for (const answer of [await live.claim(), await live.heartbeat()]) {
    assert.deepEqual([answer.status, answer.body], [401, unknown]);
  }
  assert.equal((await app.job(queued.id)).state, "queued");
});

test("pair start draws another user code while the one drawn names a live pairing", async () => {
  const store = postgresStore({ pool });
  const taken = [];
  // The store answers that the first three codes drawn are held by live pairings.
  const colliding = Object.create(store);
  colliding.getPairingByUserCode = async (code) => {
    if (taken.length < 3) {
      taken.push(code);
      return { userCode: code, state: "pending", expiresAt: Date.now() + 60_000 };
    }
    return store.getPairingByUserCode(code);
  };
  const handler = createFetchHandler({ store: colliding, siteKeys: generateSiteKeys(), verificationUrl: `${ORIGIN}/pair` });
  const device = new Device(handler);
  const start = await device.post(
    "pair",
    { protocolVersion: "2", action: "start", daemon: { version: "0.1.1", label: "t", platform: "linux" }, device: device.publicIdentity(), capabilities: [] },
    false,
  );
  assert.equal(start.status, 200);
  assert.equal(taken.length, 3);
  assert.ok(!taken.includes(start.body.userCode));
  assert.equal((await store.getPairingByUserCode(start.body.userCode)).state, "pending");
});

test("owners and audienceAllow entries are any non-empty string on a plain PostgreSQL (Clerk, Auth0, numeric ids)", async () => {
  const { app, handler, store } = await site();
  for (const owner of ["user_2abcXYZ", "auth0|64f0c1", "42"]) {
    const device = new Device(handler);
    await device.pair(app, owner);
    const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "hi" }, owner });
    const claim = await device.claim();
    assert.equal(claim.body.jobs[0].id, handle.id);
    assert.equal(claim.body.jobs[0].owner, owner);
    assert.equal((await device.fetchJob(claim.body.jobs[0])).status, 200);
    assert.deepEqual((await device.result(claim.body.jobs[0], "ok")).body, { accepted: true, state: "ok" });
    const done = await app.result(handle.id);
    assert.deepEqual([done.state, done.provenance.runnerOwner], ["ok", owner]);
    assert.deepEqual((await app.runners(owner)).map((r) => r.owner), [owner]);
  }
  // A team job allowed to one named owner reaches that owner's team runner only.
  const team = { ...CAP_TEAM };
  const allowed = new Device(handler, [team]);
  await allowed.pair(app, "user_allowed");
  const other = new Device(handler, [team]);
  await other.pair(app, "user_other");
  const job = await app.enqueue({ kind: "llm.generate", payload: { prompt: "t" }, owner: "user_2abcXYZ", audience: "team", audienceAllow: ["user_allowed"] });
  assert.deepEqual((await other.claim()).body.jobs, []);
  assert.equal((await allowed.claim()).body.jobs[0].id, job.id);
  assert.deepEqual((await store.get(job.id)).audienceAllow, ["user_allowed"]);
});

const RUNNER_ID = /^runner_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

test("job ids are any non-empty string on a plain PostgreSQL: a dependsOn chain of such ids completes through claim, fetch and result", async () => {
  const { app, handler, store } = await site();
  const owner = "user_2abcChain";
  const device = new Device(handler);
  await device.pair(app, owner);
  const ids = ["job-42", "user_2abc/req 7", "123"];
  const first = await app.enqueue({ id: ids[0], kind: "llm.generate", payload: { prompt: "a" }, owner });
  const second = await app.enqueue({ id: ids[1], kind: "llm.generate", payload: { prompt: "b" }, owner, dependsOn: [ids[0]] });
  const third = await app.enqueue({ id: ids[2], kind: "llm.generate", payload: { prompt: "c" }, owner, dependsOn: [ids[1]] });
  assert.deepEqual([first.id, second.id, third.id], ids);
  assert.deepEqual([second.record.claimableAt, second.record.dependsOn], [null, [ids[0]]]);
  assert.equal(third.record.claimableAt, null);
  // The same id again: the stored job is returned unchanged, as in memory.
  const again = await app.enqueue({ id: ids[0], kind: "llm.generate", payload: { prompt: "other" }, owner: "user_other", audience: "team" });
  assert.deepEqual([again.record.owner, again.record.audience, again.record.envelope], [owner, "private", first.record.envelope]);
  const { rows } = await pool.query("select count(*)::int as n from byollm_jobs where id = $1", [ids[0]]);
  assert.equal(rows[0].n, 1);

  for (const id of ids) {
    const claim = await device.claim();
    assert.equal(claim.status, 200);
    assert.deepEqual(claim.body.jobs.map((j) => j.id), [id], "each job is claimable once the one before it is ok");
    const [stub] = claim.body.jobs;
    assert.equal((await device.fetchJob(stub)).status, 200);
    const beat = await device.heartbeat([{ jobId: id, leaseId: stub.lease.id }]);
    assert.deepEqual([beat.status, beat.body.lost], [200, []]);
    assert.deepEqual((await device.result(stub, `done ${id}`)).body, { accepted: true, state: "ok" });
    const done = await app.result(id);
    assert.deepEqual([done.state, done.outcome.text], ["ok", `done ${id}`]);
    assert.equal((await app.job(id)).id, id);
  }
  assert.deepEqual((await device.claim()).body.jobs, []);
  // Cancel, job and listing by such an id.
  const queued = await app.enqueue({ id: "order #7", kind: "llm.generate", payload: { prompt: "d" }, owner });
  await app.cancel(queued.id);
  assert.equal((await app.job("order #7")).state, "canceled");
  assert.equal(await store.get("order #8"), null);
});

test("runner ids are runner_<uuid>; a runner whose daemon holds a bare uuid id (as 0.1.1 paired them) keeps working with it", async () => {
  const { app, handler, store } = await site();
  const owner = randomUUID();
  const device = new Device(handler);
  await device.pair(app, owner);
  assert.match(device.runnerId, RUNNER_ID);
  assert.deepEqual((await app.runners(owner)).map((r) => r.id), [device.runnerId]);
  assert.equal((await store.getRunner(device.runnerId)).id, device.runnerId);

  // A daemon paired by 0.1.1 holds the bare uuid the row is
  // stored under, and signs with it.
  const old = new Device(handler);
  await old.pair(app, owner);
  const uuid = old.runnerId.slice("runner_".length);
  old.runnerId = uuid;
  assert.equal((await store.getRunner(uuid)).id, uuid, "a lookup answers in the caller's spelling");
  assert.equal((await old.heartbeat()).status, 200);
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "old" }, owner });
  const claim = await old.claim();
  assert.equal(claim.status, 200);
  const [stub] = claim.body.jobs;
  assert.equal(stub.id, handle.id);
  assert.equal((await old.fetchJob(stub)).status, 200);
  const beat = await old.heartbeat([{ jobId: stub.id, leaseId: stub.lease.id }]);
  assert.deepEqual([beat.status, beat.body.lost], [200, []]);
  // The app sees the one form.
  assert.equal((await app.job(handle.id)).lease.runnerId, `runner_${uuid}`);
  assert.deepEqual((await old.result(stub, "still here")).body, { accepted: true, state: "ok" });
  assert.equal((await app.result(handle.id)).outcome.text, "still here");
  // Revoked under either spelling, refused under both.
  await app.revokeRunner(`runner_${uuid}`);
  const revoked = { error: "revoked", message: "this runner has been revoked by its owner" };
  assert.deepEqual([(await old.claim()).status, (await old.claim()).body], [403, revoked]);
});
