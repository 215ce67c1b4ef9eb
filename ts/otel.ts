// OpenTelemetry, where the app has `@opentelemetry/api` installed (an
// optional peer dependency): a span per daemon request, one trace per job from
// its enqueue to its result, and the metrics of ts/metrics.ts through the
// meter. Without the package nothing here is loaded: `attachOtel` answers
// undefined and every hook is one `?.` on undefined.
//
// A job's trace is derived from its id (`jobTraceContext`), so any instance
// that serves one of the job's requests puts its span in the same trace with
// no shared state. Attributes follow the messaging semantic conventions and
// come from fixed vocabularies only: no job id, owner, runner id, key,
// payload or result is ever an attribute.
import * as crypto from "node:crypto";
import { createRequire } from "node:module";
import type * as OtelApi from "@opentelemetry/api";
import type { MetricsSnapshot, WaitOutcome } from "./metrics-snapshot.js";
import { native, type NativeMetricsHandle } from "./native.js";
import type { Endpoint, JobRecord } from "./types.js";

type Api = typeof OtelApi;

/** A job event the core kept for tracing (`NativeMetrics.drainEvents`). */
interface JobEvent {
  jobId: string;
  seconds: number;
  /** true: an accepted result (enqueue → result); false: a first claim (enqueue → claim). */
  done: boolean;
}

/**
 * A daemon request or an enqueue, kept until its batch is recorded
 * (`Otel.flush`): what its histogram record and spans need, no more.
 */
interface Fact {
  endpoint: Endpoint | null | "enqueue";
  status: number;
  tooLarge: boolean;
  /** Start, epoch milliseconds. */
  start: number;
  seconds: number;
  /** A fetch's or result's job; an enqueue's job. */
  jobId: string | undefined;
  /** An enqueue's job kind. */
  kind: string | undefined;
  /** An answered claim's answer, for the jobs it handed out. */
  answer: unknown;
  /** The context the request ran in, when a tracer provider is registered. */
  active: OtelApi.Context | undefined;
}

/** How long a fact waits for its batch, and the most kept at once. */
const FLUSH_MS = 10;
const MAX_PENDING = 64;

let api: Api | null | undefined;

/**
 * `@opentelemetry/api` when installed, loaded once; null when absent, or
 * when `BYOLLM_OTEL` is `0`, `off` or `false` as a registry is made (the
 * package may be installed for something else).
 */
function otelApi(): Api | null {
  const off = process.env["BYOLLM_OTEL"];
  if (off === "0" || off === "off" || off === "false") return null;
  if (api === undefined) {
    try {
      api = createRequire(import.meta.url)("@opentelemetry/api") as Api;
    } catch {
      api = null;
    }
  }
  return api;
}

/** `crypto.hash` (Node ≥ 20.12): one call, no Hash object; absent on older Node 20. */
const oneShotHash = (crypto as { hash?: (algorithm: string, data: string, encoding: "hex") => string }).hash;

/** A job's trace id and the span id its spans hang from: the first 24 bytes of SHA-256 over its id. */
export function jobTraceContext(jobId: string): { traceId: string; spanId: string } {
  const input = `byollm job\0${jobId}`;
  const hex = oneShotHash === undefined ? crypto.createHash("sha256").update(input).digest("hex") : oneShotHash("sha256", input, "hex");
  return { traceId: hex.slice(0, 32), spanId: hex.slice(32, 48) };
}

/** What kind of messaging operation each endpoint is (messaging semantic conventions). */
const OPERATION_TYPE: Partial<Record<Endpoint, string>> = {
  claim: "receive",
  fetch: "receive",
  result: "settle",
  release: "settle",
};

const SYSTEM = "byollm";

/**
 * The job id a fetch or result body names. A body as text is searched, not
 * parsed: the result's body carries its sealed envelope, and only the trace
 * needs the id (no other key of these bodies holds `"jobId":`).
 */
function jobIdOf(body: unknown): string | undefined {
  if (typeof body === "object" && body !== null) {
    const id = (body as { jobId?: unknown }).jobId;
    return typeof id === "string" ? id : undefined;
  }
  if (typeof body !== "string") return undefined;
  // An id with no escape in it is the text between its quotes.
  const at = body.indexOf('"jobId":"');
  if (at < 0) return undefined;
  const close = body.indexOf('"', at + 9);
  const plain = close < 0 ? undefined : body.slice(at + 9, close);
  if (plain !== undefined && !plain.includes("\\")) return plain;
  const found = /"jobId":("(?:[^"\\]|\\.)*")/.exec(body);
  return found ? (JSON.parse(found[1] as string) as string) : undefined;
}

/** The `{id, kind}` of each job a claim answer hands out (the core writes `"id"` then `"kind"` first in each stub). */
function claimedJobs(answer: unknown): { id: string; kind: string }[] {
  if (typeof answer === "object" && answer !== null) {
    const jobs = (answer as { jobs?: unknown }).jobs;
    if (!Array.isArray(jobs)) return [];
    return (jobs as { id?: unknown; kind?: unknown }[]).flatMap((j) =>
      typeof j.id === "string" && typeof j.kind === "string" ? [{ id: j.id, kind: j.kind }] : [],
    );
  }
  if (typeof answer !== "string") return [];
  const out: { id: string; kind: string }[] = [];
  for (const m of answer.matchAll(/\{"id":("(?:[^"\\]|\\.)*"),"kind":("(?:[^"\\]|\\.)*")/g)) {
    out.push({ id: JSON.parse(m[1] as string) as string, kind: JSON.parse(m[2] as string) as string });
  }
  return out;
}

/** What the OpenTelemetry side is told by the registry (ts/metrics.ts); absent without `@opentelemetry/api`. */
export interface OtelHooks {
  request(endpoint: Endpoint | null, status: number, tooLarge: boolean, started: number, seconds: number, body: unknown, answer: unknown): void;
  enqueued(record: JobRecord): void;
  wait(outcome: WaitOutcome, seconds: number): void;
}

class Otel implements OtelHooks {
  readonly #api: Api;
  readonly #metrics: NativeMetricsHandle;
  readonly #tracer: OtelApi.Tracer;
  readonly #requestDuration: OtelApi.Histogram;
  readonly #queueWait: OtelApi.Histogram;
  readonly #jobDuration: OtelApi.Histogram;
  readonly #waitDuration: OtelApi.Histogram;
  readonly #contexts = new Map<string, OtelApi.Context>();
  readonly #noTracer: OtelApi.TracerProvider;
  #pending: Fact[] = [];

  constructor(otel: Api, metrics: NativeMetricsHandle, snapshot: () => Promise<MetricsSnapshot | null>) {
    this.#api = otel;
    this.#metrics = metrics;
    const version = native.nativeVersion();
    this.#tracer = otel.trace.getTracer("byollm-server-native", version);
    this.#noTracer = new otel.ProxyTracerProvider().getDelegate();
    const meter = otel.metrics.getMeter("byollm-server-native", version);
    const seconds = (name: string, description: string) => meter.createHistogram(name, { unit: "s", description });
    this.#requestDuration = seconds("byollm.request.duration", "Time from a daemon request's arrival to its answer.");
    this.#queueWait = seconds("byollm.job.queue_wait", "Time from a job's enqueue to its first claim.");
    this.#jobDuration = seconds("byollm.job.duration", "Time from a job's enqueue to its accepted result.");
    this.#waitDuration = seconds("byollm.wait.duration", "How long a wait for a job's result took.");
    const jobs = meter.createObservableGauge("byollm.jobs", { description: "Jobs in the store, by state." });
    const runners = meter.createObservableGauge("byollm.runners", { description: "Runners in the store, by state." });
    const pending = meter.createObservableGauge("byollm.pairings.pending", { description: "Pairings waiting for approval." });
    const pairings = meter.createObservableCounter("byollm.pairings", { description: "Pairing events seen by this process." });
    const enqueued = meter.createObservableCounter("byollm.jobs.enqueued", { description: "Jobs enqueued by this process." });
    const refusals = meter.createObservableCounter("byollm.refusals", { description: "Refused daemon requests, by reason." });
    const waits = meter.createObservableCounter("byollm.waits", { description: "Waits for a job's result, by outcome." });
    meter.addBatchObservableCallback(
      async (result) => {
        this.flush();
        const s = await snapshot();
        if (s === null) return;
        const each = (instrument: OtelApi.Observable, key: string, counts: object | null) => {
          for (const [label, n] of Object.entries(counts ?? {})) if (typeof n === "number") result.observe(instrument, n, { [key]: label });
        };
        each(jobs, "byollm.job.state", s.jobs);
        each(runners, "byollm.runner.state", s.runners);
        if (s.pairings.pending !== null) result.observe(pending, s.pairings.pending);
        const { pending: _pending, ...events } = s.pairings;
        each(pairings, "byollm.pairing.event", events);
        result.observe(enqueued, s.enqueued);
        each(refusals, "byollm.refusal.reason", s.refusals);
        each(waits, "byollm.wait.outcome", s.waits.outcomes);
      },
      [jobs, runners, pending, pairings, enqueued, refusals, waits],
    );
  }

  /**
   * The parent context of a job's spans: its derived trace, sampled, as if
   * from a remote parent. A job's requests come close together, so the last
   * few hundred are kept rather than hashed again.
   */
  #jobContext(jobId: string): OtelApi.Context {
    let context = this.#contexts.get(jobId);
    if (context === undefined) {
      const { traceId, spanId } = jobTraceContext(jobId);
      context = this.#api.trace.setSpanContext(this.#api.ROOT_CONTEXT, {
        traceId,
        spanId,
        traceFlags: this.#api.TraceFlags.SAMPLED,
        isRemote: true,
      });
      if (this.#contexts.size >= 256) this.#contexts.delete(this.#contexts.keys().next().value as string);
      this.#contexts.set(jobId, context);
    }
    return context;
  }

  /**
   * Whether an SDK's tracer provider is registered: the global provider's
   * delegate is not the API's no-op one (which a fresh proxy hands out).
   * Without one no span is made, so nothing is hashed or built for it.
   */
  #tracing(): boolean {
    const provider = this.#api.trace.getTracerProvider() as OtelApi.TracerProvider & { getDelegate?: () => OtelApi.TracerProvider };
    return provider.getDelegate?.() !== this.#noTracer;
  }

  #span(name: string, kind: OtelApi.SpanKind, parent: OtelApi.Context, start: number, end: number, attributes: OtelApi.Attributes, links?: OtelApi.Link[]): OtelApi.Span {
    const options: OtelApi.SpanOptions = { kind, startTime: start, attributes };
    if (links !== undefined) options.links = links;
    const span = this.#tracer.startSpan(name, options, parent);
    span.end(end);
    return span;
  }

  /**
   * Keep one fact for the next batch. The first fact of a batch sets its
   * timer; a full batch goes at once, so what is kept stays bounded.
   */
  #keep(fact: Fact): void {
    this.#pending.push(fact);
    if (this.#pending.length >= MAX_PENDING) this.flush();
    else if (this.#pending.length === 1) setTimeout(this.#flushSoon, FLUSH_MS).unref();
  }

  readonly #flushSoon = (): void => this.flush();

  enqueued(record: JobRecord): void {
    if (!this.#tracing()) return;
    this.#keep({ endpoint: "enqueue", status: 200, tooLarge: false, start: performance.timeOrigin + performance.now(), seconds: 0, jobId: record.id, kind: record.kind, answer: undefined, active: undefined });
  }

  request(endpoint: Endpoint | null, status: number, tooLarge: boolean, started: number, seconds: number, body: unknown, answer: unknown): void {
    const claimed = endpoint === "claim" && status === 200;
    const tracing = this.#tracing();
    this.#keep({
      endpoint,
      status,
      tooLarge,
      start: performance.timeOrigin + started,
      seconds,
      // Only what the spans need is kept: a result's body may be megabytes.
      jobId: tracing && (endpoint === "fetch" || endpoint === "result") ? jobIdOf(body) : undefined,
      kind: undefined,
      answer: tracing && claimed ? answer : undefined,
      active: tracing ? this.#api.context.active() : undefined,
    });
  }

  /**
   * Record the kept facts: the meter's histograms, then the spans. Run
   * together, the SDK's code stays in the CPU's caches: interleaved with
   * each request's own work it cost about three times as much.
   */
  flush(): void {
    const facts = this.#pending;
    if (facts.length === 0) return;
    this.#pending = [];
    const drained = this.#metrics.drainEvents();
    const events = drained === null ? [] : (JSON.parse(drained) as JobEvent[]);
    for (const event of events) (event.done ? this.#jobDuration : this.#queueWait).record(event.seconds);
    const tracing = this.#tracing();
    // The accepted results' spans, by job, for the job spans' links and ends.
    const results = new Map<string, { span: OtelApi.Span; end: number }>();
    for (const fact of facts) {
      if (fact.endpoint !== "enqueue") {
        this.#requestDuration.record(fact.seconds, { "messaging.operation.name": fact.endpoint ?? "other", "http.response.status_code": fact.status });
      }
      if (!tracing || fact.active === undefined && fact.endpoint !== "enqueue") continue;
      try {
        this.#spansOf(fact, results);
      } catch {
        // A tracer that throws loses its spans, never a request or a timer's process.
      }
    }
    if (!tracing) return;
    const now = performance.timeOrigin + performance.now();
    for (const event of events) {
      if (!event.done) continue;
      const result = results.get(event.jobId);
      const end = result?.end ?? now;
      const links = result === undefined ? undefined : [{ context: result.span.spanContext() }];
      this.#span("byollm job", this.#api.SpanKind.INTERNAL, this.#jobContext(event.jobId), end - event.seconds * 1000, end, {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "job",
      }, links);
    }
  }

  #spansOf(fact: Fact, results: Map<string, { span: OtelApi.Span; end: number }>): void {
    const otel = this.#api;
    if (fact.endpoint === "enqueue") {
      this.#span(`send ${fact.kind}`, otel.SpanKind.PRODUCER, this.#jobContext(fact.jobId as string), fact.start, fact.start, {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": fact.kind as string,
      });
      return;
    }
    const { endpoint, status } = fact;
    const active = fact.active as OtelApi.Context;
    const operation = endpoint ?? "other";
    const attributes: OtelApi.Attributes = {
      "messaging.system": SYSTEM,
      "messaging.operation.name": operation,
      "http.response.status_code": status,
    };
    const type = endpoint === null ? undefined : OPERATION_TYPE[endpoint];
    if (type !== undefined) attributes["messaging.operation.type"] = type;
    const reason = status === 200 ? null : native.refusalReason(status, fact.tooLarge);
    if (reason !== null) attributes["error.type"] = reason;
    const start = fact.start;
    const end = start + fact.seconds * 1000;
    const incoming = otel.trace.getSpanContext(active);
    const fromRequest = incoming !== undefined && otel.trace.isSpanContextValid(incoming) ? [{ context: incoming }] : undefined;

    // A fetch, a result, or a claim of one job belongs to that job: its span
    // is in the job's trace, linked to the incoming one. A claim of several
    // has a span of its own, and each job a receive span linked to it.
    const jobs = fact.answer === undefined ? [] : claimedJobs(fact.answer);
    if (endpoint === "claim") attributes["messaging.batch.message_count"] = jobs.length;
    const named = fact.jobId ?? (jobs.length === 1 ? jobs[0]?.id : undefined);
    if (jobs.length === 1) attributes["messaging.destination.name"] = jobs[0]?.kind;
    const kind = otel.SpanKind.SERVER;
    let span: OtelApi.Span;
    if (named !== undefined) span = this.#span(`byollm ${operation}`, kind, this.#jobContext(named), start, end, attributes, fromRequest);
    else {
      span = this.#span(`byollm ${operation}`, kind, active, start, end, attributes);
      const link = [{ context: span.spanContext() }];
      for (const job of jobs) {
        this.#span(`receive ${job.kind}`, otel.SpanKind.CONSUMER, this.#jobContext(job.id), start, end, {
          "messaging.system": SYSTEM,
          "messaging.operation.type": "receive",
          "messaging.operation.name": "claim",
          "messaging.destination.name": job.kind,
        }, link);
      }
    }
    if (status >= 500) span.setStatus({ code: otel.SpanStatusCode.ERROR });
    if (endpoint === "result" && status === 200 && named !== undefined) results.set(named, { span, end });
  }

  wait(outcome: WaitOutcome, seconds: number): void {
    this.#waitDuration.record(seconds, { "byollm.wait.outcome": outcome });
  }
}

/** The registry's OpenTelemetry side, when the API is installed; else undefined (nothing loaded). */
export function attachOtel(metrics: NativeMetricsHandle, snapshot: () => Promise<MetricsSnapshot | null>): OtelHooks | undefined {
  const otel = otelApi();
  if (otel === null) return undefined;
  metrics.setTracing(true);
  return new Otel(otel, metrics, snapshot);
}
