// A simulated daemon for in-process tests and benches: its own keys, signed
// calls through a fetch-style handler (or any `send`), the payload opened and
// the result sealed with @byollm/protocol, the real daemon's library.
import * as protocol from "@byollm/protocol";

export const ORIGIN = "http://127.0.0.1";
export const CAP = { kind: "llm.generate", service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };

export class Device {
  /**
   * `handler`: (Request) => Promise<Response>, e.g. createFetchHandler's.
   * `options.now`: the device's clock (a site on a fake clock needs its
   * daemon on the same one); `options.keys`: the same device on several sites.
   */
  constructor(handler, capabilities = [CAP], { now = Date.now, keys } = {}) {
    this.handler = handler;
    this.capabilities = capabilities;
    this.now = now;
    this.keys = keys ?? protocol.generateKeys(now());
  }
  /**
   * `{status, body}`, and `text`: the answer's exact bytes (not enumerable,
   * so a test comparing `{status, body}` whole still can).
   */
  async post(endpoint, body, signed = true) {
    const text = JSON.stringify(body);
    const headers = { "content-type": "application/json" };
    if (signed) {
      const sig = protocol.signRequest(this.keys, { endpoint, runnerId: this.runnerId, issuedAt: this.now(), body: text });
      headers["x-byollm-runner"] = sig.runnerId;
      headers["x-byollm-issued-at"] = String(sig.issuedAt);
      headers["x-byollm-signature"] = sig.signature;
    }
    const res = await this.handler(new Request(`${ORIGIN}/byollm/${endpoint}`, { method: "POST", headers, body: text }));
    const answer = await res.text();
    return Object.defineProperty({ status: res.status, body: JSON.parse(answer) }, "text", { value: answer });
  }
  publicIdentity() {
    return protocol.publicIdentityOf(this.keys);
  }
  async pair(app, owner) {
    const start = await this.post(
      "pair",
      {
        protocolVersion: "2",
        action: "start",
        daemon: { version: "0.1.1", label: "t", platform: "linux" },
        device: protocol.publicIdentityOf(this.keys),
        capabilities: this.capabilities,
      },
      false,
    );
    await app.approvePairing({ userCode: start.body.userCode, owner });
    const poll = await this.post("pair", { protocolVersion: "2", action: "poll", deviceCode: start.body.deviceCode }, false);
    this.runnerId = poll.body.runnerId;
    [[this.siteKeyId, this.site]] = Object.entries(poll.body.sites);
  }
  claim() {
    return this.post("claim", { protocolVersion: "2", runnerId: this.runnerId, capabilities: this.capabilities, max: 1 });
  }
  fetchJob(stub) {
    return this.post("fetch", { protocolVersion: "2", runnerId: this.runnerId, jobId: stub.id, leaseId: stub.lease.id });
  }
  heartbeat(activeLeases = []) {
    return this.post("heartbeat", { protocolVersion: "2", runnerId: this.runnerId, daemonVersion: "0.1.1", capabilities: this.capabilities, activeLeases });
  }
  async result(stub, text) {
    const envelope = await protocol.seal({
      plaintext: JSON.stringify({ outcome: { outcome: "ok", text }, ran: { model: "m", backendClass: "http", durationMs: 1 } }),
      senderKeys: this.keys,
      recipientEncryptionPublic: this.site.encryption,
      context: {
        jobId: stub.id,
        senderKeyId: protocol.keyId(this.keys.identityPublic),
        recipientKeyId: this.siteKeyId,
        deadlineAt: this.now() + 86_400_000,
        direction: "result",
      },
    });
    return this.post("result", { protocolVersion: "2", runnerId: this.runnerId, jobId: stub.id, leaseId: stub.lease.id, envelope, disposition: "ok" });
  }

  /** Open a fetched payload (checks the site pinned at pairing). */
  async open(stub, envelope) {
    const opened = await protocol.open({
      envelope,
      recipientKeys: this.keys,
      senderIdentityPublic: this.site.identity,
      expected: { jobId: stub.id, senderKeyId: this.siteKeyId, recipientKeyId: protocol.keyId(this.keys.identityPublic), direction: "payload" },
    });
    if (!opened.ok) throw new Error(`the device could not open the payload: ${opened.reason}`);
    return JSON.parse(opened.plaintext);
  }
}
