// How the store scales with the number of stored jobs: our native MemoryStore
// side by side with the reference MemoryStore from @byollm/server@0.1.1.
//
//   node_modules/node/bin/node --expose-gc bench/store-scaling.mjs [--quick]
//
// Measure with the release addon: `npm run build:native`, or, in a tree where
// others rebuild the debug addon, `cargo build --release --features node --lib`
// and NAPI_RS_NATIVE_LIBRARY_PATH=target/release/libbyollm_server_native.so.
// Node 22 (imports the reference). `run(opts)` returns the rows; run
// directly, it prints them.
//
// The stored jobs belong to 1,000 other owners (90% private, 10% team with an
// allowlist naming other owners) with a long TTL, so none expires and none is
// claimable by the benchmark runner: the "claim without a claimable job" case
// is the common one of a runner polling an idle queue on a busy site. Every
// job carries an envelope the size of a sealed 1 KB prompt; the ciphertexts
// are random bytes of exactly the sealed length (one real seal per run tells
// the length), unique per job so no store can share them.
import { performance } from "node:perf_hooks";
import { randomFillSync, randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { MemoryStore as ReferenceStore, ByollmApp, generateSiteKeys } from "@byollm/server";
import { MemoryStore as NativeStore } from "../dist/memory.js";

const T0 = 1_764_500_000_000;
const LONG_TTL = 1e12;
const RUNNER = "bench-runner";
const OWNER = "bench-owner";
const CAPS = [
  { kind: "llm.generate", service: "default", backendId: "ollama", backendClass: "http", model: "m", offerScope: "team" },
];
const PROVENANCE = { audience: "private", runnerId: RUNNER, runnerOwner: OWNER, backendClass: "http", model: "m", untrusted: false, stop: "end" };
const OUTCOME = { outcome: "ok", text: "an answer", usage: { inputTokens: 10, outputTokens: 20 } };

/** One real seal of a 1 KB prompt, through the reference app, as the template. */
async function sealedTemplate(promptBytes) {
  const store = new ReferenceStore();
  const app = new ByollmApp({ store, siteKeys: generateSiteKeys() });
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "p".repeat(promptBytes) }, owner: "x" });
  return (await store.get(handle.id)).envelope;
}

// One scratch buffer refilled per job: a fresh Buffer per job would leave
// freed backing stores scattered through the C heap, which RSS then blames
// on whatever native memory was allocated in between.
let scratch = Buffer.alloc(0);
function randomCiphertext(bytes) {
  if (scratch.length !== bytes) scratch = Buffer.alloc(bytes);
  return randomFillSync(scratch).toString("base64url");
}

function makeInput(template, owner, extra = {}) {
  return {
    id: randomUUID(),
    kind: "llm.generate",
    envelope: { ...template.envelope, ciphertext: randomCiphertext(template.cipherBytes) },
    sizeClass: "small",
    owner,
    ttlMs: LONG_TTL,
    ...extra,
  };
}

async function populate(store, n, template) {
  for (let i = 0; i < n; i += 1) {
    const owner = `owner-${i % 1000}`;
    const extra = i % 10 === 0 ? { audience: "team", audienceAllow: [`owner-${(i + 1) % 1000}`] } : {};
    await store.create(makeInput(template, owner, extra), T0);
  }
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** Median ms of `iterations` runs of `op` (each with its own setup). */
async function measure(iterations, setup, op) {
  const times = [];
  for (let i = 0; i < iterations; i += 1) {
    const state = await setup(i);
    const start = performance.now();
    await op(state, i);
    times.push(performance.now() - start);
  }
  return median(times);
}

async function timings(label, store, n, template, iterations, clock) {
  const rows = [];
  const row = (op, ms) => rows.push({ store: label, n, op, medianMs: ms });
  const tick = () => (clock.now += 1);

  row("claim (none claimable)", await measure(iterations, () => null, () =>
    store.claim({ runnerId: RUNNER, runnerOwner: OWNER, capabilities: CAPS, max: 1, leaseMs: 60_000, now: tick() }),
  ));

  const claimed = [];
  row("claim (one claimable)", await measure(
    iterations,
    async () => store.create(makeInput(template, OWNER), tick()),
    async () => {
      const got = await store.claim({ runnerId: RUNNER, runnerOwner: OWNER, capabilities: CAPS, max: 1, leaseMs: 60_000, now: clock.now });
      claimed.push(got[0]);
    },
  ));
  // Keep one lease for the heartbeat; finish the rest so the store size stays put.
  const held = claimed.pop();
  for (const job of claimed) {
    await store.complete({ jobId: job.id, runnerId: RUNNER, holder: { by: "lease", leaseId: job.lease.id }, outcome: OUTCOME, provenance: PROVENANCE, now: tick() });
  }

  row("heartbeat (renewLeases, 1 lease)", await measure(iterations, () => null, () =>
    store.renewLeases({ runnerId: RUNNER, leases: [{ jobId: held.id, leaseId: held.lease.id }], leaseMs: 60_000, now: tick() }),
  ));

  row("sweep (expireDue, nothing due)", await measure(iterations, () => null, () => store.expireDue(tick())));

  await store.complete({ jobId: held.id, runnerId: RUNNER, holder: { by: "lease", leaseId: held.lease.id }, outcome: OUTCOME, provenance: PROVENANCE, now: tick() });
  row("result read (get + expireDue)", await measure(iterations, () => null, async () => {
    const now = tick();
    await store.expireDue(now);
    await store.get(held.id);
  }));

  row("full cycle (create→claim→renew→complete→get)", await measure(
    iterations,
    () => makeInput(template, OWNER),
    async (input) => {
      const now = tick();
      await store.create(input, now);
      const [job] = await store.claim({ runnerId: RUNNER, runnerOwner: OWNER, capabilities: CAPS, max: 1, leaseMs: 60_000, now });
      await store.renewLeases({ runnerId: RUNNER, leases: [{ jobId: job.id, leaseId: job.lease.id }], leaseMs: 60_000, now });
      await store.complete({ jobId: job.id, runnerId: RUNNER, holder: { by: "lease", leaseId: job.lease.id }, outcome: OUTCOME, provenance: PROVENANCE, now });
      await store.get(job.id);
    },
  ));
  return rows;
}

function gc() {
  if (typeof globalThis.gc === "function") {
    globalThis.gc();
    globalThis.gc();
  }
}

/** Bytes per stored job: heap + external (JS) and RSS (which includes Rust's heap). */
async function memoryPerJob(label, makeStore, n, template) {
  gc();
  const before = process.memoryUsage();
  const store = makeStore();
  await populate(store, n, template);
  gc();
  const after = process.memoryUsage();
  const js = after.heapUsed + after.external - before.heapUsed - before.external;
  const rss = after.rss - before.rss;
  // RSS also moves with the V8 heap's committed size, which the inputs'
  // garbage can grow; what is left after taking that out is native memory.
  const committed = after.heapTotal + after.external - before.heapTotal - before.external;
  const rows = [
    { store: label, n, op: "memory per job: JS heap used + external (bytes)", value: Math.round(js / n) },
    { store: label, n, op: "memory per job: RSS (bytes)", value: Math.round(rss / n) },
    { store: label, n, op: "memory per job: JS live + native (bytes)", value: Math.round((js + rss - committed) / n) },
  ];
  store.size; // keep it alive until measured
  return rows;
}

export async function run(opts = {}) {
  const quick = opts.quick ?? false;
  const sizes = opts.sizes ?? (quick ? [1_000, 10_000] : [1_000, 10_000, 100_000]);
  const nativeOnly = opts.nativeOnlySizes ?? (quick ? [] : [1_000_000]);
  const promptBytes = opts.promptBytes ?? 1024;
  const sealed = await sealedTemplate(promptBytes);
  const template = { envelope: sealed, cipherBytes: Buffer.from(sealed.ciphertext, "base64url").length };
  const rows = [
    { store: "-", n: 0, op: `sealed envelope of a ${promptBytes} B prompt: ciphertext chars`, value: sealed.ciphertext.length },
  ];

  // Memory first, on a fresh heap, native before reference.
  const memN = opts.memoryN ?? (quick ? 10_000 : 100_000);
  rows.push(...(await memoryPerJob("native", () => new NativeStore(), memN, template)));
  gc();
  rows.push(...(await memoryPerJob("reference", () => new ReferenceStore(), memN, template)));
  gc();

  for (const n of [...sizes, ...nativeOnly]) {
    for (const [label, make] of [
      ["native", () => new NativeStore()],
      ["reference", () => new ReferenceStore()],
    ]) {
      if (label === "reference" && nativeOnly.includes(n)) continue;
      const store = make();
      await populate(store, n, template);
      // The reference walks (and sorts) everything per call: few iterations at scale.
      const iterations = label === "native" ? (opts.nativeIterations ?? 2_000) : Math.max(5, Math.min(200, Math.round(2e6 / n / 10)));
      rows.push(...(await timings(label, store, n, template, iterations, { now: T0 })));
      gc();
    }
  }
  return rows;
}

/**
 * The rows of run() in the shape scripts/bench.mjs prints (name, ref, ours,
 * unit, ratio): timings as ops/s, memory as bytes per job; the ratio is
 * always "how many times better ours is" (faster, or smaller).
 */
export function benchRows(rows) {
  const key = (r) => `${r.op}|${r.n}`;
  const ref = new Map(rows.filter((r) => r.store === "reference").map((r) => [key(r), r]));
  const out = [];
  for (const r of rows.filter((x) => x.store === "native")) {
    const other = ref.get(key(r));
    const name = `${r.op}, N = ${r.n.toLocaleString("en")}`;
    if (r.medianMs !== undefined) {
      const ours = 1000 / r.medianMs;
      const theirs = other ? 1000 / other.medianMs : null;
      out.push({ name, ref: theirs, ours, unit: "ops/s", ratio: theirs ? ours / theirs : null });
    } else {
      out.push({ name, ref: other?.value ?? null, ours: r.value, unit: "bytes/job", ratio: other ? other.value / r.value : null });
    }
  }
  return out;
}

function printTable(rows) {
  const fmt = (ms) => (ms >= 1 ? `${ms.toFixed(2)} ms` : `${(ms * 1000).toFixed(1)} µs`);
  console.log("\n| op | N | native | reference | reference / native |");
  console.log("|---|---:|---:|---:|---:|");
  const key = (r) => `${r.op}|${r.n}`;
  const ref = new Map(rows.filter((r) => r.store === "reference").map((r) => [key(r), r]));
  for (const r of rows.filter((x) => x.store === "native")) {
    const other = ref.get(key(r));
    if (r.medianMs !== undefined) {
      const ratio = other ? `${(other.medianMs / r.medianMs).toFixed(0)}×` : "—";
      console.log(`| ${r.op} | ${r.n.toLocaleString("en")} | ${fmt(r.medianMs)} | ${other ? fmt(other.medianMs) : "—"} | ${ratio} |`);
    } else {
      console.log(`| ${r.op} | ${r.n.toLocaleString("en")} | ${r.value} | ${other ? other.value : "—"} | ${other ? (other.value / r.value).toFixed(2) + "×" : "—"} |`);
    }
  }
  for (const r of rows.filter((x) => x.store === "-")) console.log(`\n${r.op}: ${r.value}`);
  // Scaling of ours: each op at the largest N against N = 1,000.
  const nat = rows.filter((r) => r.store === "native" && r.medianMs !== undefined);
  const largest = Math.max(...nat.map((r) => r.n));
  console.log(`\nnative, N = ${largest.toLocaleString("en")} vs N = 1,000 (time ratio):`);
  for (const r of nat.filter((x) => x.n === largest)) {
    const base = nat.find((x) => x.n === 1_000 && x.op === r.op);
    if (base) console.log(`  ${r.op}: ${(r.medianMs / base.medianMs).toFixed(2)}×`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const quick = process.argv.includes("--quick");
  if (typeof globalThis.gc !== "function") console.log("(run with --expose-gc for steadier memory numbers)");
  const rows = await run({ quick });
  printTable(rows);
}
