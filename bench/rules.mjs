// Request validation, ours vs the reference, side by side in one process:
// a typical ~1 KB claim body and ~1 KB result body taken from raw text to a
// validated object. The reference path is what its HTTP layer and handler do:
// JSON.parse, checkProtocolVersion, then the endpoint's zod safeParse. Ours is
// what our HTTP layer does: native.inspectRequest(endpoint, rawText) (JSON,
// version and schema checked in Rust; a body in the exact form the schema
// outputs, as a daemon's is, is then built by V8's JSON.parse).
//
//   node bench/rules.mjs [--quick]      (also a section of `npm run bench`)
//
// Needs Node >= 22.14 (the reference does) and, for meaningful numbers, a
// release build of the addon (`npm run build:native`). BENCH_NATIVE=<path to
// index.js> benchmarks another build of the addon.
// Target: ours faster than the reference (ratio > 1).
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import assert from "node:assert/strict";
import { ClaimRequest, ResultRequest, checkProtocolVersion } from "@byollm/protocol";

const native = await import(process.env.BENCH_NATIVE ? pathToFileURL(process.env.BENCH_NATIVE).href : "../index.js");

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** ops/s of `a` and `b`, median over alternating batches of ~batchMs. */
function race(a, b, { batches, batchMs }) {
  const calibrate = (fn) => {
    let n = 1;
    for (;;) {
      const t = performance.now();
      for (let i = 0; i < n; i++) fn();
      const ms = performance.now() - t;
      if (ms >= batchMs / 4 || n >= 1 << 22) return Math.max(1, Math.round((n * batchMs) / Math.max(ms, 0.001)));
      n *= 2;
    }
  };
  const na = calibrate(a);
  const nb = calibrate(b);
  const ra = [];
  const rb = [];
  const batch = (fn, n, out) => {
    const t = performance.now();
    for (let i = 0; i < n; i++) fn();
    out.push((n * 1000) / (performance.now() - t));
  };
  for (let i = 0; i < batches; i++) {
    batch(a, na, ra);
    batch(b, nb, rb);
  }
  return [median(ra), median(rb)];
}

const capability = (i) => ({
  kind: i % 2 ? "llm.chat" : "llm.generate",
  service: `local-${i}`,
  backendId: ["ollama", "lmstudio", "openai", "claude-cli"][i % 4],
  backendClass: i % 4 === 3 ? "process" : "http",
  model: ["llama3.2:3b-instruct-q4_K_M", "qwen2.5-coder:7b", "gpt-4o-mini", "claude-sonnet"][i % 4],
  knownModels: ["llama3.2", "qwen2.5", "mistral-nemo"],
  offerScope: i % 3 ? "team" : "private",
});

export const CLAIM_BODY = JSON.stringify({
  protocolVersion: "2",
  runnerId: "runner_3f2c9d1e-8a7b-4c6d-9e0f-1a2b3c4d5e6f",
  capabilities: [0, 1, 2, 3, 4].map(capability),
  max: 4,
});

export const RESULT_BODY = JSON.stringify({
  protocolVersion: "2",
  runnerId: "runner_3f2c9d1e-8a7b-4c6d-9e0f-1a2b3c4d5e6f",
  jobId: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b",
  leaseId: "0a9b8c7d-6e5f-4a3b-9c2d-1e0f9a8b7c6d",
  envelope: {
    ciphertext: "Q".repeat(760),
    recipientKeyId: "BYOLLM-EA1K-Z4XJ-89JV-57J7-CG5C-KY87",
    senderKeyId: "BYOLLM-EBEF-WXA6-KZ0H-QSKB-YJDZ-XJYH",
    direction: "result",
    deadlineAt: 1767312002000,
  },
  disposition: "ok",
});

function referenceInspect(schema, text) {
  const body = JSON.parse(text);
  if (checkProtocolVersion(body)) throw new Error("refused");
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw new Error("schema");
  return parsed.data;
}

export async function run({ quick = false } = {}) {
  const opts = quick ? { batches: 3, batchMs: 60 } : { batches: 9, batchMs: 250 };
  const rows = [];
  for (const [name, endpoint, schema, text] of [
    [`claim body (${Buffer.byteLength(CLAIM_BODY)} B)`, "claim", ClaimRequest, CLAIM_BODY],
    [`result body (${Buffer.byteLength(RESULT_BODY)} B)`, "result", ResultRequest, RESULT_BODY],
  ]) {
    // Same answer before timing anything.
    const ours = native.inspectRequest(endpoint, text);
    assert.equal(ours.stage, "ok");
    assert.deepStrictEqual(JSON.parse(ours.body), referenceInspect(schema, text));
    const [ref, mine] = race(
      () => referenceInspect(schema, text),
      () => native.inspectRequest(endpoint, text),
      opts,
    );
    rows.push({ name: `validate ${name}`, ref, ours: mine, unit: "ops/s", ratio: mine / ref, target: "> 1" });
  }
  // An unauthenticated 6 MiB body of `[`, from raw text to its refusal: the
  // reference's JSON.parse reads it to the end; ours stops at the 65th `[`
  // (the copy of the text into the core is the rest of its time).
  const brackets = "[".repeat(6 << 20);
  assert.equal(JSON.parse(native.inspectRequest("claim", brackets).error).message, "request body nests arrays and objects deeper than 64 levels");
  assert.throws(() => JSON.parse(brackets));
  const [ref, mine] = race(
    () => {
      try {
        JSON.parse(brackets);
      } catch {
        return;
      }
      throw new Error("parsed");
    },
    () => native.inspectRequest("claim", brackets),
    quick ? { batches: 3, batchMs: 200 } : { batches: 7, batchMs: 1000 },
  );
  rows.push({ name: "refuse a 6 MiB body of `[` (ms each: 1000 / ops/s)", ref, ours: mine, unit: "ops/s", ratio: mine / ref });
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const rows = await run({ quick: process.argv.includes("--quick") });
  const w = Math.max(...rows.map((r) => r.name.length));
  console.log(`${"".padEnd(w)}  ${"reference".padStart(12)}  ${"ours".padStart(12)}  ratio`);
  for (const r of rows) {
    console.log(`${r.name.padEnd(w)}  ${r.ref.toFixed(0).padStart(12)}  ${r.ours.toFixed(0).padStart(12)}  ${r.ratio.toFixed(2)}x`);
  }
}
