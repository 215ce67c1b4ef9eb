// Our createFetchHandler against the reference's recorded HTTP session
// (tests/vectors/http-transcript.json): the same requests, replayed live with
// fresh signatures and envelopes, must get the same statuses, headers and
// bodies (modulo the random values the transcript shows as placeholders).
// The same replay also runs against the reference handler, as a check that the
// replay itself is faithful. Then a table of malformed requests, each sent to
// both handlers: same status and body, never a 500.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import sodium from "libsodium-wrappers";
import * as protocol from "@byollm/protocol";
import * as reference from "@byollm/server";
import * as ours from "../dist/index.js";


// The one message we word differently on purpose: the reference's advice,
// `npx --package @byollm/server keygen`, asks the registry for the reference
// when this package is installed under its alias; `npx --no keygen` runs the
// installed one under either name (docs/differences.md).
const keygenAdvice = (message) => message.replace("`npx --package @byollm/server keygen`", "`npx --no keygen`");
const vectors = new URL("../tests/vectors/", import.meta.url);
const transcript = JSON.parse(readFileSync(new URL("http-transcript.json", vectors), "utf8"));
const keys = JSON.parse(readFileSync(new URL("keys.json", vectors), "utf8"));
const SITE = keys.parties.site.storedKeys;
const DEVICE = keys.parties.device.storedKeys;
const STRANGER = keys.parties.stranger.storedKeys;
const SITE_KEY_ID = transcript.siteKeyId;
const DEVICE_KEY_ID = transcript.deviceKeyId;
const ORIGIN = "https://app.example";
const JOB_ID = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b";

function mount(mod, clock) {
  const store = new mod.MemoryStore();
  const now = () => clock.now;
  const app = new mod.ByollmApp({ store, siteKeys: SITE, now });
  const handler = mod.createFetchHandler({
    store,
    siteKeys: SITE,
    verificationUrl: `${ORIGIN}/settings/runners`,
    basePath: "/api/byollm",
    now,
  });
  return { store, app, handler };
}

const ciphertextBytes = (text) => Buffer.from(text, "base64url").length;

/** Replace live random values by the transcript's placeholders. */
function normalize(value, live) {
  if (typeof value === "string") {
    for (const [name, actual] of Object.entries(live)) {
      if (actual !== undefined && value === actual) return `<${name}>`;
    }
    return value;
  }
  if (Array.isArray(value)) return value.map((v) => normalize(v, live));
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) {
      out[k] = k === "ciphertext" && typeof v === "string" ? `<ciphertext: ${ciphertextBytes(v)} bytes>` : normalize(v, live);
    }
    return out;
  }
  return value;
}

/** Put live values where the transcript has placeholders. */
function fill(value, live) {
  if (typeof value === "string") {
    const m = /^<(\w+)>$/.exec(value);
    if (m && live[m[1]] !== undefined) return live[m[1]];
    return value;
  }
  if (Array.isArray(value)) return value.map((v) => fill(v, live));
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v, live)]));
  }
  return value;
}

async function resultEnvelope(clock, { jobId = JOB_ID } = {}) {
  const plaintext = JSON.stringify({
    outcome: { outcome: "ok", text: "hi" },
    ran: { model: "llama3.2", backendClass: "http", durationMs: 12, stop: "end", stopReported: true },
  });
  return protocol.seal({
    plaintext,
    senderKeys: DEVICE,
    recipientEncryptionPublic: SITE.encryptionPublic,
    context: {
      jobId,
      senderKeyId: DEVICE_KEY_ID,
      recipientKeyId: SITE_KEY_ID,
      deadlineAt: clock + 86_400_000,
      direction: "result",
    },
  });
}

async function send(handler, { method, path, headers = {}, body }) {
  const init = { method, headers };
  if (body !== undefined) init.body = typeof body === "string" ? body : JSON.stringify(body);
  const response = await handler(new Request(`${ORIGIN}${path}`, init));
  const text = await response.text();
  return {
    status: response.status,
    headers: Object.fromEntries(response.headers),
    text,
    json: JSON.parse(text),
  };
}

function signedHeaders(keys, endpoint, runnerId, issuedAt, body) {
  const sig = protocol.signRequest(keys, { endpoint, runnerId, issuedAt, body });
  return {
    "content-type": "application/json",
    "x-byollm-runner": runnerId,
    "x-byollm-issued-at": String(issuedAt),
    "x-byollm-signature": sig.signature,
  };
}

/**
 * Replay the session against one implementation; returns the list of
 * {name, actual, expected} comparisons (already normalised).
 */
async function replay(mod) {
  await sodium.ready;
  const clock = { now: transcript.steps[0].clock };
  const { app, handler, store } = mount(mod, clock);
  const live = {};
  const seen = [];

  for (const step of transcript.steps) {
    clock.now = step.clock;
    if (step.appCall) {
      let value;
      switch (step.name) {
        case "app.pendingPairing(userCode, lowercased, no dash)":
          value = await app.pendingPairing(live.userCode.toLowerCase().replace("-", ""));
          break;
        case "app.approvePairing({userCode, owner:'alice'}) -> RunnerRecord":
          value = await app.approvePairing({ userCode: live.userCode, owner: "alice" });
          live.runnerId = value.id;
          break;
        case "app.approvePairing again -> throws":
          try {
            await app.approvePairing({ userCode: live.userCode, owner: "alice" });
            value = "did not throw";
          } catch (error) {
            value = { name: error.name, message: error.message };
          }
          break;
        case "app.enqueue -> JobHandle.record":
          value = (await app.enqueue({ kind: "llm.generate", payload: { prompt: "Say hi." }, owner: "alice", id: JOB_ID })).record;
          break;
        case "device opens the fetched envelope":
          value = await protocol.open({
            envelope: live.fetched,
            recipientKeys: DEVICE,
            senderIdentityPublic: SITE.identityPublic,
            expected: { jobId: JOB_ID, senderKeyId: SITE_KEY_ID, recipientKeyId: DEVICE_KEY_ID, direction: "payload" },
          });
          break;
        case "app.cancel(jobId) while held (request recorded, state unchanged)":
          value = (await app.cancel(JOB_ID)).state;
          break;
        case "result whose sealed inner text is JSON null (reference: handler promise rejects)": {
          const ciphertext = Buffer.from(
            sodium.crypto_box_seal(Buffer.from("null"), Buffer.from(SITE.encryptionPublic, "base64url")),
          ).toString("base64url");
          const body = JSON.stringify({
            protocolVersion: "2",
            runnerId: live.runnerId,
            jobId: JOB_ID,
            leaseId: live.leaseId,
            envelope: { ciphertext, recipientKeyId: SITE_KEY_ID, senderKeyId: DEVICE_KEY_ID, direction: "result", deadlineAt: clock.now + 86_400_000 },
            disposition: "ok",
          });
          const request = new Request(`${ORIGIN}/api/byollm/result`, {
            method: "POST",
            headers: signedHeaders(DEVICE, "result", live.runnerId, clock.now, body),
            body,
          });
          try {
            const response = await handler(request);
            value = { status: response.status, body: await response.json() };
          } catch (error) {
            value = { rejects: error.name, message: error.message };
          }
          seen.push({ name: step.name, actual: value, expected: step.value, deviation: true });
          continue;
        }
        case "app.result(jobId)":
          value = await app.result(JOB_ID);
          break;
        case "app.runners('alice') after revoke":
          await app.revokeRunner(live.runnerId);
          value = await app.runners("alice");
          break;
        default:
          if (step.name.startsWith("app.runnerAvailability(")) {
            const query = {
              "app.runnerAvailability({kind:'llm.generate', owner:'alice'})": { kind: "llm.generate", owner: "alice" },
              "app.runnerAvailability({kind:'llm.chat', owner:'alice'})": { kind: "llm.chat", owner: "alice" },
            }[step.name] ??
              (step.name.includes("audience:'team'")
                ? { kind: "llm.generate", owner: "bob", audience: "team" }
                : { kind: "llm.generate", owner: "bob" });
            value = await app.runnerAvailability(query);
            break;
          }
          throw new Error(`unhandled app step: ${step.name}`);
      }
      seen.push({ name: step.name, actual: normalize(JSON.parse(JSON.stringify(value)), live), expected: step.value });
      continue;
    }

    // A protocol request.
    const req = step.request;
    let body = req.body === undefined ? undefined : fill(req.body, live);
    if (body && typeof body === "object" && body.envelope?.ciphertext?.startsWith?.("<ciphertext")) {
      body = { ...body, envelope: await resultEnvelope(clock.now, { jobId: body.jobId }) };
    }
    const rawBody = body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
    let headers = fill(req.headers ?? {}, live);
    const endpoint = req.path.split("/").pop();
    if (step.name === "claim signed over different bytes") {
      headers = signedHeaders(DEVICE, endpoint, live.runnerId, clock.now, `${rawBody} `);
    } else if (headers["x-byollm-signature"] === "<signature>") {
      const keysFor = step.name.includes("stranger") ? STRANGER : DEVICE;
      headers = signedHeaders(keysFor, endpoint, headers["x-byollm-runner"], Number(headers["x-byollm-issued-at"]), rawBody);
    }
    const response = await send(handler, { method: req.method, path: req.path, headers, body: rawBody });
    if (step.name === "pair start") {
      live.deviceCode = response.json.deviceCode;
      live.userCode = response.json.userCode;
    }
    if (step.name === "claim" && response.json.jobs?.[0]) live.leaseId = response.json.jobs[0].lease.id;
    if (step.name === "fetch") live.fetched = response.json.envelope;
    seen.push({
      name: step.name,
      actual: { status: response.status, headers: response.headers, body: normalize(response.json, live), text: response.text },
      expected: { status: step.status, headers: step.responseHeaders, body: step.response },
    });
  }
  return { seen, store };
}

function assertSession(seen, label) {
  assert.equal(seen.length, transcript.steps.length);
  for (const { name, actual, expected, deviation } of seen) {
    if (deviation) continue;
    if (actual && typeof actual === "object" && "status" in actual && "text" in actual) {
      assert.equal(actual.status, expected.status, `${label}: ${name}: status`);
      assert.deepEqual(actual.headers, expected.headers, `${label}: ${name}: headers`);
      assert.deepEqual(actual.body, expected.body, `${label}: ${name}: body`);
      // Byte-for-byte: our JSON text is exactly JSON.stringify of the expected
      // body once the placeholders are put back (same keys, same order).
      assert.equal(JSON.stringify(actual.body), JSON.stringify(expected.body), `${label}: ${name}: key order`);
    } else {
      assert.deepEqual(actual, expected, `${label}: ${name}`);
      assert.equal(JSON.stringify(actual), JSON.stringify(expected), `${label}: ${name}: key order`);
    }
  }
}

test("the replay is faithful: the reference handler reproduces its own transcript", async () => {
  const { seen } = await replay(reference);
  assertSession(seen, "reference");
  const nullStep = seen.find((s) => s.deviation);
  assert.deepEqual(nullStep.actual, nullStep.expected);
});

test("our handler reproduces the reference transcript: statuses, headers, bodies and key order", async () => {
  const { seen } = await replay(ours);
  assertSession(seen, "ours");
  // Deliberate deviation: an envelope whose inner text is JSON null is a
  // malformed result (400), where the reference's promise rejects (host 500).
  const nullStep = seen.find((s) => s.deviation);
  assert.deepEqual(nullStep.actual, {
    status: 400,
    body: { error: "bad-request", message: "the result did not verify as coming from this device" },
  });
});

// ---------------------------------------------------------------------------
// Malformed input, sent to both handlers.

async function pairedSession(mod) {
  const clock = { now: Date.now() };
  const { app, handler } = mount(mod, clock);
  const device = protocol.publicIdentityOf(DEVICE);
  const capability = { kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };
  const start = await send(handler, {
    method: "POST",
    path: "/api/byollm/pair",
    headers: { "content-type": "application/json" },
    body: { protocolVersion: "2", action: "start", daemon: { version: "0.1.1", label: "l", platform: "linux" }, device, capabilities: [capability] },
  });
  const runner = await app.approvePairing({ userCode: start.json.userCode, owner: "alice" });
  const revokedStart = await send(handler, {
    method: "POST",
    path: "/api/byollm/pair",
    headers: { "content-type": "application/json" },
    body: { protocolVersion: "2", action: "start", daemon: { version: "0.1.1", label: "l2", platform: "linux" }, device, capabilities: [capability] },
  });
  const revoked = await app.approvePairing({ userCode: revokedStart.json.userCode, owner: "alice" });
  await app.revokeRunner(revoked.id);
  return { clock, app, handler, runnerId: runner.id, revokedId: revoked.id, capability };
}

function malformedCases({ runnerId, revokedId, capability, clock }) {
  const sign = (endpoint, body, { keys = DEVICE, runner = runnerId, issuedAt = clock.now } = {}) => ({
    method: "POST",
    path: `/api/byollm/${endpoint}`,
    headers: signedHeaders(keys, endpoint, runner, issuedAt, body),
    body,
  });
  const plain = (endpoint, body, headers = {}) => ({
    method: "POST",
    path: `/api/byollm/${endpoint}`,
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  const claim = JSON.stringify({ protocolVersion: "2", runnerId, capabilities: [capability], max: 1 });
  const huge = `{"protocolVersion":"2","pad":"${"x".repeat(6_815_745)}"}`;
  const cases = {
    "PUT is refused with 405": { method: "PUT", path: "/api/byollm/claim", headers: {}, body: "{}" },
    "HEAD-less DELETE to an unknown path is 405 (method first)": { method: "DELETE", path: "/nowhere", headers: {} },
    "unknown endpoint": plain("claims", "{}"),
    "double slash": plain("/claim", "{}"),
    "declared length over the cap": plain("claim", claim, { "content-length": "6815745" }),
    "actual body over the cap": plain("claim", huge),
    "empty body": plain("claim", ""),
    "invalid JSON": plain("claim", "{"),
    "JSON with a BOM is still JSON": plain("pair", `\uFEFF${JSON.stringify({ protocolVersion: "2", action: "poll", deviceCode: "y".repeat(43) })}`),
    "a JSON array": plain("claim", "[]"),
    "a JSON number": plain("claim", "2"),
    "null": plain("claim", "null"),
    "numeric protocol version": plain("claim", JSON.stringify({ protocolVersion: 2 })),
    "empty protocol version": plain("claim", JSON.stringify({ protocolVersion: "" })),
    "version 3": plain("claim", JSON.stringify({ protocolVersion: "3" })),
    "version 1.5": plain("claim", JSON.stringify({ protocolVersion: "1.5" })),
    "missing signature headers": plain("claim", claim),
    "bearer token is not a signature": plain("heartbeat", JSON.stringify({ protocolVersion: "2" }), { authorization: "Bearer x" }),
    "issued-at not a number": { ...sign("claim", claim), headers: { ...sign("claim", claim).headers, "x-byollm-issued-at": "soon" } },
    "issued-at as hex still parses (then fails the signature)": {
      ...sign("claim", claim),
      headers: { ...sign("claim", claim).headers, "x-byollm-issued-at": `0x${clock.now.toString(16)}` },
    },
    "issued-at empty → 0 → not a positive timestamp": { ...sign("claim", claim), headers: { ...sign("claim", claim).headers, "x-byollm-issued-at": "" } },
    "issued-at fractional": { ...sign("claim", claim), headers: { ...sign("claim", claim).headers, "x-byollm-issued-at": `${clock.now}.5` } },
    "empty signature": { ...sign("claim", claim), headers: { ...sign("claim", claim).headers, "x-byollm-signature": "" } },
    "garbled signature": { ...sign("claim", claim), headers: { ...sign("claim", claim).headers, "x-byollm-signature": "!!!!" } },
    "signature padded with == still verifies": {
      ...sign("claim", claim),
      headers: { ...sign("claim", claim).headers, "x-byollm-signature": `${sign("claim", claim).headers["x-byollm-signature"]}==` },
    },
    "stale by 120001 ms": sign("claim", claim, { issuedAt: clock.now - 120_001 }),
    "exactly 120000 ms old is fresh": sign("claim", claim, { issuedAt: clock.now - 120_000 }),
    "future by 120001 ms": sign("claim", claim, { issuedAt: clock.now + 120_001 }),
    "unknown runner": sign("claim", claim, { runner: "runner_nobody" }),
    "signed by a stranger": sign("claim", claim, { keys: STRANGER }),
    "revoked runner (valid signature)": sign("claim", JSON.stringify({ protocolVersion: "2", runnerId: revokedId, capabilities: [], max: 1 }), { runner: revokedId }),
    "revoked runner fetch": sign("fetch", JSON.stringify({ protocolVersion: "2", runnerId: revokedId, jobId: "j", leaseId: "l" }), { runner: revokedId }),
    "claim: max 65": sign("claim", JSON.stringify({ protocolVersion: "2", runnerId, capabilities: [], max: 65 })),
    "claim: max 1.5": sign("claim", JSON.stringify({ protocolVersion: "2", runnerId, capabilities: [], max: 1.5 })),
    "claim: max 1.0 is the integer 1": sign("claim", JSON.stringify({ protocolVersion: "2", runnerId, capabilities: [], max: 1 }).replace('"max":1', '"max":1.0')),
    "claim: unknown key": sign("claim", JSON.stringify({ protocolVersion: "2", runnerId, capabilities: [], max: 1, extra: true })),
    "claim: unknown backend": sign("claim", JSON.stringify({ protocolVersion: "2", runnerId, capabilities: [{ ...capability, backendId: "nope" }], max: 1 })),
    "claim: body names another runner": sign("claim", JSON.stringify({ protocolVersion: "2", runnerId: "runner_other", capabilities: [], max: 1 })),
    "fetch: missing leaseId": sign("fetch", JSON.stringify({ protocolVersion: "2", runnerId, jobId: "j" })),
    "fetch: body names another runner (not compared) → no such lease": sign("fetch", JSON.stringify({ protocolVersion: "2", runnerId: "runner_other", jobId: "j", leaseId: "l" })),
    "heartbeat: withheld with one claimant": sign(
      "heartbeat",
      JSON.stringify({ protocolVersion: "2", runnerId, daemonVersion: "1", capabilities: [], withheld: [{ kind: "llm.generate", claimants: [{ service: "a", offer: "team" }] }], activeLeases: [] }),
    ),
    "heartbeat: ok with withheld omitted": sign("heartbeat", JSON.stringify({ protocolVersion: "2", runnerId, daemonVersion: "1", capabilities: [], activeLeases: [] })),
    "heartbeat: activeLeases not an array": sign("heartbeat", JSON.stringify({ protocolVersion: "2", runnerId, daemonVersion: "1", capabilities: [], activeLeases: {} })),
    "result: bad disposition": sign(
      "result",
      JSON.stringify({ protocolVersion: "2", runnerId, jobId: "j", leaseId: "l", envelope: { ciphertext: "x", recipientKeyId: "a", senderKeyId: "b", direction: "result", deadlineAt: 1 }, disposition: "maybe" }),
    ),
    "result: envelope deadline not an integer": sign(
      "result",
      JSON.stringify({ protocolVersion: "2", runnerId, jobId: "j", leaseId: "l", envelope: { ciphertext: "x", recipientKeyId: "a", senderKeyId: "b", direction: "result", deadlineAt: 1.5 }, disposition: "ok" }),
    ),
    "result: unknown job": sign(
      "result",
      JSON.stringify({ protocolVersion: "2", runnerId, jobId: "j", leaseId: "l", envelope: { ciphertext: "x", recipientKeyId: "a", senderKeyId: "b", direction: "result", deadlineAt: 1 }, disposition: "ok" }),
    ),
    "release: bad reason": sign("release", JSON.stringify({ protocolVersion: "2", runnerId, leases: [], reason: "bored" })),
    "release: nothing to release": sign("release", JSON.stringify({ protocolVersion: "2", runnerId, leases: [{ jobId: "j", leaseId: "l" }], reason: "refused" })),
    "pair: unknown action": plain("pair", JSON.stringify({ protocolVersion: "2", action: "dance" })),
    "pair: device code too short": plain("pair", JSON.stringify({ protocolVersion: "2", action: "poll", deviceCode: "short" })),
    "pair: label too long": plain(
      "pair",
      JSON.stringify({ protocolVersion: "2", action: "start", daemon: { version: "1", label: "x".repeat(121), platform: "linux" }, device: protocol.publicIdentityOf(DEVICE), capabilities: [] }),
    ),
    "pair: unknown platform": plain(
      "pair",
      JSON.stringify({ protocolVersion: "2", action: "start", daemon: { version: "1", label: "x", platform: "beos" }, device: protocol.publicIdentityOf(DEVICE), capabilities: [] }),
    ),
    "pair: signature headers are ignored": { ...plain("pair", JSON.stringify({ protocolVersion: "2", action: "poll", deviceCode: "z".repeat(43) })), headers: { "x-byollm-runner": "x", "x-byollm-issued-at": "1", "x-byollm-signature": "y" } },
    "trailing slash on the route": { ...plain("pair", JSON.stringify({ protocolVersion: "2", action: "poll", deviceCode: "z".repeat(43) })), path: "/api/byollm/pair/" },
  };
  return cases;
}

test("malformed requests: the reference's status and body for each, never a 500", { timeout: 60_000 }, async () => {
  const theirs = await pairedSession(reference);
  const mine = await pairedSession(ours);
  // Same clock for both, so timestamps relative to it mean the same thing.
  mine.clock.now = theirs.clock.now;
  const theirCases = malformedCases(theirs);
  const myCases = malformedCases(mine);
  assert.ok(Object.keys(myCases).length >= 45);
  for (const name of Object.keys(theirCases)) {
    const expected = await send(theirs.handler, theirCases[name]);
    const actual = await send(mine.handler, myCases[name]);
    assert.notEqual(actual.status, 500, name);
    // Deliberate differences (docs/security.md, __test__/hardening-weakspots.test.mjs).
    if (name === "fetch: body names another runner (not compared) → no such lease") {
      assert.equal(expected.status, 404);
      assert.deepEqual([actual.status, JSON.parse(actual.text).error], [401, "unauthorized"], name);
      continue;
    }
    if (name === "signature padded with == still verifies") {
      assert.equal(expected.status, 200);
      assert.deepEqual([actual.status, JSON.parse(actual.text).error], [401, "unauthorized"], name);
      continue;
    }
    assert.equal(actual.status, expected.status, `${name}: status`);
    assert.equal(actual.text, expected.text, `${name}: body`);
    assert.deepEqual(actual.headers, expected.headers, `${name}: headers`);
  }
});

test("basePath rules and routeEndpoint agree with the reference vectors", () => {
  const misc = JSON.parse(readFileSync(new URL("misc.json", vectors), "utf8"));
  for (const row of misc.routeEndpoint) {
    const call = () => (row.basePath === null ? ours.routeEndpoint(row.pathname) : ours.routeEndpoint(row.pathname, row.basePath));
    if (row.result.throws !== undefined) assert.throws(call, (e) => e.message === row.result.throws, row.pathname);
    else assert.equal(call(), row.result.endpoint, `${row.pathname} @ ${row.basePath}`);
  }
  for (const row of misc.createFetchHandlerConstructor) {
    const make = () => ours.createFetchHandler({ store: new ours.MemoryStore(), siteKeys: SITE, verificationUrl: ORIGIN, basePath: row.basePath });
    if (row.result.ok) assert.equal(typeof make(), "function");
    else assert.throws(make, (e) => e.message === row.result.error.message && e.name === row.result.error.name);
  }
  for (const row of misc.byollmHandlersConstructor) {
    const siteKeys = row.result.ok ? SITE : { ...SITE, encryptionPublic: keys.parties.device.storedKeys.encryptionPublic };
    const make = () => new ours.ByollmHandlers({ store: new ours.MemoryStore(), siteKeys, verificationUrl: ORIGIN });
    if (row.result.ok) make();
    else assert.throws(make, (e) => e.message === keygenAdvice(row.result.error.message));
  }
  // Inconsistent keys are reported before a bad basePath.
  assert.throws(
    () => ours.createFetchHandler({ store: new ours.MemoryStore(), siteKeys: { ...SITE, encryptionSig: "x" }, verificationUrl: ORIGIN, basePath: "nope" }),
    /siteKeys are not internally consistent/,
  );
});

test("signatureFrom uses JS Number() semantics", () => {
  const h = (issuedAt) => new Headers({ "x-byollm-runner": "r", "x-byollm-issued-at": issuedAt, "x-byollm-signature": "s" });
  for (const raw of ["1767225600000", " 12 ", "0x10", "1e3", "", "abc", "Infinity", "-5", "1.5"]) {
    assert.deepEqual(ours.signatureFrom(h(raw)), reference.signatureFrom(h(raw)), raw);
  }
  assert.equal(ours.signatureFrom(new Headers({ "x-byollm-runner": "r", "x-byollm-signature": "s" })), undefined);
});

test("ByollmHandlers.handle: no version check, wrong version is a schema failure, pair ignores auth", async () => {
  const store = new ours.MemoryStore();
  const handlers = new ours.ByollmHandlers({ store, siteKeys: SITE, verificationUrl: ORIGIN });
  const refHandlers = new reference.ByollmHandlers({ store: new reference.MemoryStore(), siteKeys: SITE, verificationUrl: ORIGIN });
  const auth = { endpoint: "pair", rawBody: "", signature: undefined };
  for (const body of [{ protocolVersion: "1", action: "poll", deviceCode: "x".repeat(43) }, undefined, null, [], { protocolVersion: "2", action: "poll", deviceCode: "x".repeat(43) }]) {
    assert.deepEqual(await handlers.handle("pair", body, auth), await refHandlers.handle("pair", body, auth), JSON.stringify(body));
  }
  const claimAuth = { endpoint: "claim", rawBody: "{}", signature: { runnerId: "r", issuedAt: 1, signature: "s", extra: 1 } };
  assert.deepEqual(await handlers.handle("claim", {}, claimAuth), await refHandlers.handle("claim", {}, claimAuth));
});

test("a device whose signed encryption key is not 32 bytes: the reference pairs it and its fetch rejects; ours refuses it at pair start", async () => {
  for (const [label, mod] of [["reference", reference], ["ours", ours]]) {
    const clock = { now: Date.now() };
    const { app, handler } = mount(mod, clock);
    const encryption = "AAAA";
    const device = {
      identity: DEVICE.identityPublic,
      encryption,
      encryptionSig: protocol.signWith(DEVICE, new TextEncoder().encode(`byollm/v1/encryption-key:${encryption}`)),
    };
    assert.equal(protocol.verifyPublicIdentity(device), true);
    const capability = { kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };
    const start = await send(handler, {
      method: "POST",
      path: "/api/byollm/pair",
      headers: { "content-type": "application/json" },
      body: { protocolVersion: "2", action: "start", daemon: { version: "1", label: "l", platform: "linux" }, device, capabilities: [capability] },
    });
    if (mod === ours) {
      assert.equal(start.status, 400);
      assert.deepEqual(start.json, {
        error: "bad-request",
        message:
          "the device's keys are not spelled exactly: identity and encryption must each be the unpadded base64url of 32 bytes, encryptionSig of 64",
      });
      continue;
    }
    assert.equal(start.status, 200, label);
    const runner = await app.approvePairing({ userCode: start.json.userCode, owner: "alice" });
    await app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner: "alice", id: JOB_ID });
    const claimBody = JSON.stringify({ protocolVersion: "2", runnerId: runner.id, capabilities: [capability], max: 1 });
    const claim = await send(handler, { method: "POST", path: "/api/byollm/claim", headers: signedHeaders(DEVICE, "claim", runner.id, clock.now, claimBody), body: claimBody });
    const fetchBody = JSON.stringify({ protocolVersion: "2", runnerId: runner.id, jobId: JOB_ID, leaseId: claim.json.jobs[0].lease.id });
    const request = { method: "POST", path: "/api/byollm/fetch", headers: signedHeaders(DEVICE, "fetch", runner.id, clock.now, fetchBody), body: fetchBody };
    await assert.rejects(send(handler, request));
  }
});
