// What no input may grow past: the HTTP body cap (bytes, counted as they
// arrive, reading stopped at the cap), payloads that could never be
// delivered (refused at enqueue), and what an unauthenticated `pair start`
// may leave behind (bounded fields, exact key spellings, a fresh user code,
// pairings pruned once expired, memory bounded under a flood). Only our
// package: the reference's behaviour for each is in the comments and in
// docs/security.md ("The reference's weak spots").
import * as deviceKeys from "../scripts/device-keys.mjs";
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ByollmApp,
  ByollmHandlers,
  MemoryStore,
  createFetchHandler,
  generateSiteKeys,
  hashSecret,
  secretsMatch,
} from "../dist/index.js";
import * as native from "../index.js";
import { CAP, Device } from "./helpers/device.mjs";

const MAX_BODY_BYTES = 6 * 1024 * 1024 + 512 * 1024;
const MAX_ENVELOPE_BYTES = 6 * 1024 * 1024;
const T0 = 1_767_225_600_000;

function site({ clock = { t: T0 }, store = new MemoryStore() } = {}) {
  const siteKeys = generateSiteKeys();
  const now = () => clock.t;
  const config = { store, siteKeys, verificationUrl: "https://site.example/pair", now };
  return {
    clock,
    store,
    app: new ByollmApp({ store, siteKeys, now }),
    handlers: new ByollmHandlers(config),
    fetchHandler: createFetchHandler(config),
  };
}

function post(fetchHandler, endpoint, body, headers = {}) {
  return fetchHandler(
    new Request(`http://127.0.0.1/byollm/${endpoint}`, { method: "POST", body, headers, duplex: "half" }),
  );
}

async function answer(response) {
  return { status: response.status, body: await response.json() };
}

const tooLarge = /^this message is \d+\.\d MB and the limit is 6\.5 MB/;

// ---------------------------------------------------------------- the body cap

test("a chunked body is read no further than the cap, and refused as the reference refuses an oversized body", async () => {
  const { fetchHandler } = site();
  let pulled = 0;
  // Never ends: only a reader that stops can answer at all.
  const endless = new ReadableStream({
    pull(controller) {
      pulled += 65_536;
      controller.enqueue(new Uint8Array(65_536).fill(0x20));
    },
  });
  const { status, body } = await answer(await post(fetchHandler, "claim", endless));
  assert.equal(status, 400);
  assert.equal(body.error, "bad-request");
  assert.match(body.message, tooLarge);
  assert.ok(pulled <= MAX_BODY_BYTES + 1024 * 1024, `read ${pulled} bytes`);
});

test("the cap counts bytes, not UTF-16 units: 3-byte characters over it are refused", async () => {
  const { fetchHandler } = site();
  // 2.3 million UTF-16 units, 6.9 MB of UTF-8 (the reference compares the
  // text's .length with the cap, so it reads this whole and goes on).
  const text = JSON.stringify({ protocolVersion: "2", runnerId: "r", capabilities: [], max: 1, x: "\u20ac".repeat(2_300_000) });
  assert.ok(text.length < MAX_BODY_BYTES && Buffer.byteLength(text) > MAX_BODY_BYTES);
  const { status, body } = await answer(await post(fetchHandler, "claim", text));
  assert.equal(status, 400);
  assert.equal(body.error, "bad-request");
  assert.match(body.message, tooLarge);
});

test("a content-length that lies low does not let a larger body through", async () => {
  const { fetchHandler } = site();
  const request = new Request("http://127.0.0.1/byollm/claim", {
    method: "POST",
    body: new Uint8Array(7 * 1024 * 1024).fill(0x20),
    headers: { "content-length": "10" },
  });
  assert.equal(request.headers.get("content-length"), "10");
  const { status, body } = await answer(await fetchHandler(request));
  assert.equal(status, 400);
  assert.match(body.message, tooLarge);
});

test("a body of exactly the cap is read (and then judged as JSON)", async () => {
  const { fetchHandler } = site();
  const chunks = [new Uint8Array(MAX_BODY_BYTES - 1).fill(0x20), new Uint8Array([0x20])];
  const stream = new ReadableStream({
    pull(controller) {
      const next = chunks.shift();
      if (next === undefined) controller.close();
      else controller.enqueue(next);
    },
  });
  const { status, body } = await answer(await post(fetchHandler, "claim", stream));
  assert.deepEqual({ status, body }, { status: 400, body: { error: "bad-request", message: "request body is not valid JSON" } });
});

// ---------------------------------------------------------------- undeliverable payloads

test("enqueue refuses a payload whose envelope could never be delivered, on every store path", async () => {
  // A million astral characters pass the length rules (1,000,000 code
  // points) but are 4 MB of UTF-8: sealed for a runner, 6.8 MiB, over the
  // 6 MiB envelope cap. The reference stores it; no runner could take it.
  const astral = "\u{1f600}".repeat(1_000_000);
  const wrapped = new MemoryStore();
  // A store someone wrapped takes the general path, not the native lane.
  wrapped.create = MemoryStore.prototype.create.bind(wrapped);
  for (const store of [new MemoryStore(), wrapped]) {
    const { app } = site({ store });
    await assert.rejects(
      app.enqueue({ kind: "llm.generate", payload: { prompt: astral }, owner: "alice" }),
      (error) => {
        assert.match(error.message, /^invalid llm\.generate payload — sealed for its runner it would be 6\.8 MB and the limit on one envelope is 6\.0 MB/);
        return true;
      },
    );
    assert.equal((await store.allJobs?.())?.length ?? 0, 0);
  }
  // Chat messages count together.
  const { app } = site();
  await assert.rejects(
    app.enqueue({
      kind: "llm.chat",
      payload: { messages: [{ role: "user", content: astral.slice(0, 1_200_000) }, { role: "user", content: astral.slice(0, 1_200_000) }] },
      owner: "alice",
    }),
    /limit on one envelope is 6\.0 MB/,
  );
});

test("a payload just inside the envelope cap is accepted and its envelope stays under it", async () => {
  const { app, store } = site();
  // A million 3-byte characters: 3 MB of UTF-8, about 5.4 MB sealed.
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "\u20ac".repeat(1_000_000) }, owner: "alice" });
  const job = await store.get(handle.id);
  const size = JSON.stringify(job.envelope).length;
  assert.ok(size > 5_000_000 && size <= MAX_ENVELOPE_BYTES, `${size}`);
});

// ---------------------------------------------------------------- pair start

const auth = { endpoint: "pair", rawBody: "", signature: undefined };
const SCHEMA_REFUSAL = { status: 400, body: { error: "bad-request", message: "pair request failed schema validation" } };

function startBody(device, fill = {}) {
  return {
    protocolVersion: "2",
    action: "start",
    daemon: { version: "0.1.1", label: "laptop", platform: "linux", ...fill.daemon },
    device,
    capabilities: fill.capabilities ?? [
      { kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" },
    ],
  };
}

const capability = (i, model = "m") => ({
  kind: "llm.generate",
  service: `service-${i}`,
  backendId: "ollama",
  backendClass: "http",
  model,
  knownModels: [],
  offerScope: "team",
});

/** The largest pair start kept: 32 capabilities, 8,192 bytes as canonical JSON. */
function maximalStart(device) {
  const body = startBody(device, {
    daemon: { version: "v".repeat(64), label: "l".repeat(120) },
    capabilities: Array.from({ length: 32 }, (_, i) => capability(i)),
  });
  const room = 8192 - Buffer.byteLength(JSON.stringify(body));
  for (let i = 0; i < room; i++) body.capabilities[i % 32].model += "m";
  assert.equal(Buffer.byteLength(JSON.stringify(body)), 8192);
  return body;
}

test("pair start keeps only bounded fields; more is the reference's schema refusal", async () => {
  const { handlers } = site();
  const device = deviceKeys.publicIdentityOf(native.generateKeys(T0));
  const maximal = maximalStart(device);
  assert.equal((await handlers.handle("pair", maximal, auth)).status, 200);
  const over = structuredClone(maximal);
  over.capabilities[0].model += "m";
  assert.deepEqual(await handlers.handle("pair", over, auth), SCHEMA_REFUSAL, "one byte over 8 KiB");
  // A list over its bound is refused naming the field and the bound.
  assert.deepEqual(
    await handlers.handle("pair", startBody(device, { capabilities: Array.from({ length: 33 }, (_, i) => capability(i)) }), auth),
    { status: 400, body: { error: "bad-request", message: "capabilities has 33 items and the limit is 32" } },
  );
  for (const [name, body] of [
    ["a daemon version of 65 characters", startBody(device, { daemon: { version: "1".repeat(65) } })],
    ["a megabyte capability", startBody(device, { capabilities: [capability(0, "m".repeat(1_000_000))] })],
    ["an identity of 129 characters", startBody({ ...device, identity: device.identity.padEnd(129, "A") })],
  ]) {
    assert.deepEqual(await handlers.handle("pair", body, auth), SCHEMA_REFUSAL, name);
  }
  // Over HTTP: the same answer.
  const { fetchHandler } = site();
  const text = JSON.stringify(startBody(device, { daemon: { version: "1".repeat(65) } }));
  assert.deepEqual(await answer(await post(fetchHandler, "pair", text)), SCHEMA_REFUSAL);
});

test("identity keys padded with junk, padding or the other alphabet do not verify at pair start", async () => {
  const { handlers } = site();
  const device = deviceKeys.publicIdentityOf(native.generateKeys(T0));
  const refused = {
    status: 400,
    body: {
      error: "bad-request",
      message:
        "the device's keys are not spelled exactly: identity and encryption must each be the unpadded base64url of 32 bytes, encryptionSig of 64",
    },
  };
  for (const [name, changed] of [
    ["junk after the identity", { ...device, identity: `${device.identity}!!!!` }],
    ["junk inside the identity", { ...device, identity: `${device.identity.slice(0, 5)}*${device.identity.slice(5)}` }],
    ["a padded identity", { ...device, identity: `${device.identity}=` }],
    ["junk after the signature", { ...device, encryptionSig: `${device.encryptionSig}$` }],
    ["a padded signature", { ...device, encryptionSig: `${device.encryptionSig}==` }],
  ]) {
    // The reference's lenient decoding verifies every one of these.
    assert.equal(deviceKeys.verifyPublicIdentity(changed), true, name);
    assert.deepEqual(await handlers.handle("pair", startBody(changed), auth), refused, name);
  }
  assert.equal((await handlers.handle("pair", startBody(device), auth)).status, 200);
  // A key its identity did not sign keeps the reference's answer.
  const other = deviceKeys.publicIdentityOf(native.generateKeys(T0));
  assert.deepEqual(await handlers.handle("pair", startBody({ ...device, encryption: other.encryption }), auth), {
    status: 400,
    body: { error: "bad-request", message: "the device's encryption key is not signed by the identity it was presented with" },
  });
});

test("pair start never hands out a user code a live pairing holds", async () => {
  const store = new MemoryStore();
  const { handlers, clock } = site({ store });
  const device = deviceKeys.publicIdentityOf(native.generateKeys(T0));
  const asked = [];
  // The store reports the first three codes it is asked about as held by a
  // live pairing (as a code collision would look).
  const lookup = store.getPairingByUserCode.bind(store);
  store.getPairingByUserCode = async (userCode) => {
    asked.push(userCode);
    if (asked.length <= 3) return { userCode, state: "pending", expiresAt: clock.t + 1 };
    return lookup(userCode);
  };
  const started = await handlers.handle("pair", startBody(device), auth);
  assert.equal(started.status, 200);
  assert.equal(asked.length, 4);
  assert.equal(started.body.userCode, asked[3]);
  assert.ok(!asked.slice(0, 3).includes(started.body.userCode));
  // A code held only by a pairing that expired, or is no longer pending, is free.
  asked.length = 0;
  store.getPairingByUserCode = async (userCode) => {
    asked.push(userCode);
    return asked.length === 1 ? { userCode, state: "pending", expiresAt: clock.t } : { userCode, state: "approved", expiresAt: clock.t + 1 };
  };
  const again = await handlers.handle("pair", startBody(device), auth);
  assert.equal(again.body.userCode, asked[0]);
});

test("approval acts only on the pending, unexpired pairing with the code", async () => {
  const { app, store, clock } = site();
  const device = deviceKeys.publicIdentityOf(native.generateKeys(T0));
  const record = (hash, expiresAt) => ({
    device,
    deviceCodeHash: hash,
    userCode: "ABCD-EFGH",
    state: "pending",
    owner: null,
    runnerId: null,
    collected: false,
    label: hash,
    platform: "linux",
    daemonVersion: "0.1.1",
    capabilities: [],
    expiresAt,
    createdAt: T0,
  });
  // Two pairings under one code (a store handed them so): the first expired.
  await store.createPairing(record("expired", clock.t - 1));
  await store.createPairing(record("live", clock.t + 60_000));
  const runner = await app.approvePairing({ userCode: "abcd efgh", owner: "alice" });
  assert.equal(runner.label, "live");
  assert.equal((await store.getPairingByDeviceCodeHash("live")).state, "approved");
  assert.equal((await store.getPairingByDeviceCodeHash("expired")).state, "pending");
  await assert.rejects(app.approvePairing({ userCode: "ABCD-EFGH", owner: "bob" }), /pairing code has expired/);
});

test("30,000 maximal pair starts from 1,000 sources leave memory bounded, and a sweep removes expired pairings", { timeout: 300_000 }, async () => {
  const device = deviceKeys.publicIdentityOf(native.generateKeys(T0));
  const body = maximalStart(device);
  // Warm the allocator and the JIT on a store of its own, then measure a fresh one from there.
  const warm = site();
  for (let i = 0; i < 2_000; i++) assert.equal((await warm.handlers.handle("pair", body, { ...auth, source: `w${i % 1000}` })).status, 200);
  const { store, clock, handlers } = site();
  const start = (i) => handlers.handle("pair", body, { ...auth, source: `s${i % 1000}` });
  globalThis.gc?.();
  const before = process.memoryUsage().rss;
  let first;
  let last;
  let refused = 0;
  const started = performance.now();
  for (let i = 0; i < 30_000; i++) {
    // One start every 5 ms of the site's clock: all 30,000 would be live
    // within a pairing's 10 minutes, seven times what one store keeps.
    clock.t += 5;
    const answered = await start(i);
    if (answered.status === 429) {
      refused++;
      continue;
    }
    assert.equal(answered.status, 200);
    first ??= answered.body.deviceCode;
    last = answered.body.deviceCode;
  }
  const seconds = (performance.now() - started) / 1000;
  globalThis.gc?.();
  const grown = (process.memoryUsage().rss - before) / 2 ** 20;
  console.log(`# 30,000 pair starts of 8 KiB in ${seconds.toFixed(1)} s; ${refused} refused; RSS grew ${grown.toFixed(1)} MiB`);
  // At most 4,096 pairings of at most ~8.5 KiB each: 35 MiB, plus slack for
  // the allocator and V8 (docs/security.md states the bound).
  assert.ok(grown < 96, `RSS grew ${grown.toFixed(1)} MiB`);
  // The store filled with pairings held within their sources' shares: the
  // rest were refused, and none was dropped.
  assert.equal(refused, 30_000 - 4096);
  assert.equal((await store.getPairingByDeviceCodeHash(hashSecret(first)))?.state, "pending");
  assert.equal((await store.getPairingByDeviceCodeHash(hashSecret(last)))?.state, "pending");
  // Expired (and past the clock window): the sweep removes them.
  clock.t += 600_000 + 120_000;
  await store.expireDue(clock.t);
  assert.equal(await store.getPairingByDeviceCodeHash(hashSecret(last)), null);
  const polled = await handlers.handle("pair", { protocolVersion: "2", action: "poll", deviceCode: last }, auth);
  assert.deepEqual(polled, { status: 404, body: { error: "not-found", message: "unknown device code" } });
});

// ---------------------------------------------------------------- lists a paired runner sends

const leaseRefs = (n) => Array.from({ length: n }, (_, i) => ({ jobId: `job-${i}`, leaseId: `lease-${i}` }));
const overBound = (message) => ({ status: 400, body: { error: "bad-request", message } });

/** A site on the real clock (the device signs with Date.now()) and a device paired with it. */
async function pairedDevice(store = new MemoryStore()) {
  const siteKeys = generateSiteKeys();
  const app = new ByollmApp({ store, siteKeys });
  const fetchHandler = createFetchHandler({ store, siteKeys, verificationUrl: "https://site.example/pair" });
  const device = new Device(fetchHandler);
  await device.pair(app, "alice");
  return { store, app, fetchHandler, device };
}

test("every list a signed request carries is bounded: over it, 400 naming the field and the bound", async () => {
  const { store, device } = await pairedDevice();
  const heartbeat = (fields) =>
    device.post("heartbeat", { protocolVersion: "2", runnerId: device.runnerId, daemonVersion: "0.1.1", capabilities: [CAP], activeLeases: [], ...fields });
  // At the bound: answered (every unknown lease lost).
  const atBound = await heartbeat({ activeLeases: leaseRefs(1024) });
  assert.equal(atBound.status, 200);
  assert.equal(atBound.body.lost.length, 1024);
  const seen = (await store.getRunner(device.runnerId)).lastHeartbeatAt;

  assert.deepEqual(await heartbeat({ activeLeases: leaseRefs(1025) }), overBound("activeLeases has 1025 items and the limit is 1024"));
  assert.deepEqual(await heartbeat({ capabilities: Array(33).fill(CAP) }), overBound("capabilities has 33 items and the limit is 32"));
  assert.deepEqual(
    await heartbeat({ capabilities: [CAP, { ...CAP, knownModels: Array(65).fill("m") }] }),
    overBound("capabilities[1].knownModels has 65 items and the limit is 64"),
  );
  const wide = Array.from({ length: 20 }, (_, i) => ({ ...CAP, service: `s${i}`, model: "m".repeat(1000) }));
  assert.deepEqual(
    await heartbeat({ capabilities: wide }),
    overBound(`capabilities is ${Buffer.byteLength(JSON.stringify(wide))} bytes as JSON and the limit is 16384`),
  );
  assert.deepEqual(await heartbeat({ daemonVersion: "9".repeat(100_000) }), overBound("daemonVersion has 100000 characters and the limit is 64"));
  const withheld = [{ kind: "llm.generate", claimants: Array(65).fill({ service: "s", offer: "private" }) }];
  assert.deepEqual(await heartbeat({ withheld }), overBound("withheld[0].claimants has 65 items and the limit is 64"));
  // None of them reached the store: the runner was not touched.
  const runner = await store.getRunner(device.runnerId);
  assert.deepEqual([runner.lastHeartbeatAt, runner.daemonVersion], [seen, "0.1.1"]);

  assert.deepEqual(
    await device.post("release", { protocolVersion: "2", runnerId: device.runnerId, leases: leaseRefs(1025), reason: "shutdown" }),
    overBound("leases has 1025 items and the limit is 1024"),
  );
  // A claim over its bound is not served by the direct lane either.
  assert.deepEqual(
    await device.post("claim", { protocolVersion: "2", runnerId: device.runnerId, capabilities: Array(33).fill(CAP), max: 1 }),
    overBound("capabilities has 33 items and the limit is 32"),
  );
});

test("a bound refusal comes after the signature check: strangers learn nothing about the wire format", async () => {
  const { device } = await pairedDevice();
  const body = { protocolVersion: "2", runnerId: device.runnerId, daemonVersion: "0.1.1", capabilities: [CAP], activeLeases: leaseRefs(5000) };
  assert.deepEqual(await device.post("heartbeat", body, false), { status: 401, body: { error: "unauthorized", message: "this request is not signed" } });
  const stranger = new Device(device.handler);
  stranger.runnerId = device.runnerId;
  assert.deepEqual(await stranger.post("heartbeat", body), {
    status: 401,
    body: { error: "unauthorized", message: "this request's signature is not valid" },
  });
  assert.deepEqual(await device.post("heartbeat", body), overBound("activeLeases has 5000 items and the limit is 1024"));
});

test("ByollmHandlers.handle (parsed bodies) answers a bound refusal with the same message", async () => {
  const { handlers } = site();
  const device = deviceKeys.publicIdentityOf(native.generateKeys(T0));
  const body = startBody(device, { capabilities: [{ ...capability(0), knownModels: Array(65).fill("m") }] });
  assert.deepEqual(await handlers.handle("pair", body, auth), overBound("capabilities[0].knownModels has 65 items and the limit is 64"));
});

// ---------------------------------------------------------------- nesting

test("a body of 6 MiB of `[` is refused before anything else, with the nesting message", async () => {
  const { fetchHandler } = site();
  const refusal = overBound("request body nests arrays and objects deeper than 64 levels");
  for (const endpoint of ["pair", "claim", "heartbeat", "result"]) {
    assert.deepEqual(await answer(await post(fetchHandler, endpoint, "[".repeat(6 << 20))), refusal, endpoint);
  }
  // 64 levels are JSON like any other (here: an unknown key, so the schema's answer after the signature).
  const deepKey = `{"protocolVersion":"2","action":"poll","deviceCode":"${"a".repeat(43)}","x":${"[".repeat(63)}${"]".repeat(63)}}`;
  assert.deepEqual(await answer(await post(fetchHandler, "pair", deepKey)), SCHEMA_REFUSAL);
  const tooDeep = deepKey.replace(`${"[".repeat(63)}${"]".repeat(63)}`, `${"[".repeat(64)}${"]".repeat(64)}`);
  assert.deepEqual(await answer(await post(fetchHandler, "pair", tooDeep)), refusal);
});

test("secretsMatch: malformed hex is never equal", () => {
  for (const [a, b] of [["zz", "yy"], ["zz", "zz"], ["abc", "abd"], ["", ""], ["ab", "ab "]]) {
    assert.equal(secretsMatch(a, b), false, `${a} ${b}`);
  }
  assert.equal(secretsMatch("ab", "AB"), true);
  const digest = hashSecret("x");
  assert.equal(secretsMatch(digest, digest), true);
});
