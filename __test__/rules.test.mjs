// The native protocol rules against the golden vectors, on every supported
// Node (no reference package imported, so this also runs under Node 20).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as native from "../index.js";
import { inspect, payloadVerdict, provenance, sealedOutcome } from "./helpers/inspect.mjs";

const vector = (name) => JSON.parse(readFileSync(new URL(`../tests/vectors/${name}`, import.meta.url), "utf8"));
const misc = vector("misc.json");

test("inspectRequest gives the reference's version refusals", () => {
  for (const { body, refusal } of misc.checkProtocolVersion) {
    const text = JSON.stringify(body);
    const r = inspect("claim", text);
    if (refusal) {
      assert.deepEqual(r, { stage: "version", status: 400, error: refusal }, text);
    } else {
      assert.equal(r.stage, "schema", text);
    }
  }
});

test("tooLargeMessage matches misc.json", () => {
  for (const { bytes, tooLargeMessage } of misc.tooLarge) assert.equal(native.tooLargeMessage(bytes), tooLargeMessage);
});

test("an enqueue's payload: the refusal messages and the canonical sealed text", async () => {
  let n = 0;
  for (const { input, result } of misc.enqueueRefusals) {
    if (!result.error.message.startsWith("invalid ")) continue;
    const r = await payloadVerdict(input.kind, input.payload === undefined ? undefined : JSON.stringify(input.payload));
    assert.deepEqual(r, { ok: false, message: result.error.message });
    n++;
  }
  assert.ok(n >= 7);
  const { input, sealedPlaintext, record } = misc.enqueueStores;
  const ok = await payloadVerdict(input.kind, JSON.stringify(input.payload));
  assert.equal(ok.canonical, sealedPlaintext);
  assert.equal(ok.sizeClass, record.sizeClass);
});

test("a result's provenance matches provenance.json, key order included", async () => {
  for (const c of vector("provenance.json").cases) {
    assert.equal(JSON.stringify(await provenance(c.input)), JSON.stringify(c.expected));
  }
});

test("JSON edge cases decide like JSON.parse would", () => {
  // Nesting to 64 levels parses, so the version check answers; deeper is
  // refused at once, a deliberate difference (V8's JSON.parse has no small
  // depth limit; docs/security.md lists the bound).
  const nested = (n) => "[".repeat(n) + "]".repeat(n);
  assert.equal(inspect("claim", nested(64)).stage, "version");
  assert.equal(inspect("claim", `{"protocolVersion":"2","runnerId":${nested(63)},"capabilities":[],"max":1}`).stage, "schema");
  const deep = inspect("claim", nested(100_000));
  assert.deepEqual(deep, { stage: "json", status: 400, error: { error: "bad-request", message: "request body nests arrays and objects deeper than 64 levels" } });
  assert.equal(inspect("claim", `{"protocolVersion":"2","runnerId":${nested(64)},"capabilities":[],"max":1}`).stage, "json");
  // Duplicate keys: the last value wins.
  assert.equal(inspect("claim", '{"protocolVersion":"1","protocolVersion":"2","runnerId":"r","capabilities":[],"max":1}').stage, "ok");
  // 5.0 and 5e0 are the integer 5; 1e400 is Infinity, not an integer; -0 is not positive.
  assert.deepEqual(inspect("claim", '{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":5e0}').body.max, 5);
  assert.equal(inspect("claim", '{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1e400}').stage, "schema");
  const env = '{"ciphertext":"c","recipientKeyId":"r","senderKeyId":"s","direction":"result","deadlineAt":-0}';
  assert.equal(inspect("result", `{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l","envelope":${env},"disposition":"ok"}`).stage, "schema");
  // A lone surrogate survives into the validated body exactly.
  const lone = inspect("fetch", '{"protocolVersion":"2","runnerId":"\\ud800","jobId":"j","leaseId":"l"}');
  assert.equal(lone.body.runnerId, "\ud800");
  // null is not "absent" for an optional key.
  const cap = '{"kind":"llm.chat","service":"s","backendId":"ollama","backendClass":"http","model":"m","knownModels":null,"offerScope":"team"}';
  assert.equal(inspect("claim", `{"protocolVersion":"2","runnerId":"r","capabilities":[${cap}],"max":1}`).stage, "schema");
  assert.deepEqual(inspect("claim", "{nope"), { stage: "json", status: 400, error: { error: "bad-request", message: "request body is not valid JSON" } });
  assert.deepEqual(inspect("pair", '{"protocolVersion":"2","action":"start"}').error, { error: "bad-request", message: "pair request failed schema validation" });
  // The heartbeat's `withheld` is filled in, in schema order.
  const hb = inspect("heartbeat", '{"protocolVersion":"2","runnerId":"r","daemonVersion":"1","capabilities":[],"activeLeases":[]}');
  assert.equal(JSON.stringify(hb.body), '{"protocolVersion":"2","runnerId":"r","daemonVersion":"1","capabilities":[],"withheld":[],"activeLeases":[]}');
  assert.throws(() => inspect("nope", "{}"), /unknown protocol endpoint/);
});

test("runnerAvailability reasons", () => {
  const cap = (kind, offerScope, backendId = "ollama") => ({ kind, service: "s", backendId, backendClass: "http", model: "m", offerScope });
  const runner = (owner, caps, extra = {}) => ({ id: "r", owner, revokedAt: null, lastHeartbeatAt: 1000, capabilities: caps, ...extra });
  const q = (owner, audience) => ({ kind: "llm.chat", owner, ...(audience ? { audience } : {}) });
  assert.deepEqual({ ...native.runnerAvailability([], q("a"), 1000, 35000) }, { available: false, reason: "no-runner-paired", candidates: 0 });
  assert.equal(native.runnerAvailability([runner("a", [cap("llm.chat", "team")], { revokedAt: 5 })], q("a"), 1000, 35000).reason, "no-runner-online");
  assert.equal(native.runnerAvailability([runner("a", [cap("llm.chat", "team")])], q("a"), 36001, 35000).reason, "no-runner-online");
  assert.deepEqual({ ...native.runnerAvailability([runner("a", [cap("llm.chat", "team"), cap("llm.chat", "private")])], q("a"), 36000, 35000) }, { available: true, candidates: 2 });
  assert.equal(native.runnerAvailability([runner("b", [cap("llm.generate", "team")])], q("a"), 1000, 35000).reason, "no-matching-capability");
  assert.equal(native.runnerAvailability([runner("b", [cap("llm.chat", "private")])], q("a", "team"), 1000, 35000).reason, "default-unusable");
  assert.equal(native.runnerAvailability([runner("b", [cap("llm.chat", "team", "claude-cli")])], q("a", "team"), 1000, 35000).reason, "default-unusable");
  assert.equal(native.runnerAvailability([runner("b", [cap("llm.chat", "team")])], q("a"), 1000, 35000).reason, "audience-admits-nobody");
});

test("a sealed outcome: messages for bad JSON and non-outcomes", async () => {
  assert.deepEqual(await sealedOutcome("{"), { ok: false, message: "the sealed result was not valid JSON" });
  assert.deepEqual(await sealedOutcome("null"), { ok: false, message: "the sealed result was not an outcome" });
  const ok = await sealedOutcome('{"outcome":{"outcome":"canceled"},"ran":{"model":"m","backendClass":"process","durationMs":0,"stop":"unknown"}}');
  assert.deepEqual(ok, { ok: true, outcome: { outcome: "canceled" }, ran: { model: "m", backendClass: "process", stop: "unknown" } });
});

test("inspectRequest works in worker threads and after a worker exits", async () => {
  const { Worker } = await import("node:worker_threads");
  const body = '{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l"}';
  for (let round = 0; round < 3; round++) {
    const worker = new Worker(
      `const { parentPort, workerData } = require("node:worker_threads");
       import(workerData.url).then((native) => parentPort.postMessage(native.inspectRequest("fetch", workerData.body).body));`,
      { eval: true, workerData: { url: new URL("../index.js", import.meta.url).href, body } },
    );
    const [reply] = await Promise.all([new Promise((resolve, reject) => { worker.once("message", resolve); worker.once("error", reject); })]);
    assert.deepEqual(JSON.parse(reply), JSON.parse(body));
    await worker.terminate();
    assert.deepEqual(inspect("fetch", body), { stage: "ok", body: JSON.parse(body) });
  }
});
