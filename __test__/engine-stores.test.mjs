// One engine, four stores (issue 38): a scripted daemon session — pairing,
// claims, fetches, heartbeats, results, releases, and the refusals — sent in
// lock-step to four sites that differ only in their store: our MemoryStore
// (operations in place), our durable MemoryStore ({ path }), postgresStore
// (one SQL function per operation) and a plain JS store
// (helpers/plain-store.mjs, through its methods). Same site keys, same
// device keys, one fake clock: every answer must be the same bytes once the
// values each store draws at random (device and user codes, runner ids,
// lease ids, the payload's seal to the device) are replaced by placeholders
// in order of first appearance. The jobs' records must agree at the end.
// Node 22 and 24 (the simulated daemon signs with @byollm/protocol).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as protocol from "@byollm/protocol";
import { ByollmApp, MemoryStore, createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { postgresStore } from "../dist/postgres.js";
import { Device, CAP, ORIGIN } from "./helpers/device.mjs";
import { PlainStore } from "./helpers/plain-store.mjs";
import { freshDatabase, testPool } from "./postgres-db.mjs";

const SITE_KEYS = generateSiteKeys();
const LEASE_MS = 30_000;
const PAIRING_TTL_MS = 600_000;
let now = Date.now();
const clock = () => now;
const KEYS_A = protocol.generateKeys(now);
const KEYS_B = protocol.generateKeys(now);

let db;
let pool;
const dir = mkdtempSync(join(tmpdir(), "byollm-engine-stores-"));
before(async () => {
  db = await freshDatabase("stores");
  pool = testPool(db.url, 2);
});
after(async () => {
  await pool?.end();
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** One site: its store, handler, app and the two devices, and the aliases of what it drew. */
class Site {
  constructor(name, store) {
    this.name = name;
    this.store = store;
    this.handler = createFetchHandler({
      store,
      siteKeys: SITE_KEYS,
      verificationUrl: "https://stores.byollm.test/pair",
      leaseMs: LEASE_MS,
      pairingTtlMs: PAIRING_TTL_MS,
      now: clock,
    });
    this.app = new ByollmApp({ store, siteKeys: SITE_KEYS, now: clock });
    this.a = new Device(this.handler, [CAP], { now: clock, keys: KEYS_A });
    this.b = new Device(this.handler, [CAP], { now: clock, keys: KEYS_B });
    /** What the site drew -> its placeholder. */
    this.aliases = new Map();
    this.counts = new Map();
    /** Claimed stubs by job id, as this site's answers gave them. */
    this.stubs = new Map();
    /** Values a step keeps for the next ones (codes). */
    this.kept = {};
  }

  alias(value, kind) {
    if (typeof value !== "string" || this.aliases.has(value)) return;
    const n = this.counts.get(kind) ?? 0;
    this.counts.set(kind, n + 1);
    this.aliases.set(value, `<${kind} ${n}>`);
  }

  /** Learn the random values in an answer's body, then write it with placeholders. */
  canon({ status, body, text }) {
    if (body && typeof body === "object") {
      this.alias(body.deviceCode, "device code");
      this.alias(body.userCode, "user code");
      this.alias(body.runnerId, "runner");
      for (const job of body.jobs ?? []) {
        this.alias(job.lease?.id, "lease");
        this.alias(job.lease?.runnerId, "runner");
        this.stubs.set(job.id, job);
      }
      this.alias(body.envelope?.ciphertext, "sealed to the device");
    }
    let out = text;
    for (const [value, placeholder] of this.aliases) out = out.replaceAll(JSON.stringify(value), JSON.stringify(placeholder));
    return `${status} ${out}`;
  }

  /** A record with the drawn values replaced, for the final comparison. */
  canonRecord(record) {
    let out = JSON.stringify(record);
    for (const [value, placeholder] of this.aliases) out = out.replaceAll(JSON.stringify(value), JSON.stringify(placeholder));
    return JSON.parse(out);
  }
}

let sites;

/** Send one request to every site; the answers must agree. Returns them. */
async function step(label, send) {
  const answers = [];
  for (const site of sites) answers.push(await send(site));
  const canon = sites.map((site, i) => site.canon(answers[i]));
  for (let i = 1; i < sites.length; i += 1) {
    assert.equal(canon[i], canon[0], `${label}: ${sites[i].name} answers otherwise than ${sites[0].name}`);
  }
  return { answers, text: canon[0] };
}

/** Each site's own copy of a value (a stub, a lease): `pick(site)`. */
const ref = (site, jobId) => {
  const stub = site.stubs.get(jobId);
  return { jobId: stub.id, leaseId: stub.lease.id };
};

/** A request built by hand: `body` as text, signed by `signer` over `signedText` (default: the same text). */
async function raw(site, endpoint, text, { signer, runnerId, signedText = text, issuedAt = now } = {}) {
  const headers = { "content-type": "application/json" };
  if (signer) {
    const sig = protocol.signRequest(signer.keys, { endpoint, runnerId: runnerId ?? signer.runnerId, issuedAt, body: signedText });
    headers["x-byollm-runner"] = sig.runnerId;
    headers["x-byollm-issued-at"] = String(sig.issuedAt);
    headers["x-byollm-signature"] = sig.signature;
  }
  const res = await site.handler(new Request(`${ORIGIN}/byollm/${endpoint}`, { method: "POST", headers, body: text }));
  const answer = await res.text();
  let body;
  try {
    body = JSON.parse(answer);
  } catch {
    body = undefined;
  }
  return { status: res.status, body, text: answer };
}

const startBody = (device) => ({
  protocolVersion: "2",
  action: "start",
  daemon: { version: "0.1.1", label: "laptop", platform: "linux" },
  device: device.publicIdentity(),
  capabilities: device.capabilities,
});
const poll = (device, deviceCode) => device.post("pair", { protocolVersion: "2", action: "poll", deviceCode }, false);
const claim = (device, max = 1) => device.post("claim", { protocolVersion: "2", runnerId: device.runnerId, capabilities: device.capabilities, max });
const heartbeat = (device, leases) => device.heartbeat(leases);
const releaseOf = (device, leases, reason) => device.post("release", { protocolVersion: "2", runnerId: device.runnerId, leases, reason });
const fetchOf = (device, jobId, leaseId) => device.post("fetch", { protocolVersion: "2", runnerId: device.runnerId, jobId, leaseId });

async function pair(device, label, site, approve = true) {
  const started = await device.post("pair", startBody(device), false);
  site.kept[label] = started.body;
  if (approve) await site.app.approvePairing({ userCode: started.body.userCode, owner: "alice" });
  return started;
}

test("one scripted session, four stores, the same bytes", { timeout: 120_000 }, async () => {
  sites = [
    new Site("MemoryStore", new MemoryStore()),
    new Site("MemoryStore({ path })", new MemoryStore({ path: join(dir, "site.db") })),
    new Site("postgresStore", postgresStore({ pool })),
    new Site("plain JS store", new PlainStore()),
  ];

  // ------------------------------------------------------------ pairing
  await step("pair start (device A)", (s) => pair(s.a, "a", s, false));
  await step("pair poll before approval", (s) => poll(s.a, s.kept.a.deviceCode));
  for (const s of sites) await s.app.approvePairing({ userCode: s.kept.a.userCode, owner: "alice" });
  const approved = await step("pair poll, approved", async (s) => {
    const answer = await poll(s.a, s.kept.a.deviceCode);
    s.a.runnerId = answer.body.runnerId;
    [[s.a.siteKeyId, s.a.site]] = Object.entries(answer.body.sites);
    return answer;
  });
  assert.match(approved.text, /^200 \{"status":"approved","runnerId":"<runner 0>","owner":"alice","sites":/);
  await step("pair poll again: collected", (s) => poll(s.a, s.kept.a.deviceCode));
  await step("pair poll of a device code no pairing has", (s) => poll(s.a, s.kept.a.deviceCode.replace(/^./, (c) => (c === "A" ? "B" : "A"))));
  await step("pair poll of a device code of the wrong form", (s) => poll(s.a, "not-a-device-code"));
  await step("pair start (device B) and its approval", (s) => pair(s.b, "b", s));
  await step("pair poll (device B)", async (s) => {
    const answer = await poll(s.b, s.kept.b.deviceCode);
    s.b.runnerId = answer.body.runnerId;
    [[s.b.siteKeyId, s.b.site]] = Object.entries(answer.body.sites);
    return answer;
  });
  now += 1_000;
  await step("pair start, then denied", async (s) => {
    const started = await pair(new Device(s.handler, [CAP], { now: clock }), "denied", s, false);
    await s.app.denyPairing(started.body.userCode);
    return started;
  });
  await step("pair poll of a denied pairing", (s) => poll(s.a, s.kept.denied.deviceCode));
  await step("pair start, left to expire", (s) => pair(new Device(s.handler, [CAP], { now: clock }), "late", s, false));
  await step("pair start with an encryption key its identity did not sign", (s) =>
    s.a.post("pair", { ...startBody(s.a), device: { ...s.a.publicIdentity(), encryptionSig: s.b.publicIdentity().encryptionSig } }, false),
  );

  // ------------------------------------------------------------ work
  await step("claim, nothing queued", (s) => claim(s.a));
  for (const s of sites) {
    const enqueue = (id, over = {}) => s.app.enqueue({ kind: "llm.generate", payload: { prompt: `prompt of ${id}` }, owner: "alice", id, ...over });
    await enqueue("job-1");
    await enqueue("job-2", { audience: "team", purpose: "summaries" });
    await enqueue("job-3", { owner: "bob", audience: "team" }); // never offered: the device's offer is private
    await enqueue("job-4", { dependsOn: ["job-1"] });
    await enqueue("job-5", { ttlMs: 300_000, deadlineAt: now + 3_600_000 });
  }
  now += 100;
  await step("claim one: job-1", (s) => claim(s.a));
  await step("fetch job-1", async (s) => {
    const stub = s.stubs.get("job-1");
    const answer = await s.a.fetchJob(stub);
    assert.deepEqual(await s.a.open(stub, answer.body.envelope), { prompt: "prompt of job-1" }, s.name);
    return answer;
  });
  await step("fetch job-1 naming another lease", (s) => fetchOf(s.a, "job-1", "00000000-0000-4000-8000-000000000000"));
  await step("fetch job-1 by device B, with A's lease", (s) => fetchOf(s.b, "job-1", ref(s, "job-1").leaseId));
  await step("fetch job-2, which nobody holds", (s) => fetchOf(s.a, "job-2", ref(s, "job-1").leaseId));
  await step("fetch an unknown job", (s) => fetchOf(s.a, "job-404", ref(s, "job-1").leaseId));
  now += 100;
  await step("heartbeat naming job-1", (s) => heartbeat(s.a, [ref(s, "job-1")]));
  await step("heartbeat naming job-1 and a lease nobody holds", (s) =>
    heartbeat(s.a, [ref(s, "job-1"), { jobId: "job-2", leaseId: "11111111-1111-4111-8111-111111111111" }]),
  );
  await step("heartbeat by device B naming A's lease", (s) => heartbeat(s.b, [ref(s, "job-1")]));
  now += 100;
  await step("result job-1", (s) => s.a.result(s.stubs.get("job-1"), "the answer"));
  await step("result job-1 again: a duplicate", (s) => s.a.result(s.stubs.get("job-1"), "the answer"));
  await step("result for an unknown job", (s) => s.a.result({ id: "job-404", lease: { id: ref(s, "job-1").leaseId } }, "x"));
  now += 100;
  await step("claim three: job-2, job-5, then job-4 (unblocked by job-1)", (s) => claim(s.a, 3));
  await step("release job-2, refused", (s) => releaseOf(s.a, [ref(s, "job-2")], "refused"));
  await step("claim: job-2 is not offered again to its refuser", (s) => claim(s.a));
  await step("claim by device B: job-2", (s) => claim(s.b));
  await step("release job-2 by device A, whose grant it no longer is", (s) => releaseOf(s.a, [ref(s, "job-2")], "shutdown"));
  for (const s of sites) await s.app.cancel("job-4");
  now += 100;
  await step("heartbeat naming job-5 and job-4: job-4's owner asked for a cancel", (s) => heartbeat(s.a, [ref(s, "job-5"), ref(s, "job-4")]));
  await step("release job-4: it ends canceled", (s) => releaseOf(s.a, [ref(s, "job-4")], "shutdown"));
  await step("result for job-2 by device A, presenting B's lease", (s) =>
    s.a.result({ id: "job-2", lease: { id: ref(s, "job-2").leaseId } }, "from A"),
  );
  now += LEASE_MS;
  await step("heartbeat after the lease lapsed: job-5 is lost", (s) => heartbeat(s.a, [ref(s, "job-5")]));
  await step("result for job-5 on its lapsed lease", (s) => s.a.result(s.stubs.get("job-5"), "late"));
  await step("claim: job-5 again, a new grant", (s) => claim(s.a));
  await step("fetch job-5 on the new grant", async (s) => {
    const stub = s.stubs.get("job-5");
    const answer = await s.a.fetchJob(stub);
    assert.deepEqual(await s.a.open(stub, answer.body.envelope), { prompt: "prompt of job-5" }, s.name);
    return answer;
  });
  await step("result job-5", (s) => s.a.result(s.stubs.get("job-5"), "done"));
  now += PAIRING_TTL_MS;
  await step("pair poll of the pairing left to expire", (s) => poll(s.a, s.kept.late.deviceCode));
  for (const s of sites) await s.app.enqueue({ kind: "llm.generate", payload: { prompt: "soon gone" }, owner: "alice", id: "job-6", ttlMs: 1_000 });
  now += 1_000;
  await step("claim: job-6 has expired", (s) => claim(s.a));

  // ------------------------------------------------------------ refusals
  await step("claim, not signed", (s) => s.a.post("claim", { protocolVersion: "2", runnerId: s.a.runnerId, capabilities: [CAP], max: 1 }, false));
  await step("claim signed over other bytes", (s) => {
    const body = { protocolVersion: "2", runnerId: s.a.runnerId, capabilities: [CAP], max: 1 };
    return raw(s, "claim", JSON.stringify(body), { signer: s.a, signedText: JSON.stringify({ ...body, max: 2 }) });
  });
  await step("claim signed by device A as device B", (s) => {
    const body = { protocolVersion: "2", runnerId: s.b.runnerId, capabilities: [CAP], max: 1 };
    return raw(s, "claim", JSON.stringify(body), { signer: s.a, runnerId: s.b.runnerId });
  });
  await step("claim whose body names another runner", (s) =>
    raw(s, "claim", JSON.stringify({ protocolVersion: "2", runnerId: s.b.runnerId, capabilities: [CAP], max: 1 }), { signer: s.a }),
  );
  await step("claim by a runner nobody paired", (s) =>
    raw(s, "claim", JSON.stringify({ protocolVersion: "2", runnerId: "runner_x", capabilities: [CAP], max: 1 }), {
      signer: s.a,
      runnerId: "runner_x",
    }),
  );
  await step("claim signed ten minutes ago", (s) =>
    raw(s, "claim", JSON.stringify({ protocolVersion: "2", runnerId: s.a.runnerId, capabilities: [CAP], max: 1 }), {
      signer: s.a,
      issuedAt: now - 600_000,
    }),
  );
  await step("claim with a max that is not a number", (s) =>
    raw(s, "claim", JSON.stringify({ protocolVersion: "2", runnerId: s.a.runnerId, capabilities: [CAP], max: "one" }), { signer: s.a }),
  );
  await step("claim whose body is not JSON", (s) => raw(s, "claim", "{not json", { signer: s.a }));
  await step("claim of protocol version 1", (s) =>
    raw(s, "claim", JSON.stringify({ protocolVersion: "1", runnerId: s.a.runnerId, capabilities: [CAP], max: 1 }), { signer: s.a }),
  );
  await step("an unknown endpoint", (s) => raw(s, "nothing", "{}", { signer: s.a }));
  for (const s of sites) await s.app.revokeRunner(s.b.runnerId);
  await step("claim by a revoked runner", (s) => claim(s.b));
  await step("heartbeat by a revoked runner", (s) => heartbeat(s.b, [ref(s, "job-2")]));
  await step("release by a revoked runner", (s) => releaseOf(s.b, [ref(s, "job-2")], "revoked"));

  // ------------------------------------------------------------ the records
  for (const id of ["job-1", "job-2", "job-3", "job-4", "job-5", "job-6"]) {
    const records = [];
    for (const s of sites) {
      const { envelope: _sealed, ...record } = await s.app.job(id);
      records.push(s.canonRecord(record));
    }
    for (let i = 1; i < sites.length; i += 1) assert.deepEqual(records[i], records[0], `${id}: ${sites[i].name}`);
  }
  const states = await Promise.all(["job-1", "job-2", "job-3", "job-4", "job-5", "job-6"].map(async (id) => (await sites[0].app.job(id)).state));
  // job-2's grant to B lapsed with job-5's; A refused it, so it waits.
  assert.deepEqual(states, ["ok", "queued", "queued", "canceled", "ok", "expired"]);
});
