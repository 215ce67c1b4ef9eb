// Text a database cannot hold as it is: NUL, other control characters and
// lone UTF-16 surrogates, in what a daemon sends (a result's text, an error's
// message, a model's name, a pairing's label, a version) and in what the app
// passes (ids, owners, purposes, prompts). On every store (our MemoryStore, a
// store of the app's own, postgresStore, supabaseStore through the PostgREST
// stand-in) each is accepted and handed back exactly as it was sent; nothing
// answers 500. (PostgreSQL's `text` and `jsonb` refuse NUL and lone
// surrogates: the SQL stores keep them in an escaped form, src/sql_text.rs.)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createClient } from "@supabase/supabase-js";
import { MemoryStore } from "../dist/index.js";
import { postgresStore } from "../dist/postgres.js";
import { supabaseStore } from "../dist/supabase/index.js";
import { CAPS, Daemon, listen, makeSite } from "./hardening-harness.mjs";
import { PlainStore } from "./helpers/plain-store.mjs";
import { freshDatabase, testPool, TRUNCATE } from "./postgres-db.mjs";
import { signJwt, startPostgrestStandIn } from "./supabase-standin.mjs";

/** Texts a model or a daemon may produce, each exactly as JavaScript holds it. */
const TEXTS = {
  nul: "before\u0000after",
  "only NUL": "\u0000",
  "control characters": "\u0001\u0007\b\t\n\u000b\f\r\u001b[31mred\u007f\u0085\u2028\u2029",
  "lone high surrogate": "half an emoji: \ud83d",
  "lone low surrogate": "\udc00 starts it",
  "reversed pair": "\ude00\ud83d",
  "everything at once": "\u0000\ud800\u0001\udfff\u0000",
  // The escaped form's own mark, and text that looks like an escaped form.
  "the mark": "\ufdd0",
  "an escaped form's look": '\ufdd0"\\u0000"',
  "escapes spelled out": "\\u0000 and \\ud800 as plain text",
};

const SECRET = "stand-in-jwt-secret-for-tests-only-0123456789";
// supabase-js needs a WebSocket transport on Node 20; the stand-in has no Realtime.
class NoRealtimeHere {
  constructor() {
    throw new Error("this test has no Realtime server");
  }
}
let db;
let pool;
let standIn;
let client;
const pgStores = [];
before(async () => {
  db = await freshDatabase("text");
  pool = testPool(db.url, 1);
  standIn = await startPostgrestStandIn({ connectionString: db.url, jwtSecret: SECRET });
  client = createClient(standIn.url, signJwt({ role: "service_role" }, SECRET), {
    auth: { persistSession: false, autoRefreshToken: false },
    realtime: { transport: NoRealtimeHere },
  });
});
after(async () => {
  for (const s of pgStores) await s.close();
  await standIn?.close();
  await pool?.end();
  await db?.drop();
});

const STORES = {
  MemoryStore: async () => new MemoryStore(),
  "a plain store of the app's own": async () => new PlainStore(),
  postgresStore: async () => {
    await pool.query(TRUNCATE);
    const store = postgresStore({ connectionString: db.url });
    pgStores.push(store);
    return store;
  },
  supabaseStore: async () => {
    await pool.query(TRUNCATE);
    return supabaseStore({ client });
  },
};

async function scene(makeStore, { owner = "alice", capabilities = CAPS, label } = {}) {
  const site = await makeSite("ours", { store: await makeStore() });
  const http = await listen(site.handler);
  const daemon = new Daemon(http.url, { capabilities });
  if (label === undefined) {
    await daemon.pair(site.app, owner);
  }
  return { ...site, http, daemon, owner };
}

/** Claim the one queued job, fetch it and open its payload. */
async function claimAndOpen(s) {
  const claim = await s.daemon.claim(1);
  assert.equal(claim.status, 200, JSON.stringify(claim.body));
  assert.equal(claim.body.jobs.length, 1, JSON.stringify(claim.body));
  const [stub] = claim.body.jobs;
  const fetched = await s.daemon.fetchJob(stub);
  assert.equal(fetched.status, 200, JSON.stringify(fetched.body));
  const opened = s.daemon.openPayload(stub, fetched.body.envelope);
  assert.equal(opened.ok, true, JSON.stringify(opened));
  return { stub, payload: JSON.parse(opened.plaintext) };
}

for (const [storeName, makeStore] of Object.entries(STORES)) {
  test(`${storeName}: a result's text holding NUL, control characters or a lone surrogate comes back exactly`, async () => {
    const s = await scene(makeStore);
    try {
      for (const [name, text] of Object.entries(TEXTS)) {
        const handle = await s.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: s.owner });
        const { stub } = await claimAndOpen(s);
        const done = await s.daemon.result(stub, { outcome: "ok", text });
        assert.deepEqual([done.status, done.body], [200, { accepted: true, state: "ok" }], name);
        const result = await s.app.result(handle.id);
        assert.equal(result.outcome.outcome, "ok", name);
        assert.equal(result.outcome.text, text, name);
        assert.equal((await s.app.job(handle.id)).outcome.text, text, name);
        // The daemon's retry of the same result is a duplicate, not a 500.
        const again = await s.daemon.result(stub, { outcome: "ok", text });
        assert.equal(again.status, 200, `${name}: ${JSON.stringify(again.body)}`);
      }
    } finally {
      await s.http.close();
    }
  });

  test(`${storeName}: a prompt holding such text makes the round trip to the daemon and back`, async () => {
    const s = await scene(makeStore);
    try {
      for (const [name, text] of Object.entries(TEXTS)) {
        const handle = await s.app.enqueue({ kind: "llm.generate", payload: { prompt: text }, owner: s.owner });
        const { stub, payload } = await claimAndOpen(s);
        assert.equal(payload.prompt, text, name);
        const done = await s.daemon.result(stub, { outcome: "ok", text: payload.prompt });
        assert.deepEqual([done.status, done.body], [200, { accepted: true, state: "ok" }], name);
        assert.equal((await s.app.result(handle.id)).outcome.text, text, name);
      }
    } finally {
      await s.http.close();
    }
  });

  test(`${storeName}: an error's message and a model's name keep such text too`, async () => {
    const s = await scene(makeStore);
    try {
      const message = TEXTS["everything at once"];
      let handle = await s.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: s.owner });
      let { stub } = await claimAndOpen(s);
      const failed = await s.daemon.result(stub, { outcome: "error", code: "backend\u0000error", message, retryable: false });
      assert.equal(failed.status, 200, JSON.stringify(failed.body));
      const error = (await s.app.result(handle.id)).outcome;
      assert.deepEqual([error.outcome, error.code, error.message], ["error", "backend\u0000error", message]);

      handle = await s.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: s.owner });
      ({ stub } = await claimAndOpen(s));
      const plaintext = JSON.stringify({
        outcome: { outcome: "ok", text: "t" },
        ran: { model: "m\u0000\ud800", backendClass: "http", durationMs: 1, stop: "end", stopReported: true },
      });
      const done = await s.daemon.result(stub, { outcome: "ok", text: "t" }, { envelope: s.daemon.sealResult(stub, undefined, { plaintext }) });
      assert.equal(done.status, 200, JSON.stringify(done.body));
      const result = await s.app.result(handle.id);
      assert.equal(result.outcome.text, "t");
      // A lone surrogate in what a device reports of itself is U+FFFD on
      // every store (README, "Where we differ"); NUL is kept.
      assert.equal(result.provenance.model, "m\u0000\ufffd");
      assert.equal((await s.app.job(handle.id)).provenance.model, "m\u0000\ufffd");
    } finally {
      await s.http.close();
    }
  });

  test(`${storeName}: a pairing whose label, version or model holds NUL is started, approved and collected, never a 500`, async () => {
    const s = await scene(makeStore, { label: "none" });
    try {
      const capabilities = [{ ...CAPS[0], model: "m\u0000" }];
      for (const label of ["lab\u0000el", "\u0000", "\u0001\u001f", "lone \ud800", "\ufdd0"]) {
        const daemon = new Daemon(s.http.url, { capabilities });
        const start = await daemon.call(
          "pair",
          { action: "start", daemon: { version: "0.1.1\u0000", label, platform: "linux" }, device: daemon.identity, capabilities },
          { sign: false },
        );
        assert.equal(start.status, 200, `${JSON.stringify(label)}: ${JSON.stringify(start.body)}`);
        const pending = await s.app.pendingPairing(start.body.userCode);
        assert.equal(pending.label, label);
        assert.equal(pending.daemonVersion, "0.1.1\u0000");
        const runner = await s.app.approvePairing({ userCode: start.body.userCode, owner: "alice" });
        const poll = await daemon.call("pair", { action: "poll", deviceCode: start.body.deviceCode }, { sign: false });
        assert.equal(poll.body.status, "approved", JSON.stringify(poll.body));
        daemon.runnerId = runner.id;
        // A lone surrogate in a runner record is U+FFFD on MemoryStore (README).
        const listed = (await s.app.runners("alice")).find((r) => r.id === runner.id);
        assert.equal(listed.label.toWellFormed(), label.toWellFormed());
        assert.equal(listed.capabilities[0].model, "m\u0000");
        const beat = await daemon.heartbeat([]);
        assert.equal(beat.status, 200, JSON.stringify(beat.body));
      }
      // An unsigned start anyone can send: a NUL in every string it carries.
      const stranger = new Daemon(s.http.url, { capabilities });
      const junk = await stranger.call(
        "pair",
        { action: "start", daemon: { version: "\u0000", label: "\u0000\ud800", platform: "linux" }, device: stranger.identity, capabilities },
        { sign: false },
      );
      assert.equal(junk.status, 200, JSON.stringify(junk.body));
    } finally {
      await s.http.close();
    }
  });

  test(`${storeName}: ids, owners and purposes the app passes with NUL are kept exactly`, async () => {
    const owner = "al\u0000ice";
    const s = await scene(makeStore, { owner });
    try {
      const id = "job\u0000one";
      const handle = await s.app.enqueue({ id, kind: "llm.generate", payload: { prompt: "p" }, owner, purpose: "why\u0000" });
      assert.equal(handle.id, id);
      const claim = await s.daemon.claim(1);
      assert.equal(claim.status, 200, JSON.stringify(claim.body));
      assert.deepEqual(
        claim.body.jobs.map((j) => [j.id, j.purpose, j.owner]),
        [[id, "why\u0000", owner]],
      );
      const { stub } = await (async () => {
        const [stub] = claim.body.jobs;
        const fetched = await s.daemon.fetchJob(stub);
        assert.equal(fetched.status, 200, JSON.stringify(fetched.body));
        return { stub };
      })();
      const done = await s.daemon.result(stub, { outcome: "ok", text: "fine\u0000" });
      assert.deepEqual([done.status, done.body], [200, { accepted: true, state: "ok" }]);
      const record = await s.app.job(id);
      assert.deepEqual([record.id, record.owner, record.purpose, record.state], [id, owner, "why\u0000", "ok"]);
      assert.equal((await handle.result({ timeoutMs: 5_000 })).outcome.text, "fine\u0000");
      assert.deepEqual(
        (await s.app.runners(owner)).map((r) => r.owner),
        [owner],
      );
      // A lookup that differs only past the NUL finds nothing.
      assert.equal(await s.app.job("job\u0000two"), null);
      assert.equal(await s.app.job("job"), null);
    } finally {
      await s.http.close();
    }
  });
}
