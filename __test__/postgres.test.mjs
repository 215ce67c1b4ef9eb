// postgresStore on a real PostgreSQL (scripts/pg-start.sh): the SQL rules
// against the in-memory semantics (store.md), the audience predicate against
// the reference's own table and our Rust matcher, concurrent claims from 8
// processes, and an upgrade from the 0.1.1 schema. Every `now` is a fake clock
// value: the SQL functions never read the database clock.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { postgresStore } from "../dist/postgres.js";
import { freshDatabase, adminUrl, testPool } from "./postgres-db.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const T0 = 1_767_225_600_000;
const KIND = "llm.generate";
const ENVELOPE = { ciphertext: "c2VhbGVk", recipientKeyId: "site", senderKeyId: "site", direction: "payload", deadlineAt: T0 + 86_400_000 };
const DEVICE = { identity: "id-pub", encryption: "enc-pub", encryptionSig: "sig" };
const cap = (backendId = "ollama", offerScope = "private", kind = KIND) => ({
  kind,
  service: "default",
  backendId,
  backendClass: backendId.endsWith("-cli") ? "process" : "http",
  model: "m",
  offerScope,
});
const OK = { outcome: "ok", text: "done" };
const prov = (runnerId, runnerOwner) => ({
  audience: "private",
  runnerId,
  runnerOwner,
  backendClass: "http",
  model: "m",
  untrusted: false,
});

let db;
let pool;
let store;
before(async () => {
  db = await freshDatabase("store");
  pool = testPool(db.url, 4);
  store = postgresStore({ pool, defaultTtlMs: 60_000 });
});
after(async () => {
  await store?.close();
  await pool?.end();
  await db?.drop();
});

const reset = () => pool.query("truncate byollm_job_cancels, byollm_jobs, byollm_pairings, byollm_runners cascade");

async function job(owner, extra = {}, now = T0) {
  return store.create({ id: randomUUID(), kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner, ...extra }, now);
}

let codeCounter = 0;
async function runner(owner, capabilities = [cap()], now = T0) {
  const userCode = `CODE-${String(++codeCounter).padStart(4, "0")}`;
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
    capabilities,
    device: DEVICE,
    expiresAt: now + 600_000,
    createdAt: now,
  });
  return store.approvePairing({ userCode, owner, runnerId: `runner_${randomUUID()}`, now });
}

const claim = (r, now, extra = {}) =>
  store.claim({ runnerId: r.id, runnerOwner: r.owner, capabilities: r.capabilities, max: 10, leaseMs: 10_000, now, ...extra });

// ------------------------------------------------------------ audience --

test("the SQL audience predicate equals the reference's server table (608 rows)", async () => {
  const table = JSON.parse(readFileSync(`${root}/tests/vectors/audience.json`, "utf8")).server;
  assert.equal(table.length, 608);
  const runnerOwner = "daemon-owner";
  const rows = table.map((row) => {
    const jobOwner = row.owner === "same" ? runnerOwner : "job-owner";
    const allow = {
      absent: null,
      empty: [],
      "includes-daemon-owner": ["someone", runnerOwner],
      "excludes-daemon-owner": ["someone"],
    }[row.audienceAllow];
    assert.notEqual(allow, undefined, row.audienceAllow);
    return { jobOwner, allow, audience: row.audience, scope: row.offerScope, backend: row.backendId, expected: row.result.ok ? null : row.result.refusal };
  });
  const { rows: got } = await pool.query(
    `select byollm_server_refusal(r->>'jobOwner', r->>'audience',
              case when jsonb_typeof(r->'allow') = 'array'
                   then array(select jsonb_array_elements_text(r->'allow')) end,
              $2, r->>'scope', r->>'backend') as refusal
       from jsonb_array_elements($1::jsonb) with ordinality as t(r, n) order by n`,
    [JSON.stringify(rows), runnerOwner],
  );
  assert.deepEqual(
    got.map((g) => g.refusal),
    rows.map((r) => r.expected),
  );
});

test("claim predicate: the first capability for the kind decides; subscription backends never serve others", async () => {
  const q = (caps, audience = "team", jobOwner = "a", runnerOwner = "b") =>
    pool
      .query("select byollm_claim_refusal($1::jsonb, $2, $3, $4, null, $5) as r", [JSON.stringify(caps), KIND, jobOwner, audience, runnerOwner])
      .then((x) => x.rows[0].r);
  assert.equal(await q([cap("ollama", "team")]), null);
  assert.equal(await q([cap("ollama", "private"), cap("ollama", "team")]), "offer-scope-too-narrow");
  assert.equal(await q([cap("ollama", "team", "llm.chat"), cap("ollama", "private")]), "offer-scope-too-narrow");
  assert.equal(await q([cap("codex-cli", "team")]), "subscription-self-lock");
  assert.equal(await q([cap("claude-cli", "team")]), "subscription-self-lock");
  assert.equal(await q([cap("openai-http", "team")]), null); // null cost is metered, spend taken as acknowledged
  assert.equal(await q([cap("ollama", "team", "llm.chat")]), "no-capability");
  assert.equal(await q([]), "no-capability");
  assert.equal(await q([cap("claude-cli", "private")], "private", "a", "a"), null);
});

// ---------------------------------------------------------- jobs: basics --

test("create: defaults, idempotent by id, never stores the plaintext payload", async () => {
  await reset();
  const owner = randomUUID();
  const id = randomUUID();
  const input = { id, kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner, payload: { prompt: "TOP-SECRET-PROMPT" } };
  const created = await store.create(input, T0);
  assert.deepEqual(Object.keys(created), [
    "id", "kind", "envelope", "sizeClass", "audience", "purpose", "owner", "audienceAllow", "dependsOn", "state", "lease",
    "completedByLeaseId", "createdAt", "claimableAt", "ttlMs", "deadlineAt", "refusedBy", "attempts", "outcome", "provenance", "updatedAt",
  ]);
  assert.deepEqual(created, {
    id, kind: KIND, envelope: ENVELOPE, sizeClass: "small", audience: "private", purpose: undefined, owner,
    audienceAllow: undefined, dependsOn: [], state: "queued", lease: null, completedByLeaseId: null, createdAt: T0,
    claimableAt: T0, ttlMs: 60_000, deadlineAt: null, refusedBy: [], attempts: 0, outcome: null, provenance: null, updatedAt: T0,
  });
  assert.deepEqual(Object.keys(created.envelope), Object.keys(ENVELOPE));
  const again = await store.create({ ...input, ttlMs: 5, audience: "team" }, T0 + 999);
  assert.deepEqual(again, created);
  const { rows } = await pool.query("select row_to_json(j)::text as t from byollm_jobs j");
  assert.equal(rows.length, 1);
  assert.ok(!rows[0].t.includes("TOP-SECRET-PROMPT"));
  // ttlMs 0 is kept (the 0.1.1 schema refused it).
  const zero = await job(owner, { ttlMs: 0, purpose: "summary", audienceAllow: [owner], deadlineAt: T0 + 5 });
  assert.equal(zero.ttlMs, 0);
  assert.equal(zero.purpose, "summary");
  assert.deepEqual(zero.audienceAllow, [owner]);
  assert.equal(zero.deadlineAt, T0 + 5);
});

test("ids off the wire that name nothing answer missing (no throw); a job id is any non-empty string", async () => {
  await reset();
  assert.equal(await store.get("job-1"), null);
  assert.equal(await store.getRunner("runner_123"), null);
  assert.equal(await store.cancel("nope", T0), null);
  assert.deepEqual(await store.complete({ jobId: "x", runnerId: "y", holder: { by: "lease", leaseId: "z" }, outcome: OK, provenance: prov("y", "o"), now: T0 }), {
    accepted: false,
    job: null,
  });
  assert.deepEqual(await store.renewLeases({ runnerId: "r", leases: [{ jobId: "j", leaseId: "l" }], leaseMs: 1, now: T0 }), {
    renewed: [],
    lost: [{ jobId: "j", leaseId: "l" }],
  });
  assert.deepEqual(await store.release({ runnerId: "r", leases: [{ jobId: "j", leaseId: "l" }], reason: "refused", now: T0 }), []);
  assert.deepEqual(await store.listCancelRequests("r"), []);
  assert.deepEqual(await store.listRunners("not-a-uuid"), []);
  // On a plain PostgreSQL a job id is what the app gives, as in memory.
  const named = await store.create({ id: "job-1", kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner: randomUUID() }, T0);
  assert.equal(named.id, "job-1");
  assert.equal((await store.get("job-1")).id, "job-1");
  assert.equal(await store.get("JOB-1"), null);
  await assert.rejects(store.create({ id: "", kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner: randomUUID() }, T0), /job ids are non-empty strings/);
});

// ---------------------------------------------------------------- claim --

test("claim: oldest claimable first, ties in creation order, max, only claimable jobs, fresh lease", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  const late = await job(owner, {}, T0 + 10);
  const a = await job(owner, {}, T0);
  const b = await job(owner, {}, T0);
  const future = await job(owner, {}, T0 + 50_000);
  const chat = await store.create({ id: randomUUID(), kind: "llm.chat", envelope: ENVELOPE, sizeClass: "small", owner }, T0);
  const first = await claim(r, T0 + 20, { max: 2 });
  assert.deepEqual(first.map((j) => j.id), [a.id, b.id]);
  for (const j of first) {
    assert.equal(j.state, "claimed");
    assert.equal(j.attempts, 1);
    assert.equal(j.lease.runnerId, r.id);
    assert.equal(j.lease.expiresAt, T0 + 20 + 10_000);
    assert.match(j.lease.id, /^[0-9a-f-]{36}$/);
    assert.equal(j.updatedAt, T0 + 20);
    assert.equal(j.claimableAt, T0);
  }
  assert.notEqual(first[0].lease.id, first[1].lease.id);
  const second = await claim(r, T0 + 20);
  assert.deepEqual(second.map((j) => j.id), [late.id]);
  assert.deepEqual(await claim(r, T0 + 20), []);
  assert.equal((await store.get(future.id)).state, "queued");
  assert.equal((await store.get(chat.id)).state, "queued");
});

test("claim: audience both sides, capabilities sent with the claim, refusal memory", async () => {
  await reset();
  const alice = randomUUID();
  const bob = randomUUID();
  const bobTeam = await runner(bob, [cap("ollama", "team")]);
  const priv = await job(alice);
  const team = await job(alice, { audience: "team" });
  const teamNotBob = await job(alice, { audience: "team", audienceAllow: [randomUUID()] });
  const got = await claim(bobTeam, T0 + 1);
  assert.deepEqual(got.map((j) => j.id), [team.id]);
  assert.equal((await store.get(priv.id)).state, "queued");
  assert.equal((await store.get(teamNotBob.id)).state, "queued");
  // Released with `refused`: never offered to that runner again.
  const released = await store.release({ runnerId: bobTeam.id, leases: [{ jobId: team.id, leaseId: got[0].lease.id }], reason: "refused", now: T0 + 2 });
  assert.deepEqual(released, [team.id]);
  const after = await store.get(team.id);
  assert.equal(after.state, "queued");
  assert.deepEqual(after.refusedBy, [bobTeam.id]);
  assert.equal(after.claimableAt, T0 + 2);
  assert.deepEqual(await claim(bobTeam, T0 + 3), []);
  // Same runner with a subscription backend in this claim: refused for others.
  assert.deepEqual(await claim(bobTeam, T0 + 3, { capabilities: [cap("claude-cli", "team")] }), []);
  // Another of bob's runners can take it.
  const bob2 = await runner(bob, [cap("vllm", "team")]);
  assert.deepEqual((await claim(bob2, T0 + 4)).map((j) => j.id), [team.id]);
  // As in memory, the claim does not look the runner up (the handlers have
  // authenticated it); a runner id that is not a uuid cannot hold a lease.
  const unpaired = randomUUID();
  const extra = await job(bob);
  assert.deepEqual((await store.claim({ runnerId: unpaired, runnerOwner: bob, capabilities: [cap()], max: 1, leaseMs: 1, now: T0 + 5 })).map((j) => [j.id, j.lease.runnerId]), [[extra.id, unpaired]]);
  await assert.rejects(store.claim({ runnerId: "runner-1", runnerOwner: bob, capabilities: [cap()], max: 1, leaseMs: 1, now: T0 }), /runner ids are runner_<uuid>/);
});

// ------------------------------------------------------- leases, sweep --

test("leases: renew, lapse and reclaim with the TTL clock restarted; adopted leases spared until the deadline", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  const j = await job(owner, { ttlMs: 5_000 });
  const [c] = await claim(r, T0 + 100);
  const lease = { jobId: j.id, leaseId: c.lease.id };
  assert.deepEqual(await store.renewLeases({ runnerId: r.id, leases: [lease, lease], leaseMs: 10_000, now: T0 + 5_000 }), {
    renewed: [
      { jobId: j.id, expiresAt: T0 + 15_000 },
      { jobId: j.id, expiresAt: T0 + 15_000 },
    ],
    lost: [],
  });
  assert.equal((await store.get(j.id)).state, "running");
  // Past expiry: the renewal sweeps first, so the lease is lost, not renewed.
  const res = await store.renewLeases({ runnerId: r.id, leases: [lease], leaseMs: 10_000, now: T0 + 15_000 });
  assert.deepEqual(res, { renewed: [], lost: [lease] });
  const requeued = await store.get(j.id);
  assert.equal(requeued.state, "queued");
  assert.equal(requeued.lease, null);
  assert.equal(requeued.claimableAt, T0 + 15_000);
  assert.equal(requeued.attempts, 1);
  // TTL counts from the restart: alive at +19_999, expired at exactly +20_000.
  assert.deepEqual(await store.expireDue(T0 + 19_999), []);
  const swept = await store.expireDue(T0 + 20_000);
  assert.deepEqual(swept.map((x) => [x.id, x.state]), [[j.id, "expired"]]);

  // Adopted lease (relay): not reclaimed by its clock, expires at deadlineFor.
  const k = await job(owner, { ttlMs: 1_000 }, T0);
  const leaseId = randomUUID();
  const adopted = await store.adopt({ jobId: k.id, leaseId, expiresAt: T0 + 10, now: T0 + 1 });
  assert.deepEqual(adopted.lease, { id: leaseId, runnerId: "", expiresAt: T0 + 10 });
  assert.equal(adopted.attempts, 0);
  assert.equal(await store.adopt({ jobId: k.id, leaseId: randomUUID(), expiresAt: T0 + 10, now: T0 + 2 }), null);
  assert.equal((await store.adopt({ jobId: k.id, leaseId, expiresAt: T0 + 20, now: T0 + 2 })).lease.expiresAt, T0 + 20);
  assert.deepEqual(await store.expireDue(T0 + 500), []);
  assert.equal((await store.get(k.id)).state, "claimed");
  const [expired] = await store.expireDue(T0 + 1_000);
  assert.equal(expired.state, "expired");
  assert.equal(expired.lease, null);
});

test("sweep: one pass reports a requeue and the expiry of the same job, in change order", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  const j = await job(owner, { ttlMs: 1, deadlineAt: T0 + 50 });
  const blocked = await job(owner, { dependsOn: [randomUUID()], deadlineAt: T0 + 60 });
  assert.equal(blocked.claimableAt, null);
  await claim(r, T0);
  const changed = await store.expireDue(T0 + 20_000);
  assert.deepEqual(changed.map((x) => [x.id, x.state]), [
    [j.id, "queued"],
    [j.id, "expired"],
    [blocked.id, "expired"],
  ]);
  assert.deepEqual(await store.expireDue(T0 + 20_000), []);
});

// ----------------------------------------------------------- completion --

test("complete: holder check by lease id, first outcome wins, duplicate only for the same device and grant", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  const other = await runner(owner);
  const j = await job(owner);
  const [c] = await claim(r, T0 + 1);
  const base = { jobId: j.id, outcome: OK, now: T0 + 2 };
  assert.equal((await store.complete({ ...base, runnerId: r.id, holder: { by: "lease", leaseId: randomUUID() }, provenance: prov(r.id, owner) })).accepted, false);
  const done = await store.complete({ ...base, runnerId: r.id, holder: { by: "lease", leaseId: c.lease.id }, provenance: prov(r.id, owner) });
  assert.equal(done.accepted, true);
  assert.equal("duplicate" in done, false);
  assert.equal(done.job.state, "ok");
  assert.equal(done.job.lease, null);
  assert.equal(done.job.completedByLeaseId, c.lease.id);
  assert.deepEqual(done.job.outcome, OK);
  assert.deepEqual(Object.keys(done.job.provenance), ["audience", "runnerId", "runnerOwner", "backendClass", "model", "untrusted"]);
  const dup = await store.complete({ ...base, runnerId: r.id, holder: { by: "lease", leaseId: c.lease.id }, outcome: { outcome: "canceled" }, provenance: prov(r.id, owner) });
  assert.deepEqual([dup.accepted, dup.duplicate, dup.job.state], [false, true, "ok"]);
  const stranger = await store.complete({ ...base, runnerId: other.id, holder: { by: "lease", leaseId: c.lease.id }, provenance: prov(other.id, owner) });
  assert.deepEqual([stranger.accepted, "duplicate" in stranger], [false, false]);

  // By runner: the old lease id is recorded; error outcomes map to `error`.
  const k = await job(owner);
  const [ck] = await claim(r, T0 + 3);
  const byRunner = await store.complete({ jobId: k.id, runnerId: r.id, holder: { by: "runner", runnerId: r.id }, outcome: { outcome: "error", code: "x", message: "y", retryable: false }, provenance: prov(r.id, owner), now: T0 + 4 });
  assert.deepEqual([byRunner.accepted, byRunner.job.state, byRunner.job.completedByLeaseId], [true, "error", ck.lease.id]);

  // A late result that beats the sweep still counts.
  const late = await job(owner);
  const [cl] = await claim(r, T0 + 5);
  const lateRes = await store.complete({ jobId: late.id, runnerId: r.id, holder: { by: "lease", leaseId: cl.lease.id }, outcome: OK, provenance: prov(r.id, owner), now: T0 + 999_999 });
  assert.equal(lateRes.accepted, true);
});

test("dependencies: blocked until every dependency is ok; only ok unblocks; claimableAt = completion time", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  const a = await job(owner);
  const b = await job(owner);
  const dep = await job(owner, { dependsOn: [a.id, b.id] }, T0 + 1);
  assert.equal(dep.claimableAt, null);
  const claimed = await claim(r, T0 + 2);
  assert.deepEqual(claimed.map((j) => j.id).sort(), [a.id, b.id].sort());
  const lease = (id) => claimed.find((j) => j.id === id).lease.id;
  await store.complete({ jobId: a.id, runnerId: r.id, holder: { by: "lease", leaseId: lease(a.id) }, outcome: OK, provenance: prov(r.id, owner), now: T0 + 3 });
  assert.equal((await store.get(dep.id)).claimableAt, null);
  await store.complete({ jobId: b.id, runnerId: r.id, holder: { by: "lease", leaseId: lease(b.id) }, outcome: OK, provenance: prov(r.id, owner), now: T0 + 4 });
  const unblocked = await store.get(dep.id);
  assert.equal(unblocked.claimableAt, T0 + 4);
  assert.equal(unblocked.updatedAt, T0 + 4);
  // Created after its dependency is ok: claimable at once.
  assert.equal((await job(owner, { dependsOn: [a.id] }, T0 + 5)).claimableAt, T0 + 5);
  // A dependency that errors leaves the dependent blocked.
  const c = await job(owner);
  const d = await job(owner, { dependsOn: [c.id] });
  const [cc] = (await claim(r, T0 + 6)).filter((j) => j.id === c.id);
  await store.complete({ jobId: c.id, runnerId: r.id, holder: { by: "lease", leaseId: cc.lease.id }, outcome: { outcome: "canceled" }, provenance: prov(r.id, owner), now: T0 + 7 });
  assert.equal((await store.get(d.id)).claimableAt, null);
});

test("dependencies: two dependencies completing at the same moment in two transactions still unblock", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  for (let round = 0; round < 5; round++) {
    const a = await job(owner);
    const b = await job(owner);
    const dep = await job(owner, { dependsOn: [a.id, b.id] });
    const got = await store.claim({ runnerId: r.id, runnerOwner: owner, capabilities: [cap()], max: 2, leaseMs: 10_000, now: T0 + 1 });
    assert.equal(got.length, 2);
    await Promise.all(
      got.map((j) => store.complete({ jobId: j.id, runnerId: r.id, holder: { by: "lease", leaseId: j.lease.id }, outcome: OK, provenance: prov(r.id, owner), now: T0 + 2 })),
    );
    assert.equal((await store.get(dep.id)).claimableAt, T0 + 2, `round ${round}`);
    await reset();
    await pool.query("insert into byollm_runners (id, owner, label, platform, daemon_version, capabilities, device) values (byollm_runner_key($1), $2, 'l', 'linux', 'v', $3, $4)", [
      r.id, owner, JSON.stringify([cap()]), JSON.stringify(DEVICE),
    ]);
  }
});

// --------------------------------------------------- release and cancel --

test("release: only the exact grant; cancel: queued cancels, held files a request that outlives a release", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  const r2 = await runner(owner);
  const j = await job(owner);
  const [c] = await claim(r, T0 + 1);
  assert.deepEqual(await store.release({ runnerId: r2.id, leases: [{ jobId: j.id, leaseId: c.lease.id }], reason: "shutdown", now: T0 + 2 }), []);
  assert.deepEqual(await store.release({ runnerId: r.id, leases: [{ jobId: j.id, leaseId: randomUUID() }], reason: "shutdown", now: T0 + 2 }), []);

  const held = await store.cancel(j.id, T0 + 3);
  assert.equal(held.state, "claimed");
  assert.deepEqual(await store.listCancelRequests(r.id), [{ jobId: j.id, leaseId: c.lease.id }]);
  assert.deepEqual(await store.listCancelRequests(r2.id), []);
  assert.deepEqual(await store.release({ runnerId: r.id, leases: [{ jobId: j.id, leaseId: c.lease.id }], reason: "pause", now: T0 + 4 }), [j.id]);
  const requeued = await store.get(j.id);
  assert.deepEqual([requeued.state, requeued.refusedBy, requeued.claimableAt, requeued.completedByLeaseId], ["queued", [], T0 + 4, null]);
  // The lingering request reaches the next holder; a completion removes it.
  const [c2] = await claim(r2, T0 + 5);
  assert.deepEqual(await store.listCancelRequests(r2.id), [{ jobId: j.id, leaseId: c2.lease.id }]);
  await store.complete({ jobId: j.id, runnerId: r2.id, holder: { by: "lease", leaseId: c2.lease.id }, outcome: { outcome: "canceled" }, provenance: prov(r2.id, owner), now: T0 + 6 });
  assert.deepEqual(await store.listCancelRequests(r2.id), []);
  assert.equal((await store.cancel(j.id, T0 + 7)).state, "canceled");

  const q = await job(owner);
  const canceled = await store.cancel(q.id, T0 + 8);
  assert.deepEqual([canceled.state, canceled.outcome, canceled.updatedAt], ["canceled", null, T0 + 8]);
});

// ------------------------------------------------- pairings and runners --

test("pairings and runners: approval errors, deny, deliver-once, touch, one-way revoke, listing order", async () => {
  await reset();
  const owner = randomUUID();
  const base = {
    state: "pending", owner: null, runnerId: null, collected: false, label: "l", platform: "darwin", daemonVersion: "0.1.1",
    capabilities: [cap()], device: DEVICE, createdAt: T0,
  };
  await store.createPairing({ ...base, deviceCodeHash: "h-exp", userCode: "EXPI-RED1", expiresAt: T0 + 10 });
  await store.createPairing({ ...base, deviceCodeHash: "h-ok", userCode: "GOOD-CODE", expiresAt: T0 + 600_000 });
  assert.equal(await store.getPairingByUserCode("NONE-NONE"), null);
  await assert.rejects(store.approvePairing({ userCode: "NONE-NONE", owner, runnerId: randomUUID(), now: T0 }), { message: "unknown pairing code: NONE-NONE" });
  await assert.rejects(store.approvePairing({ userCode: "EXPI-RED1", owner, runnerId: randomUUID(), now: T0 + 10 }), { message: "pairing code has expired" });
  const wanted = `runner_${randomUUID()}`;
  const r = await store.approvePairing({ userCode: "GOOD-CODE", owner, runnerId: wanted, now: T0 + 1 });
  assert.deepEqual(Object.keys(r), ["id", "owner", "device", "label", "platform", "daemonVersion", "capabilities", "revokedAt", "lastHeartbeatAt", "createdAt"]);
  assert.deepEqual(r, { id: wanted, owner, device: DEVICE, label: "l", platform: "darwin", daemonVersion: "0.1.1", capabilities: [cap()], revokedAt: null, lastHeartbeatAt: T0 + 1, createdAt: T0 + 1 });
  await assert.rejects(store.approvePairing({ userCode: "GOOD-CODE", owner, runnerId: randomUUID(), now: T0 + 2 }), { message: "pairing is already approved" });
  const p = await store.getPairingByDeviceCodeHash("h-ok");
  assert.deepEqual([p.state, p.owner, p.runnerId, p.collected], ["approved", owner, wanted, false]);
  await store.consumePairingToken("h-ok");
  assert.equal((await store.getPairingByDeviceCodeHash("h-ok")).collected, true);
  await store.denyPairing("GOOD-CODE", T0 + 3);
  assert.equal((await store.getPairingByUserCode("GOOD-CODE")).state, "denied");
  assert.notEqual(await store.getRunner(wanted), null);
  await store.denyPairing("NONE-NONE", T0 + 3);

  // A suggestion that is not `runner_<uuid>` gets a fresh one; a bare uuid
  // is taken as the runner's uuid. Either way the id is `runner_<uuid>`.
  await store.createPairing({ ...base, deviceCodeHash: "h-3", userCode: "THRE-E333", expiresAt: T0 + 600_000 });
  const minted = await store.approvePairing({ userCode: "THRE-E333", owner: randomUUID(), runnerId: "runner_abc", now: T0 + 4 });
  assert.match(minted.id, /^runner_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal((await store.getPairingByDeviceCodeHash("h-3")).runnerId, minted.id);
  await store.createPairing({ ...base, deviceCodeHash: "h-4", userCode: "FOUR-4444", expiresAt: T0 + 600_000 });
  const bare = randomUUID();
  const fromBare = await store.approvePairing({ userCode: "FOUR-4444", owner: randomUUID(), runnerId: bare, now: T0 + 4 });
  assert.equal(fromBare.id, `runner_${bare}`);

  const touched = await store.touchRunner({ runnerId: wanted, capabilities: [cap("vllm", "team")], daemonVersion: "0.2.0", now: T0 + 9 });
  assert.deepEqual([touched.daemonVersion, touched.lastHeartbeatAt, touched.capabilities], ["0.2.0", T0 + 9, [cap("vllm", "team")]]);
  assert.equal(await store.touchRunner({ runnerId: randomUUID(), capabilities: [], daemonVersion: "x", now: T0 }), null);
  await store.revokeRunner(wanted, T0 + 10);
  await store.revokeRunner(wanted, T0 + 20);
  assert.equal((await store.getRunner(wanted)).revokedAt, T0 + 10);
  assert.deepEqual((await store.listRunners()).map((x) => x.id), [wanted, minted.id, fromBare.id]);
  assert.deepEqual((await store.listRunners(owner)).map((x) => x.id), [wanted]);
});

test("subscribe: watchers hear this store's writes; unsubscribe is idempotent and removes only that watcher", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  const j = await job(owner);
  const heard = [];
  const off1 = store.subscribe(j.id, () => heard.push("one"));
  const off2 = store.subscribe(j.id, () => heard.push("two"));
  store.subscribe(j.id, () => {
    throw new Error("ignored");
  });
  await claim(r, T0 + 1);
  assert.deepEqual(heard, ["one", "two"]);
  off1();
  off1();
  await store.cancel(j.id, T0 + 2); // a cancel request is not a job write
  await store.expireDue(T0 + 30_000);
  assert.deepEqual(heard, ["one", "two", "two"]);
  off2();
});

// ---------------------------------------------------------- concurrency --

test("concurrency: 8 processes claiming from 5,000 jobs claim every job exactly once", { timeout: 90_000 }, async () => {
  await reset();
  const owner = randomUUID();
  const runners = [];
  for (let i = 0; i < 8; i++) runners.push(randomUUID());
  await pool.query(
    `insert into byollm_runners (id, owner, label, platform, daemon_version, capabilities, device)
     select r, $2, 'w', 'linux', 'v', $3, $4 from unnest($1::uuid[]) r`,
    [runners, owner, JSON.stringify([cap()]), JSON.stringify(DEVICE)],
  );
  await pool.query(
    `insert into byollm_jobs (id, kind, envelope, owner, claimable_at, created_at, updated_at, ttl_ms)
     select gen_random_uuid(), $1, $2, $3, byollm_at($4::bigint + (g % 97)), byollm_at($4::bigint), byollm_at($4::bigint), 3600000
       from generate_series(1, 5000) g`,
    [KIND, JSON.stringify(ENVELOPE), owner, T0],
  );
  const worker = `
    import { postgresStore } from ${JSON.stringify(new URL("../dist/postgres.js", import.meta.url).href)};
    const [url, runnerId, owner, cap, now, startAt] = process.argv.slice(1);
    const store = postgresStore({ connectionString: url, poolConfig: { max: 1 } });
    const ids = [];
    // Start together: a claim takes well under a millisecond, so a worker
    // that came up late would otherwise find the queue already drained.
    while (Date.now() < Number(startAt)) await new Promise((r) => setTimeout(r, 5));
    for (;;) {
      const got = await store.claim({ runnerId, runnerOwner: owner, capabilities: [JSON.parse(cap)], max: 25, leaseMs: 600000, now: Number(now) });
      if (got.length === 0) break;
      for (const j of got) ids.push(j.id + " " + j.lease.runnerId);
    }
    await store.close();
    process.stdout.write(ids.join("\\n"));
  `;
  const started = Date.now();
  const startAt = String(started + 3_000);
  const outputs = await Promise.all(
    runners.map(
      (runnerId) =>
        new Promise((resolve, reject) => {
          const child = spawn(process.execPath, ["--input-type=module", "-e", worker, db.url, runnerId, owner, JSON.stringify(cap()), String(T0 + 1_000), startAt], {
            stdio: ["ignore", "pipe", "inherit"],
          });
          let out = "";
          child.stdout.on("data", (d) => (out += d));
          child.on("error", reject);
          child.on("exit", (code) => (code === 0 ? resolve({ runnerId, out }) : reject(new Error(`worker exited ${code}`))));
        }),
    ),
  );
  const elapsed = Date.now() - started;
  const seen = new Map();
  let total = 0;
  let claimers = 0;
  for (const { runnerId, out } of outputs) {
    const lines = out.split("\n").filter(Boolean);
    if (lines.length > 0) claimers += 1;
    for (const line of lines) {
      const [id, holder] = line.split(" ");
      assert.equal(holder, runnerId);
      assert.equal(seen.has(id), false, `job ${id} claimed twice`);
      seen.set(id, runnerId);
      total++;
    }
  }
  assert.equal(total, 5000);
  assert.ok(claimers >= 4, `the claims really ran concurrently: only ${claimers} of 8 workers got jobs`);
  const { rows } = await pool.query("select state, count(*)::int as n, max(attempts) as a from byollm_jobs group by state");
  assert.deepEqual(rows, [{ state: "claimed", n: 5000, a: 1 }]);
  const { rows: leases } = await pool.query("select lease_runner::text as r, count(*)::int as n from byollm_jobs group by 1");
  for (const { r, n } of leases) assert.equal(n, outputs.find((o) => o.runnerId === r).out.split("\n").filter(Boolean).length);
  console.log(`# 8 processes claimed 5000 jobs in ${elapsed} ms (${outputs.map((o) => o.out.split("\n").length).join("/")})`);
});

// ------------------------------------------------- 0.1.1 entry points --

test("kept 0.1.1 RPCs: byollm_claim_jobs looks the runner up and refuses revoked ones; byollm_expire_due counts", async () => {
  await reset();
  const owner = randomUUID();
  const r = await runner(owner);
  const j = await job(owner, {}, T0);
  // 0.1.1's RPC takes the runner's uuid (the id without `runner_`).
  const uuid = r.id.slice("runner_".length);
  const { rows } = await pool.query("select id::text, state::text, lease_runner::text from byollm_claim_jobs($1, $2::jsonb, 5, 1000, byollm_at($3))", [
    uuid, JSON.stringify([cap()]), T0 + 1,
  ]);
  assert.deepEqual(rows, [{ id: j.id, state: "claimed", lease_runner: uuid }]);
  await store.revokeRunner(r.id, T0 + 2);
  await assert.rejects(pool.query("select * from byollm_claim_jobs($1, '[]'::jsonb, 5, 1000)", [uuid]), /runner is revoked/);
  await assert.rejects(pool.query("select * from byollm_claim_jobs($1, '[]'::jsonb, 5, 1000)", [randomUUID()]), /unknown runner/);
  // Its lease (1 s past T0) has long lapsed by the database clock: requeued,
  // with the TTL clock restarted at the database's now.
  const { rows: swept } = await pool.query("select byollm_expire_due() as n");
  assert.equal(swept[0].n, 1);
  const requeued = await store.get(j.id);
  assert.equal(requeued.state, "queued");
  assert.ok(Math.abs(requeued.claimableAt - Date.now()) < 60_000);
});

// ------------------------------------------------------------ upgrade --

test("upgrade: a database migrated by @byollm/server 0.1.1 takes our migrations without a data migration", async () => {
  const admin = adminUrl();
  const name = `byollm_t_upgrade_${randomUUID().slice(0, 8)}`;
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  await c.query(`create database ${name}`);
  await c.end();
  const url = new URL(admin);
  url.pathname = `/${name}`;
  const up = new pg.Client({ connectionString: url.toString() });
  await up.connect();
  try {
    // What Supabase provides that the 0.1.1 files assume.
    await up.query(`create schema auth; create table auth.users (id uuid primary key);
      create function auth.uid() returns uuid language sql stable as $$ select (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')::uuid $$;
      do $$ declare r text; begin
        -- Roles are cluster-wide: another test file's database may create one at the same moment.
        foreach r in array array['anon', 'authenticated', 'service_role'] loop
          begin
            if not exists (select 1 from pg_roles where rolname = r) then execute format('create role %I nologin', r); end if;
          exception when duplicate_object or unique_violation then null;
          end;
        end loop;
      end $$;
      set client_min_messages = warning; create publication supabase_realtime;`);
    const refDir = `${root}/node_modules/@byollm/server/supabase/migrations`;
    for (const f of readdirSync(refDir).sort()) await up.query(readFileSync(`${refDir}/${f}`, "utf8"));
    const owner = randomUUID();
    const jobId = randomUUID();
    const oldRunner = randomUUID();
    await up.query("insert into auth.users (id) values ($1)", [owner]);
    await up.query(
      "insert into byollm_jobs (id, kind, envelope, owner, audience, claimable_at, created_at, updated_at) values ($1, $2, $3, $4, 'team', $5, $5, $5)",
      [jobId, KIND, JSON.stringify(ENVELOPE), owner, new Date(T0)],
    );
    // A runner 0.1.1 paired: its daemon signs with the bare uuid.
    await up.query(
      "insert into byollm_runners (id, owner, label, platform, daemon_version, capabilities, device) values ($1, $2, 'l', 'linux', '0.1.1', $3, $4)",
      [oldRunner, owner, JSON.stringify([cap()]), JSON.stringify(DEVICE)],
    );
    const ours = readdirSync(`${root}/supabase/migrations`).sort();
    for (const f of ours) await up.query(readFileSync(`${root}/supabase/migrations/${f}`, "utf8"));
    // Twice: every file is idempotent.
    for (const f of ours) await up.query(readFileSync(`${root}/supabase/migrations/${f}`, "utf8"));
    const s = postgresStore({ connectionString: url.toString() });
    try {
      const j = await s.get(jobId);
      assert.deepEqual([j.id, j.audience, j.owner, j.claimableAt, j.state], [jobId, "team", owner, T0, "queued"]);
      const { rows } = await up.query("select conname from pg_constraint where conname = 'byollm_jobs_owner_fkey'");
      assert.equal(rows.length, 1, "the foreign key to auth.users is kept");
      // On Supabase job ids stay uuids: anything else is refused clearly.
      const { rows: types } = await up.query(
        "select udt_name as t from information_schema.columns where (table_name, column_name) in (('byollm_jobs', 'id'), ('byollm_jobs', 'depends_on'), ('byollm_job_cancels', 'job_id')) order by 1",
      );
      assert.deepEqual(types.map((x) => x.t), ["_uuid", "uuid", "uuid"]);
      const input = { kind: KIND, envelope: ENVELOPE, sizeClass: "small", owner };
      await assert.rejects(s.create({ ...input, id: "job-42" }, T0), /job ids must be lowercase UUIDs/);
      await assert.rejects(s.create({ ...input, id: jobId.toUpperCase() }, T0), /job ids must be lowercase UUIDs/);
      await assert.rejects(s.create({ ...input, id: randomUUID(), dependsOn: ["job-42"] }, T0), /job ids must be lowercase UUIDs/);
      assert.equal(await s.get("job-42"), null);
      assert.equal(await s.get(jobId.toUpperCase()), null);
      // The runner 0.1.1 paired claims with its bare uuid and is answered in it.
      assert.equal((await s.getRunner(oldRunner)).id, oldRunner);
      const [held] = await s.claim({ runnerId: oldRunner, runnerOwner: owner, capabilities: [cap()], max: 1, leaseMs: 10_000, now: T0 + 1 });
      assert.deepEqual([held.id, held.lease.runnerId], [jobId, oldRunner]);
      assert.equal((await s.get(jobId)).lease.runnerId, `runner_${oldRunner}`);
      const done = await s.complete({ jobId, runnerId: oldRunner, holder: { by: "lease", leaseId: held.lease.id }, outcome: OK, provenance: { ...prov(oldRunner, owner), audience: "team" }, now: T0 + 2 });
      assert.equal(done.accepted, true);
      // A runner paired now gets `runner_<uuid>`.
      await s.createPairing({
        deviceCodeHash: "h-up", userCode: "UPGR-ADE1", state: "pending", owner: null, runnerId: null, collected: false, label: "l",
        platform: "linux", daemonVersion: "0.1.1", capabilities: [cap()], device: DEVICE, expiresAt: T0 + 600_000, createdAt: T0,
      });
      const fresh = await s.approvePairing({ userCode: "UPGR-ADE1", owner, runnerId: `runner_${randomUUID()}`, now: T0 + 3 });
      assert.match(fresh.id, /^runner_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      const next = await s.create({ ...input, id: randomUUID() }, T0 + 4);
      const [mine] = await s.claim({ runnerId: fresh.id, runnerOwner: owner, capabilities: [cap()], max: 1, leaseMs: 10_000, now: T0 + 5 });
      assert.deepEqual([mine.id, mine.lease.runnerId], [next.id, fresh.id]);
    } finally {
      await s.close();
    }
  } finally {
    await up.end();
    const d = new pg.Client({ connectionString: admin });
    await d.connect();
    await d.query(`drop database if exists ${name} with (force)`);
    await d.end();
  }
});
