// Shared by the hardening, malformed-input and load tests: a site (store,
// app, fetch handler) from either implementation, mounted on node:http over
// loopback, and a daemon that speaks the wire protocol (requests signed
// with node:crypto, payloads opened with the addon), which drives both.
import * as deviceKeys from "../scripts/device-keys.mjs";
import * as dev from "./helpers/device-crypto.mjs";
import http from "node:http";
import * as native from "../index.js";
import { oursStore } from "./helpers/diff-stores.mjs";

export const ORIGIN = "http://127.0.0.1";

/** Our package, or the reference @byollm/server (Node >= 22.14 only). */
export async function implementation(which) {
  return which === "ref" ? import("@byollm/server") : import("../dist/index.js");
}

/**
 * A site over one MemoryStore (for ours, the store DIFF_STORE names). `clock` (an object with `t`) makes time
 * controllable for lease-expiry scenarios; otherwise Date.now.
 */
export async function makeSite(which, { clock, siteKeys, store: givenStore, leaseMs, basePath = "/byollm" } = {}) {
  const mod = await implementation(which);
  const keys = siteKeys ?? mod.generateSiteKeys();
  const now = clock ? () => clock.t : Date.now;
  // Ours on the store DIFF_STORE names (helpers/diff-stores.mjs), else a MemoryStore.
  const store = givenStore ?? (which === "ours" ? (await oursStore())?.store : undefined) ?? new mod.MemoryStore();
  const app = new mod.ByollmApp({ store, siteKeys: keys, now });
  const handler = mod.createFetchHandler({
    store,
    siteKeys: keys,
    verificationUrl: "https://site.example/runners",
    now,
    basePath,
    ...(leaseMs ? { leaseMs } : {}),
  });
  return { mod, keys, store, app, handler, now, siteKeyId: dev.keyId(keys.identityPublic) };
}

/** Mount a `(Request) => Promise<Response>` handler on 127.0.0.1; resolves to `{ url, close }`. */
export function listen(handler) {
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      if (Array.isArray(v)) for (const x of v) headers.append(k, x);
      else if (v !== undefined) headers.set(k, v);
    }
    const init = { method: req.method, headers };
    if (req.method !== "GET" && req.method !== "HEAD") init.body = body;
    let response;
    try {
      response = await handler(new Request(`${ORIGIN}${req.url}`, init));
    } catch (e) {
      // The host's view of a handler that rejected: a bare 500.
      res.writeHead(500, { "content-type": "text/plain", "x-rejected": "1" });
      res.end(String(e?.message ?? e));
      return;
    }
    const out = Buffer.from(await response.arrayBuffer());
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(out);
  });
  server.keepAliveTimeout = 30_000;
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      resolve({
        url: `${ORIGIN}:${port}`,
        server,
        close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }),
      });
    });
  });
}

/** POST raw bytes; answers `{ status, body }` with the body parsed when it is JSON. */
export async function rawPost(url, path, { body = "", headers = {}, method = "POST" } = {}) {
  const init = { method, headers: { "content-type": "application/json", ...headers } };
  if (method !== "GET" && method !== "HEAD") init.body = body;
  const r = await fetch(`${url}${path}`, init);
  const text = await r.text();
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON: a host error page */
  }
  return { status: r.status, body: parsed };
}

export const CAPS = [{ kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m1", offerScope: "private" }];

/** A daemon over HTTP: pairs, claims, fetches, heartbeats, reports, releases. */
export class Daemon {
  constructor(url, { basePath = "/byollm", capabilities = CAPS, clock } = {}) {
    this.url = url;
    this.basePath = basePath;
    this.capabilities = capabilities;
    this.clock = clock;
    this.keys = native.generateKeys(Date.now());
    this.identity = deviceKeys.publicIdentityOf(this.keys);
    this.keyId = dev.keyId(this.identity.identity);
  }

  now() {
    return this.clock ? this.clock.t : Date.now();
  }

  /** Sign `body` (an object, completed with protocolVersion) and POST it. */
  async call(endpoint, body, { sign = true, runnerId = this.runnerId, issuedAt = this.now(), mutateSignature } = {}) {
    const text = JSON.stringify({ protocolVersion: "2", ...body });
    return this.send(endpoint, text, { sign, runnerId, issuedAt, mutateSignature });
  }

  async send(endpoint, text, { sign = true, runnerId = this.runnerId, issuedAt = this.now(), mutateSignature, headers = {} } = {}) {
    const h = { ...headers };
    if (sign) {
      const sig = deviceKeys.signRequest(this.keys, { endpoint, runnerId, issuedAt, body: text });
      h["x-byollm-runner"] = sig.runnerId;
      h["x-byollm-issued-at"] = String(sig.issuedAt);
      h["x-byollm-signature"] = mutateSignature ? mutateSignature(sig.signature) : sig.signature;
    }
    return rawPost(this.url, `${this.basePath}/${endpoint}`, { body: text, headers: h });
  }

  async pair(app, owner) {
    const start = await this.call(
      "pair",
      { action: "start", daemon: { version: "0.1.1", label: "load", platform: "linux" }, device: this.identity, capabilities: this.capabilities },
      { sign: false },
    );
    if (start.status !== 200) throw new Error(`pair start: ${start.status} ${JSON.stringify(start.body)}`);
    const runner = await app.approvePairing({ userCode: start.body.userCode, owner });
    const poll = await this.call("pair", { action: "poll", deviceCode: start.body.deviceCode }, { sign: false });
    if (poll.body.status !== "approved") throw new Error(`pair poll: ${JSON.stringify(poll.body)}`);
    this.runnerId = runner.id;
    const [siteKeyId, site] = Object.entries(poll.body.sites)[0];
    this.siteKeyId = siteKeyId;
    this.site = site;
    return runner;
  }

  claim(max = 4) {
    return this.call("claim", { runnerId: this.runnerId, capabilities: this.capabilities, max });
  }

  fetchJob(stub, { runnerId = this.runnerId } = {}) {
    return this.call("fetch", { runnerId, jobId: stub.id, leaseId: stub.lease.id });
  }

  heartbeat(activeLeases = []) {
    return this.call("heartbeat", { runnerId: this.runnerId, daemonVersion: "0.1.1", capabilities: this.capabilities, activeLeases });
  }

  release(leases, reason) {
    return this.call("release", { runnerId: this.runnerId, leases, reason });
  }

  openPayload(stub, envelope) {
    return dev.open({
      envelope,
      recipientKeys: this.keys,
      senderIdentityPublic: this.site.identity,
      expected: { jobId: stub.id, senderKeyId: stub.site, recipientKeyId: this.keyId, direction: "payload" },
    });
  }

  /** A sealed SealedOutcome for `stub`; `plaintext` overrides the sealed text. */
  sealResult(stub, outcome = { outcome: "ok", text: "done" }, { plaintext } = {}) {
    return dev.seal({
      plaintext:
        plaintext ??
        JSON.stringify({ outcome, ran: { model: "m1", backendClass: "http", durationMs: 1, stop: "end", stopReported: true } }),
      senderKeys: this.keys,
      recipientEncryptionPublic: this.site.encryption,
      context: { jobId: stub.id, senderKeyId: this.keyId, recipientKeyId: stub.site, deadlineAt: this.now() + 86_400_000, direction: "result" },
    });
  }

  result(stub, outcome = { outcome: "ok", text: "done" }, { leaseId = stub.lease.id, envelope } = {}) {
    return this.call("result", {
      runnerId: this.runnerId,
      jobId: stub.id,
      leaseId,
      envelope: envelope ?? this.sealResult(stub, outcome),
      disposition: outcome.outcome,
    });
  }
}

export { native };
