// Faults in the store, as the engine meets them (issue 38): a user's own
// store (helpers/plain-store.mjs, wrapped to misbehave at one method) and
// postgresStore (its pool wrapped to misbehave at one SQL function, and a
// real connection terminated mid-operation). Each fault must give the daemon
// `server-error` 500 with the cause logged exactly once, never a crash or an
// unhandled rejection; leave the store as it was, but for what the failing
// operation itself committed; and let a retry answer normally. A lease
// granted by a claim whose answer was lost lapses after leaseMs and the job
// is claimed again; no job is lost. Also: the store operations each endpoint
// asks a user's store for, against docs/architecture.md's table.
//
// Everything runs on a fake clock: the device signs with it and the site and
// app read it, so a lease can lapse without waiting.
// Node 22 and 24 (the simulated daemon signs with @byollm/protocol).
import { describe, test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { ByollmApp, createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { postgresStore } from "../dist/postgres.js";
import { Device, CAP } from "./helpers/device.mjs";
import { PlainStore } from "./helpers/plain-store.mjs";
import { freshDatabase, TRUNCATE, testPool } from "./postgres-db.mjs";

const SITE_KEYS = generateSiteKeys();
const LEASE_MS = 30_000;
const STORE_FAILED = `{"error":"server-error","message":"the site's store failed; try again later"}`;
const OWNER = "alice";
const JOB = "job-1";

// An unhandled rejection anywhere in this file is recorded (not a crash) and
// fails the test that was running when it surfaced.
const stray = [];
process.on("unhandledRejection", (reason) => stray.push(reason));
const noStray = async () => {
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(stray.splice(0), [], "no unhandled rejection");
};

/** The clock of one site, its app and its device. */
function fakeClock() {
  let t = Date.now();
  return { now: () => t, advance: (ms) => (t += ms) };
}

/** `fn`'s value and every console.error line written while it ran. */
async function logged(fn) {
  const lines = [];
  const original = console.error;
  console.error = (...args) => lines.push(args.map(String).join(" "));
  try {
    return { value: await fn(), lines };
  } finally {
    console.error = original;
  }
}

/** A site (handler, app, device) over `store`. */
function site(store, { clock = fakeClock(), storeTimeoutMs, app = store } = {}) {
  const handler = createFetchHandler({
    store,
    siteKeys: SITE_KEYS,
    verificationUrl: "https://faults.byollm.test/pair",
    leaseMs: LEASE_MS,
    now: clock.now,
    ...(storeTimeoutMs === undefined ? {} : { storeTimeoutMs }),
  });
  return {
    handler,
    clock,
    app: new ByollmApp({ store: app, siteKeys: SITE_KEYS, now: clock.now }),
    device: new Device(handler, [CAP], { now: clock.now }),
  };
}

const pairStart = (device) =>
  device.post(
    "pair",
    {
      protocolVersion: "2",
      action: "start",
      daemon: { version: "0.1.1", label: "t", platform: "linux" },
      device: device.publicIdentity(),
      capabilities: device.capabilities,
    },
    false,
  );
const pairPoll = (device, deviceCode) => device.post("pair", { protocolVersion: "2", action: "poll", deviceCode }, false);
const release = (device, stub, reason = "shutdown") =>
  device.post("release", {
    protocolVersion: "2",
    runnerId: device.runnerId,
    leases: [{ jobId: stub.id, leaseId: stub.lease.id }],
    reason,
  });
const enqueue = (s, id = JOB) => s.app.enqueue({ kind: "llm.generate", payload: { prompt: `prompt of ${id}` }, owner: OWNER, id });

/** Claim one job and check it is `id`, on its `attempts`-th claim. */
async function claimOne(s, id = JOB) {
  const claimed = await s.device.claim();
  assert.equal(claimed.status, 200, claimed.text);
  assert.deepEqual(
    claimed.body.jobs.map((j) => j.id),
    [id],
    `the job is claimable: ${claimed.text}`,
  );
  return claimed.body.jobs[0];
}

/** Fetch, open and answer `stub`; the job ends ok. */
async function finish(s, stub) {
  const fetched = await s.device.fetchJob(stub);
  assert.equal(fetched.status, 200, fetched.text);
  assert.deepEqual(await s.device.open(stub, fetched.body.envelope), { prompt: `prompt of ${stub.id}` });
  const result = await s.device.result(stub, "done");
  assert.equal(result.text, `{"accepted":true,"state":"ok"}`);
  assert.equal((await s.app.job(stub.id)).state, "ok");
}

/**
 * The six endpoints: how to bring a site to the point of each request, the
 * request, and what a normal answer looks like. `prepare` returns the
 * context the request needs.
 */
const ENDPOINTS = {
  "pair start": {
    prepare: async () => ({}),
    send: (s) => pairStart(s.device),
    normal: (answer) => assert.match(answer.body.userCode, /^[A-Z0-9]{4}-[A-Z0-9]{4}$/),
  },
  "pair poll": {
    prepare: async (s) => {
      const start = await pairStart(s.device);
      await s.app.approvePairing({ userCode: start.body.userCode, owner: OWNER });
      return { deviceCode: start.body.deviceCode };
    },
    send: (s, cx) => pairPoll(s.device, cx.deviceCode),
    normal: (answer) => assert.equal(answer.body.status, "approved"),
  },
  claim: {
    prepare: async (s) => {
      await s.device.pair(s.app, OWNER);
      await enqueue(s);
      return {};
    },
    send: (s) => s.device.claim(),
    normal: (answer) => assert.deepEqual(answer.body.jobs.map((j) => j.id), [JOB]),
  },
  fetch: {
    prepare: async (s) => {
      await ENDPOINTS.claim.prepare(s);
      return { stub: await claimOne(s) };
    },
    send: (s, cx) => s.device.fetchJob(cx.stub),
    normal: (answer) => assert.equal(answer.body.envelope.direction, "payload"),
  },
  heartbeat: {
    prepare: (s) => ENDPOINTS.fetch.prepare(s),
    send: (s, cx) => s.device.heartbeat([{ jobId: cx.stub.id, leaseId: cx.stub.lease.id }]),
    normal: (answer) => assert.deepEqual([answer.body.cancel, answer.body.lost], [[], []]),
  },
  result: {
    prepare: (s) => ENDPOINTS.fetch.prepare(s),
    send: (s, cx) => s.device.result(cx.stub, "done"),
    normal: (answer) => assert.equal(answer.text, `{"accepted":true,"state":"ok"}`),
  },
  // The owner asked for a cancel while the job was held: the release ends it canceled.
  release: {
    prepare: async (s) => {
      const cx = await ENDPOINTS.fetch.prepare(s);
      await s.app.cancel(JOB);
      return cx;
    },
    send: (s, cx) => release(s.device, cx.stub),
    normal: (answer) => assert.equal(answer.text, `{"released":["${JOB}"]}`),
  },
};

// ------------------------------------------------------------ a user's store

/** Every method of the store interface but `subscribe` (which is synchronous). */
const STORE_METHODS = [
  "create", "get", "claim", "adopt", "renewLeases", "complete", "release", "expireDue", "cancel", "listClaimedBy",
  "listCancelRequests", "createPairing", "getPairingByDeviceCodeHash", "getPairingByUserCode", "approvePairing",
  "denyPairing", "consumePairingToken", "getRunner", "touchRunner", "revokeRunner", "listRunners",
];

/**
 * `inner` behind a wrapper that records each call (name and arguments) and,
 * once armed, misbehaves at the next call of one method: `fault.act(inner,
 * args)` answers in the method's place.
 */
function misbehaving(inner) {
  const store = {
    calls: [],
    fault: undefined,
    subscribe: (jobId, onChange) => inner.subscribe(jobId, onChange),
  };
  for (const name of STORE_METHODS) {
    store[name] = (...args) => {
      const fault = store.fault;
      if (fault?.method === name) {
        store.fault = undefined;
        return fault.act(inner, args);
      }
      store.calls.push({ name, args: structuredClone(args) });
      return inner[name](...args);
    };
  }
  return store;
}

/** The plain store's whole state, comparable with deepEqual (order included). */
const stateOf = (s) =>
  structuredClone({ jobs: [...s.jobs], cancelRequests: [...s.cancelRequests], pairings: [...s.pairings], runners: [...s.runners] });

function restored(state) {
  const s = new PlainStore();
  const copy = structuredClone(state);
  s.jobs = new Map(copy.jobs);
  s.cancelRequests = new Set(copy.cancelRequests);
  s.pairings = new Map(copy.pairings);
  s.runners = new Map(copy.runners);
  return s;
}

/** The methods each endpoint calls on a user's store, in order (docs/architecture.md). */
const METHODS_OF = {
  "pair start": ["getPairingByUserCode", "createPairing"],
  "pair poll": ["getPairingByDeviceCodeHash", "consumePairingToken"],
  claim: ["getRunner", "claim"],
  fetch: ["getRunner", "get"],
  heartbeat: ["getRunner", "touchRunner", "renewLeases", "listCancelRequests"],
  result: ["getRunner", "get", "complete"],
  release: ["getRunner", "listCancelRequests", "release", "cancel"],
};

/** docs/architecture.md, "Store operations per request" (a user's store reads the runner every time). */
const OPERATIONS_OF = {
  "pair start": ["pairingByCode", "createPairing"],
  "pair poll": ["pairingByHash", "consumePairing"],
  claim: ["runner", "claim"],
  fetch: ["runner", "job"],
  heartbeat: ["runner", "heartbeat"],
  result: ["runner", "resultFor", "complete"],
  release: ["runner", "cancelRequests", "release", "cancel"],
};

/** The engine's operation a method serves, per endpoint (ts/handlers.ts METHODS). */
function operationOf(endpoint, method) {
  if (endpoint === "heartbeat" && method !== "getRunner") return "heartbeat";
  if (endpoint === "release" && method === "listCancelRequests") return "cancelRequests";
  return {
    getPairingByUserCode: "pairingByCode",
    createPairing: "createPairing",
    getPairingByDeviceCodeHash: "pairingByHash",
    consumePairingToken: "consumePairing",
    getRunner: "runner",
    claim: "claim",
    get: endpoint === "result" ? "resultFor" : "job",
    complete: "complete",
    release: "release",
    cancel: "cancel",
  }[method];
}

// Answers no operation returns, for the methods whose answer the engine reads.
const MALFORMED = {
  getPairingByUserCode: 42,
  getPairingByDeviceCodeHash: "approved",
  getRunner: { id: 7, owner: OWNER },
  claim: [17],
  get: "a job",
  complete: { accepted: "yes", job: null },
  renewLeases: null,
};

const TIMEOUT_MS = 50;
const KINDS = {
  rejects: {
    act: () => Promise.reject(new Error("the disk is on fire")),
    cause: "the disk is on fire",
  },
  "throws synchronously": {
    act: () => {
      throw new TypeError("store.method is not a function");
    },
    cause: "store.method is not a function",
  },
  "never answers": {
    act: () => new Promise(() => undefined),
    cause: `no answer within ${TIMEOUT_MS} ms`,
  },
  "answers a malformed record": {
    act: undefined, // per method, from MALFORMED
    cause: undefined,
  },
};

describe("a user's store that fails at one method: 500 server-error, logged once, store unchanged, a retry answers", () => {
  for (const [endpoint, methods] of Object.entries(METHODS_OF)) {
    for (const method of methods) {
      for (const [kind, spec] of Object.entries(KINDS)) {
        const malformed = kind === "answers a malformed record";
        if (malformed && !(method in MALFORMED)) continue;
        test(`${endpoint}: ${method} ${kind}`, async () => {
          const plain = new PlainStore();
          const store = misbehaving(plain);
          const s = site(store, { storeTimeoutMs: TIMEOUT_MS });
          const cx = await ENDPOINTS[endpoint].prepare(s);
          const before = stateOf(plain);
          store.calls = [];
          store.fault = { method, act: malformed ? async () => MALFORMED[method] : spec.act };
          const { value: answer, lines } = await logged(() => ENDPOINTS[endpoint].send(s, cx));
          assert.equal(answer.status, 500, answer.text);
          assert.equal(answer.text, STORE_FAILED);
          const op = operationOf(endpoint, method);
          assert.equal(lines.length, 1, `the cause is logged once: ${JSON.stringify(lines)}`);
          const wire = endpoint.startsWith("pair") ? "pair" : endpoint;
          assert.ok(lines[0].startsWith(`byollm: the store failed on ${wire}: `), lines[0]);
          if (malformed) {
            assert.ok(lines[0].includes(`\`${op}\``) || lines[0].includes(`${op}: `), lines[0]);
          } else {
            assert.ok(lines[0].includes(`${op}: ${spec.cause}`), lines[0]);
          }
          await noStray();
          // Exactly the calls before the failing one happened (a user's
          // store has no transaction: a heartbeat's touch stands).
          assert.deepEqual(
            store.calls.map((c) => c.name),
            methods.slice(0, methods.indexOf(method)),
          );
          const twin = restored(before);
          for (const call of store.calls) await twin[call.name](...call.args);
          assert.deepEqual(stateOf(plain), stateOf(twin), "the store holds what the completed calls wrote, no more");
          // The daemon tries again.
          const again = await ENDPOINTS[endpoint].send(s, cx);
          assert.equal(again.status, 200, again.text);
          if (method === "cancel") {
            // The release before it had committed: the lease is no longer
            // held, the job is queued, and the owner's cancel request stands
            // (store.md §10), for whichever runner claims it next.
            assert.equal(again.text, `{"released":[]}`);
            assert.equal(plain.jobs.get(JOB).state, "queued");
            const next = await claimOne(s);
            const heard = await s.device.heartbeat([{ jobId: next.id, leaseId: next.lease.id }]);
            assert.deepEqual(heard.body.cancel, [{ jobId: next.id, leaseId: next.lease.id }]);
          } else {
            ENDPOINTS[endpoint].normal(again);
          }
          await noStray();
        });
      }
    }
  }
});

// docs/architecture.md and issue 38: a store that answers something an
// operation does not return (a malformed record) gets the daemon a
// server-error 500 with the cause logged once, never a wrong value on the
// wire: a list that is not a list (a store whose listCancelRequests is broken
// would lose every cancel its owners ask for, unseen), a lease id or clock of
// the wrong type (a lease the daemon could never name), a state of the wrong
// type. (A job's purpose is the app's own opaque value, passed on as it is.)
describe("malformed store answers: server-error 500, never a wrong value with a 200", () => {
  const claimed = (change) => async (inner, args) => (await inner.claim(...args)).map(change);
  const cases = [
    ["heartbeat", "listCancelRequests", "is not a list", async () => "none"],
    ["heartbeat", "listCancelRequests", "lists strings, not lease refs", async () => [JOB]],
    ["heartbeat", "renewLeases", "answers a lost list that is not a list", async () => ({ renewed: [], lost: "none" })],
    ["heartbeat", "renewLeases", "answers lost refs that are numbers", async () => ({ renewed: [], lost: [5] })],
    ["release", "listCancelRequests", "is not a list", async () => "none"],
    ["release", "release", "is not a list", async () => JOB],
    ["claim", "claim", "answers a lease whose id is a number", claimed((job) => ({ ...job, lease: { ...job.lease, id: 5 } }))],
    ["claim", "claim", "answers a lease whose expiresAt is a string", claimed((job) => ({ ...job, lease: { ...job.lease, expiresAt: "soon" } }))],
    ["result", "complete", "answers a state that is an object", async () => ({ accepted: true, job: { state: { not: "a state" } } })],
  ];
  for (const [endpoint, method, what, act] of cases) {
    test(`${endpoint}: ${method} ${what}: must be a store failure (500)`, async () => {
      const store = misbehaving(new PlainStore());
      const s = site(store);
      const cx = await ENDPOINTS[endpoint].prepare(s);
      store.fault = { method, act };
      const { value: answer, lines } = await logged(() => ENDPOINTS[endpoint].send(s, cx));
      assert.equal(answer.text, STORE_FAILED, `answered ${answer.status} ${answer.text}`);
      assert.equal(answer.status, 500);
      assert.equal(lines.length, 1, JSON.stringify(lines));
    });
  }
});

describe("a claim whose answer is lost: the lease lapses after leaseMs and the job is claimed again", () => {
  // The store granted the lease; the daemon never learns its id.
  const lost = {
    "answers the claimed job without its lease": async (inner, args) => (await inner.claim(...args)).map(({ lease: _lease, ...job }) => job),
    "answers the claimed job with a numeric id": async (inner, args) => (await inner.claim(...args)).map((job) => ({ ...job, id: 1 })),
    "throws after granting": async (inner, args) => {
      await inner.claim(...args);
      throw new Error("the reply was lost");
    },
    "answers after the timeout": async (inner, args) => {
      await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS * 4));
      return inner.claim(...args);
    },
    "rejects after the timeout, having granted": async (inner, args) => {
      await inner.claim(...args);
      await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS * 4));
      throw new Error("late and failed");
    },
  };
  for (const [name, act] of Object.entries(lost)) {
    test(name, async () => {
      const plain = new PlainStore();
      const store = misbehaving(plain);
      const s = site(store, { storeTimeoutMs: TIMEOUT_MS });
      await ENDPOINTS.claim.prepare(s);
      store.fault = { method: "claim", act };
      const { value: answer, lines } = await logged(() => s.device.claim());
      assert.equal(answer.text, STORE_FAILED);
      assert.equal(lines.length, 1, JSON.stringify(lines));
      // A late answer settles after the request did; give it the time.
      await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS * 6));
      await noStray();
      const held = plain.jobs.get(JOB);
      assert.equal(held.state, "claimed", "the store granted the lease");
      assert.equal(held.lease.expiresAt, s.clock.now() + LEASE_MS);
      // Nobody can claim it while the lease lives, nor fetch it without its id.
      assert.deepEqual((await s.device.claim()).body.jobs, []);
      s.clock.advance(LEASE_MS - 1);
      assert.deepEqual((await s.device.claim()).body.jobs, []);
      s.clock.advance(1);
      const stub = await claimOne(s);
      assert.notEqual(stub.lease.id, held.lease.id);
      assert.equal(plain.jobs.get(JOB).attempts, 2);
      await finish(s, stub);
    });
  }
});

describe("the store operations each endpoint asks a user's store for (docs/architecture.md)", () => {
  for (const [endpoint, methods] of Object.entries(METHODS_OF)) {
    test(`${endpoint}: ${methods.join(", ")}`, async () => {
      const store = misbehaving(new PlainStore());
      const s = site(store);
      const cx = await ENDPOINTS[endpoint].prepare(s);
      store.calls = [];
      const answer = await ENDPOINTS[endpoint].send(s, cx);
      assert.equal(answer.status, 200, answer.text);
      ENDPOINTS[endpoint].normal(answer);
      assert.deepEqual(
        store.calls.map((c) => c.name),
        methods,
      );
      // As the engine's operations (the heartbeat's three methods are one),
      // the rows of the table in docs/architecture.md.
      const ops = store.calls.map((c) => operationOf(endpoint, c.name)).filter((op, i, all) => op !== all[i - 1]);
      assert.deepEqual(ops, OPERATIONS_OF[endpoint]);
    });
  }

  test("release of two jobs the owner asked to stop: one cancel operation, a cancel call per job", async () => {
    const store = misbehaving(new PlainStore());
    const s = site(store);
    await s.device.pair(s.app, OWNER);
    await enqueue(s, "job-a");
    await enqueue(s, "job-b");
    const claimed = await s.device.post("claim", { protocolVersion: "2", runnerId: s.device.runnerId, capabilities: [CAP], max: 2 });
    const stubs = claimed.body.jobs;
    assert.equal(stubs.length, 2);
    await s.app.cancel("job-a");
    await s.app.cancel("job-b");
    store.calls = [];
    const answer = await s.device.post("release", {
      protocolVersion: "2",
      runnerId: s.device.runnerId,
      leases: stubs.map((j) => ({ jobId: j.id, leaseId: j.lease.id })),
      reason: "shutdown",
    });
    assert.equal(answer.text, `{"released":["job-a","job-b"]}`);
    assert.deepEqual(
      store.calls.map((c) => c.name),
      ["getRunner", "listCancelRequests", "release", "cancel", "cancel"],
    );
    assert.deepEqual([(await s.app.job("job-a")).state, (await s.app.job("job-b")).state], ["canceled", "canceled"]);
  });

  test("pair start where every drawn user code is taken: eight lookups, no write, 500", async () => {
    const plain = new PlainStore();
    const store = misbehaving(plain);
    const s = site(store);
    const now = s.clock.now();
    // Every code the engine draws is held by a live pending pairing.
    store.getPairingByUserCode = async (userCode) => {
      store.calls.push({ name: "getPairingByUserCode", args: [userCode] });
      return { deviceCodeHash: "h", userCode, state: "pending", expiresAt: now + 60_000 };
    };
    store.calls = [];
    const { value: answer, lines } = await logged(() => pairStart(s.device));
    assert.equal(answer.text, `{"error":"server-error","message":"no free pairing code was found; try again"}`);
    assert.equal(answer.status, 500);
    assert.deepEqual(lines, [], "not the store's failure: nothing to log");
    assert.deepEqual(
      store.calls.map((c) => c.name),
      Array(8).fill("getPairingByUserCode"),
    );
    assert.equal(plain.pairings.size, 0);
  });
});

// ------------------------------------------------------------- postgresStore

describe("postgresStore: a SQL function that fails, answers garbage or never answers", () => {
  let db;
  let pool;
  let admin;
  before(async () => {
    db = await freshDatabase("faults");
    pool = testPool(db.url, 4);
    admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
  });
  after(async () => {
    await admin?.end();
    await pool?.end();
    await db?.drop();
  });

  /** The rows of the four tables, ordered: the whole database state. */
  async function dump() {
    const tables = ["byollm_jobs", "byollm_job_cancels", "byollm_pairings", "byollm_runners"];
    const out = {};
    for (const t of tables) {
      const { rows } = await admin.query(`select coalesce(json_agg(r order by r::text), '[]') as rows from (select to_jsonb(t) as r from ${t} t) x`);
      out[t] = rows[0].rows;
    }
    return out;
  }

  /**
   * The pool behind a wrapper that, once armed, misbehaves at the next call
   * of one SQL function: `fault.act(pool, text, values)` answers in its place.
   */
  function misbehavingPool() {
    const wrapper = {
      fault: undefined,
      functions: [],
      query(text, values) {
        const sql = typeof text === "string" ? text : text.text;
        const fn = /select (byollm_\w+)\(/.exec(sql)?.[1];
        wrapper.functions.push(fn);
        const fault = wrapper.fault;
        if (fault !== undefined && fault.fn === fn) {
          wrapper.fault = undefined;
          return fault.act(pool, text, values);
        }
        return pool.query(text, values);
      },
    };
    return wrapper;
  }

  async function pgSite() {
    await pool.query(TRUNCATE);
    const wrapped = misbehavingPool();
    const store = postgresStore({ pool: wrapped });
    return { ...site(store), wrapped, store };
  }

  /**
   * `request` sent through a second handler over the same store with a
   * short storeTimeoutMs (the site's own keeps the default, so no ordinary
   * query on a loaded machine times out).
   */
  async function withTimeout(s, storeTimeoutMs, request) {
    const own = s.device.handler;
    s.device.handler = createFetchHandler({
      store: s.store,
      siteKeys: SITE_KEYS,
      verificationUrl: "https://faults.byollm.test/pair",
      leaseMs: LEASE_MS,
      now: s.clock.now,
      storeTimeoutMs,
    });
    try {
      return await request();
    } finally {
      s.device.handler = own;
    }
  }

  /** A real SQL error from the server (division by zero), through the same pool. */
  const sqlError = (p) => p.query("select 1/0 as r");
  /** The function's answer cut short: text no operation returns. */
  const garbage = async () => ({ rows: [{ r: `{"jobs":[{"id":"job-1","lease":`, changed: null }] });
  const hang = () => new Promise(() => undefined);

  // Endpoint, the SQL function of the operation that fails, and the engine's name of it.
  const CASES = [
    ["pair start", "byollm_get_pairing_by_user_code", "pairingByCode"],
    ["pair start", "byollm_start_pairing", "createPairing"],
    ["pair poll", "byollm_get_pairing_by_device_code_hash", "pairingByHash"],
    ["pair poll", "byollm_consume_pairing_token", "consumePairing"],
    ["claim", "byollm_claim_for", "claim"],
    ["fetch", "byollm_get_job_for", "job"],
    ["heartbeat", "byollm_heartbeat_for", "heartbeat"],
    ["result", "byollm_result_for", "resultFor"],
    ["release", "byollm_get_runner", "runner"],
    ["release", "byollm_list_cancel_requests", "cancelRequests"],
    ["release", "byollm_release", "release"],
    ["release", "byollm_cancel_job", "cancel"],
  ];
  // Operations whose answer the engine ignores (they return nothing).
  const VOID = new Set(["createPairing", "consumePairing", "cancel"]);

  for (const [endpoint, fn, op] of CASES) {
    for (const [kind, act] of [
      ["a SQL error", sqlError],
      ["a malformed answer", garbage],
    ]) {
      if (kind === "a malformed answer" && VOID.has(op)) continue;
      test(`${endpoint}: ${fn} with ${kind}`, async () => {
        const s = await pgSite();
        const cx = await ENDPOINTS[endpoint].prepare(s);
        const before = await dump();
        s.wrapped.fault = { fn, act };
        s.wrapped.functions = [];
        const { value: answer, lines } = await logged(() => ENDPOINTS[endpoint].send(s, cx));
        assert.equal(answer.text, STORE_FAILED, `answered ${answer.status} ${answer.text}`);
        assert.equal(answer.status, 500);
        assert.ok(s.wrapped.functions.includes(fn), `the request reached ${fn}: ${s.wrapped.functions}`);
        assert.equal(lines.length, 1, JSON.stringify(lines));
        const wire = endpoint.startsWith("pair") ? "pair" : endpoint;
        assert.ok(lines[0].startsWith(`byollm: the store failed on ${wire}: `), lines[0]);
        assert.ok(lines[0].includes(kind === "a SQL error" ? `${op}: division by zero` : `\`${op}\``), lines[0]);
        await noStray();
        if (fn === "byollm_cancel_job") {
          // The release before it committed: the job is back in the queue,
          // and the owner's cancel request still stands.
          const after = await s.app.job(JOB);
          assert.equal(after.state, "queued");
        } else {
          assert.deepEqual(await dump(), before, "the database is unchanged");
          const again = await ENDPOINTS[endpoint].send(s, cx);
          assert.equal(again.status, 200, again.text);
          ENDPOINTS[endpoint].normal(again);
        }
        await noStray();
      });
    }
  }

  test("result of a team job: byollm_complete_job with a SQL error (resultFor only reads a team job)", async () => {
    const s = await pgSite();
    await s.device.pair(s.app, OWNER);
    await s.app.enqueue({ kind: "llm.generate", payload: { prompt: `prompt of ${JOB}` }, owner: OWNER, id: JOB, audience: "team" });
    const stub = await claimOne(s);
    const before = await dump();
    s.wrapped.fault = { fn: "byollm_complete_job", act: sqlError };
    s.wrapped.functions = [];
    const { value: answer, lines } = await logged(() => s.device.result(stub, "done"));
    assert.equal(answer.text, STORE_FAILED);
    assert.deepEqual(s.wrapped.functions, ["byollm_result_for", "byollm_complete_job"]);
    assert.deepEqual(lines, ["byollm: the store failed on result: complete: division by zero"]);
    assert.deepEqual(await dump(), before);
    await finish(s, stub);
    await noStray();
  });

  test("claim: byollm_claim_for never answers (storeTimeoutMs): 500, nothing claimed, a retry claims", async () => {
    const s = await pgSite();
    await ENDPOINTS.claim.prepare(s);
    const before = await dump();
    s.wrapped.fault = { fn: "byollm_claim_for", act: hang };
    const { value: answer, lines } = await logged(() => withTimeout(s, 1000, () => s.device.claim()));
    assert.equal(answer.text, STORE_FAILED);
    assert.deepEqual(lines, ["byollm: the store failed on claim: claim: no answer within 1000 ms"]);
    assert.deepEqual(await dump(), before);
    await finish(s, await claimOne(s));
    await noStray();
  });

  test("a claim committed, its answer lost (the connection drops after): the lease lapses after leaseMs, claimed again", async () => {
    const s = await pgSite();
    await ENDPOINTS.claim.prepare(s);
    s.wrapped.fault = {
      fn: "byollm_claim_for",
      act: async (p, text, values) => {
        await p.query(text, values);
        throw new Error("Connection terminated unexpectedly");
      },
    };
    const { value: answer, lines } = await logged(() => s.device.claim());
    assert.equal(answer.text, STORE_FAILED);
    assert.deepEqual(lines, ["byollm: the store failed on claim: claim: Connection terminated unexpectedly"]);
    await noStray();
    const granted = await s.store.get(JOB);
    assert.equal(granted.state, "claimed");
    assert.equal(granted.lease.expiresAt, s.clock.now() + LEASE_MS);
    assert.deepEqual((await s.device.claim()).body.jobs, []);
    s.clock.advance(LEASE_MS);
    const stub = await claimOne(s);
    assert.notEqual(stub.lease.id, granted.lease.id);
    assert.equal((await s.store.get(JOB)).attempts, 2);
    await finish(s, stub);
  });

  test("a claim committed, answered without its lease: the lease lapses, claimed again", async () => {
    const s = await pgSite();
    await ENDPOINTS.claim.prepare(s);
    s.wrapped.fault = {
      fn: "byollm_claim_for",
      act: async (p, text, values) => {
        const out = await p.query(text, values);
        const answer = JSON.parse(out.rows[0].r);
        for (const job of answer.jobs) delete job.lease;
        return { rows: [{ ...out.rows[0], r: JSON.stringify(answer) }] };
      },
    };
    const { value: answer, lines } = await logged(() => s.device.claim());
    assert.equal(answer.text, STORE_FAILED);
    assert.equal(lines.length, 1);
    assert.match(lines[0], /returned job job-1 from claim with no lease/);
    assert.equal((await s.store.get(JOB)).state, "claimed");
    s.clock.advance(LEASE_MS);
    await finish(s, await claimOne(s));
    await noStray();
  });

  test("resultFor fails after the claim and fetch: the job is still held, and claimable again when its lease ends", async () => {
    const s = await pgSite();
    const { stub } = await ENDPOINTS.fetch.prepare(s);
    s.wrapped.fault = { fn: "byollm_result_for", act: sqlError };
    const { value: answer, lines } = await logged(() => s.device.result(stub, "done"));
    assert.equal(answer.text, STORE_FAILED);
    assert.deepEqual(lines, ["byollm: the store failed on result: resultFor: division by zero"]);
    const held = await s.store.get(JOB);
    assert.equal(held.state, "claimed");
    assert.equal(held.lease.id, stub.lease.id);
    s.clock.advance(LEASE_MS);
    const again = await claimOne(s);
    // The old grant's result is refused now; the new holder's is accepted.
    const late = await s.device.result(stub, "late");
    assert.equal(late.text, `{"accepted":false,"state":"claimed"}`);
    await finish(s, again);
    await noStray();
  });

  /** The pid of the pool's backend waiting on a lock in `fn`, once there is one. */
  async function blockedBackend(fn) {
    for (let i = 0; i < 1000; i += 1) {
      const { rows } = await admin.query(
        `select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like $1`,
        [`%${fn}(%`],
      );
      if (rows.length > 0) return rows[0].pid;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`no backend waits in ${fn}`);
  }

  /**
   * `request` (logged) while another connection holds the jobs table: once
   * its SQL waits in `fn`, `meanwhile(pid)` runs; the lock is released when
   * the request has its answer.
   */
  async function whileJobsLocked(fn, request, meanwhile = async () => undefined) {
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    await locker.query("begin; lock table byollm_jobs in access exclusive mode");
    try {
      const pending = logged(request);
      await meanwhile(await blockedBackend(fn));
      return await pending;
    } finally {
      await locker.query("rollback");
      await locker.end();
    }
  }

  test("the connection is terminated (pg_terminate_backend) in the middle of result: 500, nothing committed, the job claimable again when its lease ends", async () => {
    const s = await pgSite();
    const { stub } = await ENDPOINTS.fetch.prepare(s);
    const before = await dump();
    // Hold the jobs table so result's SQL waits, then end its connection.
    const { value: answer, lines } = await whileJobsLocked(
      "byollm_result_for",
      () => s.device.result(stub, "done"),
      (pid) => admin.query("select pg_terminate_backend($1)", [pid]),
    );
    assert.equal(answer.text, STORE_FAILED);
    assert.equal(lines.length, 1, JSON.stringify(lines));
    assert.match(lines[0], /^byollm: the store failed on result: resultFor: terminating connection due to administrator command/);
    assert.deepEqual(await dump(), before, "the transaction was rolled back");
    s.clock.advance(LEASE_MS);
    await finish(s, await claimOne(s));
    await noStray();
  });

  test("a claim that waits past storeTimeoutMs and commits afterwards: the lease nobody saw lapses, the job is claimed again", async () => {
    const s = await pgSite();
    await ENDPOINTS.claim.prepare(s);
    await claimOne(s);
    s.clock.advance(LEASE_MS);
    const { value: answer, lines } = await whileJobsLocked("byollm_claim_for", () => withTimeout(s, 500, () => s.device.claim()));
    assert.equal(answer.text, STORE_FAILED);
    assert.deepEqual(lines, ["byollm: the store failed on claim: claim: no answer within 500 ms"]);
    // The claim's statement runs once the lock is gone and grants a lease.
    let held;
    for (let i = 0; i < 1000 && held?.attempts !== 2; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      held = await s.store.get(JOB);
    }
    assert.equal(held.attempts, 2, "the timed-out claim committed");
    assert.equal(held.state, "claimed");
    assert.deepEqual((await s.device.claim()).body.jobs, []);
    s.clock.advance(LEASE_MS);
    const stub = await claimOne(s);
    assert.equal((await s.store.get(JOB)).attempts, 3);
    await finish(s, stub);
    await noStray();
  });

  test("every connection of the pool terminated between fetch and result: the pool reconnects and the result is accepted", async () => {
    const s = await pgSite();
    const { stub } = await ENDPOINTS.fetch.prepare(s);
    const { rows } = await admin.query(
      "select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
    );
    assert.ok(rows.length >= 1);
    // The pool drops each idle client as its connection's end reaches it.
    for (let i = 0; i < 500 && pool.idleCount > 0; i += 1) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(pool.idleCount, 0);
    const result = await s.device.result(stub, "done");
    assert.equal(result.text, `{"accepted":true,"state":"ok"}`);
    await noStray();
  });
});

test("no unhandled rejection was left behind", async () => {
  await new Promise((resolve) => setTimeout(resolve, 50));
  await noStray();
});
