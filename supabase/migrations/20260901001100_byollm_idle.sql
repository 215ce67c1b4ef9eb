-- The idle fleet: a paired daemon with nothing to do costs the database
-- (almost) nothing.
--
--   * Liveness is written coalesced. An idle heartbeat writes the runner's
--     `last_heartbeat_at` only when the stored value is older than
--     byollm_liveness_write_ms() (45 s); the capabilities and daemon version
--     when they changed. Otherwise it is a plain read: no row version, no
--     WAL, nothing for vacuum. Every liveness count of a SQL store allows
--     for the lag (the shell adds the core's LIVENESS_SLACK_MS to its
--     window). Its answer says when liveness was last written (`seenAt`).
--   * An empty claim is reads only: the sweep's index probes, then one
--     statement over the claimant's candidates. The claim's locking walk and
--     its UPDATE run only when a candidate is claimable now. The same
--     statement answers `wakeAt`: the earliest moment after `now` at which
--     the runner's claim could find a job without any row changing.
--   * byollm_touch_runners writes the liveness of many runners in one
--     statement (the shell's batched flush).
--   * Triggers send the key of what may have changed on the channel
--     `byollm_work` (LISTEN/NOTIFY, delivered at commit), so a process
--     holding idle answers knows which to forget:
--       o:<owner>  a job of this owner became claimable (inserted queued,
--                  queued again, its claimable_at moved while queued) or a
--                  cancel was asked for on one of its jobs;
--       t          the same for a team job (every team-offering runner);
--       r:<runner> the runner changed other than by a liveness write
--                  (revoked, deleted), or a cancel was asked for on a job
--                  it leases; sent once as `runner_<uuid>` and once as the
--                  bare uuid, the two spellings a runner may sign with;
--       *          a key that would not fit a notification (7,000 bytes).
--     Claims, lease renewals, completions and expiries send nothing: none
--     of them can make an empty claim find a job.
--
-- Every statement is idempotent; fresh and upgraded databases end the same.

-- How old a stored liveness may get before a heartbeat writes it again, in
-- ms. The core defines it (src/engine/rules.rs LIVENESS_WRITE_MS, exported
-- as protocolConstants().livenessWriteMs); a test proves the two equal.
create or replace function byollm_liveness_write_ms() returns bigint
language sql immutable parallel safe
as $$ select 45000::bigint $$;

-- ---------------------------------------------------------------------------
-- Indexes of the empty claim's wake-up time
-- ---------------------------------------------------------------------------

-- Jobs in flight by owner and by lease expiry (a lease that lapses makes its
-- job claimable again, with no row changing until the sweep runs), and the
-- team jobs in flight: each wake-up probe is one index descent.
create index if not exists byollm_jobs_inflight_owner_idx
  on byollm_jobs (owner, lease_expires_at) where state in ('claimed', 'running') and lease_runner is not null;
create index if not exists byollm_jobs_inflight_team_idx
  on byollm_jobs (lease_expires_at) where state in ('claimed', 'running') and lease_runner is not null and audience = 'team';

-- ---------------------------------------------------------------------------
-- The sweep's probes, each on its own index whatever the statistics say
-- ---------------------------------------------------------------------------

-- Every claim starts with the sweep, and an idle sweep is its four probes.
-- As plain EXISTS, the planner could serve a probe from any index whose
-- predicate covers it: with many jobs in flight and a table full of ended
-- jobs (whose lease columns are all null) it estimated hundreds of adopted
-- leases and walked byollm_jobs_lease_idx, every job in flight, on every
-- sweep (1.3 ms at 10,000 in flight). Each probe now asks for the first row
-- in the order of the index made for it (expiry, due time, insertion), which
-- only that index gives without a sort. Passes, order and answer as before.
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
  select (select 1 from byollm_pairings where expires_at <= v_before
           and not (state = 'approved' and collected_at is null)
          order by expires_at limit 1) is not null,
         (select 1 from byollm_jobs
           where state in ('claimed', 'running') and lease_expires_at <= v_now
             and lease_id is not null and lease_runner is not null
          order by lease_expires_at limit 1) is not null,
         (select 1 from byollm_jobs
           where lease_id is not null and lease_runner is null
             and state in ('claimed', 'running')
             and coalesce(deadline_at,
                          coalesce(claimable_at, v_now) + ttl_ms * interval '1 millisecond') <= v_now
          order by byollm_seq limit 1) is not null,
         (select 1 from byollm_jobs
           where state = 'queued' and byollm_due_at(claimable_at, ttl_ms, deadline_at) <= v_now
          order by byollm_due_at(claimable_at, ttl_ms, deadline_at) limit 1) is not null
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

-- ---------------------------------------------------------------------------
-- Heartbeat: liveness written coalesced
-- ---------------------------------------------------------------------------

-- touchRunner, renewLeases and listCancelRequests in that order, for a live
-- runner only: {runner, lost, cancel, seenAt}. The runner row is written
-- only when its liveness is due (older than byollm_liveness_write_ms()) or
-- its capabilities or daemon version changed; liveness never moves back. A
-- heartbeat naming no leases renews nothing and so does not sweep (the
-- sweep runs before every claim and every read of a job).
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
  v_key uuid := byollm_runner_key(p_runner_id);
  v_runner byollm_runners;
  v_lost jsonb := '[]';
begin
  select * into v_runner from byollm_runners where id = v_key;
  if not found or v_runner.revoked_at is not null then
    return jsonb_build_object('runner', byollm_runner_state_json(v_runner));
  end if;
  if v_runner.last_heartbeat_at < byollm_at(p_now - byollm_liveness_write_ms())
     or v_runner.capabilities is distinct from p_capabilities
     or v_runner.daemon_version is distinct from p_daemon_version then
    -- An unchanged value is assigned from the row itself, so PostgreSQL
    -- keeps its stored (TOASTed) copy instead of writing the same bytes.
    update byollm_runners r
       set capabilities = case when r.capabilities is distinct from p_capabilities
                               then p_capabilities else r.capabilities end,
           daemon_version = case when r.daemon_version is distinct from p_daemon_version
                                 then p_daemon_version else r.daemon_version end,
           last_heartbeat_at = greatest(r.last_heartbeat_at, byollm_at(p_now))
     where r.id = v_key and r.revoked_at is null
    returning * into v_runner;
    if not found then
      -- Revoked since it was read.
      return jsonb_build_object(
        'runner', (select byollm_runner_state_json(r) from byollm_runners r where r.id = v_key));
    end if;
  end if;
  if jsonb_typeof(p_leases) = 'array' and jsonb_array_length(p_leases) > 0 then
    v_lost := byollm_renew_leases(p_runner_id, p_leases, p_lease_ms, p_now) -> 'lost';
  end if;
  return jsonb_build_object(
    'runner', byollm_runner_state_json(v_runner),
    'lost', v_lost,
    -- byollm_list_cancel_requests, for this runner.
    'cancel', (select coalesce(jsonb_agg(jsonb_build_object('jobId', j.id, 'leaseId', j.lease_id)
                                         order by c.byollm_seq), '[]')
                 from byollm_job_cancels c
                 join byollm_jobs j on j.id = c.job_id
                where j.lease_runner = v_runner.id and j.lease_id is not null),
    'seenAt', byollm_ms(v_runner.last_heartbeat_at));
end;
$$;

-- ---------------------------------------------------------------------------
-- Claim: an empty one reads, and says when to ask again
-- ---------------------------------------------------------------------------

-- {runner, jobs: [stub]}, and `wakeAt` (epoch ms or null) when no job was
-- claimed. The sweep runs first, as before every claim (a lapsed lease is
-- requeued before the claim looks). Then one read finds the earliest
-- moment any job this runner could take is claimable: the claim's own
-- predicate (see byollm_claim_rows) over queued jobs, whatever their
-- claimable_at, and the lease expiry of every job in flight of its owner
-- (and, when it offers team scope, of every team job in flight; kinds are
-- not checked there, which can only make the answer earlier). Only when
-- that moment has come does byollm_claim_rows lock and claim. `wakeAt` is
-- that moment, at least `now + 1` (a candidate locked by another
-- transaction is worth asking for again at once), or null when there is
-- nothing this runner could take without some row changing first.
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
  v_now timestamptz := byollm_at(p_now);
  v_key uuid := byollm_runner_key(p_runner_id);
  v_runner byollm_runners;
  v_owner byollm_jobs.owner%type;
  v_own text[];
  v_team text[];
  v_next timestamptz;
  v_jobs jsonb := '[]';
  v_swept jsonb;
begin
  select * into v_runner from byollm_runners where id = v_key;
  if not found or v_runner.revoked_at is not null then
    return jsonb_build_object('runner', byollm_runner_state_json(v_runner), 'jobs', '[]'::jsonb);
  end if;
  -- An assignment, not PERFORM: a plain call needs no executor of its own.
  v_swept := byollm_sweep(p_now);
  if p_max is null or p_max <= 0 then
    return jsonb_build_object('runner', byollm_runner_state_json(v_runner), 'jobs', '[]'::jsonb);
  end if;
  v_owner := v_runner.owner;

  -- The kinds it takes of its owner's jobs and of other owners' team jobs,
  -- as byollm_claim_rows reads them.
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

  -- Each arm one descent of a partial index (an owner with nothing queued
  -- and nothing in flight reads no row); an arm whose capabilities are
  -- empty is not started.
  select least(
    (select j.claimable_at from byollm_jobs j
      where j.state = 'queued' and j.owner = v_owner and j.claimable_at is not null
        and cardinality(v_own) > 0 and j.kind = any (v_own) and not (v_key = any (j.refused_by))
      order by j.claimable_at limit 1),
    (select j.claimable_at from byollm_jobs j
      where j.state = 'queued' and j.audience = 'team' and j.claimable_at is not null
        and j.owner is distinct from v_owner
        and cardinality(v_team) > 0 and j.kind = any (v_team)
        and (j.audience_allow is null or v_owner = any (j.audience_allow))
        and not (v_key = any (j.refused_by))
      order by j.claimable_at limit 1),
    (select j.lease_expires_at from byollm_jobs j
      where j.state in ('claimed', 'running') and j.lease_runner is not null and j.owner = v_owner
        and cardinality(v_own) > 0
      order by j.lease_expires_at limit 1),
    (select j.lease_expires_at from byollm_jobs j
      where j.state in ('claimed', 'running') and j.lease_runner is not null and j.audience = 'team'
        and cardinality(v_team) > 0
      order by j.lease_expires_at limit 1))
    into v_next;

  if v_next <= v_now then
    select coalesce(jsonb_agg(byollm_job_stub_json(c, p_runner_id) order by c.claimable_at, c.byollm_seq), '[]')
      into v_jobs
      from byollm_claim_rows(p_runner_id, v_owner::text, p_capabilities, p_max, p_lease_ms, p_now) c;
    if v_jobs <> '[]' then
      return jsonb_build_object('runner', byollm_runner_state_json(v_runner), 'jobs', v_jobs);
    end if;
  end if;
  return jsonb_build_object('runner', byollm_runner_state_json(v_runner), 'jobs', v_jobs,
                            'wakeAt', case when v_next is not null then greatest(byollm_ms(v_next), p_now + 1) end);
end;
$$;

-- ---------------------------------------------------------------------------
-- Liveness of many runners in one statement
-- ---------------------------------------------------------------------------

-- `p_runners`: [{runnerId, now}] (at most 1,000; `now` defaults to p_now).
-- Writes last_heartbeat_at = the entry's `now` for every live runner whose
-- stored value is older (the caller decides when a write is due; a runner
-- named twice takes its latest), locking the rows in key order so two
-- concurrent calls never deadlock. Answers [{runnerId, seenAt, revoked}]
-- per entry, in order: the stored liveness after the call, or null and
-- revoked = true for an unknown or revoked runner.
create or replace function byollm_touch_runners(p_runners jsonb, p_now bigint) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_out jsonb;
begin
  if jsonb_typeof(p_runners) is distinct from 'array' then
    raise exception 'byollm: runners must be an array' using errcode = '22023';
  end if;
  if jsonb_array_length(p_runners) > 1000 then
    raise exception 'byollm: at most 1000 runners per call' using errcode = '22023';
  end if;
  with given as (
    select e.n, e.v ->> 'runnerId' as runner_id, byollm_runner_key(e.v ->> 'runnerId') as id,
           byollm_at(coalesce(trunc((e.v ->> 'now')::numeric)::bigint, p_now)) as at
      from jsonb_array_elements(p_runners) with ordinality as e(v, n)
  ), due as (
    select r.id, g.at
      from byollm_runners r
      join (select id, max(at) as at from given group by id) g on g.id = r.id
     where r.revoked_at is null and r.last_heartbeat_at < g.at
     order by r.id
       for update of r
  ), written as (
    update byollm_runners r set last_heartbeat_at = d.at
      from due d
     where r.id = d.id and r.last_heartbeat_at < d.at
    returning r.id, r.last_heartbeat_at
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'runnerId', g.runner_id,
           'seenAt', case when r.revoked_at is null then byollm_ms(coalesce(w.last_heartbeat_at, r.last_heartbeat_at)) end,
           'revoked', r.id is null or r.revoked_at is not null) order by g.n), '[]')
    into v_out
    from given g
    left join byollm_runners r on r.id = g.id
    left join written w on w.id = g.id;
  return v_out;
end;
$$;

-- ---------------------------------------------------------------------------
-- Notifications: channel byollm_work
-- ---------------------------------------------------------------------------

-- One key, or `*` when it would not fit a notification's payload. The
-- trigger functions below are SECURITY DEFINER (as every function here,
-- see byollm_lock_functions) so that whoever writes a row may send them.
create or replace function byollm_notify_work(p_key text) returns void
language plpgsql volatile
as $$
declare
  v_key text := case when octet_length(p_key) > 7000 or strpos(p_key, chr(10)) > 0 then '*' else p_key end;
begin
  perform pg_notify('byollm_work', v_key);
  -- The same keys for the process that wrote, with its call's answer
  -- (postgresStore reads byollm.keys): its own next request needs no notification.
  perform set_config('byollm.keys', coalesce(current_setting('byollm.keys', true), '') || v_key || chr(10), true);
end;
$$;

-- Jobs inserted claimable: one statement trigger over the transition table,
-- so a bulk insert sends one key per owner (and `t` once).
create or replace function byollm_notify_jobs_inserted() returns trigger
language plpgsql security definer
as $$
begin
  perform byollm_notify_work(k)
     from (select 'o:' || owner::text as k from byollm_work_rows
            where state = 'queued' and claimable_at is not null
           union
           select 't' from byollm_work_rows
            where state = 'queued' and claimable_at is not null and audience = 'team') x;
  return null;
end;
$$;

-- A job that became claimable again (its WHEN clause picks the rows).
create or replace function byollm_notify_job_queued() returns trigger
language plpgsql security definer
as $$
begin
  perform byollm_notify_work('o:' || new.owner::text);
  if new.audience = 'team' then
    perform byollm_notify_work('t');
  end if;
  return null;
end;
$$;

-- A cancel asked for: the job's owner, and the runner leasing it.
create or replace function byollm_notify_cancel() returns trigger
language plpgsql security definer
as $$
declare
  v_job record;
begin
  select owner, lease_runner into v_job from byollm_jobs where id = new.job_id;
  if found then
    perform byollm_notify_work('o:' || v_job.owner::text);
    if v_job.lease_runner is not null then
      perform byollm_notify_work('r:' || byollm_runner_text(v_job.lease_runner));
      perform byollm_notify_work('r:' || v_job.lease_runner::text);
    end if;
  end if;
  return null;
end;
$$;

-- A runner changed other than by a liveness write, or deleted.
create or replace function byollm_notify_runner() returns trigger
language plpgsql security definer
as $$
begin
  perform byollm_notify_work('r:' || byollm_runner_text(old.id));
  perform byollm_notify_work('r:' || old.id::text);
  return null;
end;
$$;

select byollm_lock_functions();

drop trigger if exists byollm_jobs_work_insert on byollm_jobs;
create trigger byollm_jobs_work_insert after insert on byollm_jobs
  referencing new table as byollm_work_rows
  for each statement execute function byollm_notify_jobs_inserted();
drop trigger if exists byollm_jobs_work_queued on byollm_jobs;
create trigger byollm_jobs_work_queued after update of state, claimable_at on byollm_jobs
  for each row
  when (new.state = 'queued' and new.claimable_at is not null
        and (old.state is distinct from new.state or old.claimable_at is distinct from new.claimable_at))
  execute function byollm_notify_job_queued();
drop trigger if exists byollm_job_cancels_work on byollm_job_cancels;
create trigger byollm_job_cancels_work after insert on byollm_job_cancels
  for each row execute function byollm_notify_cancel();
drop trigger if exists byollm_runners_work_update on byollm_runners;
create trigger byollm_runners_work_update after update on byollm_runners
  for each row
  when ((old.id, old.owner, old.revoked_at, old.device, old.capabilities, old.daemon_version,
         old.paused, old.label, old.platform)
        is distinct from
        (new.id, new.owner, new.revoked_at, new.device, new.capabilities, new.daemon_version,
         new.paused, new.label, new.platform))
  execute function byollm_notify_runner();
drop trigger if exists byollm_runners_work_delete on byollm_runners;
create trigger byollm_runners_work_delete after delete on byollm_runners
  for each row execute function byollm_notify_runner();

-- The idle calls keep one plan per statement for the session. Each of their
-- statements is an index probe whatever its arguments; left to choose, a
-- session on a table not yet analyzed plans every statement again on every
-- call (the generic plan looks dearer than the custom one), which cost an
-- empty claim more than twice its work.
alter function byollm_claim_for(text, jsonb, integer, bigint, bigint) set plan_cache_mode = force_generic_plan;
alter function byollm_heartbeat_for(text, jsonb, text, jsonb, bigint, bigint) set plan_cache_mode = force_generic_plan;
