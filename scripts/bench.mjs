#!/usr/bin/env node
// `npm run bench`: every benchmark section, the reference (@byollm/server 0.1.1,
// @byollm/protocol 0.1.1) and ours side by side in one run. Prints medians and
// ratios (ours / reference, higher is better), writes .bench/results.json and
// the scaling chart docs/bench-scaling.svg.
//
//   npm run bench                 all sections, on Node 22 (node@22 from devDependencies)
//   npm run bench:node24          the same on Node 24 (devDependency node24)
//   npm run bench -- --quick      fewer iterations (a smoke run, numbers are rough)
//   npm run bench -- crypto rules only these sections
//   npm run bench -- stores       the SQL stores on a PostgreSQL it starts itself
//                                 (only when named; --sizes=0,10000 and
//                                 --populations=backlog|history narrow it,
//                                 --concurrent-jobs=N sizes its concurrency part)
//   npm run bench -- delivery     how soon handle.result() hears of a commit on
//                                 PostgreSQL (only when named)
//   npm run bench -- fleet        the idle tick (heartbeat + empty claim) on every
//                                 store, and 4 app processes serving 20,000 idle
//                                 daemons on one PostgreSQL (only when named;
//                                 ~6 minutes, --quick: a smaller run)
//   npm run bench -- leases       a heartbeat naming 1,000 and 10,000 leases:
//                                 byollm_heartbeat_for against MemoryStore (in
//                                 every full run; starts the stores bench's
//                                 PostgreSQL)
//
// The scripts name the Node binary: both devDependencies install a `node`
// into node_modules/.bin, and which one a bare `node` finds there depends on
// install order.
//
// Needs Node >= 22.14 (the reference does) and a release build of the addon
// (`npm run build:native`; `npm ci` makes one).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import os from "node:os";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const quick = args.includes("--quick");
const wanted = args.filter((a) => !a.startsWith("--"));

const [major, minor] = process.versions.node.split(".").map(Number);
if (major < 22 || (major === 22 && minor < 14)) {
  console.error(`the reference packages need Node >= 22.14; this is ${process.version}. Run it with npm run bench (which uses node@22 from devDependencies).`);
  process.exit(2);
}

const sections = [
  { key: "crypto", file: "bench/crypto.mjs", title: "Crypto (ours vs @byollm/protocol)" },
  { key: "rules", file: "bench/rules.mjs", title: "Request validation (ours vs JSON.parse + zod)" },
  { key: "store", file: "bench/store-scaling.mjs", title: "In-memory store scaling (ours vs reference MemoryStore)" },
  { key: "cycle", file: "bench/full-cycle.mjs", title: "Full job cycle through createFetchHandler" },
  { key: "scaling", file: "bench/full-cycle.mjs", title: "Full cycle against stored job count (server side, in-process)", scalingOf: "cycle" },
  { key: "durable", file: "bench/durable.mjs", title: "Durable store (a SQLite file) vs in-memory stores" },
  { key: "edge", file: "bench/edge.mjs", title: "WebAssembly edge module" },
  { key: "leases", file: "bench/leases.mjs", title: "A heartbeat naming many leases: the SQL store's function vs our in-memory store (starts PostgreSQL)" },
  { key: "metrics", file: "bench/metrics.mjs", title: "What the metrics cost (ours only; the 'reference' column is metrics off, 'ours' metrics on or with an OpenTelemetry SDK)" },
  // The Node binding's WebAssembly fallback, forced in the section's own process.
  { key: "wasi", file: "bench/wasi.mjs", title: "WebAssembly fallback (wasm32-wasip1-threads, NAPI_RS_FORCE_WASI) vs the reference", env: { NAPI_RS_FORCE_WASI: "true" } },
  // Minutes, a PostgreSQL and millions of rows: run only when asked for.
  { key: "stores", file: "bench/stores.mjs", title: "SQL stores against stored job count (ours vs reference supabaseStore)", onlyWhenNamed: true },
  { key: "metrics-sql", file: "bench/metrics-sql.mjs", title: "byollm_metrics on PostgreSQL against stored job count", onlyWhenNamed: true },
  { key: "delivery", file: "bench/delivery.mjs", title: "Result delivery on PostgreSQL (ours postgresDelivery vs the reference's polling)", onlyWhenNamed: true },
  { key: "fleet", file: "bench/fleet.mjs", title: "What an idle fleet of daemons costs: the idle tick on every store, the fleet run (starts PostgreSQL)", onlyWhenNamed: true },
];
// Options a section takes from the command line (`--name=value`), passed to its run().
const sectionOptions = {};
for (const a of args) {
  const m = /^--(sizes|populations|budget-ms|concurrent-jobs|stores)=(.+)$/.exec(a);
  if (!m) continue;
  if (m[1] === "sizes") sectionOptions.sizes = m[2].split(",").map(Number);
  if (m[1] === "populations") sectionOptions.populations = m[2].split(",");
  if (m[1] === "budget-ms") sectionOptions.budgetMs = Number(m[2]);
  if (m[1] === "concurrent-jobs") sectionOptions.concurrentJobs = Number(m[2]);
  if (m[1] === "stores") sectionOptions.storesList = m[2];
}

const machine = `${os.cpus()[0]?.model ?? "unknown CPU"} × ${os.cpus().length}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}`;
if (!args.some((a) => a.startsWith("--section="))) {
  console.log(`byollm-server-native benchmarks — ${machine}${quick ? " (quick: rough numbers)" : ""}`);
}

function fmt(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "—";
  if (typeof x === "string") return x;
  if (Math.abs(x) >= 100) return x.toFixed(0);
  if (Math.abs(x) >= 1) return x.toFixed(2);
  return x.toPrecision(3);
}

function printRows(rows) {
  const w = Math.max(20, ...rows.map((r) => r.name.length));
  console.log(`  ${"".padEnd(w)}  ${"reference".padStart(12)}  ${"ours".padStart(12)}  ${"unit".padEnd(10)} ratio`);
  for (const r of rows) {
    const ratio = r.ratio === undefined || r.ratio === null ? "" : `${fmt(r.ratio)}x`;
    const target = r.target ? `  (target ${r.target})` : "";
    console.log(`  ${r.name.padEnd(w)}  ${fmt(r.ref).padStart(12)}  ${fmt(r.ours).padStart(12)}  ${(r.unit ?? "ops/s").padEnd(10)} ${ratio}${target}`);
  }
}

// Each section runs in a process of its own: the store section leaves a heap
// of millions of records behind, which slowed the next section's garbage
// collection (both implementations alike) and ran the 1,000,000-job scaling
// point out of memory. The child prints its table and hands its rows back
// through a file.
const child = args.find((a) => a.startsWith("--section="))?.slice("--section=".length);
const outFile = args.find((a) => a.startsWith("--out="))?.slice("--out=".length);

async function runSection(key) {
  const s = sections.find((x) => x.key === key);
  const mod = await import(join(root, s.file));
  if (s.scalingOf) {
    const points = await mod.scaling(
      quick
        ? { sizes: [1_000, 10_000], oursOnly: [], jobs: 20, refJobs: 20, rounds: 1 }
        : { sizes: [1_000, 10_000, 100_000], oursOnly: [1_000_000] },
    );
    const label = { backlog: "queued for other owners", history: "ended (history)" };
    printRows(
      points.map((p) => ({
        name: `${p.stored.toLocaleString("en")} stored jobs, ${label[p.population]}`,
        ref: p.ref,
        ours: p.ours,
        unit: "jobs/s",
        ratio: p.ref ? p.ours / p.ref : null,
        // The issue's 80x is against the reference's 23 jobs/s at 100,000,
        // which the queued population reproduces; ended jobs cost the
        // reference far less, so that row is shown without the target.
        ...(p.stored === 100_000 && p.population === "backlog" ? { target: "≥80x" } : {}),
      })),
    );
    for (const population of ["backlog", "history"]) {
      const first = points.find((p) => p.population === population && p.stored === 1_000);
      const at100k = points.find((p) => p.population === population && p.stored === 100_000);
      if (first && at100k) {
        console.log(`  ${label[population]}: ours at 100,000 vs ours at 1,000: ${fmt(at100k.ours / first.ours)}x of the rate (target ≥ 0.67)`);
      }
    }
    return { scaling: points };
  }
  const { storesList, ...options } = sectionOptions;
  const sizes = options.sizes ?? (mod.defaultSizes ? mod.defaultSizes() : undefined);
  const raw = await mod.run({
    quick,
    ...options,
    ...(sizes ? { sizes } : {}),
    ...(storesList && mod.storesNamed ? { stores: mod.storesNamed(storesList) } : {}),
  });
  // A section whose own rows are shaped for its own report converts them.
  const rows = mod.benchRows ? mod.benchRows(raw) : raw;
  if (rows.length > 0) printRows(rows);
  if (key === "stores" || key === "fleet") return { rows: raw };
  if (key === "cycle") {
    console.log("  server side: time in the handler (in-process), or in the node:http request callback from the");
    console.log("  complete request body to res.end (over HTTP), plus app.enqueue and app.result; the simulated device's");
    console.log("  time is left out. 16 devices: the main thread's CPU time (the devices run in worker threads).");
  }
  return { rows };
}

if (child) {
  writeFileSync(outFile, JSON.stringify(await runSection(child)));
  process.exit(0);
}

const results = { machine, quick, sections: {} };
const scratch = mkdtempSync(join(os.tmpdir(), "byollm-bench-"));
for (const s of sections) {
  if (wanted.length && !wanted.includes(s.key) && !(s.scalingOf && wanted.includes(s.scalingOf))) continue;
  if (s.onlyWhenNamed && !wanted.includes(s.key)) continue;
  console.log(`\n## ${s.title}`);
  if (!existsSync(join(root, s.file))) {
    console.log(`  (section not built yet: ${s.file} is missing)`);
    continue;
  }
  const out = join(scratch, `${s.key}.json`);
  const flags = [...process.execArgv, "--max-old-space-size=8192", "--expose-gc"];
  const passed = args.filter((a) => /^--(sizes|populations|budget-ms|concurrent-jobs|stores)=/.test(a));
  const r = spawnSync(process.execPath, [...flags, fileURLToPath(import.meta.url), `--section=${s.key}`, `--out=${out}`, ...(quick ? ["--quick"] : []), ...passed], {
    stdio: "inherit",
    env: { ...process.env, ...s.env },
  });
  if (r.status !== 0 || !existsSync(out)) {
    console.log(`  (section ${s.key} failed: exit ${r.status}${r.signal ? `, ${r.signal}` : ""})`);
    process.exitCode = 1;
    continue;
  }
  const got = JSON.parse(readFileSync(out, "utf8"));
  if (got.scaling) {
    results.scaling = got.scaling;
    writeFileSync(join(root, "docs", "bench-scaling.svg"), chart(got.scaling, machine));
    console.log("  chart written to docs/bench-scaling.svg");
  } else {
    results.sections[s.key] = got.rows;
  }
}
rmSync(scratch, { recursive: true, force: true });

// The fallback against the native addon, row by row, from the sections of
// this run. Each is compared through the reference measured beside it in its
// own section (its ratio to the reference over the native one's), so a
// change of the machine's load between the two sections cancels out.
if (results.sections.wasi) {
  const native = [...(results.sections.cycle ?? []), ...(results.sections.crypto ?? [])];
  const rows = results.sections.wasi
    .map((w) => ({ w, n: native.find((r) => r.name === w.name) }))
    .filter(({ n }) => n)
    .map(({ w, n }) => ({ name: w.name, ref: n.ratio, ours: w.ratio, unit: "x the ref.", ratio: w.ratio / n.ratio }));
  if (rows.length) {
    console.log("\n## WebAssembly fallback vs the native addon: each one's ratio to the reference in its section (\"reference\" column: native's)");
    printRows(rows);
  }
}

mkdirSync(join(root, ".bench"), { recursive: true });
writeFileSync(join(root, ".bench", "results.json"), JSON.stringify(results, null, 2));
console.log("\nresults written to .bench/results.json");

/**
 * A small dependency-free SVG: jobs/s (log) against stored jobs (log), both
 * implementations; solid lines for the queued backlog, dashed for the ended history.
 */
function chart(points, subtitle) {
  const W = 680;
  const H = 420;
  const pad = { l: 70, r: 45, t: 50, b: 60 };
  const xs = [...new Set(points.map((p) => p.stored))];
  const ys = points.flatMap((p) => [p.ref, p.ours]).filter((v) => v);
  const lx = (v) => Math.log10(v);
  const [x0, x1] = [lx(Math.min(...xs)), lx(Math.max(...xs))];
  const [y0, y1] = [Math.floor(lx(Math.min(...ys))), Math.ceil(lx(Math.max(...ys)))];
  const px = (v) => pad.l + ((lx(v) - x0) / (x1 - x0 || 1)) * (W - pad.l - pad.r);
  const py = (v) => H - pad.b - ((lx(v) - y0) / (y1 - y0 || 1)) * (H - pad.t - pad.b);
  const line = (key, population, color) => {
    const pts = points
      .filter((p) => p.population === population && p[key])
      .map((p) => `${px(p.stored).toFixed(1)},${py(p[key]).toFixed(1)}`);
    const dash = population === "history" ? ` stroke-dasharray="6 4"` : "";
    return `<polyline fill="none" stroke="${color}" stroke-width="2.5"${dash} points="${pts.join(" ")}"/>` +
      pts.map((pt) => `<circle cx="${pt.split(",")[0]}" cy="${pt.split(",")[1]}" r="4" fill="${color}"/>`).join("");
  };
  let grid = "";
  for (let e = y0; e <= y1; e++) {
    const y = py(10 ** e);
    grid += `<line x1="${pad.l}" x2="${W - pad.r}" y1="${y}" y2="${y}" stroke="#ddd"/><text x="${pad.l - 8}" y="${y + 4}" text-anchor="end" font-size="12">${(10 ** e).toLocaleString("en")}</text>`;
  }
  for (const x of xs) {
    grid += `<text x="${px(x)}" y="${H - pad.b + 18}" text-anchor="middle" font-size="12">${x.toLocaleString("en")}</text>`;
  }
  // Bottom left: the only corner no line reaches (ours runs flat along the top,
  // the reference falls to the right).
  const left = pad.l + 10;
  const top = H - pad.b - 90;
  const key = (y, color, dash, text) =>
    `<line x1="${left + 10}" x2="${left + 35}" y1="${y}" y2="${y}" stroke="${color}" stroke-width="3"${dash ? ` stroke-dasharray="6 4"` : ""}/><text x="${left + 42}" y="${y + 4}" font-size="11">${text}</text>`;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">Full job cycle (server side) vs stored jobs</text>
<text x="${W / 2}" y="40" text-anchor="middle" font-size="10" fill="#555">${subtitle.replace(/&/g, "&amp;").replace(/</g, "&lt;")}</text>
${grid}
<text x="${W / 2}" y="${H - 18}" text-anchor="middle" font-size="12">stored jobs (log scale)</text>
<text x="16" y="${H / 2}" text-anchor="middle" font-size="12" transform="rotate(-90 16 ${H / 2})">jobs/s (log scale)</text>
${line("ref", "backlog", "#d9534f")}${line("ref", "history", "#d9534f")}${line("ours", "backlog", "#0275d8")}${line("ours", "history", "#0275d8")}
<rect x="${left}" y="${top}" width="240" height="84" fill="white" stroke="#ccc"/>
${key(top + 15, "#0275d8", false, "ours, jobs queued for others")}
${key(top + 33, "#0275d8", true, "ours, ended jobs")}
${key(top + 51, "#d9534f", false, "@byollm/server 0.1.1, queued for others")}
${key(top + 69, "#d9534f", true, "@byollm/server 0.1.1, ended jobs")}
</svg>
`;
}
