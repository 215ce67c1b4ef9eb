// The durable store (`new MemoryStore({ path })`, a SQLite file written
// through on every call) against our in-memory MemoryStore and the
// reference's in-memory MemoryStore: full job cycles in-process, server side
// (bench/full-cycle.mjs's `cycles`), the same against stored job count, and
// the file's bytes per stored job with a 1 KB prompt.
//
//   node_modules/node/bin/node --expose-gc bench/durable.mjs [--quick] [--sizes 1000,100000,1000000]
//   npm run bench -- durable            (sizes from BYOLLM_BENCH_DURABLE_SIZES, default 1000,100000)
//
// Node 22 (imports the reference). Release addon (`npm run build:native`).
// The file lives in the system's temp directory, synchronous=NORMAL (the
// default): every call's transaction is committed to the WAL before it
// answers; no fsync per call.
import { mkdtempSync, rmSync, statSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cycles, loadImpls } from "./full-cycle.mjs";

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

function fileBytes(path) {
  let bytes = 0;
  for (const p of [path, `${path}-wal`]) if (existsSync(p)) bytes += statSync(p).size;
  return bytes;
}

/** `ours` with MemoryStore opening a fresh file each time; `last()` is the latest store and its path. */
function durableImpl(ours, dir) {
  let n = 0;
  let last = null;
  const MemoryStore = function (options = {}) {
    const path = join(dir, `bench-${(n += 1)}.db`);
    const store = new ours.MemoryStore({ ...options, path });
    last = { store, path };
    return store;
  };
  return { impl: { ...ours, MemoryStore }, last: () => last };
}

export async function run({ quick = false, sizes } = {}) {
  const { ref, ours } = await loadImpls();
  const dir = mkdtempSync(join(tmpdir(), "byollm-bench-durable-"));
  const durable = durableImpl(ours, dir);
  const closeLast = () => {
    const last = durable.last();
    last?.store.close();
    return last;
  };
  const rounds = quick ? 1 : 5;
  const jobs = quick ? 60 : 400;
  const rows = [];
  try {
    // Warm-up, unrecorded.
    for (let i = 0; i < (quick ? 1 : 2); i++) {
      await cycles(ours, { jobs, promptChars: 1000 });
      await cycles(durable.impl, { jobs, promptChars: 1000 });
      closeLast();
      await cycles(ref, { jobs: 60, promptChars: 1000 });
    }
    const rate = { ref: [], memory: [], durable: [] };
    for (let i = 0; i < rounds; i++) {
      rate.memory.push((await cycles(ours, { jobs, promptChars: 1000 })).serverJobsPerSec);
      rate.durable.push((await cycles(durable.impl, { jobs, promptChars: 1000 })).serverJobsPerSec);
      closeLast();
      rate.ref.push((await cycles(ref, { jobs: 60, promptChars: 1000 })).serverJobsPerSec);
    }
    const [refRate, memRate, durRate] = [median(rate.ref), median(rate.memory), median(rate.durable)];
    rows.push({
      name: "full cycle in-process, server side (1 KB prompt): durable vs reference in-memory",
      unit: "jobs/s", ref: refRate, ours: durRate, ratio: durRate / refRate, target: "≥3x",
    });
    rows.push({
      name: "  the same: durable vs our in-memory MemoryStore (ref column)",
      unit: "jobs/s", ref: memRate, ours: durRate, ratio: durRate / memRate, target: "≥0.5x",
    });
    // Against stored jobs: queued for 1,000 other owners (the full-cycle
    // scaling section's backlog), each stored through the durable file.
    let first = null;
    for (const fill of sizes ?? (quick ? [1_000, 10_000] : [1_000, 100_000])) {
      const runs = [];
      let bytes = null;
      for (let i = 0; i < (fill >= 1_000_000 || quick ? 1 : 3); i++) {
        runs.push((await cycles(durable.impl, { jobs, promptChars: 1000, fill, population: "backlog" })).serverJobsPerSec);
        const last = closeLast();
        // Closing checkpoints the WAL into the file.
        bytes ??= fileBytes(last.path) / (fill + jobs + 1);
        rmSync(last.path, { force: true });
        rmSync(`${last.path}-wal`, { force: true });
      }
      const at = median(runs);
      first ??= at;
      rows.push({
        name: `durable, ${fill.toLocaleString("en")} stored jobs queued for other owners (ref column: at the first size)`,
        unit: "jobs/s", ref: first, ours: at, ratio: at / first, target: "≥0.67x",
      });
      rows.push({ name: `  file bytes per stored job (1 KB prompt), ${fill.toLocaleString("en")} stored`, unit: "bytes", ref: null, ours: bytes });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}

const argSizes = () => {
  const i = process.argv.indexOf("--sizes");
  const text = i >= 0 ? process.argv[i + 1] : process.env.BYOLLM_BENCH_DURABLE_SIZES;
  return text ? text.split(",").map(Number) : undefined;
};

export const defaultSizes = argSizes;

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = await run({ quick: process.argv.includes("--quick"), sizes: argSizes() });
  for (const r of rows) {
    const ref = r.ref == null ? "—" : r.ref.toFixed(1);
    const ratio = r.ratio == null ? "" : `ratio ${r.ratio.toFixed(2)}x`;
    console.log(`${r.name.padEnd(96)} ref ${ref.padStart(9)}  ours ${r.ours.toFixed(1).padStart(9)} ${r.unit}  ${ratio}`);
  }
}
