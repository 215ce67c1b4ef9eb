// How soon `handle.result()` hears that a job ended on PostgreSQL.
//
//   npm run bench -- delivery            (on a PostgreSQL it starts itself, as the stores section does)
//
// One app waits on `handle.result()` while "another process" (a second pool,
// as another app instance would be) claims and completes the job through
// its own postgresStore. The commit happens somewhere inside that completing
// call, so each wait is timed from the call's start (an upper bound on the
// delay after the commit) and from its return (a lower bound).
//
//   ours       postgresDelivery (LISTEN/NOTIFY on the commit)
//   reference  @byollm/server 0.1.1's ByollmApp with its own delivery (it
//              polls the job), over the same postgresStore
import { performance } from "node:perf_hooks";
import { randomUUID } from "node:crypto";
import pg from "pg";
import * as reference from "@byollm/server";
import * as ours from "../dist/index.js";
import { postgresStore, postgresDelivery, migratePostgres } from "../dist/postgres.js";
import { startPostgres, createDatabase } from "./stores.mjs";
import { HTTP_CAP as CAP, pairRunner, completeClaimed } from "../__test__/helpers/sql-jobs.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** `jobs` waits, one at a time: [from the completing call's start, from its return] in ms. */
async function waits(app, other, runner, owner, jobs) {
  const fromStart = [];
  const fromReturn = [];
  for (let i = 0; i < jobs; i++) {
    const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner });
    let resolvedAt = null;
    const waiting = handle.result({ timeoutMs: 30_000 }).then((r) => {
      resolvedAt = performance.now();
      return r;
    });
    // Let the wait settle into its steady state (listening, or between polls).
    await sleep(50 + Math.random() * 100);
    const [claimed] = await other.claim({ runnerId: runner.id, runnerOwner: owner, capabilities: [CAP], max: 1, leaseMs: 60_000, now: Date.now() });
    const started = performance.now();
    const done = await completeClaimed(other, claimed, runner, owner);
    const returned = performance.now();
    if (!done.accepted) throw new Error("the completion was not accepted");
    const r = await waiting;
    if (r.state !== "ok") throw new Error(`the wait ended ${r.state}`);
    fromStart.push(resolvedAt - started);
    fromReturn.push(resolvedAt - returned);
  }
  return { fromStart, fromReturn };
}

export async function run({ quick = false } = {}) {
  const { url: adminUrl } = startPostgres();
  const url = await createDatabase(adminUrl, "byollm_bench_delivery");
  await migratePostgres({ connectionString: url });
  const poolA = new pg.Pool({ connectionString: url, max: 3 });
  const poolB = new pg.Pool({ connectionString: url, max: 2 });
  const jobs = quick ? 10 : 40;
  try {
    const other = postgresStore({ pool: poolB });
    const siteKeys = ours.generateSiteKeys();
    const measured = {};
    for (const [name, app] of [
      ["ours", new ours.ByollmApp({ store: postgresStore({ pool: poolA }), siteKeys, delivery: postgresDelivery({ pool: poolA }) })],
      ["reference", new reference.ByollmApp({ store: postgresStore({ pool: poolA }), siteKeys })],
    ]) {
      const owner = randomUUID();
      const runner = await pairRunner(other, owner);
      measured[name] = await waits(app, other, runner, owner, jobs);
    }
    const row = (label, pick, p) => ({
      name: `handle.result() after the result's commit, p${p} ${label}`,
      ref: pct(measured.reference[pick], p),
      ours: pct(measured.ours[pick], p),
      unit: "ms",
      ratio: pct(measured.reference[pick], p) / Math.max(0.01, pct(measured.ours[pick], p)),
      ...(p === 50 && pick === "fromStart" ? { target: "≤ 20 ms" } : {}),
    });
    console.log(`  ${jobs} jobs each; ours: postgresDelivery, reference: its own (polling) delivery, both over postgresStore`);
    console.log("  timed from the completing call's start (≥ the delay after the commit) and from its return (≤ it)");
    return [
      row("(from the call's start)", "fromStart", 50),
      row("(from the call's start)", "fromStart", 99),
      row("(from the call's return)", "fromReturn", 50),
    ];
  } finally {
    await poolA.end();
    await poolB.end();
  }
}
