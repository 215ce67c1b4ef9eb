// The store contract suite (./store-contract.mjs, every rule of store.md)
// against postgresStore on a real PostgreSQL. Options name the documented
// differences of the SQL stores (docs/stores.md): runner ids are
// `runner_<uuid>` (the form every store hands out) and relay lease ids uuids,
// so the suite mints those; approvePairing rejects (a promise)
// rather than throwing synchronously; subscribe hears this store's own writes.
import { before, after } from "node:test";
import { randomUUID } from "node:crypto";
import { postgresStore } from "../dist/postgres.js";
import { freshDatabase, TRUNCATE, testPool } from "./postgres-db.mjs";
import { storeContract } from "./store-contract.mjs";

let db;
let pool;
before(async () => {
  db = await freshDatabase("contract");
  pool = testPool(db.url, 2);
});
after(async () => {
  await pool?.end();
  await db?.drop();
});

storeContract(
  "postgresStore",
  async () => {
    await pool.query(TRUNCATE);
    return postgresStore({ pool });
  },
  {
    approveThrowsSync: false,
    runnerId: () => `runner_${randomUUID()}`,
    relayLeaseId: () => randomUUID(),
  },
);
