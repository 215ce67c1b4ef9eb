// What `app.metrics()` answers and `createMetricsHandler` serves as JSON:
// the snapshot's shape, shared by ts/metrics.ts and ts/otel.ts.
import type { Endpoint } from "./types.js";

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

/** A count for each name. */
type Counts<K extends string> = Readonly<Record<K, number>>;

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
  readonly jobs: Counts<"queued" | "claimed" | "running" | "ok" | "error" | "canceled" | "expired"> | null;
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
  /**
   * `audience`: jobs a daemon released with reason `refused`. `rateLimited`
   * (`rate-limited`): a source over its share of pending pairings or its
   * budget of unknown device codes.
   */
  readonly refusals: Counts<"unauthorized" | "revoked" | "badRequest" | "notFound" | "bodyTooLarge" | "audience" | "rateLimited">;
  readonly jobLatency: {
    /** Enqueue → first claim. */
    readonly queueWait: MetricsHistogram;
    /** Enqueue → accepted result. */
    readonly total: MetricsHistogram;
  };
  /** How `handle.result()` waits ended, and how long they took. */
  readonly waits: {
    readonly outcomes: Counts<"answered" | "canceled" | "expired" | "noRunner" | "timedOut" | "fallback" | "aborted" | "error">;
    readonly duration: MetricsHistogram;
  };
}

export type WaitOutcome = "answered" | "canceled" | "expired" | "no_runner" | "timed_out" | "fallback" | "aborted" | "error";
