// Upgrading a database that our earlier migrations (before the scale,
// pairing and notify files) left with data in it: the current files apply
// on top, twice, and the rows keep working: job ids become text (plain
// PostgreSQL) with the stored jobs, dependencies and cancel requests intact,
// and the runner paired by those files, which signs with its bare uuid,
// keeps working.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { migratePostgres, postgresStore } from "../dist/postgres.js";
import { adminUrl } from "./postgres-db.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
// The last commit whose migrations were the four files before the scale file.
const EARLIER = "454c42d";
const T0 = 1_767_225_600_000;
const CAP = { kind: "llm.generate", service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };
const ENVELOPE = { ciphertext: "c2VhbGVk", recipientKeyId: "site", senderKeyId: "site", direction: "payload", deadlineAt: T0 + 86_400_000 };

let name;
after(async () => {
  if (!name) return;
  const c = new pg.Client({ connectionString: adminUrl() });
  await c.connect();
  await c.query(`drop database if exists ${name} with (force)`);
  await c.end();
});

function earlierFiles() {
  let listing;
  try {
    listing = execFileSync("git", ["ls-tree", "--name-only", `${EARLIER}:supabase/migrations`], { cwd: root, encoding: "utf8" });
  } catch {
    return null;
  }
  return listing
    .split("\n")
    .filter((n) => n.endsWith(".sql"))
    .sort()
    .map((n) => execFileSync("git", ["show", `${EARLIER}:supabase/migrations/${n}`], { cwd: root, encoding: "utf8" }));
}

test("a database migrated by our earlier files, with queued, held, ended and blocked jobs, upgrades and keeps working", async (t) => {
  const files = earlierFiles();
  if (files === null) {
    t.skip(`the commit ${EARLIER} is not in this clone (a shallow checkout): nothing to upgrade from`);
    return;
  }
  assert.equal(files.length, 4);
  name = `byollm_t_upgrade_ours_${randomUUID().slice(0, 8)}`;
  const c = new pg.Client({ connectionString: adminUrl() });
  await c.connect();
  await c.query(`create database ${name}`);
  await c.end();
  const url = new URL(adminUrl());
  url.pathname = `/${name}`;
  const db = new pg.Client({ connectionString: url.toString() });
  await db.connect();
  try {
    for (const sql of files) await db.query(sql);
    // Data written by the earlier functions.
    const call = async (fn, args) => (await db.query(`select ${fn}(${args.map((_, i) => `$${i + 1}`).join(", ")}) as r`, args)).rows[0].r;
    const owner = randomUUID();
    const runnerId = randomUUID();
    await call("byollm_create_pairing", [JSON.stringify({
      deviceCodeHash: "h1", userCode: "OLD0-CODE", state: "pending", owner: null, runnerId: null, collected: false,
      label: "l", platform: "linux", daemonVersion: "0.1.1", capabilities: [CAP], device: { identity: "i", encryption: "e", encryptionSig: "s" },
      expiresAt: T0 + 600_000, createdAt: T0,
    })]);
    await call("byollm_approve_pairing_as", ["OLD0-CODE", owner, runnerId, T0]);
    const job = (id, extra = {}) => JSON.stringify({ id, kind: "llm.generate", envelope: ENVELOPE, sizeClass: "small", owner, ttlMs: 3_600_000, ...extra });
    const [held, queued, ended, dep, blocked] = [randomUUID(), randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    await call("byollm_create_job", [job(held), T0]);
    await call("byollm_claim", [runnerId, owner, JSON.stringify([CAP]), 1, 60_000, T0 + 1]);
    await call("byollm_create_job", [job(ended), T0 + 2]);
    await db.query("update byollm_jobs set state = 'ok', outcome = '{\"outcome\":\"ok\",\"text\":\"old\"}' where id = $1", [ended]);
    await call("byollm_create_job", [job(dep), T0 + 3]);
    await call("byollm_create_job", [job(blocked, { dependsOn: [dep] }), T0 + 4]);
    await call("byollm_create_job", [job(queued), T0 + 5]);
    // A cancel request for the held job, waiting for its holder.
    await call("byollm_cancel_job", [held, T0 + 6]);

    await migratePostgres({ connectionString: url.toString(), createRoles: true });
    await migratePostgres({ connectionString: url.toString(), createRoles: true });

    const { rows: types } = await db.query(
      `select table_name || '.' || column_name as c, udt_name as t from information_schema.columns
        where (table_name, column_name) in (('byollm_jobs', 'id'), ('byollm_jobs', 'depends_on'), ('byollm_job_cancels', 'job_id'))
        order by 1`,
    );
    assert.deepEqual(types, [
      { c: "byollm_job_cancels.job_id", t: "text" },
      { c: "byollm_jobs.depends_on", t: "_text" },
      { c: "byollm_jobs.id", t: "text" },
    ]);
    const { rows: fks } = await db.query(
      "select count(*)::int as n from pg_constraint where conrelid = 'byollm_job_cancels'::regclass and contype = 'f' and confrelid = 'byollm_jobs'::regclass",
    );
    assert.equal(fks[0].n, 1, "the cancel requests still reference their jobs");

    const store = postgresStore({ connectionString: url.toString() });
    try {
      assert.equal((await store.get(ended)).outcome.text, "old");
      // Records spell the runner `runner_<uuid>`; the runner itself, which
      // signs with the bare uuid, is answered in that spelling.
      assert.equal((await store.get(held)).lease.runnerId, `runner_${runnerId}`);
      assert.equal((await store.getRunner(runnerId)).owner, owner);
      assert.equal((await store.getRunner(runnerId)).id, runnerId);
      assert.equal((await store.getRunner(`runner_${runnerId}`)).id, `runner_${runnerId}`);
      assert.deepEqual((await store.listRunners(owner)).map((r) => r.id), [`runner_${runnerId}`]);
      assert.deepEqual((await store.get(blocked)).dependsOn, [dep]);
      const heldLease = (await store.get(held)).lease.id;
      assert.deepEqual(await store.listCancelRequests(runnerId), [{ jobId: held, leaseId: heldLease }]);
      assert.deepEqual((await store.listClaimedBy(runnerId)).map((j) => [j.id, j.lease.runnerId]), [[held, runnerId]]);
      // The held job completes; the queued ones are claimed in order; the
      // blocked one is unblocked by its dependency through the new index.
      const heldJob = await store.get(held);
      const done = await store.complete({
        jobId: held, runnerId, holder: { by: "lease", leaseId: heldJob.lease.id }, outcome: { outcome: "ok", text: "new" },
        provenance: { audience: "private", runnerId, runnerOwner: owner, backendClass: "http", model: "m", untrusted: false }, now: T0 + 10,
      });
      assert.equal(done.accepted, true);
      assert.deepEqual(await store.listCancelRequests(runnerId), [], "the completion took the cancel request");
      const claimed = await store.claim({ runnerId, runnerOwner: owner, capabilities: [CAP], max: 5, leaseMs: 60_000, now: T0 + 11 });
      assert.deepEqual(claimed.map((j) => [j.id, j.lease.runnerId]), [[dep, runnerId], [queued, runnerId]]);
      const depJob = claimed[0];
      await store.complete({
        jobId: dep, runnerId, holder: { by: "lease", leaseId: depJob.lease.id }, outcome: { outcome: "ok", text: "dep" },
        provenance: { audience: "private", runnerId, runnerOwner: owner, backendClass: "http", model: "m", untrusted: false }, now: T0 + 12,
      });
      assert.equal((await store.get(blocked)).claimableAt, T0 + 12);

      // New jobs take any id, and may depend on the stored ones.
      const after = await store.create({ id: "after-upgrade/1", kind: "llm.generate", envelope: ENVELOPE, sizeClass: "small", owner, dependsOn: [queued], ttlMs: 3_600_000 }, T0 + 13);
      assert.equal(after.claimableAt, null);
      const queuedJob = claimed[1];
      const renewed = await store.renewLeases({ runnerId, leases: [{ jobId: queued, leaseId: queuedJob.lease.id }], leaseMs: 60_000, now: T0 + 14 });
      assert.deepEqual(renewed.lost, []);
      await store.complete({
        jobId: queued, runnerId, holder: { by: "runner", runnerId }, outcome: { outcome: "ok", text: "q" },
        provenance: { audience: "private", runnerId, runnerOwner: owner, backendClass: "http", model: "m", untrusted: false }, now: T0 + 15,
      });
      assert.equal((await store.get("after-upgrade/1")).claimableAt, T0 + 15);
      // Oldest claimable first: the job unblocked above, then the new one;
      // each claim answers in the spelling it was asked with.
      const spelled = await store.claim({ runnerId: `runner_${runnerId}`, runnerOwner: owner, capabilities: [CAP], max: 1, leaseMs: 60_000, now: T0 + 16 });
      assert.deepEqual(spelled.map((j) => [j.id, j.lease.runnerId]), [[blocked, `runner_${runnerId}`]]);
      const bare = await store.claim({ runnerId, runnerOwner: owner, capabilities: [CAP], max: 5, leaseMs: 60_000, now: T0 + 17 });
      assert.deepEqual(bare.map((j) => [j.id, j.lease.runnerId]), [["after-upgrade/1", runnerId]]);
      const { rows } = await db.query(
        "select count(*)::int as n from pg_indexes where tablename = 'byollm_jobs' and indexname in ('byollm_jobs_claim_order_idx', 'byollm_jobs_depends_idx')",
      );
      assert.equal(rows[0].n, 0, "the replaced indexes are gone");

      // The bounds file applied on top: set-based release over the upgraded
      // rows, the pairing bound's index, no sequence for the browser roles.
      const released = await store.release({
        runnerId, leases: [{ jobId: "after-upgrade/1", leaseId: bare[0].lease.id }, { jobId: blocked, leaseId: randomUUID() }], reason: "shutdown", now: T0 + 18,
      });
      assert.deepEqual(released, ["after-upgrade/1"]);
      const { rows: bounds } = await db.query(
        `select byollm_max_pairings() as max,
                (select count(*)::int from pg_indexes where indexname = 'byollm_pairings_seq_idx') as idx,
                (select count(*)::int from unnest(array['byollm_jobs', 'byollm_runners', 'byollm_pairings', 'byollm_job_cancels']) t,
                        unnest(array['anon', 'authenticated']) r
                  where has_sequence_privilege(r, pg_get_serial_sequence(t, 'byollm_seq'), 'USAGE')) as granted`,
      );
      assert.deepEqual(bounds[0], { max: 4096, idx: 1, granted: 0 });
    } finally {
      await store.close();
    }
  } finally {
    await db.end();
  }
});
