// `byollm-server-native/supabase`: the store on Supabase, through supabase-js.
//
// Every method is one PostgREST /rpc call to a SQL function of
// supabase/migrations, the same functions postgresStore calls over
// node-postgres, so the two stores share one implementation of every rule.
// Times are the caller's `now` (passed as epoch ms), not the database clock.
//
// Use a client built with the service-role key: runners authenticate with
// signatures, not Supabase sessions, so the protocol side cannot run as a
// browser user. The SQL functions are granted to `service_role` only; RLS
// keeps browser sessions to their own rows (see the access migration).
import type { SupabaseClient } from "@supabase/supabase-js";
import { REFUSAL_CODES, sqlStore, sqlValues, type SqlCall } from "../sql-store.js";
import type { ByollmStore } from "../types.js";
import { watchJobRow } from "./realtime.js";

export interface SupabaseStoreOptions {
  /** A client built with the **service role** key. */
  readonly client: SupabaseClient;
  /** TTL of a job once claimable, when the enqueue names none (default 900000). */
  readonly defaultTtlMs?: number;
}

/** The ByollmStore on Supabase. Apply the migrations first (`supabase db push`). */
export function supabaseStore(options: SupabaseStoreOptions): ByollmStore {
  const db = options.client;

  const call = async (c: SqlCall): Promise<unknown> => {
    const values = sqlValues(c);
    const args = Object.fromEntries(c.params.map(([name], i) => [name, values[i] ?? null]));
    const { data, error } = await db.rpc(c.fn, args);
    if (error) {
      // The function's own refusal (e.g. "pairing code has expired") is
      // passed on verbatim, as the in-memory store words it.
      if (typeof error.code === "string" && REFUSAL_CODES.has(error.code)) throw new Error(error.message);
      throw new Error(`supabase: ${error.message}`);
    }
    return data ?? null;
  };

  return sqlStore(call, {
    ...(options.defaultTtlMs === undefined ? {} : { defaultTtlMs: options.defaultTtlMs }),
    // Realtime: a row change on the job from any process reaches the watcher.
    subscribe: (jobId, onChange) => watchJobRow(db, jobId, onChange),
  });
}

export { supabaseRealtimeDelivery } from "./realtime.js";
