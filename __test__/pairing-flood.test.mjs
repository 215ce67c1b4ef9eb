// A flood of unsigned `pair start` requests from a few sources can neither
// drop the pairings people started nor stop people from starting new ones,
// on every store: MemoryStore, the durable store (MemoryStore({path})),
// postgresStore and supabaseStore (through the PostgREST stand-in). Each
// source holds at most 64 pending pairings (a 64th of the 4,096 a store
// keeps); past that it is answered 429 `rate-limited` with `retryAfter`.
// The floods are driven in process through ByollmHandlers (the source in
// its AuthContext); createFetchHandler's `source` option and its
// `retry-after` header are checked on their own.
import * as deviceKeys from "../scripts/device-keys.mjs";
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@supabase/supabase-js";
import { ByollmApp, ByollmHandlers, MemoryStore, createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { postgresStore } from "../dist/postgres.js";
import { supabaseStore } from "../dist/supabase/index.js";
import * as native from "../index.js";
import { freshDatabase, testPool, TRUNCATE } from "./postgres-db.mjs";
import { startPostgrestStandIn, signJwt } from "./supabase-standin.mjs";

const T0 = 1_767_225_600_000;
const SHARE = 64;
const MAX_PAIRINGS = 4096;
const RETRY_AFTER = 30;

const device = deviceKeys.publicIdentityOf(native.generateKeys(T0));
const START_BODY = {
  protocolVersion: "2",
  action: "start",
  daemon: { version: "0.1.1", label: "laptop", platform: "linux" },
  device,
  capabilities: [{ kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" }],
};
const START = JSON.stringify(START_BODY);

function site(store) {
  const siteKeys = generateSiteKeys();
  const clock = { t: T0 };
  const now = () => clock.t;
  const handlers = new ByollmHandlers({ store, siteKeys, verificationUrl: "https://site.example/pair", now });
  const post = async (source, body) => {
    const answer = await handlers.handle("pair", body, { endpoint: "pair", rawBody: "", signature: undefined, source });
    return { status: answer.status, retryAfter: answer.retryAfterSeconds, body: answer.body };
  };
  const start = (source) => post(source, START_BODY);
  const poll = (source, deviceCode) => post(source, { protocolVersion: "2", action: "poll", deviceCode });
  return { app: new ByollmApp({ store, siteKeys, now }), clock, start, poll, siteKeys };
}

/** A person's whole pairing: approved by code, collected by the daemon's poll. */
async function approveAndCollect(s, source, started, owner) {
  assert.equal(started.status, 200, JSON.stringify(started.body));
  const runner = await s.app.approvePairing({ userCode: started.body.userCode, owner });
  const collected = await s.poll(source, started.body.deviceCode);
  assert.equal(collected.status, 200, JSON.stringify(collected.body));
  assert.equal(collected.body.status, "approved");
  assert.equal(collected.body.runnerId, runner.id);
}

function assertRateLimited(answer) {
  assert.equal(answer.status, 429);
  assert.equal(answer.body.error, "rate-limited");
  assert.equal(answer.body.retryAfter, RETRY_AFTER);
  assert.equal(answer.retryAfter, RETRY_AFTER);
}

/**
 * The three behaviours on one store: `flood` requests from one source
 * around a person's pairing; then 1,000 sources × 50.
 */
function floodTests(name, makeStore, { flood, sources = 1000, reset = async () => undefined }) {
  test(`${name}: a person's pairing outlives a flood of ${flood.toLocaleString("en")} pair starts from one source, and another person pairs during it`, { timeout: 300_000 }, async () => {
    await reset();
    const s = site(await makeStore());
    const person = await s.start("198.51.100.1");
    const began = performance.now();
    let refused = 0;
    let during;
    for (let i = 0; i < flood; i++) {
      s.clock.t += 1;
      const answer = await s.start("203.0.113.66");
      if (answer.status === 429) {
        refused++;
        if (refused === 1) assertRateLimited(answer);
      } else assert.equal(answer.status, 200);
      if (i === flood >> 1) during = await s.start("192.0.2.7");
    }
    const seconds = (performance.now() - began) / 1000;
    console.log(`# ${name}: ${flood} pair starts from one source in ${seconds.toFixed(1)} s, ${refused} refused`);
    assert.equal(refused, flood - SHARE);
    await approveAndCollect(s, "198.51.100.1", person, "alice");
    await approveAndCollect(s, "192.0.2.7", during, "bob");
    const m = await s.app.metrics();
    assert.equal(m.refusals.rateLimited, refused);
  });

  test(`${name}: with ${sources.toLocaleString("en")} sources × 50 pair starts, no pairing a source holds within its share is dropped`, { timeout: 300_000 }, async () => {
    await reset();
    const s = site(await makeStore());
    const kept = [];
    let refused = 0;
    for (let round = 0; round < 50; round++) {
      for (let source = 0; source < sources; source++) {
        const answer = await s.start(`10.0.${source >> 8}.${source & 255}`);
        if (answer.status === 429) {
          refused++;
          if (refused === 1) assertRateLimited(answer);
        } else {
          assert.equal(answer.status, 200);
          kept.push([`10.0.${source >> 8}.${source & 255}`, answer.body.deviceCode]);
        }
      }
    }
    // The store is full of pairings held within their shares: the rest were refused, none dropped.
    assert.equal(kept.length, MAX_PAIRINGS);
    assert.equal(refused, sources * 50 - MAX_PAIRINGS);
    for (const [source, deviceCode] of kept) {
      const polled = await s.poll(source, deviceCode);
      assert.deepEqual(polled.body, { status: "pending" }, `${source} lost a pairing`);
    }
  });
}

// ---------------------------------------------------------------- MemoryStore

floodTests("MemoryStore", () => new MemoryStore(), { flood: 100_000 });

test("MemoryStore: polls of unknown device codes from one source are refused past its budget; others still poll", async () => {
  const s = site(new MemoryStore());
  const mine = await s.start("198.51.100.1");
  // Well-formed device codes (43 base64url characters) nobody was given.
  const guess = (i) => `${String(i).padStart(8, "0")}${"A".repeat(35)}`;
  let refused = 0;
  for (let i = 0; i < 1000; i++) {
    const answer = await s.poll("203.0.113.66", guess(i));
    if (answer.status === 429) {
      refused++;
      assertRateLimited(answer);
    } else assert.equal(answer.status, 404);
  }
  assert.equal(refused, 1000 - 32);
  assert.deepEqual((await s.poll("198.51.100.1", mine.body.deviceCode)).body, { status: "pending" });
  // A minute later the budget is whole again.
  s.clock.t += 60_000;
  assert.equal((await s.poll("203.0.113.66", guess(0))).status, 404);
});

test("createFetchHandler: each source named by the option has its own share; 429 carries retry-after", async () => {
  const store = new MemoryStore();
  const handler = createFetchHandler({
    store,
    siteKeys: generateSiteKeys(),
    verificationUrl: "https://site.example/pair",
    source: (request) => request.headers.get("x-test-source") ?? undefined,
  });
  const start = (source) =>
    handler(new Request("http://127.0.0.1/byollm/pair", { method: "POST", body: START, headers: { "x-test-source": source } }));
  for (let i = 0; i < SHARE; i++) assert.equal((await start("a")).status, 200);
  const refused = await start("a");
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get("retry-after"), String(RETRY_AFTER));
  assert.deepEqual(await refused.json(), {
    error: "rate-limited",
    message: "too many pairings are pending from this source; try again later",
    retryAfter: RETRY_AFTER,
  });
  assert.equal((await start("b")).status, 200);
});

test("approvePairing: unknown user codes are budgeted per source (else per owner)", async () => {
  const s = site(new MemoryStore());
  const mine = await s.start("198.51.100.1");
  for (let i = 0; i < 32; i++) {
    await assert.rejects(s.app.approvePairing({ userCode: "ZZZZ-ZZZZ", owner: "mallory", source: "203.0.113.66" }), /unknown pairing code/);
  }
  await assert.rejects(s.app.approvePairing({ userCode: "ZZZZ-ZZZZ", owner: "mallory", source: "203.0.113.66" }), (error) => {
    assert.equal(error.code, "rate-limited");
    assert.equal(error.retryAfter, RETRY_AFTER);
    return true;
  });
  // Another source, or another owner without one, still approves.
  const runner = await s.app.approvePairing({ userCode: mine.body.userCode, owner: "alice", source: "198.51.100.1" });
  assert.equal(runner.owner, "alice");
});

test("MemoryStore: without a source option every request is one source", async () => {
  const store = new MemoryStore();
  const handler = createFetchHandler({ store, siteKeys: generateSiteKeys(), verificationUrl: "https://site.example/pair" });
  const statuses = [];
  for (let i = 0; i < SHARE + 2; i++) {
    const response = await handler(new Request("http://127.0.0.1/byollm/pair", { method: "POST", body: START }));
    statuses.push(response.status);
  }
  assert.deepEqual(statuses, [...Array(SHARE).fill(200), 429, 429]);
});

test("the source is never stored or shown as given", async () => {
  const dir = mkdtempSync(join(tmpdir(), "byollm-flood-"));
  try {
    const store = new MemoryStore({ path: join(dir, "store.db") });
    const s = site(store);
    const started = await s.start("198.51.100.77");
    assert.equal(started.status, 200);
    store.close?.();
    const files = ["store.db", "store.db-wal"].map((f) => join(dir, f)).filter((f) => existsSync(f));
    const bytes = files.map((f) => readFileSync(f).toString("latin1")).join("");
    assert.ok(bytes.includes(started.body.userCode), "the pairing is in the file");
    assert.ok(!bytes.includes("198.51.100.77"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------- the durable store

{
  const dirs = [];
  after(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });
  floodTests(
    "durable MemoryStore",
    () => {
      const dir = mkdtempSync(join(tmpdir(), "byollm-flood-"));
      dirs.push(dir);
      return new MemoryStore({ path: join(dir, "store.db") });
    },
    { flood: 100_000 },
  );
}

// ---------------------------------------------------------------- postgresStore and supabaseStore

let db;
let pool;
let standIn;
let client;
before(async () => {
  db = await freshDatabase("flood");
  pool = testPool(db.url, 4);
  const SECRET = "flood-test-secret-at-least-32-characters";
  standIn = await startPostgrestStandIn({ connectionString: db.url, jwtSecret: SECRET });
  client = createClient(standIn.url, signJwt({ role: "service_role" }, SECRET), {
    auth: { persistSession: false, autoRefreshToken: false },
  });
});
after(async () => {
  await standIn?.close?.();
  await pool?.end();
  await db?.drop();
});
const truncate = () => pool.query(TRUNCATE);

// Smaller floods than in memory (each start is a round trip), still past
// the 4,096 a store keeps, so the old drop-the-oldest rule would have lost
// the person's pairing; 100 sources × 50 (5,000 starts) fill the store
// past its bound.
floodTests("postgresStore", () => postgresStore({ pool }), { flood: 5_000, sources: 100, reset: truncate });
floodTests("supabaseStore", () => supabaseStore({ client }), { flood: 4_200, sources: 100, reset: truncate });

test("postgresStore: the source is kept only as a keyed hash", async () => {
  await truncate();
  const s = site(postgresStore({ pool }));
  assert.equal((await s.start("198.51.100.77")).status, 200);
  const { rows } = await pool.query("select source from byollm_pairings");
  assert.equal(rows.length, 1);
  assert.match(rows[0].source, /^[0-9a-f]{32}$/);
  assert.ok(!rows[0].source.includes("198"));
  const plan = await pool.query(
    "explain select 1 from byollm_pairings where source = $1 and state = 'pending' limit 64",
    [rows[0].source],
  );
  assert.ok(!plan.rows.map((r) => r["QUERY PLAN"]).join("\n").includes("Seq Scan"), "the share is counted on an index");
});
