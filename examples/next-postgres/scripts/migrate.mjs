// Creates or updates byollm's tables and SQL functions in DATABASE_URL.
// Idempotent: run it on every deploy, before the new code serves.
import nextEnv from "@next/env";
import { migratePostgres } from "@byollm/server/postgres";

nextEnv.loadEnvConfig(process.cwd()); // .env.local, as `next dev` reads it
const connectionString = process.env.DATABASE_URL;
if (!connectionString) throw new Error("set DATABASE_URL to your PostgreSQL connection string");
const applied = await migratePostgres({ connectionString });
console.log(`byollm: ${applied.length} migrations applied`);
