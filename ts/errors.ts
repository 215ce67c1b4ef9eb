// Errors the package throws on purpose, each with the fields a caller branches on.

/** `result()` gave up because no runner can take the job. */
export class NoRunnerAvailableError extends Error {
  override readonly name = "NoRunnerAvailableError";
  readonly jobId: string;
  readonly reason: string;

  constructor(jobId: string, reason: string) {
    super(
      `no runner is available to execute job ${jobId} (${reason}). ` +
        "Fall back to a hosted model, or prompt the user to start their runner.",
    );
    this.jobId = jobId;
    this.reason = reason;
  }
}

/** `result()` waited its whole timeout while a runner could still have been working. */
export class ResultTimeoutError extends Error {
  override readonly name = "ResultTimeoutError";
  readonly jobId: string;
  readonly timeoutMs: number;

  constructor(jobId: string, timeoutMs: number) {
    super(`job ${jobId} did not finish within ${String(timeoutMs)}ms`);
    this.jobId = jobId;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * The relay did not (or would not) answer. `retryable` separates "try again
 * shortly" (5xx, 429, `not-ready`) from a standing refusal such as a bad
 * signature, which retrying cannot fix.
 */
export class RelayUnavailable extends Error {
  readonly retryable: boolean;
  readonly code: string;

  constructor(message: string, retryable: boolean, code: string) {
    super(message);
    this.name = "RelayUnavailable";
    this.retryable = retryable;
    this.code = code;
  }
}

/**
 * The relay answered and declined to queue the job (HTTP 409 on enqueue).
 * Codes seen: `purpose-not-declared`, `slot-unsatisfiable`, `slot-waiting`;
 * an unknown code is still a refusal, so a caller's `instanceof` keeps working.
 */
export class EnqueueRefused extends Error {
  readonly code: string;

  constructor(message: string, code: string) {
    super(message);
    this.name = "EnqueueRefused";
    this.code = code;
  }
}
