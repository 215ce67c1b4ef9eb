// A heartbeat naming many leases: the SQL store's heartbeat function called
// directly, beside our in-memory store doing the same work (touchRunner,
// renewLeases, listCancelRequests: the three store calls a heartbeat makes).
//
//   npm run bench -- leases
//   node_modules/node/bin/node bench/leases.mjs [--quick]
//
// The wire refuses a heartbeat naming more than 1,024 leases (src/wire.rs,
// docs/security.md), so through the handlers no request reaches these
// sizes; the store functions are measured past that, as a caller of the
// store could call them. Two populations per size: leases the runner does
// not hold (what an attacker sends: every one is reported lost) and leases
// it holds (every one renewed). Wall time from the client, median of 5
// calls after a warm-up, on a PostgreSQL the bench starts (scripts/pg-start.sh,
// the stores bench's cluster); the SQL figure includes sending the 10,000
// refs and reading the answer back.
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import pg from "pg";
import * as ours from "../dist/index.js";
import { migratePostgres } from "../dist/postgres.js";
import { createDatabase, startPostgres } from "./stores.mjs";

const T0 = 1_767_225_600_000;
const LEASE_MS = 60_000;
const CAP = { kind: "llm.generate", service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };
const DEVICE = { identity: "i", encryption: "e", encryptionSig: "s" };

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function timed(rounds, work) {
  await work(); // warm-up
  const ms = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = performance.now();
    await work();
    ms.push(performance.now() - t0);
  }
  return median(ms);
}

const unknown = (n) => Array.from({ length: n }, () => ({ jobId: randomUUID(), leaseId: randomUUID() }));

/** The SQL side: one database, a paired runner, `held` jobs leased to it. */
async function sqlFigures(url, sizes, rounds) {
  await migratePostgres({ connectionString: url, createRoles: true });
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const owner = randomUUID();
    const runnerUuid = randomUUID();
    await c.query("select byollm_create_pairing($1)", [
      JSON.stringify({ deviceCodeHash: "h", userCode: "CODE", state: "pending", owner: null, runnerId: null, collected: false, label: "l", platform: "linux", daemonVersion: "1", capabilities: [CAP], device: DEVICE, expiresAt: T0 + 600_000, createdAt: T0 }),
    ]);
    await c.query("select byollm_approve_pairing_as('CODE', $1, $2, $3)", [owner, runnerUuid, T0]);
    const runnerId = `runner_${runnerUuid}`;
    const heartbeat = (leases, now) =>
      c.query("select byollm_heartbeat_for($1, $2, '1', $3, $4, $5)", [runnerId, JSON.stringify([CAP]), JSON.stringify(leases), LEASE_MS, now]);
    const out = {};
    for (const n of sizes) {
      const none = unknown(n);
      // The answer names what the engine reads: the leases lost (every one
      // here, none in the held case), so each timing proves the work was done.
      out[`none-${n}`] = await timed(rounds, async () => {
        const r = await heartbeat(none, T0 + 1);
        if (r.rows[0].byollm_heartbeat_for.lost?.length !== n) throw new Error("not every unknown lease was answered lost");
      });
      await c.query("delete from byollm_jobs");
      const { rows } = await c.query(
        `insert into byollm_jobs (id, kind, envelope, size_class, audience, owner, state, lease_id, lease_runner,
                                  lease_expires_at, claimable_at, ttl_ms, created_at, updated_at)
         select gen_random_uuid(), 'llm.generate', '{}'::jsonb, 'small', 'private', $1, 'claimed', gen_random_uuid(), $2,
                byollm_at($3::bigint + 3600000), byollm_at($3::bigint), 3600000, byollm_at($3::bigint), byollm_at($3::bigint)
           from generate_series(1, $4::int)
         returning id::text as "jobId", lease_id::text as "leaseId"`,
        [owner, runnerUuid, T0, n],
      );
      await c.query("analyze byollm_jobs");
      out[`held-${n}`] = await timed(rounds, async () => {
        const r = await heartbeat(rows, T0 + 2);
        if (r.rows[0].byollm_heartbeat_for.lost?.length !== 0) throw new Error("a held lease was answered lost");
      });
    }
    return out;
  } finally {
    await c.end();
  }
}

/** The in-memory side: the three store calls of a heartbeat. */
async function memoryFigures(sizes, rounds) {
  const out = {};
  for (const n of sizes) {
    const store = new ours.MemoryStore();
    await store.createPairing({ deviceCodeHash: "h", userCode: "CODE", state: "pending", owner: null, runnerId: null, collected: false, label: "l", platform: "linux", daemonVersion: "1", capabilities: [CAP], device: DEVICE, expiresAt: T0 + 600_000, createdAt: T0 });
    const runner = await store.approvePairing({ userCode: "CODE", owner: "owner", runnerId: `runner_${randomUUID()}`, now: T0 });
    const heartbeat = async (leases, now) => {
      await store.touchRunner({ runnerId: runner.id, capabilities: [CAP], daemonVersion: "1", now });
      const renewal = await store.renewLeases({ runnerId: runner.id, leases, leaseMs: LEASE_MS, now });
      await store.listCancelRequests(runner.id);
      return renewal;
    };
    const none = unknown(n);
    out[`none-${n}`] = await timed(rounds, () => heartbeat(none, T0 + 1));
    for (let i = 0; i < n; i++) {
      await store.create({ id: randomUUID(), kind: "llm.generate", envelope: { ciphertext: "c2VhbGVk", recipientKeyId: "site", senderKeyId: "site", direction: "payload", deadlineAt: T0 + 86_400_000 }, sizeClass: "small", owner: "owner", ttlMs: 3_600_000 }, T0);
    }
    const claimed = await store.claim({ runnerId: runner.id, runnerOwner: "owner", capabilities: [CAP], max: n, leaseMs: 3_600_000, now: T0 });
    const held = claimed.map((j) => ({ jobId: j.id, leaseId: j.lease.id }));
    out[`held-${n}`] = await timed(rounds, async () => {
      const r = await heartbeat(held, T0 + 2);
      if (r.renewed.length !== n) throw new Error("not every held lease was renewed");
    });
  }
  return out;
}

export async function run({ quick = false } = {}) {
  const sizes = quick ? [1_000, 10_000] : [1_000, 10_000];
  const rounds = quick ? 3 : 5;
  const { url: adminUrl } = startPostgres();
  const url = await createDatabase(adminUrl, "byollm_bench_leases");
  const sql = await sqlFigures(url, sizes, rounds);
  const memory = await memoryFigures(sizes, rounds);
  const rows = [];
  for (const n of sizes) {
    for (const [key, what] of [["none", "none held (all lost)"], ["held", "all held (all renewed)"]]) {
      rows.push({
        name: `heartbeat naming ${n.toLocaleString("en")} leases, ${what}: byollm_heartbeat_for (ref column: our MemoryStore)`,
        unit: "ms",
        ref: memory[`${key}-${n}`],
        ours: sql[`${key}-${n}`],
        ...(n === 10_000 ? { target: "≤500 ms" } : {}),
      });
    }
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const r of await run({ quick: process.argv.includes("--quick") })) {
    console.log(`${r.name.padEnd(110)} memory ${r.ref.toFixed(1).padStart(8)} ms   SQL ${r.ours.toFixed(1).padStart(8)} ms${r.target ? `  (target ${r.target})` : ""}`);
  }
}
