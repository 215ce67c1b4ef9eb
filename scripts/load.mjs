#!/usr/bin/env node
// Load and soak for the protocol server.
//
//   node scripts/load.mjs [--daemons 50] [--jobs 10000] [--workers 4] [--lease-ms 3000] [--timeout-s 300]
//       Our createFetchHandler + ByollmApp over one MemoryStore, mounted on
//       node:http (127.0.0.1) in this thread; simulated daemons in
//       worker_threads speak the wire protocol (signed requests, sealed
//       payloads and results). The job mix: plain jobs, errors, jobs the
//       owner cancels (some queued, some mid-run), jobs some runners refuse
//       (released as `refused`), jobs whose daemon "dies" mid-lease (no
//       result, no release: the lease must lapse), and jobs that depend on
//       another. Checks: every job ends in exactly one correct terminal
//       state with the right result, none runs twice at once, none is lost,
//       a dependent never starts before its dependency succeeded. Prints
//       request latency (p50/p99/max) and throughput.
//
//   node scripts/load.mjs --soak 1000000 [--retention-ms 60000] [--batch 500]
//       One million jobs through the in-memory store (enqueue, claim,
//       complete) with retention on and a simulated clock; RSS and heap are
//       printed at intervals and must end flat.
//
// The last line is `RESULT <json>`; the exit code is 1 on any violation.
import { Worker, isMainThread, parentPort, workerData } from "node:worker_threads";
import * as dev from "../__test__/helpers/device-crypto.mjs";
import * as deviceKeys from "./device-keys.mjs";
import { xorshift32 } from "./prng.mjs";
import http from "node:http";
import { fileURLToPath } from "node:url";
import v8 from "node:v8";
import vm from "node:vm";

/**
 * A full garbage collection before each memory sample, so the soak measures
 * what is retained rather than when V8 last felt like collecting. Without
 * --expose-gc (node --test does not pass it) the flag is set at run time and
 * the collector taken from a fresh context.
 */
function collectGarbage() {
  if (typeof globalThis.gc !== "function") {
    v8.setFlagsFromString("--expose-gc");
    globalThis.gc = vm.runInNewContext("gc");
  }
  globalThis.gc();
}

const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? Number(args[i + 1]) : fallback;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));


const MODES = ["ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "error", "cancel", "refuse", "die", "parent", "child"];

// ---------------------------------------------------------------------------
// Worker: a set of daemons

async function workerMain() {
  const native = await import("../index.js");
  const { url, daemons, cancelWorkMs, workMs, seed, leaseMs } = workerData;
  const rand = xorshift32(seed);
  const latencies = [];
  let requests = 0;
  let errors = 0;
  let stop = false;
  const events = [];
  const flush = () => {
    if (events.length) parentPort.postMessage({ type: "events", events: events.splice(0) });
  };
  const flusher = setInterval(flush, 50);
  const emit = (e) => events.push({ ...e, t: Date.now() });
  parentPort.on("message", (m) => {
    if (m.type === "stop") stop = true;
  });

  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const target = new URL(url);
  function post(path, text, headers) {
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const req = http.request(
        { agent, method: "POST", hostname: target.hostname, port: target.port, path, headers: { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(text) } },
        (res) => {
          const chunks = [];
          res.on("data", (c) => chunks.push(c));
          res.on("end", () => {
            latencies.push(performance.now() - started);
            requests++;
            const body = Buffer.concat(chunks).toString("utf8");
            try {
              resolve({ status: res.statusCode, body: JSON.parse(body) });
            } catch {
              resolve({ status: res.statusCode, body });
            }
          });
        },
      );
      req.on("error", reject);
      req.end(text);
    });
  }

  async function call(d, endpoint, body) {
    const text = JSON.stringify({ protocolVersion: "2", ...body });
    const sig = deviceKeys.signRequest(d.keys, { endpoint, runnerId: d.runnerId, issuedAt: Date.now(), body: text });
    const r = await post(`/byollm/${endpoint}`, text, {
      "x-byollm-runner": sig.runnerId,
      "x-byollm-issued-at": String(sig.issuedAt),
      "x-byollm-signature": sig.signature,
    });
    if (r.status >= 500 || (r.status !== 200 && endpoint !== "fetch")) {
      errors++;
      emit({ type: "http-error", endpoint, status: r.status, body: r.body });
    }
    return r;
  }

  async function daemon(d) {
    const keyId = dev.keyId(deviceKeys.publicIdentityOf(d.keys).identity);
    const active = new Map(); // jobId → { leaseId, cancel }
    let lastBeat = 0;
    async function beat() {
      lastBeat = Date.now();
      const leases = [...active].map(([jobId, a]) => ({ jobId, leaseId: a.leaseId }));
      const r = await call(d, "heartbeat", { runnerId: d.runnerId, daemonVersion: "0.1.1", capabilities: d.capabilities, activeLeases: leases });
      if (r.status !== 200) return;
      for (const c of r.body.cancel) {
        const a = active.get(c.jobId);
        if (a && a.leaseId === c.leaseId) a.cancel = true;
      }
      for (const l of r.body.lost) {
        const a = active.get(l.jobId);
        if (a && a.leaseId === l.leaseId) a.lost = true;
      }
      // A lease the server did not call lost was renewed to serverTime + leaseMs.
      for (const { jobId } of leases) {
        const a = active.get(jobId);
        if (a && !a.lost) emit({ type: "renewed", jobId, runnerId: d.runnerId, expiresAt: r.body.serverTime + leaseMs });
      }
    }

    async function report(stub, outcome) {
      const envelope = dev.seal({
        plaintext: JSON.stringify({ outcome, ran: { model: "m1", backendClass: "http", durationMs: 1, stop: "end", stopReported: true } }),
        senderKeys: d.keys,
        recipientEncryptionPublic: d.site.encryption,
        context: { jobId: stub.id, senderKeyId: keyId, recipientKeyId: stub.site, deadlineAt: Date.now() + 86_400_000, direction: "result" },
      });
      // The run ends when the result leaves, before the server answers.
      emit({ type: "end", jobId: stub.id, runnerId: d.runnerId, how: "result" });
      const r = await call(d, "result", { runnerId: d.runnerId, jobId: stub.id, leaseId: stub.lease.id, envelope, disposition: outcome.outcome });
      emit({ type: "reported", jobId: stub.id, runnerId: d.runnerId, outcome: outcome.outcome, accepted: r.body?.accepted === true, state: r.body?.state });
    }

    async function run(stub) {
      const fetched = await call(d, "fetch", { runnerId: d.runnerId, jobId: stub.id, leaseId: stub.lease.id });
      if (fetched.status !== 200) {
        emit({ type: "fetch-refused", jobId: stub.id, runnerId: d.runnerId, status: fetched.status });
        return;
      }
      const opened = dev.open({
        envelope: fetched.body.envelope,
        recipientKeys: d.keys,
        senderIdentityPublic: d.site.identity,
        expected: { jobId: stub.id, senderKeyId: stub.site, recipientKeyId: keyId, direction: "payload" },
      });
      if (!opened.ok) {
        emit({ type: "open-failed", jobId: stub.id, reason: opened.reason });
        return;
      }
      const { prompt } = JSON.parse(opened.plaintext);
      const mode = prompt.split(":")[0];
      emit({ type: "start", jobId: stub.id, runnerId: d.runnerId, leaseId: stub.lease.id, expiresAt: stub.lease.expiresAt });
      const a = { leaseId: stub.lease.id, cancel: false, lost: false };
      active.set(stub.id, a);
      try {
        if (mode === "die" && rand() < 0.5) {
          // Gone mid-lease: no result, no release, no heartbeat for it again.
          emit({ type: "end", jobId: stub.id, runnerId: d.runnerId, how: "died" });
          await sleep(100);
          return;
        }
        if (mode === "refuse" && d.index % 2 === 0) {
          emit({ type: "end", jobId: stub.id, runnerId: d.runnerId, how: "refused" });
          await call(d, "release", { runnerId: d.runnerId, leases: [{ jobId: stub.id, leaseId: stub.lease.id }], reason: "refused" });
          return;
        }
        if (mode === "cancel") {
          // Long enough for the owner's cancel to land while it runs.
          const until = Date.now() + cancelWorkMs;
          while (Date.now() < until && !a.cancel && !a.lost) {
            await sleep(50);
            if (Date.now() - lastBeat > 150) await beat();
          }
          if (a.lost) {
            emit({ type: "end", jobId: stub.id, runnerId: d.runnerId, how: "lost" });
            return;
          }
          if (a.cancel) return await report(stub, { outcome: "canceled" });
        } else if (workMs > 0) {
          // A long job: the daemon heartbeats while it works, as the real one does.
          const until = Date.now() + workMs;
          while (Date.now() < until && !a.lost) {
            await sleep(25);
            if (Date.now() - lastBeat > leaseMs / 4) await beat();
          }
          if (a.lost) {
            emit({ type: "end", jobId: stub.id, runnerId: d.runnerId, how: "lost" });
            return;
          }
        } else {
          await sleep(Math.floor(rand() * 8));
        }
        if (mode === "error") return await report(stub, { outcome: "error", code: "backend-error", message: `failed ${stub.id}`, retryable: false });
        return await report(stub, { outcome: "ok", text: `done:${stub.id}` });
      } finally {
        active.delete(stub.id);
      }
    }

    while (!stop) {
      if (Date.now() - lastBeat > 1000) await beat();
      const claim = await call(d, "claim", { runnerId: d.runnerId, capabilities: d.capabilities, max: 2 });
      const jobs = claim.status === 200 ? claim.body.jobs : [];
      if (jobs.length === 0) {
        // Idle: poll again soon (the real daemon waits pollIntervalMs, 2 s;
        // shorter here so a run is quick, but not a busy loop).
        await sleep(100 + Math.floor(rand() * 200));
        continue;
      }
      for (const stub of jobs) await run(stub);
    }
  }

  await Promise.all(daemons.map((d) => daemon(d)));
  clearInterval(flusher);
  flush();
  parentPort.postMessage({ type: "done", latencies, requests, errors });
}

// ---------------------------------------------------------------------------
// Main: the server, the job mix, the checks

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function listen(handler) {
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers.set(k, v);
    let response;
    try {
      response = await handler(new Request(`http://127.0.0.1${req.url}`, { method: req.method, headers, body: req.method === "POST" ? Buffer.concat(chunks) : undefined }));
    } catch (e) {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end(String(e?.stack ?? e));
      return;
    }
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return server;
}

export async function load({ daemons: nDaemons = 50, jobs: nJobs = 10_000, workers: nWorkers = 4, leaseMs = 3000, timeoutS = 300, cancelWorkMs = 1500, workMs = 0, seed = 7, log = console.log, wrapStore = (s) => s } = {}) {
  const lib = await import("../dist/index.js");
  const native = await import("../index.js");
  const rand = xorshift32(seed);
  const siteKeys = lib.generateSiteKeys();
  // wrapStore lets a test hand the server a deliberately faulty store.
  const store = wrapStore(new lib.MemoryStore());
  const app = new lib.ByollmApp({ store, siteKeys });
  const handler = lib.createFetchHandler({ store, siteKeys, verificationUrl: "https://site.example/runners", leaseMs });
  const server = await listen(handler);
  const url = `http://127.0.0.1:${server.address().port}`;

  // Pair every daemon over HTTP (unsigned pair calls), approving each.
  const capabilities = [{ kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m1", offerScope: "private" }];
  const daemons = [];
  for (let i = 0; i < nDaemons; i++) {
    const keys = native.generateKeys(Date.now());
    const device = deviceKeys.publicIdentityOf(keys);
    const post = async (body) => {
      const r = await fetch(`${url}/byollm/pair`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ protocolVersion: "2", ...body }) });
      return r.json();
    };
    const start = await post({ action: "start", daemon: { version: "0.1.1", label: `d${i}`, platform: "linux" }, device, capabilities });
    const runner = await app.approvePairing({ userCode: start.userCode, owner: "load" });
    const poll = await post({ action: "poll", deviceCode: start.deviceCode });
    const site = Object.values(poll.sites)[0];
    daemons.push({ index: i, keys, runnerId: runner.id, site, capabilities });
  }

  // The job mix, enqueued up front (parents before their children).
  const jobs = new Map(); // id → { mode, parent?, canceledAt?, cancelState? }
  const ids = [];
  let lastParent = null;
  for (let i = 0; i < nJobs; i++) {
    const mode = MODES[i % MODES.length];
    const input = { kind: "llm.generate", payload: { prompt: `${mode}:${i}` }, owner: "load", ttlMs: 3_600_000 };
    if (mode === "child" && lastParent) input.dependsOn = [lastParent];
    const handle = await app.enqueue(input);
    jobs.set(handle.id, { mode, parent: mode === "child" ? lastParent : undefined });
    ids.push(handle.id);
    if (mode === "parent") lastParent = handle.id;
  }
  const cancelIds = ids.filter((id) => jobs.get(id).mode === "cancel");
  cancelIds.forEach((id, i) => (jobs.get(id).cancelWhileRunning = i % 2 === 1));
  const cancels = [];

  // Workers, each with its share of the daemons.
  const execs = new Map(); // jobId → [{ runnerId, start, end, how }]
  const reported = new Map(); // jobId → [{ runnerId, outcome, accepted, state }]
  const anomalies = [];
  const relets = []; // jobs leased again after a live holder's lease lapsed
  // The store lets a lease go when expiresAt <= now, so a re-lease at
  // `claimedAt` is sound when the holder's last known expiry is not later.
  // A renewal that reaches this thread late can hide a fault, never invent one.
  const lapsedBefore = (exec, claimedAt) => exec.expiresAt <= claimedAt;
  const perWorker = Math.ceil(nDaemons / nWorkers);
  const stats = { latencies: [], requests: 0, errors: 0 };
  const started = performance.now();
  const workers = [];
  const done = [];
  for (let w = 0; w < nWorkers; w++) {
    const mine = daemons.slice(w * perWorker, (w + 1) * perWorker);
    if (mine.length === 0) continue;
    const worker = new Worker(fileURLToPath(import.meta.url), { workerData: { url, daemons: mine, cancelWorkMs, workMs, seed: seed * 31 + w, leaseMs } });
    workers.push(worker);
    done.push(
      new Promise((resolve, reject) => {
        worker.on("error", reject);
        worker.on("message", (m) => {
          if (m.type === "events") {
            for (const e of m.events) {
              if (e.type === "start") {
                const job = jobs.get(e.jobId);
                // Half the cancel-mode jobs are canceled while they run.
                if (job?.mode === "cancel" && job.cancelWhileRunning && !job.cancelIssued) {
                  job.cancelIssued = true;
                  cancels.push(
                    sleep(Math.floor(rand() * 200)).then(async () => {
                      job.cancelState = (await app.cancel(e.jobId))?.state;
                    }),
                  );
                }
                const list = execs.get(e.jobId) ?? [];
                // Overlaps are judged after the run, in time order: the two
                // workers' batches arrive in any order.
                const claimedAt = e.expiresAt - leaseMs;
                list.push({ runnerId: e.runnerId, leaseId: e.leaseId, start: e.t, claimedAt, expiresAt: e.expiresAt, renewals: 0 });
                execs.set(e.jobId, list);
              } else if (e.type === "renewed") {
                const x = (execs.get(e.jobId) ?? []).find((y) => y.runnerId === e.runnerId && y.end === undefined);
                if (x) {
                  x.expiresAt = Math.max(x.expiresAt, e.expiresAt);
                  x.renewals++;
                }
              } else if (e.type === "end") {
                const x = (execs.get(e.jobId) ?? []).find((y) => y.runnerId === e.runnerId && y.end === undefined);
                if (x) Object.assign(x, { end: e.t, how: e.how });
                else anomalies.push(`end without start: ${JSON.stringify(e)}`);
              } else if (e.type === "reported") {
                const list = reported.get(e.jobId) ?? [];
                list.push({ ...e });
                reported.set(e.jobId, list);
              } else if (e.type === "http-error" && e.status >= 500) {
                anomalies.push(`HTTP ${e.status} on ${e.endpoint}: ${JSON.stringify(e.body).slice(0, 200)}`);
              } else if (e.type === "open-failed") {
                anomalies.push(`payload did not open for ${e.jobId}: ${e.reason}`);
              }
            }
          } else if (m.type === "done") {
            stats.latencies.push(...m.latencies);
            stats.requests += m.requests;
            stats.errors += m.errors;
            resolve();
          }
        });
      }),
    );
  }

  // The owner cancels the cancel-mode jobs at random moments of the run.
  const canceler = (async () => {
    for (const id of cancelIds.filter((x) => !jobs.get(x).cancelWhileRunning)) {
      await sleep(Math.floor(rand() * 40));
      jobs.get(id).cancelIssued = true;
      const record = await app.cancel(id);
      jobs.get(id).cancelState = record?.state;
    }
  })();

  // Wait until every job is terminal (or the time runs out), printing progress.
  const terminal = new Set(["ok", "error", "canceled", "expired"]);
  const deadline = Date.now() + timeoutS * 1000;
  const pending = new Set(ids);
  let remaining = ids.length;
  let lastLog = 0;
  while (Date.now() < deadline) {
    await sleep(500);
    for (const id of pending) {
      const r = await store.get(id);
      if (r && terminal.has(r.state)) pending.delete(id);
    }
    remaining = pending.size;
    if (Date.now() - lastLog > 5000) {
      lastLog = Date.now();
      const mem = process.memoryUsage();
      log(`  ${((performance.now() - started) / 1000).toFixed(1)}s: ${ids.length - remaining}/${ids.length} terminal, rss ${(mem.rss / 2 ** 20).toFixed(0)} MiB`);
    }
    if (remaining === 0) break;
  }
  const wall = (performance.now() - started) / 1000;
  await canceler;
  await Promise.all(cancels);
  for (const w of workers) w.postMessage({ type: "stop" });
  await Promise.all(done);
  await Promise.all(workers.map((w) => w.terminate()));
  await new Promise((r) => {
    server.closeAllConnections?.();
    server.close(() => r());
  });

  // --- checks
  const states = {};
  const violations = [...anomalies];
  for (const id of ids) {
    const job = jobs.get(id);
    const record = await store.get(id);
    const state = record?.state ?? "missing";
    states[`${job.mode}:${state}`] = (states[`${job.mode}:${state}`] ?? 0) + 1;
    // No two runs of one job overlap in time (checked for every job, ended or not).
    const list = (execs.get(id) ?? []).slice().sort((a, b) => a.start - b.start);
    for (let i = 1; i < list.length; i++) {
      const [prev, next] = [list[i - 1], list[i]];
      if (prev.end !== undefined && next.start >= prev.end) continue;
      // A live daemon that outlived its lease (a stall on a loaded machine)
      // may still be running when the job is leased again: the protocol
      // working. Only a second lease issued while the first was valid is a fault.
      if (lapsedBefore(prev, next.claimedAt)) {
        relets.push(id);
        continue;
      }
      violations.push(
        `job ${id} started on ${next.runnerId} while still running on ${prev.runnerId} ` +
          `(lease ${prev.leaseId} known valid until ${prev.expiresAt} after ${prev.renewals} renewals, started ${prev.start}, ended ${prev.end ?? "never"}; ` +
          `lease ${next.leaseId} claimed at ${next.claimedAt}, started ${next.start})`,
      );
    }
    if (!terminal.has(state)) {
      violations.push(`lost: ${id} (${job.mode}) is ${state}`);
      continue;
    }
    const accepted = (reported.get(id) ?? []).filter((r) => r.accepted);
    const expected = job.mode === "error" ? ["error"] : job.mode === "cancel" ? ["canceled", "ok"] : ["ok"];
    if (!expected.includes(state)) violations.push(`${id} (${job.mode}) ended ${state}, expected ${expected.join(" or ")}`);
    const ranToEnd = state === "ok" || state === "error" || (state === "canceled" && job.cancelState !== "queued" && accepted.length > 0);
    if (ranToEnd && accepted.length !== 1) violations.push(`${id} (${job.mode}) has ${accepted.length} accepted results`);
    if (!ranToEnd && accepted.length !== 0) violations.push(`${id} (${job.mode}) canceled while queued but has a result`);
    if (state === "ok") {
      const delivered = await app.result(id);
      if (delivered?.outcome?.text !== `done:${id}`) violations.push(`${id}: wrong result text ${JSON.stringify(delivered?.outcome)}`);
      if (delivered?.provenance?.runnerId !== accepted[0]?.runnerId) violations.push(`${id}: provenance names ${delivered?.provenance?.runnerId}, result came from ${accepted[0]?.runnerId}`);
    }
    if (job.mode === "refuse") {
      const refusers = list.filter((x) => x.how === "refused").map((x) => x.runnerId);
      if (new Set(refusers).size !== refusers.length) violations.push(`${id}: offered again to a runner that refused it`);
    }
    if (job.mode === "child" && job.parent && list.length > 0) {
      const parentDone = (reported.get(job.parent) ?? []).find((r) => r.accepted);
      const parentEnd = (execs.get(job.parent) ?? []).find((x) => x.runnerId === parentDone?.runnerId && x.how === "result")?.end;
      if (parentEnd === undefined || list[0].start < parentEnd) violations.push(`${id}: started before its dependency ${job.parent} succeeded`);
    }
  }

  const lat = stats.latencies.sort((a, b) => a - b);
  const died = [...execs.values()].flat().filter((x) => x.how === "died").length;
  const refused = [...execs.values()].flat().filter((x) => x.how === "refused").length;
  const cancelLanded = {};
  for (const id of cancelIds) {
    const k = jobs.get(id).cancelState ?? "missing";
    cancelLanded[k] = (cancelLanded[k] ?? 0) + 1;
  }
  const summary = {
    daemons: nDaemons,
    jobs: nJobs,
    wallSeconds: Number(wall.toFixed(2)),
    jobsPerSecond: Number((nJobs / wall).toFixed(1)),
    requests: stats.requests,
    requestsPerSecond: Number((stats.requests / wall).toFixed(1)),
    latencyMs: { p50: Number(percentile(lat, 50).toFixed(2)), p99: Number(percentile(lat, 99).toFixed(2)), max: Number((lat.at(-1) ?? 0).toFixed(2)) },
    non200: stats.errors,
    died,
    releasedAfterLapse: relets.length,
    refusedReleases: refused,
    cancelLandedOn: cancelLanded,
    states,
    violations: violations.length,
  };
  for (const v of violations.slice(0, 20)) log(`VIOLATION ${v}`);
  return { summary, violations };
}

export async function soak({ jobs: nJobs = 1_000_000, retentionMs = 60_000, batch = 500, log = console.log } = {}) {
  const lib = await import("../dist/index.js");
  const siteKeys = lib.generateSiteKeys();
  const clock = { t: Date.now() };
  const store = new lib.MemoryStore({ retentionMs });
  const app = new lib.ByollmApp({ store, siteKeys, now: () => clock.t });
  const capabilities = [{ kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m1", offerScope: "private" }];
  const provenance = { audience: "private", runnerId: "runner_soak", runnerOwner: "soak", backendClass: "http", model: "m1", untrusted: false };
  const samples = [];
  const started = performance.now();
  const sample = (done) => {
    collectGarbage();
    const m = process.memoryUsage();
    const s = { jobs: done, rssMiB: Number((m.rss / 2 ** 20).toFixed(1)), heapMiB: Number((m.heapUsed / 2 ** 20).toFixed(1)), seconds: Number(((performance.now() - started) / 1000).toFixed(1)) };
    samples.push(s);
    log(`  soak ${s.jobs} jobs: rss ${s.rssMiB} MiB, heap ${s.heapMiB} MiB, ${s.seconds}s`);
  };
  let done = 0;
  let firstId;
  const every = Math.max(batch, Math.floor(nJobs / 10 / batch) * batch);
  sample(0);
  while (done < nJobs) {
    const n = Math.min(batch, nJobs - done);
    for (let i = 0; i < n; i++) {
      const h = await app.enqueue({ kind: "llm.generate", payload: { prompt: `soak ${done + i}` }, owner: "soak" });
      firstId ??= h.id;
    }
    let left = n;
    while (left > 0) {
      const claimed = await store.claim({ runnerId: "runner_soak", runnerOwner: "soak", capabilities, max: Math.min(left, 100), leaseMs: 60_000, now: clock.t });
      if (claimed.length === 0) throw new Error(`soak: claim returned nothing with ${left} jobs queued`);
      for (const job of claimed) {
        const r = await store.complete({ jobId: job.id, runnerId: "runner_soak", holder: { by: "lease", leaseId: job.lease.id }, outcome: { outcome: "ok", text: "x" }, provenance, now: clock.t });
        if (!r.accepted) throw new Error(`soak: completion of ${job.id} refused`);
      }
      left -= claimed.length;
    }
    done += n;
    // One simulated second per batch: retention drops what ended a minute ago.
    clock.t += 1000;
    if (done % every === 0 || done === nJobs) sample(done);
  }
  await store.expireDue(clock.t);
  // Flat: the last sample is within 25% (and 64 MiB) of the one at 20% of the run.
  const base = samples[Math.max(1, Math.floor(samples.length / 5))];
  const last = samples.at(-1);
  const growth = last.rssMiB - base.rssMiB;
  const flat = growth <= Math.max(64, base.rssMiB * 0.25);
  const heapFlat = last.heapMiB - base.heapMiB <= Math.max(16, base.heapMiB * 0.25);
  const kept = await store.get((await app.enqueue({ kind: "llm.generate", payload: { prompt: "probe" }, owner: "soak" })).id);
  // Retention really dropped the old jobs (else "flat" would mean nothing).
  const firstDropped = (await store.get(firstId)) === null;
  const violations = [];
  if (!(flat && heapFlat)) violations.push(`memory grew: ${JSON.stringify(base)} → ${JSON.stringify(last)}`);
  if (!firstDropped) violations.push("the first job is still stored after its retention");
  return {
    summary: { jobs: nJobs, seconds: last.seconds, jobsPerSecond: Number((nJobs / last.seconds).toFixed(0)), rssGrowthMiB: Number(growth.toFixed(1)), flat: flat && heapFlat, firstDropped, samples, probe: kept?.state },
    violations,
  };
}

if (!isMainThread) {
  await workerMain();
} else if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const soakJobs = opt("soak", 0);
  const { summary, violations } = soakJobs
    ? await soak({ jobs: soakJobs, retentionMs: opt("retention-ms", 60_000), batch: opt("batch", 500) })
    : await load({ daemons: opt("daemons", 50), jobs: opt("jobs", 10_000), workers: opt("workers", 4), leaseMs: opt("lease-ms", 3000), timeoutS: opt("timeout-s", 300), cancelWorkMs: opt("cancel-work-ms", 1500), seed: opt("seed", 7) });
  console.log(`RESULT ${JSON.stringify(summary)}`);
  process.exit(violations.length ? 1 : 0);
}
