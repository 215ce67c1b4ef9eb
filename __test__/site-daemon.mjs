// A daemon-side protocol client for the end-to-end tests of the examples.
//
// Built only on @byollm/protocol (keys, request signatures, sealed boxes), so
// it talks to a site exactly the way the real daemon does: it POSTs to
// <origin>/byollm/<endpoint>, signs the exact body bytes it sends, opens the
// payload with its own keys after checking the site it pinned at pairing, and
// seals its result back to that site. (@byollm/protocol declares Node >=
// 22.14; it also loads on Node 20, which the test runner's second pass uses.)
import {
  ENVELOPE_MAX_AGE_MS,
  PROTOCOL_VERSION,
  generateKeys,
  keyId,
  open,
  publicIdentityOf,
  seal,
  signRequest,
  verifyPublicIdentity,
} from "@byollm/protocol";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export const ECHO_CAPABILITY = Object.freeze({
  kind: "llm.generate",
  service: "primary",
  backendId: "openai-http",
  backendClass: "http",
  model: "echo-model",
  offerScope: "private",
});

export class TestDaemon {
  constructor(origin, { label = "test-daemon", capabilities = [ECHO_CAPABILITY] } = {}) {
    // Same rule as the real daemon: only the origin of what it is given counts.
    this.origin = new URL(origin).origin;
    this.label = label;
    this.capabilities = capabilities;
    this.keys = generateKeys(Date.now());
    this.runnerId = undefined;
    this.owner = undefined;
    this.site = undefined; // the site identity pinned at pairing
    this.siteKeyId = undefined;
  }

  get fingerprint() {
    return keyId(this.keys.identityPublic);
  }

  async post(endpoint, body) {
    const raw = JSON.stringify(body);
    const headers = { "content-type": "application/json", accept: "application/json" };
    if (this.runnerId !== undefined) {
      const signature = signRequest(this.keys, { endpoint, runnerId: this.runnerId, issuedAt: Date.now(), body: raw });
      headers["x-byollm-runner"] = signature.runnerId;
      headers["x-byollm-issued-at"] = String(signature.issuedAt);
      headers["x-byollm-signature"] = signature.signature;
    }
    const response = await fetch(`${this.origin}/byollm/${endpoint}`, { method: "POST", headers, body: raw, redirect: "error" });
    const text = await response.text();
    return { status: response.status, body: text === "" ? undefined : JSON.parse(text) };
  }

  async mustPost(endpoint, body) {
    const answer = await this.post(endpoint, body);
    if (answer.status !== 200) {
      throw new Error(`${endpoint} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    }
    return answer.body;
  }

  /** pair start: returns {deviceCode, userCode, verificationUrl, expiresAt, pollIntervalMs}. */
  async pairStart() {
    return this.mustPost("pair", {
      protocolVersion: PROTOCOL_VERSION,
      action: "start",
      daemon: { version: "0.1.1", label: this.label, platform: "linux" },
      device: publicIdentityOf(this.keys),
      capabilities: this.capabilities,
    });
  }

  /** Poll until approved (pins the site) or until the deadline; throws on denied/expired. */
  async waitForApproval(deviceCode, { timeoutMs = 20_000, intervalMs = 100 } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const polled = await this.mustPost("pair", { protocolVersion: PROTOCOL_VERSION, action: "poll", deviceCode });
      if (polled.status === "approved") {
        const sites = Object.entries(polled.sites);
        if (sites.length !== 1) throw new Error(`a direct site should name exactly one site, got ${sites.length}`);
        const [siteKeyId, site] = sites[0];
        // Verify before pinning, as the daemon does.
        if (!verifyPublicIdentity(site) || keyId(site.identity) !== siteKeyId) {
          throw new Error("the site presented keys that do not verify");
        }
        this.runnerId = polled.runnerId;
        this.owner = polled.owner;
        this.site = site;
        this.siteKeyId = siteKeyId;
        return polled;
      }
      if (polled.status !== "pending") throw new Error(`pairing ended: ${polled.status}`);
      if (Date.now() > deadline) throw new Error("pairing was not approved in time");
      await sleep(intervalMs);
    }
  }

  heartbeat(activeLeases = []) {
    return this.post("heartbeat", {
      protocolVersion: PROTOCOL_VERSION,
      runnerId: this.runnerId,
      daemonVersion: "0.1.1",
      capabilities: this.capabilities,
      activeLeases,
    });
  }

  async claim(max = 1) {
    return this.mustPost("claim", { protocolVersion: PROTOCOL_VERSION, runnerId: this.runnerId, capabilities: this.capabilities, max });
  }

  /** Claim until a job arrives (heartbeating, as a live daemon does). */
  async claimOne({ timeoutMs = 20_000, intervalMs = 100 } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      await this.heartbeat();
      const { jobs } = await this.claim(1);
      if (jobs.length > 0) return jobs[0];
      if (Date.now() > deadline) throw new Error("no job was claimable in time");
      await sleep(intervalMs);
    }
  }

  /** Fetch and open the payload of a claimed job: returns the parsed payload. */
  async fetchPayload(stub) {
    if (stub.site !== this.siteKeyId) throw new Error(`job from an unpinned site ${stub.site}`);
    const { envelope } = await this.mustPost("fetch", {
      protocolVersion: PROTOCOL_VERSION,
      runnerId: this.runnerId,
      jobId: stub.id,
      leaseId: stub.lease.id,
    });
    const opened = await open({
      envelope,
      recipientKeys: this.keys,
      senderIdentityPublic: this.site.identity,
      expected: { jobId: stub.id, senderKeyId: this.siteKeyId, recipientKeyId: this.fingerprint, direction: "payload" },
    });
    if (!opened.ok) throw new Error(`the payload did not open: ${opened.reason}`);
    return JSON.parse(opened.plaintext);
  }

  /** Seal an ok outcome back to the site and report it. Returns the result response body. */
  async sendResult(stub, text, { model = ECHO_CAPABILITY.model } = {}) {
    const sealed = { outcome: { outcome: "ok", text }, ran: { model, backendClass: "http", durationMs: 1, stop: "end" } };
    const envelope = await seal({
      plaintext: JSON.stringify(sealed),
      senderKeys: this.keys,
      recipientEncryptionPublic: this.site.encryption,
      context: {
        jobId: stub.id,
        senderKeyId: this.fingerprint,
        recipientKeyId: this.siteKeyId,
        deadlineAt: Date.now() + ENVELOPE_MAX_AGE_MS,
        direction: "result",
      },
    });
    return this.mustPost("result", {
      protocolVersion: PROTOCOL_VERSION,
      runnerId: this.runnerId,
      jobId: stub.id,
      leaseId: stub.lease.id,
      envelope,
      disposition: "ok",
    });
  }

  /** Claim one job, open it, answer it with `answer(payload)`. Returns {stub, payload, result}. */
  async runOne(answer, options) {
    const stub = await this.claimOne(options);
    const payload = await this.fetchPayload(stub);
    const result = await this.sendResult(stub, answer(payload));
    return { stub, payload, result };
  }
}
