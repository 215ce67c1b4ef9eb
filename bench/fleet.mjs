// What an idle fleet of daemons costs (issue 45).
//
//   npm run bench -- fleet            the idle tick on every store, a full cycle's Node
//                                     CPU on postgresStore vs MemoryStore, the fleet run
//   npm run bench -- fleet --quick    fewer rounds and a fleet of 2,000 (rough numbers)
//
// The idle tick is what byollm@0.1.1 sends on its poll ladder's top rung every
// ~10 s: a signed `heartbeat` naming no leases, then a signed empty `claim`.
// 200 runners per store, paired through the HTTP flow; the requests go
// in-process through each implementation's createFetchHandler. Every request
// is signed before its window (with @byollm/protocol, the daemon's library),
// so the window holds the server's work only. Time is a fake clock (the app's
// and the handler's `now`; each request signed for the instant it is served
// at): each runner ticks every 10 s of it, so a SQL store that writes
// liveness every 45 s shows it on every 5th tick, as in production.
//
// Conditions: nothing else stored; and 100,000 jobs queued for 1,000 other
// owners (bench/stores.mjs's backlog, filled with SQL; bench/full-cycle.mjs's
// for the in-memory stores) with 20 jobs/s enqueued for other owners through
// the store's own app during the window. The stream's own cost is measured
// alone right after (20 jobs at the same pace, no ticks) and subtracted, job
// for job.
//
// Per tick, medians of the rounds:
//   Node CPU    process.cpuUsage() over the window, less the stream's enqueue calls
//   PG CPU      the database's backends (every pg_stat_activity row of the bench's
//               database: the store's pool, the PostgREST stand-in's pool, the
//               notification connection), /proc/<pid>/schedstat; background
//               processes (WAL writer, autovacuum) are not counted
//   writes      pg_stat_user_tables n_tup_ins + n_tup_upd + n_tup_del on
//               byollm_runners and byollm_jobs (the reference's tables have the
//               same names); each window ends 1.1 s after its last request and
//               with a statement on every pooled connection, so every backend
//               has flushed its counts (PostgreSQL 15 flushes at most once a
//               second; the stand-in's through a bench-only function, bench_settle)
//   PostgREST   requests the store's supabase-js client sent
// Ours tick 1,000 times a round (each runner 5 times); a reference store whose
// tick is slow (its claims scan the backlog) as many as fit in ~4 s, at least
// 10. postgresStore runs with `notifications: true` and `false`; a build whose
// store has no channel (sqlStorePaths(store).idle) says so under the table,
// and the header says whether the engine has its idle memo (Engine#idleKey).
// PostgreSQL: bench/stores.mjs's (BYOLLM_BENCH_PG_DIR / _PORT pick another).
// Then the reference's figure and the ratio (reference / ours: higher is better).
import { performance } from "node:perf_hooks";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import pg from "pg";
import * as protocol from "@byollm/protocol";
import * as reference from "@byollm/server";
import { supabaseStore as referenceSupabaseStore } from "@byollm/server/supabase";
import * as ours from "../dist/index.js";
import { postgresStore, migratePostgres } from "../dist/postgres.js";
import { supabaseStore } from "../dist/supabase/index.js";
import { sqlStorePaths } from "../dist/sql-store.js";
import { native } from "../dist/native.js";
import { applyReferenceSchema } from "../__test__/helpers/reference-schema.mjs";
import { CAP, Device, ORIGIN } from "../__test__/helpers/device.mjs";
import { countedClient, countedPool, createDatabase, cycles, fill, processCpu, startPostgres, startStandIn } from "./stores.mjs";
import { fillStore } from "./full-cycle.mjs";
import { backendCpu, cpuSince, fleetRun, loadavg, rowWrites, touchPool } from "./fleet-run.mjs";

const RUNNERS = 200;
const TICK_MS = 10_000;
const BACKLOG = 100_000;
const STREAM_PER_SEC = 20;
const OWNER = (i) => `00000000-0000-4000-8000-${i.toString(16).padStart(12, "0")}`;
const STORES = [
  "ours MemoryStore",
  "reference MemoryStore",
  "ours postgresStore, notifications on",
  "ours postgresStore, notifications off",
  "ours supabaseStore",
  "reference supabaseStore",
];

const median = (xs) => {
  const s = xs.filter((x) => x !== null && x !== undefined && !Number.isNaN(x)).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// ------------------------------------------------------------------ the sites

/** A signed request for `t` on the fake clock, built before the window. */
function signed(device, endpoint, body, t) {
  const text = JSON.stringify(body);
  const sig = protocol.signRequest(device.keys, { endpoint, runnerId: device.runnerId, issuedAt: t, body: text });
  return {
    t,
    url: `${ORIGIN}/byollm/${endpoint}`,
    headers: { "content-type": "application/json", "x-byollm-runner": sig.runnerId, "x-byollm-issued-at": String(sig.issuedAt), "x-byollm-signature": sig.signature },
    text,
  };
}

/** One store's site: its app and handler on its own fake clock, `RUNNERS` paired devices. */
async function makeSite(name, env) {
  const clock = { t: Date.now() };
  const now = () => clock.t;
  const counter = { n: 0 };
  const site = { name, clock, counter, cursor: 0, owner: randomUUID(), devices: [], db: null, settle: async () => undefined, close: async () => undefined };
  if (name === "ours MemoryStore" || name === "reference MemoryStore") {
    site.impl = name.startsWith("ours") ? ours : reference;
    site.store = new site.impl.MemoryStore();
  } else if (name.startsWith("ours postgresStore")) {
    site.impl = ours;
    const pool = countedPool(env.ours.url, counter);
    const notifications = name.endsWith("on");
    site.store = postgresStore({ pool, notifications });
    site.db = env.ours;
    site.settle = () => touchPool(pool);
    site.close = async () => {
      await site.store.close?.();
      await pool.end();
    };
    site.channel = sqlStorePaths(site.store)?.idle !== undefined;
    site.note = notifications && !site.channel ? "the store has no notification channel in this build (same as off)" : undefined;
  } else {
    const ref = name.startsWith("reference");
    site.impl = ref ? reference : ours;
    const standIn = ref ? env.refStandIn : env.oursStandIn;
    site.store = ref ? referenceSupabaseStore({ client: countedClient(standIn.url, counter) }) : supabaseStore({ client: countedClient(standIn.url, counter) });
    site.db = ref ? env.ref : env.ours;
    site.standInPid = standIn.pid;
    // A statement on each of the stand-in's 4 connections: 8 calls at once,
    // each holding its connection 50 ms (bench_settle), uncounted.
    const quiet = countedClient(standIn.url, { n: 0 });
    site.settle = async () => {
      for (const { error } of await Promise.all(Array.from({ length: 8 }, () => quiet.rpc("bench_settle")))) if (error) throw new Error(error.message);
    };
    if (ref) await env.ref.admin.query("insert into auth.users (id) values ($1)", [site.owner]);
  }
  site.app = new site.impl.ByollmApp({ store: site.store, siteKeys: env.siteKeys, now });
  site.handler = site.impl.createFetchHandler({ store: site.store, siteKeys: env.siteKeys, verificationUrl: `${ORIGIN}/pair`, now });
  // Approvals spread over 50 s of the clock, so the runners' liveness writes fall due on different ticks.
  const t0 = clock.t;
  for (let j = 0; j < RUNNERS; j++) {
    clock.t = t0 + Math.round((j * 5 * TICK_MS) / RUNNERS);
    const device = new Device(site.handler, [CAP], { now });
    await device.pair(site.app, site.owner);
    if (!device.runnerId) throw new Error(`${name}: pairing ${j} failed`);
    site.devices.push(device);
  }
  clock.t = t0 + 5 * TICK_MS;
  return site;
}

/** The next `count` ticks, the runners taking turns, signed ahead, the clock 10 s / RUNNERS apart: each runner ticks every 10 s. */
function planTicks(site, count) {
  const step = TICK_MS / RUNNERS;
  const plan = [];
  for (let i = 0; i < count; i++) {
    const device = site.devices[(site.cursor + i) % RUNNERS];
    const t = site.clock.t + Math.round((i + 1) * step);
    plan.push([
      signed(device, "heartbeat", { protocolVersion: "2", runnerId: device.runnerId, daemonVersion: "0.1.1", capabilities: [CAP], activeLeases: [] }, t),
      signed(device, "claim", { protocolVersion: "2", runnerId: device.runnerId, capabilities: [CAP], max: 1 }, t + 1),
    ]);
  }
  site.cursor += count;
  return plan;
}

/** Enqueue one job for another owner through the site's app; its costs go to `stream`. */
async function streamJob(site, stream) {
  const c0 = process.cpuUsage();
  const n0 = site.counter.n;
  await site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p".repeat(1000) }, owner: OWNER(stream.jobs % 1000), ttlMs: 3_600_000 });
  const c = process.cpuUsage(c0);
  stream.nodeMs += (c.user + c.system) / 1000;
  stream.requests += site.counter.n - n0;
  stream.jobs++;
}

/** Measure `work` on a site: Node CPU, its database's backends, row writes, PostgREST requests. */
async function measured(site, work) {
  const pg0 = site.db ? await backendCpu(site.db.admin) : null;
  const w0 = site.db ? await rowWrites(site.db.admin) : null;
  const rest0 = site.standInPid ? processCpu(site.standInPid) : null;
  const n0 = site.counter.n;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const out = await work();
  const wallMs = performance.now() - t0;
  const c = process.cpuUsage(c0);
  const requests = site.counter.n - n0;
  const restMs = site.standInPid ? (processCpu(site.standInPid) - rest0) * 1000 : null;
  let pgMs = null;
  let writes = null;
  if (site.db) {
    pgMs = await cpuSince(site.db.admin, pg0);
    await sleep(1_100);
    await site.settle();
    writes = (await rowWrites(site.db.admin)) - w0;
  }
  return { out, wallMs, nodeMs: (c.user + c.system) / 1000, pgMs, writes, requests, restMs };
}

/** One round: the ticks (with the stream when `streaming`), then the stream alone. Figures per tick. */
async function round(site, count, streaming) {
  const plan = planTicks(site, count);
  const stream = { jobs: 0, nodeMs: 0, requests: 0 };
  const answers = [];
  const window = await measured(site, async () => {
    const start = performance.now();
    for (const [beat, claim] of plan) {
      while (streaming && stream.jobs < ((performance.now() - start) / 1000) * STREAM_PER_SEC) await streamJob(site, stream);
      for (const r of [beat, claim]) {
        site.clock.t = r.t;
        const res = await site.handler(new Request(r.url, { method: "POST", headers: r.headers, body: r.text }));
        answers.push(res.status, await res.text());
      }
      // Timers (the stream's pace, a store's flush) get their turn as on a server.
      if (answers.length % 64 === 0) await new Promise(setImmediate);
    }
  });
  site.clock.t = plan.at(-1)[1].t;
  for (let i = 0; i < answers.length; i += 2) {
    const body = JSON.parse(answers[i + 1]);
    const beat = i % 4 === 0;
    if (answers[i] !== 200 || (beat ? body.lost?.length !== 0 : body.jobs?.length !== 0)) {
      throw new Error(`${site.name}: an idle ${beat ? "heartbeat" : "claim"} answered ${answers[i]} ${answers[i + 1]}`);
    }
  }
  // The stream alone: as many jobs at the same pace, no ticks.
  let alone = null;
  if (streaming) {
    const solo = { jobs: 0, nodeMs: 0, requests: 0 };
    alone = await measured(site, async () => {
      const start = performance.now();
      while (solo.jobs < STREAM_PER_SEC) {
        await sleep(Math.max(0, start + (solo.jobs * 1000) / STREAM_PER_SEC - performance.now()));
        await streamJob(site, solo);
      }
    });
    alone.jobs = solo.jobs;
  }
  const ticks = plan.length;
  const per = (x, aloneX) => (x === null ? null : (x - (alone && aloneX !== null ? (aloneX / alone.jobs) * stream.jobs : 0)) / ticks);
  return {
    ticks,
    streamed: stream.jobs,
    load: loadavg(),
    nodeMs: per(window.nodeMs - stream.nodeMs, null),
    pgMs: per(window.pgMs, alone?.pgMs ?? null),
    writes: per(window.writes, alone?.writes ?? null),
    requests: site.standInPid ? (window.requests - stream.requests) / ticks : null,
    restMs: per(window.restMs, alone?.restMs ?? null),
    wallMs: window.wallMs / ticks,
  };
}

// ------------------------------------------------------------------ the idle tick

async function idleTick({ quick, log, stores }) {
  const { url: adminUrl, dataDir } = startPostgres();
  const env = { siteKeys: ours.generateSiteKeys(), dataDir };
  const oursUrl = await createDatabase(adminUrl, "byollm_bench_fleet");
  const refUrl = await createDatabase(adminUrl, "byollm_bench_fleet_ref");
  await migratePostgres({ connectionString: oursUrl, createRoles: true });
  env.ours = { url: oursUrl, admin: new pg.Client({ connectionString: oursUrl }) };
  env.ref = { url: refUrl, admin: new pg.Client({ connectionString: refUrl }) };
  await env.ours.admin.connect();
  await env.ref.admin.connect();
  await applyReferenceSchema(env.ref.admin);
  for (const { admin } of [env.ours, env.ref]) await admin.query("create function bench_settle() returns void language sql as $$ select pg_sleep(0.05) $$");
  await env.ref.admin.query(`insert into auth.users (id) select ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid from generate_series(0, 999) g`);
  env.oursStandIn = await startStandIn(oursUrl);
  env.refStandIn = await startStandIn(refUrl);
  const rounds = quick ? 1 : 3;
  const sites = [];
  const results = {};
  try {
    for (const name of stores) {
      const t0 = performance.now();
      sites.push(await makeSite(name, env));
      log(`  (${name}: ${RUNNERS} runners paired in ${((performance.now() - t0) / 1000).toFixed(1)} s)`);
    }
    for (const condition of ["0 stored", "100,000 queued for others + 20 jobs/s"]) {
      const backlog = condition !== "0 stored";
      if (backlog) {
        const t0 = performance.now();
        await fill(env.ours.admin, "backlog", 0, BACKLOG);
        await fill(env.ref.admin, "backlog", 0, BACKLOG);
        for (const site of sites.filter((s) => !s.db)) await fillStore(site, BACKLOG, "backlog");
        log(`  (filled ${BACKLOG.toLocaleString("en")} queued jobs per store in ${((performance.now() - t0) / 1000).toFixed(0)} s)`);
      }
      // Warm-up (JIT, plans; at first, the liveness every runner wrote at
      // pairing), which also times a tick: a reference store that takes long
      // (its claims scan the backlog) ticks fewer times a round, never less
      // than 10 (it writes on every tick anyway). Ours tick 1,000 times a
      // round, each runner 5 times: one liveness write due per runner.
      const count = new Map();
      for (const site of sites) {
        const warm = await round(site, backlog ? 20 : RUNNERS, false);
        const full = (quick ? 2 : 5) * RUNNERS;
        count.set(site, site.impl === ours || warm.wallMs * full <= 6_000 ? full : Math.max(10, Math.floor(4_000 / warm.wallMs)));
      }
      const runs = Object.fromEntries(sites.map((s) => [s.name, []]));
      for (let r = 0; r < rounds; r++) {
        // Each round starts with the next store, so none always runs first.
        for (const site of [...sites.slice(r % sites.length), ...sites.slice(0, r % sites.length)]) {
          const got = await round(site, count.get(site), backlog);
          runs[site.name].push(got);
          log(`    round ${r + 1} ${site.name.padEnd(38)} load ${got.load}: ${got.ticks} ticks, node ${f(got.nodeMs, 3)} ms, pg ${f(got.pgMs, 3)} ms, writes ${f(got.writes, 3)}, PostgREST ${f(got.requests, 2)}`);
        }
      }
      results[condition] = Object.fromEntries(
        sites.map((s) => [
          s.name,
          Object.fromEntries(["nodeMs", "pgMs", "writes", "requests", "restMs", "wallMs", "ticks", "streamed"].map((k) => [k, median(runs[s.name].map((x) => x[k]))])),
        ]),
      );
    }
  } finally {
    for (const s of sites) await s.close();
    env.oursStandIn.close();
    env.refStandIn.close();
    await env.ours.admin.end();
    await env.ref.admin.end();
  }
  return { results, notes: Object.fromEntries(sites.filter((s) => s.note).map((s) => [s.name, s.note])) };
}

// ------------------------------------------------------------------ a full cycle's Node CPU

export async function cycleCost({ quick, log }) {
  const { url: adminUrl, dataDir } = startPostgres();
  const url = await createDatabase(adminUrl, "byollm_bench_fleet_cycle");
  await migratePostgres({ connectionString: url, createRoles: true });
  const memory = [];
  const postgres = [];
  for (let r = 0; r < (quick ? 2 : 4); r++) {
    const counter = { n: 0 };
    const pool = countedPool(url, counter);
    const opts = { budgetMs: quick ? 500 : 1_500, minJobs: 20, maxJobs: 2_000, dataDir };
    const p = await cycles({ impl: ours, store: postgresStore({ pool }), counter, owner: randomUUID() }, opts);
    await pool.end();
    const m = await cycles({ impl: ours, store: new ours.MemoryStore(), counter: { n: 0 }, owner: randomUUID() }, opts);
    // The first round warms both (JIT, plans): not counted.
    if (r === 0 && !quick) continue;
    postgres.push(p.serverCpuMs);
    memory.push(m.serverCpuMs);
    log(`    round ${r} load ${loadavg()}: Node CPU per job postgresStore ${f(p.serverCpuMs, 3)} ms, MemoryStore ${f(m.serverCpuMs, 3)} ms`);
  }
  return { postgres: median(postgres), memory: median(memory) };
}

// ------------------------------------------------------------------ report

const f = (x, digits = 2) => (x === null || x === undefined || Number.isNaN(x) ? "—" : x >= 100 ? x.toFixed(0) : x.toFixed(digits));

const TARGETS = {
  "ours MemoryStore": { nodeMs: "≤ 0.15" },
  "ours postgresStore, notifications on": { nodeMs: "≤ 0.2", pgMs: "≤ 0.1", writes: "≤ 0.2" },
  "ours postgresStore, notifications off": { nodeMs: "≤ 0.2", pgMs: "≤ 0.5", writes: "≤ 0.2" },
  "ours supabaseStore": { requests: "≤ 0.2 (with Realtime)" },
};

function table(results, notes) {
  const lines = [];
  for (const [condition, byStore] of Object.entries(results)) {
    lines.push(`\n  idle tick (heartbeat, no leases + empty claim), ${RUNNERS} runners, ${condition}; per tick, medians`);
    lines.push(`    ${"store".padEnd(38)} ${"Node CPU ms".padStart(11)} ${"PG CPU ms".padStart(10)} ${"row writes".padStart(10)} ${"PostgREST".padStart(9)} ${"rest CPU ms".padStart(11)}  vs reference (Node · PG · PostgREST)  targets`);
    for (const [name, s] of Object.entries(byStore)) {
      const refName = name.startsWith("ours MemoryStore") ? "reference MemoryStore" : name.startsWith("ours") ? "reference supabaseStore" : null;
      const ref = refName ? byStore[refName] : null;
      const ratio = (k) => (ref && ref[k] && s[k] ? `${f(ref[k] / s[k])}x` : "—");
      const vs = ref ? `${ratio("nodeMs")} · ${ratio("pgMs")} · ${ratio("requests")}` : "";
      const t = TARGETS[name] ? Object.entries(TARGETS[name]).map(([k, v]) => `${k} ${v}`).join(", ") : "";
      lines.push(`    ${name.padEnd(38)} ${f(s.nodeMs, 3).padStart(11)} ${f(s.pgMs, 3).padStart(10)} ${f(s.writes, 3).padStart(10)} ${f(s.requests, 2).padStart(9)} ${f(s.restMs, 3).padStart(11)}  ${vs.padEnd(36)}  ${t}`);
    }
  }
  for (const [name, note] of Object.entries(notes)) lines.push(`    (${name}: ${note})`);
  return lines.join("\n");
}

const SIZING = [
  ["ours postgresStore, notifications on", "`postgresStore`, notifications on"],
  ["ours postgresStore, notifications off", "`postgresStore`, no notification channel"],
  ["ours supabaseStore", "`supabaseStore` (PostgREST)"],
  ["ours MemoryStore", "`MemoryStore` (one process)"],
];
const FLEETS = [1_000, 10_000, 100_000];

/**
 * docs/operations.md's sizing table from one condition's per-tick figures: N
 * daemons tick N / 10 times a second; cores = ticks/s × ms per tick / 1000.
 */
export function sizing(byStore) {
  const n = (x) => x.toLocaleString("en");
  const cores = (ms, perSec) => (ms === null ? "—" : ((ms * perSec) / 1000).toFixed(ms * perSec >= 10_000 ? 1 : 2));
  const out = [
    "(each daemon cell: PostgreSQL cores · row writes/s · Node cores)\n",
    `| store | per idle tick: Node CPU ms · PostgreSQL CPU ms · row writes | ${FLEETS.map((d) => `${n(d)} daemons (${n(d / 10)} ticks/s)`).join(" | ")} |`,
    `|---|---|${FLEETS.map(() => "---").join("|")}|`,
  ];
  for (const [key, label] of SIZING) {
    const s = byStore[key];
    if (!s) continue;
    const rest = s.requests === null ? "" : ` · ${f(s.requests, 1)} PostgREST requests`;
    out.push(
      `| ${label} | ${f(s.nodeMs, 3)} · ${f(s.pgMs, 3)} · ${f(s.writes, 2)}${rest} | ${FLEETS.map((d) => `${cores(s.pgMs, d / 10)} · ${s.writes === null ? "—" : n(Math.round((s.writes * d) / 10))} · ${cores(s.nodeMs, d / 10)}`).join(" | ")} |`,
    );
  }
  return out.join("\n");
}

export async function run({ quick = false, log = console.log, stores = STORES } = {}) {
  const memo = typeof native.Engine?.prototype?.idleKey === "function";
  log(`  machine load at start: ${loadavg()}; engine idle memo in this build: ${memo ? "yes" : "no"}`);
  const tick = await idleTick({ quick, log, stores });
  log(table(tick.results, tick.notes));
  for (const [condition, byStore] of Object.entries(tick.results)) log(`\n  sizing (docs/operations.md), ${condition}:\n${sizing(byStore)}`);
  log(`\n  full cycle, Node CPU per job (bench/stores.mjs's cycles: process CPU inside the handler and app calls), postgresStore (default options) vs MemoryStore:`);
  const cycle = await cycleCost({ quick, log });
  log(`    postgresStore ${f(cycle.postgres, 3)} ms, MemoryStore ${f(cycle.memory, 3)} ms: ${f(cycle.postgres / cycle.memory)}x (target ≤ 2.5x)`);
  log(`\n  fleet run (bench/fleet-run.mjs), load ${loadavg()}:`);
  const fleet = await fleetRun({ quick, log });
  log(`  machine load at end: ${loadavg()}`);
  return { memo, tick, cycle, fleet };
}

/** scripts/bench.mjs: this section prints its own tables. */
export const benchRows = () => [];

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const only = process.argv.find((a) => a.startsWith("--stores="))?.slice(9);
  await run({ quick: process.argv.includes("--quick"), ...(only ? { stores: STORES.filter((s) => only.split(",").some((o) => s.includes(o))) } : {}) });
}
