// OpenTelemetry: the spans of a full job and the meter's metrics, read with
// the SDK's in-memory exporters; one trace per job, derived from its id and
// linked across the daemon's requests; no private value in any span; and
// nothing loaded when the API is switched off.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { metrics as metricsApi, trace } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics";
import { ByollmApp, MemoryStore, createFetchHandler, generateSiteKeys, jobTraceContext } from "../dist/index.js";
import { Device, ORIGIN } from "./helpers/device.mjs";

const OWNER = "owner-c41e77";

// Registered before any store's registry is made (as an app's instrumentation file does).
const spans = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
const exported = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter: exported, exportIntervalMillis: 3_600_000 });
metricsApi.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));

test("one trace per job from enqueue to result, across the daemon's requests, and the meter's metrics", async () => {
  const store = new MemoryStore();
  const siteKeys = generateSiteKeys();
  const app = new ByollmApp({ store, siteKeys });
  const handler = createFetchHandler({ store, siteKeys, verificationUrl: `${ORIGIN}/pair` });
  const device = new Device(handler);
  await device.pair(app, OWNER);
  spans.reset();

  const prompt = "a private prompt 6e2d";
  const answer = "a private answer 90fa";
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: OWNER });
  const claim = await device.claim();
  const [stub] = claim.body.jobs;
  const fetched = await device.fetchJob(stub);
  await device.open(stub, fetched.body.envelope);
  await device.heartbeat([{ jobId: stub.id, leaseId: stub.lease.id }]);
  assert.equal((await device.result(stub, answer)).body.accepted, true);
  assert.equal((await handle.result()).state, "ok");
  const refused = await handler(new Request(`${ORIGIN}/byollm/claim`, { method: "POST", body: JSON.stringify({ protocolVersion: "2" }) }));
  assert.equal(refused.status, 401);

  // Spans and histogram records are made in batches, within 10 ms of their requests.
  await new Promise((resolve) => setTimeout(resolve, 30));
  const finished = spans.getFinishedSpans();
  const { traceId, spanId } = jobTraceContext(handle.id);
  const inJob = finished.filter((s) => s.spanContext().traceId === traceId);
  const names = inJob.map((s) => s.name).sort();
  // A claim of one job is in that job's trace; so are its fetch and result.
  assert.deepEqual(names, ["byollm claim", "byollm fetch", "byollm job", "byollm result", "send llm.generate"]);
  for (const span of inJob) assert.equal(span.parentSpanContext?.spanId, spanId, `${span.name} hangs from the job's root`);
  const byName = Object.fromEntries(finished.map((s) => [s.name, s]));
  const claimSpan = inJob.find((s) => s.name === "byollm claim");
  assert.equal(claimSpan.attributes["messaging.batch.message_count"], 1);
  assert.equal(claimSpan.attributes["messaging.destination.name"], "llm.generate");
  assert.equal(byName["send llm.generate"].attributes["messaging.operation.type"], "send");
  assert.equal(byName["byollm result"].attributes["messaging.operation.type"], "settle");
  assert.equal(byName["byollm result"].attributes["http.response.status_code"], 200);
  assert.equal(byName["byollm fetch"].attributes["messaging.system"], "byollm");
  assert.ok(byName["byollm heartbeat"], "every daemon request has a span");
  // The job span covers enqueue to result.
  const job = byName["byollm job"];
  const ms = (t) => t[0] * 1000 + t[1] / 1e6;
  assert.ok(ms(job.endTime) >= ms(job.startTime));
  const refusedSpan = finished.filter((s) => s.name === "byollm claim").find((s) => s.attributes["http.response.status_code"] === 401);
  assert.equal(refusedSpan.attributes["error.type"], "unauthorized");

  // A claim of two jobs: a span of its own, each job a receive span in its trace linked to it.
  const two = [await app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: OWNER }), await app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: OWNER })];
  spans.reset();
  const both = await device.post("claim", { protocolVersion: "2", runnerId: device.runnerId, capabilities: device.capabilities, max: 2 });
  assert.equal(both.body.jobs.length, 2);
  // The meter's collection records what is kept first: no wait here.
  await reader.forceFlush();
  const batch = spans.getFinishedSpans();
  const batchClaim = batch.find((s) => s.name === "byollm claim");
  assert.equal(batchClaim.attributes["messaging.batch.message_count"], 2);
  for (const h of two) {
    const receive = batch.find((s) => s.name === "receive llm.generate" && s.spanContext().traceId === jobTraceContext(h.id).traceId);
    assert.ok(receive, "a receive span in each job's trace");
    assert.equal(receive.links[0].context.spanId, batchClaim.spanContext().spanId);
  }
  finished.push(...batch);

  // Nothing private in a span: names, attributes, events, status.
  const text = JSON.stringify(finished.map((s) => ({ name: s.name, attributes: s.attributes, events: s.events, status: s.status, resource: s.resource?.attributes })));
  for (const value of [prompt, answer, OWNER, device.runnerId, handle.id, siteKeys.identitySecret, siteKeys.encryptionSecret, device.publicIdentity().identity]) {
    assert.ok(!text.includes(value), `a span carries ${value}`);
  }

  // The same metrics through the meter (the last collection, above).
  const scopes = exported.getMetrics().at(-1).scopeMetrics;
  const all = scopes.flatMap((s) => s.metrics);
  const metric = (name) => all.find((m) => m.descriptor.name === name);
  const requests = metric("byollm.request.duration");
  const claims = requests.dataPoints.filter((p) => p.attributes["messaging.operation.name"] === "claim");
  assert.equal(claims.reduce((n, p) => n + p.value.count, 0), 3);
  assert.equal(metric("byollm.job.duration").dataPoints[0].value.count, 1);
  assert.equal(metric("byollm.job.queue_wait").dataPoints[0].value.count, 3);
  assert.equal(metric("byollm.wait.duration").dataPoints[0].attributes["byollm.wait.outcome"], "answered");
  const okJobs = metric("byollm.jobs").dataPoints.find((p) => p.attributes["byollm.job.state"] === "ok");
  assert.equal(okJobs.value, 1);
  const unauthorized = metric("byollm.refusals").dataPoints.find((p) => p.attributes["byollm.refusal.reason"] === "unauthorized");
  assert.equal(unauthorized.value, 1);
  const metricText = JSON.stringify(all.map((m) => m.dataPoints.map((p) => p.attributes)));
  for (const value of [OWNER, device.runnerId, handle.id]) assert.ok(!metricText.includes(value));
});

test("BYOLLM_OTEL=0: the API is never loaded", () => {
  const script = `
    import { createRequire } from "node:module";
    const { ByollmApp, MemoryStore, createFetchHandler, generateSiteKeys } = await import(${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)});
    const store = new MemoryStore();
    const siteKeys = generateSiteKeys();
    new ByollmApp({ store, siteKeys });
    await createFetchHandler({ store, siteKeys, verificationUrl: "http://127.0.0.1/pair" })(new Request("http://127.0.0.1/byollm/claim", { method: "POST", body: "{}" }));
    const loaded = Object.keys(createRequire(import.meta.url).cache).filter((k) => k.includes("@opentelemetry"));
    console.log(JSON.stringify(loaded));`;
  const run = (env) => spawnSync(process.execPath, ["--input-type=module", "-e", script], { env: { ...process.env, ...env }, encoding: "utf8" });
  const off = run({ BYOLLM_OTEL: "0" });
  assert.equal(off.status, 0, off.stderr);
  assert.deepEqual(JSON.parse(off.stdout), []);
  const on = run({ BYOLLM_OTEL: "" });
  assert.equal(on.status, 0, on.stderr);
  assert.ok(JSON.parse(on.stdout).length > 0, "installed and not switched off: loaded");
});

test("a job's trace context is SHA-256 of its id, the same in every instance and version", () => {
  // Computed apart: hashlib.sha256(b"byollm job\x00job_0123").hexdigest()
  assert.deepEqual(jobTraceContext("job_0123"), { traceId: "a9661c0779792c9b7319cde10fd47d9c", spanId: "c0f02432c1d9ab78" });
});
