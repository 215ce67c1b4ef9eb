// migratePostgres as a hosted PostgreSQL's database owner (Neon, RDS): no
// CREATEROLE, no superuser. On a cluster of its own (scripts/pg-start.sh), so
// the cluster-wide roles the other tests' databases share are absent here.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { migratePostgres, postgresStore } from "../dist/postgres.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const dir = `/tmp/byollm-pg-roles-${randomUUID().slice(0, 8)}`;
const port = String(55_000 + Math.floor(Math.random() * 5_000));
const env = { ...process.env, BYOLLM_PG_DIR: dir, BYOLLM_PG_PORT: port, BYOLLM_PG_DB: "postgres" };
let admin;

before(() => {
  const r = spawnSync("bash", [`${root}scripts/pg-start.sh`], { env, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  admin = r.stdout.trim().split("\n").pop();
});
after(() => {
  spawnSync("bash", [`${root}scripts/pg-start.sh`, "stop"], { env, encoding: "utf8" });
  rmSync(dir, { recursive: true, force: true });
});

const roles = async (url) => {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query("select rolname from pg_roles where rolname in ('anon', 'authenticated', 'service_role') order by 1");
    return rows.map((r) => r.rolname);
  } finally {
    await c.end();
  }
};

test("a database owner without CREATEROLE migrates (twice) and runs the store; the roles are created only when asked", async () => {
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  await c.query("create role byollm_app login nocreaterole nosuperuser");
  await c.query("create database byollm_app owner byollm_app");
  await c.end();
  const url = new URL(admin);
  url.username = "byollm_app";
  url.pathname = "/byollm_app";

  await migratePostgres({ connectionString: url.toString() });
  await migratePostgres({ connectionString: url.toString() });
  assert.deepEqual(await roles(admin), []);

  const store = postgresStore({ connectionString: url.toString() });
  try {
    const owner = randomUUID();
    const job = await store.create({ id: randomUUID(), kind: "llm.generate", envelope: { ciphertext: "x" }, sizeClass: "small", owner }, Date.now());
    assert.equal((await store.get(job.id)).owner, owner);
    assert.deepEqual(await store.expireDue(Date.now()), []);
  } finally {
    await store.close();
  }

  // Asked, by a role that may: the roles and the grants to them appear.
  const asAdmin = new URL(admin);
  asAdmin.pathname = "/byollm_app";
  await migratePostgres({ connectionString: asAdmin.toString(), createRoles: true });
  assert.deepEqual(await roles(admin), ["anon", "authenticated", "service_role"]);
  const check = new pg.Client({ connectionString: asAdmin.toString() });
  await check.connect();
  try {
    const { rows } = await check.query(
      "select has_table_privilege('authenticated', 'byollm_jobs', 'select') as read, has_function_privilege('service_role', 'byollm_claim_for(text, jsonb, integer, bigint, bigint)', 'execute') as call",
    );
    assert.deepEqual(rows[0], { read: true, call: true });
  } finally {
    await check.end();
  }
});
