// A/B of two or more builds of this package on one machine: our side of the
// full cycle's four rows a user cares about (1 KB in-process, 1 KB over HTTP
// server side, a 1M-character prompt, 100,000 queued jobs stored), each
// variant in a process of its own, variants alternated, medians per row.
// Server time is the main thread's CPU (BENCH_CPU=1), so other processes on a
// shared machine move the figures less. The keep/remove table of
// docs/performance.md comes from runs of this script.
//
//   node bench/ab.mjs [--rounds=3] [--rows=in-process,HTTP] label=DIR[:ADDON.node] label=DIR[:ADDON.node] ...
//
// `--rows` keeps the rows whose names start with one of the given words.
//
// DIR is a checkout with dist/ built; ADDON, if given, loads that build of the
// native addon instead of DIR's own (NAPI_RS_NATIVE_LIBRARY_PATH). The first
// variant is the base the ratios are taken against.
import { execFileSync } from "node:child_process";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// One variant's rows, measured in this process (the child side).
async function measure(dir) {
  const { cycles } = await import(pathToFileURL(resolve(dir, "bench/full-cycle.mjs")).href);
  const ours = await import(pathToFileURL(resolve(dir, "dist/index.js")).href);
  const rows = {};
  const only = process.env.BENCH_ROWS?.split(",");
  const row = async (name, options) => {
    if (only !== undefined && !only.some((prefix) => name.startsWith(prefix))) return;
    // One shorter unrecorded run first: JIT and key tables warm.
    await cycles(ours, { ...options, jobs: Math.max(5, options.jobs >> 3) });
    rows[name] = (await cycles(ours, options)).serverJobsPerSec;
  };
  await row("in-process 1 KB", { jobs: 1500, promptChars: 1000 });
  await row("HTTP server side 1 KB", { jobs: 800, promptChars: 1000, http: true });
  await row("1M-character prompt", { jobs: 20, promptChars: 1_000_000 });
  await row("100,000 queued stored", { jobs: 400, promptChars: 1000, fill: 100_000, population: "queued" });
  return rows;
}

if (process.argv[2] === "--child") {
  process.stdout.write(JSON.stringify(await measure(process.argv[3])));
} else {
  const rounds = Number(process.argv.find((a) => a.startsWith("--rounds="))?.slice(9) ?? 3);
  const variants = process.argv.slice(2).filter((a) => !a.startsWith("--")).map((spec) => {
    const [label, rest = ""] = spec.split(/=(.*)/s);
    const [dir, addon] = rest.split(":");
    if (!label || !dir) throw new Error(`expected label=DIR[:ADDON.node], got ${spec}`);
    return { label, dir: resolve(dir), addon: addon && resolve(addon), runs: [] };
  });
  if (variants.length < 2) throw new Error("give at least two variants: label=DIR[:ADDON.node] ...");
  for (let round = 0; round < rounds; round++) {
    for (const v of variants) {
      const env = { ...process.env, BENCH_CPU: "1" };
      const rows = process.argv.find((a) => a.startsWith("--rows="))?.slice(7);
      if (rows !== undefined) env.BENCH_ROWS = rows;
      if (v.addon) env.NAPI_RS_NATIVE_LIBRARY_PATH = v.addon;
      const out = execFileSync(process.execPath, [new URL(import.meta.url).pathname, "--child", v.dir], { cwd: v.dir, env });
      v.runs.push(JSON.parse(out.toString()));
      console.error(`round ${round + 1}/${rounds} ${v.label}: ${out}`);
    }
  }
  const [base] = variants;
  for (const name of Object.keys(base.runs[0])) {
    const of = (v) => median(v.runs.map((r) => r[name]));
    const cells = variants.map((v) => `${v.label} ${of(v).toFixed(1)} (${(of(v) / of(base)).toFixed(2)}x)`);
    console.log(`${name.padEnd(24)} ${cells.join("   ")}`);
  }
}
