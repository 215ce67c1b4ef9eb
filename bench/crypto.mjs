// Crypto, ours vs @byollm/protocol@0.1.1, side by side in one process: key
// generation, and seal/open at 1 KB and 1 MB as the server does them (ours:
// SiteKeyring.sealChecked, a payload validated and sealed at rest, and
// SiteKeyring.acceptResult, a device's result opened and read; the
// reference's seal and open of the same texts). Request signatures are
// checked inside the engine (bench/native-calls.mjs times it per endpoint).
// Each row is the median of several timed batches (batches of the two
// implementations alternate, so drift hits both alike).
//
//   node bench/crypto.mjs [--quick]      (also a section of `npm run bench`)
//
// Needs Node >= 22.14 (the reference does) and, for meaningful numbers, a
// release build of the addon (`npm run build:native`).
//
// Clock: wall time by default. On a shared, loaded machine use `--cpu` (or
// BYOLLM_BENCH_CLOCK=cpu): each batch is then timed by the process's CPU time
// (user + system, all threads), which other processes do not inflate.
// Targets (ours / reference): seal 1 KB ≥ 3x, open 1 KB ≥ 2.5x,
// seal 1 MB ≥ 8x, open 1 MB ≥ 2.5x.
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import * as ref from "@byollm/protocol";
import * as native from "../index.js";

const T0 = 1767225600000;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** Ops per second of `fn` (sync or async), median over `batches` batches of
 * roughly `batchMs` each; `a` and `b` alternate batch by batch. */
async function race(a, b, { batches, batchMs, clock }) {
  const now = clock === "cpu" ? () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; } : () => performance.now();
  const calibrate = async (fn) => {
    // Warm up, then find how many calls fill a batch.
    let n = 1;
    for (;;) {
      const t = now();
      for (let i = 0; i < n; i++) await fn();
      const ms = now() - t;
      if (ms >= batchMs / 4 || n >= 1 << 20) return Math.max(1, Math.round((n * batchMs) / Math.max(ms, 0.001)));
      n *= 2;
    }
  };
  const na = await calibrate(a);
  const nb = await calibrate(b);
  const ra = [];
  const rb = [];
  const batch = async (fn, n, out) => {
    const t = now();
    for (let i = 0; i < n; i++) await fn();
    out.push((n * 1000) / Math.max(now() - t, 0.001));
  };
  for (let i = 0; i < batches; i++) {
    await batch(a, na, ra);
    await batch(b, nb, rb);
  }
  return [median(ra), median(rb)];
}

/** A plaintext of `bytes` UTF-8 bytes, mostly ASCII JSON-ish text with some
 * escapes and non-ASCII, like a real prompt. */
function plaintextOf(bytes) {
  const unit = '{"role":"user","content":"Summarise this — “quoted” text, line\\n tabs\\t and é"}';
  return unit.repeat(Math.ceil(bytes / Buffer.byteLength(unit))).slice(0, bytes);
}

export async function run({ quick = false, clock = process.env.BYOLLM_BENCH_CLOCK ?? "wall" } = {}) {
  await ref.cryptoReady();
  const opts = quick ? { batches: 3, batchMs: 60, clock } : { batches: 9, batchMs: 250, clock };
  const bigOpts = quick ? { batches: 3, batchMs: 150, clock } : { batches: 7, batchMs: 600, clock };
  const site = ref.generateKeys(T0);
  const device = ref.generateKeys(T0);
  const rows = [];
  const add = (name, [r, o], target) => rows.push({ name, ref: r, ours: o, unit: "ops/s", ratio: o / r, target });

  add("generateKeys", await race(() => ref.generateKeys(T0), () => native.generateKeys(T0), opts));

  const ring = new native.SiteKeyring(site);
  const source = { audience: "team", runnerId: "runner_x", runnerOwner: "bob" };
  for (const [label, bytes, o, sealTarget, openTarget] of [
    ["1 KB", 1024, opts, "≥3x", "≥2.5x"],
    ["1 MB", 1024 * 1024, bigOpts, "≥8x", "≥2.5x"],
  ]) {
    const jobId = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b";
    const deadlineAt = T0 + 86_400_000;
    const payload = JSON.stringify({ prompt: plaintextOf(bytes) });
    const atRest = { jobId, senderKeyId: ring.keyId, recipientKeyId: ring.keyId, deadlineAt, direction: "payload" };
    const refSeal = { plaintext: payload, senderKeys: site, recipientEncryptionPublic: site.encryptionPublic, context: atRest };
    const ourSeal = () => ring.sealChecked("llm.generate", payload, undefined, undefined, jobId, deadlineAt);
    add(`seal ${label}`, await race(() => ref.seal(refSeal), ourSeal, o), sealTarget);

    const plaintext = JSON.stringify({ outcome: { outcome: "ok", text: plaintextOf(bytes) }, ran: { model: "m", backendClass: "http", durationMs: 1 } });
    const context = { jobId, senderKeyId: ref.keyId(device.identityPublic), recipientKeyId: ring.keyId, deadlineAt, direction: "result" };
    const envelope = await ref.seal({ plaintext, senderKeys: device, recipientEncryptionPublic: site.encryptionPublic, context });
    const { deadlineAt: _, ...expected } = context;
    const openArgs = { envelope, recipientKeys: site, senderIdentityPublic: device.identityPublic, expected };
    const ourOpen = () => ring.acceptResult(envelope, jobId, device.identityPublic, "ok", source);
    const check = await ourOpen();
    if (!check.ok) throw new Error(`bench setup: open ${label} failed`);
    add(`open ${label}`, await race(() => ref.open(openArgs), ourOpen, o), openTarget);
  }
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const clock = process.argv.includes("--cpu") ? "cpu" : undefined;
  const rows = await run({ quick: process.argv.includes("--quick"), clock });
  console.log(`clock: ${clock ?? process.env.BYOLLM_BENCH_CLOCK ?? "wall"}`);
  const w = Math.max(...rows.map((r) => r.name.length));
  console.log(`${"".padEnd(w)}  ${"reference".padStart(12)}  ${"ours".padStart(12)}  ratio (ops/s, higher is better)`);
  for (const r of rows) {
    const f = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1)).padStart(12);
    console.log(`${r.name.padEnd(w)}  ${f(r.ref)}  ${f(r.ours)}  ${r.ratio.toFixed(2)}x${r.target ? `  (target ${r.target})` : ""}`);
  }
}
