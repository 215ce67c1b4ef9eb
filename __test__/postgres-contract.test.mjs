// The store contract suite (./store-contract.mjs, every rule of store.md)
// against postgresStore on a real PostgreSQL. Options name the documented
// differences of the SQL stores (docs/stores.md): runner ids are
// `runner_<uuid>` (the form every store hands out) and relay lease ids uuids,
// so the suite mints those; approvePairing rejects (a promise)
// rather than throwing synchronously; subscribe hears this store's own writes.
import { before, after, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { postgresStore } from "../dist/postgres.js";
import { freshDatabase, TRUNCATE, testPool } from "./postgres-db.mjs";
import { storeContract } from "./store-contract.mjs";

const SQL_DIFFERENCES = {
  approveThrowsSync: false,
  runnerId: () => `runner_${randomUUID()}`,
  relayLeaseId: () => randomUUID(),
};

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
  SQL_DIFFERENCES,
);

// The same rules with every call a named prepared statement.
storeContract(
  "postgresStore with preparedStatements",
  async () => {
    await pool.query(TRUNCATE);
    return postgresStore({ pool, preparedStatements: true });
  },
  SQL_DIFFERENCES,
);

test("preparedStatements: each function is prepared once per connection, and only when asked", async () => {
  const one = testPool(db.url, 1);
  try {
    const preparedNames = async () =>
      (await one.query("select name from pg_prepared_statements order by name")).rows.map((r) => r.name);
    await postgresStore({ pool: one }).get(randomUUID());
    assert.deepEqual(await preparedNames(), []);
    const store = postgresStore({ pool: one, preparedStatements: true });
    assert.equal(await store.get(randomUUID()), null);
    assert.equal(await store.get(randomUUID()), null);
    assert.deepEqual(await preparedNames(), ["byollm_get_job"]);
  } finally {
    await one.end();
  }
});
