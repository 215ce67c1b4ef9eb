// The WebAssembly fallback (wasm32-wasip1-threads) against the reference: the
// in-process full cycle (server side, 1 KB prompt) and the crypto rows, the
// same measurements as the cycle and crypto sections, with the binding that
// NAPI_RS_FORCE_WASI picks. scripts/bench.mjs runs this section in a process
// started with NAPI_RS_FORCE_WASI=true and prints it next to the native rows
// of the same run.
//
// Run directly: NAPI_RS_FORCE_WASI=true node bench/wasi.mjs  (Node >= 22.14)
import { fileURLToPath } from "node:url";
import { binding } from "../dist/native-loader.js";
import { run as cryptoRows } from "./crypto.mjs";
import { cycles, loadImpls } from "./full-cycle.mjs";

export const CYCLE_ROW = "full cycle in-process, server side (1 KB prompt)";

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

export async function run({ quick = false } = {}) {
  if (binding.__napiBindingTarget !== "wasm32-wasi") {
    throw new Error(`the WebAssembly section needs the fallback loaded (NAPI_RS_FORCE_WASI=true and npm run build:wasi); the binding is ${binding.__napiBindingTarget}`);
  }
  const { ref, ours } = await loadImpls();
  const jobs = quick ? 40 : 300;
  const rounds = quick ? 1 : 5;
  // As the cycle section: one unrecorded run each, then the two interleaved.
  if (!quick) {
    await cycles(ref, { jobs, promptChars: 1000 });
    await cycles(ours, { jobs, promptChars: 1000 });
  }
  const runs = { ref: [], ours: [] };
  for (let i = 0; i < rounds; i++) {
    runs.ref.push((await cycles(ref, { jobs, promptChars: 1000 })).serverJobsPerSec);
    runs.ours.push((await cycles(ours, { jobs, promptChars: 1000 })).serverJobsPerSec);
  }
  const cycle = { name: CYCLE_ROW, unit: "jobs/s", ref: median(runs.ref), ours: median(runs.ours), target: "≥1x" };
  cycle.ratio = cycle.ours / cycle.ref;
  const crypto = (await cryptoRows({ quick })).map(({ target, ...row }) => row);
  return [cycle, ...crypto];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const r of await run({ quick: process.argv.includes("--quick") })) {
    console.log(`${r.name.padEnd(52)} ${r.ref.toFixed(1).padStart(10)} ${r.ours.toFixed(1).padStart(10)}  ${r.ratio.toFixed(2)}x`);
  }
}
