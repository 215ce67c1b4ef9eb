// The engine (src/engine) on our native store, its operations run in place,
// must answer byte for byte what it answers when the same store is reached
// through its JS methods (ts/handlers.ts maps each operation to them), and
// leave the store in the same state.
//
// Two sites with the same keys, clock and runner: one on a plain MemoryStore
// (operations run in place) and one on the same store behind a proxy (a JS
// store to the handler). The same requests go to both; lease ids are random,
// so each side's are mapped onto placeholders before comparing.
import * as deviceKeys from "../scripts/device-keys.mjs";
import * as dev from "./helpers/device-crypto.mjs";
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ByollmApp, MemoryStore, createFetchHandler } from "../dist/index.js";
import { runsInPlace } from "../dist/memory.js";
import { native } from "../dist/native.js";
import { binding } from "../dist/native-loader.js";

const keys = JSON.parse(readFileSync(new URL("../tests/vectors/keys.json", import.meta.url), "utf8"));
const SITE = keys.parties.site.storedKeys;
const DEVICE = keys.parties.device.storedKeys;
const STRANGER = keys.parties.stranger.storedKeys;
const SITE_KEY_ID = dev.keyId(SITE.identityPublic);
const DEVICE_KEY_ID = dev.keyId(DEVICE.identityPublic);
const ORIGIN = "https://app.example";
const T0 = 1_764_500_000_000;
const RUNNER = "runner-direct-1";
const CAP = { kind: "llm.generate", service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope: "team" };
const keyring = new native.SiteKeyring(SITE);

/** 200s the engine answered in place on our store, in one call, by endpoint (Engine#serveNative). */
const servedNatively = {};
const nativeServe = binding.Engine.prototype.serveNative;
binding.Engine.prototype.serveNative = function (store, endpoint, ...rest) {
  const answer = nativeServe.call(this, store, endpoint, ...rest);
  if (typeof answer === "string" && this.status === 200) servedNatively[endpoint] = (servedNatively[endpoint] ?? 0) + 1;
  return answer;
};
const nativeResult = binding.NativeMemoryStore.prototype.sweptResult;
binding.NativeMemoryStore.prototype.sweptResult = function (...args) {
  servedNatively.result = (servedNatively.result ?? 0) + 1;
  return nativeResult.apply(this, args);
};
const nativeEnqueue = binding.NativeMemoryStore.prototype.enqueue;
binding.NativeMemoryStore.prototype.enqueue = function (...args) {
  servedNatively.enqueue = (servedNatively.enqueue ?? 0) + 1;
  return nativeEnqueue.apply(this, args);
};

/** A JS store around ours: the handler cannot see the native store behind it. */
function jsStore(inner) {
  return new Proxy(inner, {
    get(target, name) {
      const value = target[name];
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

async function pairRunner(store, device = DEVICE, runnerId = RUNNER, owner = "bob") {
  const userCode = `CODE-${runnerId}`;
  await store.createPairing({
    device: deviceKeys.publicIdentityOf(device),
    deviceCodeHash: `hash-${runnerId}`,
    userCode,
    state: "pending",
    owner: null,
    runnerId: null,
    collected: false,
    label: "test",
    platform: "linux",
    daemonVersion: "0.1.1",
    capabilities: [CAP],
    expiresAt: T0 + 600_000,
    createdAt: T0,
  });
  await store.approvePairing({ userCode, owner, runnerId, now: T0 });
}

/** The jobs both sites hold, with the same ids and the same at-rest envelopes. */
function jobInputs() {
  const sealed = (id, prompt) => keyring.sealChecked("llm.generate", JSON.stringify({ prompt }), undefined, undefined, id, T0 + 86_400_000).envelope;
  return [
    { id: "job-a", kind: "llm.generate", envelope: sealed("job-a", "first"), sizeClass: "small", owner: "bob" },
    {
      id: "job-b",
      kind: "llm.generate",
      envelope: sealed("job-b", "second \u00e9\u4e2d \"quoted\"\n"),
      sizeClass: "small",
      owner: "bob",
      purpose: { label: "summary", note: "caf\u00e9" },
      deadlineAt: T0 + 50_000,
    },
    {
      id: "job-c",
      kind: "llm.generate",
      envelope: sealed("job-c", "third"),
      sizeClass: "small",
      owner: "alice",
      audience: "team",
      audienceAllow: ["bob"],
      ttlMs: 30_000,
    },
    { id: "job-d", kind: "llm.generate", envelope: sealed("job-d", "fourth"), sizeClass: "small", owner: "bob" },
    // Not claimable until job-a ends ok.
    { id: "job-e", kind: "llm.generate", envelope: sealed("job-e", "after a"), sizeClass: "small", owner: "bob", dependsOn: ["job-a"] },
  ];
}

const JOBS = jobInputs();

async function site({ direct }) {
  const clock = { now: T0 };
  const inner = new MemoryStore();
  const store = direct ? inner : jsStore(inner);
  const handler = createFetchHandler({ store, siteKeys: SITE, verificationUrl: `${ORIGIN}/pair`, now: () => clock.now, leaseMs: 20_000 });
  await pairRunner(inner);
  await pairRunner(inner, STRANGER, "runner-stranger", "carol");
  for (const [at, job] of JOBS.entries()) await inner.create(job, T0 + at);
  return { clock, inner, store, handler };
}

function signed(endpoint, body, { device = DEVICE, runnerId = RUNNER, issuedAt, text } = {}) {
  const raw = text ?? JSON.stringify(body);
  const sig = deviceKeys.signRequest(device, { endpoint, runnerId, issuedAt, body: raw });
  return {
    raw,
    headers: {
      "content-type": "application/json",
      "x-byollm-runner": runnerId,
      "x-byollm-issued-at": String(issuedAt),
      "x-byollm-signature": sig.signature,
    },
  };
}

async function post(s, endpoint, body, options = {}) {
  const { raw, headers } = signed(endpoint, body, { issuedAt: s.clock.now, ...options });
  const response = await s.handler(new Request(`${ORIGIN}/byollm/${endpoint}`, { method: "POST", headers, body: raw }));
  return { status: response.status, headers: Object.fromEntries(response.headers), text: await response.text() };
}

/** Replace each side's lease ids by placeholders, in order of first appearance. */
function leaseNames() {
  const names = new Map();
  return (text) =>
    text.replace(/"(lease-[^"]*|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"/g, (all, id) => {
      if (id.startsWith("job-")) return all;
      if (!names.has(id)) names.set(id, `<lease ${names.size}>`);
      return `"${names.get(id)}"`;
    });
}

function resultEnvelope(jobId, { outcome = { outcome: "ok", text: `done ${jobId}` }, ran = { model: "m", backendClass: "http", durationMs: 3 }, plaintext, device = DEVICE } = {}) {
  return dev.seal({
    plaintext: plaintext ?? JSON.stringify({ outcome, ran }),
    senderKeys: device,
    recipientEncryptionPublic: SITE.encryptionPublic,
    context: {
      jobId,
      senderKeyId: dev.keyId(device.identityPublic),
      recipientKeyId: SITE_KEY_ID,
      deadlineAt: T0 + 86_400_000,
      direction: "result",
    },
  });
}

test("operations run in place on a plain MemoryStore only", async () => {
  const plain = new MemoryStore();
  assert.equal(runsInPlace(plain), true);
  assert.equal(runsInPlace(jsStore(plain)), false, "a proxy goes through its own methods");
  class Sub extends MemoryStore {}
  assert.equal(runsInPlace(new Sub()), false, "a subclass may override the methods");
  const patched = new MemoryStore();
  patched.complete = async () => ({ accepted: false });
  assert.equal(runsInPlace(patched), false, "an instance with its own methods");
  const original = MemoryStore.prototype.claim;
  try {
    MemoryStore.prototype.claim = async () => [];
    assert.equal(runsInPlace(plain), false, "a patched prototype");
  } finally {
    MemoryStore.prototype.claim = original;
  }
  assert.equal(runsInPlace(plain), true);
  assert.equal(runsInPlace({}), false);
  assert.equal(runsInPlace(null), false);
});

test("claim, fetch and result: the same answers and the same store in place as through the methods", async () => {
  for (const key of Object.keys(servedNatively)) delete servedNatively[key];
  const fast = await site({ direct: true });
  const slow = await site({ direct: false });
  const names = { fast: leaseNames(), slow: leaseNames() };
  const both = async (endpoint, body, options) => {
    const a = await post(fast, endpoint, body, options);
    const b = await post(slow, endpoint, body, options);
    assert.equal(a.status, b.status, `${endpoint} status`);
    assert.deepEqual(a.headers, b.headers, `${endpoint} headers`);
    return { a, b };
  };
  const same = async (endpoint, body, options) => {
    const { a, b } = await both(endpoint, body, options);
    assert.equal(names.fast(a.text), names.slow(b.text), `${endpoint} answer`);
    return { a: JSON.parse(a.text), b: JSON.parse(b.text) };
  };
  const tick = (ms) => {
    fast.clock.now += ms;
    slow.clock.now += ms;
  };
  const claimBody = (max, runnerId = RUNNER) => ({ protocolVersion: "2", runnerId, capabilities: [CAP], max });

  tick(1_000);
  const first = await same("claim", claimBody(2));
  assert.deepEqual(first.a.jobs.map((j) => j.id), ["job-a", "job-b"]);
  assert.deepEqual(first.a.jobs[1].purpose, { label: "summary", note: "caf\u00e9" });
  const second = await same("claim", claimBody(5));
  assert.deepEqual(second.a.jobs.map((j) => j.id), ["job-c", "job-d"], "the team job for bob, not job-e (blocked)");
  assert.deepEqual((await same("claim", claimBody(3))).a, { jobs: [], leaseMs: 20_000 });

  const leases = (side) => new Map([...first[side].jobs, ...second[side].jobs].map((j) => [j.id, j.lease.id]));
  const lease = { a: leases("a"), b: leases("b") };
  const fetchBoth = async (jobId, leaseOf = (side) => lease[side].get(jobId), options) => {
    const a = await post(fast, "fetch", { protocolVersion: "2", runnerId: RUNNER, jobId, leaseId: leaseOf("a") }, options);
    const b = await post(slow, "fetch", { protocolVersion: "2", runnerId: RUNNER, jobId, leaseId: leaseOf("b") }, options);
    assert.equal(a.status, b.status, `fetch ${jobId} status`);
    assert.deepEqual(a.headers, b.headers);
    return { a, b };
  };
  for (const jobId of ["job-a", "job-b", "job-c", "job-d"]) {
    const { a, b } = await fetchBoth(jobId);
    assert.equal(a.status, 200);
    const ea = JSON.parse(a.text).envelope;
    const eb = JSON.parse(b.text).envelope;
    // Fresh randomness in each seal: everything but the ciphertext is equal,
    // and both open to the same payload for the device.
    assert.deepEqual(Object.keys(ea), Object.keys(eb));
    assert.deepEqual({ ...ea, ciphertext: "" }, { ...eb, ciphertext: "" });
    assert.equal(ea.recipientKeyId, DEVICE_KEY_ID);
    const open = (envelope) =>
      dev.open({
        envelope,
        recipientKeys: DEVICE,
        senderIdentityPublic: SITE.identityPublic,
        expected: { jobId, senderKeyId: SITE_KEY_ID, recipientKeyId: DEVICE_KEY_ID, direction: "payload" },
      });
    const [pa, pb] = [open(ea), open(eb)];
    assert.equal(pa.ok, true);
    assert.equal(pa.plaintext, pb.plaintext);
    assert.equal(a.text, `{"envelope":${JSON.stringify(ea)}}`, "the text is JSON.stringify's");
  }
  // Refusals, the same way on both.
  const notFound = await fetchBoth("job-a", () => "lease-not-this-one");
  assert.equal(notFound.a.status, 404);
  assert.equal(notFound.a.text, notFound.b.text);
  const unknown = await fetchBoth("job-zzz", () => "x");
  assert.equal(unknown.a.text, unknown.b.text);
  const stranger = await fetchBoth("job-a", undefined, { device: STRANGER, runnerId: "runner-stranger" });
  assert.equal(stranger.a.status, 401, "the body names another runner than the signer");
  assert.equal(stranger.a.text, stranger.b.text);

  const resultBody = (jobId, side, envelope, disposition = "ok") => ({
    protocolVersion: "2",
    runnerId: RUNNER,
    jobId,
    leaseId: lease[side].get(jobId),
    envelope,
    disposition,
  });
  const resultBoth = async (jobId, envelope, disposition, options) => {
    const a = await post(fast, "result", resultBody(jobId, "a", envelope, disposition), options);
    const b = await post(slow, "result", resultBody(jobId, "b", envelope, disposition), options);
    assert.equal(a.status, b.status, `result ${jobId} status`);
    assert.equal(a.text, b.text, `result ${jobId} answer`);
    assert.deepEqual(a.headers, b.headers);
    return JSON.parse(a.text);
  };
  const okA = resultEnvelope("job-a");
  assert.deepEqual(await resultBoth("job-a", okA), { accepted: true, state: "ok" });
  assert.deepEqual(await resultBoth("job-a", okA), { accepted: false, duplicate: true, state: "ok" }, "a replay");
  const withStop = resultEnvelope("job-b", {
    outcome: { outcome: "ok", text: "caf\u00e9 \u4e2d\n\"q\"" },
    ran: { model: "llama3.2:1b", backendClass: "http", durationMs: 12, stop: "length", stopReported: false },
  });
  assert.deepEqual(await resultBoth("job-b", withStop), { accepted: true, state: "ok" });
  // The disposition in the clear must be the sealed one.
  const errC = resultEnvelope("job-c", { outcome: { outcome: "error", code: "backend-failed", message: "boom", retryable: false } });
  assert.equal((await resultBoth("job-c", errC, "ok")).error, "bad-request");
  assert.deepEqual(await resultBoth("job-c", errC, "error"), { accepted: true, state: "error" });
  // A lapsed lease is refused before its envelope is opened.
  tick(25_000);
  assert.deepEqual(await resultBoth("job-d", resultEnvelope("job-d")), { accepted: false, state: "claimed" });
  // job-e became claimable when job-a ended ok.
  const third = await same("claim", claimBody(5));
  assert.deepEqual(third.a.jobs.map((j) => j.id), ["job-e", "job-d"]);

  // The two stores hold the same records (lease ids mapped the same way).
  for (const id of ["job-a", "job-b", "job-c", "job-d", "job-e"]) {
    const ra = JSON.stringify(await fast.inner.get(id));
    const rb = JSON.stringify(await slow.inner.get(id));
    assert.equal(names.fast(ra), names.slow(rb), `record ${id}`);
  }
  // Every 200 of the fast site was answered in one native call (the proxied site's never are).
  assert.deepEqual(servedNatively, { claim: 4, fetch: 4, result: 5 });
  const provenance = (await fast.inner.get("job-b")).provenance;
  assert.deepEqual(provenance, {
    audience: "private",
    runnerId: RUNNER,
    runnerOwner: "bob",
    backendClass: "http",
    model: "llama3.2:1b",
    untrusted: false,
    stop: "length",
    stopReported: false,
  });
});

test("refusals on our store in place: the answer given through its methods, and nothing changed", async () => {
  const fast = await site({ direct: true });
  const slow = await site({ direct: false });
  const snapshot = async (s) => JSON.stringify(s.inner.allJobs());
  const before = await snapshot(fast);
  const claim = { protocolVersion: "2", runnerId: RUNNER, capabilities: [CAP], max: 1 };
  const cases = [
    ["stale signature", claim, { issuedAt: T0 - 10 * 60_000 }],
    ["signed by a stranger for this runner", claim, { device: STRANGER }],
    ["an unknown runner", { ...claim, runnerId: "nobody" }, { runnerId: "nobody" }],
    ["a body naming another runner", { ...claim, runnerId: "runner-stranger" }, {}],
    ["a schema failure", { ...claim, max: 0 }, {}],
    ["a wrong protocol version", { ...claim, protocolVersion: "1" }, {}],
    ["a fractional timestamp, signed as such", claim, { issuedAt: T0 + 0.5 }],
  ];
  for (const [name, body, options] of cases) {
    const a = await post(fast, "claim", body, options);
    const b = await post(slow, "claim", body, options);
    assert.notEqual(a.status, 200, name);
    assert.equal(a.status, b.status, name);
    assert.equal(a.text, b.text, name);
    assert.equal(await snapshot(fast), before, `${name}: nothing changed`);
  }
  const at = T0 + 1_000;
  // Every spelling of the timestamp is read once, by the core, as Number() reads it.
  for (const spelling of [`0${at}`, `${at}.0`, ` ${at}`, "0x10", "1e3", "", "Infinity", "12abc"]) {
    assert.equal(native.issuedAtHeader(spelling), Number.isFinite(Number(spelling)) ? Number(spelling) : null, spelling);
  }
  // A valid body in another key order and spacing is served all the same.
  const spaced = JSON.stringify({ runnerId: RUNNER, ...claim }, null, 1);
  const a = await post(fast, "claim", undefined, { text: spaced });
  const b = await post(slow, "claim", undefined, { text: spaced });
  assert.equal(a.status, 200);
  assert.equal(leaseNames()(a.text), leaseNames()(b.text));
  assert.deepEqual(JSON.parse(a.text).jobs.map((j) => j.id), ["job-a"]);
});

test("a revoked runner gets the same 403 in place as through the methods", async () => {
  const fast = await site({ direct: true });
  const slow = await site({ direct: false });
  await fast.inner.revokeRunner(RUNNER, T0);
  await slow.inner.revokeRunner(RUNNER, T0);
  const body = { protocolVersion: "2", runnerId: RUNNER, capabilities: [CAP], max: 1 };
  const a = await post(fast, "claim", body);
  const b = await post(slow, "claim", body);
  assert.equal(a.status, 403);
  assert.equal(a.text, b.text);
});

test("watchers hear the writes made in place", async () => {
  const fast = await site({ direct: true });
  const heard = [];
  fast.inner.subscribe("job-a", () => heard.push("job-a"));
  const claim = await post(fast, "claim", { protocolVersion: "2", runnerId: RUNNER, capabilities: [CAP], max: 1 });
  const leaseId = JSON.parse(claim.text).jobs[0].lease.id;
  assert.deepEqual(heard, ["job-a"], "the claim");
  const done = await post(fast, "result", {
    protocolVersion: "2",
    runnerId: RUNNER,
    jobId: "job-a",
    leaseId,
    envelope: resultEnvelope("job-a"),
    disposition: "ok",
  });
  assert.equal(done.text, '{"accepted":true,"state":"ok"}');
  assert.deepEqual(heard, ["job-a", "job-a"], "the completion");
});

test("enqueue on a plain MemoryStore: one native call, the same records and refusals as the general path", async () => {
  for (const key of Object.keys(servedNatively)) delete servedNatively[key];
  const now = () => T0;
  const plain = new MemoryStore();
  const behind = new MemoryStore();
  const fast = new ByollmApp({ store: plain, siteKeys: SITE, now });
  const slow = new ByollmApp({ store: jsStore(behind), siteKeys: SITE, now });
  const inputs = [
    { kind: "llm.generate", payload: { prompt: "hello" }, owner: "bob", id: "e-1" },
    {
      kind: "llm.chat",
      payload: { messages: [{ role: "user", content: "caf\u00e9" }] },
      owner: "bob",
      id: "e-2",
      audience: "team",
      audienceAllow: ["alice", "carol"],
      purpose: { label: "x", n: 1 },
      ttlMs: 5_000,
      deadlineAt: T0 + 60_000,
      dependsOn: ["e-1"],
    },
    { kind: "llm.generate", payload: { prompt: "again" }, owner: "bob", id: "e-1" },
    { kind: "llm.generate", payload: { prompt: "" }, owner: "bob", id: "e-3" },
    { kind: "llm.embed", payload: { prompt: "x" }, owner: "bob", id: "e-4" },
    { kind: 7, payload: { prompt: "x" }, owner: "bob", id: "e-5" },
    { kind: "llm.generate", owner: "bob", id: "e-6" },
    // Fields of the wrong type: refused by name before either path runs.
    { kind: "llm.generate", payload: { prompt: "" }, owner: 42, id: "e-7" },
    { kind: "llm.generate", payload: { prompt: "x" }, owner: "bob", id: "e-8", audienceAllow: new Set(["alice"]), audience: "team" },
    { kind: "llm.generate", payload: { prompt: "x" }, owner: "bob", id: "e-9", purpose: { big: 1n } },
    { kind: "llm.generate", payload: { prompt: "x" }, owner: "bob", id: "e-10", ttlMs: "soon" },
  ];
  const settle = async (promise) => {
    try {
      const handle = await promise;
      return { ok: JSON.stringify({ ...handle.record, envelope: { ...handle.record.envelope, ciphertext: "" } }) };
    } catch (error) {
      return { threw: `${error?.constructor?.name}: ${error?.message}` };
    }
  };
  for (const input of inputs) {
    const a = await settle(fast.enqueue(input));
    const b = await settle(slow.enqueue(input));
    assert.deepEqual(a, b, JSON.stringify(input, (_, v) => (typeof v === "bigint" ? `${v}n` : v instanceof Set ? [...v] : v)));
  }
  assert.equal(servedNatively.enqueue, 7, "every input but the four with odd types went native");
  assert.equal(await plain.get("e-8"), null, "a Set for audienceAllow is refused, not stored");
  for (const id of ["e-1", "e-2"]) {
    const a = await plain.get(id);
    const b = await behind.get(id);
    assert.deepEqual({ ...a, envelope: null }, { ...b, envelope: null }, id);
    const opened = (record) =>
      dev.open({
        envelope: record.envelope,
        recipientKeys: SITE,
        senderIdentityPublic: SITE.identityPublic,
        expected: { jobId: id, senderKeyId: SITE_KEY_ID, recipientKeyId: SITE_KEY_ID, direction: "payload" },
      }).plaintext;
    assert.equal(opened(a), opened(b), `${id}: the same sealed payload`);
  }
});

test("a payload enqueued natively is sealed at rest once: every read gives the same envelope, which opens to it", async () => {
  const store = new MemoryStore();
  const app = new ByollmApp({ store, siteKeys: SITE, now: () => T0 });
  const open = (envelope, id) =>
    dev.open({
      envelope,
      recipientKeys: SITE,
      senderIdentityPublic: SITE.identityPublic,
      expected: { jobId: id, senderKeyId: SITE_KEY_ID, recipientKeyId: SITE_KEY_ID, direction: "payload" },
    });
  // Read first through the handle, through the store, through the list, and
  // not at all until after other jobs were enqueued.
  const handles = [];
  for (let n = 0; n < 40; n += 1) {
    handles.push(await app.enqueue({ kind: "llm.generate", payload: { prompt: `p${n} \u00e9` }, owner: "bob", id: `once-${n}` }));
  }
  for (const [n, handle] of handles.entries()) {
    const id = `once-${n}`;
    const order = n % 3;
    const seen = [];
    if (order === 0) seen.push(handle.record.envelope);
    seen.push((await store.get(id)).envelope);
    seen.push(store.allJobs().find((job) => job.id === id).envelope);
    if (order !== 0) seen.push(handle.record.envelope);
    for (const envelope of seen) assert.deepEqual(envelope, seen[0], `${id}: one envelope`);
    assert.deepEqual(Object.keys(seen[0]), ["ciphertext", "recipientKeyId", "senderKeyId", "direction", "deadlineAt"]);
    const opened = open(seen[0], id);
    assert.equal(opened.ok, true, id);
    assert.equal(opened.plaintext, JSON.stringify({ prompt: `p${n} \u00e9` }), id);
  }
});

test("app.result on a plain MemoryStore: one native call, the general path's answers", async () => {
  for (const key of Object.keys(servedNatively)) delete servedNatively[key];
  const clock = { now: T0 };
  const now = () => clock.now;
  const plain = new MemoryStore();
  const behind = new MemoryStore();
  const fast = new ByollmApp({ store: plain, siteKeys: SITE, now });
  const slow = new ByollmApp({ store: jsStore(behind), siteKeys: SITE, now });
  for (const app of [fast, slow]) {
    await app.enqueue({ kind: "llm.generate", payload: { prompt: "a" }, owner: "bob", id: "r-1" });
    await app.enqueue({ kind: "llm.generate", payload: { prompt: "b" }, owner: "bob", id: "r-2", ttlMs: 1_000 });
    await app.enqueue({ kind: "llm.generate", payload: { prompt: "c" }, owner: "bob", id: "r-3" });
  }
  // r-3 completes with an outcome and provenance; r-2 expires by the sweep result() runs.
  for (const store of [plain, behind]) {
    const [job] = await store.claim({ runnerId: RUNNER, runnerOwner: "bob", capabilities: [CAP], max: 1, leaseMs: 60_000, now: T0 + 10 });
    assert.equal(job.id, "r-1");
    await store.complete({
      jobId: "r-1",
      runnerId: RUNNER,
      holder: { by: "lease", leaseId: job.lease.id },
      outcome: { outcome: "ok", text: "caf\u00e9" },
      provenance: { audience: "private", runnerId: RUNNER, runnerOwner: "bob", backendClass: "http", model: "m", untrusted: false },
      now: T0 + 20,
    });
  }
  clock.now = T0 + 5_000;
  const heard = [];
  plain.subscribe("r-2", () => heard.push("r-2"));
  for (const id of ["r-1", "r-2", "r-3", "nope"]) {
    assert.deepEqual(await fast.result(id), await slow.result(id), id);
  }
  assert.deepEqual(heard, ["r-2"], "the sweep's expiry reached the watcher");
  assert.deepEqual(await fast.result("r-1"), {
    jobId: "r-1",
    state: "ok",
    outcome: { outcome: "ok", text: "caf\u00e9" },
    provenance: { audience: "private", runnerId: RUNNER, runnerOwner: "bob", backendClass: "http", model: "m", untrusted: false },
  });
  assert.deepEqual(await fast.result("r-2"), { jobId: "r-2", state: "expired" });
  await assert.rejects(fast.result(42), /`jobId` must be a string/);
  await assert.rejects(slow.result(42), /`jobId` must be a string/);
  assert.equal(servedNatively.result, 6, "every string id read natively");
  // A subclass that reads jobs its own way keeps it.
  class Audited extends ByollmApp {
    async job(jobId) {
      const record = await super.job(jobId);
      return record && { ...record, state: "audited" };
    }
  }
  const audited = new Audited({ store: plain, siteKeys: SITE, now });
  assert.equal((await audited.result("r-1")).state, "audited");
  assert.equal(servedNatively.result, 6);
});

test("a job claimed again by another device after its lease lapsed is fetched sealed to that device", async () => {
  // The first claim starts the payload's reseal for DEVICE ahead of its fetch
  // (src/direct/ahead.rs); the second runner's fetch must not get it.
  const clock = { now: T0 };
  const store = new MemoryStore();
  const handler = createFetchHandler({ store, siteKeys: SITE, verificationUrl: `${ORIGIN}/pair`, now: () => clock.now, leaseMs: 20_000 });
  await pairRunner(store);
  await pairRunner(store, STRANGER, "runner-two", "bob");
  await store.create(JOBS[0], T0);
  const s = { clock, handler };
  const claim = async (device, runnerId) => {
    const { raw, headers } = signed("claim", { protocolVersion: "2", runnerId, capabilities: [CAP], max: 1 }, { device, runnerId, issuedAt: clock.now });
    const answer = await handler(new Request(`${ORIGIN}/byollm/claim`, { method: "POST", headers, body: raw }));
    return (await answer.json()).jobs;
  };
  const fetchAs = async (device, runnerId, leaseId) => {
    const body = { protocolVersion: "2", runnerId, jobId: "job-a", leaseId };
    return post(s, "fetch", body, { device, runnerId });
  };
  const before = servedNatively.fetch ?? 0;
  const [first] = await claim(DEVICE, RUNNER);
  assert.equal(first.id, "job-a");
  clock.now += 25_000;
  await store.expireDue(clock.now);
  const [again] = await claim(STRANGER, "runner-two");
  assert.equal(again?.id, "job-a", "claimable again once the first lease lapsed");

  assert.equal((await fetchAs(DEVICE, RUNNER, first.lease.id)).status, 404, "the lapsed lease fetches nothing");
  const fetched = await fetchAs(STRANGER, "runner-two", again.lease.id);
  assert.equal(fetched.status, 200);
  assert.equal(servedNatively.fetch ?? 0, before + 1, "served by the direct lane");
  const envelope = JSON.parse(fetched.text).envelope;
  assert.equal(envelope.recipientKeyId, dev.keyId(STRANGER.identityPublic));
  const opened = dev.open({
    envelope,
    recipientKeys: STRANGER,
    senderIdentityPublic: SITE.identityPublic,
    expected: { jobId: "job-a", senderKeyId: SITE_KEY_ID, recipientKeyId: dev.keyId(STRANGER.identityPublic), direction: "payload" },
  });
  assert.equal(opened.ok, true, JSON.stringify(opened));
  assert.equal(opened.plaintext, JSON.stringify({ prompt: "first" }));
});
