// The store "ours" runs on in the differential suite (DIFF_STORE): our
// MemoryStore (the default), a plain store of the app's own, postgresStore,
// or supabaseStore through the PostgREST stand-in, each on a real PostgreSQL
// database of its own. Every side gets the store empty; `allJobs` lists what
// it holds, as MemoryStore's own `allJobs()` does.
import { PlainStore } from "./plain-store.mjs";

export const STORE = process.env.DIFF_STORE ?? "memory";
const KINDS = new Set(["memory", "plain", "postgres", "supabase"]);
if (!KINDS.has(STORE)) throw new Error(`DIFF_STORE must be one of ${[...KINDS].join(", ")} (got ${STORE})`);

let shared = null;
const closers = [];

/** The SQL database and the one store over it, made once per process. */
async function sql() {
  if (shared) return shared;
  const { freshDatabase, testPool, TRUNCATE } = await import("../postgres-db.mjs");
  const db = await freshDatabase(`diff_${STORE}`);
  const pool = testPool(db.url, 1);
  closers.push(() => pool.end(), () => db.drop());
  let store;
  if (STORE === "postgres") {
    const { postgresStore } = await import("../../dist/postgres.js");
    store = postgresStore({ connectionString: db.url });
    closers.unshift(() => store.close());
  } else {
    const { createClient } = await import("@supabase/supabase-js");
    const { supabaseStore } = await import("../../dist/supabase/index.js");
    const { signJwt, startPostgrestStandIn } = await import("../supabase-standin.mjs");
    const secret = "stand-in-jwt-secret-for-tests-only-0123456789";
    const standIn = await startPostgrestStandIn({ connectionString: db.url, jwtSecret: secret });
    closers.unshift(() => standIn.close());
    const client = createClient(standIn.url, signJwt({ role: "service_role" }, secret), {
      auth: { persistSession: false, autoRefreshToken: false },
    });
    store = supabaseStore({ client });
  }
  const { sqlTextOut } = await import("../../dist/sql-store.js");
  shared = {
    store,
    empty: () => pool.query(TRUNCATE),
    // Ids as the table holds them, read back as the app gave them.
    ids: async () =>
      (await pool.query("select to_jsonb(id)::text as id from byollm_jobs")).rows.map((r) => JSON.parse(sqlTextOut(r.id))),
  };
  return shared;
}

/** An empty store for a side of ours, with `allJobs()` listing its jobs; `undefined` for MemoryStore. */
export async function oursStore() {
  if (STORE === "memory") return undefined;
  if (STORE === "plain") {
    const store = new PlainStore();
    return { store, allJobs: async () => [...store.jobs.values()] };
  }
  const s = await sql();
  await s.empty();
  return { store: s.store, allJobs: async () => Promise.all((await s.ids()).map((id) => s.store.get(id))) };
}

/** Close what the SQL stores opened (the database is dropped). */
export async function closeStores() {
  for (const close of closers.splice(0)) await close();
}
