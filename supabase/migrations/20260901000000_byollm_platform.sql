-- What the byollm schema expects from the platform, created only when absent.
--
-- On Supabase every object below already exists and this file changes
-- nothing. On a plain PostgreSQL (the `postgresStore`, CI, a laptop) it
-- supplies the small part of Supabase the later files refer to:
--
--   * when asked (`migratePostgres({ ..., createRoles: true })`, which sets
--     `byollm.create_roles`), the roles `anon`, `authenticated` and
--     `service_role` (NOLOGIN, the last with BYPASSRLS as on Supabase; a
--     connection pooler or our PostgREST stand-in switches into them with
--     SET ROLE), so the grants and RLS policies have someone to name. Roles
--     are cluster-wide and creating them needs CREATEROLE, which a database
--     owner on a hosted PostgreSQL (Neon, RDS) often lacks: without them the
--     access file leaves the schema owner the only caller;
--   * the schema `auth` and the function `auth.uid()`, which reads the `sub`
--     claim of the request's JWT from the `request.jwt.claims` setting, the
--     way PostgREST publishes it (and `request.jwt.claim.sub`, the older
--     spelling). Null when there is no session.
--
-- It does NOT create `auth.users`: on a plain PostgreSQL owners are the app's
-- own user ids (uuids), and the foreign keys to `auth.users` are added only
-- where that table exists (see the schema file).

do $$
declare
  r text;
begin
  if coalesce(current_setting('byollm.create_roles', true), '') <> 'on' then
    return;
  end if;
  foreach r in array array['anon', 'authenticated', 'service_role'] loop
    if not exists (select 1 from pg_roles where rolname = r) then
      begin
        -- As on Supabase, the service role is not subject to row-level
        -- security (only a superuser may grant that; others get a plain role).
        if r = 'service_role' then
          begin
            execute format('create role %I nologin bypassrls', r);
          exception when insufficient_privilege then
            execute format('create role %I nologin', r);
          end;
        else
          execute format('create role %I nologin', r);
        end if;
      exception when duplicate_object or unique_violation then
        -- Roles are cluster-wide: another database of the same cluster may
        -- have created it a moment ago.
        null;
      end;
    end if;
  end loop;
end
$$;

create schema if not exists auth;

do $$
begin
  if to_regprocedure('auth.uid()') is null then
    execute $fn$
      create function auth.uid() returns uuid
      language sql stable
      as $body$
        select coalesce(
          nullif(current_setting('request.jwt.claim.sub', true), ''),
          nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub'
        )::uuid
      $body$
    $fn$;
    if (select count(*) from pg_roles where rolname in ('anon', 'authenticated', 'service_role')) = 3 then
      execute 'grant usage on schema auth to anon, authenticated, service_role';
      execute 'grant execute on function auth.uid() to anon, authenticated, service_role';
    end if;
  end if;
end
$$;
