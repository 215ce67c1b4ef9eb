// The app-facing half: enqueue (validated and sealed before the store sees
// it), read results, the no-runner signal, pairing approval, revocation.
import {
  bag,
  lookupText,
  nonEmptyText,
  optionalAudience,
  optionalNonEmptyText,
  optionalNumber,
  optionalStrings,
  text,
} from "./args.js";
import { CloudLane } from "./cloud.js";
import { PollingDelivery } from "./delivery.js";
import { generateJobId, generateRunnerId, normalizeUserCode } from "./ids.js";
import { bindApp, recorderFor, snapshotOf, type MetricsSnapshot, type Registry } from "./metrics.js";
import { enqueueInPlace, runsInPlace, sweptResult, type PayloadSource } from "./memory.js";
import { native, PROTOCOL, type SiteKeyringHandle } from "./native.js";
import { livenessWindow, sqlStorePaths } from "./sql-store.js";
import type {
  AvailabilityQuery,
  ByollmAppOptions,
  ByollmStore,
  DeliveredResult,
  EnqueueInput,
  JobHandle,
  JobKind,
  JobRecord,
  NoRunnerReason,
  PendingPairing,
  PollingDeliveryDeps,
  ResultDelivery,
  RunnerAvailability,
  RunnerRecord,
  SizeClass,
  WaitOptions,
} from "./types.js";

export { normalizeUserCode };

const DEFAULT_LIVENESS_MS = 35_000;
/** How long a sealed payload is worth keeping; bound into its signature. */
const ENVELOPE_MAX_AGE_MS = PROTOCOL.envelopeMaxAgeMs;
/** Payloads whose JSON is longer than this (UTF-16 units) are checked and sealed on the thread pool. */
const ASYNC_SEAL_THRESHOLD = PROTOCOL.asyncCryptoThreshold;

/**
 * Every option `enqueue` understands. Anything else is refused, because an
 * ignored option is a job that runs differently than asked with nothing to see.
 */
const ENQUEUE_OPTIONS = new Set<string>([
  "kind", "payload", "owner", "audience", "purpose", "audienceAllow", "dependsOn", "ttlMs", "deadlineAt", "id",
] satisfies (keyof EnqueueInput)[]);

export class ByollmApp {
  readonly #store: ByollmStore;
  readonly #keyring: SiteKeyringHandle;
  readonly #now: () => number;
  /** Unknown user codes per approving source (or owner). */
  readonly #approvals = new native.FailureBudget();
  readonly #livenessMs: number;
  readonly #delivery: ResultDelivery;
  /** The relay side of this site; present only on the cloud lane. */
  readonly cloud: CloudLane | undefined;
  readonly #metrics: Registry | undefined; // metrics:

  constructor(options: ByollmAppOptions) {
    this.#store = options.store;
    this.#keyring = new native.SiteKeyring(options.siteKeys);
    this.#now = options.now ?? Date.now;
    this.#livenessMs = options.livenessMs ?? DEFAULT_LIVENESS_MS;
    this.#metrics = recorderFor(options.store, options.metrics); // metrics:
    bindApp(this, { store: options.store, now: this.#now, livenessMs: this.#livenessMs }); // metrics: what metrics() reads
    this.cloud =
      options.lane === undefined
        ? undefined
        : new CloudLane({ options: options.lane, store: options.store, siteKeys: options.siteKeys, now: this.#now });
    // On the cloud lane devices pair with the relay, so this site cannot see
    // runners: delivery gets no availability instrument rather than one that
    // would always answer "none".
    const deps: PollingDeliveryDeps = {
      ...(options.noRunnerGraceMs === undefined ? {} : { graceMs: options.noRunnerGraceMs }),
      read: (jobId) => this.result(jobId),
      ...(this.cloud === undefined ? { availability: (jobId: string) => this.#availabilityOf(jobId) } : {}),
    };
    this.#delivery = options.delivery?.(deps) ?? new PollingDelivery(deps);
  }

  async #availabilityOf(jobId: string): Promise<{ available: boolean; reason?: string; blocked: boolean }> {
    const job = await this.#store.get(jobId);
    if (!job) return { available: false, reason: "unknown-job", blocked: false };
    // Waiting on a dependency is waiting, not "no runner".
    if (job.claimableAt === null) return { available: true, blocked: true };
    // The record holds the query's fields (kind, owner, audience, audienceAllow) under their names.
    const availability = await this.runnerAvailability(job);
    return {
      available: availability.available,
      ...(availability.reason === undefined ? {} : { reason: availability.reason }),
      blocked: false,
    };
  }

  /** Validate, seal to this site's own key, store; on the cloud lane, publish the stub. */
  async enqueue<K extends JobKind>(input: EnqueueInput<K>): Promise<JobHandle> {
    const unknown = Object.keys(bag("enqueue", input)).filter((key) => !ENQUEUE_OPTIONS.has(key));
    if (unknown.length > 0) {
      throw new Error(
        `enqueue does not understand ${unknown.map((k) => `\`${k}\``).join(", ")}. ` +
          "An option this @byollm/server does not know is refused rather than ignored, because an ignored " +
          "option is a job that runs differently than you asked with nothing to see — most often an SDK older " +
          "than the code calling it. Upgrade @byollm/server, or remove the option.",
      );
    }
    if (this.cloud !== undefined && input.audience !== undefined) {
      throw new Error(
        "enqueue does not take `audience` on the cloud lane. Who may serve a job is derived from the person's " +
          "own mapping — the service they chose, its owner, and that owner's sharing — which your site is not " +
          "told and cannot compute. Remove `audience`; ask for the kind and the purpose, and their decision does " +
          "the rest.",
      );
    }
    checkJobFields(input);

    // One clock reading for both the record and the envelope it binds.
    const createdAt = this.#now();
    const id = input.id ?? generateJobId();
    const deadlineAt = createdAt + ENVELOPE_MAX_AGE_MS;
    // Validated and sealed in one native call: the canonical text, as long as
    // the payload, stays on the native side. A large payload of plain string
    // fields (a long prompt) goes over as its strings, and its JSON is
    // written on the thread pool.
    const fields = largeStringFields(input.payload);
    const payload: PayloadSource = fields !== undefined ? { fields } : { json: payloadJson(input.payload) };
    // The plaintext payload is not handed to the store (its interface never
    // had it); everything else the caller passed goes through unchanged.
    const { payload: _plaintext, ...rest } = input;
    if (this.cloud === undefined && runsInPlace(this.#store)) {
      // Our MemoryStore: validated, sealed and stored in one native call; a
      // large payload validated on the thread pool and sealed at rest on the
      // background thread, off the request's way.
      const job = { ...rest, id };
      const stored = await enqueueInPlace(this.#store, this.#keyring, input.kind, payload, job, deadlineAt, createdAt, ASYNC_SEAL_THRESHOLD);
      if (stored !== null) {
        if ("message" in stored) throw new Error(payloadError(String(input.kind), stored.message));
        return this.#handle(stored);
      }
    }
    const checked = await sealChecked(this.#keyring, input.kind, payload, id, deadlineAt);
    if (!checked.ok) throw new Error(payloadError(String(input.kind), checked.message));

    const record = await this.#store.create(
      {
        ...rest,
        // On the cloud lane who may serve is decided at the relay; `team` defers to it.
        ...(this.cloud === undefined ? {} : { audience: "team" as const }),
        id,
        envelope: checked.envelope,
        sizeClass: checked.sizeClass as SizeClass,
      },
      createdAt,
    );
    // The job is stored before it is published: a relay that is down delays routing, it loses nothing.
    await this.cloud?.publish(record);
    return this.#handle(record);
  }

  #handle(record: JobRecord): JobHandle {
    this.#metrics?.enqueued(record); // metrics:
    return {
      id: record.id,
      record,
      result: (options?: WaitOptions) => {
        const waiting = this.#delivery.waitFor(record.id, options);
        return this.#metrics?.wait(waiting, options) ?? waiting; // metrics: the wait's outcome
      },
      cancel: async () => {
        await this.cancel(record.id);
      },
    };
  }

  /**
   * What an operator watches: jobs by state, runners and pairings from the
   * store; requests, refusals, job latencies and waits counted by this
   * process (docs/operations.md). Plain data, `JSON.stringify`-able.
   */
  async metrics(): Promise<MetricsSnapshot> {
    return snapshotOf(this);
  }

  /** A job's current record (after running the expiry sweep). */
  async job(jobId: string): Promise<JobRecord | null> {
    text("job", "jobId", jobId);
    // The SQL stores sweep and read in one call.
    const paths = sqlStorePaths(this.#store);
    if (paths) return paths.sweepGet(jobId, this.#now());
    await this.#store.expireDue(this.#now());
    return this.#store.get(jobId);
  }

  /** State, outcome and provenance. Check `provenance.untrusted` before showing the text as your own. */
  async result(jobId: string): Promise<DeliveredResult | null> {
    text("result", "jobId", jobId);
    // Our MemoryStore, read by this class's own `job`: one native call.
    if (typeof jobId === "string" && this.job === ORIGINAL_JOB && runsInPlace(this.#store)) {
      return sweptResult(this.#store, jobId, this.#now());
    }
    const job = await this.job(jobId);
    if (!job) return null;
    return {
      jobId: job.id,
      state: job.state,
      ...(job.outcome === null ? {} : { outcome: job.outcome }),
      ...(job.provenance === null ? {} : { provenance: job.provenance }),
    };
  }

  /** Queued jobs cancel at once; held jobs at the runner's next heartbeat. */
  async cancel(jobId: string): Promise<JobRecord | null> {
    text("cancel", "jobId", jobId);
    const cancelled = await this.#store.cancel(jobId, this.#now());
    if (cancelled && this.cloud) {
      // The job is cancelled here whatever the relay says; its own deadline sweep is the backstop.
      await this.cloud.cancel(jobId).catch(() => undefined);
    }
    return cancelled;
  }

  /** Could a live runner take a job of this shape? The same audience rule the claim applies. */
  async runnerAvailability(query: AvailabilityQuery): Promise<RunnerAvailability> {
    if (this.cloud !== undefined) {
      throw new Error(
        "runnerAvailability cannot answer on the cloud lane. It counts runners this site knows about, and on " +
          "the cloud lane devices pair with the relay rather than with you — so the answer would be `none` " +
          "whatever the truth is. Enqueue the job: the result says whether it ran, and the person's own " +
          "dashboard says why not.",
      );
    }
    const where = "runnerAvailability";
    bag(where, query);
    const kind = text(where, "kind", query.kind);
    const owner = text(where, "owner", query.owner);
    // Any spelling is answered, as the claim would match it: an unknown one
    // as `private` (src/audience.rs, `Audience::matched_as`).
    const audience = query.audience == null ? "private" : text(where, "audience", query.audience);
    const audienceAllow = optionalStrings(where, "audienceAllow", query.audienceAllow);
    const now = this.#now();
    const runners = await this.#store.listRunners();
    const answer = native.runnerAvailability(
      runners,
      { kind, owner, audience, ...(audienceAllow === undefined ? {} : { audienceAllow }) },
      now,
      livenessWindow(this.#store, this.#livenessMs),
    );
    return answer.available
      ? { available: true, candidates: answer.candidates }
      : { available: false, reason: answer.reason as NoRunnerReason, candidates: answer.candidates };
  }

  /**
   * Approve a pairing; `owner` must come from the approving user's own
   * session. Unknown codes are budgeted per `source` (the approving
   * request's, named as for createFetchHandler), else per owner: past 32 a
   * minute the call throws a `rate-limited` error (its `retryAfter` in
   * seconds) before the store is asked.
   */
  async approvePairing(args: { userCode: string; owner: string; source?: string }): Promise<RunnerRecord> {
    bag("approvePairing", args);
    const userCode = lookupText("approvePairing", "userCode", args.userCode);
    // An empty owner would consume the pairing and then fail the daemon's
    // own check of the approval: refused before anything changes.
    const owner = nonEmptyText("approvePairing", "owner", args.owner);
    const now = this.#now();
    const budget = typeof args.source === "string" && args.source !== "" ? `source:${args.source}` : `owner:${owner}`;
    if (this.#approvals.spent(budget, now)) {
      throw Object.assign(new Error("too many unknown pairing codes; try again later"), {
        code: "rate-limited",
        retryAfter: this.#approvals.retryAfter,
      });
    }
    let runner: RunnerRecord;
    try {
      runner = await this.#store.approvePairing({
        userCode: normalizeUserCode(userCode),
        owner,
        runnerId: generateRunnerId(),
        now,
      });
    } catch (error) {
      if (error instanceof Error && error.message.startsWith("unknown pairing code")) this.#approvals.failed(budget, now);
      throw error;
    }
    this.#metrics?.pairing("approved"); // metrics:
    return runner;
  }

  async denyPairing(userCode: string): Promise<void> {
    await this.#store.denyPairing(normalizeUserCode(lookupText("denyPairing", "userCode", userCode)), this.#now());
    this.#metrics?.pairing("denied"); // metrics:
  }

  /** What a pending, unexpired code refers to, for the approval page; otherwise null. */
  async pendingPairing(userCode: string): Promise<PendingPairing | null> {
    const code = normalizeUserCode(lookupText("pendingPairing", "userCode", userCode));
    const pairing = await this.#store.getPairingByUserCode(code);
    if (pairing?.state !== "pending") return null;
    if (pairing.expiresAt <= this.#now()) return null;
    return {
      label: pairing.label,
      platform: pairing.platform,
      daemonVersion: pairing.daemonVersion,
      capabilities: pairing.capabilities.map((c) => ({ kind: c.kind, model: c.model })),
      expiresAt: pairing.expiresAt,
    };
  }

  /** A user's runners, revoked ones included. */
  async runners(owner: string): Promise<RunnerRecord[]> {
    return this.#store.listRunners(text("runners", "owner", owner));
  }

  async revokeRunner(runnerId: string): Promise<void> {
    return this.#store.revokeRunner(text("revokeRunner", "runnerId", runnerId), this.#now());
  }

  /** The expiry sweep; idempotent, safe on a timer. */
  async sweep(): Promise<JobRecord[]> {
    return this.#store.expireDue(this.#now());
  }
}

/**
 * The job fields of an enqueue, each of the type the stores take (the
 * payload is the core validator's). `owner` may not be empty: no runner
 * can be paired to an empty owner, so such a job could only ever reach
 * strangers.
 */
function checkJobFields(input: EnqueueInput): void {
  const where = "enqueue";
  nonEmptyText(where, "owner", input.owner);
  optionalAudience(where, input.audience);
  optionalStrings(where, "audienceAllow", input.audienceAllow);
  optionalStrings(where, "dependsOn", input.dependsOn);
  optionalNumber(where, "ttlMs", input.ttlMs);
  optionalNumber(where, "deadlineAt", input.deadlineAt);
  optionalNonEmptyText(where, "id", input.id);
}

/**
 * The payload as JSON for the core's validator; `undefined` when absent. A
 * value JSON cannot carry (a BigInt, a cycle) is passed as `null`, which the
 * schema refuses like any other non-object.
 */
function payloadJson(payload: unknown): string | undefined {
  try {
    return JSON.stringify(payload);
  } catch {
    return "null";
  }
}

/**
 * A payload's keys and values when it is a plain object whose own enumerable
 * properties are all data properties holding strings, of more than
 * `ASYNC_SEAL_THRESHOLD` units in all; otherwise undefined. For such an
 * object `JSON.stringify` writes exactly `{"key":"value",…}` in
 * `Object.keys` order (no `toJSON`, getters, or other types can intervene),
 * which the keyring writes itself. Checking costs a few property reads; the
 * scan `JSON.stringify` would make of a megabyte prompt is what it saves.
 */
export function largeStringFields(payload: unknown): [string[], string[]] | undefined {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return undefined;
  const proto: unknown = Object.getPrototypeOf(payload);
  if (proto !== Object.prototype && proto !== null) return undefined;
  if ("toJSON" in payload) return undefined;
  const keys = Object.keys(payload);
  const values = new Array<string>(keys.length);
  let units = 0;
  for (let at = 0; at < keys.length; at += 1) {
    const held = Object.getOwnPropertyDescriptor(payload, keys[at] as string);
    if (held === undefined || !("value" in held) || typeof held.value !== "string") return undefined;
    values[at] = held.value;
    units += held.value.length;
  }
  return units > ASYNC_SEAL_THRESHOLD ? [keys, values] : undefined;
}

/** Validate and seal a payload to the site at rest (the core picks inline or the thread pool by its size). */
function sealChecked(keyring: SiteKeyringHandle, kind: unknown, payload: PayloadSource, id: string, deadlineAt: number) {
  return "fields" in payload
    ? keyring.sealChecked(kind, undefined, payload.fields[0], payload.fields[1], id, deadlineAt)
    : keyring.sealChecked(kind, payload.json, undefined, undefined, id, deadlineAt);
}

/** The core reports the issue list; the sentence around it names the kind. */
function payloadError(kind: string, message: string): string {
  return message.startsWith("invalid ") ? message : `invalid ${kind} payload — ${message}`;
}

/** `ByollmApp.prototype.job` as defined here: `result` reads natively only when `job` is this one. */
const ORIGINAL_JOB = ByollmApp.prototype.job;
