-- The engine's answers: each function the engine's store operations call
-- (ts/sql-store.ts OPERATIONS) answers what src/engine/ops.rs reads of it
-- and nothing more. The engine already holds the runner it verified the
-- request against and the payload it sealed, so the database sends neither
-- back:
--
--   * the runner read again with a request's work is `{"revokedAt": …}`
--     (null for an unknown runner): whether it still exists and is not
--     revoked, which is all the engine asks of it;
--   * a claimed job is its stub (what the daemon's claim answer is written
--     from, with its creation time and attempts for the metrics), without
--     the envelope, outcome or provenance;
--   * the job a fetch reads is its lease, audience, state, creation time and
--     envelope; the job a result reads when it does not complete in the same
--     call is the same without the envelope; a result completed in the call
--     answers the job's state and creation time;
--   * a job `byollm_create_job` has just created comes back without the
--     envelope the caller gave it (the store puts the caller's back); an
--     existing id still answers the stored record whole.
--
-- The store methods (`claim`, `get`, …) still answer whole records: the
-- claim's query is one function, `byollm_claim_rows`, that both the record
-- answer and the stub answer are written from.
--
-- Every statement is idempotent; fresh and upgraded databases end the same.

-- ---------------------------------------------------------------------------
-- Pieces of records, each rule once
-- ---------------------------------------------------------------------------

-- A job's lease: an id plus an expiry, or null. No runner means an adopted
-- lease (relay-granted), which the contract spells `runnerId: ""`. The
-- runner's id is spelled as `p_runner_id` spells it when that names the
-- holder (a runner that signs with its bare uuid, see byollm_runner_key),
-- else as records spell it (`p_runner_id` null: always).
create or replace function byollm_lease_json_as(j byollm_jobs, p_runner_id text) returns jsonb
language sql stable
as $$
  select case when j.lease_id is null or j.lease_expires_at is null then null
              else jsonb_build_object(
                'id', j.lease_id,
                'runnerId', case when j.lease_runner is null then ''
                                 when left(p_runner_id, 7) <> 'runner_'
                                      and j.lease_runner = byollm_runner_key(p_runner_id) then p_runner_id
                                 else byollm_runner_text(j.lease_runner) end,
                'expiresAt', byollm_ms(j.lease_expires_at)) end
$$;

-- The whole record, with the lease spelled for the caller (the store
-- methods' answers about the caller's own jobs).
create or replace function byollm_job_json_as(j byollm_jobs, p_runner_id text) returns jsonb
language sql stable
as $$
  select case when j.id is null then null else jsonb_build_object(
    'id', j.id,
    'kind', j.kind,
    'envelope', j.envelope,
    'sizeClass', j.size_class,
    'audience', j.audience,
    'purpose', j.purpose,
    'owner', j.owner,
    'audienceAllow', to_jsonb(j.audience_allow),
    'dependsOn', to_jsonb(j.depends_on),
    'state', j.state,
    'lease', byollm_lease_json_as(j, p_runner_id),
    'completedByLeaseId', j.completed_by_lease_id,
    'createdAt', byollm_ms(j.created_at),
    'claimableAt', byollm_ms(j.claimable_at),
    'ttlMs', j.ttl_ms,
    'deadlineAt', byollm_ms(j.deadline_at),
    -- Each uuid as `runner_<uuid>`, without a subquery (which would keep
    -- this function from being inlined into the queries that call it).
    'refusedBy', case when cardinality(j.refused_by) = 0 then '[]'::jsonb
                      else to_jsonb(string_to_array('runner_' || array_to_string(j.refused_by, ',runner_'), ',')) end,
    'attempts', j.attempts,
    'outcome', j.outcome,
    'provenance', j.provenance,
    'updatedAt', byollm_ms(j.updated_at)
  ) end
$$;

create or replace function byollm_job_json(j byollm_jobs) returns jsonb
language sql stable
as $$ select byollm_job_json_as(j, null) $$;

-- A claimed job as the engine writes the daemon's stub from it (and, from
-- its creation time and attempts, a first claim's queue wait).
create or replace function byollm_job_stub_json(j byollm_jobs, p_runner_id text) returns jsonb
language sql stable
as $$
  select case when j.id is null then null else jsonb_build_object(
    'id', j.id,
    'kind', j.kind,
    'audience', j.audience,
    'owner', j.owner,
    'purpose', j.purpose,
    'sizeClass', j.size_class,
    'deadlineAt', byollm_ms(j.deadline_at),
    'claimableAt', byollm_ms(j.claimable_at),
    'ttlMs', j.ttl_ms,
    'lease', byollm_lease_json_as(j, p_runner_id),
    'createdAt', byollm_ms(j.created_at),
    'attempts', j.attempts
  ) end
$$;

-- A job as the engine checks a request's lease on it (fetch, result): its
-- lease, audience, state and creation time. A fetch adds the envelope.
create or replace function byollm_job_held_json(j byollm_jobs, p_runner_id text) returns jsonb
language sql stable
as $$
  select case when j.id is null then null else jsonb_build_object(
    'audience', j.audience,
    'state', j.state,
    'lease', byollm_lease_json_as(j, p_runner_id),
    'createdAt', byollm_ms(j.created_at)
  ) end
$$;

-- A runner read again with a request's work: whether it is revoked (null
-- for an unknown runner).
create or replace function byollm_runner_state_json(r byollm_runners) returns jsonb
language sql stable
as $$
  select case when r.id is null then null else jsonb_build_object('revokedAt', byollm_ms(r.revoked_at)) end
$$;

-- ---------------------------------------------------------------------------
-- Claim: one query, two answers
-- ---------------------------------------------------------------------------

-- Sweeps, then claims: the rows claimed, with their new leases. The claim
-- predicate, split by who may take what (the same rule as
-- byollm_server_refusal, read off the claim's capabilities once instead of
-- per row): the runner's owner takes its own jobs of any kind it has a
-- capability for; another owner's job only when it is `team` (any other
-- audience is the owner's alone), the owner is on its allowlist (if any),
-- and the FIRST capability for the kind offers `team` on a backend that is
-- not a subscription. Each side is an index walk in claim order that stops
-- after `p_max` rows it could lock; the merge keeps the oldest. The caller
-- orders the rows (claimable_at, byollm_seq).
--
-- `rows 1` (a daemon claims a few jobs at a time) rather than the default
-- estimate of 1,000: the callers' statements are planned once per session.
-- With a thousand rows, their answer's per-row expressions, cheaper once the
-- runner id is known, would make PostgreSQL plan them again on every call
-- (a custom plan each time, about 0.4 ms).
create or replace function byollm_claim_rows(
  p_runner_id    text,
  p_runner_owner text,
  p_capabilities jsonb,
  p_max          integer,
  p_lease_ms     bigint,
  p_now          bigint
) returns setof byollm_jobs
language plpgsql volatile security definer rows 1
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_runner uuid := byollm_runner_key(p_runner_id);
  -- Null when the owner cannot be one (it then owns nothing).
  v_owner byollm_jobs.owner%type := case when byollm_owner_in(p_runner_owner) then p_runner_owner end;
  v_own text[];
  v_team text[];
  v_swept jsonb;
begin
  -- An assignment, not PERFORM: a plain call needs no executor of its own.
  v_swept := byollm_sweep(p_now);
  if p_max is null or p_max <= 0 then
    return;
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

  return query
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
    returning j.*
  )
  select * from claimed;
end;
$$;

-- The store method `claim`: the claimed jobs' records, in claim order.
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
begin
  return (select coalesce(jsonb_agg(byollm_job_json_as(c, p_runner_id) order by c.claimable_at, c.byollm_seq), '[]')
            from byollm_claim_rows(p_runner_id, p_runner_owner, p_capabilities, p_max, p_lease_ms, p_now) c);
end;
$$;

-- ---------------------------------------------------------------------------
-- One call per daemon request: the runner read in the same call as the work
-- ---------------------------------------------------------------------------
--
-- The engine checks a request's signature against the runner's pinned
-- identity, which never changes after approval, so it may use one it read
-- earlier. Whether the runner still exists and is not revoked is read here,
-- in the same call as the work; the work is done only for a live runner.
-- Each answers {runner, ...} with `runner` as byollm_runner_state_json.

-- {runner, jobs: [stub]}.
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
  if not found or v_runner.revoked_at is not null then
    return jsonb_build_object('runner', byollm_runner_state_json(v_runner), 'jobs', '[]'::jsonb);
  end if;
  return jsonb_build_object(
    'runner', byollm_runner_state_json(v_runner),
    'jobs', (select coalesce(jsonb_agg(byollm_job_stub_json(c, p_runner_id) order by c.claimable_at, c.byollm_seq), '[]')
               from byollm_claim_rows(p_runner_id, v_runner.owner::text, p_capabilities, p_max, p_lease_ms, p_now) c));
end;
$$;

-- {runner, job}: the job a fetch (or a result the engine did not complete
-- in one call) reads, with its envelope.
create or replace function byollm_get_job_for(p_runner_id text, p_job_id text) returns jsonb
language plpgsql stable security definer
as $$
begin
  return jsonb_build_object(
    'runner', (select byollm_runner_state_json(r) from byollm_runners r where r.id = byollm_runner_key(p_runner_id)),
    'job', (select byollm_job_held_json(j, p_runner_id) || jsonb_build_object('envelope', j.envelope)
              from byollm_jobs j where j.id = byollm_job_key(p_job_id)));
end;
$$;

-- touchRunner, renewLeases and listCancelRequests in that order, for a live
-- runner only: {runner, lost, cancel}. Set-based as in the bounds file: one
-- UPDATE over the named leases (byollm_renew_leases), the capabilities and
-- daemon version written only when they changed.
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
  -- A live runner is touched; an unknown or revoked one is only read. An
  -- unchanged value is assigned from the row itself, so PostgreSQL keeps
  -- its stored (TOASTed) copy instead of writing the same bytes again.
  update byollm_runners r
     set capabilities = case when r.capabilities is distinct from p_capabilities
                             then p_capabilities else r.capabilities end,
         daemon_version = case when r.daemon_version is distinct from p_daemon_version
                               then p_daemon_version else r.daemon_version end,
         last_heartbeat_at = byollm_at(p_now)
   where r.id = byollm_runner_key(p_runner_id) and r.revoked_at is null
  returning * into v_runner;
  if not found then
    return jsonb_build_object(
      'runner', (select byollm_runner_state_json(r) from byollm_runners r where r.id = byollm_runner_key(p_runner_id)));
  end if;
  v_renewal := byollm_renew_leases(p_runner_id, p_leases, p_lease_ms, p_now);
  return jsonb_build_object(
    'runner', byollm_runner_state_json(v_runner),
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
-- audience. Then {runner, accepted: true, state, createdAt} (the job's
-- enqueue time, which times the job). Anything else writes nothing and
-- answers {runner, job} (job as byollm_job_held_json, null when unknown),
-- from which the engine decides as with a plain read.
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
  if not found or v_runner.revoked_at is not null then
    return jsonb_build_object('runner', byollm_runner_state_json(v_runner));
  end if;
  select * into v_row from byollm_jobs where id = byollm_job_key(p_job_id) for update;
  if v_row.state in ('claimed', 'running')
     and v_row.lease_id::text = p_lease_id
     and v_row.lease_runner = v_runner.id
     and v_row.lease_expires_at > byollm_at(p_now)
     and v_row.audience::text = p_provenance ->> 'audience' then
    v_row := byollm_end_job(v_row, jsonb_build_object('by', 'lease', 'leaseId', p_lease_id),
                            p_outcome, p_provenance, p_now);
    return jsonb_build_object('runner', byollm_runner_state_json(v_runner), 'accepted', true, 'state', v_row.state,
                              'createdAt', byollm_ms(v_row.created_at));
  end if;
  return jsonb_build_object('runner', byollm_runner_state_json(v_runner), 'job', byollm_job_held_json(v_row, p_runner_id));
end;
$$;

-- byollm_result_for answers the enqueue time itself, from the row it
-- completed: the wrapper that read it again is gone.
drop function if exists byollm_result_for_timed(text, text, text, jsonb, jsonb, bigint);

-- ---------------------------------------------------------------------------
-- Enqueue: a new job answered without the envelope its caller holds
-- ---------------------------------------------------------------------------

-- `p_job`: {id, kind, envelope, sizeClass, owner, audience?, purpose?,
-- audienceAllow?, dependsOn?, ttlMs, deadlineAt?} with ttlMs already
-- defaulted by the store. Idempotent by id: an existing job is returned
-- unchanged, whole. Answers {created, job}; a created job's record comes
-- without its envelope, which is the caller's own `p_job -> 'envelope'`.
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
  -- The columns' types (see byollm_job_key and the owners in the scale file).
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
  return jsonb_build_object('created', true, 'job', byollm_job_json(v_row) - 'envelope');
end;
$$;

-- ---------------------------------------------------------------------------
-- Completion: the blocked dependents through their index, always
-- ---------------------------------------------------------------------------

-- PL/pgSQL plans each statement once per session. A session whose first
-- completion came while byollm_jobs was nearly empty kept a sequential scan
-- for the dependents lookup (the GIN index's estimate loses to a scan of a
-- few pages), which then read every stored job on every completion, more
-- with each job, until an ANALYZE. Every statement of byollm_end_job has an
-- index to use: the job by primary key, its cancel request by job id, the
-- blocked dependents by byollm_jobs_blocked_idx.
alter function byollm_end_job(byollm_jobs, jsonb, jsonb, jsonb, bigint) set enable_seqscan = off;

-- ---------------------------------------------------------------------------
-- Who may call what (the rules file's byollm_lock_functions)
-- ---------------------------------------------------------------------------

select byollm_lock_functions();
