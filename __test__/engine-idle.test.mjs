// The idle memo through the real stack, without PostgreSQL: createFetchHandler
// over `sqlStore` whose caller answers the SQL functions from a small fake in
// JS (what byollm_get_runner, byollm_claim_for and byollm_heartbeat_for answer,
// `wakeAt` and `seenAt` included), with a fake notification channel and
// touchRunners added to its paths as postgresStore adds the real ones
// (IDLE-SPEC.md §4). An idle daemon's ticks are answered without a call, a
// key or a revocation reaches the next request, a channel that is not
// healthy sends everything to the store, and liveness writes come due in
// batches.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { sqlStore, sqlStorePaths } from "../dist/sql-store.js";
import { PROTOCOL } from "../dist/native.js";
import { Device, CAP } from "./helpers/device.mjs";

const SITE_KEYS = generateSiteKeys();
const T0 = 1_767_225_600_000;
const WRITE_MS = 45_000;

/** The SQL functions the engine calls, over runners kept in JS; each call counted by name. */
function fakeDatabase() {
  const runners = new Map();
  const calls = [];
  const queued = new Set(); // owners with a job waiting (answered, then left for the test to clear)
  const live = (r) => ({ id: r.id, revokedAt: r.revokedAt });
  const answer = {
    byollm_get_runner: ({ runnerId }) => {
      const r = runners.get(runnerId);
      return r === undefined ? null : { id: r.id, owner: r.owner, label: "t", device: r.device, revokedAt: r.revokedAt };
    },
    byollm_claim_for: ({ runnerId, now }) => {
      const r = runners.get(runnerId);
      if (r === undefined || r.revokedAt !== null) return { runner: r === undefined ? null : live(r), jobs: [] };
      if (queued.has(r.owner)) return { runner: live(r), jobs: [] }; // a store that tells no wakeAt
      return { runner: live(r), jobs: [], wakeAt: null, now };
    },
    byollm_heartbeat_for: ({ runnerId, now }) => {
      const r = runners.get(runnerId);
      if (r === undefined || r.revokedAt !== null) return { runner: r === undefined ? null : live(r) };
      if (r.seenAt === null || r.seenAt < now - WRITE_MS) r.seenAt = now;
      return { runner: live(r), lost: [], cancel: [], seenAt: r.seenAt };
    },
  };
  const call = async ({ fn, args }) => {
    calls.push(fn);
    const f = answer[fn];
    if (f === undefined) throw new Error(`the fake database has no ${fn}`);
    return JSON.stringify(f(JSON.parse(args)));
  };
  return { runners, calls, queued, call };
}

/** A sqlStore over the fake, with a notification channel and touchRunners the test drives. */
function idleStore(db) {
  const store = sqlStore(db.call);
  const channel = { subscribers: [], touched: [], fail: false };
  const paths = sqlStorePaths(store);
  paths.idle = {
    subscribe(onKey, onHealth) {
      const s = { onKey, onHealth };
      channel.subscribers.push(s);
      return () => channel.subscribers.splice(channel.subscribers.indexOf(s), 1);
    },
  };
  paths.touchRunners = async (entries, now) => {
    channel.touched.push({ entries, now });
    if (channel.fail) throw new Error("connection reset");
    return entries.map(({ runnerId, now: at }) => {
      const r = db.runners.get(runnerId);
      if (r === undefined || r.revokedAt !== null) return { runnerId, seenAt: null, revoked: true };
      r.seenAt = Math.max(r.seenAt ?? 0, at);
      return { runnerId, seenAt: r.seenAt, revoked: false };
    });
  };
  channel.key = (key) => channel.subscribers.forEach((s) => s.onKey(key));
  channel.health = (healthy) => channel.subscribers.forEach((s) => s.onHealth(healthy));
  return { store, channel };
}

/** A site on a fake clock over `store`, and one paired daemon of `owner` known to the fake. */
function site(db, store, owner = "alice") {
  const clock = { t: T0, now: () => clock.t };
  const handler = createFetchHandler({ store, siteKeys: SITE_KEYS, verificationUrl: "https://idle.byollm.test/pair", now: clock.now });
  const device = new Device(handler, [CAP], { now: clock.now });
  device.runnerId = `runner_${db.runners.size + 1}`;
  db.runners.set(device.runnerId, { id: device.runnerId, owner, device: device.publicIdentity(), revokedAt: null, seenAt: null });
  return { clock, device, handler };
}

/** One idle tick (a heartbeat without leases, then a claim), and the SQL calls it made. */
async function tick(db, device) {
  const before = db.calls.length;
  const beat = await device.heartbeat();
  const claim = await device.claim();
  return { beat, claim, calls: db.calls.slice(before) };
}

const IDLE = ["byollm_heartbeat_for", "byollm_claim_for"];

test("an idle daemon's ticks are answered without a call, with the bytes the store's answers give", async () => {
  const db = fakeDatabase();
  const { store, channel } = idleStore(db);
  const { clock, device } = site(db, store);
  const first = await tick(db, device);
  assert.deepEqual(first.calls, ["byollm_get_runner", ...IDLE], "not subscribed before the first request");
  assert.equal(channel.subscribers.length, 1);
  channel.health(true);
  assert.deepEqual((await tick(db, device)).calls, IDLE, "nothing remembered while unhealthy");
  for (let at = 1; at <= 3; at += 1) {
    clock.t += 10_000;
    const idle = await tick(db, device);
    assert.deepEqual(idle.calls, [], `tick ${at}`);
    // The same bytes a site with nothing remembered gives at this time.
    const plain = new Device(createFetchHandler({ store: sqlStore(db.call), siteKeys: SITE_KEYS, verificationUrl: "https://idle.byollm.test/pair", now: clock.now }), [CAP], { now: clock.now, keys: device.keys });
    plain.runnerId = device.runnerId;
    const through = await tick(db, plain);
    assert.deepEqual(through.calls, ["byollm_get_runner", ...IDLE]);
    assert.equal(idle.beat.text, through.beat.text);
    assert.equal(idle.claim.text, through.claim.text);
    assert.equal(idle.claim.text, `{"jobs":[],"leaseMs":60000}`);
  }
  assert.equal(channel.subscribers.length, 1, "one subscription per handler, however many requests");
});

test("a key for the runner's owner makes the next claim ask the store; another owner's does not", async () => {
  const db = fakeDatabase();
  const { store, channel } = idleStore(db);
  const { device } = site(db, store, "alice");
  await tick(db, device);
  channel.health(true);
  await tick(db, device);
  channel.key("o:bob");
  channel.key("t");
  assert.deepEqual((await tick(db, device)).calls, []);
  channel.key("o:alice");
  assert.deepEqual((await tick(db, device)).calls, ["byollm_claim_for"]);
  assert.deepEqual((await tick(db, device)).calls, []);
  // A store answer without wakeAt is never remembered.
  db.queued.add("alice");
  channel.key("o:alice");
  assert.deepEqual((await tick(db, device)).calls, ["byollm_claim_for"]);
  assert.deepEqual((await tick(db, device)).calls, ["byollm_claim_for"]);
});

test("a revocation's key makes the runner's next request read it again, and be refused", async () => {
  const db = fakeDatabase();
  const { store, channel } = idleStore(db);
  const { device } = site(db, store);
  await tick(db, device);
  channel.health(true);
  await tick(db, device);
  db.runners.get(device.runnerId).revokedAt = T0;
  assert.deepEqual((await tick(db, device)).calls, [], "no key: the memo answers");
  channel.key(`r:${device.runnerId}`);
  const before = db.calls.length;
  const beat = await device.heartbeat();
  assert.deepEqual(db.calls.slice(before), ["byollm_get_runner"]);
  assert.equal(beat.status, 403);
  assert.equal(beat.body.error, "revoked");
  assert.equal((await device.claim()).status, 403);
});

test("while the channel is not healthy every request asks the store, and health forgets everything", async () => {
  const db = fakeDatabase();
  const { store, channel } = idleStore(db);
  const { device } = site(db, store);
  await tick(db, device);
  channel.health(true);
  await tick(db, device);
  assert.deepEqual((await tick(db, device)).calls, []);
  channel.health(false);
  for (let at = 0; at < 3; at += 1) assert.deepEqual((await tick(db, device)).calls, IDLE);
  channel.health(true);
  assert.deepEqual((await tick(db, device)).calls, IDLE, "forgotten on the way back");
  assert.deepEqual((await tick(db, device)).calls, []);
});

test("liveness writes that come due are flushed through touchRunners, in one batch a second at most", async () => {
  const db = fakeDatabase();
  const { store, channel } = idleStore(db);
  const a = site(db, store);
  const b = { device: new Device(a.handler, [CAP], { now: a.clock.now }) };
  b.device.runnerId = "runner_b";
  db.runners.set("runner_b", { id: "runner_b", owner: "bob", device: b.device.publicIdentity(), revokedAt: null, seenAt: null });
  await tick(db, a.device);
  channel.health(true);
  await tick(db, a.device);
  await tick(db, b.device);
  // 9 s ticks: written at T0, due from T0 + 45 s; the 5th tick's write waits for the flush.
  for (let at = 1; at <= 4; at += 1) {
    a.clock.t += 9_000;
    assert.deepEqual((await tick(db, a.device)).calls, []);
    assert.deepEqual((await tick(db, b.device)).calls, []);
  }
  assert.deepEqual(channel.touched, []);
  a.clock.t += 9_000;
  assert.deepEqual((await tick(db, a.device)).calls, []);
  assert.deepEqual((await tick(db, b.device)).calls, []);
  await new Promise((resolve) => setTimeout(resolve, 1_100));
  assert.equal(channel.touched.length, 1, "one batch");
  assert.deepEqual(channel.touched[0].entries, [
    { runnerId: a.device.runnerId, now: T0 + 45_000 },
    { runnerId: "runner_b", now: T0 + 45_000 },
  ]);
  assert.equal(db.runners.get("runner_b").seenAt, T0 + 45_000);
  // Written: quiet for another 45 s; nothing more to flush.
  a.clock.t += 40_000;
  assert.deepEqual((await tick(db, a.device)).calls, []);
  await new Promise((resolve) => setTimeout(resolve, 1_100));
  assert.equal(channel.touched.length, 1);
  // A failed flush is logged once and puts nothing back: past the slack the heartbeat writes.
  channel.fail = true;
  const warned = [];
  const warn = console.warn;
  console.warn = (line) => warned.push(line);
  try {
    a.clock.t += 5_000;
    assert.deepEqual((await tick(db, a.device)).calls, []);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    a.clock.t += 1_000;
    assert.deepEqual((await tick(db, a.device)).calls, []);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
  } finally {
    console.warn = warn;
  }
  assert.equal(channel.touched.length, 3);
  assert.equal(warned.length, 1, warned.join("\n"));
  // Still stored as written at T0 + 45 s: answered just short of the slack, at it the store.
  a.clock.t = T0 + 45_000 + PROTOCOL.livenessSlackMs - 1;
  assert.deepEqual((await tick(db, a.device)).calls, []);
  a.clock.t += 1;
  assert.deepEqual((await tick(db, a.device)).calls, ["byollm_heartbeat_for"], "at the slack: the store");
});

test("a handler that is dropped stops listening: subscriptions do not pile up", async () => {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc");
  const db = fakeDatabase();
  const { store, channel } = idleStore(db);
  for (let at = 0; at < 20; at += 1) {
    const { device } = site(db, store);
    await tick(db, device);
  }
  assert.equal(channel.subscribers.length, 20, "one per handler, from its first request");
  for (let round = 0; round < 20 && channel.subscribers.length > 1; round += 1) {
    gc();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  // The last handler made may still be held by the test's own frames.
  assert.ok(channel.subscribers.length <= 1, `${channel.subscribers.length} left`);
});
