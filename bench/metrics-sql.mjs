// byollm_metrics on PostgreSQL (supabase/migrations/…0800_byollm_metrics.sql)
// at 0 and 1,000,000 stored jobs: the counting call's time against the
// count(*) by state it replaces, and what the counting triggers cost the
// full cycle (ours, postgresStore, bench/stores.mjs's cycle), measured with
// the triggers enabled and disabled, alternated.
//
//   npm run bench -- metrics-sql      (only when named; starts its own PostgreSQL)
import { performance } from "node:perf_hooks";
import pg from "pg";
import { countedPool, createDatabase, cycles, fill, startPostgres } from "./stores.mjs";

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const TRIGGERS = ["byollm_jobs_count_insert", "byollm_jobs_count_delete", "byollm_jobs_count_transition"];

async function timeQuery(client, sql, n) {
  const ms = [];
  for (let i = 0; i < n; i += 1) {
    const t0 = performance.now();
    await client.query(sql);
    ms.push(performance.now() - t0);
  }
  return median(ms);
}

export async function run({ quick = false } = {}) {
  const ours = await import("../dist/index.js");
  const { migratePostgres, postgresStore } = await import("../dist/postgres.js");
  const { url: adminUrl, dataDir } = startPostgres();
  const url = await createDatabase(adminUrl, "byollm_bench_metrics");
  await migratePostgres({ connectionString: url, createRoles: true });
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const rows = [];
  try {
    for (const stored of quick ? [0, 100_000] : [0, 1_000_000]) {
      if (stored > 0) await fill(client, "backlog", 0, stored);
      // Deltas a busy site leaves between two reads: 2,000 transitions.
      await client.query(`update byollm_jobs set state = 'canceled' where id in (select id from byollm_jobs where state = 'queued' limit 1000)`);
      await client.query(`update byollm_jobs set state = 'queued' where state = 'canceled'`);
      const first = await timeQuery(client, "select byollm_metrics(0, 35000)", 1);
      const metricsMs = await timeQuery(client, "select byollm_metrics(0, 35000)", quick ? 10 : 100);
      const countMs = await timeQuery(client, "select state, count(*) from byollm_jobs group by state", quick ? 2 : 5);
      console.log(`  ${stored.toLocaleString("en")} stored jobs: byollm_metrics ${metricsMs.toFixed(2)} ms (the first read, which folds the deltas written since the last: ${first.toFixed(2)} ms); count(*) by state ${countMs.toFixed(1)} ms`);
      rows.push({ name: `${stored.toLocaleString("en")} stored jobs: byollm_metrics, ms (median)`, ref: countMs, ours: metricsMs, unit: "ms", ratio: countMs / metricsMs, target: "≤5 ms" });

      // The full cycle with the counting triggers on and off, alternated.
      const runs = { on: [], off: [] };
      for (let round = 0; round < (quick ? 1 : 4); round += 1) {
        for (const variant of round % 2 === 0 ? ["on", "off"] : ["off", "on"]) {
          for (const t of TRIGGERS) await client.query(`alter table byollm_jobs ${variant === "on" ? "enable" : "disable"} trigger ${t}`);
          const counter = { n: 0 };
          const pool = countedPool(url, counter);
          const store = postgresStore({ pool, preparedStatements: true });
          const owner = `00000000-0000-4000-8000-${String(900_000 + round).padStart(12, "0")}`;
          const point = await cycles({ impl: ours, store, counter, owner }, { budgetMs: quick ? 1500 : 6000, minJobs: 20, maxJobs: 5000, dataDir });
          runs[variant].push(point);
          await pool.end();
        }
      }
      for (const t of TRIGGERS) await client.query(`alter table byollm_jobs enable trigger ${t}`);
      const on = median(runs.on.map((p) => p.jobsPerSec));
      const off = median(runs.off.map((p) => p.jobsPerSec));
      const pgOn = median(runs.on.map((p) => p.pgCpuMs ?? NaN));
      const pgOff = median(runs.off.map((p) => p.pgCpuMs ?? NaN));
      console.log(`  ${stored.toLocaleString("en")} stored jobs: cycle ${on.toFixed(1)} jobs/s with the counting triggers, ${off.toFixed(1)} without; PostgreSQL CPU ${pgOn.toFixed(2)} / ${pgOff.toFixed(2)} ms a job`);
      rows.push({ name: `${stored.toLocaleString("en")} stored jobs: full cycle, counting triggers on / off`, ref: off, ours: on, unit: "jobs/s", ratio: on / off });
    }
  } finally {
    await client.end();
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const r of await run({ quick: process.argv.includes("--quick") })) console.log(JSON.stringify(r));
}
