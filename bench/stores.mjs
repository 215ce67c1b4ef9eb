// The production path: the SQL stores against the number of stored jobs.
//
//   npm run bench -- stores                          0, 10k, 100k, 1M stored jobs
//   npm run bench -- stores --sizes=0,10000          a quick run
//   npm run bench -- stores --populations=backlog    only jobs queued for other owners
//   npm run bench -- stores --budget-ms=4000         time per store per point
//   npm run bench -- stores --concurrent-jobs=2000   the concurrency section's size (0: skip it)
//   npm run bench -- stores --stores=postgres        only some stores (postgres, supabase, reference)
//   npm run bench -- stores --prepared-statements=off  postgresStore without named prepared statements
//
// Three stores side by side, each running full job cycles in-process through
// its app's createFetchHandler with a simulated daemon (@byollm/protocol):
//
//   ours postgresStore          node-postgres, our migrations; a direct
//                               connection, so with preparedStatements
//   ours supabaseStore          supabase-js → PostgREST stand-in → our migrations
//   reference supabaseStore     @byollm/server 0.1.1's own app, handlers and
//                               store, supabase-js → the same stand-in → the
//                               reference's own migrations
//
// On a PostgreSQL the bench starts itself (scripts/pg-start.sh; fsync off;
// $BYOLLM_BENCH_PG_DIR, default /tmp/byollm-bench-pg, port
// $BYOLLM_BENCH_PG_PORT, default 54339). The stand-in runs in a process of
// its own (bench/standin-process.mjs), as PostgREST would.
//
// Populations, filled with SQL (never through the app):
//   backlog  jobs queued for 1,000 other owners (90% private, 10% team with
//            an allowlist naming another owner), long TTL: none is claimable
//            by the bench's runner, none expires.
//   history  jobs that ended (`ok`, with an outcome).
// Every stored job carries a ciphertext of a sealed 1 KB prompt's length.
//
// Figures, per store and point:
//   jobs/s    server side: cycles / time inside the handler calls (claim,
//             fetch, result), app.enqueue and app.result; the device's own
//             work and the heartbeat are left out
//   p50/p99   per endpoint, milliseconds
//   trips     database round trips per call (postgresStore: queries; the
//             supabase stores: HTTP requests to PostgREST)
//   CPU/job   Node: this process's CPU less the simulated device's time;
//             PostgreSQL: the cluster's processes (from /proc, Linux only);
//             PostgREST: the stand-in's process
//   bytes/job byollm_jobs with its indexes and TOAST, over its rows
//
// Then the concurrency section (bench/stores-concurrency.mjs): 4 app
// processes × 16 daemons over node:http on one database, drained; jobs/s,
// CPU per job (apps, PostgreSQL, daemons), lost and doubly completed jobs
// counted in SQL.
import { fork, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { createClient } from "@supabase/supabase-js";
import * as reference from "@byollm/server";
import { supabaseStore as referenceSupabaseStore } from "@byollm/server/supabase";
import * as ours from "../dist/index.js";
import { postgresStore, migratePostgres } from "../dist/postgres.js";
import { supabaseStore } from "../dist/supabase/index.js";
import { signJwt } from "../__test__/supabase-standin.mjs";
import { applyReferenceSchema } from "../__test__/helpers/reference-schema.mjs";
import { Device, ORIGIN } from "../__test__/helpers/device.mjs";
import { concurrency } from "./stores-concurrency.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const SECRET = "bench-stand-in-jwt-secret-0123456789abcdef";
const PROMPT = "p".repeat(1000);
const CIPHER_MD5S = 44; // 44 × 32 hex chars ≈ the base64url ciphertext of a sealed 1 KB prompt
const ENDPOINTS = ["enqueue", "claim", "fetch", "heartbeat", "result", "app.result"];
const CYCLE = ["enqueue", "claim", "fetch", "result", "app.result"];
const STORES = ["ours postgresStore", "ours supabaseStore", "reference supabaseStore"];

class NoRealtimeHere {
  constructor() {
    throw new Error("the bench uses no Realtime");
  }
}

// ------------------------------------------------------------------ PostgreSQL

export function startPostgres() {
  const env = {
    ...process.env,
    BYOLLM_PG_DIR: process.env.BYOLLM_BENCH_PG_DIR ?? "/tmp/byollm-bench-pg",
    BYOLLM_PG_PORT: process.env.BYOLLM_BENCH_PG_PORT ?? "54339",
    BYOLLM_PG_DB: "postgres",
  };
  const r = spawnSync("bash", [`${root}scripts/pg-start.sh`], { env, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`could not start PostgreSQL: ${r.stderr}`);
  const url = r.stdout.trim().split("\n").pop();
  return { url, dataDir: `${env.BYOLLM_PG_DIR}/data` };
}

/** CPU seconds of the cluster: the postmaster's own and its children's, living and reaped. */
export function postgresCpu(dataDir) {
  let pid;
  try {
    pid = Number(readFileSync(`${dataDir}/postmaster.pid`, "utf8").split("\n")[0]);
  } catch {
    return null;
  }
  const stat = (p) => {
    try {
      const text = readFileSync(`/proc/${p}/stat`, "utf8");
      return text.slice(text.lastIndexOf(")") + 2).split(" ");
    } catch {
      return null;
    }
  };
  const own = stat(pid);
  if (!own) return null;
  // Fields after the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
  let ticks = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14]);
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const f = stat(entry);
    if (f && Number(f[1]) === pid) ticks += Number(f[11]) + Number(f[12]);
  }
  return ticks / 100;
}

export function processCpu(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return null;
  }
}

export async function createDatabase(adminUrl, name) {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  await c.query(`drop database if exists ${name} with (force)`);
  await c.query(`create database ${name}`);
  await c.end();
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

const OWNER_SQL = (expr) => `('00000000-0000-4000-8000-' || lpad(to_hex(${expr}), 12, '0'))::uuid`;

/** Add stored jobs [from, to) of a population, with SQL, in batches. */
export async function fill(client, population, from, to) {
  const backlog = population === "backlog";
  for (let lo = from; lo < to; lo += 100_000) {
    const hi = Math.min(to, lo + 100_000);
    await client.query(
      `insert into byollm_jobs (id, kind, envelope, size_class, audience, owner, audience_allow, state,
                                claimable_at, ttl_ms, outcome, created_at, updated_at)
       select gen_random_uuid(), 'llm.generate',
              jsonb_build_object('ciphertext', (select string_agg(md5(g::text || '.' || i), '') from generate_series(1, ${CIPHER_MD5S}) i),
                                 'recipientKeyId', 'site', 'senderKeyId', 'site', 'direction', 'payload',
                                 'deadlineAt', 4102444800000),
              'small',
              (case when $3 and g % 10 = 0 then 'team' else 'private' end)::byollm_audience,
              ${OWNER_SQL("g % 1000")},
              case when $3 and g % 10 = 0 then array[${OWNER_SQL("(g + 1) % 1000")}] end,
              (case when $3 then 'queued' else 'ok' end)::byollm_job_state,
              now() - interval '1 minute', 2000000000,
              case when $3 then null else '{"outcome":"ok","text":"an answer"}'::jsonb end,
              now(), now()
         from generate_series($1::int, $2::int - 1) g`,
      [lo, hi, backlog],
    );
  }
  await client.query("vacuum analyze byollm_jobs");
}

export async function bytesPerJob(client) {
  const { rows } = await client.query(
    "select pg_total_relation_size('byollm_jobs')::float8 as bytes, (select count(*) from byollm_jobs)::float8 as n",
  );
  return rows[0].n > 0 ? rows[0].bytes / rows[0].n : null;
}

// ------------------------------------------------------------------ the stores

export function startStandIn(url) {
  return new Promise((resolve, reject) => {
    const child = fork(fileURLToPath(new URL("./standin-process.mjs", import.meta.url)), [url, SECRET], { stdio: "inherit" });
    child.once("message", (m) => resolve({ url: m.url, pid: child.pid, close: () => child.disconnect() }));
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`the stand-in exited (${code})`)));
  });
}

/** A supabase-js client on the stand-in whose requests are counted. */
export function countedClient(standInUrl, counter) {
  const fetchCounted = (...args) => {
    counter.n++;
    return fetch(...args);
  };
  return createClient(standInUrl, signJwt({ role: "service_role" }, SECRET), {
    auth: { persistSession: false, autoRefreshToken: false },
    realtime: { transport: NoRealtimeHere },
    global: { fetch: fetchCounted },
  });
}

/** A node-postgres pool whose queries are counted. */
export function countedPool(url, counter) {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on("error", () => undefined);
  const query = pool.query.bind(pool);
  pool.query = (...args) => {
    counter.n++;
    return query(...args);
  };
  return pool;
}

// ------------------------------------------------------------------ one point

const pct = (xs, p) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/**
 * Full cycles for up to `budgetMs` (at least `minJobs`, at most `maxJobs`).
 * `site`: {impl, store, counter, owner, ensureOwner}.
 */
export async function cycles(site, { budgetMs, minJobs, maxJobs, dataDir, standInPid }) {
  const { impl, store, counter } = site;
  const siteKeys = impl.generateSiteKeys();
  const app = new impl.ByollmApp({ store, siteKeys });
  const handler = impl.createFetchHandler({ store, siteKeys, verificationUrl: `${ORIGIN}/pair` });
  const lat = Object.fromEntries(ENDPOINTS.map((e) => [e, []]));
  const trips = Object.fromEntries(ENDPOINTS.map((e) => [e, 0]));
  let handlerMs = 0;
  // The server's CPU: measured around each handler and app call (the loop
  // waits on each, so nothing of the device's runs inside).
  let serverCpuUs = 0;
  const cpuOf = async (work) => {
    const c0 = process.cpuUsage();
    const out = await work();
    const c = process.cpuUsage(c0);
    serverCpuUs += c.user + c.system;
    return out;
  };
  const timedHandler = async (request) => {
    const endpoint = new URL(request.url).pathname.split("/").pop();
    const before = counter.n;
    const t0 = performance.now();
    const response = await cpuOf(() => handler(request));
    const ms = performance.now() - t0;
    handlerMs += ms;
    lat[endpoint]?.push(ms);
    trips[endpoint] += counter.n - before;
    return response;
  };
  const device = new Device(timedHandler);
  await device.pair(app, site.owner);
  // One signed call before the clock starts (a daemon heartbeats on start).
  await device.heartbeat();
  for (const e of ENDPOINTS) {
    lat[e].length = 0;
    trips[e] = 0;
  }
  const timed = async (name, work) => {
    const before = counter.n;
    const t0 = performance.now();
    const out = await cpuOf(work);
    lat[name].push(performance.now() - t0);
    trips[name] += counter.n - before;
    return out;
  };

  let deviceMs = 0;
  const deviceCall = async (work) => {
    const h0 = handlerMs;
    const t0 = performance.now();
    const out = await work();
    deviceMs += performance.now() - t0 - (handlerMs - h0);
    return out;
  };

  serverCpuUs = 0;
  const cpu0 = process.cpuUsage();
  const pg0 = postgresCpu(dataDir);
  const si0 = standInPid ? processCpu(standInPid) : null;
  const start = performance.now();
  let jobs = 0;
  while (jobs < maxJobs && (jobs < minJobs || performance.now() - start < budgetMs)) {
    const handle = await timed("enqueue", () => app.enqueue({ kind: "llm.generate", payload: { prompt: PROMPT }, owner: site.owner }));
    const claim = await deviceCall(() => device.claim());
    const stub = claim.body.jobs?.[0];
    if (claim.status !== 200 || stub?.id !== handle.id) throw new Error(`claim answered ${claim.status} ${JSON.stringify(claim.body)}`);
    const fetched = await deviceCall(() => device.fetchJob(stub));
    if (fetched.status !== 200) throw new Error(`fetch answered ${fetched.status}`);
    await deviceCall(() => device.open(stub, fetched.body.envelope));
    const beat = await deviceCall(() => device.heartbeat([{ jobId: stub.id, leaseId: stub.lease.id }]));
    if (beat.status !== 200 || beat.body.lost.length !== 0) throw new Error(`heartbeat answered ${beat.status}`);
    const text = `done ${stub.id}`;
    const result = await deviceCall(() => device.result(stub, text));
    if (result.body?.accepted !== true) throw new Error(`result answered ${JSON.stringify(result.body)}`);
    const delivered = await timed("app.result", () => app.result(handle.id));
    if (delivered?.state !== "ok" || delivered.outcome?.text !== text) throw new Error(`the job ended ${JSON.stringify(delivered)}`);
    jobs++;
  }
  const cpu = process.cpuUsage(cpu0);
  const pg1 = postgresCpu(dataDir);
  const si1 = standInPid ? processCpu(standInPid) : null;

  const sum = (xs) => xs.reduce((a, b) => a + b, 0);
  const serverMs = sum(CYCLE.flatMap((e) => lat[e]));
  return {
    jobs,
    jobsPerSec: (jobs * 1000) / serverMs,
    p50: Object.fromEntries(ENDPOINTS.map((e) => [e, pct(lat[e], 50)])),
    p99: Object.fromEntries(ENDPOINTS.map((e) => [e, pct(lat[e], 99)])),
    trips: Object.fromEntries(ENDPOINTS.map((e) => [e, trips[e] / jobs])),
    tripsPerCycle: sum(CYCLE.map((e) => trips[e])) / jobs,
    nodeCpuMs: ((cpu.user + cpu.system) / 1000 - deviceMs) / jobs,
    serverCpuMs: serverCpuUs / 1000 / jobs,
    pgCpuMs: pg0 === null || pg1 === null ? null : ((pg1 - pg0) * 1000) / jobs,
    postgrestCpuMs: si0 === null || si1 === null ? null : ((si1 - si0) * 1000) / jobs,
  };
}

// ------------------------------------------------------------------ the section

export async function run({
  quick = false,
  sizes = quick ? [0, 10_000] : [0, 10_000, 100_000, 1_000_000],
  populations = ["backlog", "history"],
  budgetMs = quick ? 2_000 : 6_000,
  maxJobs = quick ? 50 : 400,
  minJobs = 3,
  concurrentJobs = quick ? 500 : 20_000,
  stores = STORES,
  preparedStatements = true,
  log = console.log,
} = {}) {
  const { url: adminUrl, dataDir } = startPostgres();
  const rows = [];
  for (const population of populations) {
    const oursUrl = await createDatabase(adminUrl, `byollm_bench_ours`);
    const refUrl = await createDatabase(adminUrl, `byollm_bench_ref`);
    await migratePostgres({ connectionString: oursUrl, createRoles: true });
    const oursAdmin = new pg.Client({ connectionString: oursUrl });
    const refAdmin = new pg.Client({ connectionString: refUrl });
    await oursAdmin.connect();
    await refAdmin.connect();
    await applyReferenceSchema(refAdmin);
    // The reference's owners reference auth.users.
    await refAdmin.query(`insert into auth.users (id) select ${OWNER_SQL("g")} from generate_series(0, 999) g`);
    const oursStandIn = await startStandIn(oursUrl);
    const refStandIn = await startStandIn(refUrl);
    let stored = 0;
    try {
      for (const size of sizes) {
        if (size > stored) {
          const t0 = performance.now();
          await fill(oursAdmin, population, stored, size);
          await fill(refAdmin, population, stored, size);
          log(`  (filled ${size.toLocaleString("en")} ${population} jobs in ${((performance.now() - t0) / 1000).toFixed(0)} s)`);
          stored = size;
        }
        const point = { population, stored: size, stores: {} };
        for (const name of STORES.filter((n) => stores.includes(n))) {
          const counter = { n: 0 };
          const owner = randomUUID();
          let site;
          let close = async () => undefined;
          let standInPid = null;
          if (name === "ours postgresStore") {
            const pool = countedPool(oursUrl, counter);
            site = { impl: ours, store: postgresStore({ pool, preparedStatements }), counter, owner };
            close = () => pool.end();
          } else if (name === "ours supabaseStore") {
            site = { impl: ours, store: supabaseStore({ client: countedClient(oursStandIn.url, counter) }), counter, owner };
            standInPid = oursStandIn.pid;
          } else {
            await refAdmin.query("insert into auth.users (id) values ($1)", [owner]);
            site = { impl: reference, store: referenceSupabaseStore({ client: countedClient(refStandIn.url, counter) }), counter, owner };
            standInPid = refStandIn.pid;
          }
          try {
            point.stores[name] = await cycles(site, { budgetMs, minJobs, maxJobs, dataDir, standInPid });
          } finally {
            await close();
          }
        }
        point.bytesPerJob = { ours: await bytesPerJob(oursAdmin), reference: await bytesPerJob(refAdmin) };
        rows.push(point);
        log(formatPoint(point));
      }
    } finally {
      oursStandIn.close();
      refStandIn.close();
      await oursAdmin.end();
      await refAdmin.end();
    }
  }
  log(summary(rows));
  if (concurrentJobs > 0) {
    const dbUrl = await createDatabase(adminUrl, "byollm_bench_conc");
    const c = await concurrency({ dbUrl, postgresCpu: () => postgresCpu(dataDir), jobs: concurrentJobs, preparedStatements });
    log(
      `\n  ${c.apps} app processes × ${c.daemons} daemons, ours postgresStore, ${c.jobs.toLocaleString("en")} jobs: ` +
        `${f(c.jobsPerSec)} jobs/s drained; CPU ms/job apps ${f(c.cpuMsPerJob.apps, 2)}, PostgreSQL ${f(c.cpuMsPerJob.postgres, 2)}, ` +
        `daemons ${f(c.cpuMsPerJob.daemons, 2)}; lost ${c.lost}, doubly completed ${c.doublyCompleted}`,
    );
    rows.push({ concurrency: c });
  }
  return rows;
}

// ------------------------------------------------------------------ report

const f = (x, digits = 1) => (x === null || x === undefined || Number.isNaN(x) ? "—" : x >= 100 ? x.toFixed(0) : x.toFixed(digits));
const LABEL = { backlog: "queued for other owners", history: "ended" };

export function formatPoint(p) {
  const lines = [`\n  ${p.stored.toLocaleString("en")} stored jobs, ${LABEL[p.population]} (bytes/job: ours ${f(p.bytesPerJob.ours, 0)}, reference ${f(p.bytesPerJob.reference, 0)})`];
  lines.push(`    ${"store".padEnd(24)} ${"jobs".padStart(5)} ${"jobs/s".padStart(7)}  ${"trips/cycle".padStart(11)}  ${"CPU ms/job node · pg · rest".padEnd(27)}  p50 / p99 ms (trips) per endpoint`);
  for (const name of STORES) {
    const s = p.stores[name];
    if (!s) continue;
    const eps = ENDPOINTS.map((e) => `${e} ${f(s.p50[e], 2)}/${f(s.p99[e], 2)} (${f(s.trips[e], 0)})`).join(", ");
    const cpu = `${f(s.nodeCpuMs, 2)} · ${f(s.pgCpuMs, 2)} · ${f(s.postgrestCpuMs, 2)}`;
    lines.push(`    ${name.padEnd(24)} ${String(s.jobs).padStart(5)} ${f(s.jobsPerSec).padStart(7)}  ${f(s.tripsPerCycle, 0).padStart(11)}  ${cpu.padEnd(27)}  ${eps}`);
  }
  return lines.join("\n");
}

/** The Markdown table docs/stores.md shows. */
export function summary(rows) {
  const out = [
    "\n| stored jobs | ours `postgresStore` jobs/s | ours `supabaseStore` jobs/s | reference `supabaseStore` jobs/s | claim p50/p99 ms (pg · supa · ref) | result p50/p99 ms (pg · supa · ref) |",
    "|---|---:|---:|---:|---|---|",
  ];
  for (const p of rows) {
    const s = STORES.map((n) => p.stores[n]);
    const lat = (e) => s.map((x) => `${f(x?.p50[e], 1)}/${f(x?.p99[e], 1)}`).join(" · ");
    out.push(
      `| ${p.stored.toLocaleString("en")} ${LABEL[p.population]} | ${s.map((x) => f(x?.jobsPerSec)).join(" | ")} | ${lat("claim")} | ${lat("result")} |`,
    );
  }
  return out.join("\n");
}

/** `postgres,supabase,reference` → the stores' full names. */
export function storesNamed(list) {
  const short = { postgres: STORES[0], supabase: STORES[1], reference: STORES[2] };
  return list.split(",").map((k) => short[k] ?? k);
}

/** scripts/bench.mjs: this section prints its own tables. */
export const benchRows = () => [];

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (k) => process.argv.find((a) => a.startsWith(`--${k}=`))?.slice(k.length + 3);
  await run({
    quick: process.argv.includes("--quick"),
    ...(arg("sizes") ? { sizes: arg("sizes").split(",").map(Number) } : {}),
    ...(arg("populations") ? { populations: arg("populations").split(",") } : {}),
    ...(arg("budget-ms") ? { budgetMs: Number(arg("budget-ms")) } : {}),
    ...(arg("concurrent-jobs") ? { concurrentJobs: Number(arg("concurrent-jobs")) } : {}),
    ...(arg("stores") ? { stores: storesNamed(arg("stores")) } : {}),
    ...(arg("prepared-statements") ? { preparedStatements: arg("prepared-statements") !== "off" } : {}),
  });
}
