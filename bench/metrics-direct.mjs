// The recording's own cost per job, without the cycle around it: the calls
// the request boundary and the enqueue make for one job (an enqueue, then a
// claim, a fetch and a result answered 200), timed by process CPU over
// 100,000 jobs. bench/metrics.mjs runs it in a child process per variant
// (an OpenTelemetry SDK, once registered, stays for the process):
//
//   node bench/metrics-direct.mjs on|otel     prints {"variant", "usPerJob"}
//
// What it leaves out: the engine's own recording in the core (relaxed
// atomics; a queue wait and a job time a job) and, with an SDK, the job's
// end-to-end span (one more span) and the cost the cycle feels indirectly
// (the spans a batch processor keeps until it exports, collected later).
const variant = process.argv[2] === "otel" ? "otel" : "on";
process.env.BYOLLM_OTEL = variant === "otel" ? "" : "0";
if (variant === "otel") {
  const { metrics, trace } = await import("@opentelemetry/api");
  const { BasicTracerProvider, BatchSpanProcessor } = await import("@opentelemetry/sdk-trace-base");
  const { MeterProvider, PeriodicExportingMetricReader, InMemoryMetricExporter, AggregationTemporality } = await import("@opentelemetry/sdk-metrics");
  const dropping = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => undefined, forceFlush: async () => undefined };
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropping)] }));
  const reader = new PeriodicExportingMetricReader({ exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE), exportIntervalMillis: 3_600_000 });
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
}
const { Registry } = await import("../dist/metrics.js");
const registry = new Registry();
const ciphertext = "x".repeat(1407);
const JOBS = 100_000;

async function jobs(n) {
  for (let i = 0; i < n; i += 1) {
    const id = `job_${i.toString(16).padStart(24, "0")}`;
    const started = performance.now();
    registry.enqueued({ id, kind: "llm.generate" });
    registry.request("claim", 200, false, started, "{}", `{"jobs":[{"id":"${id}","kind":"llm.generate","sizeClass":"small"}]}`);
    registry.request("fetch", 200, false, started, `{"jobId":"${id}","leaseId":"l"}`, "{}");
    registry.request("result", 200, false, started, `{"jobId":"${id}","leaseId":"l","envelope":{"ciphertext":"${ciphertext}"}}`, `{"accepted":true,"state":"ok"}`);
    // Let a batch span processor's timers run, as between requests.
    if (i % 256 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
}

await jobs(JOBS / 10);
const before = process.cpuUsage();
await jobs(JOBS);
const used = process.cpuUsage(before);
console.log(JSON.stringify({ variant, usPerJob: (used.user + used.system) / JOBS }));
