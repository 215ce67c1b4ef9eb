// The idle fleet's promises (issue 45), across two app processes on one
// PostgreSQL database, each with its store's notifications on and off: work
// that becomes claimable is offered on a runner's first claim that starts
// ≥ 1 s later however it became claimable and on whichever process; a
// revocation is seen within 1 s from the other process; a dead daemon's
// lease lapses within the lease + 1 s without any request of its own; a lost
// notification connection is noticed, said once, and answered around.
//
// Real clocks throughout (the 1 s bound is the point). Each runner first
// idles: several ticks (a heartbeat naming no leases, then an empty claim),
// as a daemon on its top rung, so whatever an idle request may remember is
// in place before the change.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { fork } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { generateSiteKeys } from "../dist/index.js";
import { freshDatabase } from "./postgres-db.mjs";
import { Device, ORIGIN } from "./helpers/device.mjs";

const LEASE_MS = 2_000;
const APP = fileURLToPath(new URL("./helpers/fleet-app.mjs", import.meta.url));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** An app process; its stderr lines are kept in `warnings`. */
async function startApp(dbUrl, siteKeys, notifications) {
  const child = fork(APP, [dbUrl, JSON.stringify(siteKeys), notifications, String(LEASE_MS)], { stdio: ["ignore", "inherit", "pipe", "ipc"] });
  const warnings = [];
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (text) => warnings.push(...text.split("\n").filter((l) => l.trim() !== "")));
  const { origin } = await new Promise((resolve, reject) => {
    child.once("message", resolve);
    child.once("exit", (code) => reject(new Error(`the app process exited (${code}): ${warnings.join("\n")}`)));
  });
  // The daemon's requests, as a fetch-style handler for Device.
  const handler = async (request) =>
    fetch(request.url.replace(ORIGIN, origin), { method: "POST", headers: request.headers, body: await request.text() });
  const call = async (method, args, aheadMs) => {
    const res = await fetch(`${origin}/test/app`, { method: "POST", body: JSON.stringify({ method, args, aheadMs }) });
    const answer = await res.json();
    if (res.status !== 200) throw new Error(`app.${method}: ${answer.error}`);
    return answer.ok;
  };
  const channel = async () => (await (await fetch(`${origin}/test/channel`)).json()).channel;
  return { child, handler, call, channel, warnings };
}

for (const notifications of ["on", "off"]) {
  describe(`two app processes, notifications ${notifications}`, () => {
    let db;
    let a;
    let b;
    before(async () => {
      db = await freshDatabase("idle");
      const siteKeys = generateSiteKeys();
      [a, b] = await Promise.all([startApp(db.url, siteKeys, notifications), startApp(db.url, siteKeys, notifications)]);
    });
    after(async () => {
      for (const p of [a, b]) {
        if (!p) continue;
        const exited = new Promise((resolve) => p.child.once("exit", resolve));
        p.child.disconnect();
        await exited;
      }
      await db?.drop();
    });

    /** A runner of `owner` paired through process `p`. */
    async function runner(p, owner) {
      const device = new Device(p.handler);
      const start = await device.post("pair", {
        protocolVersion: "2", action: "start", daemon: { version: "0.1.1", label: "t", platform: "linux" },
        device: device.publicIdentity(), capabilities: device.capabilities,
      }, false);
      await p.call("approvePairing", [{ userCode: start.body.userCode, owner }]);
      const poll = await device.post("pair", { protocolVersion: "2", action: "poll", deviceCode: start.body.deviceCode }, false);
      device.runnerId = poll.body.runnerId;
      [[device.siteKeyId, device.site]] = Object.entries(poll.body.sites);
      return device;
    }

    /** Idle ticks: each a heartbeat naming no leases, then a claim that must come back empty. */
    async function idle(device, ticks = 4) {
      for (let i = 0; i < ticks; i++) {
        const beat = await device.heartbeat();
        assert.equal(beat.status, 200, beat.text);
        assert.deepEqual(beat.body.lost, []);
        const claim = await device.claim();
        assert.equal(claim.status, 200, claim.text);
        assert.deepEqual(claim.body.jobs, [], "an idle runner was offered a job before any was claimable");
        await sleep(100);
      }
    }

    /** The first tick starting ≥ 1 s after `since` (ms, this clock): its claim must offer `jobId`. */
    async function offeredAfter(device, since, jobId) {
      await sleep(Math.max(0, since + 1_000 - Date.now()));
      const beat = await device.heartbeat();
      assert.equal(beat.status, 200, beat.text);
      const claim = await device.claim();
      assert.equal(claim.status, 200, claim.text);
      assert.deepEqual(claim.body.jobs.map((j) => j.id), [jobId], `claim ${Date.now() - since} ms after the job became claimable`);
      return claim.body.jobs[0];
    }

    const enqueue = (p, owner, more = {}, aheadMs) => p.call("enqueue", [{ kind: "llm.generate", payload: { prompt: "hi" }, owner, ...more }], aheadMs);

    test("a job enqueued on the other process is offered on the idle runner's first claim ≥ 1 s later", async () => {
      const owner = randomUUID();
      const r = await runner(a, owner);
      await idle(r);
      const { id } = await enqueue(b, owner);
      await offeredAfter(r, Date.now(), id);
    });

    test("a job whose claimableAt lies ahead (its process's clock is 1.5 s ahead) is offered on the first claim ≥ 1 s after that instant, not before", async () => {
      const owner = randomUUID();
      const r = await runner(a, owner);
      await idle(r);
      const claimableAt = Date.now() + 1_500;
      const { id } = await enqueue(b, owner, {}, 1_500);
      const early = await r.claim();
      assert.deepEqual(early.body.jobs, [], "offered before its claimableAt");
      await idle(r, 2);
      await offeredAfter(r, claimableAt, id);
    });

    test("a dead daemon's lease lapses within the lease + 1 s with no request of its own, and the job goes to the idle runner on the other process", async () => {
      const owner = randomUUID();
      const dead = await runner(a, owner);
      const other = await runner(b, owner);
      const { id } = await enqueue(a, owner);
      const claimed = await dead.claim();
      assert.deepEqual(claimed.body.jobs.map((j) => j.id), [id]);
      const expiresAt = claimed.body.jobs[0].lease.expiresAt;
      // `other` idles while the lease holds; `dead` sends nothing more.
      while (Date.now() < expiresAt - 300) await idle(other, 1);
      const stub = await offeredAfter(other, expiresAt, id);
      assert.notEqual(stub.lease.id, claimed.body.jobs[0].lease.id);
      assert.equal((await a.call("job", [id])).state, "claimed");
    });

    test("a released job is offered on the idle runner's first claim ≥ 1 s later, on the other process", async () => {
      const owner = randomUUID();
      const holder = await runner(a, owner);
      const other = await runner(b, owner);
      const { id } = await enqueue(a, owner);
      const claimed = await holder.claim();
      const [job] = claimed.body.jobs;
      assert.equal(job.id, id);
      await idle(other);
      const released = await holder.post("release", { protocolVersion: "2", runnerId: holder.runnerId, leases: [{ jobId: id, leaseId: job.lease.id }], reason: "shutdown" });
      assert.equal(released.status, 200, released.text);
      await offeredAfter(other, Date.now(), id);
    });

    test("a job unblocked by its dependency's completion on one process is offered on the other's idle runner ≥ 1 s later", async () => {
      const owner = randomUUID();
      const first = await runner(a, owner);
      const other = await runner(b, owner);
      const { id: parent } = await enqueue(a, owner);
      const { id: child } = await enqueue(a, owner, { dependsOn: [parent] });
      const claimed = await first.claim();
      const [job] = claimed.body.jobs;
      assert.equal(job.id, parent);
      await idle(other);
      const fetched = await first.fetchJob(job);
      assert.equal(fetched.status, 200, fetched.text);
      const done = await first.result(job, "done");
      assert.equal(done.body.accepted, true, done.text);
      await offeredAfter(other, Date.now(), child);
    });

    test("a runner revoked on the other process is refused on its first request ≥ 1 s later: heartbeat, claim and fetch answer 403 revoked", async () => {
      const owner = randomUUID();
      const r = await runner(a, owner);
      await idle(r);
      await b.call("revokeRunner", [r.runnerId]);
      await sleep(1_000);
      const revoked = { error: "revoked", message: "this runner has been revoked by its owner" };
      for (const answer of [await r.heartbeat(), await r.claim(), await r.fetchJob({ id: randomUUID(), lease: { id: randomUUID() } })]) {
        assert.equal(answer.status, 403, answer.text);
        assert.deepEqual(answer.body, revoked);
      }
    });

    if (notifications === "on") {
      test("the listening connection killed: answers keep coming from the database, one warning, and it listens again", async (t) => {
        const owner = randomUUID();
        const r = await runner(a, owner);
        await idle(r);
        const admin = new pg.Client({ connectionString: db.url });
        await admin.connect();
        try {
          const listeners = async () =>
            (await admin.query("select pid from pg_stat_activity where datname = current_database() and query ilike 'listen%byollm_work%'")).rows.map((x) => x.pid);
          const channel = await a.channel();
          const before = a.warnings.length;
          if (channel) {
            const pids = await listeners();
            assert.equal(pids.length, 2, "one LISTEN connection per process");
            await admin.query("select pg_terminate_backend(pid) from unnest($1::int[]) pid", [pids]);
          } else {
            t.diagnostic("this build's postgresStore has no notification channel: only the behaviour around it is checked (nothing to kill, nothing logged)");
          }
          // Meanwhile: answered from the database.
          const { id } = await enqueue(b, owner);
          await offeredAfter(r, Date.now(), id);
          if (channel) {
            const said = a.warnings.slice(before).filter((l) => /database/i.test(l));
            assert.equal(said.length, 1, `one warning line, got: ${a.warnings.slice(before).join(" | ")}`);
            // Listening again (reconnect backoff starts at 0.5 s).
            const deadline = Date.now() + 10_000;
            while ((await listeners()).length < 2 && Date.now() < deadline) await sleep(200);
            assert.equal((await listeners()).length, 2, "the channel was not re-established within 10 s");
            await idle(r, 2);
          }
          const { id: again } = await enqueue(b, owner);
          await offeredAfter(r, Date.now(), again);
          if (channel) assert.equal(a.warnings.slice(before).filter((l) => /database/i.test(l)).length, 1, "said once");
        } finally {
          await admin.end();
        }
      });
    }
  });
}
