// Result delivery over Supabase Realtime: the app hears that a job changed the
// moment Postgres commits it, instead of on the next poll. Runner liveness is
// still polled: "nobody has heartbeated lately" is the absence of a row change,
// and there is nothing to subscribe to for that.
import type { SupabaseClient } from "@supabase/supabase-js";
import { labelFallback, NoRunnerAvailableError, ResultTimeoutError } from "../delivery.js";
import type { DeliveredResult, PollingDeliveryDeps, ResultDelivery, WaitOptions } from "../types.js";

const DEFAULT_TIMEOUT_MS = 300_000;
const DEFAULT_GRACE_MS = 10_000;
const AVAILABILITY_INTERVAL_MS = 2_000;
const TERMINAL = new Set(["ok", "error", "canceled", "expired"]);

/** `ByollmAppOptions.delivery` for an app on Supabase. */
export function supabaseRealtimeDelivery(client: SupabaseClient): (deps: PollingDeliveryDeps) => ResultDelivery {
  return (deps) => new RealtimeDelivery(client, deps);
}

class RealtimeDelivery implements ResultDelivery {
  readonly #client: SupabaseClient;
  readonly #deps: PollingDeliveryDeps;

  constructor(client: SupabaseClient, deps: PollingDeliveryDeps) {
    this.#client = client;
    this.#deps = deps;
  }

  async waitFor(jobId: string, options: WaitOptions = {}): Promise<DeliveredResult> {
    options.signal?.throwIfAborted();
    // Already finished: a subscription would wait for an event that is past.
    const first = await this.#deps.read(jobId);
    if (first !== null && TERMINAL.has(first.state)) return first;

    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const graceMs = this.#deps.graceMs ?? DEFAULT_GRACE_MS;
    const now = this.#deps.now ?? Date.now;

    // Each wait settles its own promise (one delivery object serves every
    // job of the app; waits must never answer each other).
    let resolve!: (r: DeliveredResult) => void;
    let reject!: (e: unknown) => void;
    const settled = new Promise<DeliveredResult>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    let done = false;
    const finish = (r: DeliveredResult): void => {
      if (!done) {
        done = true;
        resolve(r);
      }
    };
    const fail = (e: unknown): void => {
      if (!done) {
        done = true;
        reject(e);
      }
    };
    // Every asynchronous path ends in finish/fail: an escaped rejection
    // would be unhandled and end the process.
    const check = (): void => {
      this.#deps
        .read(jobId)
        .then((current) => {
          if (current !== null && TERMINAL.has(current.state)) finish(current);
        })
        .catch(fail);
    };

    const channel = this.#client
      .channel(`byollm_job_${jobId}`)
      .on("postgres_changes", { event: "UPDATE", schema: "public", table: "byollm_jobs", filter: `id=eq.${jobId}` }, check)
      .subscribe();
    // The job may have finished between the first read and the subscription.
    check();

    const timer = setTimeout(() => fail(new ResultTimeoutError(jobId, timeoutMs)), timeoutMs);
    let noRunnerSince: number | null = null;
    const watcher = setInterval(() => {
      const availability = this.#deps.availability;
      if (availability === undefined) return;
      (async () => {
        const signal = await availability(jobId);
        if (signal.available || signal.blocked) {
          noRunnerSince = null;
          return;
        }
        noRunnerSince ??= now();
        if (now() - noRunnerSince < graceMs) return;
        const reason = signal.reason ?? "no-runner-online";
        const substitute = await options.onNoRunner?.(reason);
        if (substitute !== undefined) finish(labelFallback(jobId, substitute as string | DeliveredResult));
        else fail(new NoRunnerAvailableError(jobId, reason));
      })().catch(fail);
    }, AVAILABILITY_INTERVAL_MS);
    const abort = (): void => fail(options.signal?.reason ?? new Error("wait aborted"));
    options.signal?.addEventListener("abort", abort, { once: true });
    // Aborted while the first read was in flight: the listener came too late.
    if (options.signal?.aborted === true) abort();

    try {
      return await settled;
    } finally {
      clearTimeout(timer);
      clearInterval(watcher);
      options.signal?.removeEventListener("abort", abort);
      await this.#client.removeChannel(channel).catch(() => undefined);
    }
  }
}
