-- Who may touch what: row-level security, grants, the Realtime publication.
--
-- Three kinds of caller:
--
--   * the server (postgresStore / supabaseStore): the schema owner or
--     `service_role`. It writes only through the functions of the rules file,
--     which are SECURITY DEFINER, and it is the only caller granted them.
--   * a browser session (`authenticated`, auth.uid() = the user): may READ
--     its own rows, nothing else. Pairings are approved through the app
--     (ByollmApp.approvePairing, behind the app's own page and limits), not
--     over PostgREST, where anyone who can sign up could guess codes.
--   * `anon`: nothing at all.
--
-- Narrower than 0.1.1, on purpose: that schema also let a browser insert jobs
-- and cancel rows and update or delete its runners. Each of those bypasses a
-- rule here (a job needs an envelope sealed by the site's key; a cancel of a
-- queued job must cancel it, not file a request; clearing `revoked_at` would
-- un-revoke; deleting a runner turns its leases into what reads as relay
-- leases). Those actions go through the app (ByollmApp), which calls the
-- store.

alter table byollm_runners     enable row level security;
alter table byollm_jobs        enable row level security;
alter table byollm_pairings    enable row level security;
alter table byollm_job_cancels enable row level security;

-- The browser sessions' read policies, recreated whole (dropping the 0.1.1
-- ones by name) so that a database migrated by either package ends with
-- exactly this set. A function so that the scale file can apply them
-- again after changing the owner columns' type. Needs the role
-- `authenticated`.
create or replace function byollm_apply_policies() returns void
language plpgsql
set search_path = pg_catalog, public, pg_temp
as $fn$
declare
  v_uid text;
begin
  drop policy if exists byollm_runners_owner_select on byollm_runners;
  drop policy if exists byollm_runners_owner_update on byollm_runners;
  drop policy if exists byollm_runners_owner_delete on byollm_runners;
  drop policy if exists byollm_jobs_owner_select on byollm_jobs;
  drop policy if exists byollm_jobs_owner_insert on byollm_jobs;
  drop policy if exists byollm_pairings_owner_select on byollm_pairings;
  drop policy if exists byollm_job_cancels_owner_select on byollm_job_cancels;
  drop policy if exists byollm_job_cancels_owner_insert on byollm_job_cancels;

  -- `(select auth.uid())` is evaluated once per statement, not per row.
  -- Owners are uuids on Supabase (compared as uuids, so the owner indexes
  -- serve) and any string on a plain PostgreSQL (compared as text).
  v_uid := case when (select data_type from information_schema.columns
                       where table_schema = 'public' and table_name = 'byollm_jobs'
                         and column_name = 'owner') = 'uuid'
                then '(select auth.uid())' else '(select auth.uid())::text' end;
  execute format('create policy byollm_runners_owner_select on byollm_runners
                    for select to authenticated using (%s = owner)', v_uid);
  execute format('create policy byollm_jobs_owner_select on byollm_jobs
                    for select to authenticated using (%s = owner)', v_uid);
  execute format('create policy byollm_pairings_owner_select on byollm_pairings
                    for select to authenticated using (%s = owner)', v_uid);
  execute format('create policy byollm_job_cancels_owner_select on byollm_job_cancels
                    for select to authenticated using (
                      exists (select 1 from byollm_jobs j
                               where j.id = byollm_job_cancels.job_id and j.owner = %s))', v_uid);
end;
$fn$;

-- Everything below names the three roles. A plain PostgreSQL migrated by a
-- database owner without CREATEROLE may not have them (see the platform
-- file); there the schema owner is the only caller, RLS stays on with no
-- policy (so no other role reads a row), and the grants are skipped.
do $$
begin
  if (select count(*) from pg_roles where rolname in ('anon', 'authenticated', 'service_role')) < 3 then
    revoke all on byollm_jobs, byollm_runners, byollm_pairings, byollm_job_cancels from public;
    perform byollm_lock_functions();
    return;
  end if;

  perform byollm_apply_policies();

  -- Table privileges: revoke whatever a platform's default privileges handed
  -- out, then grant exactly what is meant. RLS picks the rows; these pick the
  -- operations; both are needed.
  revoke all on byollm_jobs, byollm_runners, byollm_pairings, byollm_job_cancels
    from public, anon, authenticated;
  grant select on byollm_jobs, byollm_runners, byollm_pairings, byollm_job_cancels
    to authenticated;
  grant select, insert, update, delete
    on byollm_jobs, byollm_runners, byollm_pairings, byollm_job_cancels to service_role;

  perform byollm_lock_functions();
end
$$;

-- Realtime delivery listens to job updates where Supabase Realtime exists.
do $$
begin
  if exists (select 1 from pg_publication where pubname = 'supabase_realtime')
     and not exists (select 1 from pg_publication_tables
                      where pubname = 'supabase_realtime' and tablename = 'byollm_jobs') then
    execute 'alter publication supabase_realtime add table byollm_jobs';
  end if;
end
$$;
