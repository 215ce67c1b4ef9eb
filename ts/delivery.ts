// The default way an app waits for a job: poll the store until the job is
// terminal, with a timeout and a sustained no-runner signal.
import { NoRunnerAvailableError, ResultTimeoutError } from "./errors.js";
import type { DeliveredResult, PollingDeliveryDeps, ResultDelivery, WaitOptions } from "./types.js";

export { NoRunnerAvailableError, ResultTimeoutError };

const DEFAULT_TIMEOUT_MS = 300_000;
const POLL_INTERVAL_MS = 500;
/** A no-runner signal must last this long before it is believed (a daemon restarting is not "no runner"). */
const DEFAULT_GRACE_MS = 10_000;

const TERMINAL = new Set(["ok", "error", "canceled", "expired"]);

const realSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class PollingDelivery implements ResultDelivery {
  readonly #deps: PollingDeliveryDeps;

  constructor(deps: PollingDeliveryDeps) {
    this.#deps = deps;
  }

  async waitFor(jobId: string, options: WaitOptions = {}): Promise<DeliveredResult> {
    const { read, availability } = this.#deps;
    const sleep = this.#deps.sleep ?? realSleep;
    const now = this.#deps.now ?? Date.now;
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const started = now();
    const stranded = strandedFor(now, this.#deps.graceMs ?? DEFAULT_GRACE_MS);

    for (;;) {
      // Checked once per round, not during the sleep: an abort lands within one interval.
      options.signal?.throwIfAborted();

      const current = await read(jobId);
      // error/expired resolve too: the caller inspects `state`, the wait is over.
      if (current !== null && TERMINAL.has(current.state)) return current;

      const reason = stranded(availability === undefined ? undefined : await availability(jobId));
      if (reason !== undefined) return noRunner(jobId, reason, options);

      if (now() - started >= timeoutMs) throw new ResultTimeoutError(jobId, timeoutMs);
      await sleep(POLL_INTERVAL_MS);
    }
  }
}

/**
 * The clock of the no-runner signal, fed each availability reading: the
 * reason once "no runner" has lasted `graceMs` without a break, else undefined.
 */
function strandedFor(now: () => number, graceMs: number): (signal: { available: boolean; reason?: string; blocked: boolean } | undefined) => string | undefined {
  let since: number | null = null;
  return (signal) => {
    // A job waiting on a dependency is waiting, not stranded.
    if (signal === undefined || signal.available || signal.blocked) {
      since = null;
      return undefined;
    }
    since ??= now();
    return now() - since >= graceMs ? (signal.reason ?? "no-runner-online") : undefined;
  };
}

/** The end of a wait nobody can serve: the app's `onNoRunner` substitute, else NoRunnerAvailableError. */
async function noRunner(jobId: string, reason: string, options: WaitOptions): Promise<DeliveredResult> {
  const substitute = await options.onNoRunner?.(reason);
  if (substitute === undefined) throw new NoRunnerAvailableError(jobId, reason);
  return labelFallback(jobId, substitute as string | DeliveredResult);
}

/**
 * An app-supplied substitute, marked as not coming from the user's own compute.
 * The flag is written last so a caller-built record cannot clear it.
 */
export function labelFallback(jobId: string, substitute: string | DeliveredResult): DeliveredResult {
  if (typeof substitute === "string") {
    return { jobId, state: "ok", outcome: { outcome: "ok", text: substitute }, fallback: true };
  }
  return { ...substitute, fallback: true };
}

const AVAILABILITY_INTERVAL_MS = 2_000;

/**
 * Start hearing about one job's changes: call `onChange` when it may have
 * changed (spurious calls are fine); answers the function that stops.
 */
export type JobListener = (jobId: string, onChange: () => void) => () => void | Promise<void>;

/**
 * A wait that hears of a job's changes from `listen` (a push: Realtime,
 * LISTEN/NOTIFY) instead of polling it; runner liveness is still polled,
 * since "nobody has heartbeated lately" is the absence of a change.
 */
export async function waitWithPush(
  deps: PollingDeliveryDeps,
  listen: JobListener,
  jobId: string,
  options: WaitOptions = {},
): Promise<DeliveredResult> {
  options.signal?.throwIfAborted();
  // Already finished: a subscription would wait for an event that is past.
  const first = await deps.read(jobId);
  if (first !== null && TERMINAL.has(first.state)) return first;

  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;

  // Each wait settles its own promise (one delivery object serves every
  // job of the app; waits must never answer each other).
  // The first of finish/fail settles the wait; a promise ignores the rest.
  let done = false;
  let finish!: (r: DeliveredResult) => void;
  let fail!: (e: unknown) => void;
  const settled = new Promise<DeliveredResult>((resolve, reject) => {
    finish = (r) => { done = true; resolve(r); };
    fail = (e) => { done = true; reject(e); };
  });
  // Every asynchronous path ends in finish/fail: an escaped rejection
  // would be unhandled and end the process.
  const check = (): void => {
    if (done) return;
    deps
      .read(jobId)
      .then((current) => {
        if (current !== null && TERMINAL.has(current.state)) finish(current);
      })
      .catch(fail);
  };

  let stop: () => void | Promise<void> = () => undefined;
  try {
    stop = listen(jobId, check);
  } catch (error) {
    fail(error);
  }
  // The job may have finished between the first read and the subscription.
  check();

  const timer = setTimeout(() => fail(new ResultTimeoutError(jobId, timeoutMs)), timeoutMs);
  const stranded = strandedFor(deps.now ?? Date.now, deps.graceMs ?? DEFAULT_GRACE_MS);
  const watcher = setInterval(() => {
    const availability = deps.availability;
    if (availability === undefined) return;
    (async () => {
      const reason = stranded(await availability(jobId));
      if (reason !== undefined) finish(await noRunner(jobId, reason, options));
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
    try {
      await stop();
    } catch {
      // Stopping a listener that already failed is not the caller's problem.
    }
  }
}
