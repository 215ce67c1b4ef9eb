// The WebAssembly edge module: size of the .wasm, cold start (a fresh process:
// import of the module + the first call), and a few operations against
// @byollm/protocol in the same Node process.
//
//   node bench/edge.mjs            (also a section of `npm run bench`)
//
// Targets: .wasm ≤ 300 KB, cold start ≤ 50 ms.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const edgeDir = join(root, "edge");
const wasmPath = join(edgeDir, "byollm_edge.wasm");

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// Each probe runs in a fresh process and prints two numbers: milliseconds from
// before the import to after the first call (verifyRequest, what an edge
// function receiving a daemon's request does first), and to after a key
// generation too (the first use of the host's randomness).
const FIRST_CALL = `edge.verifyRequest({ identityPublic: "Q2P-JjbFOWxxaBF6axF_DKGNfBmZOcuZZvbcOTKgM_8", endpoint: "claim", body: "{}",
  signature: { runnerId: "r", issuedAt: 1, signature: "x" }, now: 1 });`;

function probes() {
  const dir = mkdtempSync(join(tmpdir(), "byollm-edge-bench-"));
  const index = pathToFileURL(join(edgeDir, "index.js")).href;
  const core = pathToFileURL(join(edgeDir, "core.js")).href;
  const api = pathToFileURL(join(edgeDir, "api.js")).href;
  const embedded = join(dir, "embedded.mjs");
  writeFileSync(
    embedded,
    `const t0 = performance.now();
const edge = await import(${JSON.stringify(index)});
${FIRST_CALL}
const t1 = performance.now();
edge.generateKeys(Date.now());
console.log(t1 - t0, performance.now() - t0);\n`,
  );
  // The alternative the module does not use: the .wasm read from next to it.
  const fromFile = join(dir, "from-file.mjs");
  writeFileSync(
    fromFile,
    `const t0 = performance.now();
const { init } = await import(${JSON.stringify(core)});
const edge = await import(${JSON.stringify(api)});
const bytes = typeof Deno !== "undefined"
  ? await Deno.readFile(${JSON.stringify(wasmPath)})
  : await (await import("node:fs/promises")).readFile(${JSON.stringify(wasmPath)});
await init(bytes);
${FIRST_CALL}
const t1 = performance.now();
edge.generateKeys(Date.now());
console.log(t1 - t0, performance.now() - t0);\n`,
  );
  return { dir, embedded, fromFile };
}

/** Median [import + first call, + first key generation] over fresh processes. */
function coldStart(cmd, args, runs) {
  const first = [];
  const keygen = [];
  for (let i = 0; i < runs; i++) {
    const r = spawnSync(cmd, args, { encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr}`);
    const [a, b] = r.stdout.trim().split("\n").pop().split(" ").map(Number);
    first.push(a);
    keygen.push(b);
  }
  return [median(first), median(keygen)];
}

function coldRows(label, [first, keygen], target) {
  return [
    { name: `cold start, ${label}: import + first call`, ours: first, unit: "ms", ...(target ? { target: "≤ 50" } : {}) },
    { name: `  … + first generateKeys`, ours: keygen, unit: "ms" },
  ];
}

function rate(fn, ms) {
  // Warm up, then count whole iterations in a fixed window.
  for (let i = 0; i < 20; i++) fn();
  let n = 0;
  const t0 = performance.now();
  let t = t0;
  while (t - t0 < ms) {
    fn();
    n++;
    if ((n & 15) === 0) t = performance.now();
  }
  return (n * 1000) / (performance.now() - t0);
}

async function rateAsync(fn, ms) {
  for (let i = 0; i < 10; i++) await fn();
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    await fn();
    n++;
  }
  return (n * 1000) / (performance.now() - t0);
}

export async function run({ quick = false } = {}) {
  if (!existsSync(wasmPath) || !existsSync(join(edgeDir, "wasm-inline.js"))) {
    throw new Error("edge/byollm_edge.wasm is not built: run npm run build:wasm");
  }
  const rows = [];
  rows.push({ name: ".wasm size", ours: statSync(wasmPath).size / 1024, unit: "KB", target: "≤ 300" });

  const runs = quick ? 3 : 7;
  const p = probes();
  try {
    rows.push(...coldRows(`Node ${process.version}`, coldStart(process.execPath, [p.embedded], runs), true));
    rows.push(...coldRows("Node, .wasm read from a file instead", coldStart(process.execPath, [p.fromFile], runs)));
    let deno;
    try {
      ({ deno } = (await import("../scripts/runtime-matrix.mjs")).installRuntimes({ only: ["deno"] }));
    } catch {
      deno = undefined;
    }
    if (deno && existsSync(deno)) {
      rows.push(...coldRows("Deno (no permissions)", coldStart(deno, ["run", "--no-prompt", p.embedded], runs), true));
      rows.push(
        ...coldRows("Deno, .wasm read from a file instead", coldStart(deno, ["run", "--no-prompt", `--allow-read=${wasmPath}`, p.fromFile], runs)),
      );
    } else {
      rows.push({ name: "cold start, Deno", ours: "deno not installable here", unit: "" });
    }
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }

  // Operations: the edge module against the reference, same process.
  const edge = await import(pathToFileURL(join(edgeDir, "index.js")).href);
  let protocol;
  try {
    protocol = await import("@byollm/protocol");
  } catch {
    protocol = undefined;
  }
  const ms = quick ? 150 : 600;
  const now = 1767225600000;
  const site = edge.generateKeys(now);
  const device = edge.generateKeys(now);
  const context = {
    jobId: "job-bench",
    senderKeyId: edge.keyId(site.identityPublic),
    recipientKeyId: edge.keyId(device.identityPublic),
    deadlineAt: now + 86_400_000,
    direction: "payload",
  };
  const { deadlineAt: _d, ...expected } = context;
  const plaintext = JSON.stringify({ prompt: "p".repeat(1000) });
  const sealed = await edge.seal({ plaintext, senderKeys: site, recipientEncryptionPublic: device.encryptionPublic, context });
  const openInput = { envelope: sealed, recipientKeys: device, senderIdentityPublic: site.identityPublic, expected };
  const req = { endpoint: "claim", runnerId: "runner_bench", issuedAt: now, body: JSON.stringify({ protocolVersion: "2", max: 4 }) };
  const signature = edge.signRequest(site, req);
  const verifyInput = { identityPublic: site.identityPublic, endpoint: "claim", body: req.body, signature, now };

  const pair = async (name, ours, ref) => {
    const o = await ours();
    const r = protocol ? await ref() : null;
    rows.push({ name, ref: r, ours: o, unit: "ops/s", ratio: r ? o / r : null });
  };
  await pair(
    "seal 1 KB",
    () => rateAsync(() => edge.seal({ plaintext, senderKeys: site, recipientEncryptionPublic: device.encryptionPublic, context }), ms),
    () => rateAsync(() => protocol.seal({ plaintext, senderKeys: site, recipientEncryptionPublic: device.encryptionPublic, context }), ms),
  );
  await pair(
    "open 1 KB",
    () => rateAsync(() => edge.open(openInput), ms),
    () => rateAsync(() => protocol.open(openInput), ms),
  );
  await pair(
    "verifyRequest",
    () => rate(() => edge.verifyRequest(verifyInput), ms),
    () => rate(() => protocol.verifyRequest(verifyInput), ms),
  );
  await pair(
    "generateKeys",
    () => rate(() => edge.generateKeys(now), ms),
    () => rate(() => protocol.generateKeys(now), ms),
  );
  return rows;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  for (const r of await run({ quick: process.argv.includes("--quick") })) {
    const val = typeof r.ours === "number" ? r.ours.toFixed(r.ours >= 100 ? 0 : 2) : r.ours;
    const ref = typeof r.ref === "number" ? `  reference ${r.ref.toFixed(0)}  (${r.ratio.toFixed(2)}x)` : "";
    console.log(`${r.name.padEnd(42)} ${String(val).padStart(10)} ${r.unit}${ref}${r.target ? `  target ${r.target}` : ""}`);
  }
}
