// The stores bench's concurrency section: several app processes (node:http,
// ours: ByollmApp + createFetchHandler + postgresStore) on one PostgreSQL,
// many simulated daemons claiming from whichever app they were given, until
// the queue is empty. Lost and doubly completed jobs are counted in SQL: a
// bench-only trigger logs every transition into `ok`.
//
// Run by bench/stores.mjs (`npm run bench -- stores --concurrent-jobs=N`);
// this file is also the app and daemon processes it starts (argv[2]).
import { fork } from "node:child_process";
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import pg from "pg";
import * as protocol from "@byollm/protocol";

const SELF = fileURLToPath(import.meta.url);
const CAP = { kind: "llm.generate", service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };

function cpuOf(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return null;
  }
}

/** The section: returns {jobs, jobsPerSec, lost, doublyCompleted, cpuMsPerJob: {apps, postgres, daemons}}. */
export async function concurrency({ dbUrl, postgresCpu, jobs, apps = 4, daemons = 16, preparedStatements = true, onDrained }) {
  const { migratePostgres } = await import("../dist/postgres.js");
  await migratePostgres({ connectionString: dbUrl, createRoles: true });
  const admin = new pg.Client({ connectionString: dbUrl });
  await admin.connect();
  await logCompletions(admin);

  // Every app process has the same site keys, as every instance of a site does.
  const { generateSiteKeys } = await import("../dist/index.js");
  const siteKeys = generateSiteKeys();
  const children = [];
  const origins = [];
  for (let i = 0; i < apps; i++) {
    const child = fork(SELF, ["app", dbUrl, JSON.stringify(siteKeys), String(preparedStatements)], { stdio: "inherit" });
    children.push(child);
    origins.push(await new Promise((resolve, reject) => {
      child.once("message", (m) => resolve(m.origin));
      child.once("exit", (code) => reject(new Error(`app ${i} exited (${code})`)));
    }));
  }
  const owner = randomUUID();
  try {
    // Enqueued through the apps, before the clock starts.
    const per = Math.ceil(jobs / apps);
    await Promise.all(origins.map((o, i) => fetch(`${o}/bench/enqueue?owner=${owner}&n=${Math.min(per, jobs - i * per)}`).then((r) => r.text())));
    const daemonProc = fork(SELF, ["daemons", JSON.stringify(origins), owner, String(daemons)], { stdio: "inherit" });
    await new Promise((resolve) => daemonProc.once("message", resolve)); // paired
    const apps0 = children.map((c) => cpuOf(c.pid));
    const pg0 = postgresCpu();
    const d0 = cpuOf(daemonProc.pid);
    const t0 = performance.now();
    daemonProc.send("run");
    const done = await new Promise((resolve) => daemonProc.once("message", resolve));
    const wallMs = performance.now() - t0;
    const apps1 = children.map((c) => cpuOf(c.pid));
    const pg1 = postgresCpu();
    const d1 = cpuOf(daemonProc.pid);
    daemonProc.kill();

    const { rows } = await admin.query(
      `select (select count(*) from byollm_jobs where owner = $1 and state <> 'ok')::int as lost,
              (select count(*) - count(distinct job_id) from bench_completions)::int as doubly,
              (select count(*) from byollm_jobs where owner = $1)::int as total`,
      [owner],
    );
    // Each app's own `app.metrics()` after the drain, for a caller that checks them.
    const drained = onDrained ? await onDrained(await Promise.all(origins.map((o) => fetch(`${o}/bench/metrics`).then((r) => r.json())))) : undefined;
    const appCpu = apps1.reduce((a, v, i) => (v === null || apps0[i] === null || a === null ? null : a + v - apps0[i]), 0);
    return {
      apps,
      daemons,
      jobs: rows[0].total,
      completedByDaemons: done.count,
      jobsPerSec: (done.count * 1000) / wallMs,
      lost: rows[0].lost,
      doublyCompleted: rows[0].doubly,
      drained,
      cpuMsPerJob: {
        apps: appCpu === null ? null : (appCpu * 1000) / done.count,
        postgres: pg0 === null || pg1 === null ? null : ((pg1 - pg0) * 1000) / done.count,
        daemons: d0 === null || d1 === null ? null : ((d1 - d0) * 1000) / done.count,
      },
    };
  } finally {
    for (const c of children) c.kill();
    await admin.end();
  }
}

/** A bench-only trigger: every transition of a job into `ok` is logged in bench_completions. */
export async function logCompletions(admin) {
  await admin.query(`
    create table if not exists bench_completions (job_id text not null, at timestamptz not null default clock_timestamp());
    create or replace function bench_log_ok() returns trigger language plpgsql as $$
    begin insert into bench_completions (job_id) values (new.id); return null; end $$;
    drop trigger if exists bench_log_ok on byollm_jobs;
    create trigger bench_log_ok after update of state on byollm_jobs for each row
      when (new.state = 'ok') execute function bench_log_ok();`);
}

// ------------------------------------------------------------------ an app process

async function appProcess(dbUrl, keysJson, prepared) {
  const { ByollmApp, createFetchHandler } = await import("../dist/index.js");
  const { postgresStore } = await import("../dist/postgres.js");
  const siteKeys = JSON.parse(keysJson);
  const store = postgresStore({ connectionString: dbUrl, poolConfig: { max: 8 }, preparedStatements: prepared === "true" });
  const app = new ByollmApp({ store, siteKeys });
  const handler = createFetchHandler({ store, siteKeys, verificationUrl: "http://127.0.0.1/pair" });
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const url = new URL(req.url, "http://127.0.0.1");
    try {
      if (url.pathname === "/bench/enqueue") {
        const n = Number(url.searchParams.get("n"));
        const owner = url.searchParams.get("owner");
        for (let i = 0; i < n; i += 16) {
          await Promise.all(
            Array.from({ length: Math.min(16, n - i) }, () => app.enqueue({ kind: "llm.generate", payload: { prompt: "p".repeat(1000) }, owner, ttlMs: 3_600_000 })),
          );
        }
        res.end("ok");
        return;
      }
      if (url.pathname === "/bench/metrics") {
        res.end(JSON.stringify(await app.metrics()));
        return;
      }
      if (url.pathname === "/bench/approve") {
        await app.approvePairing({ userCode: url.searchParams.get("code"), owner: url.searchParams.get("owner") });
        res.end("ok");
        return;
      }
      const headers = new Headers();
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers.set(k, v);
      const response = await handler(new Request(`http://127.0.0.1${req.url}`, { method: req.method, headers, body: Buffer.concat(chunks) }));
      res.writeHead(response.status, Object.fromEntries(response.headers));
      res.end(Buffer.from(await response.arrayBuffer()));
    } catch (error) {
      res.writeHead(500);
      res.end(String(error));
    }
  });
  server.listen(0, "127.0.0.1", () => process.send({ origin: `http://127.0.0.1:${server.address().port}` }));
}

// ------------------------------------------------------------------ the daemons' process

async function daemonsProcess(originsJson, owner, count) {
  const origins = JSON.parse(originsJson);
  const post = async (origin, keys, runnerId, endpoint, body) => {
    const text = JSON.stringify(body);
    const headers = { "content-type": "application/json" };
    if (runnerId) {
      const sig = protocol.signRequest(keys, { endpoint, runnerId, issuedAt: Date.now(), body: text });
      headers["x-byollm-runner"] = sig.runnerId;
      headers["x-byollm-issued-at"] = String(sig.issuedAt);
      headers["x-byollm-signature"] = sig.signature;
    }
    const res = await fetch(`${origin}/byollm/${endpoint}`, { method: "POST", headers, body: text });
    const json = await res.json();
    if (res.status !== 200) throw new Error(`${endpoint} answered ${res.status}: ${JSON.stringify(json)}`);
    return json;
  };
  const devices = [];
  for (let d = 0; d < Number(count); d++) {
    const origin = origins[d % origins.length];
    const keys = protocol.generateKeys(Date.now());
    const start = await post(origin, keys, null, "pair", {
      protocolVersion: "2", action: "start", daemon: { version: "0.1.1", label: `d${d}`, platform: "linux" },
      device: protocol.publicIdentityOf(keys), capabilities: [CAP],
    });
    await fetch(`${origin}/bench/approve?code=${encodeURIComponent(start.userCode)}&owner=${owner}`).then((r) => r.text());
    const poll = await post(origin, keys, null, "pair", { protocolVersion: "2", action: "poll", deviceCode: start.deviceCode });
    const [[siteKeyId, site]] = Object.entries(poll.sites);
    devices.push({ origin, keys, runnerId: poll.runnerId, siteKeyId, site, keyId: protocol.keyId(keys.identityPublic) });
  }
  process.send("paired");
  await new Promise((resolve) => process.once("message", resolve));
  let completed = 0;
  await Promise.all(
    devices.map(async (dev) => {
      for (;;) {
        const claim = await post(dev.origin, dev.keys, dev.runnerId, "claim", { protocolVersion: "2", runnerId: dev.runnerId, capabilities: [CAP], max: 1 });
        const stub = claim.jobs[0];
        if (!stub) return;
        const fetched = await post(dev.origin, dev.keys, dev.runnerId, "fetch", { protocolVersion: "2", runnerId: dev.runnerId, jobId: stub.id, leaseId: stub.lease.id });
        const opened = await protocol.open({
          envelope: fetched.envelope, recipientKeys: dev.keys, senderIdentityPublic: dev.site.identity,
          expected: { jobId: stub.id, senderKeyId: dev.siteKeyId, recipientKeyId: dev.keyId, direction: "payload" },
        });
        if (!opened.ok) throw new Error(`could not open: ${opened.reason}`);
        const envelope = await protocol.seal({
          plaintext: JSON.stringify({ outcome: { outcome: "ok", text: `done ${stub.id}` }, ran: { model: "m", backendClass: "http", durationMs: 1 } }),
          senderKeys: dev.keys, recipientEncryptionPublic: dev.site.encryption,
          context: { jobId: stub.id, senderKeyId: dev.keyId, recipientKeyId: dev.siteKeyId, deadlineAt: Date.now() + 86_400_000, direction: "result" },
        });
        const result = await post(dev.origin, dev.keys, dev.runnerId, "result", { protocolVersion: "2", runnerId: dev.runnerId, jobId: stub.id, leaseId: stub.lease.id, envelope, disposition: "ok" });
        if (result.accepted) completed++;
      }
    }),
  );
  process.send({ count: completed });
}

if (process.argv[1] === SELF && process.argv[2] === "app") await appProcess(process.argv[3], process.argv[4], process.argv[5]);
if (process.argv[1] === SELF && process.argv[2] === "daemons") await daemonsProcess(process.argv[3], process.argv[4], process.argv[5]);
