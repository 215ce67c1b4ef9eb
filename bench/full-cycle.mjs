// Full job cycle through the real HTTP handler, the way a user would measure it:
// enqueue → claim → fetch (device opens) → result (device seals) → app.result.
//
// The same code drives the reference (@byollm/server) and ours; only the module
// passed in differs. The simulated device uses @byollm/protocol for both (the
// real daemon's library), and its time is reported apart from the server's.
// It shares the server's thread, so some of its cost still shows on the
// server's side: bench/device-effect.mjs measures how much. Every cycle must
// end `ok` with the exact text the device sealed, or the number is void (the
// run throws).
//
// Run directly: node bench/full-cycle.mjs  (Node >= 22.14: the reference needs it)
import { createServer } from "node:http";
import { performance } from "node:perf_hooks";
import { Worker, isMainThread, parentPort, workerData } from "node:worker_threads";
import * as protocol from "@byollm/protocol";

const OWNER = "user-bench";
const CAP = {
  kind: "llm.generate",
  service: "bench",
  backendId: "ollama",
  backendClass: "http",
  model: "bench-model",
  offerScope: "private",
};

export async function loadImpls() {
  const ref = await import("@byollm/server");
  const ours = await import("../dist/index.js");
  return { ref, ours };
}

// The clock of the server's windows: wall time, or with `--cpu` (and
// BENCH_CPU=1 for imports) the main thread's CPU time, for A/B runs of two
// builds on a machine other processes keep busy.
const threadCpuMs = () => {
  const u = process.threadCpuUsage();
  return (u.user + u.system) / 1000;
};
const serverClock =
  (process.argv.includes("--cpu") || process.env.BENCH_CPU === "1") && typeof process.threadCpuUsage === "function"
    ? threadCpuMs
    : () => performance.now();

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// ---------------------------------------------------------------- the device side

/**
 * A simulated daemon: its keys, its pairing, and signed calls through `send`.
 * Its crypto is @byollm/protocol's (the real daemon's) unless `crypto` names
 * another module with the same functions (bench/device-effect.mjs).
 */
class Device {
  constructor(send, origin, crypto = protocol) {
    this.send = send;
    this.origin = origin;
    this.crypto = crypto;
    this.keys = crypto.generateKeys(Date.now());
    this.deviceKeyId = crypto.keyId(this.keys.identityPublic);
    this.deviceMs = 0;
  }

  async post(endpoint, body, signed = true) {
    const t0 = performance.now();
    const text = JSON.stringify(body);
    const headers = { "content-type": "application/json", accept: "application/json" };
    if (signed) {
      const sig = this.crypto.signRequest(this.keys, {
        endpoint,
        runnerId: this.runnerId,
        issuedAt: Date.now(),
        body: text,
      });
      headers["x-byollm-runner"] = sig.runnerId;
      headers["x-byollm-issued-at"] = String(sig.issuedAt);
      headers["x-byollm-signature"] = sig.signature;
    }
    this.deviceMs += performance.now() - t0;
    const { status, json } = await this.send(`${this.origin}/byollm/${endpoint}`, headers, text);
    if (status !== 200) throw new Error(`${endpoint} answered ${status}: ${JSON.stringify(json)}`);
    return json;
  }

  async pair(approve) {
    const start = await this.post(
      "pair",
      {
        protocolVersion: "2",
        action: "start",
        daemon: { version: "0.1.1", label: "bench", platform: "linux" },
        device: this.crypto.publicIdentityOf(this.keys),
        capabilities: [CAP],
      },
      false,
    );
    await approve(start.userCode);
    const poll = await this.post("pair", { protocolVersion: "2", action: "poll", deviceCode: start.deviceCode }, false);
    if (poll.status !== "approved") throw new Error(`pairing not approved: ${JSON.stringify(poll)}`);
    this.runnerId = poll.runnerId;
    const [siteKeyId, site] = Object.entries(poll.sites)[0];
    this.siteKeyId = siteKeyId;
    this.site = site;
  }

  /** One job: claim, fetch + open, seal + result. Returns the job id, or null if nothing was claimable. */
  async runOne(textFor) {
    const claim = await this.post("claim", { protocolVersion: "2", runnerId: this.runnerId, capabilities: [CAP], max: 1 });
    const stub = claim.jobs[0];
    if (!stub) return null;
    const fetched = await this.post("fetch", {
      protocolVersion: "2",
      runnerId: this.runnerId,
      jobId: stub.id,
      leaseId: stub.lease.id,
    });
    let t0 = performance.now();
    const opened = await this.crypto.open({
      envelope: fetched.envelope,
      recipientKeys: this.keys,
      senderIdentityPublic: this.site.identity,
      expected: { jobId: stub.id, senderKeyId: this.siteKeyId, recipientKeyId: this.deviceKeyId, direction: "payload" },
    });
    if (!opened.ok) throw new Error(`device could not open the payload: ${opened.reason}`);
    const payload = JSON.parse(opened.plaintext);
    const text = textFor(stub.id, payload);
    const sealed = await this.crypto.seal({
      plaintext: JSON.stringify({
        outcome: { outcome: "ok", text },
        ran: { model: CAP.model, backendClass: "http", durationMs: 1 },
      }),
      senderKeys: this.keys,
      recipientEncryptionPublic: this.site.encryption,
      context: {
        jobId: stub.id,
        senderKeyId: this.deviceKeyId,
        recipientKeyId: this.siteKeyId,
        deadlineAt: Date.now() + 86_400_000,
        direction: "result",
      },
    });
    this.deviceMs += performance.now() - t0;
    const result = await this.post("result", {
      protocolVersion: "2",
      runnerId: this.runnerId,
      jobId: stub.id,
      leaseId: stub.lease.id,
      envelope: sealed,
      disposition: "ok",
    });
    if (!result.accepted) throw new Error(`result refused: ${JSON.stringify(result)}`);
    return stub.id;
  }
}

const textFor = (jobId, payload) => `done ${jobId} ${payload.prompt.length}`;

// ---------------------------------------------------------------- the site side

function makeSite(impl, { fill = 0, metrics } = {}) {
  const siteKeys = impl.generateSiteKeys();
  const store = new impl.MemoryStore();
  // `metrics: false` (ours only): bench/metrics.mjs's side by side.
  const off = metrics === false ? { metrics: false } : {};
  const app = new impl.ByollmApp({ store, siteKeys, ...off });
  // BENCH_HANDLER_STORE=methods: the handler reaches the same store through a
  // proxy, so the engine calls its methods instead of running in place (the
  // A/B of that mechanism in docs/performance.md).
  // (Its methods run on the store itself: MemoryStore keeps its native handle
  // in a private field, which a method called on a proxy cannot read.)
  const served =
    process.env.BENCH_HANDLER_STORE === "methods"
      ? new Proxy(store, { get: (target, key) => { const value = Reflect.get(target, key, target); return typeof value === "function" ? value.bind(target) : value; } })
      : store;
  const handler = impl.createFetchHandler({ store: served, siteKeys, verificationUrl: "http://127.0.0.1/pair", ...off });
  return { siteKeys, store, app, handler, fill };
}

/**
 * What a site has stored besides the benchmark's own jobs:
 * - "backlog": `n` jobs queued for 1,000 other owners (90% private, 10% team
 *   with an allowlist naming other owners), long TTL, so none expires and
 *   none is claimable by the benchmark's device — the store section's
 *   population, a busy site whose other users' daemons are offline. This is
 *   what makes the reference's claim take ~27 ms at 100,000 (store issue).
 * - "history": `n` jobs that already ended (expired), as a long-running site
 *   accumulates them.
 */
export async function fillStore(site, n, population = "history") {
  if (!n) return;
  const t = Date.now() - 10_000;
  const backlog = population === "backlog";
  const template = await site.app.enqueue({ kind: "llm.generate", payload: { prompt: "x".repeat(1000) }, owner: "someone-else", ttlMs: 1 });
  for (let i = 0; i < n; i++) {
    const owner = backlog ? `owner-${i % 1000}` : "someone-else";
    const team = backlog && i % 10 === 0 ? { audience: "team", audienceAllow: [`owner-${(i + 1) % 1000}`] } : {};
    await site.store.create(
      {
        id: `fill-${i}`,
        kind: "llm.generate",
        envelope: template.record.envelope,
        sizeClass: "small",
        owner,
        ttlMs: backlog ? 1e12 : 1,
        ...team,
      },
      t,
    );
  }
  await site.app.sweep();
}

function inProcessSend(site, timer) {
  return async (url, headers, body) => {
    const req = new Request(url, { method: "POST", headers, body });
    const t0 = serverClock();
    const res = await site.handler(req);
    const json = await res.json();
    const t1 = serverClock();
    timer.ms += t1 - t0;
    timer.windows?.push(t0, t1);
    return { status: res.status, json };
  };
}

async function httpSend(url, headers, body) {
  const res = await fetch(url, { method: "POST", headers, body });
  return { status: res.status, json: await res.json() };
}

/**
 * Serve a fetch-style handler with node:http (the way a plain Node app mounts it).
 * `timer.ms` collects the server's own time: from each request's complete
 * body to its `res.end`, the node:http → fetch-API conversion included (every
 * mount pays it). The wait for the body is left out: the simulated device
 * shares this thread, and while the server waits for bytes the device's
 * own client code runs (measured: counting it made both sides look alike).
 */
export function serve(handler, timer = { ms: 0 }) {
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const t0 = serverClock();
    const body = Buffer.concat(chunks);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers.set(k, v);
    const request = new Request(`http://127.0.0.1${req.url}`, {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
    });
    const response = await handler(request);
    const out = Buffer.from(await response.arrayBuffer());
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(out);
    timer.ms += serverClock() - t0;
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ server, origin: `http://127.0.0.1:${server.address().port}`, timer })),
  );
}

/**
 * `jobs` full cycles with one device; returns jobs/s (server-side and wall) and the device's share.
 * `windows`, if given, receives each in-process request's start and end (performance.now()).
 */
export async function cycles(impl, { jobs, promptChars, fill = 0, population = "history", http = false, deviceCrypto, windows, metrics }) {
  const site = makeSite(impl, { metrics });
  await fillStore(site, fill, population);
  const timer = { ms: 0, windows: undefined };
  let served;
  let send;
  if (http) {
    served = await serve(site.handler, timer);
    send = httpSend;
  } else {
    send = inProcessSend(site, timer);
  }
  const device = new Device(send, served ? served.origin : "http://127.0.0.1", deviceCrypto);
  await device.pair((userCode) => site.app.approvePairing({ userCode, owner: OWNER }));
  const prompt = "p".repeat(promptChars);
  timer.ms = 0;
  timer.windows = windows;
  device.deviceMs = 0;
  // The site's own calls count as server time too.
  const timed = async (work) => {
    const s = serverClock();
    const out = await work();
    const e = serverClock();
    timer.ms += e - s;
    windows?.push(s, e);
    return out;
  };
  const t0 = performance.now();
  for (let i = 0; i < jobs; i++) {
    const handle = await timed(() => site.app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: OWNER }));
    const id = await device.runOne(textFor);
    if (id !== handle.id) throw new Error(`claimed ${id}, expected ${handle.id}`);
    const result = await timed(() => site.app.result(id));
    const want = `done ${id} ${promptChars}`;
    if (result?.state !== "ok" || result.outcome?.text !== want) {
      throw new Error(`cycle ${i} did not complete with the exact text: ${JSON.stringify(result)}`);
    }
  }
  const wallMs = performance.now() - t0;
  if (served) served.server.close();
  return {
    // Over HTTP: the request callbacks in `serve` plus enqueue and app.result.
    serverJobsPerSec: (jobs * 1000) / timer.ms,
    wallJobsPerSec: (jobs * 1000) / wallMs,
    deviceMsPerJob: device.deviceMs / jobs,
  };
}

// ---------------------------------------------------------------- concurrent devices (workers)

export async function concurrent(impl, implName, { devices, jobs, promptChars }) {
  const site = makeSite(impl);
  const served = await serve(site.handler);
  const prompt = "p".repeat(promptChars);
  const workers = [];
  // Pair every device first (the worker asks, the main thread approves).
  for (let d = 0; d < devices; d++) {
    const w = new Worker(new URL(import.meta.url), { workerData: { origin: served.origin } });
    await new Promise((resolve, reject) => {
      w.on("error", reject);
      w.on("message", async (m) => {
        if (m.type === "approve") {
          await site.app.approvePairing({ userCode: m.userCode, owner: OWNER });
          w.postMessage({ type: "approved" });
        } else if (m.type === "paired") resolve();
      });
    });
    workers.push(w);
  }
  const ids = [];
  for (let i = 0; i < jobs; i++) ids.push((await site.app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: OWNER })).id);
  // The devices run in worker threads, so the main thread's CPU time is the
  // server's (requests overlap, so summing per-request times would not be,
  // and its wall-clock busy time counts the moments the devices' threads held
  // both cores).
  // (process.threadCpuUsage is Node >= 22.19; without it the row reads "—".)
  const threadCpu = typeof process.threadCpuUsage === "function" ? (prev) => process.threadCpuUsage(prev) : null;
  const cpu0 = threadCpu?.();
  const t0 = performance.now();
  const done = await Promise.all(
    workers.map(
      (w) =>
        new Promise((resolve, reject) => {
          w.on("error", reject);
          w.on("message", (m) => {
            if (m.type === "done") resolve(m.count);
            if (m.type === "failed") reject(new Error(m.error));
          });
          w.postMessage({ type: "run" });
        }),
    ),
  );
  const wallMs = performance.now() - t0;
  const cpu = threadCpu?.(cpu0);
  const busyMs = cpu ? (cpu.user + cpu.system) / 1000 : null;
  for (const w of workers) await w.terminate();
  served.server.close();
  const total = done.reduce((a, b) => a + b, 0);
  if (total !== jobs) throw new Error(`${implName}: ${total} of ${jobs} jobs ran`);
  for (const id of ids) {
    const r = await site.app.result(id);
    if (r?.state !== "ok" || r.outcome?.text !== `done ${id} ${promptChars}`) throw new Error(`${implName}: job ${id} ended ${JSON.stringify(r)}`);
  }
  return { wallJobsPerSec: (jobs * 1000) / wallMs, serverJobsPerSec: busyMs ? (jobs * 1000) / busyMs : null };
}

if (!isMainThread && workerData?.origin) {
  const device = new Device(httpSend, workerData.origin);
  let approved;
  parentPort.on("message", async (m) => {
    if (m.type === "approved") approved();
    if (m.type === "run") {
      try {
        let count = 0;
        while ((await device.runOne(textFor)) !== null) count++;
        parentPort.postMessage({ type: "done", count });
      } catch (e) {
        parentPort.postMessage({ type: "failed", error: String(e?.stack ?? e) });
      }
    }
  });
  await device.pair(
    (userCode) =>
      new Promise((resolve) => {
        approved = resolve;
        parentPort.postMessage({ type: "approve", userCode });
      }),
  );
  parentPort.postMessage({ type: "paired" });
}

// ---------------------------------------------------------------- the section

/**
 * Medians over `rounds` runs of each measurement, reference and ours
 * interleaved. One run can give several rows (`picks`: row name → figure),
 * e.g. the wall time and the server's share of the same HTTP runs.
 */
export async function run({ quick = false, impls } = {}) {
  const { ref, ours } = impls ?? (await loadImpls());
  const rounds = quick ? 1 : 3;
  const rows = [];
  const measure = async (unit, fn, picks, targets = {}) => {
    const runs = { ref: [], ours: [] };
    // One unrecorded run each first: both JITs warm, both native sides past
    // their one-time work (module tables, first key parses).
    if (!quick) {
      await fn(ref, "reference");
      await fn(ours, "ours");
    }
    for (let i = 0; i < rounds; i++) {
      runs.ref.push(await fn(ref, "reference"));
      runs.ours.push(await fn(ours, "ours"));
    }
    for (const [name, pick] of Object.entries(picks)) {
      const row = { name, unit, ref: median(runs.ref.map(pick)), ours: median(runs.ours.map(pick)) };
      row.ratio = row.ours / row.ref;
      if (targets[name]) row.target = targets[name];
      rows.push(row);
    }
    return runs;
  };
  const server = (x) => x.serverJobsPerSec;
  const wall = (x) => x.wallJobsPerSec;
  const n = quick ? 40 : 300;
  await measure("jobs/s", (impl) => cycles(impl, { jobs: n, promptChars: 1000 }), {
    "full cycle in-process, server side (1 KB prompt)": server,
  }, { "full cycle in-process, server side (1 KB prompt)": "≥4x" });
  const http = await measure("jobs/s", (impl) => cycles(impl, { jobs: n, promptChars: 1000, http: true }), {
    "full cycle over loopback HTTP, wall, device included (1 KB prompt)": wall,
    "full cycle over loopback HTTP, server side (1 KB prompt)": server,
  }, {
    "full cycle over loopback HTTP, wall, device included (1 KB prompt)": "≥3x",
    "full cycle over loopback HTTP, server side (1 KB prompt)": "≥3x",
  });
  // What the wall ratio could be at best: the device's and the loopback
  // client's time (wall minus server side, from our runs) with a server that
  // took no time at all, against the reference's wall rate.
  const rest = median(http.ours.map((x) => 1000 / x.wallJobsPerSec - 1000 / x.serverJobsPerSec));
  const refWall = median(http.ref.map(wall));
  rows.push({
    name: "  the wall ratio's ceiling: our server taking 0 ms",
    unit: "jobs/s",
    ref: refWall,
    ours: 1000 / rest,
    ratio: 1000 / rest / refWall,
  });
  await measure("jobs/s", (impl) => cycles(impl, { jobs: quick ? 3 : 20, promptChars: 1_000_000 }), {
    "full cycle in-process, server side (1M-char prompt)": server,
  }, { "full cycle in-process, server side (1M-char prompt)": "≥5x" });
  await measure(
    "jobs/s",
    (impl, name) => concurrent(impl, name, { devices: quick ? 4 : 16, jobs: quick ? 80 : 800, promptChars: 1000 }),
    {
      "16 concurrent devices over HTTP, wall (1 KB prompt)": wall,
      "16 concurrent devices over HTTP, server main-thread CPU (1 KB prompt)": server,
    },
  );
  return rows;
}

/**
 * jobs/s (server side, in-process) against stored job count, for both
 * populations (see `fillStore`), for the table and the chart. Each point is
 * a median of `rounds` runs on fresh sites, after two unrecorded runs per
 * implementation (JIT warm-up; a fresh site's first seals build its key
 * tables). Five rounds, and 400 of our cycles a run (about 0.2 s): with
 * three rounds of 200 the 100,000 point moved by a third between runs on
 * this noisy machine.
 */
export async function scaling({ sizes = [1_000, 10_000, 100_000], oursOnly = [], jobs = 400, refJobs = 60, rounds = 5, impls } = {}) {
  const { ref, ours } = impls ?? (await loadImpls());
  // Unrecorded warm-up, as long as a measured run: with less, the first
  // points (N = 1,000) still ran partly unoptimised code on both sides.
  for (let i = 0; i < 2; i++) {
    await cycles(ours, { jobs, promptChars: 1000 });
    await cycles(ref, { jobs, promptChars: 1000 });
  }
  const points = [];
  for (const population of ["backlog", "history"]) {
    for (const fill of [...sizes, ...oursOnly]) {
      // Median of `rounds` runs, reference and ours interleaved, each on a
      // freshly filled site (one run for ours-only sizes: a million jobs take
      // a while to store).
      const only = oursOnly.includes(fill);
      const o = [];
      const r = [];
      for (let i = 0; i < (only ? 1 : rounds); i++) {
        o.push((await cycles(ours, { jobs, promptChars: 1000, fill, population })).serverJobsPerSec);
        if (only) continue;
        // The reference at 100,000 queued jobs spends ~40 ms a cycle: 30 cycles make the point.
        const n = fill >= 100_000 ? Math.min(refJobs, 30) : refJobs;
        r.push((await cycles(ref, { jobs: n, promptChars: 1000, fill, population })).serverJobsPerSec);
      }
      points.push({ stored: fill, population, ref: only ? null : median(r), ours: median(o) });
    }
  }
  return points;
}

if (isMainThread && import.meta.url === `file://${process.argv[1]}`) {
  const rows = await run({ quick: process.argv.includes("--quick") });
  for (const r of rows) console.log(`${r.name.padEnd(56)} ref ${r.ref.toFixed(1).padStart(9)}  ours ${r.ours.toFixed(1).padStart(9)} ${r.unit}  ratio ${r.ratio.toFixed(2)}x`);
}
