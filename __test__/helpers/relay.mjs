// A real @byollm/relay@0.1.1 on 127.0.0.1, for the cloud-lane tests.
//
// What this gives a test:
//   * `origin` — the relay's HTTP origin (random port, loopback only);
//   * a site registered in the relay's projection with the test's own site
//     keys (the relay pins that identity and checks every site-plane
//     signature against it);
//   * one consenting owner and one approved device for that owner;
//   * `device` — a daemon-side client built on @byollm/protocol that pairs,
//     claims, fetches the payload, opens it and posts a sealed result through
//     the relay's daemon plane;
//   * `received` — every request the relay was sent, with its raw body bytes,
//     so a test can prove what the relay saw and what it did not;
//   * `inject(path, answer)` — the next request to `path` gets `answer`
//     instead of reaching the relay (a draining pod, an overloaded hub).
//
// The relay itself is not modified: requests go through `Relay.handle`, the
// package's whole HTTP surface. Needs Node >= 22.14 (the relay's engines).
import { createServer } from "node:http";
import { once } from "node:events";
import { Relay } from "@byollm/relay";
import {
  PROTOCOL_VERSION,
  generateKeys,
  keyId,
  open,
  publicIdentityOf,
  seal,
  signRequest,
} from "@byollm/protocol";

export const SITE_ID = "site-under-test";
export const OWNER = "alice@example.test";
export const RUNNER_ID = "runner-alice-laptop";

/** The one capability our test device advertises. */
export const CAPABILITY = Object.freeze({
  kind: "llm.generate",
  service: "laptop-ollama",
  backendId: "ollama",
  backendClass: "http",
  model: "llama3.2:3b",
  offerScope: "team",
});

/**
 * Start a relay. Options:
 *   siteKeys     the site's StoredKeys (required; the relay pins their public half)
 *   siteId       defaults to SITE_ID
 *   owner        the consenting person, defaults to OWNER
 *   satisfiable  the relay's enqueue-time question (optional), see RelayOptions
 *   leaseMs      lease length handed to devices (default 60 s)
 */
export async function startRelay(options) {
  const siteId = options.siteId ?? SITE_ID;
  const owner = options.owner ?? OWNER;
  const deviceKeys = generateKeys(Date.now());
  const relay = new Relay({
    fixture: {
      sites: [{ siteId, site: publicIdentityOf(options.siteKeys) }],
      consents: [{ owner, siteId }],
      devices: [
        { owner, runnerId: RUNNER_ID, device: publicIdentityOf(deviceKeys) },
      ],
    },
    ...(options.satisfiable === undefined
      ? {}
      : { satisfiable: options.satisfiable }),
    leaseMs: options.leaseMs ?? 60_000,
  });

  const received = [];
  const injected = new Map();
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const url = new URL(req.url ?? "/", "http://127.0.0.1");
      received.push({
        method: req.method,
        path: url.pathname,
        url: req.url,
        headers: { ...req.headers },
        body,
      });
      const answer = injected.get(url.pathname)?.shift();
      if (answer !== undefined) {
        res.writeHead(answer.status, {
          "content-type": answer.contentType ?? "application/json",
        });
        res.end(
          typeof answer.body === "string"
            ? answer.body
            : JSON.stringify(answer.body),
        );
        return;
      }
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (typeof value === "string") headers.set(name, value);
      }
      const request = new Request(`http://127.0.0.1${req.url}`, {
        method: req.method,
        headers,
        ...(req.method === "GET" || req.method === "HEAD" ? {} : { body }),
      });
      relay
        .handle(request)
        .then(async (response) => {
          const text = await response.text();
          res.writeHead(response.status, {
            "content-type":
              response.headers.get("content-type") ?? "application/json",
          });
          res.end(text);
        })
        .catch((error) => {
          // The relay threw: surface it loudly rather than as a quiet 500.
          console.error("relay.handle threw:", error);
          res.writeHead(500, { "content-type": "text/plain" });
          res.end("relay threw");
        });
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  const origin = `http://127.0.0.1:${address.port}`;

  const device = new DeviceClient({
    origin,
    keys: deviceKeys,
    owner,
    runnerId: RUNNER_ID,
  });

  return {
    relay,
    origin,
    siteId,
    owner,
    device,
    received,
    /** Answer the next request to `path` (e.g. "/relay/site/results") with this. */
    inject(path, answer) {
      const queue = injected.get(path) ?? [];
      queue.push(answer);
      injected.set(path, queue);
    },
    /** Every byte the relay was sent, as one buffer (URLs, headers and bodies). */
    allBytes() {
      return Buffer.concat(
        received.map((r) =>
          Buffer.concat([
            Buffer.from(`${r.method} ${r.url}\n${JSON.stringify(r.headers)}\n`),
            r.body,
          ]),
        ),
      );
    },
    /** The requests made to one path, in order. */
    requestsTo(path) {
      return received.filter((r) => r.path === path);
    },
    async close() {
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The daemon side, as the relay's daemon plane sees it: signed requests under
 * the device's identity key, payloads opened with its encryption key, results
 * sealed to the site it pinned at pairing.
 */
export class DeviceClient {
  constructor({ origin, keys, owner, runnerId }) {
    this.origin = origin;
    this.keys = keys;
    this.owner = owner;
    this.runnerId = runnerId;
    this.identity = publicIdentityOf(keys);
    this.keyId = keyId(this.identity.identity);
    /** keyId → PublicIdentity of the sites this device pinned at pairing. */
    this.sites = {};
  }

  async #call(endpoint, body, { signed = true } = {}) {
    const raw = JSON.stringify({ protocolVersion: PROTOCOL_VERSION, ...body });
    const headers = { "content-type": "application/json" };
    if (signed) {
      const signature = signRequest(this.keys, {
        endpoint,
        runnerId: this.runnerId,
        issuedAt: Date.now(),
        body: raw,
      });
      headers["x-byollm-runner"] = signature.runnerId;
      headers["x-byollm-issued-at"] = String(signature.issuedAt);
      headers["x-byollm-signature"] = signature.signature;
    }
    const response = await fetch(`${this.origin}/byollm/${endpoint}`, {
      method: "POST",
      headers,
      body: raw,
    });
    const text = await response.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: response.status, body: json, text };
  }

  /** Pair through the relay's fixture exchange; pins the sites it names. */
  async pair() {
    const answer = await this.#call(
      "pair",
      { owner: this.owner, device: this.identity },
      { signed: false },
    );
    if (answer.status !== 200) {
      throw new Error(`pair failed: ${answer.status} ${answer.text}`);
    }
    this.runnerId = answer.body.runnerId;
    this.sites = answer.body.sites;
    return answer.body;
  }

  async claim(max = 4, capabilities = [CAPABILITY]) {
    return this.#call("claim", { runnerId: this.runnerId, capabilities, max });
  }

  async fetchPayload(jobId, leaseId) {
    return this.#call("fetch", { runnerId: this.runnerId, jobId, leaseId });
  }

  /** Open a payload envelope with this device's keys, checking the pinned site signed it. */
  async openPayload(jobId, envelope, siteKeyId) {
    const site = this.sites[siteKeyId];
    if (site === undefined) {
      return { ok: false, reason: "site not pinned" };
    }
    return open({
      envelope,
      recipientKeys: this.keys,
      senderIdentityPublic: site.identity,
      expected: {
        jobId,
        senderKeyId: siteKeyId,
        recipientKeyId: this.keyId,
        direction: "payload",
      },
    });
  }

  /**
   * Seal an outcome to the site. `signWith` lets a test seal under other keys
   * while keeping this device's key id on the envelope (a forged result).
   */
  async sealResult({ jobId, siteKeyId, outcome, ran, deadlineAt, signWith }) {
    const site = this.sites[siteKeyId];
    return seal({
      plaintext: JSON.stringify({ outcome, ran }),
      senderKeys: signWith ?? this.keys,
      recipientEncryptionPublic: site.encryption,
      context: {
        jobId,
        senderKeyId: this.keyId,
        recipientKeyId: siteKeyId,
        deadlineAt,
        direction: "result",
      },
    });
  }

  async postResult({ jobId, leaseId, envelope, disposition }) {
    return this.#call("result", {
      runnerId: this.runnerId,
      jobId,
      leaseId,
      envelope,
      disposition,
    });
  }
}

/** A 127.0.0.1 port with nothing listening on it (bound, then released). */
export async function closedPort() {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address();
  await new Promise((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * A STAND-IN for a relay, not a relay: a tiny 127.0.0.1 server that answers
 * every request with one fixed status and body. For answers the real relay
 * cannot be made to give (an enqueue refusal code it does not know yet).
 * Records what it was sent, like the harness above.
 */
export async function startStandIn(answer) {
  const received = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      received.push({
        method: req.method,
        url: req.url,
        headers: { ...req.headers },
        body: Buffer.concat(chunks),
      });
      res.writeHead(answer.status, {
        "content-type": answer.contentType ?? "application/json",
      });
      res.end(
        typeof answer.body === "string"
          ? answer.body
          : JSON.stringify(answer.body),
      );
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address();
  return {
    origin: `http://127.0.0.1:${port}`,
    received,
    async close() {
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
