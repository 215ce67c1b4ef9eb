// `byollm-server-native/postgres`: the store on a plain PostgreSQL, through
// node-postgres. Every method is one call to a SQL function of
// supabase/migrations (the same functions supabaseStore calls), so the claim is
// atomic in the database (FOR UPDATE SKIP LOCKED) and any number of app
// processes can share one database.
//
// Time: the caller's `now` (ByollmApp's and the handlers' injectable clock) is
// passed to SQL as epoch milliseconds; the functions never read the database
// clock, so a fake clock drives leases and TTLs here exactly as in memory.
import { randomUUID } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import pg from "pg";
import type { Pool, PoolClient, PoolConfig } from "pg";
import { waitWithPush } from "./delivery.js";
import { REFUSAL_CODES, sqlStore, sqlStringOut, Watchers, type SqlCall, type SqlParam, type SqlStoreOptions } from "./sql-store.js";
import type { ByollmStore, PollingDeliveryDeps, ResultDelivery } from "./types.js";

export type PostgresStoreOptions = (
  | {
      /** A pool you own (you end it). Connect as the schema owner or a role granted `service_role`. */
      readonly pool: Pool;
      readonly connectionString?: never;
    }
  | {
      /** The store creates (and `close()` ends) its own pool. */
      readonly connectionString: string;
      readonly pool?: never;
      /** Extra pool settings (size, ssl, …) when the store creates the pool. */
      readonly poolConfig?: Omit<PoolConfig, "connectionString">;
    }
) & {
  /** TTL of a job once claimable, when the enqueue names none (default 900000). */
  readonly defaultTtlMs?: number;
  /**
   * Send each call as a named prepared statement, parsed once per connection
   * instead of on every call (less PostgreSQL CPU per job). Only for a
   * direct connection or a session-mode pooler: a transaction-mode pooler
   * (Supavisor or PgBouncer on port 6543) does not keep a connection's
   * prepared statements between transactions. Default false.
   */
  readonly preparedStatements?: boolean;
  /**
   * Hold one connection of the store's own (not from the pool) listening on
   * `byollm_work`, so the handlers learn from the database which idle
   * daemons' answers may have changed and answer the others without a query.
   * Default true, except where `process.env.VERCEL` is set (a serverless
   * function must not hold a connection). Behind a transaction-mode pooler
   * no notification arrives; the channel then never counts as live and
   * every request goes to the database, as with false.
   */
  readonly notifications?: boolean;
};

export interface PostgresStore extends ByollmStore {
  /** Ends the pool if the store created it; a pool you passed in is left alone. */
  close(): Promise<void>;
}

/** A parameter taken from the call's arguments (`x.a`, one jsonb value), as `sqlValues` would pass it. */
function fromArgs([, field, type]: SqlParam): string {
  // The field names are ours (sql-store.ts), never input.
  const text = `(x.a ->> '${field}')`;
  if (type === "jsonb") return `nullif(x.a -> '${field}', 'null')`;
  if (type === "bigint") return `coalesce(trunc(${text}::numeric), 0)::bigint`;
  if (type === "integer") return `greatest(0, floor(${text}::numeric))::integer`;
  return text;
}

/** Each function's statement text, by name. */
const statements = new Map<string, string>();

/** The statement's name and text: the same on every call of the function. */
function statementOf(call: SqlCall): { name: string; text: string } {
  const name = call.fn;
  let text = statements.get(name);
  if (text === undefined) {
    // The function name is one of ours (sql-store.ts), never input. The
    // subquery (kept by OFFSET 0) runs the function before the outer select
    // reads the ids it wrote (byollm_note_changes). The list is local to the
    // statement's own transaction, so it starts empty on every call. The
    // arguments arrive as one JSON text, read once (the inner OFFSET 0 keeps
    // it from being parsed once per parameter); the answer leaves as text,
    // which the store reads itself.
    const inner = `select ${call.fn}(${call.params.map((p) => `${p[0]} => ${fromArgs(p)}`).join(", ")}) as r from (select $1::jsonb as a offset 0) x`;
    text = `select s.r::text as r, current_setting('byollm.changed', true) as changed, current_setting('byollm.keys', true) as keys from (${inner} offset 0) s`;
    statements.set(name, text);
  }
  return { name, text };
}

/** The ByollmStore on PostgreSQL. Apply the migrations first (`migratePostgres`). */
export function postgresStore(options: PostgresStoreOptions): PostgresStore {
  const owned = options.pool === undefined;
  const pool: Pool =
    options.pool ??
    new pg.Pool({
      ...("poolConfig" in options ? options.poolConfig : {}),
      connectionString: options.connectionString,
    });
  if (owned) {
    // An idle client's connection can drop (server restart); without a
    // listener that error would end the process.
    pool.on("error", () => undefined);
  }

  // Watchers hear every job write made through this store, including those
  // inside another operation (the database reports the ids each call wrote).
  // Writes by other processes are not seen; the contract allows missed calls.
  const watchers = new Watchers();
  const prepared = options.preparedStatements === true;
  const call = async (c: SqlCall): Promise<unknown> => {
    try {
      const { name, text } = statementOf(c);
      const values = [c.args];
      type Row = { r: unknown; changed: string | null; keys: string | null };
      const result = prepared ? await pool.query<Row>({ name, text, values }) : await pool.query<Row>(text, values);
      const row = result.rows[0];
      const changed = (row?.changed ?? "")
        .split(",")
        .filter((id) => id !== "")
        .map(sqlStringOut);
      if (changed.length > 0) watchers.notify(changed);
      // What this call changed, for this process's handlers before the answer is used.
      for (const key of (row?.keys ?? "").split("\n")) if (key !== "") channel?.key(key);
      return row?.r ?? null;
    } catch (error) {
      const e = error as { code?: string; message?: string };
      if (typeof e.code === "string" && REFUSAL_CODES.has(e.code) && typeof e.message === "string") {
        // The function's own message (e.g. "pairing code has expired"), as
        // the in-memory store words it.
        throw new Error(e.message);
      }
      throw error;
    }
  };

  const channel =
    (options.notifications ?? process.env["VERCEL"] === undefined)
      ? new ListenChannel(
          WORK_CHANNEL,
          // The pool's own settings (pg-pool keeps them as `options`).
          () => new pg.Client(owned ? { ...options.poolConfig, connectionString: options.connectionString } : pool.options),
          (payload) => pool.query("select pg_notify($1, $2)", [WORK_CHANNEL, payload]),
          "byollm: the notification channel (LISTEN byollm_work) is down; idle daemon requests now go to the database until it is back",
        )
      : undefined;
  const storeOptions: SqlStoreOptions = {
    ...(options.defaultTtlMs === undefined ? {} : { defaultTtlMs: options.defaultTtlMs }),
    subscribe: (jobId, onChange) => watchers.subscribe(jobId, onChange),
    ...(channel === undefined ? {} : { idle: { subscribe: (onKey, onHealth) => channel.subscribe(onKey, onHealth) } }),
  };
  const store = sqlStore(call, storeOptions);
  return Object.assign(store, {
    async close(): Promise<void> {
      channel?.close();
      if (owned) await pool.end();
    },
  });
}

/** The channel the migrations send work keys on (20260901001100_byollm_idle.sql). */
const WORK_CHANNEL = "byollm_work";
/** How often the channel proves itself live, and how long a ping may take to come back. */
const PING_EVERY_MS = 10_000;
const PING_WITHIN_MS = 15_000;
const PING_QUEUED_MS = 60_000;
/** Reconnection backoff: the first wait, doubled after each failure up to the last. */
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 30_000;

type ChannelListener = { onKey: (key: string) => void; onHealth: (healthy: boolean) => void };

/**
 * One connection of its own listening on a channel, open while anyone
 * subscribes, reconnecting (0.5 s, doubling to 30 s) while anyone still does.
 * With `send` (postgresStore's `byollm_work`, `SqlStorePaths.idle`) it counts
 * as healthy only once a ping it sent through the pool has come back on it, so
 * a channel that cannot deliver (a transaction-mode pooler, a dead socket) is
 * never trusted; without, once it listens. `down` is logged once per loss. Its
 * socket and timers never keep the process alive.
 */
class ListenChannel {
  readonly #listeners = new Set<ChannelListener>();
  #client: pg.Client | undefined;
  #healthy = false;
  /** Logged since the channel was last healthy (one line per loss). */
  #warned = false;
  #retryMs = RETRY_FIRST_MS;
  /** The ping in flight, and when it counts as lost. */
  #nonce: string | undefined;
  #deadline: NodeJS.Timeout | undefined;
  /** The ping interval, or the reconnection wait. */
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly channel: string,
    private readonly connect: () => pg.Client,
    private readonly send?: (payload: string) => Promise<unknown>,
    private readonly down?: string,
  ) {}

  subscribe(onKey: (key: string) => void, onHealth: (healthy: boolean) => void): () => void {
    const listener = { onKey, onHealth };
    this.#listeners.add(listener);
    if (this.#listeners.size === 1) this.#open();
    else if (this.#healthy) onHealth(true);
    return () => {
      if (this.#listeners.delete(listener) && this.#listeners.size === 0) this.close();
    };
  }

  /** A key for every listener (heard on the channel, or of this process's own write). */
  key(key: string): void {
    for (const l of [...this.#listeners]) l.onKey(key);
  }

  /** Ends the connection and every timer (the store's close()). */
  close(): void {
    this.#drop();
    this.#listeners.clear();
    this.#warned = false;
    this.#retryMs = RETRY_FIRST_MS;
  }

  #health(healthy: boolean): void {
    if (this.#healthy === healthy) return;
    this.#healthy = healthy;
    for (const l of [...this.#listeners]) l.onHealth(healthy);
  }

  /** Unhealthy now; the connection and its timers gone. */
  #drop(): void {
    const client = this.#client;
    this.#client = undefined;
    this.#nonce = undefined;
    clearTimeout(this.#deadline);
    clearTimeout(this.#timer);
    this.#health(false);
    if (client !== undefined) {
      client.removeAllListeners("notification");
      void client.end().catch(() => undefined);
    }
  }

  #open(): void {
    const client = this.connect();
    this.#client = client;
    const lost = (): void => {
      if (this.#client !== client) return;
      this.#drop();
      if (!this.#warned && this.down !== undefined) console.warn(this.down);
      this.#warned = true;
      this.#timer = setTimeout(() => this.#listeners.size > 0 && this.#client === undefined && this.#open(), this.#retryMs).unref();
      this.#retryMs = Math.min(this.#retryMs * 2, RETRY_MAX_MS);
    };
    client.on("error", lost);
    client.on("end", lost);
    const up = (): void => {
      this.#retryMs = RETRY_FIRST_MS;
      this.#warned = false;
      this.#health(true);
    };
    client.on("notification", (n) => {
      const key = n.payload ?? "";
      if (n.channel !== this.channel) return;
      if (!key.startsWith("ping:")) {
        this.key(key);
      } else if (key === `ping:${this.#nonce}`) {
        this.#nonce = undefined;
        clearTimeout(this.#deadline);
        up();
      }
    });
    const send = this.send;
    const ping = (): void => {
      if (this.#nonce !== undefined || this.#client !== client || send === undefined) return;
      const nonce = randomUUID();
      this.#nonce = nonce;
      // Lost when not heard within PING_WITHIN_MS of its NOTIFY committing:
      // a pool busy with other work delays the ping, not the channel (the
      // memo must not turn itself off just when the database is busiest);
      // PING_QUEUED_MS bounds how long the pool may hold it.
      const deadline = (ms: number): void => {
        clearTimeout(this.#deadline);
        // Judged after the loop's next read of the sockets: a process whose
        // event loop was busy past the deadline has the ping waiting unread.
        this.#deadline = setTimeout(() => setImmediate(() => this.#nonce === nonce && lost()), ms).unref();
      };
      deadline(PING_QUEUED_MS);
      send(`ping:${nonce}`).then(() => this.#nonce === nonce && deadline(PING_WITHIN_MS), lost);
    };
    const unref = (): void => (client as unknown as { connection: { stream: { unref(): void } } }).connection.stream.unref();
    unref();
    client
      .connect()
      .then(() => {
        unref(); // the socket may have been replaced (TLS)
        return client.query(`listen ${this.channel}`);
      })
      .then(() => {
        if (this.#client !== client) return;
        if (send === undefined) return up();
        ping();
        this.#timer = setInterval(ping, PING_EVERY_MS).unref();
      }, lost);
  }
}

/** The migration files shipped with the package, in the order to apply them. */
export async function postgresMigrations(): Promise<{ name: string; sql: string }[]> {
  const dir = new URL("../supabase/migrations/", import.meta.url);
  const names = (await readdir(dir)).filter((n) => n.endsWith(".sql")).sort();
  return Promise.all(names.map(async (name) => ({ name, sql: await readFile(new URL(name, dir), "utf8") })));
}

/**
 * Apply the shipped migrations to a plain PostgreSQL (on Supabase use the
 * Supabase CLI with the same files). Every file is idempotent, so running this
 * at each start is safe; an advisory lock keeps two processes from racing.
 * Needs the database's owner (or a role that may create schemas in it); it
 * creates schema `auth` and `auth.uid()` when absent, and the roles `anon`,
 * `authenticated` and `service_role` only with `createRoles: true`.
 */
export async function migratePostgres(
  target: ({ pool: Pool } | { connectionString: string }) & {
    /**
     * Create the roles `anon`, `authenticated` and `service_role` when they
     * are absent (cluster-wide; needs CREATEROLE). Off by default: without
     * them the schema owner is the store's only caller. Supabase has them.
     */
    readonly createRoles?: boolean;
  },
): Promise<string[]> {
  const owned = !("pool" in target);
  const pool = "pool" in target ? target.pool : new pg.Pool({ connectionString: target.connectionString, max: 1 });
  // As in postgresStore: a connection dropped while idle (here, while the
  // pool is ending) must not become an uncaught exception in the host.
  if (owned) pool.on("error", () => undefined);
  let client: PoolClient | undefined;
  try {
    client = await pool.connect();
    const applied: string[] = [];
    // Any fixed key will do; it only has to be the same in every process.
    await client.query("select pg_advisory_lock(7388120101)");
    try {
      await client.query("select set_config('byollm.create_roles', $1, false)", [target.createRoles === true ? "on" : "off"]);
      for (const { name, sql } of await postgresMigrations()) {
        await client.query("begin");
        try {
          await client.query(sql);
          await client.query("commit");
        } catch (error) {
          await client.query("rollback");
          throw new Error(`migration ${name} failed: ${(error as Error).message}`);
        }
        applied.push(name);
      }
    } finally {
      await client.query("select set_config('byollm.create_roles', '', false)");
      await client.query("select pg_advisory_unlock(7388120101)");
    }
    return applied;
  } finally {
    client?.release();
    if (owned) await pool.end();
  }
}

/** The channel the migrations notify with a job's id when it ends. */
const ENDED_CHANNEL = "byollm_job_ended";

/**
 * `ByollmAppOptions.delivery` on a plain PostgreSQL: `handle.result()`
 * hears that its job ended the moment the ending transaction commits
 * (LISTEN/NOTIFY), from whichever app process ended it, instead of on the
 * next poll. One connection (with `pool`'s settings, or `connectionString`)
 * listens for all of the app's waits, held only while some wait is open; if
 * it drops, the waits re-read their jobs and it reconnects. Runner liveness
 * is still polled, as with every delivery.
 */
export function postgresDelivery(
  target: { pool: Pool } | { connectionString: string },
): (deps: PollingDeliveryDeps) => ResultDelivery {
  const waiters = new Watchers();
  const channel = new ListenChannel(
    ENDED_CHANNEL,
    () => new pg.Client("pool" in target ? target.pool.options : { connectionString: target.connectionString }),
  );
  let stop: (() => void) | undefined;
  const listen = (jobId: string, onChange: () => void): (() => void) => {
    // Listening, or no longer: a notification may have been missed, so every wait reads its job again.
    stop ??= channel.subscribe((id) => waiters.notify([sqlStringOut(id)]), () => waiters.notifyAll());
    const unsubscribe = waiters.subscribe(jobId, onChange);
    return () => {
      unsubscribe();
      if (waiters.size > 0) return;
      stop?.();
      stop = undefined;
    };
  };

  return (deps) => ({ waitFor: (jobId, options) => waitWithPush(deps, listen, jobId, options) });
}
