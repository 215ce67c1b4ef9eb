// Shared by the Postgres/Supabase store tests: find the test server started by
// scripts/pg-start.sh, and give each test file its own freshly migrated
// database (dropped at the end), so files never see each other's rows.
import { spawnSync } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { migratePostgres } from "../dist/postgres.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** Empties the byollm tables of a test database (between tests). */
export const TRUNCATE = "truncate byollm_job_cancels, byollm_jobs, byollm_pairings, byollm_runners cascade";

/**
 * The admin connection string: $BYOLLM_PG_URL, else this checkout's own test
 * server, which scripts/pg-start.sh starts (or finds running) and prints.
 */
export function adminUrl() {
  if (process.env.BYOLLM_PG_URL) return process.env.BYOLLM_PG_URL;
  const started = spawnSync("bash", [join(root, "scripts", "pg-start.sh")], { encoding: "utf8" });
  const url = started.stdout?.trim().split("\n").at(-1);
  if (started.status !== 0 || !url) {
    throw new Error(
      `no PostgreSQL for the store tests: \`bash scripts/pg-start.sh\` failed (set BYOLLM_PG_URL to use a server of your own)\n${started.stderr ?? started.error}`,
    );
  }
  process.env.BYOLLM_PG_URL = url;
  return url;
}

/**
 * A pool for a test file. pg-pool's `end()` resolves once it has asked its
 * idle clients to close, not once they have: the `drop database … with
 * (force)` that follows can reach a backend still connected, and the
 * "terminating connection" error it sends to that client is re-emitted on
 * the pool, which without a listener is an uncaught exception in whichever
 * test runs next. Test pools listen and ignore it (the rows are gone anyway).
 */
export function testPool(connectionString, max) {
  const pool = new pg.Pool({ connectionString, max });
  pool.on("error", () => undefined);
  return pool;
}

/** Create a database, apply the migrations, return its URL and a dropper. */
export async function freshDatabase(label) {
  const admin = adminUrl();
  const name = `byollm_t_${label}_${randomBytes(4).toString("hex")}`;
  const client = new pg.Client({ connectionString: admin });
  try {
    await client.connect();
  } catch (error) {
    throw new Error(
      `PostgreSQL is not reachable at ${admin} (${error.message}); start it with \`bash scripts/pg-start.sh\``,
    );
  }
  await client.query(`create database ${name}`);
  await client.end();
  const url = new URL(admin);
  url.pathname = `/${name}`;
  const dbUrl = url.toString();
  await migratePostgres({ connectionString: dbUrl, createRoles: true });
  return {
    url: dbUrl,
    name,
    async drop() {
      const c = new pg.Client({ connectionString: admin });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`);
      await c.end();
    },
  };
}
