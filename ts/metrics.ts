// What an operator watches: one registry of counters and histograms per site
// store (the core's, src/metrics.rs), fed at the request boundary and where
// claims, results, enqueues and waits happen; `app.metrics()` and
// `createMetricsHandler` read it with the store's own counts.
import { createHash, timingSafeEqual } from "node:crypto";
import { NoRunnerAvailableError, ResultTimeoutError } from "./errors.js";
import { nativeStoreCounts } from "./memory.js";
import { native, PROTOCOL, type NativeMetricsHandle, type StoreCounts } from "./native.js";
import { attachOtel } from "./otel.js";
import { sqlStorePaths } from "./sql-store.js";
import type { ByollmStore, DeliveredResult, Endpoint, JobRecord, WaitOptions } from "./types.js";

/** A histogram as the snapshot shows it; values in seconds. */
export interface MetricsHistogram {
  readonly count: number;
  readonly sum: number;
  /** Estimated from the buckets as Prometheus's `histogram_quantile` does; null when empty. */
  readonly p50: number | null;
  readonly p90: number | null;
  readonly p99: number | null;
  /** Cumulative counts at each upper bound (`le`); `count` is the `+Inf` bucket. */
  readonly buckets: readonly { readonly le: number; readonly count: number }[];
}

export type MetricsStatus = "200" | "400" | "401" | "403" | "404" | "405" | "500" | "503" | "other";

export interface EndpointMetrics {
  readonly requests: number;
  readonly statuses: Readonly<Record<MetricsStatus, number>>;
  readonly latency: MetricsHistogram;
}

/**
 * `app.metrics()`: counters and histograms of this process (Prometheus adds
 * them up across instances) and the store's counts of stored things (the
 * same from every instance). A count the store cannot give is `null`: a
 * store of your own (not `MemoryStore`, `postgresStore` or `supabaseStore`)
 * has no counting call, so its `jobs` and `pairings.pending` are null and
 * its runners are counted from `listRunners()`.
 */
export interface MetricsSnapshot {
  /** When it was read (the app's clock, epoch ms). */
  readonly at: number;
  /** Whether the store answered; when it did not, its counts are null. */
  readonly store: { readonly ok: boolean };
  readonly jobs: {
    readonly queued: number;
    readonly claimed: number;
    readonly running: number;
    readonly ok: number;
    readonly error: number;
    readonly canceled: number;
    readonly expired: number;
  } | null;
  /** Paired = not revoked; online = paired and heard from within the app's `livenessMs`. */
  readonly runners: { readonly paired: number; readonly online: number; readonly revoked: number } | null;
  readonly pairings: {
    /** From the store: pending and not expired. */
    readonly pending: number | null;
    readonly started: number;
    readonly approved: number;
    readonly denied: number;
    /** Polls answered `expired`. */
    readonly expired: number;
    /** Approvals their daemon collected. */
    readonly collected: number;
  };
  readonly enqueued: number;
  /** Per endpoint, and `other` (not a protocol route, or not POST). */
  readonly endpoints: Readonly<Record<Endpoint | "other", EndpointMetrics>>;
  /** `audience`: jobs a daemon released with reason `refused`. */
  readonly refusals: {
    readonly unauthorized: number;
    readonly revoked: number;
    readonly badRequest: number;
    readonly notFound: number;
    readonly bodyTooLarge: number;
    readonly audience: number;
    /** `rate-limited`: a source over its share of pending pairings or its budget of unknown device codes. */
    readonly rateLimited: number;
  };
  readonly jobLatency: {
    /** Enqueue → first claim. */
    readonly queueWait: MetricsHistogram;
    /** Enqueue → accepted result. */
    readonly total: MetricsHistogram;
  };
  /** How `handle.result()` waits ended, and how long they took. */
  readonly waits: {
    readonly outcomes: {
      readonly answered: number;
      readonly canceled: number;
      readonly expired: number;
      readonly noRunner: number;
      readonly timedOut: number;
      readonly fallback: number;
      readonly aborted: number;
      readonly error: number;
    };
    readonly duration: MetricsHistogram;
  };
}

export type WaitOutcome = "answered" | "canceled" | "expired" | "no_runner" | "timed_out" | "fallback" | "aborted" | "error";

const ENDPOINT_AT = new Map<string, number>(PROTOCOL.endpoints.map((name, at) => [name, at]));

/** Where a snapshot's store counts come from: the app's store, clock and liveness window. */
export interface MetricsSource {
  readonly store: ByollmStore;
  readonly now: () => number;
  readonly livenessMs: number;
}

/** What the OpenTelemetry side (ts/otel.ts) is told; absent without `@opentelemetry/api`. */
export interface OtelHooks {
  request(endpoint: Endpoint | null, status: number, tooLarge: boolean, started: number, seconds: number, body: unknown, answer: unknown): void;
  enqueued(record: JobRecord): void;
  wait(outcome: WaitOutcome, seconds: number): void;
}

/** One site store's registry; every app and handler on the store records into it. */
export class Registry {
  readonly native: NativeMetricsHandle = new native.NativeMetrics();
  readonly otel: OtelHooks | undefined;
  /** The app bound to this store last, for the OpenTelemetry meter's store counts. */
  source: MetricsSource | undefined;

  constructor() {
    this.otel = attachOtel(this, () => (this.source === undefined ? Promise.resolve(null) : snapshotFrom(this.source)));
  }

  /**
   * One answered daemon request (the boundary: `createFetchHandler`,
   * `ByollmHandlers.handle`). What only the engine sees (pairings started,
   * expired and collected; jobs refused by a daemon's audience rules; queue
   * waits and job times) the engine records itself.
   */
  request(endpoint: Endpoint | null, status: number, tooLarge: boolean, started: number, body: unknown, answer: unknown): void {
    const seconds = (performance.now() - started) / 1000;
    this.native.request(endpoint === null ? -1 : (ENDPOINT_AT.get(endpoint) ?? -1), status, tooLarge, seconds);
    this.otel?.request(endpoint, status, tooLarge, started, seconds, body, answer);
  }

  enqueued(record: JobRecord): void {
    this.native.enqueued();
    this.otel?.enqueued(record);
  }

  pairing(event: "approved" | "denied"): void {
    this.native.pairing(event);
  }

  /** Watch one `handle.result()` wait; answers the same promise. */
  wait(waiting: Promise<DeliveredResult>, options: WaitOptions | undefined): Promise<DeliveredResult> {
    const started = performance.now();
    const record = (outcome: WaitOutcome): void => {
      const seconds = (performance.now() - started) / 1000;
      this.native.wait(outcome, seconds);
      this.otel?.wait(outcome, seconds);
    };
    waiting.then(
      (result) => record(resultOutcome(result)),
      (error: unknown) => record(errorOutcome(error, options)),
    );
    return waiting;
  }
}

function resultOutcome(result: DeliveredResult): WaitOutcome {
  if (result.fallback === true) return "fallback";
  if (result.state === "canceled") return "canceled";
  if (result.state === "expired") return "expired";
  return "answered";
}

function errorOutcome(error: unknown, options: WaitOptions | undefined): WaitOutcome {
  if (error instanceof NoRunnerAvailableError) return "no_runner";
  if (error instanceof ResultTimeoutError) return "timed_out";
  if (options?.signal?.aborted === true) return "aborted";
  return "error";
}

const registries = new WeakMap<object, Registry>();

/** The registry of a site store, made on first use. */
export function registryOf(store: ByollmStore): Registry {
  let registry = registries.get(store);
  if (registry === undefined) {
    registry = new Registry();
    registries.set(store, registry);
  }
  return registry;
}

/** The registry a component records into, or undefined with its metrics off (`metrics: false`). */
export function recorderFor(store: ByollmStore, enabled: boolean | undefined): Registry | undefined {
  return enabled === false ? undefined : registryOf(store);
}

const sources = new WeakMap<object, MetricsSource>();

/** Called by `ByollmApp`'s constructor: where its snapshots read the store. */
export function bindApp(app: object, source: MetricsSource): void {
  sources.set(app, source);
  registryOf(source.store).source = source;
}

/** What the store counts, by the kind of store; `{ ok: false }` when it fails. */
async function storeCounts(source: MetricsSource): Promise<StoreCounts> {
  const { store, livenessMs } = source;
  const now = source.now();
  try {
    const own = nativeStoreCounts(store, now, livenessMs);
    if (own !== undefined) return own;
    const paths = sqlStorePaths(store);
    if (paths !== undefined) return await paths.metricCounts(now, livenessMs);
    // A store of the app's own: runners from its listing, nothing else.
    return { ok: true, runners: native.runnerCounts(await store.listRunners(), now, livenessMs) };
  } catch {
    return { ok: false };
  }
}

/** `app.metrics()`. */
export function snapshotOf(app: object): Promise<MetricsSnapshot> {
  return snapshotFrom(sourceOf(app, "metrics"));
}

async function snapshotFrom(source: MetricsSource): Promise<MetricsSnapshot> {
  const counts = await storeCounts(source);
  return JSON.parse(registryOf(source.store).native.json(counts, source.now())) as MetricsSnapshot;
}

export { jobTraceContext } from "./otel.js";

function sourceOf(app: object, where: string): MetricsSource {
  const source = sources.get(app);
  if (source === undefined) throw new TypeError(`${where} takes a ByollmApp of this package`);
  return source;
}

export interface MetricsHandlerOptions {
  /**
   * Required `Authorization: Bearer <token>`; without it the handler
   * answers anyone who can reach it. A wrong or missing token gets 401 and
   * no store data.
   */
  readonly token?: string;
}

const EXPOSITION = "text/plain; version=0.0.4; charset=utf-8";

function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

/** The bearer token of an `Authorization` header, compared in constant time (over digests of equal length). */
function authorized(header: string | null, token: string): boolean {
  const match = header === null ? null : /^bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  const given = match?.[1] ?? "";
  return timingSafeEqual(digest(given), digest(token)) && given.length > 0;
}

/**
 * A `(Request) => Promise<Response>` answering the Prometheus text exposition
 * (0.0.4) of `app`'s site: mount it at `/metrics` (in Next.js, an
 * `app/metrics/route.ts` exporting it as `GET`). A store that cannot be read
 * gives a 503 with the in-memory counters and `byollm_store_up 0`.
 */
export function createMetricsHandler(app: object, options: MetricsHandlerOptions = {}): (request: Request) => Promise<Response> {
  const source = sourceOf(app, "createMetricsHandler");
  const { token } = options;
  if (token !== undefined && (typeof token !== "string" || token.length === 0)) {
    throw new TypeError("createMetricsHandler: `token` must be a non-empty string (or left out for no authentication)");
  }
  const answer = (status: number, body: string, headers: Record<string, string> = {}): Response =>
    new Response(body, { status, headers: { "content-type": EXPOSITION, "cache-control": "no-store", ...headers } });
  return async function metrics(request: Request): Promise<Response> {
    if (request.method !== "GET" && request.method !== "HEAD") return answer(405, "GET only\n", { allow: "GET, HEAD" });
    if (token !== undefined && !authorized(request.headers.get("authorization"), token)) {
      return answer(401, "unauthorized\n", { "www-authenticate": 'Bearer realm="byollm metrics"' });
    }
    const counts = await storeCounts(source);
    const text = registryOf(source.store).native.prometheus(counts);
    return answer(counts.ok ? 200 : 503, request.method === "HEAD" ? "" : text);
  };
}
