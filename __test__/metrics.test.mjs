// Metrics: app.metrics() and createMetricsHandler over the in-memory store,
// on the direct lane and the general path, with the exposition read by
// Prometheus's own parser (prometheus_client), the 401 and 503 answers, the
// off switch, and a scan for private values in everything exported.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ByollmApp,
  ByollmHandlers,
  MemoryStore,
  NoRunnerAvailableError,
  ResultTimeoutError,
  createFetchHandler,
  createMetricsHandler,
  generateSiteKeys,
} from "../dist/index.js";
import { Device, ORIGIN } from "./helpers/device.mjs";
import { parseExposition, sampleValue } from "./helpers/prometheus.mjs";

const OWNER = "owner-7f3a9c";
const TOKEN = "scrape-token-4b1d";

function site(store = new MemoryStore(), options = {}) {
  const siteKeys = generateSiteKeys();
  const app = new ByollmApp({ store, siteKeys, noRunnerGraceMs: 0, ...options.app });
  const handler = createFetchHandler({ store, siteKeys, verificationUrl: `${ORIGIN}/pair`, ...options.handler });
  return { store, siteKeys, app, handler };
}

async function cycle(device, text) {
  const claim = await device.claim();
  const [stub] = claim.body.jobs;
  assert.ok(stub, "a job was claimed");
  const fetched = await device.fetchJob(stub);
  assert.equal(fetched.status, 200);
  await device.open(stub, fetched.body.envelope);
  const result = await device.result(stub, text);
  assert.equal(result.body.accepted, true);
  return stub;
}

/** A claim with the protocol's version and no signature: a 401. */
const UNSIGNED = JSON.stringify({ protocolVersion: "2" });

const scrape = (handler, token) =>
  handler(new Request(`${ORIGIN}/metrics`, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } }));

test("the snapshot and the exposition count a site's traffic (direct lane)", async () => {
  const { app, handler, siteKeys } = site();
  const device = new Device(handler);
  await device.pair(app, OWNER);

  const prompts = ["first private prompt 91c2", "second private prompt 5d0e", "third private prompt a7b4"];
  const handles = [];
  for (const prompt of prompts) handles.push(await app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: OWNER }));
  await cycle(device, "answer text e81f");
  await cycle(device, "answer text 03ab");

  // Refusals of each kind the status tells.
  const unsigned = await handler(new Request(`${ORIGIN}/byollm/claim`, { method: "POST", body: UNSIGNED }));
  assert.equal(unsigned.status, 401);
  assert.equal((await handler(new Request(`${ORIGIN}/byollm/nothing`, { method: "POST", body: "{}" }))).status, 404);
  assert.equal((await handler(new Request(`${ORIGIN}/byollm/claim`, { method: "GET" }))).status, 405);
  const big = await handler(new Request(`${ORIGIN}/byollm/result`, { method: "POST", body: "x".repeat(7 * 1024 * 1024) }));
  assert.equal(big.status, 400);
  // A release of a refused job (the daemon's audience rules said no).
  const claimed = await device.claim();
  const [held] = claimed.body.jobs;
  const released = await device.post("release", {
    protocolVersion: "2",
    runnerId: device.runnerId,
    leases: [{ jobId: held.id, leaseId: held.lease.id }],
    reason: "refused",
  });
  assert.equal(released.status, 200);

  // Waits: one answered, one timed out.
  assert.equal((await handles[0].result()).state, "ok");
  await assert.rejects(handles[2].result({ timeoutMs: 1 }), ResultTimeoutError);

  const m = await app.metrics();
  assert.equal(m.store.ok, true);
  assert.deepEqual(m.jobs, { queued: 1, claimed: 0, running: 0, ok: 2, error: 0, canceled: 0, expired: 0 });
  assert.deepEqual(m.runners, { paired: 1, online: 1, revoked: 0 }, "an approval counts as heard from");
  assert.equal(m.pairings.started, 1);
  assert.equal(m.pairings.approved, 1);
  assert.equal(m.pairings.collected, 1);
  assert.equal(m.pairings.pending, 0);
  assert.equal(m.enqueued, 3);
  assert.equal(m.endpoints.claim.requests, 4);
  assert.equal(m.endpoints.claim.statuses["200"], 3);
  assert.equal(m.endpoints.claim.statuses["401"], 1);
  assert.equal(m.endpoints.fetch.statuses["200"], 2);
  assert.equal(m.endpoints.result.statuses["200"], 2);
  assert.equal(m.endpoints.result.statuses["400"], 1);
  assert.equal(m.endpoints.other.statuses["404"], 1);
  assert.equal(m.endpoints.other.statuses["405"], 1);
  assert.equal(m.endpoints.pair.requests, 2);
  assert.equal(m.endpoints.claim.latency.count, 4);
  assert.ok(m.endpoints.claim.latency.sum > 0);
  assert.deepEqual(m.refusals, { unauthorized: 1, revoked: 0, badRequest: 1, notFound: 1, bodyTooLarge: 1, audience: 1, rateLimited: 0 });
  // Two first claims timed (the released job's second claim is not a first), two results.
  assert.equal(m.jobLatency.queueWait.count, 3);
  assert.equal(m.jobLatency.total.count, 2);
  assert.ok(m.jobLatency.total.p50 !== null && m.jobLatency.total.p50 >= 0);
  assert.equal(m.waits.outcomes.answered, 1);
  assert.equal(m.waits.outcomes.timedOut, 1);
  assert.equal(m.waits.duration.count, 2);
  assert.deepEqual(JSON.parse(JSON.stringify(m)), m, "plain JSON data");

  // The exposition, read by Prometheus's parser, says the same.
  const metrics = createMetricsHandler(app, { token: TOKEN });
  const res = await scrape(metrics, TOKEN);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  const families = parseExposition(text);
  const types = Object.fromEntries(families.map((f) => [f.name, f.type]));
  assert.equal(types.byollm_jobs, "gauge");
  assert.equal(types.byollm_requests, "counter");
  assert.equal(types.byollm_request_duration_seconds, "histogram");
  assert.equal(types.byollm_job_queue_wait_seconds, "histogram");
  assert.equal(types.byollm_job_duration_seconds, "histogram");
  assert.equal(types.byollm_refusals, "counter");
  assert.equal(sampleValue(families, "byollm_jobs", { state: "queued" }), 1);
  assert.equal(sampleValue(families, "byollm_jobs", { state: "ok" }), 2);
  assert.equal(sampleValue(families, "byollm_runners", { state: "paired" }), 1);
  assert.equal(sampleValue(families, "byollm_requests_total", { endpoint: "claim", status: "401" }), 1);
  assert.equal(sampleValue(families, "byollm_refusals_total", { reason: "audience" }), 1);
  assert.equal(sampleValue(families, "byollm_refusals_total", { reason: "body_too_large" }), 1);
  assert.equal(sampleValue(families, "byollm_request_duration_seconds_count", { endpoint: "claim" }), 4);
  assert.equal(sampleValue(families, "byollm_request_duration_seconds_bucket", { endpoint: "claim", le: "+Inf" }), 4);
  assert.equal(sampleValue(families, "byollm_job_duration_seconds_count"), 2);
  assert.equal(sampleValue(families, "byollm_waits_total", { outcome: "timed_out" }), 1);
  assert.equal(sampleValue(families, "byollm_store_up"), 1);
  // Buckets are cumulative and end at the count.
  const buckets = families.find((f) => f.name === "byollm_request_duration_seconds").samples.filter((s) => s.name.endsWith("_bucket") && s.labels.endpoint === "claim");
  for (let at = 1; at < buckets.length; at += 1) assert.ok(buckets[at].value >= buckets[at - 1].value);

  // Nothing private in any label, value or name.
  const exported = `${text}\n${JSON.stringify(m)}`;
  const privateValues = [
    OWNER,
    device.runnerId,
    ...prompts,
    "answer text e81f",
    "answer text 03ab",
    siteKeys.identitySecret,
    siteKeys.encryptionSecret,
    siteKeys.identityPublic,
    device.publicIdentity().identity,
    device.publicIdentity().encryption,
    ...handles.map((h) => h.id),
  ];
  for (const value of privateValues) assert.ok(!exported.includes(value), `exported text carries ${value}`);
  for (const family of families) {
    for (const s of family.samples) {
      for (const [k, v] of Object.entries(s.labels)) {
        assert.ok(["state", "event", "endpoint", "status", "le", "reason", "outcome"].includes(k), `label ${k}`);
        assert.ok(v.length <= 16, `label value ${v}`);
      }
    }
  }
});

test("a scrape without the right token gets 401 and no store data", async () => {
  const { app } = site();
  const metrics = createMetricsHandler(app, { token: TOKEN });
  for (const header of [undefined, "wrong", `${TOKEN}x`, ""]) {
    const res = await scrape(metrics, header);
    assert.equal(res.status, 401);
    assert.equal(res.headers.get("www-authenticate"), 'Bearer realm="byollm metrics"');
    const body = await res.text();
    assert.ok(!body.includes("byollm_"), body);
  }
  const basic = await metrics(new Request(`${ORIGIN}/metrics`, { headers: { authorization: `Basic ${TOKEN}` } }));
  assert.equal(basic.status, 401);
  assert.equal((await metrics(new Request(`${ORIGIN}/metrics`, { method: "POST", body: "" }))).status, 405);
  assert.equal((await scrape(createMetricsHandler(app, { public: true }), undefined)).status, 200, "public: open");
  // No token and no `public: true` (an unset METRICS_TOKEN): refused when created, naming the option.
  for (const options of [undefined, {}, { token: undefined }, { token: "" }, { public: false }]) {
    assert.throws(() => createMetricsHandler(app, options), (error) => error instanceof TypeError && /`token`/.test(error.message) && /public: true/.test(error.message), JSON.stringify(options));
  }
  assert.throws(() => createMetricsHandler(app, { token: TOKEN, public: true }), TypeError, "both is ambiguous");
  assert.throws(() => createMetricsHandler({}, { public: true }), TypeError);
});

/** A store of the app's own over a MemoryStore, whose reads can be made to fail. */
function ownStore() {
  const inner = new MemoryStore();
  const state = { down: false };
  const store = {};
  for (const name of Object.getOwnPropertyNames(MemoryStore.prototype)) {
    if (name === "constructor" || typeof inner[name] !== "function") continue;
    store[name] = (...args) => {
      if (state.down && name === "listRunners") return Promise.reject(new Error("connection refused: db.internal:5432"));
      return inner[name](...args);
    };
  }
  return { store, state };
}

test("a store of the app's own: runners from its listing, jobs null; a store error is a 503 with the counters", async () => {
  const { store, state } = ownStore();
  const { app, handler } = site(store);
  const device = new Device(handler);
  await device.pair(app, OWNER);
  await app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: OWNER });
  await cycle(device, "done");

  const m = await app.metrics();
  assert.equal(m.jobs, null);
  assert.equal(m.pairings.pending, null);
  assert.deepEqual(m.runners, { paired: 1, online: 1, revoked: 0 });
  // The general path timed the job too.
  assert.equal(m.jobLatency.queueWait.count, 1);
  assert.equal(m.jobLatency.total.count, 1);

  state.down = true;
  const down = await app.metrics();
  assert.equal(down.store.ok, false);
  assert.equal(down.runners, null);
  assert.equal(down.endpoints.result.statuses["200"], 1, "the counters still answer");
  const res = await scrape(createMetricsHandler(app, { public: true }));
  assert.equal(res.status, 503);
  const text = await res.text();
  assert.ok(!text.includes("db.internal"), "no error text in the exposition");
  const families = parseExposition(text);
  assert.equal(sampleValue(families, "byollm_store_up"), 0);
  assert.equal(sampleValue(families, "byollm_requests_total", { endpoint: "result", status: "200" }), 1);
  assert.equal(sampleValue(families, "byollm_runners", { state: "paired" }), undefined);
});

test("the general path (ByollmHandlers) counts into the store's registry too; waits end no_runner and fallback", async () => {
  class Wrapped extends MemoryStore {}
  const store = new Wrapped();
  const siteKeys = generateSiteKeys();
  const app = new ByollmApp({ store, siteKeys, noRunnerGraceMs: 0 });
  const handlers = new ByollmHandlers({ store, siteKeys, verificationUrl: `${ORIGIN}/pair` });
  // A fetch-style adapter over handle(), so the device helper drives it.
  const handler = async (request) => {
    const endpoint = new URL(request.url).pathname.split("/").pop();
    const rawBody = await request.text();
    const signature = request.headers.get("x-byollm-runner")
      ? { runnerId: request.headers.get("x-byollm-runner"), issuedAt: Number(request.headers.get("x-byollm-issued-at")), signature: request.headers.get("x-byollm-signature") }
      : undefined;
    const out = await handlers.handle(endpoint, JSON.parse(rawBody), { endpoint, rawBody, signature });
    return new Response(JSON.stringify(out.body), { status: out.status });
  };
  const device = new Device(handler);
  await device.pair(app, OWNER);
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: OWNER });
  await cycle(device, "done");
  assert.equal((await handle.result()).state, "ok");

  await app.revokeRunner(device.runnerId);
  assert.equal((await device.claim()).status, 403);
  const stranded = await app.enqueue({ kind: "llm.generate", payload: { prompt: "q" }, owner: OWNER });
  await assert.rejects(stranded.result(), NoRunnerAvailableError);
  const substituted = await stranded.result({ onNoRunner: () => "from a hosted model" });
  assert.equal(substituted.fallback, true);

  const m = await app.metrics();
  assert.equal(m.endpoints.claim.statuses["200"], 1);
  assert.equal(m.endpoints.claim.statuses["403"], 1);
  assert.equal(m.refusals.revoked, 1);
  assert.equal(m.jobLatency.queueWait.count, 1);
  assert.equal(m.jobLatency.total.count, 1);
  assert.deepEqual(m.runners, { paired: 0, online: 0, revoked: 1 });
  assert.equal(m.waits.outcomes.answered, 1);
  assert.equal(m.waits.outcomes.noRunner, 1);
  assert.equal(m.waits.outcomes.fallback, 1);
});

test("metrics: false records nothing; the store's counts still answer", async () => {
  const { app, handler } = site(new MemoryStore(), { app: { metrics: false }, handler: { metrics: false } });
  const device = new Device(handler);
  await device.pair(app, OWNER);
  await app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: OWNER });
  await cycle(device, "done");
  const m = await app.metrics();
  assert.equal(m.jobs.ok, 1);
  assert.equal(m.enqueued, 0);
  assert.equal(m.pairings.approved, 0);
  for (const endpoint of Object.values(m.endpoints)) assert.equal(endpoint.requests, 0);
  assert.equal(m.jobLatency.total.count, 0);
});

test("one registry per store: a second app and handler on the same store add to the same counts", async () => {
  const store = new MemoryStore();
  const a = site(store);
  const b = site(store);
  await a.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: OWNER });
  await b.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: OWNER });
  await a.handler(new Request(`${ORIGIN}/byollm/claim`, { method: "POST", body: UNSIGNED }));
  await b.handler(new Request(`${ORIGIN}/byollm/claim`, { method: "POST", body: UNSIGNED }));
  const [ma, mb] = [await a.app.metrics(), await b.app.metrics()];
  assert.equal(ma.enqueued, 2);
  assert.equal(ma.endpoints.claim.statuses["401"], 2);
  assert.deepEqual(ma.endpoints, mb.endpoints);
  // Another store, its own registry.
  assert.equal((await site().app.metrics()).enqueued, 0);
});
