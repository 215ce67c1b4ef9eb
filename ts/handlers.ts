// The six protocol endpoints over any ByollmStore, without a transport. The
// order of operations, every check and every answer are the engine's
// (src/engine); this file hands it each request and performs the store
// operations it asks for: in place on our MemoryStore, as one SQL function
// call on the SQL stores, as the store's methods on any other.
import { native, PROTOCOL, type NativeMemoryStoreHandle, type PendingRequest } from "./native.js";
import { nativeStoreOf, warnIfServerless } from "./memory.js";
import { recorderFor, type Registry } from "./metrics.js";
import { methodOperations, perform, type Operations } from "./operations.js";
import { sqlStorePaths, type SqlStorePaths } from "./sql-store.js";
import type { AuthContext, ByollmStore, Endpoint, HandlerConfig, HandlerResult } from "./types.js";

export type { AuthContext, HandlerConfig, HandlerResult };

/** The protocol version this package serves. */
export const SERVED_PROTOCOL_VERSION = PROTOCOL.version;

/** How long one store operation may take before the request is answered `server-error`. */
const DEFAULT_STORE_TIMEOUT_MS = 30_000;

/** How often liveness writes that came due are flushed, at most. */
const IDLE_FLUSH_MS = 1_000;

type Engine = InstanceType<typeof native.Engine>;

/** Each watched engine's unsubscribe, run once the engine is collected (handlers have no close). */
const unwatch = new FinalizationRegistry<() => void>((stop) => stop());

/**
 * Feed a SQL store's notification channel to `engine` (which then answers an
 * idle runner's repeated requests itself; see src/engine/idle.rs), and write
 * the liveness those answers owe through `touchRunners`, in batches, at most
 * once a second and one batch at a time. Only a weak reference to the engine
 * is held: a handler that is dropped stops listening when it is collected.
 */
function watchIdle(engine: Engine, paths: SqlStorePaths, now: () => number): void {
  const { idle } = paths;
  const touch = paths.touchRunners?.bind(paths);
  if (idle === undefined || touch === undefined) return;
  const ref = new WeakRef(engine);
  const unsubscribe = idle.subscribe(
    (key) => ref.deref()?.idleKey(key),
    (healthy) => ref.deref()?.idleHealth(healthy),
  );
  let flushing = false;
  let warned = false;
  const flush = (): void => {
    const due = flushing ? undefined : ref.deref()?.idleDue();
    if (due === undefined || due === "[]") return;
    flushing = true;
    touch(JSON.parse(due) as { runnerId: string; now: number }[], now())
      .then(
        (seen) => ref.deref()?.idleSeen(JSON.stringify(seen)),
        (error: unknown) => {
          // Nothing is put back: each runner's next heartbeat past the slack goes to the store.
          if (!warned) console.warn(`byollm: writing idle runners' liveness failed; their heartbeats go to the database when it is due: ${String(error)}`);
          warned = true;
        },
      )
      .finally(() => {
        flushing = false;
      });
  };
  const timer = setInterval(flush, IDLE_FLUSH_MS);
  timer.unref();
  unwatch.register(engine, () => {
    clearInterval(timer);
    unsubscribe();
  });
}

/** Our native store, and the bell for its watchers. */
type InPlace = { readonly native: NativeMemoryStoreHandle; readonly notify: () => void };

/**
 * What is wrong with `PUBLIC_ORIGIN`, the variable the documented recipes
 * build the approval page's URL from, or undefined when it is an absolute
 * http(s) URL. The same sentence is printed by `next build` and thrown at the
 * first request, so the mistake reads the same wherever it is seen first.
 */
export function publicOriginProblem(value: string | undefined = process.env.PUBLIC_ORIGIN): string | undefined {
  if (isHttpUrl(value)) return undefined;
  return (
    `PUBLIC_ORIGIN must be the absolute http(s) origin people and daemons reach this site at ` +
    `(e.g. https://app.example, or http://localhost:3000 in development); ` +
    (value === undefined || value === "" ? "it is not set." : `got ${JSON.stringify(value)}.`)
  );
}

/** Whether `value` is an absolute http(s) URL. */
const isHttpUrl = (value: unknown): boolean =>
  typeof value === "string" && URL.canParse(value) && ["https:", "http:"].includes(new URL(value).protocol);

// The daemon prints this URL next to the pairing code and refuses a pair
// answer whose URL is not absolute: a missing origin (`undefined/pair`) would
// fail every pairing, so it fails here, once, when the handler is built.
function checkVerificationUrl(value: unknown): void {
  if (!isHttpUrl(value)) {
    throw new Error(
      `verificationUrl must be an absolute http(s) URL, the page where a person approves a pairing code ` +
        `(e.g. https://app.example/pair); got ${JSON.stringify(value) ?? String(value)}. ` +
        (publicOriginProblem() ?? `If it is built from an environment variable, set that variable.`),
    );
  }
}

/** A request's answer: its status and the JSON text of its body. */
export interface Answer {
  readonly status: number;
  readonly text: string;
}

/** The source an AuthContext names, if it names one. */
function sourceOf(auth: AuthContext): string | undefined {
  const source: unknown = auth.source;
  return typeof source === "string" && source !== "" ? source : undefined;
}

/** A `rate-limited` answer's `retryAfter` (seconds), else undefined. */
export function retryAfterOf(answer: Answer): number | undefined {
  if (answer.status !== 429) return undefined;
  const wait = (JSON.parse(answer.text) as { retryAfter?: unknown }).retryAfter;
  return typeof wait === "number" ? wait : undefined;
}

/** The engine for one site and store, behind `ByollmHandlers` and `createFetchHandler`. */
export class Endpoints {
  readonly #engine: InstanceType<typeof native.Engine>;
  readonly #store: ByollmStore;
  readonly #methods: Operations;
  readonly #now: () => number;
  readonly #timeoutMs: number;
  #watching = false;

  constructor(config: HandlerConfig) {
    const settings = {
      leaseMs: config.leaseMs ?? 60_000,
      pairingTtlMs: config.pairingTtlMs ?? 600_000,
      pollIntervalMs: config.pollIntervalMs ?? 2_000,
      verificationUrl: String(config.verificationUrl),
    };
    // The engine refuses keys that are not one site's, and counts what it
    // sees into this store's registry (pairings, queue waits, job times).
    const metrics = recorderFor(config.store, config.metrics)?.native;
    this.#engine = new native.Engine(new native.SiteKeyring(config.siteKeys), settings, metrics);
    checkVerificationUrl(config.verificationUrl);
    warnIfServerless(config.store);
    this.#store = config.store;
    this.#methods = methodOperations(config.store);
    this.#now = config.now ?? Date.now;
    this.#timeoutMs = config.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
  }

  /** A request from HTTP: the body text and the `x-byollm-*` header values. */
  async serve(endpoint: string, body: string, headers: Headers, source?: string): Promise<Answer> {
    const runnerId = headers.get("x-byollm-runner") ?? undefined;
    const issuedAt = headers.get("x-byollm-issued-at") ?? undefined;
    const signature = headers.get("x-byollm-signature") ?? undefined;
    const now = this.#now();
    // Checked on every request: a store patched since (to log or change a
    // method) is served through its methods from then on.
    const inPlace = nativeStoreOf(this.#store);
    if (inPlace !== undefined) {
      return this.#inPlace(endpoint, inPlace, this.#engine.serveNative(inPlace.native, endpoint, body, runnerId, issuedAt, signature, now, source));
    }
    const sql = this.#sql();
    return this.#finish(endpoint, this.#engine.request(endpoint, body, runnerId, issuedAt, signature, now, sql !== undefined, source), sql);
  }

  /** A request from `ByollmHandlers.handle`. */
  handle(endpoint: string, body: unknown, auth: AuthContext): Promise<Answer> {
    let json: string | undefined;
    try {
      json = JSON.stringify(body);
    } catch {
      json = undefined;
    }
    const now = this.#now();
    const inPlace = nativeStoreOf(this.#store);
    if (inPlace !== undefined) {
      return this.#inPlace(endpoint, inPlace, this.#engine.handleNative(inPlace.native, endpoint, json, auth.endpoint, auth.rawBody, auth.signature, now, sourceOf(auth)));
    }
    const sql = this.#sql();
    const p = this.#engine.handle(endpoint, json, auth.endpoint, auth.rawBody, auth.signature, now, sql !== undefined, sourceOf(auth));
    return this.#finish(endpoint, p, sql);
  }

  /** A SQL store's one-call operations; from its first request on, its notification channel feeds the engine. */
  #sql(): Operations | undefined {
    const paths = sqlStorePaths(this.#store);
    if (paths?.idle !== undefined && !this.#watching) {
      this.#watching = true;
      watchIdle(this.#engine, paths, this.#now);
    }
    return paths?.operations;
  }

  /** A request on our store, answered in place (its text) or to finish. */
  #inPlace(endpoint: string, inPlace: InPlace, served: string | PendingRequest): Promise<Answer> {
    if (typeof served !== "string") return this.#finish(endpoint, served, inPlace);
    inPlace.notify();
    return Promise.resolve({ status: this.#engine.status, text: served });
  }

  /**
   * Perform what the request asks for until it has its answer: in place on
   * our store, else through the SQL functions or the store's methods.
   */
  async #finish(endpoint: string, p: PendingRequest, on: InPlace | Operations | undefined): Promise<Answer> {
    const inPlace = typeof on === "object" ? on : undefined;
    const operations = typeof on === "function" ? on : this.#methods;
    try {
      for (let op = p.next(); op !== null; op = p.next()) {
        if (op === "work") await p.work();
        else if (inPlace !== undefined) p.runOn(inPlace.native);
        else await perform(p, op, operations, this.#timeoutMs);
      }
    } finally {
      inPlace?.notify();
    }
    const cause = p.cause;
    if (cause != null) console.error(`byollm: the store failed on ${endpoint}: ${cause}`);
    return { status: p.status, text: p.take() ?? "null" };
  }
}

/**
 * The transport-free protocol handler. `handle` takes an already-parsed body;
 * the HTTP handler (`createFetchHandler`) takes the body text.
 */
export class ByollmHandlers {
  readonly #endpoints: Endpoints;
  readonly #metrics: Registry | undefined;

  constructor(config: HandlerConfig) {
    this.#endpoints = new Endpoints(config);
    this.#metrics = recorderFor(config.store, config.metrics);
  }

  /**
   * Serve one call. `body` is the parsed, untrusted JSON; `auth` carries the
   * signature and the exact text it covers. No version check here: the
   * endpoint schemas pin `protocolVersion: "2"`, so a wrong one is a schema failure.
   */
  async handle(endpoint: Endpoint, body: unknown, auth: AuthContext): Promise<HandlerResult> {
    const started = performance.now();
    let answer: Answer | undefined;
    try {
      answer = await this.#endpoints.handle(endpoint, body, auth);
      const retryAfterSeconds = retryAfterOf(answer);
      const parsed = JSON.parse(answer.text) as unknown;
      return retryAfterSeconds === undefined ? { status: answer.status, body: parsed } : { status: answer.status, body: parsed, retryAfterSeconds };
    } finally {
      this.#metrics?.request(endpoint, answer?.status ?? 500, false, started, auth.rawBody, answer?.text);
    }
  }
}
