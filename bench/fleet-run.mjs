// The fleet run of `npm run bench -- fleet`: 4 app processes (each a ByollmApp
// and createFetchHandler over its own postgresStore, notifications on) on one
// PostgreSQL database, 20,000 simulated daemons split among them (2,000 with
// --quick), driven in-process inside each app process (over loopback HTTP the
// 2 cores would go to node:http and the simulated daemons, not to the server).
//
// Time: one fake clock for all four processes, advancing 10 s per round. In a
// round every daemon sends its idle tick (a heartbeat with no leases, then a
// claim) once, at its own instant of the round (daemon k at round start +
// k × 10 s / N). The rounds take what they take in real time; every
// timer of the design that counts in the clock's time (the 45 s liveness
// write, the 60 s lease, the memo's 300 s safety net, wakeAt) sees a daemon
// tick every 10 s, as the real daemon's top rung does, which real time
// compressed (10,000 ticks a second) could not give on 2 cores: a daemon
// ticking every 40 s of real time would write its liveness every 2nd tick
// instead of every 5th. Notifications still travel in real time, so the
// pickup delay is reported in both clocks.
//
// Idle daemons are paired with the migrations' own functions
// (byollm_create_pairing, byollm_approve_pairing_as, byollm_consume_pairing_token:
// what the store's createPairing and approvePairing and the daemon's collecting
// poll call; collected pairings are pruned past the table's cap as usual), 500
// per statement; the HTTP flow for 20,000 takes minutes. Their approvals are spread over the 50 s before the
// run, so their liveness falls due on different rounds. Each idle daemon's two
// requests are signed once for the middle of the run (issuedAt within the
// protocol's 120 s window of every round: the server verifies every request
// anyway; signing 40,000 requests a round would be the daemons' cost, not the
// server's).
//
// The job stream: 60 owners with 2 daemons each (in two different app
// processes, paired through the HTTP flow); every second round each owner
// gets a job, enqueued by the app process its number falls to, at its own
// instant of the round. Their daemons claim, fetch, open, seal and return
// the result in the tick that got the job. Reported: each job's pickup delay,
// claims that answered empty although the job had been claimable for ≥ 1 s in
// both clocks and that ended before the claim that got it began (missed
// offers; one running beside it finds the row locked and skips it, as it must), lost jobs (not `ok` at the end), duplicated
// (offered to two claims, or completed twice: a bench-only trigger logs
// every transition into `ok`, as bench/stores-concurrency.mjs does).
import { fork } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import pg from "pg";
import * as protocol from "@byollm/protocol";
import { CAP, Device } from "../__test__/helpers/device.mjs";
import { ByollmApp, createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { migratePostgres, postgresStore } from "../dist/postgres.js";
import { createDatabase, processCpu, startPostgres } from "./stores.mjs";
import { logCompletions } from "./stores-concurrency.mjs";

const SELF = fileURLToPath(import.meta.url);
const TICK_MS = 10_000;
const STREAM_OWNERS = 60;
const APPS = 4;
const owner = (kind, i) => `${kind === "stream" ? "20000000" : "10000000"}-0000-4000-8000-${i.toString(16).padStart(12, "0")}`;

export const loadavg = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

/**
 * Nanoseconds on a CPU of each backend of a database (a connected admin
 * client's), by pid. `cpuSince(admin, earlier)` is the time since that
 * sample: per backend, so one that started meanwhile counts from its start
 * and one that ended (a pool closing an idle client) takes nothing away.
 */
export async function backendCpu(admin) {
  const { rows } = await admin.query("select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()");
  const ns = new Map();
  for (const { pid } of rows) {
    try {
      ns.set(pid, Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]));
    } catch {
      // exited since
    }
  }
  return ns;
}

/** Milliseconds of backend CPU since `earlier` (a backendCpu sample). */
export async function cpuSince(admin, earlier) {
  let ns = 0;
  for (const [pid, now] of await backendCpu(admin)) ns += now - (earlier.get(pid) ?? 0);
  return ns / 1e6;
}

/** Row writes on the two tables so far (flushed counts only: see `settle`). */
export async function rowWrites(admin) {
  const { rows } = await admin.query(
    `select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::float8 as n
       from pg_stat_user_tables where relname in ('byollm_runners', 'byollm_jobs')`,
  );
  return rows[0].n;
}

/** A statement on every connection of a node-postgres pool (each flushes its statistics). */
export async function touchPool(pool) {
  const clients = await Promise.all(Array.from({ length: Math.max(1, pool.totalCount) }, () => pool.connect()));
  await Promise.all(clients.map((c) => c.query("select 1")));
  for (const c of clients) c.release();
}

const pct = (xs, p) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/** The run; returns its figures. */
export async function fleetRun({ quick = false, log = console.log, daemons = quick ? 2_000 : 20_000, measuredRounds = 1 } = {}) {
  const { url: adminUrl } = startPostgres();
  const dbUrl = await createDatabase(adminUrl, "byollm_bench_fleet_run");
  await migratePostgres({ connectionString: dbUrl, createRoles: true });
  const admin = new pg.Client({ connectionString: dbUrl });
  await admin.connect();
  await logCompletions(admin);

  const T0 = Date.now();
  const siteKeys = generateSiteKeys();
  const children = [];
  const t0 = performance.now();
  try {
    for (let c = 0; c < APPS; c++) {
      const child = fork(SELF, ["app"], { stdio: "inherit" });
      child.on("exit", (code) => code && log(`  (app process ${c} exited ${code})`));
      children.push(child);
    }
    const ask = (child, message) =>
      new Promise((resolve, reject) => {
        child.once("message", (m) => (m.error ? reject(new Error(m.error)) : resolve(m)));
        child.send(message);
      });
    const all = (message) => Promise.all(children.map((child, c) => ask(child, { ...message, c })));
    await all({ type: "setup", dbUrl, siteKeys, apps: APPS, daemons, T0 });
    log(`    ${daemons.toLocaleString("en")} daemons paired in ${((performance.now() - t0) / 1000).toFixed(0)} s`);

    const streamRounds = 1 + measuredRounds;
    const logs = { claims: [], enqueued: [], ticks: 0 };
    const gather = (answers) => {
      for (const a of answers) {
        logs.claims.push(...a.claims);
        logs.enqueued.push(...a.enqueued);
      }
    };
    // Round 0 warms (JIT, plans, every runner's first claim reaches the database).
    gather(await all({ type: "round", r: 0, stream: true }));
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await all({ type: "settle" });
    const pg0 = await backendCpu(admin);
    const w0 = await rowWrites(admin);
    const cpu0 = children.map((c) => processCpu(c.pid));
    const m0 = performance.now();
    let ticks = 0;
    const perRound = [];
    for (let r = 1; r <= measuredRounds; r++) {
      const r0 = performance.now();
      const answers = await all({ type: "round", r, stream: r < streamRounds });
      gather(answers);
      ticks += answers.reduce((a, x) => a + x.ticks, 0);
      perRound.push(((performance.now() - r0) / 1000).toFixed(1));
    }
    const wallS = (performance.now() - m0) / 1000;
    const pgMs = await cpuSince(admin, pg0);
    const nodeMs = children.reduce((a, c, i) => a + (processCpu(c.pid) - cpu0[i]) * 1000, 0);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await all({ type: "settle" });
    const writes = (await rowWrites(admin)) - w0;
    // Drain: rounds of the stream's daemons alone until every job of the stream has ended (at most 3).
    for (let r = measuredRounds + 1; r <= measuredRounds + 3; r++) {
      const { rows } = await admin.query("select count(*)::int as n from byollm_jobs where owner::text like '20000000-%' and state <> 'ok'");
      if (rows[0].n === 0) break;
      gather(await all({ type: "round", r, stream: false, streamDaemonsOnly: true }));
    }

    const { rows } = await admin.query(
      `select (select count(*) from byollm_jobs where owner::text like '20000000-%' and state <> 'ok')::int as lost,
              (select count(*) - count(distinct job_id) from bench_completions)::int as doubly,
              (select count(*) from byollm_jobs where owner::text like '20000000-%')::int as total`,
    );
    const offered = new Map();
    let duplicatedOffers = 0;
    for (const c of logs.claims) {
      if (!c.jobId) continue;
      if (offered.has(c.jobId)) duplicatedOffers++;
      else offered.set(c.jobId, c);
    }
    const fakeDelays = [];
    const realDelays = [];
    let missed = 0;
    for (const job of logs.enqueued) {
      const pick = offered.get(job.id);
      if (pick) {
        fakeDelays.push((pick.fakeT - job.fakeAt) / 1000);
        realDelays.push((pick.realT - job.realAt) / 1000);
      }
      const misses = logs.claims.filter(
        (c) => c.owner === job.owner && !c.jobId && c.fakeT >= job.fakeAt + 1_000 && c.realT >= job.realAt + 1_000 && (!pick || c.realEnd < pick.realT),
      );
      missed += misses.length;
    }
    const out = {
      daemons,
      apps: APPS,
      rounds: measuredRounds,
      ticks,
      wallS,
      roundsS: perRound,
      pgMsPerTick: pgMs / ticks,
      writesPerTick: writes / ticks,
      nodeMsPerTick: nodeMs / ticks,
      jobs: rows[0].total,
      pickup: {
        fakeS: { median: pct(fakeDelays, 50), p99: pct(fakeDelays, 99), max: pct(fakeDelays, 100) },
        realS: { median: pct(realDelays, 50), p99: pct(realDelays, 99), max: pct(realDelays, 100) },
      },
      missed,
      lost: rows[0].lost,
      duplicated: rows[0].doubly + duplicatedOffers,
      load: loadavg(),
    };
    const f = (x, d = 3) => (x === null ? "—" : x.toFixed(d));
    log(
      `    ${APPS} app processes, ${daemons.toLocaleString("en")} daemons, ${measuredRounds} measured round(s) (${ticks.toLocaleString("en")} ticks, ${perRound.join(" + ")} s), after a warm-up round:` +
        `\n    per idle tick: PostgreSQL CPU ${f(out.pgMsPerTick)} ms, row writes ${f(out.writesPerTick)}, Node CPU (4 apps, daemons' in-process share included) ${f(out.nodeMsPerTick)} ms` +
        ` (the stream's ${out.jobs} jobs included)` +
        `\n    pickup delay, clock s: median ${f(out.pickup.fakeS.median, 1)}, p99 ${f(out.pickup.fakeS.p99, 1)}, max ${f(out.pickup.fakeS.max, 1)};` +
        ` real s: median ${f(out.pickup.realS.median, 2)}, p99 ${f(out.pickup.realS.p99, 2)}, max ${f(out.pickup.realS.max, 2)}` +
        `\n    jobs ${out.jobs}: lost ${out.lost}, duplicated ${out.duplicated}, missed offers ${out.missed} (all must be 0); load ${out.load}`,
    );
    return out;
  } finally {
    for (const c of children) c.kill();
    await admin.end();
  }
}

// ------------------------------------------------------------------ an app process

async function appProcess() {
  const clock = { t: 0 };
  const now = () => clock.t;
  let state;

  async function setup({ dbUrl, siteKeys, apps, daemons, T0, c }) {
    const pool = new pg.Pool({ connectionString: dbUrl, max: 4 });
    pool.on("error", () => undefined);
    const store = postgresStore({ pool, notifications: true });
    const app = new ByollmApp({ store, siteKeys, now });
    const handler = createFetchHandler({ store, siteKeys, verificationUrl: "http://127.0.0.1/pair", now });
    const send = (r) => handler(new Request(r.url, { method: "POST", headers: r.headers, body: r.text }));
    const mine = [];
    const signedAt = T0 + 100_000;
    const batch = [];
    const flush = async (attempt = 0) => {
      if (batch.length === 0) return;
      // Past the table's cap every pairing prunes the oldest collected ones;
      // four processes' 500-row statements doing so at once can deadlock
      // (40P01): the statement rolled back whole, it is sent again.
      await pool.query(
        `select count(*) from (select byollm_create_pairing(e.p), byollm_approve_pairing_as(e.p ->> 'userCode', e.p ->> 'o', e.p ->> 'rid', (e.p ->> 'at')::bigint),
                                      byollm_consume_pairing_token(e.p ->> 'deviceCodeHash')
                                 from jsonb_array_elements($1::jsonb) e(p)) x`,
        [JSON.stringify(batch)],
      ).catch((error) => {
        if (error.code !== "40P01" || attempt >= 5) throw error;
        return flush(attempt + 1);
      });
      batch.length = 0;
    };
    for (let k = c; k < daemons; k += apps) {
      const approvedAt = T0 - 50_000 + (k % 5) * TICK_MS;
      if (k < 2 * STREAM_OWNERS) {
        clock.t = approvedAt;
        const device = new Device(handler, [CAP], { now });
        await device.pair(app, owner("stream", k >> 1));
        mine.push({ k, device, owner: owner("stream", k >> 1) });
        continue;
      }
      const keys = protocol.generateKeys(T0);
      const uuid = randomUUID();
      const runnerId = `runner_${uuid}`;
      batch.push({
        deviceCodeHash: `fleet-${k}`, userCode: `FLEET-${k}`, state: "pending", owner: null, runnerId: null, collected: false,
        label: "fleet", platform: "linux", daemonVersion: "0.1.1", capabilities: [CAP], device: protocol.publicIdentityOf(keys),
        expiresAt: T0 + 3_600_000, createdAt: T0 - 60_000, o: owner("idle", k >> 1), rid: uuid, at: approvedAt,
      });
      if (batch.length === 500) await flush();
      const sign = (endpoint, body) => {
        const text = JSON.stringify(body);
        const sig = protocol.signRequest(keys, { endpoint, runnerId, issuedAt: signedAt, body: text });
        return {
          url: `http://127.0.0.1/byollm/${endpoint}`,
          headers: { "content-type": "application/json", "x-byollm-runner": runnerId, "x-byollm-issued-at": String(signedAt), "x-byollm-signature": sig.signature },
          text,
        };
      };
      mine.push({
        k,
        beat: sign("heartbeat", { protocolVersion: "2", runnerId, daemonVersion: "0.1.1", capabilities: [CAP], activeLeases: [] }),
        claim: sign("claim", { protocolVersion: "2", runnerId, capabilities: [CAP], max: 1 }),
      });
    }
    await flush();
    state = { pool, app, send, mine, daemons, apps, c, T0 };
  }

  async function round({ r, stream, streamDaemonsOnly }) {
    const { app, send, mine, daemons, apps, c, T0 } = state;
    const base = T0 + r * TICK_MS;
    const step = TICK_MS / daemons;
    // This process's share of the stream: owner s's job at its own instant of every second round.
    const due = [];
    for (let s = c; stream && s < STREAM_OWNERS; s += apps) {
      if ((r + s) % 2 === 0) due.push({ s, t: base + Math.round(((s * 7919) % daemons) * step) });
    }
    due.sort((a, b) => a.t - b.t);
    const claims = [];
    const enqueued = [];
    let ticks = 0;
    for (const d of streamDaemonsOnly ? mine.filter((x) => x.device) : mine) {
      const t = base + Math.round(d.k * step);
      while (due.length > 0 && due[0].t <= t) {
        const { s, t: at } = due.shift();
        clock.t = at;
        const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: `job of ${s}` }, owner: owner("stream", s), ttlMs: 3_600_000 });
        enqueued.push({ id: handle.id, owner: owner("stream", s), fakeAt: at, realAt: Date.now() });
      }
      clock.t = t;
      if (d.device) {
        const beat = await d.device.heartbeat();
        const realT = Date.now();
        const claim = await d.device.claim();
        const realEnd = Date.now();
        if (beat.status !== 200 || claim.status !== 200) throw new Error(`stream daemon ${d.k}: heartbeat ${beat.status}, claim ${claim.status} ${claim.text}`);
        const stub = claim.body.jobs[0];
        claims.push({ owner: d.owner, fakeT: t, realT, realEnd, jobId: stub?.id ?? null });
        if (stub) {
          const fetched = await d.device.fetchJob(stub);
          const payload = await d.device.open(stub, fetched.body.envelope);
          const result = await d.device.result(stub, `done ${payload.prompt}`);
          if (result.body?.accepted !== true) throw new Error(`result refused: ${result.text}`);
        }
      } else {
        const beat = await send(d.beat);
        const beatText = await beat.text();
        const claim = await send(d.claim);
        const claimText = await claim.text();
        if (beat.status !== 200 || claim.status !== 200 || JSON.parse(claimText).jobs.length !== 0) {
          throw new Error(`idle daemon ${d.k}: heartbeat ${beat.status} ${beatText}, claim ${claim.status} ${claimText}`);
        }
      }
      ticks++;
      if (ticks % 64 === 0) await new Promise(setImmediate);
    }
    return { ticks, claims, enqueued };
  }

  process.on("message", async (m) => {
    try {
      if (m.type === "setup") process.send((await setup(m)) ?? { ok: true });
      else if (m.type === "round") process.send(await round(m));
      else if (m.type === "settle") process.send((await touchPool(state.pool)) ?? { ok: true });
    } catch (error) {
      process.send({ error: String(error?.stack ?? error) });
    }
  });
}

if (process.argv[1] === SELF && process.argv[2] === "app") await appProcess();
