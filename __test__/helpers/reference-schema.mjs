// A database as @byollm/server 0.1.1 leaves it on Supabase: what Supabase
// provides that its migrations assume (auth.users, auth.uid(), the three
// roles, the Realtime publication), then its own migration files.
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const REFERENCE_MIGRATIONS = fileURLToPath(new URL("../../node_modules/@byollm/server/supabase/migrations/", import.meta.url));

/** Apply the reference's schema through `client` (a connected pg client). */
export async function applyReferenceSchema(client) {
  await client.query(`set client_min_messages = warning;
    create schema if not exists auth;
    create table if not exists auth.users (id uuid primary key);
    create or replace function auth.uid() returns uuid language sql stable as
      $$ select (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')::uuid $$;
    do $$ begin
      if not exists (select 1 from pg_roles where rolname = 'anon') then create role anon nologin; end if;
      if not exists (select 1 from pg_roles where rolname = 'authenticated') then create role authenticated nologin; end if;
      if not exists (select 1 from pg_roles where rolname = 'service_role') then create role service_role nologin; end if;
    exception when duplicate_object or unique_violation then null;
    end $$;
    -- As on Supabase, the service role is not subject to row-level security.
    alter role service_role bypassrls;
    grant usage on schema auth to anon, authenticated, service_role;
    do $$ begin
      if not exists (select 1 from pg_publication where pubname = 'supabase_realtime') then create publication supabase_realtime; end if;
    end $$;`);
  for (const f of readdirSync(REFERENCE_MIGRATIONS).filter((n) => n.endsWith(".sql")).sort()) {
    await client.query(readFileSync(`${REFERENCE_MIGRATIONS}${f}`, "utf8"));
  }
}
