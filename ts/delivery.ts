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
    const graceMs = this.#deps.graceMs ?? DEFAULT_GRACE_MS;
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const started = now();
    let noRunnerSince: number | null = null;

    for (;;) {
      // Checked once per round, not during the sleep: an abort lands within one interval.
      options.signal?.throwIfAborted();

      const current = await read(jobId);
      // error/expired resolve too: the caller inspects `state`, the wait is over.
      if (current !== null && TERMINAL.has(current.state)) return current;

      const signal = availability === undefined ? undefined : await availability(jobId);
      if (signal === undefined || signal.available || signal.blocked) {
        // A job waiting on a dependency is waiting, not stranded.
        noRunnerSince = null;
      } else {
        noRunnerSince ??= now();
        if (now() - noRunnerSince >= graceMs) {
          const reason = signal.reason ?? "no-runner-online";
          const substitute = await options.onNoRunner?.(reason);
          if (substitute !== undefined) return labelFallback(jobId, substitute as string | DeliveredResult);
          throw new NoRunnerAvailableError(jobId, reason);
        }
      }

      if (now() - started >= timeoutMs) throw new ResultTimeoutError(jobId, timeoutMs);
      await sleep(POLL_INTERVAL_MS);
    }
  }
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
