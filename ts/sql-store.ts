// The store over the SQL functions of supabase/migrations, shared by
// postgresStore (node-postgres) and supabaseStore (supabase-js). The rules live
// in SQL; this file only names the function each method calls, passes the
// caller's arguments (every `now` included, as epoch ms) and gives the JSON the
// database returns the key order of the in-memory records.
import type { Operations } from "./operations.js";
import { native, PROTOCOL, type StoreCounts } from "./native.js";
import type {
  ByollmStore,
  ClaimArgs,
  CompleteArgs,
  JobRecord,
  LeaseRef,
  PairingRecord,
  RunnerRecord,
  TouchArgs,
} from "./types.js";

/** How an argument is typed on the SQL side (node-postgres sends text). */
export type SqlArgType = "text" | "jsonb" | "bigint" | "integer";

/** One parameter of a SQL function: its SQL name, the argument field it takes, its SQL type. */
export type SqlParam = readonly [name: string, field: string, type: SqlArgType];

/** One call: a function of the rules file, named arguments in order. */
export interface SqlCall {
  readonly fn: string;
  /** The function's parameters, in order. */
  readonly params: readonly SqlParam[];
  /**
   * The JSON text of an object holding each parameter's field, every string
   * in the form the database holds (`sqlTextIn`), which a caller that can
   * hands to SQL unparsed (see `sqlValues` for one that cannot). The answer
   * is the function's result as JSON text, or its value for a caller that
   * cannot answer text.
   */
  readonly args: string;
}

/** Error codes our SQL functions raise for a refused request (the message is the answer). */
export const REFUSAL_CODES = new Set(["P0001", "P0002", "22023"]);

/** Runs one SQL function and answers its JSON result (`null` for void). */
export type SqlCaller = (call: SqlCall) => Promise<unknown>;

export interface SqlStoreOptions {
  /** TTL of a job once claimable, when the enqueue names none (default 900000). */
  readonly defaultTtlMs?: number;
  /**
   * The push seam. Absent: watchers are called after every write made through
   * this store object (writes by other processes are not seen; the contract
   * allows missed calls, and delivery polls anyway).
   */
  readonly subscribe?: (jobId: string, onChange: () => void) => () => void;
  /** The store's notification channel (SqlStorePaths.idle), where it has one. */
  readonly idle?: SqlStorePaths["idle"];
}

// Epoch ms cross into SQL as bigint; a fractional clock is truncated to the
// millisecond the columns can hold.
const ms = (n: number): number => Math.trunc(n);

type Json = Record<string, unknown>;

const obj = (v: unknown, what: string): Json => {
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new Error(`byollm store: the database returned no ${what}`);
  }
  return v as Json;
};

const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

const nothing = (): void => undefined;

// jsonb stores object keys in its own order (shortest first). The nested
// protocol objects are given back the key order their producers write, so a
// record read from Postgres serialises like one kept in memory.
const OUTCOME_KEYS = ["outcome", "text", "artifactUrl", "code", "message", "retryable"];
const PROVENANCE_KEYS = ["audience", "runnerId", "runnerOwner", "backendClass", "model", "untrusted", "stop", "stopReported"];
const CAPABILITY_KEYS = ["kind", "service", "backendId", "backendClass", "model", "knownModels", "offerScope"];
const IDENTITY_KEYS = ["identity", "encryption", "encryptionSig"];

function ordered(v: unknown, keys: readonly string[]): unknown {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return v;
  const src = v as Json;
  const out: Json = {};
  for (const k of keys) if (k in src) out[k] = src[k];
  for (const k of Object.keys(src)) if (!(k in out)) out[k] = src[k];
  return out;
}

const capabilities = (v: unknown): unknown => (Array.isArray(v) ? v.map((c) => ordered(c, CAPABILITY_KEYS)) : v);

/** `src`'s values under `keys`, in that order (an absent key holds `undefined`). */
function inKeyOrder(src: Json, keys: readonly string[]): Json {
  const out: Json = {};
  for (const k of keys) out[k] = src[k];
  return out;
}

/** JobRecord in the record key order the core owns; absent optionals as the in-memory store holds them. */
export function jobFromJson(v: unknown): JobRecord {
  const j = obj(v, "job");
  const record = inKeyOrder(j, PROTOCOL.jobKeys);
  const lease = j["lease"] as { id: string; runnerId: string; expiresAt: number } | null;
  record["envelope"] = ordered(j["envelope"], PROTOCOL.envelopeKeys);
  record["purpose"] = j["purpose"] ?? undefined;
  record["audienceAllow"] = j["audienceAllow"] ?? undefined;
  record["dependsOn"] = j["dependsOn"] ?? [];
  record["lease"] =
    lease === null || lease === undefined ? null : { id: lease.id, runnerId: lease.runnerId, expiresAt: lease.expiresAt };
  record["completedByLeaseId"] = j["completedByLeaseId"] ?? null;
  record["claimableAt"] = j["claimableAt"] ?? null;
  record["deadlineAt"] = j["deadlineAt"] ?? null;
  record["refusedBy"] = j["refusedBy"] ?? [];
  record["outcome"] = ordered(j["outcome"] ?? null, OUTCOME_KEYS);
  record["provenance"] = ordered(j["provenance"] ?? null, PROVENANCE_KEYS);
  return record as unknown as JobRecord;
}

/** RunnerRecord in the record key order the core owns. */
export function runnerFromJson(v: unknown): RunnerRecord {
  const record = inKeyOrder(obj(v, "runner"), PROTOCOL.runnerKeys);
  record["device"] = ordered(record["device"], IDENTITY_KEYS);
  record["capabilities"] = capabilities(record["capabilities"]);
  record["revokedAt"] = record["revokedAt"] ?? null;
  return record as unknown as RunnerRecord;
}

const PAIRING_KEYS = [
  "deviceCodeHash", "userCode", "state", "owner", "runnerId", "collected", "label",
  "platform", "daemonVersion", "capabilities", "device", "expiresAt", "createdAt",
];

/** PairingRecord in the in-memory store's field order. */
export function pairingFromJson(v: unknown): PairingRecord {
  const record = inKeyOrder(obj(v, "pairing"), PAIRING_KEYS);
  record["owner"] ??= null;
  record["runnerId"] ??= null;
  record["collected"] = record["collected"] === true;
  record["capabilities"] = capabilities(record["capabilities"]);
  record["device"] = ordered(record["device"], IDENTITY_KEYS);
  return record as unknown as PairingRecord;
}

const maybe = <T>(v: unknown, f: (v: unknown) => T): T | null => (v === null || v === undefined ? null : f(v));

/**
 * What the SQL stores offer beside the store contract: the engine's
 * operations as one SQL function call each (the work calls read the
 * request's runner again in the same statement and work only for a runner
 * that exists and is not revoked), and `ByollmApp.job`'s sweep and read in
 * one call.
 */
export interface SqlStorePaths {
  readonly operations: Operations;
  /** expireDue(now) then get(jobId). */
  sweepGet(jobId: string, now: number): Promise<JobRecord | null>;
  /** The metrics' store counts in one call (`byollm_metrics`: jobs by state from maintained counts). */
  metricCounts(now: number, livenessMs: number): Promise<StoreCounts>;
  readonly idle?: {
    /** Calls onKey for every notification key (ping excluded); onHealth(true) once the channel is
     *  proven live (LISTEN active and a self-sent ping heard back), onHealth(false) the moment it is
     *  not (error, end, a ping not heard within 15 s). Returns unsubscribe. The first subscriber opens
     *  the connection; it stays open until the store's close() (or the last unsubscribe). */
    subscribe(onKey: (key: string) => void, onHealth: (healthy: boolean) => void): () => void;
  };
  /** byollm_touch_runners, answered parsed. */
  touchRunners?(runners: readonly { runnerId: string; now: number }[], now: number):
    Promise<{ runnerId: string; seenAt: number | null; revoked: boolean }[]>;
}

const PATHS = Symbol("byollm.sqlStorePaths");

/**
 * The one-call paths of a store exactly as `sqlStore` built it, else
 * undefined: an object derived from one, or one whose methods were replaced
 * (to log or change them), is served through its methods.
 */
export function sqlStorePaths(store: ByollmStore): SqlStorePaths | undefined {
  if (!Object.prototype.hasOwnProperty.call(store, PATHS)) return undefined;
  const paths = (store as unknown as { [PATHS]: SqlStorePaths & { methods: Record<string, unknown> } })[PATHS];
  for (const [name, method] of Object.entries(paths.methods)) {
    if ((store as unknown as Record<string, unknown>)[name] !== method) return undefined;
  }
  return paths;
}

/**
 * The window a liveness count over `store`'s runners uses: `livenessMs`, plus
 * PROTOCOL.livenessSlackMs for a SQL store, whose heartbeats write liveness
 * coalesced (byollm_heartbeat_for), so the stored value may lag a runner's
 * last request by up to that much.
 */
export const livenessWindow = (store: ByollmStore, livenessMs: number): number =>
  sqlStorePaths(store) === undefined ? livenessMs : livenessMs + PROTOCOL.livenessSlackMs;

/** The SQL function behind each engine operation (src/engine/ops.rs), which takes its arguments by name. */
const OPERATIONS = {
  runner: "byollm_get_runner",
  pairingByCode: "byollm_get_pairing_by_user_code",
  createPairing: "byollm_start_pairing",
  pairingByHash: "byollm_get_pairing_by_device_code_hash",
  consumePairing: "byollm_consume_pairing_token",
  claim: "byollm_claim_for",
  job: "byollm_get_job_for",
  heartbeat: "byollm_heartbeat_for",
  resultFor: "byollm_result_for",
  complete: "byollm_complete_job",
  cancelRequests: "byollm_list_cancel_requests",
  release: "byollm_release",
} as const satisfies Record<string, SqlFunction>;

/** In-process watchers: the fallback push seam (see SqlStoreOptions.subscribe). */
export class Watchers {
  readonly #byJob = new Map<string, Set<() => void>>();

  subscribe(jobId: string, onChange: () => void): () => void {
    // A wrapper per registration, so the same function registered twice is
    // removed once per unsubscribe, like two separate waiters.
    const entry = (): void => onChange();
    let set = this.#byJob.get(jobId);
    if (!set) {
      set = new Set();
      this.#byJob.set(jobId, set);
    }
    set.add(entry);
    let live = true;
    return () => {
      if (!live) return;
      live = false;
      const current = this.#byJob.get(jobId);
      current?.delete(entry);
      if (current && current.size === 0) this.#byJob.delete(jobId);
    };
  }

  /** How many jobs have watchers. */
  get size(): number {
    return this.#byJob.size;
  }

  /** Call every watcher of every job (after a lost connection, when changes may have been missed). */
  notifyAll(): void {
    this.notify([...this.#byJob.keys()]);
  }

  notify(jobIds: Iterable<string>): void {
    for (const id of jobIds) {
      const set = this.#byJob.get(id);
      if (!set) continue;
      for (const handler of [...set]) {
        try {
          handler();
        } catch {
          // A watcher's failure is its own; the write already happened.
        }
      }
    }
  }
}

/**
 * Every SQL function the stores call, with its parameters in order. A
 * parameter is named `p_<field in snake case>` and takes the same-named field
 * of the method's arguments, so a method is one line naming its function.
 */
const FUNCTIONS = {
  byollm_claim_for: ["runnerId", "capabilities", "max", "leaseMs", "now"],
  byollm_get_job_for: ["runnerId", "jobId"],
  byollm_heartbeat_for: ["runnerId", "capabilities", "daemonVersion", "leases", "leaseMs", "now"],
  byollm_result_for: ["runnerId", "jobId", "leaseId", "outcome", "provenance", "now"],
  byollm_metrics: ["now", "livenessMs"],
  byollm_touch_runners: ["runners", "now"],
  byollm_sweep_get_job: ["jobId", "now"],
  byollm_create_job: ["job", "now"],
  byollm_get_job: ["jobId"],
  byollm_claim: ["runnerId", "runnerOwner", "capabilities", "max", "leaseMs", "now"],
  byollm_adopt: ["jobId", "leaseId", "expiresAt", "now"],
  byollm_renew_leases: ["runnerId", "leases", "leaseMs", "now"],
  byollm_complete_job: ["jobId", "runnerId", "holder", "outcome", "provenance", "now"],
  byollm_release: ["runnerId", "leases", "reason", "now"],
  byollm_sweep: ["now"],
  byollm_cancel_job: ["jobId", "now"],
  byollm_list_claimed_by: ["runnerId"],
  byollm_list_cancel_requests: ["runnerId"],
  byollm_create_pairing: ["pairing"],
  byollm_start_pairing: ["pairing", "source", "now"],
  byollm_get_pairing_by_device_code_hash: ["hash"],
  byollm_get_pairing_by_user_code: ["userCode"],
  byollm_approve_pairing_as: ["userCode", "owner", "runnerId", "now"],
  byollm_deny_pairing: ["userCode", "now"],
  byollm_consume_pairing_token: ["hash"],
  byollm_get_runner: ["runnerId"],
  byollm_touch_runner: ["runnerId", "capabilities", "daemonVersion", "now"],
  byollm_revoke_runner: ["runnerId", "now"],
  byollm_list_runners: ["owner"],
} as const;

type SqlFunction = keyof typeof FUNCTIONS;
type Param = (typeof FUNCTIONS)[SqlFunction][number];

/** How each parameter is typed on the SQL side: `text` unless listed here. */
const JSONB_PARAMS = new Set<Param>(["capabilities", "leases", "holder", "outcome", "provenance", "job", "pairing", "runners"]);
const BIGINT_PARAMS = new Set<Param>(["leaseMs", "expiresAt", "now", "livenessMs"]);
const sqlType = (field: Param): SqlArgType =>
  JSONB_PARAMS.has(field) ? "jsonb" : BIGINT_PARAMS.has(field) ? "bigint" : field === "max" ? "integer" : "text";

/** Each function's parameters as `[SQL name, argument field, SQL type]`, worked out once. */
const SIGNATURES = {} as Record<SqlFunction, readonly SqlParam[]>;
for (const [fn, fields] of Object.entries(FUNCTIONS) as [SqlFunction, readonly Param[]][]) {
  SIGNATURES[fn] = fields.map((field) => [`p_${field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}`, field, sqlType(field)]);
}

/** A value as its parameter's type takes it: epoch ms and counts as integers. */
function sqlArg(value: unknown, type: SqlArgType): unknown {
  if (type === "bigint") return ms(value as number);
  if (type === "integer") return Math.max(0, Math.floor(value as number));
  return value;
}

/**
 * Every string the database cannot hold as it is (NUL, a lone surrogate) in
 * the form it is stored in, by the core's one rule (src/sql_text.rs): the
 * JSON text of a call's arguments on the way in, of its answer on the way
 * out. The core is asked only when the text could hold such a string: a
 * `\u` escape (how JSON spells NUL and lone surrogates) or the mark.
 */
export const SQL_TEXT_MARK = native.sqlTextMark();
export const sqlTextIn = (json: string): string =>
  json.includes("\\u") || json.includes(SQL_TEXT_MARK) ? (native.sqlTextIn(json) ?? json) : json;
export const sqlTextOut = (json: string): string => (json.includes(SQL_TEXT_MARK) ? (native.sqlTextOut(json) ?? json) : json);
/** One string as the database gave it (a job id it reports), read back. */
export const sqlStringOut = (s: string): string => (s.includes(SQL_TEXT_MARK) ? (JSON.parse(sqlTextOut(JSON.stringify(s))) as string) : s);

/** A SQL function's answer as text (`""` from a void function), stored forms read back. */
function answerText(out: unknown): string {
  if (out === null || out === undefined || out === "") return "null";
  return sqlTextOut(typeof out === "string" ? out : (JSON.stringify(out) ?? "null"));
}

/** A call's values in `params` order, read from its JSON text. */
export function sqlValues(call: SqlCall): readonly unknown[] {
  const from = JSON.parse(call.args) as Record<string, unknown>;
  return call.params.map(([, field, type]) => sqlArg(from[field], type));
}

/** The ByollmStore over one SqlCaller. */
export function sqlStore(call: SqlCaller, options: SqlStoreOptions = {}): ByollmStore {
  const defaultTtlMs = options.defaultTtlMs ?? PROTOCOL.defaultTtlMs;
  const watchers = new Watchers();
  const notifyIds = (ids: readonly string[]): void => {
    if (!options.subscribe) watchers.notify(ids);
  };
  const notify = (records: readonly (JobRecord | null)[]): void => {
    notifyIds(records.flatMap((r) => (r ? [r.id] : [])));
  };
  /**
   * Call `fn` with its parameters taken from `values` (async: a bad value
   * rejects, it never throws): sent as one JSON text, like the engine's
   * arguments, so every string reaches the database in the form it holds.
   */
  const run = async <F extends SqlFunction>(fn: F, values: Record<(typeof FUNCTIONS)[F][number], unknown>): Promise<unknown> => {
    const from = values as Record<string, unknown>;
    const params = SIGNATURES[fn];
    const args: Record<string, unknown> = {};
    for (const [, field, type] of params) args[field] = sqlArg(from[field], type);
    const out = await call({ fn, params, args: sqlTextIn(JSON.stringify(args)) });
    return JSON.parse(answerText(out)) as unknown;
  };
  const jobs = (v: unknown): JobRecord[] => list(v).map(jobFromJson);
  const refs = (leases: readonly LeaseRef[]): LeaseRef[] => leases.map((l) => ({ jobId: l.jobId, leaseId: l.leaseId }));
  const leaseRefs = (v: unknown, what: string): LeaseRef[] =>
    list(v).map((r) => {
      const x = obj(r, what);
      return { jobId: x["jobId"] as string, leaseId: x["leaseId"] as string };
    });

  const paths: SqlStorePaths = {
    async operations(op, args) {
      if (op === "cancel") {
        const values = JSON.parse(args) as { jobIds: string[]; now: number };
        for (const jobId of values.jobIds) await store.cancel(jobId, values.now);
        return "null";
      }
      const fn = OPERATIONS[op as keyof typeof OPERATIONS];
      if (fn === undefined) throw new Error(`unknown store operation ${op}`);
      // The engine's arguments are named as the function's parameters take them.
      // A caller that cannot answer text (supabase-js parses every answer) answers the value.
      return answerText(await call({ fn, params: SIGNATURES[fn], args: sqlTextIn(args) }));
    },

    async sweepGet(jobId, now) {
      const out = obj(await run("byollm_sweep_get_job", { jobId, now }), "job");
      notify(jobs(out["swept"]));
      return maybe(out["job"], jobFromJson);
    },

    async metricCounts(now, livenessMs) {
      const out = obj(await run("byollm_metrics", { now, livenessMs }), "metrics");
      const numbers = (v: unknown): number[] => list(v).map(Number);
      return { ok: true, jobs: numbers(out["jobs"]), runners: numbers(out["runners"]), pairingsPending: Number(out["pairingsPending"]) };
    },

    async touchRunners(runners, now) {
      const given = runners.map((r) => ({ runnerId: r.runnerId, now: ms(r.now) }));
      return list(await run("byollm_touch_runners", { runners: given, now })).map((r) => {
        const x = obj(r, "runner liveness");
        return { runnerId: x["runnerId"] as string, seenAt: x["seenAt"] as number | null, revoked: x["revoked"] === true };
      });
    },
    ...(options.idle === undefined ? {} : { idle: options.idle }),
  };

  const store: ByollmStore = {
    async create(input, now) {
      // Only the fields a job keeps: the object ByollmApp hands over still
      // carries the plaintext payload, which must never reach the database.
      const job = {
        id: input.id,
        kind: input.kind,
        envelope: input.envelope,
        sizeClass: input.sizeClass,
        owner: input.owner,
        audience: input.audience ?? "private",
        purpose: input.purpose ?? null,
        audienceAllow: input.audienceAllow === undefined ? null : [...input.audienceAllow],
        dependsOn: [...(input.dependsOn ?? [])],
        ttlMs: input.ttlMs ?? defaultTtlMs,
        deadlineAt: input.deadlineAt ?? null,
      };
      const out = obj(await run("byollm_create_job", { job, now }), "job");
      // A new job comes back without the envelope it was just given: this
      // one is it. An existing id is returned whole, unchanged and, like in
      // memory, notifies nobody.
      if (out["created"] !== true) return jobFromJson(out["job"]);
      const record = jobFromJson({ ...obj(out["job"], "job"), envelope: job.envelope });
      notify([record]);
      return record;
    },

    async claim(args) {
      const claimed = jobs(await run("byollm_claim", args));
      notify(claimed);
      return claimed;
    },

    async adopt(args) {
      const adopted = maybe(await run("byollm_adopt", args), jobFromJson);
      notify([adopted]);
      return adopted;
    },

    async renewLeases(args) {
      const out = obj(await run("byollm_renew_leases", { ...args, leases: refs(args.leases) }), "renewal");
      const renewed = list(out["renewed"]).map((r) => {
        const x = obj(r, "renewal");
        return { jobId: x["jobId"] as string, expiresAt: x["expiresAt"] as number };
      });
      const lost = leaseRefs(out["lost"], "lease");
      notifyIds(renewed.map((r) => r.jobId));
      return { renewed, lost };
    },

    async complete(args) {
      const holder =
        args.holder.by === "runner"
          ? { by: "runner", runnerId: args.holder.runnerId }
          : { by: "lease", leaseId: args.holder.leaseId };
      const out = obj(await run("byollm_complete_job", { ...args, holder }), "completion");
      const job = maybe(out["job"], jobFromJson);
      if (out["accepted"] === true) {
        notify([job]);
        return { accepted: true, job };
      }
      return out["duplicate"] === true ? { accepted: false, duplicate: true, job } : { accepted: false, job };
    },

    async release(args) {
      const released = list(await run("byollm_release", { ...args, leases: refs(args.leases) })).map(String);
      notifyIds(released);
      return released;
    },

    async expireDue(now) {
      const changed = jobs(await run("byollm_sweep", { now }));
      notify(changed);
      return changed;
    },

    async cancel(jobId, now) {
      const job = maybe(await run("byollm_cancel_job", { jobId, now }), jobFromJson);
      if (job?.state === "canceled") notify([job]);
      return job;
    },

    // The rest read or write through one function each.
    get: async (jobId) => maybe(await run("byollm_get_job", { jobId }), jobFromJson),
    listClaimedBy: async (runnerId) => jobs(await run("byollm_list_claimed_by", { runnerId })),
    listCancelRequests: async (runnerId) => leaseRefs(await run("byollm_list_cancel_requests", { runnerId }), "cancel request"),
    subscribe: (jobId, onChange) => (options.subscribe ? options.subscribe(jobId, onChange) : watchers.subscribe(jobId, onChange)),
    createPairing: (pairing) => run("byollm_create_pairing", { pairing }).then(nothing),
    getPairingByDeviceCodeHash: async (hash) => maybe(await run("byollm_get_pairing_by_device_code_hash", { hash }), pairingFromJson),
    getPairingByUserCode: async (userCode) => maybe(await run("byollm_get_pairing_by_user_code", { userCode }), pairingFromJson),
    approvePairing: async (args) => runnerFromJson(await run("byollm_approve_pairing_as", args)),
    denyPairing: (userCode, now) => run("byollm_deny_pairing", { userCode, now }).then(nothing),
    consumePairingToken: (deviceCodeHash) => run("byollm_consume_pairing_token", { hash: deviceCodeHash }).then(nothing),
    getRunner: async (runnerId) => maybe(await run("byollm_get_runner", { runnerId }), runnerFromJson),
    touchRunner: async (args) => maybe(await run("byollm_touch_runner", args), runnerFromJson),
    revokeRunner: (runnerId, now) => run("byollm_revoke_runner", { runnerId, now }).then(nothing),
    listRunners: async (owner) => list(await run("byollm_list_runners", { owner: owner ?? null })).map(runnerFromJson),
  };
  Object.defineProperty(store, PATHS, { value: { ...paths, methods: { ...store } } });
  return store;
}
