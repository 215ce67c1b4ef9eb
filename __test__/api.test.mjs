// The app API end to end on Node 20 and 22, with no reference package: a
// hand-written daemon built on our own native exports pairs, claims, fetches,
// heartbeats and reports, while the app enqueues, waits and reads the result.
// Also: enqueue refusals, availability reasons, delivery timing, the cloud
// lane against an in-process fake relay, keygen.
import * as deviceKeys from "../scripts/device-keys.mjs";
import * as dev from "./helpers/device-crypto.mjs";
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import * as native from "../index.js";
import {
  ByollmApp,
  MemoryStore,
  NoRunnerAvailableError,
  ResultTimeoutError,
  PollingDelivery,
  EnqueueRefused,
  RelayUnavailable,
  createFetchHandler,
  generateSiteKeys,
  formatSiteKeys,
} from "../dist/index.js";
import { createHandler } from "../dist/next.js";

const ORIGIN = "https://site.example";
const SITE = generateSiteKeys();
const SITE_KEY_ID = dev.keyId(SITE.identityPublic);

/** A minimal daemon: signs every call with its own keys, opens payloads, seals results. */
class Daemon {
  constructor(post, { offerScope = "private", kind = "llm.generate" } = {}) {
    this.post = post;
    this.keys = native.generateKeys(Date.now());
    this.identity = deviceKeys.publicIdentityOf(this.keys);
    this.keyId = dev.keyId(this.identity.identity);
    this.capabilities = [{ kind, service: "local", backendId: "ollama", backendClass: "http", model: "m1", offerScope }];
  }

  async call(endpoint, body, { sign = true } = {}) {
    const text = JSON.stringify({ protocolVersion: "2", ...body });
    const headers = { "content-type": "application/json" };
    if (sign) {
      const sig = deviceKeys.signRequest(this.keys, { endpoint, runnerId: this.runnerId, issuedAt: Date.now(), body: text });
      headers["x-byollm-runner"] = sig.runnerId;
      headers["x-byollm-issued-at"] = String(sig.issuedAt);
      headers["x-byollm-signature"] = sig.signature;
    }
    const response = await this.post(new Request(`${ORIGIN}/byollm/${endpoint}`, { method: "POST", headers, body: text }));
    return { status: response.status, body: await response.json() };
  }

  async pairWith(app, owner) {
    const start = await this.call(
      "pair",
      { action: "start", daemon: { version: "0.1.1", label: "test", platform: "linux" }, device: this.identity, capabilities: this.capabilities },
      { sign: false },
    );
    assert.equal(start.status, 200);
    assert.deepEqual(Object.keys(start.body), ["deviceCode", "userCode", "verificationUrl", "expiresAt", "pollIntervalMs"]);
    const pending = await app.pendingPairing(start.body.userCode.toLowerCase());
    assert.equal(pending.label, "test");
    const runner = await app.approvePairing({ userCode: start.body.userCode, owner });
    const poll = await this.call("pair", { action: "poll", deviceCode: start.body.deviceCode }, { sign: false });
    assert.equal(poll.body.status, "approved");
    assert.deepEqual(poll.body.sites, { [SITE_KEY_ID]: deviceKeys.publicIdentityOf(SITE) });
    this.runnerId = runner.id;
    this.site = poll.body.sites[SITE_KEY_ID];
    return runner;
  }

  async work(text) {
    const claim = await this.call("claim", { runnerId: this.runnerId, capabilities: this.capabilities, max: 4 });
    assert.equal(claim.status, 200);
    const done = [];
    for (const stub of claim.body.jobs) {
      const fetched = await this.call("fetch", { runnerId: this.runnerId, jobId: stub.id, leaseId: stub.lease.id });
      assert.equal(fetched.status, 200);
      const opened = dev.open({
        envelope: fetched.body.envelope,
        recipientKeys: this.keys,
        senderIdentityPublic: this.site.identity,
        expected: { jobId: stub.id, senderKeyId: stub.site, recipientKeyId: this.keyId, direction: "payload" },
      });
      assert.equal(opened.ok, true);
      const payload = JSON.parse(opened.plaintext);
      const envelope = dev.seal({
        plaintext: JSON.stringify({
          outcome: { outcome: "ok", text: text(payload) },
          ran: { model: "m1", backendClass: "http", durationMs: 3, stop: "end", stopReported: true },
        }),
        senderKeys: this.keys,
        recipientEncryptionPublic: this.site.encryption,
        context: { jobId: stub.id, senderKeyId: this.keyId, recipientKeyId: stub.site, deadlineAt: Date.now() + 86_400_000, direction: "result" },
      });
      const result = await this.call("result", { runnerId: this.runnerId, jobId: stub.id, leaseId: stub.lease.id, envelope, disposition: "ok" });
      assert.deepEqual(result, { status: 200, body: { accepted: true, state: "ok" } });
      done.push(stub);
    }
    return done;
  }
}

function site({ store = new MemoryStore(), ...appOptions } = {}) {
  const app = new ByollmApp({ store, siteKeys: SITE, ...appOptions });
  const handler = createFetchHandler({ store, siteKeys: SITE, verificationUrl: `${ORIGIN}/runners` });
  return { store, app, handler };
}

test("full job cycle: pair, approve, enqueue, claim, fetch, result, app.result", async () => {
  const { app, handler } = site();
  const daemon = new Daemon(handler);
  await daemon.pairWith(app, "alice");
  assert.deepEqual(await app.runnerAvailability({ kind: "llm.generate", owner: "alice" }), { available: true, candidates: 1 });

  const handle = await app.enqueue({ kind: "llm.generate", payload: { system: "be brief", prompt: "Say hi." }, owner: "alice" });
  assert.equal(handle.record.state, "queued");
  assert.equal(handle.record.sizeClass, "small");
  assert.equal(handle.record.envelope.senderKeyId, SITE_KEY_ID);
  assert.equal(handle.record.envelope.deadlineAt, handle.record.createdAt + 86_400_000);
  assert.equal("payload" in handle.record, false);

  const waiting = handle.result({ timeoutMs: 10_000 });
  const stubs = await daemon.work((p) => `echo: ${p.prompt} / ${p.system}`);
  assert.equal(stubs.length, 1);
  assert.deepEqual(Object.keys(stubs[0]), ["id", "kind", "audience", "owner", "site", "sizeClass", "streaming", "deadlineAt", "lease"]);
  const delivered = await waiting;
  assert.deepEqual(delivered, {
    jobId: handle.id,
    state: "ok",
    outcome: { outcome: "ok", text: "echo: Say hi. / be brief" },
    provenance: {
      audience: "private",
      runnerId: daemon.runnerId,
      runnerOwner: "alice",
      backendClass: "http",
      model: "m1",
      untrusted: false,
      stop: "end",
      stopReported: true,
    },
  });
  assert.deepEqual(await app.result(handle.id), delivered);
  assert.equal((await app.runners("alice")).length, 1);
});

test("the same cycle through the ./next mount, and a JS store (a wrapper around ours) works too", async () => {
  const inner = new MemoryStore();
  const calls = [];
  // Any object with the store's methods is a store: here a proxy that records calls.
  const store = new Proxy(inner, {
    get(target, name) {
      const value = target[name];
      if (typeof value !== "function") return value;
      return (...args) => {
        calls.push(name);
        return value.apply(target, args);
      };
    },
  });
  const app = new ByollmApp({ store, siteKeys: SITE });
  const route = createHandler(() => ({ store, siteKeys: SITE, verificationUrl: `${ORIGIN}/runners` }));
  assert.equal(route.dynamic, "force-dynamic");
  const get = await route.GET(new Request(`${ORIGIN}/byollm/claim`));
  assert.equal(get.status, 405);
  const daemon = new Daemon((r) => route.POST(r));
  await daemon.pairWith(app, "bob");
  const handle = await app.enqueue({ kind: "llm.chat", payload: { messages: [{ content: "hey", role: "user" }] }, owner: "bob" });
  const chatDaemon = daemon;
  chatDaemon.capabilities = [{ ...chatDaemon.capabilities[0], kind: "llm.chat" }];
  await chatDaemon.work((p) => p.messages[0].content.toUpperCase());
  const result = await handle.result({ timeoutMs: 5_000 });
  assert.equal(result.outcome.text, "HEY");
  for (const method of ["create", "claim", "get", "complete", "getRunner", "approvePairing"]) assert.ok(calls.includes(method), method);
});

test("a MemoryStore behind a plain Proxy (its methods run with the proxy as this) serves a full cycle, as the reference's does", async () => {
  const store = new Proxy(new MemoryStore(), {});
  const app = new ByollmApp({ store, siteKeys: SITE });
  const route = createHandler(() => ({ store, siteKeys: SITE, verificationUrl: `${ORIGIN}/runners` }));
  const daemon = new Daemon((r) => route.POST(r));
  await daemon.pairWith(app, "bob");
  const handle = await app.enqueue({ kind: "llm.chat", payload: { messages: [{ content: "hey", role: "user" }] }, owner: "bob" });
  daemon.capabilities = [{ ...daemon.capabilities[0], kind: "llm.chat" }];
  await daemon.work((p) => p.messages[0].content.toUpperCase());
  const result = await handle.result({ timeoutMs: 5_000 });
  assert.equal(result.outcome.text, "HEY");
  assert.equal((await store.get(handle.id)).state, "ok");
});

test("enqueue refuses unknown options and invalid payloads with the reference's messages", async () => {
  const { app } = site();
  await assert.rejects(app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner: "a", model: "m", baseUrl: "u" }), {
    message:
      "enqueue does not understand `model`, `baseUrl`. An option this @byollm/server does not know is refused rather than ignored, because an ignored option is a job that runs differently than you asked with nothing to see — most often an SDK older than the code calling it. Upgrade @byollm/server, or remove the option.",
  });
  await assert.rejects(app.enqueue({ kind: "llm.generate", payload: { prompt: "" }, owner: "a" }), {
    message: "invalid llm.generate payload — payload.prompt: Too small: expected string to have >=1 characters",
  });
  await assert.rejects(app.enqueue({ kind: "llm.generate", payload: { prompt: "x", command: "/bin/sh" }, owner: "a" }), {
    message: 'invalid llm.generate payload — payload: Unrecognized key: "command"',
  });
  await assert.rejects(app.enqueue({ kind: "llm.embed", payload: { prompt: "x" }, owner: "a" }), {
    message: "invalid llm.embed payload — kind: Invalid discriminator value. Expected 'llm.generate' | 'llm.chat'",
  });
  // Idempotent by id: the first record stands.
  const first = await app.enqueue({ kind: "llm.generate", payload: { prompt: "one" }, owner: "a", id: "job-1" });
  const again = await app.enqueue({ kind: "llm.generate", payload: { prompt: "two" }, owner: "a", id: "job-1" });
  assert.deepEqual(again.record, first.record);
});

test("availability reasons and the no-runner path of result()", async () => {
  let clock = 1_767_225_600_000;
  const store = new MemoryStore();
  const app = new ByollmApp({ store, siteKeys: SITE, now: () => clock, noRunnerGraceMs: 0 });
  assert.deepEqual(await app.runnerAvailability({ kind: "llm.generate", owner: "a" }), {
    available: false,
    reason: "no-runner-paired",
    candidates: 0,
  });
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner: "a" });
  await assert.rejects(handle.result({ timeoutMs: 5_000 }), (error) => {
    assert.ok(error instanceof NoRunnerAvailableError);
    assert.equal(error.reason, "no-runner-paired");
    assert.equal(error.jobId, handle.id);
    return true;
  });
  const fallback = await handle.result({ onNoRunner: (reason) => `hosted (${reason})` });
  assert.deepEqual(fallback, { jobId: handle.id, state: "ok", outcome: { outcome: "ok", text: "hosted (no-runner-paired)" }, fallback: true });
  const labelled = await handle.result({ onNoRunner: async () => ({ jobId: "x", state: "ok", fallback: false }) });
  assert.equal(labelled.fallback, true);
  // A job blocked on a dependency is waiting, not stranded: it times out instead.
  const blocked = await app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner: "a", dependsOn: ["nope"] });
  await assert.rejects(blocked.result({ timeoutMs: 600 }), ResultTimeoutError);
  clock += 1;
});

test("PollingDelivery: grace, timeout and abort with injected time", async () => {
  let t = 0;
  const sleep = async (ms) => {
    t += ms;
  };
  const never = new PollingDelivery({
    read: async () => ({ jobId: "j", state: "queued" }),
    availability: async () => ({ available: false, reason: "no-runner-online", blocked: false }),
    sleep,
    now: () => t,
    graceMs: 2_000,
  });
  await assert.rejects(never.waitFor("j"), (e) => e instanceof NoRunnerAvailableError && t === 2_000);
  t = 0;
  const slow = new PollingDelivery({ read: async () => null, sleep, now: () => t });
  await assert.rejects(slow.waitFor("j", { timeoutMs: 1_200 }), (e) => e instanceof ResultTimeoutError && e.timeoutMs === 1_200 && t === 1_500);
  const controller = new AbortController();
  controller.abort(new Error("stop"));
  await assert.rejects(slow.waitFor("j", { signal: controller.signal }), { message: "stop" });
  const done = new PollingDelivery({ read: async () => ({ jobId: "j", state: "expired" }) });
  assert.deepEqual(await done.waitFor("j"), { jobId: "j", state: "expired" });
});

test("cloud lane: publish a stub, pump seals to the claiming device and collects its result", async () => {
  const device = new Daemon(null);
  const calls = [];
  let resultEnvelope;
  let pendingJobs = [];
  const relay = async (url, init = {}) => {
    const u = new URL(url);
    const endpoint = u.pathname.replace("/relay/site/", "");
    const body = init.body ?? "";
    const issuedAt = Number(init.headers["x-byollm-issued-at"]);
    // The relay checks the site's signature over `site/<endpoint>`.
    assert.equal(
      dev.verifyRequest({
        identityPublic: SITE.identityPublic,
        endpoint: `site/${endpoint}`,
        body,
        signature: { runnerId: "site-1", issuedAt, signature: init.headers["x-byollm-signature"] },
        now: issuedAt,
      }),
      null,
      `signature on ${endpoint}`,
    );
    assert.equal(init.headers["x-byollm-site"], "site-1");
    calls.push({ endpoint, method: init.method ?? "GET", body: body === "" ? undefined : JSON.parse(body), query: u.search });
    const json = (status, value) => new Response(JSON.stringify(value), { status, headers: { "content-type": "application/json" } });
    if (endpoint === "enqueue") {
      const stub = JSON.parse(body).stub;
      if (stub.purpose === "undeclared") return json(409, { error: "purpose-not-declared", message: "declare it" });
      if (stub.purpose === "busy") return json(503, { error: "not-ready", message: "draining" });
      return json(200, { ok: true });
    }
    if (endpoint === "pending") return json(200, { jobs: pendingJobs });
    if (endpoint === "payload") {
      const { jobId, envelope } = JSON.parse(body);
      const opened = dev.open({
        envelope,
        recipientKeys: device.keys,
        senderIdentityPublic: SITE.identityPublic,
        expected: { jobId, senderKeyId: SITE_KEY_ID, recipientKeyId: device.keyId, direction: "payload" },
      });
      assert.equal(opened.ok, true);
      resultEnvelope = dev.seal({
        plaintext: JSON.stringify({ outcome: { outcome: "ok", text: `done: ${JSON.parse(opened.plaintext).prompt}` }, ran: { model: "m2", backendClass: "process", durationMs: 1 } }),
        senderKeys: device.keys,
        recipientEncryptionPublic: SITE.encryptionPublic,
        context: { jobId, senderKeyId: device.keyId, recipientKeyId: SITE_KEY_ID, deadlineAt: Date.now() + 1000, direction: "result" },
      });
      return json(200, { ok: true });
    }
    if (endpoint === "results") {
      return json(200, {
        jobs: resultEnvelope
          ? [{ jobId: pendingJobs[0].jobId, envelope: resultEnvelope, disposition: "ok", runnerId: "runner_remote", leaseId: "lease-1", device: device.identity, runnerOwner: "carol" }]
          : [],
      });
    }
    if (endpoint === "cancel") return json(500, { error: "server-error", message: "down" });
    return json(404, { error: "not-found", message: "?" });
  };

  const store = new MemoryStore();
  const app = new ByollmApp({ store, siteKeys: SITE, lane: { relayOrigin: "https://relay.test", siteId: "site-1", fetch: relay } });
  assert.ok(app.cloud);
  await assert.rejects(app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner: "a", audience: "team" }), /does not take `audience` on the cloud lane/);
  await assert.rejects(app.runnerAvailability({ kind: "llm.generate", owner: "a" }), /cannot answer on the cloud lane/);
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "cloudy" }, owner: "a", purpose: "summary" });
  assert.equal(handle.record.audience, "team");
  const published = calls.find((c) => c.endpoint === "enqueue").body;
  assert.deepEqual(Object.keys(published), ["protocolVersion", "siteId", "stub"]);
  assert.deepEqual(Object.keys(published.stub), ["id", "kind", "owner", "site", "audience", "purpose", "sizeClass", "streaming", "deadlineAt"]);
  assert.equal(published.stub.site, SITE_KEY_ID);

  await assert.rejects(app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner: "a", purpose: "undeclared" }), (e) => {
    return e instanceof EnqueueRefused && e.code === "purpose-not-declared" && e.message === "declare it";
  });
  await assert.rejects(app.enqueue({ kind: "llm.generate", payload: { prompt: "x" }, owner: "a", purpose: "busy" }), (e) => {
    return e instanceof RelayUnavailable && e.retryable && e.code === "not-ready" && e.message === "enqueue: not-ready — draining";
  });

  pendingJobs = [{ jobId: handle.id, device: device.identity, runnerId: "runner_remote", leaseId: "lease-1", awaitingUntil: Date.now() + 10_000, leaseExpiresAt: Date.now() + 60_000 }];
  const report = await app.cloud.pump();
  assert.deepEqual(report, { sealed: [handle.id], completed: [handle.id], refused: [] });
  const pendingCall = calls.find((c) => c.endpoint === "pending");
  assert.equal(pendingCall.query, "?siteId=site-1&protocolVersion=2");
  const result = await app.result(handle.id);
  assert.equal(result.outcome.text, "done: cloudy");
  assert.deepEqual(result.provenance, { audience: "team", runnerId: "runner_remote", runnerOwner: "carol", backendClass: "process", model: "m2", untrusted: true });
  // A relay error on cancel is swallowed: the job is cancelled here regardless.
  const other = await app.enqueue({ kind: "llm.generate", payload: { prompt: "y" }, owner: "a" });
  assert.equal((await app.cancel(other.id)).state, "canceled");
});

test("cloud lane: a draining relay defers the pump; a refusal is thrown", async () => {
  let status = 503;
  const relay = async () => new Response(status === 503 ? "busy" : JSON.stringify({ error: "unauthorized", message: "who?" }), { status });
  const app = new ByollmApp({ store: new MemoryStore(), siteKeys: SITE, lane: { relayOrigin: "https://relay.test", siteId: "s", fetch: relay } });
  assert.deepEqual(await app.cloud.pump(), { sealed: [], completed: [], refused: [], deferred: "pending: refused — HTTP 503" });
  status = 401;
  await assert.rejects(app.cloud.pump(), (e) => e instanceof RelayUnavailable && !e.retryable && e.message === "pending: unauthorized — who?");
});

test("keygen prints a usable identity; --help prints the usage", () => {
  const bin = fileURLToPath(new URL("../bin/keygen.mjs", import.meta.url));
  const out = spawnSync(process.execPath, [bin], { encoding: "utf8" });
  assert.equal(out.status, 0);
  const line = out.stdout.split("\n").find((l) => l.startsWith("BYOLLM_SITE_KEYS="));
  const keys = JSON.parse(Buffer.from(line.slice(17), "base64").toString("utf8"));
  assert.equal(out.stdout, formatSiteKeys(keys));
  assert.equal(deviceKeys.verifyPublicIdentity(deviceKeys.publicIdentityOf(keys)), true);
  const help = spawnSync(process.execPath, [bin, "--help"], { encoding: "utf8" });
  assert.equal(help.status, 0);
  assert.match(help.stdout, /^usage: npx --no keygen\n\nGenerates this site's byollm identity/);
  assert.equal(spawnSync(process.execPath, [bin, "x", "-h"], { encoding: "utf8" }).stdout, help.stdout);
});

test("./next createHandler: lazy, memoised, a failing config throws synchronously and is retried", async () => {
  let calls = 0;
  let fail = true;
  const route = createHandler(() => {
    calls += 1;
    if (fail) throw new Error("no secrets at build time");
    return { store: new MemoryStore(), siteKeys: SITE, verificationUrl: `${ORIGIN}/runners` };
  });
  assert.equal(calls, 0, "importing/creating does not build");
  const request = () => new Request(`${ORIGIN}/byollm/claim`, { method: "POST", body: "{" });
  assert.throws(() => route.POST(request()), /no secrets at build time/);
  fail = false;
  const first = await route.POST(request());
  assert.equal(first.status, 400);
  assert.deepEqual(await first.json(), { error: "bad-request", message: "request body is not valid JSON" });
  await route.GET(new Request(`${ORIGIN}/byollm/claim`));
  assert.equal(calls, 2, "built once after the failure, then kept");
  // A config object works too; a bad basePath surfaces on the first request.
  const bad = createHandler({ store: new MemoryStore(), siteKeys: SITE, verificationUrl: ORIGIN, basePath: "api" });
  assert.throws(() => bad.POST(request()), { message: 'basePath must start with "/": got api' });
});

test("a verificationUrl that is not an absolute http(s) URL stops the handler at start-up, with a message that says what to set", async (t) => {
  const store = new MemoryStore();
  const saved = process.env.PUBLIC_ORIGIN;
  t.after(() => (saved === undefined ? delete process.env.PUBLIC_ORIGIN : (process.env.PUBLIC_ORIGIN = saved)));
  delete process.env.PUBLIC_ORIGIN;
  const { ByollmHandlers } = await import("../dist/index.js");
  // What `${process.env.PUBLIC_ORIGIN}/pair` gives when PUBLIC_ORIGIN is not set, and its relatives.
  for (const verificationUrl of ["undefined/pair", "/pair", "", "app.example/pair", "ftp://app.example/pair", "javascript:alert(1)", undefined, 42]) {
    const expected = /^Error: verificationUrl must be an absolute http\(s\) URL, the page where a person approves a pairing code \(e\.g\. https:\/\/app\.example\/pair\); got .*\. PUBLIC_ORIGIN must be the absolute http\(s\) origin people and daemons reach this site at \(e\.g\. https:\/\/app\.example, or http:\/\/localhost:3000 in development\); it is not set\.$/;
    assert.throws(() => new ByollmHandlers({ store, siteKeys: SITE, verificationUrl }), (e) => expected.test(String(e)));
    assert.throws(() => createFetchHandler({ store, siteKeys: SITE, verificationUrl }), (e) => expected.test(String(e)));
    // The Next.js mount builds on its first request: that request throws, before any pairing is answered.
    const route = createHandler(() => ({ store, siteKeys: SITE, verificationUrl }));
    assert.throws(() => route.POST(new Request(`${ORIGIN}/byollm/pair`, { method: "POST", body: "{}" })), (e) => expected.test(String(e)));
  }
  assert.throws(() => createFetchHandler({ store, siteKeys: SITE, verificationUrl: "undefined/pair" }), { message: /got "undefined\/pair"/ });
  // PUBLIC_ORIGIN set but not absolute: said as such; set and absolute: the URL came from elsewhere.
  process.env.PUBLIC_ORIGIN = "app.example";
  assert.throws(() => createFetchHandler({ store, siteKeys: SITE, verificationUrl: "app.example/pair" }), { message: /PUBLIC_ORIGIN must be .*; got "app\.example"\.$/ });
  process.env.PUBLIC_ORIGIN = "https://app.example";
  assert.throws(() => createFetchHandler({ store, siteKeys: SITE, verificationUrl: "/pair" }), { message: /got "\/pair"\. If it is built from an environment variable, set that variable\.$/ });
  // Both schemes a real site uses, with or without a path, start.
  for (const verificationUrl of ["https://app.example/pair", "http://127.0.0.1:8787/pair", "https://app.example"]) {
    assert.doesNotThrow(() => createFetchHandler({ store, siteKeys: SITE, verificationUrl }));
  }
});
