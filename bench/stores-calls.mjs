// What one job cycle costs on postgresStore, call by call, without the
// engine, the crypto or HTTP: the store's own SQL calls (the engine's
// operations through `sqlStorePaths(store).operations`, `create`, the app's
// `sweepGet`) on one connection, cycle after cycle in the engine's order,
// each call timed on its own:
//
//   PostgreSQL CPU per call   the connection's backend process
//                             (/proc/<pid>/schedstat, nanoseconds)
//   Node CPU per call         process.cpuUsage() (node-postgres, the store's
//                             argument and answer handling)
//   bytes per answer          the answer's text
//
// and the floor: Node and PostgreSQL CPU of a node-postgres round trip of
// `select 1` (a prepared statement, as the store's calls are).
//
//   node bench/stores-calls.mjs [--jobs=500] [--rounds=3] [--statements] label=DIR [label=DIR ...]
//
// --statements prints pg_stat_statements (calls, plans, ms per cycle) when
// the server loads it with pg_stat_statements.track = all and
// track_planning = on.
//
// DIR is a checkout with dist/ built; its supabase/migrations are applied to
// a database of its own on the stores bench's PostgreSQL (bench/stores.mjs
// startPostgres). Each run is a process of its own; variants alternate
// within each round, each round starting with the next one; the figures are
// medians over rounds. Linux only (backend CPU from /proc).
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import pg from "pg";
import { createDatabase, startPostgres } from "./stores.mjs";

const CAP = { kind: "llm.generate", service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };
const T0 = Date.now();
// A sealed 1 KB prompt's envelope, by length.
const ENVELOPE = { ciphertext: "x".repeat(1407), recipientKeyId: "BYOLLM-site", senderKeyId: "BYOLLM-site", direction: "payload", deadlineAt: T0 + 86_400_000 };
const OUTCOME = { outcome: "ok", text: "done" };
const KINDS = ["create", "claim", "job", "heartbeat", "resultFor", "sweepGet", "select 1"];

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** Nanoseconds a process has run on a CPU (/proc/<pid>/schedstat, first field). */
function backendCpuNs(pid) {
  return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]);
}

async function migrate(url, dir) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query("select set_config('byollm.create_roles', 'on', false)");
  const names = readdirSync(`${dir}/supabase/migrations`).filter((n) => n.endsWith(".sql")).sort();
  for (const n of names) await c.query(readFileSync(`${dir}/supabase/migrations/${n}`, "utf8"));
  await c.end();
}

/** One variant: `jobs` cycles after 30 unrecorded ones. */
async function measure(adminUrl, label, dir, jobs) {
  const url = await createDatabase(adminUrl, `byollm_calls_${label.replace(/\W/g, "_")}`);
  await migrate(url, dir);
  const { postgresStore } = await import(pathToFileURL(resolve(dir, "dist/postgres.js")).href);
  const { sqlStorePaths } = await import(pathToFileURL(resolve(dir, "dist/sql-store.js")).href);
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  const store = postgresStore({ pool, preparedStatements: true });
  const paths = sqlStorePaths(store);
  const op = (name, args) => paths.operations(name, JSON.stringify(args));
  const { rows } = await pool.query("select pg_backend_pid() as pid");
  const pid = rows[0].pid;
  console.error(`${label}: backend pid ${pid} (for perf record -p)`);

  const owner = randomUUID();
  let now = T0;
  await store.createPairing({
    deviceCodeHash: "h", userCode: "ABCD-EFGH", state: "pending", owner: null, runnerId: null, collected: false,
    label: "l", platform: "linux", daemonVersion: "0.1.1", capabilities: [CAP], device: { identity: "i", encryption: "e", encryptionSig: "s" },
    expiresAt: now + 600_000, createdAt: now,
  });
  const runner = await store.approvePairing({ userCode: "ABCD-EFGH", owner, runnerId: `runner_${randomUUID()}`, now });
  const runnerId = runner.id;

  const totals = Object.fromEntries(KINDS.map((k) => [k, { node: 0, pg: 0, bytes: 0 }]));
  const timed = async (kind, call) => {
    const p0 = backendCpuNs(pid);
    const c0 = process.cpuUsage();
    const answer = await call();
    const c = process.cpuUsage(c0);
    const t = totals[kind];
    t.pg += backendCpuNs(pid) - p0;
    t.node += c.user + c.system;
    t.bytes += typeof answer === "string" ? answer.length : JSON.stringify(answer ?? null).length;
    return answer;
  };

  // One cycle, in the engine's order; each call timed on its own.
  const cycle = async (record) => {
    const job = await (record ? timed : (_, f) => f())("create", () =>
      store.create({ id: randomUUID(), kind: "llm.generate", envelope: ENVELOPE, sizeClass: "small", owner }, (now += 1)),
    );
    const t = record ? timed : (_, f) => f();
    const claimed = await t("claim", () => op("claim", { runnerId, runnerOwner: owner, capabilities: [CAP], max: 1, leaseMs: 60_000, now: (now += 1) }));
    const lease = { jobId: job.id, leaseId: JSON.parse(claimed).jobs[0].lease.id };
    await t("job", () => op("job", { runnerId, jobId: job.id }));
    await t("heartbeat", () => op("heartbeat", { runnerId, capabilities: [CAP], daemonVersion: "0.1.1", leases: [lease], leaseMs: 60_000, now: (now += 1) }));
    const done = await t("resultFor", () =>
      op("resultFor", { ...lease, runnerId, audience: "private", outcome: OUTCOME, provenance: { audience: "private", runnerId, runnerOwner: owner }, now: (now += 1) }),
    );
    if (JSON.parse(done).accepted !== true) throw new Error(`resultFor answered ${done}`);
    await t("sweepGet", () => paths.sweepGet(job.id, (now += 1)));
    await t("select 1", () => pool.query({ name: "one", text: "select 1 as r" }).then((r) => r.rows[0].r));
  };
  // Warm: plans cached (PL/pgSQL's generic plans from the sixth call), JIT'd JS.
  for (let i = 0; i < 30; i++) await cycle(false);
  const statements = process.argv.includes("--statements");
  if (statements) {
    await pool.query("create extension if not exists pg_stat_statements");
    await pool.query("select pg_stat_statements_reset()");
  }
  for (let i = 0; i < jobs; i++) await cycle(true);
  if (statements) {
    // Every statement, nested ones too (pg_stat_statements.track = all), by time.
    const { rows: top } = await pool.query(
      `select calls, plans, round((total_exec_time + total_plan_time)::numeric / $1, 4) as ms_per_cycle,
              round(total_plan_time::numeric / $1, 4) as plan_ms_per_cycle, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) as query
         from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
        order by total_exec_time + total_plan_time desc limit 40`,
      [jobs],
    );
    console.error(`\n${label}: pg_stat_statements, per cycle (nested statements count inside their callers too)`);
    for (const r of top) console.error(`${String(r.calls).padStart(7)} ${String(r.plans).padStart(7)} ${String(r.ms_per_cycle).padStart(8)} ${String(r.plan_ms_per_cycle).padStart(8)}  ${r.query}`);
  }
  const out = {};
  const bytes = {};
  for (const k of KINDS) {
    out[k] = { node: totals[k].node / 1000 / jobs, pg: totals[k].pg / 1e6 / jobs };
    bytes[k] = totals[k].bytes / jobs;
  }
  await pool.end();
  return { out, bytes };
}

const arg = (k, d) => process.argv.find((a) => a.startsWith(`--${k}=`))?.slice(k.length + 3) ?? d;
const jobs = Number(arg("jobs", 500));
const rounds = Number(arg("rounds", 3));
const specs = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const variants = specs.map((spec) => {
  const [label, dir] = spec.split(/=(.*)/s);
  return { label, dir: resolve(dir), runs: [] };
});
if (variants.length === 0) throw new Error("give label=DIR for each variant");
const { url: adminUrl } = startPostgres();
if (process.argv.includes("--child")) {
  // One variant's run, in a process of its own (see below).
  const [v] = variants;
  process.stdout.write(JSON.stringify(await measure(adminUrl, v.label, v.dir, jobs)));
  process.exit(0);
}
for (let round = 0; round < rounds; round++) {
  // Each round starts with the next variant, so none always runs first or
  // last; each run is a process of its own, so no variant runs on code
  // another warmed or in a heap another filled.
  for (const v of [...variants.slice(round % variants.length), ...variants.slice(0, round % variants.length)]) {
    const load = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
    const args = [fileURLToPath(import.meta.url), "--child", `--jobs=${jobs}`, `${v.label}=${v.dir}`];
    if (process.argv.includes("--statements")) args.push("--statements");
    const r = JSON.parse(execFileSync(process.execPath, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }));
    v.runs.push(r);
    console.error(`round ${round + 1} ${v.label} (load ${load}): ${KINDS.map((k) => `${k} ${r.out[k].node.toFixed(3)}/${r.out[k].pg.toFixed(3)}`).join(", ")}`);
  }
}
console.log(`\nper call, medians of ${rounds} rounds of ${jobs}: Node CPU ms / PostgreSQL CPU ms / answer bytes`);
console.log(`${"call".padEnd(10)} ${variants.map((v) => v.label.padStart(24)).join(" ")}`);
for (const k of [...KINDS, "cycle"]) {
  const cells = variants.map((v) => {
    const of = (f) => median(v.runs.map((r) => (k === "cycle" ? KINDS.filter((x) => x !== "select 1").reduce((a, x) => a + f(r, x), 0) : f(r, k))));
    return `${of((r, x) => r.out[x].node).toFixed(3)} / ${of((r, x) => r.out[x].pg).toFixed(3)} / ${of((r, x) => r.bytes[x]).toFixed(0)}`.padStart(24);
  });
  console.log(`${k.padEnd(10)} ${cells.join(" ")}`);
}
