-- Cost independent of the number of stored jobs.
--
-- Every store call touches only the rows it is about: the claim walks the
-- claimant's own queued jobs and the queued team jobs (two partial indexes,
-- in claim order), the sweep reaches due rows through an index on their due
-- time, a completion finds its dependents through the GIN index, and a
-- request's runner is read inside the same function call as its work (one
-- round trip per daemon request). Ended jobs are in no partial index, so a
-- growing history costs disk, not time.
--
-- Applies on top of the earlier files (fresh and upgraded databases alike);
-- every statement is idempotent.

-- ---------------------------------------------------------------------------
-- Owners as the app has them
-- ---------------------------------------------------------------------------
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
-- names nothing on a lookup.

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

-- ---------------------------------------------------------------------------
-- Helpers that the planner can inline
-- ---------------------------------------------------------------------------

-- An SQL body (it was PL/pgSQL) so that it is inlined into the calling query
-- instead of costing a function call per use. Same answer: only the
-- canonical lowercase spelling is a uuid, anything else names nothing.
create or replace function byollm_try_uuid(p text) returns uuid
language sql immutable parallel safe
as $$
  select case when p ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then p::uuid end
$$;

-- When a queued job expires: the first of its deadline and the end of its
-- TTL window (null while it waits on dependencies without a deadline).
-- PL/pgSQL on purpose: an SQL body would be inlined into the index
-- definition, where `timestamptz + interval` is refused as not immutable.
-- With a whole number of milliseconds the sum depends on no time zone, so
-- the function is immutable in fact.
create or replace function byollm_due_at(
  p_claimable_at timestamptz,
  p_ttl_ms       integer,
  p_deadline_at  timestamptz
) returns timestamptz
language plpgsql immutable parallel safe
as $$
begin
  return least(p_deadline_at, p_claimable_at + p_ttl_ms * interval '1 millisecond');
end;
$$;

-- Whether a caller's owner string can be stored in the owner columns: any
-- string on a plain PostgreSQL, a uuid on Supabase (see Owners above).
-- Functions that take an owner declare it `byollm_jobs.owner%type`, so one
-- body serves both schemas. Written for the column's type: where owners are
-- text it is an SQL body the planner inlines; where they are uuids it asks
-- the type's own input function (an exception block, so a subtransaction per
-- call, paid only there).
do $$
begin
  if (select data_type from information_schema.columns
       where table_schema = 'public' and table_name = 'byollm_jobs' and column_name = 'owner') = 'uuid' then
    create or replace function byollm_owner_in(p text) returns boolean
    language plpgsql stable
    set search_path = pg_catalog, public, pg_temp
    as $fn$
    declare
      v byollm_jobs.owner%type;
    begin
      if p is null then
        return false;
      end if;
      v := p;
      return true;
    exception when invalid_text_representation then
      return false;
    end;
    $fn$;
  else
    create or replace function byollm_owner_in(p text) returns boolean
    language sql immutable parallel safe
    as $fn$ select p is not null $fn$;
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- Indexes
-- ---------------------------------------------------------------------------

-- The sweep's expiry pass: queued jobs by due time.
create index if not exists byollm_jobs_due_idx
  on byollm_jobs (byollm_due_at(claimable_at, ttl_ms, deadline_at)) where state = 'queued';

-- The claim's two walks, each in claim order: the claimant's own queued
-- jobs, and the queued team jobs (the only ones another owner may take).
create index if not exists byollm_jobs_claim_own_idx
  on byollm_jobs (owner, claimable_at, byollm_seq) where state = 'queued';
create index if not exists byollm_jobs_claim_team_idx
  on byollm_jobs (claimable_at, byollm_seq) where state = 'queued' and audience = 'team';
-- Replaced by the two above (it made the claim visit every queued job).
drop index if exists byollm_jobs_claim_order_idx;

-- Adopted leases (relay-granted, no runner; the sweep expires them at the
-- job's deadline): few, and only while in flight.
create index if not exists byollm_jobs_adopted_idx
  on byollm_jobs (byollm_seq) where lease_id is not null and lease_runner is null;

-- A runner's leases (heartbeat's cancel requests, listClaimedBy, release):
-- only jobs in flight have a lease runner, so the index stays small.
create index if not exists byollm_jobs_lease_runner_idx
  on byollm_jobs (lease_runner) where lease_runner is not null;

-- A completion looks for the blocked jobs that name it. Only blocked jobs
-- (`claimable_at is null`) can be unblocked, so only they are indexed: the
-- index stays as small as the set of waiting jobs, and the many jobs without
-- dependencies cost it nothing on insert. Replaces 0.1.1's index over every
-- job, whose pending list a search had to read whole.
create index if not exists byollm_jobs_blocked_idx
  on byollm_jobs using gin (depends_on) where claimable_at is null;
drop index if exists byollm_jobs_depends_idx;

-- ---------------------------------------------------------------------------
-- Claim
-- ---------------------------------------------------------------------------

-- The claim predicate, split by who may take what (the same rule as
-- byollm_server_refusal, read off the claim's capabilities once instead of
-- per row): the runner's owner takes its own jobs of any kind it has a
-- capability for; another owner's job only when it is `team` (any other
-- audience is the owner's alone), the owner is on its allowlist (if any),
-- and the FIRST capability for the kind offers `team` on a backend that is
-- not a subscription. Each side is an index walk in claim order that stops
-- after `p_max` rows it could lock; the merge keeps the oldest.
create or replace function byollm_claim(
  p_runner_id    text,
  p_runner_owner text,
  p_capabilities jsonb,
  p_max          integer,
  p_lease_ms     bigint,
  p_now          bigint
) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_runner uuid := byollm_runner_key(p_runner_id);
  -- Null when the owner cannot be one (it then owns nothing).
  v_owner byollm_jobs.owner%type := case when byollm_owner_in(p_runner_owner) then p_runner_owner end;
  v_own text[];
  v_team text[];
  v_out jsonb;
begin
  -- An assignment, not PERFORM: a plain call needs no executor of its own.
  v_out := byollm_sweep(p_now);
  if p_max is null or p_max <= 0 then
    return '[]'::jsonb;
  end if;
  if v_runner is null then
    raise exception 'byollm: runner ids are runner_<uuid> in this schema (or the bare uuid)' using errcode = '22023';
  end if;

  with first_cap as (
    select distinct on (c.value ->> 'kind')
           c.value ->> 'kind' as kind, c.value ->> 'offerScope' as scope, c.value ->> 'backendId' as backend
      from jsonb_array_elements(
             case when jsonb_typeof(p_capabilities) = 'array' then p_capabilities else '[]'::jsonb end
           ) with ordinality as c(value, n)
     where jsonb_typeof(c.value) = 'object' and c.value ->> 'kind' is not null
     order by c.value ->> 'kind', c.n
  )
  select coalesce(array_agg(kind), '{}'),
         coalesce(array_agg(kind) filter (where scope = 'team'
                                            and byollm_backend_cost(backend) <> 'subscription'), '{}')
    into v_own, v_team
    from first_cap;

  with own as (
    select j.id, j.claimable_at, j.byollm_seq
      from byollm_jobs j
     where j.state = 'queued'
       and j.owner = v_owner
       and j.claimable_at <= v_now
       and cardinality(v_own) > 0
       and j.kind = any (v_own)
       and not (v_runner = any (j.refused_by))
     order by j.claimable_at, j.byollm_seq
     limit p_max
     for update skip locked
  ), team as (
    select j.id, j.claimable_at, j.byollm_seq
      from byollm_jobs j
     where j.state = 'queued'
       and j.audience = 'team'
       and j.claimable_at <= v_now
       and j.owner is distinct from v_owner
       -- No team offer: the walk is not even started.
       and cardinality(v_team) > 0
       and j.kind = any (v_team)
       and (j.audience_allow is null or v_owner = any (j.audience_allow))
       and not (v_runner = any (j.refused_by))
     order by j.claimable_at, j.byollm_seq
     limit p_max
     for update skip locked
  ), picked as (
    select u.id from (select * from own union all select * from team) u
     order by u.claimable_at, u.byollm_seq limit p_max
  ), claimed as (
    update byollm_jobs j
       set state = 'claimed',
           lease_id = gen_random_uuid(),
           lease_runner = v_runner,
           lease_expires_at = v_now + p_lease_ms * interval '1 millisecond',
           attempts = j.attempts + 1,
           updated_at = v_now
      from picked p
     where j.id = p.id
    returning j
  )
  select coalesce(jsonb_agg(byollm_job_json_as(c.j, p_runner_id)
                            order by (c.j).claimable_at, (c.j).byollm_seq), '[]')
    into v_out
    from claimed c;
  return v_out;
end;
$$;

-- ---------------------------------------------------------------------------
-- Completion: dependents through the GIN index
-- ---------------------------------------------------------------------------

-- Ends a job its holder completed (the caller locked the row and checked the
-- holder): the outcome stored, the lease cleared, a cancel request dropped,
-- the dependents an `ok` unblocks made claimable. The stored row comes back.
create or replace function byollm_end_job(
  p_row        byollm_jobs,
  p_holder     jsonb,
  p_outcome    jsonb,
  p_provenance jsonb,
  p_now        bigint
) returns byollm_jobs
language plpgsql volatile security definer
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_row byollm_jobs;
  v_state byollm_job_state := case p_outcome ->> 'outcome' when 'ok' then 'ok'
                                                           when 'canceled' then 'canceled'
                                                           else 'error' end;
begin
  update byollm_jobs
     set state = v_state,
         completed_by_lease_id = case when p_holder ->> 'by' = 'lease' then p_holder ->> 'leaseId'
                                      else lease_id::text end,
         lease_id = null, lease_runner = null, lease_expires_at = null,
         outcome = p_outcome, provenance = p_provenance, updated_at = v_now
   where id = p_row.id
  returning * into v_row;

  -- Only a job someone asked to cancel has a row here; the primary key
  -- lookup is all this costs otherwise.
  delete from byollm_job_cancels where job_id = v_row.id;

  if v_state = 'ok' then
    -- Lock the blocked dependents first, then decide in a new statement (a
    -- fresh snapshot): two dependencies completing at once serialise on
    -- these rows, and the second sees the first one's `ok`. `@>` (not
    -- `= any`) so the GIN index on depends_on finds them.
    perform 1 from byollm_jobs d
      where d.claimable_at is null and d.depends_on @> array[v_row.id]
      order by d.byollm_seq
      for update;
    -- Most jobs have no dependents: then there is nothing to decide.
    if found then
      update byollm_jobs d
         set claimable_at = v_now, updated_at = v_now
       where d.claimable_at is null
         and d.depends_on @> array[v_row.id]
         and not exists (
           select 1 from unnest(d.depends_on) dep(id)
            where not exists (select 1 from byollm_jobs x where x.id = dep.id and x.state = 'ok'));
    end if;
  end if;
  return v_row;
end;
$$;

-- First terminal outcome wins. `p_holder` is {by:"runner", runnerId} or
-- {by:"lease", leaseId}. Returns {accepted, duplicate?, job}. Differs from
-- the 0.1.1 adapter: a runner-held completion records the old lease id in
-- completed_by_lease_id (as the in-memory store does), and the dependents
-- are unblocked at `p_now` instead of by a trigger at now().
create or replace function byollm_complete_job(
  p_job_id     text,
  p_runner_id  text,
  p_holder     jsonb,
  p_outcome    jsonb,
  p_provenance jsonb,
  p_now        bigint
) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_row byollm_jobs;
  v_by text := p_holder ->> 'by';
  v_holds boolean;
begin
  select * into v_row from byollm_jobs where id = byollm_job_key(p_job_id) for update;
  if not found then
    return jsonb_build_object('accepted', false, 'job', null);
  end if;

  if v_row.state in ('ok', 'error', 'canceled') then
    -- A duplicate only for the same device presenting the same grant;
    -- anyone else gets the plain refusal a live job would give them.
    if v_row.provenance ->> 'runnerId' is not null
       and v_row.provenance ->> 'runnerId' = p_runner_id
       and v_by = 'lease'
       and v_row.completed_by_lease_id is not null
       and v_row.completed_by_lease_id = p_holder ->> 'leaseId' then
      return jsonb_build_object('accepted', false, 'duplicate', true, 'job', byollm_job_json_as(v_row, p_runner_id));
    end if;
    return jsonb_build_object('accepted', false, 'job', byollm_job_json_as(v_row, p_runner_id));
  end if;
  if v_row.state = 'expired' then
    return jsonb_build_object('accepted', false, 'job', byollm_job_json_as(v_row, p_runner_id));
  end if;

  -- The holder check ignores lease expiry on purpose: only the sweep ends a
  -- lease, so a late result that beats the sweep still counts.
  if v_by = 'runner' then
    v_holds := v_row.lease_id is not null and v_row.lease_expires_at is not null
               and v_row.lease_runner = byollm_runner_key(p_holder ->> 'runnerId');
  else
    v_holds := v_row.lease_id is not null and v_row.lease_expires_at is not null
               and v_row.lease_id::text = p_holder ->> 'leaseId';
  end if;
  if not coalesce(v_holds, false) then
    return jsonb_build_object('accepted', false, 'job', byollm_job_json_as(v_row, p_runner_id));
  end if;

  v_row := byollm_end_job(v_row, p_holder, p_outcome, p_provenance, p_now);
  return jsonb_build_object('accepted', true, 'job', byollm_job_json_as(v_row, p_runner_id));
end;
$$;

-- ---------------------------------------------------------------------------
-- One call per daemon request: the runner read in the same call as the work
-- ---------------------------------------------------------------------------
--
-- The handlers verify a request's signature against the runner's pinned
-- identity, which never changes after approval, so they may use one they
-- read earlier. Whether the runner still exists and is not revoked is read
-- here, in the same call as the work; the work is done only for a live
-- runner. Each answers {runner, ...} with `runner` the fresh record (null
-- when unknown) so the handlers give the same refusals as before.

create or replace function byollm_claim_for(
  p_runner_id    text,
  p_capabilities jsonb,
  p_max          integer,
  p_lease_ms     bigint,
  p_now          bigint
) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_runner byollm_runners;
begin
  select * into v_runner from byollm_runners where id = byollm_runner_key(p_runner_id);
  if not found then
    return jsonb_build_object('runner', null, 'jobs', '[]'::jsonb);
  end if;
  if v_runner.revoked_at is not null then
    return jsonb_build_object('runner', byollm_runner_json_as(v_runner, p_runner_id), 'jobs', '[]'::jsonb);
  end if;
  return jsonb_build_object(
    'runner', byollm_runner_json_as(v_runner, p_runner_id),
    'jobs', byollm_claim(p_runner_id, v_runner.owner::text, p_capabilities, p_max, p_lease_ms, p_now));
end;
$$;


-- touchRunner, renewLeases and listCancelRequests in that order, for a live
-- runner only.

-- ByollmApp.job / result: the sweep, then the job, in one call.
create or replace function byollm_sweep_get_job(p_job_id text, p_now bigint) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_swept jsonb := byollm_sweep(p_now);
begin
  return jsonb_build_object(
    'swept', v_swept,
    'job', (select byollm_job_json(j) from byollm_jobs j where j.id = byollm_job_key(p_job_id)));
end;
$$;

-- ---------------------------------------------------------------------------
-- Per-call cost: PL/pgSQL keeps its statements' plans for the session, an
-- SQL-language function not inlined plans its query on every call; each
-- sweep pass costs a full update statement only when an index probe finds
-- something due; an enqueue without dependencies skips their statements.
-- ---------------------------------------------------------------------------

create or replace function byollm_get_job_for(p_runner_id text, p_job_id text) returns jsonb
language plpgsql stable security definer
as $$
begin
  return jsonb_build_object(
    'runner', (select byollm_runner_json_as(r, p_runner_id) from byollm_runners r where r.id = byollm_runner_key(p_runner_id)),
    'job', (select byollm_job_json_as(j, p_runner_id) from byollm_jobs j where j.id = byollm_job_key(p_job_id)));
end;
$$;

create or replace function byollm_heartbeat_for(
  p_runner_id      text,
  p_capabilities   jsonb,
  p_daemon_version text,
  p_leases         jsonb,
  p_lease_ms       bigint,
  p_now            bigint
) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_runner byollm_runners;
  v_renewal jsonb;
begin
  -- A live runner is touched; an unknown or revoked one is only read.
  update byollm_runners
     set capabilities = p_capabilities, daemon_version = p_daemon_version,
         last_heartbeat_at = byollm_at(p_now)
   where id = byollm_runner_key(p_runner_id) and revoked_at is null
  returning * into v_runner;
  if not found then
    return jsonb_build_object(
      'runner', (select byollm_runner_json_as(r, p_runner_id) from byollm_runners r where r.id = byollm_runner_key(p_runner_id)));
  end if;
  v_renewal := byollm_renew_leases(p_runner_id, p_leases, p_lease_ms, p_now);
  return jsonb_build_object(
    'runner', byollm_runner_json_as(v_runner, p_runner_id),
    'renewed', v_renewal -> 'renewed',
    'lost', v_renewal -> 'lost',
    -- byollm_list_cancel_requests, for this runner.
    'cancel', (select coalesce(jsonb_agg(jsonb_build_object('jobId', j.id, 'leaseId', j.lease_id)
                                         order by c.byollm_seq), '[]')
                 from byollm_job_cancels c
                 join byollm_jobs j on j.id = c.job_id
                where j.lease_runner = v_runner.id and j.lease_id is not null));
end;
$$;

-- A daemon's result, completed in the call that reads its runner and job
-- when the request plainly holds the job: a live runner presenting the live
-- lease it was granted, unexpired, with provenance built for the job's
-- audience. Then {runner, accepted: true, state}. Anything else writes
-- nothing and answers {runner, job} (runner null when unknown; job null
-- when unknown), from which the handlers decide as with a plain read.
create or replace function byollm_result_for(
  p_runner_id  text,
  p_job_id     text,
  p_lease_id   text,
  p_outcome    jsonb,
  p_provenance jsonb,
  p_now        bigint
) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_runner byollm_runners;
  v_row byollm_jobs;
begin
  select * into v_runner from byollm_runners where id = byollm_runner_key(p_runner_id);
  if not found then
    return jsonb_build_object('runner', null);
  end if;
  if v_runner.revoked_at is not null then
    return jsonb_build_object('runner', byollm_runner_json_as(v_runner, p_runner_id));
  end if;
  select * into v_row from byollm_jobs where id = byollm_job_key(p_job_id) for update;
  if v_row.state in ('claimed', 'running')
     and v_row.lease_id::text = p_lease_id
     and v_row.lease_runner = v_runner.id
     and v_row.lease_expires_at > byollm_at(p_now)
     and v_row.audience::text = p_provenance ->> 'audience' then
    v_row := byollm_end_job(v_row, jsonb_build_object('by', 'lease', 'leaseId', p_lease_id),
                            p_outcome, p_provenance, p_now);
    return jsonb_build_object('runner', byollm_runner_json_as(v_runner, p_runner_id), 'accepted', true, 'state', v_row.state);
  end if;
  return jsonb_build_object('runner', byollm_runner_json_as(v_runner, p_runner_id), 'job', byollm_job_json_as(v_row, p_runner_id));
end;
$$;

-- Pairings are pruned by the sweep, as the in-memory store prunes them
-- (`pair start` is unauthenticated: nothing may pile up without bound). How
-- long after its expiry a pairing is kept: the protocol's clock window,
-- so a daemon whose clock runs behind still hears `expired` before the
-- pairing is gone. An approval its daemon has not collected is kept until it
-- is: approvals come from a signed-in person, not from unauthenticated
-- traffic, and the daemon may collect one at any time after it was made.
create or replace function byollm_prune_pairings(p_now bigint) returns integer
language plpgsql volatile security definer
as $$
declare
  v_before timestamptz := byollm_at(p_now - 120000);
  v_gone integer := 0;
begin
  if exists (select 1 from byollm_pairings where expires_at <= v_before
             and not (state = 'approved' and collected_at is null)) then
    delete from byollm_pairings where expires_at <= v_before
      and not (state = 'approved' and collected_at is null);
    get diagnostics v_gone = row_count;
  end if;
  return v_gone;
end;
$$;

-- The sweep: same passes, order and answer as before; each reaches its rows
-- through an index (lapsed leases through byollm_jobs_lease_idx, bounded by
-- the jobs in flight; adopted leases through byollm_jobs_adopted_idx; due
-- queued jobs through byollm_jobs_due_idx), and runs its update only when a
-- probe of that index finds a row. The four probes are one statement: most
-- sweeps find nothing, and then that statement is the sweep's whole cost.
create or replace function byollm_sweep(p_now bigint) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_before timestamptz := byollm_at(p_now - 120000);
  v_reclaimed jsonb := '[]';
  v_adopted jsonb := '[]';
  v_expired jsonb := '[]';
  v_stale_pairings boolean;
  v_lapsed boolean;
  v_adopted_due boolean;
  v_queued_due boolean;
begin
  select exists (select 1 from byollm_pairings where expires_at <= v_before
                  and not (state = 'approved' and collected_at is null)),
         exists (select 1 from byollm_jobs
                  where state in ('claimed', 'running') and lease_expires_at <= v_now
                    and lease_id is not null and lease_runner is not null),
         exists (select 1 from byollm_jobs
                  where lease_id is not null and lease_runner is null
                    and state in ('claimed', 'running')
                    and coalesce(deadline_at,
                                 coalesce(claimable_at, v_now) + ttl_ms * interval '1 millisecond') <= v_now),
         exists (select 1 from byollm_jobs
                  where state = 'queued' and byollm_due_at(claimable_at, ttl_ms, deadline_at) <= v_now)
    into v_stale_pairings, v_lapsed, v_adopted_due, v_queued_due;
  if v_stale_pairings then
    perform byollm_prune_pairings(p_now);
  end if;
  if v_lapsed then
    with due as (
      select id from byollm_jobs
       where state in ('claimed', 'running')
         and lease_expires_at <= v_now
         and lease_id is not null and lease_runner is not null
       for update skip locked
    ), changed as (
      update byollm_jobs j
         set state = 'queued', lease_id = null, lease_runner = null, lease_expires_at = null,
             completed_by_lease_id = null, claimable_at = v_now, updated_at = v_now
        from due where j.id = due.id
      returning j
    )
    select coalesce(jsonb_agg(byollm_job_json(c.j) order by (c.j).byollm_seq), '[]') into v_reclaimed
      from changed c;
  end if;

  -- Adopted leases carry the relay's expiry, which this clock does not
  -- enforce; they are few (cloud lane only) and all in flight.
  if v_adopted_due then
    with due as (
      select id from byollm_jobs
       where state in ('claimed', 'running')
         and lease_id is not null and lease_runner is null
         and coalesce(deadline_at,
                      coalesce(claimable_at, v_now) + ttl_ms * interval '1 millisecond') <= v_now
       for update skip locked
    ), changed as (
      update byollm_jobs j
         set state = 'expired', lease_id = null, lease_runner = null, lease_expires_at = null,
             completed_by_lease_id = null, updated_at = v_now
        from due where j.id = due.id
      returning j
    )
    select coalesce(jsonb_agg(byollm_job_json(c.j) order by (c.j).byollm_seq), '[]') into v_adopted
      from changed c;
  end if;

  -- A job requeued above restarts its TTL window now: with a zero TTL it
  -- is due in this same pass.
  if v_queued_due or v_reclaimed <> '[]' then
    with due as (
      select id from byollm_jobs
       where state = 'queued'
         and byollm_due_at(claimable_at, ttl_ms, deadline_at) <= v_now
       for update skip locked
    ), changed as (
      update byollm_jobs j
         set state = 'expired', lease_id = null, lease_runner = null, lease_expires_at = null,
             completed_by_lease_id = null, updated_at = v_now
        from due where j.id = due.id
      returning j
    )
    select coalesce(jsonb_agg(byollm_job_json(c.j) order by (c.j).byollm_seq), '[]') into v_expired
      from changed c;
  end if;

  return v_reclaimed || v_adopted || v_expired;
end;
$$;

-- Enqueue. `p_job`: {id, kind, envelope, sizeClass, owner, audience?,
-- purpose?, audienceAllow?, dependsOn?, ttlMs, deadlineAt?} with ttlMs
-- already defaulted by the store. Idempotent by id: an existing job is
-- returned unchanged. Answers {created, job}.
--
-- One statement for a new id (the insert reports a conflict itself) and
-- none for dependencies when there are none. Job ids (the job's own and its
-- dependencies) are any non-empty string on a plain PostgreSQL; on Supabase,
-- where the columns are uuids, anything but a lowercase uuid is refused.
create or replace function byollm_create_job(p_job jsonb, p_now bigint) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  -- The columns' types (see byollm_job_key and the owners above).
  v_id byollm_jobs.id%type := byollm_job_key(p_job ->> 'id');
  v_deps byollm_jobs.depends_on%type := '{}';
  v_owner byollm_jobs.owner%type := p_job ->> 'owner';
  v_allow byollm_jobs.audience_allow%type;
  v_blocked boolean := false;
  v_row byollm_jobs;
begin
  if v_id is null or v_id::text = '' then
    raise exception '%', case when pg_typeof(v_id) = 'uuid'::regtype
                              then 'byollm: job ids must be lowercase UUIDs (the id column is a uuid)'
                              else 'byollm: job ids are non-empty strings' end
      using errcode = '22023';
  end if;

  if jsonb_typeof(p_job -> 'dependsOn') = 'array' and jsonb_array_length(p_job -> 'dependsOn') > 0 then
    -- An existing id is returned unchanged, before its dependencies are
    -- looked at (they may name jobs that are gone).
    select * into v_row from byollm_jobs where id = v_id;
    if found then
      return jsonb_build_object('created', false, 'job', byollm_job_json(v_row));
    end if;
    v_deps := array(select byollm_job_key(d) from jsonb_array_elements_text(p_job -> 'dependsOn') d);
    if array_position(v_deps, null) is not null then
      raise exception '%', case when pg_typeof(v_id) = 'uuid'::regtype
                                then 'byollm: job ids must be lowercase UUIDs (the id column is a uuid)'
                                else 'byollm: job ids are non-empty strings' end
        using errcode = '22023';
    end if;
    -- Share-lock the dependencies while deciding: a dependency completing at
    -- the same moment then either commits first (and is seen as ok here) or
    -- waits for this insert (and its unblock step sees this job).
    perform 1 from byollm_jobs where id = any (v_deps) for share;
    v_blocked := exists (
      select 1 from unnest(v_deps) d(id)
       where not exists (select 1 from byollm_jobs j where j.id = d.id and j.state = 'ok'));
  end if;
  if jsonb_typeof(p_job -> 'audienceAllow') = 'array' then
    v_allow := array(select jsonb_array_elements_text(p_job -> 'audienceAllow'));
  end if;

  insert into byollm_jobs (id, kind, envelope, size_class, audience, purpose, owner,
                           audience_allow, depends_on, state, claimable_at, ttl_ms,
                           deadline_at, created_at, updated_at)
  values (v_id, p_job ->> 'kind', p_job -> 'envelope', p_job ->> 'sizeClass',
          coalesce(p_job ->> 'audience', 'private')::byollm_audience,
          p_job ->> 'purpose', v_owner, v_allow, v_deps, 'queued',
          case when v_blocked then null else v_now end,
          (p_job ->> 'ttlMs')::integer,
          case when jsonb_typeof(p_job -> 'deadlineAt') = 'number'
               then byollm_at((p_job ->> 'deadlineAt')::numeric::bigint) end,
          v_now, v_now)
  on conflict (id) do nothing
  returning * into v_row;

  if not found then
    select * into v_row from byollm_jobs where id = v_id;
    return jsonb_build_object('created', false, 'job', byollm_job_json(v_row));
  end if;
  return jsonb_build_object('created', true, 'job', byollm_job_json(v_row));
end;
$$;

-- ---------------------------------------------------------------------------
-- Who may call what (the rules file's byollm_lock_functions), over every
-- byollm function, so one first created in this file (on a fresh database:
-- the enqueue, the claim, the completion) is never executable by PUBLIC once
-- this file's transaction commits.
-- ---------------------------------------------------------------------------

select byollm_lock_functions();
