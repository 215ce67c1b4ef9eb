// The store contract suite against supabaseStore: supabase-js over the
// PostgREST STAND-IN (./supabase-standin.mjs) on a real PostgreSQL. Options
// name the documented differences (docs/stores.md): runner ids of the form
// `runner_<uuid>` (the form every store hands out) and uuid relay lease ids,
// approvePairing rejects rather than throwing synchronously, and
// subscribe is Supabase Realtime (asynchronous, not served by the stand-in),
// so the synchronous-subscribe tests do not apply.
import { before, after } from "node:test";
import { randomUUID } from "node:crypto";
import { createClient } from "@supabase/supabase-js";
import { supabaseStore } from "../dist/supabase/index.js";
import { freshDatabase, TRUNCATE, testPool } from "./postgres-db.mjs";
import { startPostgrestStandIn, signJwt } from "./supabase-standin.mjs";
import { storeContract } from "./store-contract.mjs";

const SECRET = "stand-in-jwt-secret-for-tests-only-0123456789";
// supabase-js needs a WebSocket transport on Node 20; Realtime is never used here.
class NoRealtimeHere {
  constructor() {
    throw new Error("this test has no Realtime server");
  }
}

let db;
let pool;
let standIn;
let client;
before(async () => {
  db = await freshDatabase("supacontract");
  pool = testPool(db.url, 1);
  standIn = await startPostgrestStandIn({ connectionString: db.url, jwtSecret: SECRET });
  client = createClient(standIn.url, signJwt({ role: "service_role" }, SECRET), {
    auth: { persistSession: false, autoRefreshToken: false },
    realtime: { transport: NoRealtimeHere },
  });
});
after(async () => {
  await standIn?.close();
  await pool?.end();
  await db?.drop();
});

storeContract(
  "supabaseStore (stand-in PostgREST)",
  async () => {
    await pool.query(TRUNCATE);
    return supabaseStore({ client });
  },
  {
    approveThrowsSync: false,
    subscribe: false,
    runnerId: () => `runner_${randomUUID()}`,
    relayLeaseId: () => randomUUID(),
  },
);
