-- Owners as the app has them.
--
-- On a plain PostgreSQL (no `auth.users`) an owner is the app's own user id:
-- `user_2abc…` from Clerk, `auth0|…`, a number. There the owner columns and
-- `audience_allow` become text, as MemoryStore takes any non-empty string. On
-- Supabase (where `auth.users` exists) they stay uuids tied to `auth.users`
-- by their foreign keys.
--
-- The functions that take an owner declare it with the column's own type
-- (`byollm_jobs.owner%type`, see byollm_owner_in), so one body serves both
-- schemas: on Supabase an owner that is not a uuid is refused on a write and
-- names nothing on a lookup, as before.

do $$
begin
  if to_regclass('auth.users') is null
     and (select data_type from information_schema.columns
           where table_schema = 'public' and table_name = 'byollm_jobs' and column_name = 'owner') = 'uuid' then
    -- A column a policy reads cannot change type: drop them, and apply them
    -- again (with text comparisons) once the columns have.
    drop policy if exists byollm_runners_owner_select on byollm_runners;
    drop policy if exists byollm_jobs_owner_select on byollm_jobs;
    drop policy if exists byollm_pairings_owner_select on byollm_pairings;
    drop policy if exists byollm_job_cancels_owner_select on byollm_job_cancels;
    alter table byollm_jobs     alter column owner type text using owner::text,
                                alter column audience_allow type text[] using audience_allow::text[];
    alter table byollm_runners  alter column owner type text using owner::text;
    alter table byollm_pairings alter column owner type text using owner::text;
    if exists (select 1 from pg_roles where rolname = 'authenticated') then
      perform byollm_apply_policies();
    end if;
  end if;
end
$$;

-- Stores a PairingRecord; the same device-code hash overwrites (keeping its
-- place in insertion order). PL/pgSQL (it was SQL) for the owner's type.
create or replace function byollm_create_pairing(p_pairing jsonb) returns void
language plpgsql volatile security definer
set search_path = pg_catalog, public, pg_temp
set jit = off
as $$
declare
  v_owner byollm_pairings.owner%type := p_pairing ->> 'owner';
begin
  insert into byollm_pairings as p (device_code_hash, user_code, state, owner, runner_id,
                                    collected_at, label, platform, daemon_version,
                                    capabilities, device, expires_at, created_at)
  values (p_pairing ->> 'deviceCodeHash', p_pairing ->> 'userCode', p_pairing ->> 'state',
          v_owner, (p_pairing ->> 'runnerId')::uuid,
          case when (p_pairing ->> 'collected')::boolean then now() end,
          p_pairing ->> 'label', p_pairing ->> 'platform', p_pairing ->> 'daemonVersion',
          coalesce(p_pairing -> 'capabilities', '[]'::jsonb), p_pairing -> 'device',
          byollm_at((p_pairing ->> 'expiresAt')::numeric::bigint),
          byollm_at((p_pairing ->> 'createdAt')::numeric::bigint))
  on conflict (device_code_hash) do update
     set user_code = excluded.user_code, state = excluded.state, owner = excluded.owner,
         runner_id = excluded.runner_id, collected_at = excluded.collected_at,
         label = excluded.label, platform = excluded.platform,
         daemon_version = excluded.daemon_version, capabilities = excluded.capabilities,
         device = excluded.device, expires_at = excluded.expires_at,
         created_at = excluded.created_at;
end;
$$;

do $$
declare
  f regprocedure := 'byollm_create_pairing(jsonb)'::regprocedure;
begin
  execute format('revoke all on function %s from public', f);
  if exists (select 1 from pg_roles where rolname = 'anon') then
    execute format('revoke all on function %s from anon', f);
  end if;
  if exists (select 1 from pg_roles where rolname = 'authenticated') then
    execute format('revoke all on function %s from authenticated', f);
  end if;
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    execute format('grant execute on function %s to service_role', f);
  end if;
end
$$;
