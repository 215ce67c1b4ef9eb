// MemoryStore: the reference's in-process store, backed by the Rust store
// (src/store, bound in src/binding/store.rs). Same async interface, same
// record shapes and key order; claims, heartbeats, sweeps and result reads
// cost O(log N) instead of a pass over every job.
//
// This file only moves values across the boundary: it flattens arguments
// into strings and numbers, and turns the native JSON rows back into the
// reference's record objects. Every rule lives in Rust.
import { optionalNumber, optionalStrings, text } from "./args.js";
import {
  hostPath,
  native,
  PROTOCOL,
  type EnqueuedJob,
  type NativeMemoryStoreHandle,
  type NativeMetricsHandle,
  type SiteKeyringHandle,
  type StoreCounts,
} from "./native.js";
import { OPERATION_METHODS } from "./operations.js";
import type {
  AdoptArgs,
  DeliveredResult,
  ApproveArgs,
  ByollmStore,
  ClaimArgs,
  CompleteArgs,
  CompleteResult,
  JobRecord,
  LeaseRef,
  MemoryStoreOptions,
  PairingRecord,
  ReleaseArgs,
  RenewArgs,
  RenewResult,
  RunnerRecord,
  StoredJobInput,
  TouchArgs,
} from "./types.js";

/** A record as the native side sends it (layout documented in src/store/out.rs). */
export type JobRow = [
  id: string,
  kind: string,
  /** `[]` for a large sealed envelope the store left out (see `MemoryStore`). */
  envelope: unknown,
  sizeClass: string,
  audience: string,
  purpose: 0 | [unknown],
  owner: string,
  audienceAllow: 0 | string[],
  dependsOn: string[],
  state: string,
  lease: null | [string, string, number],
  completedByLeaseId: string | null,
  createdAt: number,
  claimableAt: number | null,
  ttlMs: number,
  deadlineAt: number | null,
  refusedBy: string[],
  attempts: number,
  outcome: unknown,
  provenance: unknown,
  updatedAt: number,
];

/**
 * An envelope as a native row carries it: five sealed parts, `[array]` for a
 * caller's array, or their own value. (`[]`, a large envelope left out, is
 * handled by `jobRecordFromRow`.)
 */
function envelopeFromRow(envelope: unknown): unknown {
  if (!Array.isArray(envelope)) return envelope;
  return envelope.length === 1
    ? envelope[0]
    : {
        ciphertext: envelope[0],
        recipientKeyId: envelope[1],
        senderKeyId: envelope[2],
        direction: envelope[3],
        deadlineAt: envelope[4],
      };
}

/** Turn the accessor into a plain data property holding `value` (same key position). */
function settle(record: object, value: unknown): void {
  try {
    Object.defineProperty(record, "envelope", { value, writable: true, enumerable: true, configurable: true });
  } catch {
    // A frozen or sealed record keeps its accessor, which serves `value`.
  }
}

/**
 * A record whose envelope is still in the native store: the store, the job
 * id the record was made for, and, once read or assigned, the value (kept
 * here only for a record that could not take a plain property back, i.e. a
 * sealed or frozen one).
 */
interface Deferred {
  readonly store: NativeMemoryStoreHandle;
  readonly id: string;
  loaded: boolean;
  held: unknown;
}

/**
 * Deferred records' state, keyed by the record. One getter and one setter
 * serve every record, so records made the same way share V8's hidden class.
 * (A pair of closures per record gave each record a hidden class of its own:
 * 0.4 KB more per enqueued job after a burst, in V8's old space.)
 */
const deferred = new WeakMap<object, Deferred>();

/** The deferred record `of` is, or inherits its envelope accessor from. */
function deferredOwner(of: object): object | undefined {
  for (let at: object | null = of; at !== null; at = Object.getPrototypeOf(at) as object | null) {
    if (deferred.has(at)) return at;
  }
  return undefined;
}

/** `record` now holds `value`: a plain property from here on, unless it is sealed or frozen. */
function settleDeferred(record: object, state: Deferred, value: unknown): void {
  state.loaded = true;
  state.held = value;
  settle(record, value);
  if (Object.getOwnPropertyDescriptor(record, "envelope")?.get === undefined) deferred.delete(record);
}

// Read through an object inheriting from a record, or assigned on one, the
// accessor acts as a plain inherited property would: the read loads the
// record's own envelope, the assignment gives the inheriting object its own.
const envelopeAccessor: PropertyDescriptor = {
  enumerable: true,
  configurable: true,
  get(this: object): unknown {
    const owner = deferredOwner(this);
    const state = owner === undefined ? undefined : deferred.get(owner);
    if (owner === undefined || state === undefined) return undefined;
    if (!state.loaded) settleDeferred(owner, state, state.store.sealedEnvelope(state.id) ?? undefined);
    return state.held;
  },
  set(this: object, value: unknown) {
    // A plain property of a frozen object refuses writes (TypeError in
    // strict code); the setter would otherwise accept them silently.
    if (Object.isFrozen(this)) throw new TypeError("Cannot assign to read only property 'envelope' of object");
    const state = deferred.get(this);
    if (state !== undefined) settleDeferred(this, state, value);
    else settle(this, value);
  },
};

/**
 * Build the reference's record object (its key order) from a native row.
 * A row may carry `[]` for a large envelope; the record then reads it from
 * the store on first access: an enumerable accessor in the same key
 * position, so JSON, spreading, key order and deep equality see the same
 * value a plain property would hold. Exact because the store keeps no
 * retention: a job id never changes its envelope.
 *
 * The keys are `PROTOCOL.jobKeys` (the core's list, which the native row
 * follows), written out one by one: a loop over the list measured 4-6x
 * slower per record (keyed stores instead of named ones). A test pins these
 * keys to the list.
 *
 * The record is built key by key (named stores) rather than as a literal:
 * that way the accessor is added as a new key, and every deferred record
 * shares one hidden class. A literal given the accessor afterwards turns a
 * data property into an accessor, which sends a V8 object to dictionary
 * mode (0.3 KB more per queued job after a burst of enqueues, measured).
 */
export function jobRecordFromRow(row: JobRow, lazy?: NativeMemoryStoreHandle): JobRecord {
  const lease = row[10];
  const purpose = row[5];
  const allow = row[7];
  const envelope = row[2];
  const record = {} as Record<keyof JobRecord, unknown>;
  record.id = row[0];
  record.kind = row[1];
  if (lazy !== undefined && Array.isArray(envelope) && envelope.length === 0) {
    Object.defineProperty(record, "envelope", envelopeAccessor);
    deferred.set(record, { store: lazy, id: row[0], loaded: false, held: undefined });
  } else {
    record.envelope = envelopeFromRow(envelope);
  }
  record.sizeClass = row[3];
  record.audience = row[4];
  record.purpose = purpose === 0 ? undefined : purpose[0];
  record.owner = row[6];
  record.audienceAllow = allow === 0 ? undefined : allow;
  record.dependsOn = row[8];
  record.state = row[9];
  record.lease = lease === null ? null : { id: lease[0], runnerId: lease[1], expiresAt: lease[2] };
  record.completedByLeaseId = row[11];
  record.createdAt = row[12];
  record.claimableAt = row[13];
  record.ttlMs = row[14];
  record.deadlineAt = row[15];
  record.refusedBy = row[16];
  record.attempts = row[17];
  record.outcome = row[18];
  record.provenance = row[19];
  record.updatedAt = row[20];
  return record as unknown as JobRecord;
}

function jobFromJson(text: string | null | undefined, lazy: NativeMemoryStoreHandle | undefined): JobRecord | null {
  return text == null ? null : jobRecordFromRow(JSON.parse(text) as JobRow, lazy);
}

/** A record the native side sent as JSON text, or null for none. */
function parsed<T>(text: string | null | undefined): Promise<T | null> {
  return Promise.resolve(text == null ? null : (JSON.parse(text) as T));
}

function jobsFromJson(text: string | string[], lazy: NativeMemoryStoreHandle | undefined): JobRecord[] {
  // A huge answer (a sweep after an outage, allJobs on a big store) comes in
  // several arrays: one string could not hold it.
  const rows = typeof text === "string" ? (JSON.parse(text) as JobRow[]) : text.flatMap((part) => JSON.parse(part) as JobRow[]);
  const out = new Array<JobRecord>(rows.length);
  for (let at = 0; at < rows.length; at += 1) out[at] = jobRecordFromRow(rows[at] as JobRow, lazy);
  return out;
}

/** A lease-ref field as the native side takes it; a non-string never matches a job. */
function refText(value: unknown): string {
  return typeof value === "string" ? value : "\u0000";
}

function flatRefs(leases: readonly LeaseRef[]): string[] {
  const flat = new Array<string>(leases.length * 2);
  for (let at = 0; at < leases.length; at += 1) {
    const ref = leases[at] as LeaseRef;
    flat[2 * at] = refText(ref.jobId);
    flat[2 * at + 1] = refText(ref.leaseId);
  }
  return flat;
}

/** The sealed-envelope shape `seal` produces, which the native store keeps compactly. */
function sealedParts(envelope: unknown): string[] | undefined {
  if (typeof envelope !== "object" || envelope === null) return undefined;
  const e = envelope as Record<string, unknown>;
  if (
    typeof e.ciphertext !== "string" ||
    typeof e.recipientKeyId !== "string" ||
    typeof e.senderKeyId !== "string" ||
    typeof e.direction !== "string" ||
    typeof e.deadlineAt !== "number"
  ) {
    return undefined;
  }
  const keys = Object.keys(e);
  const wire = PROTOCOL.envelopeKeys;
  if (keys.length !== wire.length || keys.some((key, at) => key !== wire[at])) return undefined;
  return [e.ciphertext, e.recipientKeyId, e.senderKeyId, e.direction];
}

/** `JSON.stringify` that never returns `undefined` (functions, undefined → `null`). */
function jsonOf(value: unknown): string {
  return JSON.stringify(value) ?? "null";
}

/**
 * What calls run in place use of a MemoryStore: its native store, that store
 * again when records read their envelope lazily, and the bell for its
 * watchers. Set by the constructor; only our MemoryStores have one.
 */
interface InPlace {
  readonly native: NativeMemoryStoreHandle;
  readonly lazy: NativeMemoryStoreHandle | undefined;
  readonly notify: () => void;
}
const inPlaceStores = new WeakMap<object, InPlace>();

/**
 * `ByollmApp.result` on a store `runsInPlace` accepts, in one native call:
 * the expiry sweep, then the job's state, outcome and provenance, without
 * the whole record. Watchers hear what the sweep changed.
 */
export function sweptResult(store: MemoryStore, jobId: string, now: number): DeliveredResult | null {
  const inPlace = inPlaceStores.get(store) as InPlace;
  const text = inPlace.native.sweptResult(jobId, now);
  inPlace.notify();
  return text == null ? null : (JSON.parse(text) as DeliveredResult);
}

/**
 * What one of our MemoryStores counts for the metrics (jobs by state,
 * runners by state, pending pairings), read natively; undefined for any
 * other store.
 */
export function nativeStoreCounts(store: unknown, now: number, livenessMs: number): StoreCounts | undefined {
  const inPlace = typeof store === "object" && store !== null ? inPlaceStores.get(store) : undefined;
  return inPlace?.native.storeCounts(now, livenessMs);
}

/**
 * Every store method a call served in place on our MemoryStore stands for:
 * each engine operation's (`OPERATION_METHODS`), an enqueue's `create`
 * (`enqueueInPlace`) and a result's sweep and read (`sweptResult`).
 */
export const IN_PLACE_METHODS: readonly string[] = [
  ...new Set<keyof ByollmStore>([...Object.values(OPERATION_METHODS).flat(), "create", "expireDue", "get"]),
];

/**
 * Whether `store` is one of our MemoryStores exactly as this module made it:
 * a call served in place skips the methods in `IN_PLACE_METHODS`, so a
 * subclass, a proxy, an instance with methods of its own or a prototype with
 * any of them patched (anything that could change what they do) is served
 * through its methods instead.
 */
export function runsInPlace(store: unknown): store is MemoryStore {
  if (typeof store !== "object" || store === null || !inPlaceStores.has(store)) return false;
  if (Object.getPrototypeOf(store) !== MemoryStore.prototype || !Reflect.ownKeys(store).every((key) => OWN_STATE.has(key))) return false;
  const proto = MemoryStore.prototype as unknown as Record<string, unknown>;
  for (let at = 0; at < IN_PLACE_METHODS.length; at += 1) {
    if (proto[IN_PLACE_METHODS[at] as string] !== ORIGINAL_METHODS[at]) return false;
  }
  return true;
}

/**
 * Our native store when the engine may run its operations in place (a store
 * `runsInPlace` accepts), and the bell for its watchers; else undefined.
 */
export function nativeStoreOf(store: unknown): { native: NativeMemoryStoreHandle; notify: () => void } | undefined {
  return runsInPlace(store) ? inPlaceStores.get(store) : undefined;
}

/** What an enqueue stores besides its envelope and size class (`StoredJobInput`'s other fields). */
export interface EnqueuedFields {
  readonly id: unknown;
  readonly owner: unknown;
  readonly audience?: unknown;
  readonly purpose?: unknown;
  readonly audienceAllow?: unknown;
  readonly dependsOn?: unknown;
  readonly ttlMs?: unknown;
  readonly deadlineAt?: unknown;
}

/** A payload as an enqueue hands it over: its JSON text (absent: no payload), or a large one's string fields. */
export type PayloadSource = { readonly json: string | undefined } | { readonly fields: readonly [string[], string[]] };

const isStrings = (value: unknown): value is string[] =>
  Array.isArray(value) && value.every((item) => typeof item === "string");

/**
 * Validate, seal at rest and store a job, for an enqueue on a store
 * `runsInPlace` accepts: the new record, or the validator's refusal
 * (nothing stored). A payload up to `threshold` units is done in one native
 * call; a larger one is validated on the thread pool, its at-rest seal left
 * to the background thread (the store's records read it by id when someone
 * asks). Null when it does not apply (a field of a type only the general
 * path handles, which then fails the way it always has, in the same order;
 * or a large payload on a store whose records carry their envelopes).
 */
export function enqueueInPlace(
  store: MemoryStore,
  keyring: SiteKeyringHandle,
  kind: unknown,
  payload: PayloadSource,
  job: EnqueuedFields,
  envelopeDeadlineAt: number,
  now: number,
  threshold: number,
): JobRecord | { message: string } | null | Promise<JobRecord | { message: string } | null> {
  // The shapes `create` hands the native side without a throw; anything
  // else goes the general way, which validates the payload first.
  const args = inPlaceJobArgs(job);
  if (args === null) return null;
  const { native, lazy, notify } = inPlaceStores.get(store) as InPlace;
  if ("json" in payload && (payload.json === undefined || payload.json.length <= threshold)) {
    const answer = native.enqueue(keyring, kind, payload.json, envelopeDeadlineAt, args, now);
    if (typeof answer !== "string") return answer;
    const record = jobFromJson(answer, lazy) as JobRecord;
    notify();
    return record;
  }
  if (lazy === undefined) return null;
  const fields = "fields" in payload ? payload.fields : undefined;
  const json = "json" in payload ? payload.json : undefined;
  const prepared = keyring.prepareCheckedAsync(kind, json, fields?.[0], fields?.[1], args.id, envelopeDeadlineAt);
  return prepared.then((ready) => {
    if ("message" in ready) return ready;
    const record = jobFromJson(native.enqueuePrepared(ready, String(kind), args, now), lazy) as JobRecord;
    notify();
    return record;
  });
}

/** The job fields of an enqueue as the native calls take them, or null for types only the store's own `create` takes. */
function inPlaceJobArgs(job: EnqueuedFields): EnqueuedJob | null {
  const { id, owner, audience, purpose, audienceAllow, dependsOn, ttlMs, deadlineAt } = job;
  if (typeof id !== "string" || typeof owner !== "string") return null;
  if (audience != null && typeof audience !== "string") return null;
  const allow = audienceAllow ? (isStrings(audienceAllow) ? [...audienceAllow] : null) : undefined;
  const after = dependsOn ? (isStrings(dependsOn) ? [...dependsOn] : null) : undefined;
  if (allow === null || after === null) return null;
  if (ttlMs != null && typeof ttlMs !== "number") return null;
  if (deadlineAt != null && typeof deadlineAt !== "number") return null;
  let purposeJson: string | undefined;
  if (purpose !== undefined) {
    try {
      purposeJson = jsonOf(purpose);
    } catch {
      return null;
    }
  }
  return {
    id,
    owner,
    audience: audience ?? undefined,
    purposeJson,
    audienceAllow: allow,
    dependsOn: after,
    ttlMs: ttlMs ?? undefined,
    deadlineAt: deadlineAt ?? undefined,
  };
}

export interface NativeMemoryStoreOptions extends MemoryStoreOptions {
  /**
   * Forget terminal jobs this many ms after they ended (checked by every
   * sweep). Off by default, as in the reference, which keeps every job for
   * the life of the process. A dropped job reads as unknown (`get` → null),
   * and creating its id again makes a new job.
   */
  readonly retentionMs?: number;
  /**
   * Keep the store in this file (SQLite, created when missing): jobs,
   * results, pairings and paired runners survive a restart. Every call that
   * changes them is on disk before it answers; payloads are there only
   * sealed. One process owns the file: a second one opening it throws.
   */
  readonly path?: string;
  /**
   * `"normal"` (default): a commit survives a killed process. `"full"`:
   * every commit is fsynced, so it also survives a power loss (slower).
   */
  readonly synchronous?: "normal" | "full";
}

// The store's own state under symbol keys, not #private fields: a method
// called through a Proxy of the store (instrumentation wraps stores so) runs
// with the proxy as `this`, which can read these through the proxy but not
// a private field, as with the reference's store, whose fields are public.
const NATIVE = Symbol("native");
const LAZY = Symbol("lazy");
const WATCHERS = Symbol("watchers");
const NOTIFY = Symbol("notify");
/** The only own properties a store the engine may run in place has. */
const OWN_STATE = new Set<PropertyKey>([NATIVE, LAZY, WATCHERS]);

/** Our MemoryStores without `path`: their state ends with the process. */
const processOnly = new WeakSet<object>();

/** The variables serverless hosts set in every function's environment. */
const SERVERLESS_HOSTS = ["VERCEL", "AWS_LAMBDA_FUNCTION_NAME", "NETLIFY"] as const;
let warnedServerless = false;

/**
 * Once a process: when a handler starts serving a MemoryStore without `path`
 * on a serverless host, say that pairings and jobs will not survive between
 * its instances, and what to use instead. The daemon's pair request, the
 * person's approval and the daemon's claims reach different instances there,
 * each with a store of its own, so pairing fails with no other sign.
 */
export function warnIfServerless(store: unknown, env: Record<string, string | undefined> = process.env): void {
  if (warnedServerless || typeof store !== "object" || store === null || !processOnly.has(store)) return;
  const host = SERVERLESS_HOSTS.find((name) => env[name] !== undefined && env[name] !== "");
  if (host === undefined) return;
  warnedServerless = true;
  console.warn(
    `byollm: a MemoryStore without \`path\` is serving requests on a serverless host (${host} is set). ` +
      "Each instance has its own store, so pairings and jobs will not survive between instances: a daemon pairs on one, " +
      "the approval and its claims reach others, and pairing fails. Use postgresStore (@byollm/server/postgres) or " +
      "supabaseStore (@byollm/server/supabase) on a shared database; MemoryStore({ path }) suits one long-running process.",
  );
}

/**
 * The in-process store. Without `path` everything lives in this process and
 * nothing is persisted; with `path` the same store is written through to a
 * local SQLite file and read back from it at start. The state machine, claim
 * order and expiry are the reference's.
 * Opaque values (outcomes, provenance, capabilities, devices, pairing
 * records) are kept as JSON: they come back deep-equal, not as the same
 * object, and keys holding `undefined` inside them are not kept.
 */
export class MemoryStore implements ByollmStore {
  readonly [NATIVE]: NativeMemoryStoreHandle;
  /** The native store when records read their envelope lazily, else undefined. */
  readonly [LAZY]: NativeMemoryStoreHandle | undefined;
  readonly [WATCHERS] = new Map<string, Set<() => void>>();

  constructor(options: NativeMemoryStoreOptions = {}) {
    this[NATIVE] = new native.NativeMemoryStore(
      options.defaultTtlMs ?? undefined,
      options.retentionMs ?? undefined,
      options.path == null ? undefined : hostPath(options.path),
      options.path == null ? undefined : options.synchronous === "full",
    );
    // Without retention an id keeps its job (and envelope) for good, so a
    // record may fetch a large envelope later, when (and if) it is read; with
    // retention the id could be dropped and reused in between, so records
    // carry it from the start.
    if (options.retentionMs == null) {
      this[NATIVE].omitEnvelopes();
      this[LAZY] = this[NATIVE];
    }
    inPlaceStores.set(this, { native: this[NATIVE], lazy: this[LAZY], notify: () => this[NOTIFY]() });
    if (options.path == null) processOnly.add(this);
  }

  /**
   * Write anything pending and close the store's file, releasing it for
   * another process; later changes throw. Nothing for a store without `path`.
   */
  close(): void {
    this[NATIVE].close();
  }

  /** The native store, for callers that want to skip the record objects. */
  get native(): NativeMemoryStoreHandle {
    return this[NATIVE];
  }

  // -- jobs ---------------------------------------------------------------

  create(input: StoredJobInput, now: number): Promise<JobRecord> {
    checkStoredJob(input);
    const parts = sealedParts(input.envelope);
    const record = jobFromJson(
      this[NATIVE].create(
        input.id,
        input.kind,
        input.sizeClass,
        input.owner,
        input.audience ?? undefined,
        input.purpose === undefined ? undefined : jsonOf(input.purpose),
        input.audienceAllow ? [...input.audienceAllow] : undefined,
        input.dependsOn ? [...input.dependsOn] : undefined,
        input.ttlMs ?? undefined,
        input.deadlineAt ?? undefined,
        parts,
        parts === undefined ? 0 : input.envelope.deadlineAt,
        parts === undefined ? jsonOf(input.envelope) : undefined,
        now,
      ),
      this[LAZY],
    ) as JobRecord;
    return changed(this, record);
  }

  get(jobId: string): Promise<JobRecord | null> {
    return Promise.resolve(typeof jobId === "string" ? jobFromJson(this[NATIVE].get(jobId), this[LAZY]) : null);
  }

  claim(args: ClaimArgs): Promise<JobRecord[]> {
    const caps: string[] = [];
    for (const cap of args.capabilities) {
      caps.push(refText(cap.kind), refText(cap.backendId), refText(cap.offerScope));
    }
    return changed(this, jobsFromJson(this[NATIVE].claim(args.runnerId, args.runnerOwner, caps, args.max, args.leaseMs, args.now), this[LAZY]));
  }

  renewLeases(args: RenewArgs): Promise<RenewResult> {
    const leases = args.leases;
    const each = this[NATIVE].renewLeases(args.runnerId, flatRefs(leases), args.leaseMs, args.now);
    const renewed: { jobId: string; expiresAt: number }[] = [];
    const lost: LeaseRef[] = [];
    for (let at = 0; at < leases.length; at += 1) {
      const ref = leases[at] as LeaseRef;
      const expiresAt = each[at];
      if (expiresAt == null) lost.push({ jobId: ref.jobId, leaseId: ref.leaseId });
      else renewed.push({ jobId: ref.jobId, expiresAt });
    }
    return changed(this, { renewed, lost });
  }

  adopt(args: AdoptArgs): Promise<JobRecord | null> {
    return changed(this, jobFromJson(this[NATIVE].adopt(args.jobId, args.leaseId, args.expiresAt, args.now), this[LAZY]));
  }

  complete(args: CompleteArgs): Promise<CompleteResult> {
    const holder = args.holder;
    const byLease = holder.by === "lease";
    const outcome = args.outcome as { outcome?: unknown };
    const provenance = args.provenance as { runnerId?: unknown } | null | undefined;
    const text = this[NATIVE].complete(
      args.jobId,
      args.runnerId,
      byLease,
      holder.by === "lease" ? holder.leaseId : holder.runnerId,
      typeof outcome?.outcome === "string" ? outcome.outcome : "",
      jsonOf(args.outcome),
      jsonOf(args.provenance),
      typeof provenance?.runnerId === "string" ? provenance.runnerId : undefined,
      args.now,
    );
    const [accepted, duplicate, row] = JSON.parse(text) as [0 | 1, 0 | 1, JobRow | null];
    const job = row === null ? null : jobRecordFromRow(row, this[LAZY]);
    return changed(this, duplicate === 1 ? { accepted: false, duplicate: true, job } : { accepted: accepted === 1, job });
  }

  release(args: ReleaseArgs): Promise<string[]> {
    const leases = args.leases;
    const released = this[NATIVE].release(args.runnerId, flatRefs(leases), args.reason === "refused", args.now);
    return changed(this, released.map((at) => (leases[at] as LeaseRef).jobId));
  }

  expireDue(now: number): Promise<JobRecord[]> {
    return changed(this, jobsFromJson(this[NATIVE].expireDue(now), this[LAZY]));
  }

  cancel(jobId: string, now: number): Promise<JobRecord | null> {
    if (typeof jobId !== "string") return Promise.resolve(null);
    return changed(this, jobFromJson(this[NATIVE].cancel(jobId, now), this[LAZY]));
  }

  listClaimedBy(runnerId: string): Promise<JobRecord[]> {
    if (typeof runnerId !== "string") return Promise.resolve([]);
    return Promise.resolve(jobsFromJson(this[NATIVE].listClaimedBy(runnerId), this[LAZY]));
  }

  listCancelRequests(runnerId: string): Promise<{ jobId: string; leaseId: string }[]> {
    if (typeof runnerId !== "string") return Promise.resolve([]);
    return Promise.resolve(JSON.parse(this[NATIVE].listCancelRequests(runnerId)) as LeaseRef[]);
  }

  /** All jobs in creation order, for demos and assertions. Not part of the store interface. */
  allJobs(): JobRecord[] {
    return jobsFromJson(this[NATIVE].allJobs(), this[LAZY]);
  }

  // -- watchers -------------------------------------------------------------

  subscribe(jobId: string, onChange: () => void): () => void {
    let handlers = this[WATCHERS].get(jobId);
    if (handlers === undefined) {
      handlers = new Set();
      this[WATCHERS].set(jobId, handlers);
      this[NATIVE].watch(jobId);
    }
    handlers.add(onChange);
    let live = true;
    return () => {
      if (!live) return;
      live = false;
      const current = this[WATCHERS].get(jobId);
      if (current === undefined) return;
      current.delete(onChange);
      if (current.size === 0) {
        this[WATCHERS].delete(jobId);
        this[NATIVE].unwatch(jobId);
      }
    };
  }

  /**
   * Call the handlers of every watched job written by the operation that
   * just ran, once per write, in write order. (The reference calls them in
   * the middle of the operation; handlers take no arguments and re-read, so
   * only the timing within one call differs.)
   */
  [NOTIFY](): void {
    if (this[WATCHERS].size === 0) return;
    for (const jobId of this[NATIVE].drainWrites()) {
      const handlers = this[WATCHERS].get(jobId);
      if (handlers === undefined) continue;
      for (const handler of handlers) {
        try {
          handler();
        } catch {
          // A watcher is a signal; one that throws must not break the write path.
        }
      }
    }
  }

  // -- pairing and runners --------------------------------------------------

  createPairing(record: PairingRecord): Promise<void> {
    this[NATIVE].createPairing(jsonOf(record));
    return Promise.resolve();
  }

  getPairingByDeviceCodeHash(hash: string): Promise<PairingRecord | null> {
    return parsed(typeof hash === "string" ? this[NATIVE].pairingByHash(hash) : null);
  }

  getPairingByUserCode(userCode: string): Promise<PairingRecord | null> {
    return parsed(typeof userCode === "string" ? this[NATIVE].pairingByCode(userCode) : null);
  }

  /** Throws synchronously on refusal, as the reference does. */
  approvePairing(args: ApproveArgs): Promise<RunnerRecord> {
    let text: string;
    try {
      text = this[NATIVE].approvePairing(args.userCode, args.owner, args.runnerId, args.now);
    } catch (error) {
      // A plain Error with the reference's message, not the addon's error object.
      throw new Error(error instanceof Error ? error.message : String(error));
    }
    return Promise.resolve(JSON.parse(text) as RunnerRecord);
  }

  denyPairing(userCode: string, _now: number): Promise<void> {
    if (typeof userCode === "string") this[NATIVE].denyPairing(userCode);
    return Promise.resolve();
  }

  consumePairingToken(deviceCodeHash: string): Promise<void> {
    if (typeof deviceCodeHash === "string") this[NATIVE].consumePairing(deviceCodeHash);
    return Promise.resolve();
  }

  /**
   * A fresh record from the native store every time: it is the one source of
   * truth (a revocation through `native` shows at once), and editing a
   * returned record changes nothing that requests authenticate against.
   */
  getRunner(runnerId: string): Promise<RunnerRecord | null> {
    return parsed(typeof runnerId === "string" ? this[NATIVE].runner(runnerId) : null);
  }

  touchRunner(args: TouchArgs): Promise<RunnerRecord | null> {
    return parsed(this[NATIVE].touchRunner(args.runnerId, jsonOf(args.capabilities), jsonOf(args.daemonVersion), args.now));
  }

  revokeRunner(runnerId: string, now: number): Promise<void> {
    if (typeof runnerId === "string") this[NATIVE].revokeRunner(runnerId, now);
    return Promise.resolve();
  }

  listRunners(owner?: string): Promise<RunnerRecord[]> {
    if (owner != null && typeof owner !== "string") return Promise.resolve([]);
    return Promise.resolve(JSON.parse(this[NATIVE].listRunners(owner ?? undefined)) as RunnerRecord[]);
  }
}

/**
 * `store.create`'s scalar fields, of the types the native store takes; a
 * caller's mistake is a `TypeError` naming the field. (Any audience string is
 * stored: a record written by an older app may carry another spelling.)
 */
function checkStoredJob(input: StoredJobInput): void {
  const where = "MemoryStore.create";
  for (const field of ["id", "kind", "sizeClass", "owner"] as const) text(where, field, input[field]);
  if (input.audience != null) text(where, "audience", input.audience);
  optionalStrings(where, "audienceAllow", input.audienceAllow);
  optionalStrings(where, "dependsOn", input.dependsOn);
  optionalNumber(where, "ttlMs", input.ttlMs);
  optionalNumber(where, "deadlineAt", input.deadlineAt);
}

/** Tell the store's watchers what the call changed, then answer `value`. */
function changed<T>(store: MemoryStore, value: T): Promise<T> {
  store[NOTIFY]();
  return Promise.resolve(value);
}

/** The prototype's methods as defined above, for `runsInPlace`. */
const ORIGINAL_METHODS: readonly unknown[] = IN_PLACE_METHODS.map(
  (name) => (MemoryStore.prototype as unknown as Record<string, unknown>)[name],
);
