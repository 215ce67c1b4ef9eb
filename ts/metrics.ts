// What an operator watches: one registry of counters and histograms per site
// store (the core's, src/metrics.rs), fed at the request boundary and where
// claims, results, enqueues and waits happen; `app.metrics()` and
// `createMetricsHandler` read it with the store's own counts.
import { createHash, timingSafeEqual } from "node:crypto";
import { NoRunnerAvailableError, ResultTimeoutError } from "./errors.js";
import { nativeStoreCounts } from "./memory.js";
import { native, PROTOCOL, type NativeMetricsHandle, type StoreCounts } from "./native.js";
import { attachOtel, type OtelHooks } from "./otel.js";
import { livenessWindow, sqlStorePaths } from "./sql-store.js";
import type { MetricsSnapshot, WaitOutcome } from "./metrics-snapshot.js";
import type { ByollmStore, DeliveredResult, Endpoint, JobRecord, WaitOptions } from "./types.js";

export type { EndpointMetrics, MetricsHistogram, MetricsSnapshot, MetricsStatus, WaitOutcome } from "./metrics-snapshot.js";

const ENDPOINT_AT = new Map<string, number>(PROTOCOL.endpoints.map((name, at) => [name, at]));

/** Where a snapshot's store counts come from: the app's store, clock and liveness window. */
export interface MetricsSource {
  readonly store: ByollmStore;
  readonly now: () => number;
  readonly livenessMs: number;
}

/** One site store's registry; every app and handler on the store records into it. */
export class Registry {
  readonly native: NativeMetricsHandle = new native.NativeMetrics();
  readonly otel: OtelHooks | undefined;
  /** The app bound to this store last, for the OpenTelemetry meter's store counts. */
  source: MetricsSource | undefined;

  constructor() {
    this.otel = attachOtel(this.native, () => (this.source === undefined ? Promise.resolve(null) : snapshotFrom(this.source)));
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
    if (paths !== undefined) return await paths.metricCounts(now, livenessWindow(store, livenessMs));
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
   * Required `Authorization: Bearer <token>`. A wrong or missing token gets
   * 401 and no store data.
   */
  readonly token?: string;
  /**
   * `true` to answer anyone who can reach the handler, without a token. One
   * of `token` or `public: true` is required, so an unset variable
   * (`{ token: process.env.METRICS_TOKEN }`) fails at start rather than
   * publishing the metrics.
   */
  readonly public?: boolean;
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
  const { token } = options ?? {};
  if (options?.public === true) {
    if (token !== undefined) throw new TypeError("createMetricsHandler: give either `token` or `public: true`, not both");
  } else if (typeof token !== "string" || token.length === 0) {
    throw new TypeError(
      `createMetricsHandler: \`token\` must be a non-empty string (got ${token === "" ? "an empty string" : typeof token}); ` +
        "pass { public: true } to serve the metrics to anyone without a token",
    );
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
