// What the metrics cost: the full cycle's rows a user cares about (1 KB
// in-process, 1 KB over HTTP server side, a 1M-character prompt, 100,000
// queued jobs stored), ours only, in three variants side by side in one
// process, interleaved round by round, medians:
//   off   `metrics: false` on the app and the handler
//   on    the default (counters and histograms; OpenTelemetry off: BYOLLM_OTEL=0)
//   otel  the default with an OpenTelemetry SDK registered: a tracer
//         provider with a batch span processor and an exporter that drops
//         what it is given, and a meter provider with a reader (the work
//         up to the network, which an app's exporter adds)
// Server time is the main thread's CPU time (as bench/ab.mjs), so other
// processes on a shared machine move the figures less.
//
//   npm run bench -- metrics          (or: node_modules/node/bin/node bench/metrics.mjs [--quick])
import { execFileSync } from "node:child_process";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

process.env.BENCH_CPU = "1";
const { cycles } = await import("./full-cycle.mjs");
const { metrics, trace } = await import("@opentelemetry/api");
const { BasicTracerProvider, BatchSpanProcessor } = await import("@opentelemetry/sdk-trace-base");
const { MeterProvider, PeriodicExportingMetricReader, InMemoryMetricExporter, AggregationTemporality } = await import("@opentelemetry/sdk-metrics");

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

let registered = false;
function registerSdk() {
  if (registered) return;
  registered = true;
  const dropping = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => undefined, forceFlush: async () => undefined };
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropping)] }));
  const reader = new PeriodicExportingMetricReader({ exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE), exportIntervalMillis: 3_600_000 });
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
}

const VARIANTS = {
  off: () => ({ env: "0", metrics: false }),
  on: () => ({ env: "0", metrics: undefined }),
  otel: () => {
    registerSdk();
    return { env: "", metrics: undefined };
  },
};

export async function run({ quick = false, impls } = {}) {
  const ours = impls?.ours ?? (await import("../dist/index.js"));
  const rounds = quick ? 1 : 7;
  const rowsSpec = [
    ["full cycle in-process, server side (1 KB prompt)", { jobs: quick ? 60 : 1200, promptChars: 1000 }],
    ["full cycle over loopback HTTP, server side (1 KB prompt)", { jobs: quick ? 40 : 600, promptChars: 1000, http: true }],
    ["full cycle in-process, server side (1M-char prompt)", { jobs: quick ? 3 : 16, promptChars: 1_000_000 }],
    ["full cycle, 100,000 stored jobs queued for other owners", { jobs: quick ? 40 : 400, promptChars: 1000, fill: quick ? 10_000 : 100_000, population: "backlog" }],
  ];
  const runs = Object.fromEntries(rowsSpec.map(([name]) => [name, { off: [], on: [], otel: [] }]));
  const once = async (options, variant) => {
    const v = VARIANTS[variant]();
    process.env.BYOLLM_OTEL = v.env;
    return (await cycles(ours, { ...options, metrics: v.metrics })).serverJobsPerSec;
  };
  // Warm-up, unrecorded: every variant once on a short run of each row.
  for (const [, options] of rowsSpec) for (const variant of Object.keys(VARIANTS)) await once({ ...options, jobs: Math.max(3, options.jobs >> 3) }, variant);
  const t0 = performance.now();
  for (let round = 0; round < rounds; round += 1) {
    // The order of the variants rotates, so none always runs first.
    const order = Object.keys(VARIANTS);
    for (let i = 0; i < round % order.length; i += 1) order.push(order.shift());
    for (const [name, options] of rowsSpec) for (const variant of order) runs[name][variant].push(await once(options, variant));
  }
  const rows = [];
  for (const [name] of rowsSpec) {
    const off = median(runs[name].off);
    const on = median(runs[name].on);
    const otel = median(runs[name].otel);
    rows.push({ name, off, on, otel, onRatio: on / off, otelRatio: otel / off });
    const range = (xs) => `${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)}`;
    console.log(`  ${name}: rounds off ${range(runs[name].off)}, on ${range(runs[name].on)}, otel ${range(runs[name].otel)} jobs/s`);
  }
  console.log(`  (${rounds} rounds, ${((performance.now() - t0) / 1000).toFixed(0)} s; jobs/s by main-thread CPU; ratio = variant / off, 1.00 = no cost)`);
  // The recording's own CPU a job (bench/metrics-direct.mjs, median of 3
  // child processes each), against the server's time a job with metrics off
  // on the 1 KB in-process row: a cost the rounds above cannot resolve when
  // they spread by more than it.
  const direct = (variant) => {
    const script = fileURLToPath(new URL("./metrics-direct.mjs", import.meta.url));
    const runs = [0, 1, 2].map(() => JSON.parse(execFileSync(process.execPath, [script, variant], { encoding: "utf8" }).trim().split("\n").at(-1)).usPerJob);
    return median(runs);
  };
  const serverUs = 1e6 / rows[0].off;
  const onUs = direct("on");
  const otelUs = direct("otel");
  rows.push({ name: "the recording alone, CPU a job against the 1 KB row's server time", direct: true, serverUs, onUs, otelUs });
  console.log(`  the recording alone: metrics on ${onUs.toFixed(1)} µs, with an OpenTelemetry SDK ${otelUs.toFixed(1)} µs a job, against ${serverUs.toFixed(0)} µs of server time a job (1 KB in-process, off)`);
  return rows;
}

/** The section's rows for scripts/bench.mjs: `reference` is metrics off, `ours` metrics on. */
export function benchRows(rows) {
  return rows.flatMap((r) => r.direct ? [
    // ratio: the rate the 1 KB row would keep if this were the only cost.
    { name: `${r.name}: metrics on`, ref: r.serverUs, ours: r.onUs, unit: "µs/job", ratio: r.serverUs / (r.serverUs + r.onUs), target: "≥0.97" },
    { name: `${r.name}: with an OpenTelemetry SDK`, ref: r.serverUs, ours: r.otelUs, unit: "µs/job", ratio: r.serverUs / (r.serverUs + r.otelUs), target: "≥0.90" },
  ] : [
    { name: `${r.name}: metrics on / off`, ref: r.off, ours: r.on, unit: "jobs/s", ratio: r.onRatio, target: "≥0.97" },
    { name: `${r.name}: with an OpenTelemetry SDK / off`, ref: r.off, ours: r.otel, unit: "jobs/s", ratio: r.otelRatio, target: "≥0.90" },
  ]);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = await run({ quick: process.argv.includes("--quick") });
  for (const r of rows) {
    if (r.direct) continue;
    console.log(`${r.name.padEnd(58)} off ${r.off.toFixed(1).padStart(8)}  on ${r.on.toFixed(1).padStart(8)} (${r.onRatio.toFixed(3)}x)  otel ${r.otel.toFixed(1).padStart(8)} (${r.otelRatio.toFixed(3)}x)`);
  }
}
