-- The store rules, once, as SQL functions.
--
-- Both `postgresStore` (node-postgres) and `supabaseStore` (supabase-js, via
-- PostgREST's /rpc) call these functions and nothing else, so there is one
-- implementation of every state transition. The semantics are those of the
-- in-memory store (docs/stores.md, ../shared/spec/store.md); where the 0.1.1
-- Supabase SQL behaved differently it is said below, at the place it differs.
--
-- Time: every function that the store contract gives a `now` takes it as
-- `p_now bigint` (epoch milliseconds from the caller's clock) and never reads
-- the database clock, so an app's injectable clock (and a test's fake one)
-- governs leases, TTLs and deadlines exactly as it does in memory. Only the
-- compatibility entry points kept from 0.1.1 (`byollm_claim_jobs`,
-- `byollm_expire_due`, the browser's `byollm_approve_pairing`) default to
-- `now()`, and `consumePairingToken` (which the contract gives no `now`)
-- stamps `collected_at` with it.
--
-- Results: functions called by the stores return `jsonb` already in the
-- record shapes of the contract (camelCase keys, epoch-ms numbers), so the two
-- clients map nothing but key order.
--
-- Ids: an id argument arrives as text; one the columns cannot hold names
-- nothing (a lookup answers "missing", a lease check fails) rather than
-- raising, because most of them come off the wire. Job ids are any string on
-- a plain PostgreSQL and canonical lowercase uuids on Supabase
-- (byollm_job_key); runner ids are `runner_<uuid>` (byollm_runner_key).

-- ---------------------------------------------------------------------------
-- Helpers
-- ---------------------------------------------------------------------------

create or replace function byollm_try_uuid(p text) returns uuid
language plpgsql immutable
as $$
begin
  -- Only the canonical spelling: Postgres would also accept upper case or
  -- braces and hand back a different string than the caller stored.
  if p is null or p !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then
    return null;
  end if;
  return p::uuid;
end;
$$;

-- Runner ids: `runner_<uuid v4>`, as every store hands them out, stored as
-- the uuid (byollm_runners.id, lease_runner, refused_by keep 0.1.1's uuid
-- columns). A runner whose id is a bare uuid (0.1.1 paired them so) signs
-- with that spelling from its daemon's config: both spellings name the
-- runner, and an answer about the caller's own runner spells it as the caller
-- did (byollm_runner_json_as, byollm_job_json_as), since the handlers compare
-- it with the id in the signed body. Anything else names no runner.
create or replace function byollm_runner_key(p text) returns uuid
language sql immutable parallel safe
as $$
  select case when p ~ '^(runner_)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
              then right(p, 36)::uuid end
$$;

-- A stored runner uuid as records spell it.
create or replace function byollm_runner_text(p uuid) returns text
language sql immutable parallel safe
as $$ select 'runner_' || p::text $$;

-- A job id argument as the id column holds it, or null when it can name no
-- job: any string where job ids are text (a plain PostgreSQL, see the schema
-- file), only the canonical lowercase spelling where they are uuids
-- (Supabase). Written for the column's type, so that a lookup
-- `id = byollm_job_key($1)` is inlined into a plain comparison of the
-- column's own type (its index serves).
do $$
declare
  v_type regtype := (select atttypid::regtype from pg_attribute
                      where attrelid = 'public.byollm_jobs'::regclass and attname = 'id');
  v_fn regprocedure := to_regprocedure('public.byollm_job_key(text)');
begin
  if v_fn is not null and (select prorettype from pg_proc where oid = v_fn) <> v_type then
    drop function byollm_job_key(text);
  end if;
  if v_type = 'uuid'::regtype then
    create or replace function byollm_job_key(p text) returns uuid
    language sql immutable parallel safe
    as $k$
      select case when p ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then p::uuid end
    $k$;
  else
    create or replace function byollm_job_key(p text) returns text
    language sql immutable parallel safe
    as $k$ select p $k$;
  end if;
end
$$;

create or replace function byollm_at(p_ms bigint) returns timestamptz
language sql stable
as $$ select 'epoch'::timestamptz + p_ms * interval '1 millisecond' $$;

create or replace function byollm_ms(p_at timestamptz) returns bigint
language sql stable
as $$ select (extract(epoch from p_at) * 1000)::bigint $$;

create or replace function byollm_job_json(j byollm_jobs) returns jsonb
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
    -- A lease is an id plus an expiry. No runner means an adopted lease
    -- (relay-granted), which the contract spells `runnerId: ""`.
    'lease', case when j.lease_id is null or j.lease_expires_at is null then null
                  else jsonb_build_object('id', j.lease_id,
                                          'runnerId', coalesce(byollm_runner_text(j.lease_runner), ''),
                                          'expiresAt', byollm_ms(j.lease_expires_at)) end,
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

create or replace function byollm_runner_json(r byollm_runners) returns jsonb
language sql stable
as $$
  select case when r.id is null then null else jsonb_build_object(
    'id', byollm_runner_text(r.id),
    'owner', r.owner,
    'device', r.device,
    'label', r.label,
    'platform', r.platform,
    'daemonVersion', r.daemon_version,
    'capabilities', r.capabilities,
    'revokedAt', byollm_ms(r.revoked_at),
    'lastHeartbeatAt', byollm_ms(r.last_heartbeat_at),
    'createdAt', byollm_ms(r.created_at)
  ) end
$$;

create or replace function byollm_pairing_json(p byollm_pairings) returns jsonb
language sql stable
as $$
  select case when p.device_code_hash is null then null else jsonb_build_object(
    'deviceCodeHash', p.device_code_hash,
    'userCode', p.user_code,
    'state', p.state,
    'owner', p.owner,
    'runnerId', byollm_runner_text(p.runner_id),
    'collected', p.collected_at is not null,
    'label', p.label,
    'platform', p.platform,
    'daemonVersion', p.daemon_version,
    'capabilities', p.capabilities,
    'device', p.device,
    'expiresAt', byollm_ms(p.expires_at),
    'createdAt', byollm_ms(p.created_at)
  ) end
$$;

-- The caller's own runner, and a job whose lease it holds, with the runner id
-- spelled as the caller spelled it (see byollm_runner_key): the same records
-- for a `runner_<uuid>`, the bare uuid in place of it for a runner that signs
-- with one.
create or replace function byollm_runner_json_as(r byollm_runners, p_runner_id text) returns jsonb
language sql stable
as $$
  select case when left(p_runner_id, 7) = 'runner_' then byollm_runner_json(r)
              else byollm_runner_json(r) || jsonb_build_object('id', p_runner_id) end
$$;

create or replace function byollm_job_json_as(j byollm_jobs, p_runner_id text) returns jsonb
language sql stable
as $$
  select case when left(p_runner_id, 7) <> 'runner_'
                   and j.lease_id is not null and j.lease_expires_at is not null
                   and j.lease_runner = byollm_runner_key(p_runner_id)
              then jsonb_set(byollm_job_json(j), '{lease,runnerId}', to_jsonb(p_runner_id))
              else byollm_job_json(j) end
$$;

-- ---------------------------------------------------------------------------
-- Audience: the server-side matcher (protocol §8.4 with the server's inputs)
-- ---------------------------------------------------------------------------

-- Cost class of a backend id, from the protocol's registry. `openai-http`
-- (cost decided by the daemon from its base URL) and any id not in the
-- registry count as `metered`, as the server does for a null cost.
create or replace function byollm_backend_cost(p_backend_id text) returns text
language sql immutable
as $$
  select case
    when p_backend_id in ('ollama', 'mlx', 'llamacpp', 'vllm', 'lmstudio', 'jan', 'localai') then 'free'
    when p_backend_id in ('claude-cli', 'codex-cli') then 'subscription'
    else 'metered'
  end
$$;

-- Why a runner owned by `p_runner_owner`, offering `p_offer_scope` on
-- `p_backend_id`, may not take a job; null when it may. The server's inputs
-- to the matcher are fixed: spend is taken as acknowledged with no ceiling
-- reached (so the two metered refusals never fire here) and the device's own
-- admission as yes. The daemon re-checks with the real values and releases
-- with `refused` when it disagrees.
--
-- The 0.1.1 SQL (`byollm_audience_admits`) locked only `claude-cli`; the
-- registry says `codex-cli` is a subscription backend too, and the in-memory
-- store refuses it for other owners, so this does.
create or replace function byollm_server_refusal(
  p_job_owner      text,
  p_audience       text,
  p_audience_allow text[],
  p_runner_owner   text,
  p_offer_scope    text,
  p_backend_id     text
) returns text
language plpgsql immutable
as $$
declare
  v_same boolean := coalesce(p_job_owner = p_runner_owner, false);
begin
  if p_audience = 'private' and not v_same then
    return 'audience-self-other-owner';
  end if;
  if p_audience = 'team' and not v_same and p_audience_allow is not null
     and not coalesce(p_runner_owner = any (p_audience_allow), false) then
    return 'not-in-server-allowlist';
  end if;
  if v_same then
    return null;
  end if;
  if byollm_backend_cost(p_backend_id) = 'subscription' then
    return 'subscription-self-lock';
  end if;
  if p_offer_scope = 'team' then
    return null;
  end if;
  return 'offer-scope-too-narrow';
end;
$$;

-- The claim predicate's capability side: the FIRST capability in the claim
-- request whose kind is the job's kind decides (never the stored ones).
create or replace function byollm_claim_refusal(
  p_capabilities   jsonb,
  p_kind           text,
  p_job_owner      text,
  p_audience       text,
  p_audience_allow text[],
  p_runner_owner   text
) returns text
language sql immutable
as $$
  select coalesce(
    (select byollm_server_refusal(p_job_owner, p_audience, p_audience_allow, p_runner_owner,
                                  c.value ->> 'offerScope', c.value ->> 'backendId')
       from jsonb_array_elements(
              case when jsonb_typeof(p_capabilities) = 'array' then p_capabilities else '[]'::jsonb end
            ) with ordinality as c(value, n)
      where c.value ->> 'kind' = p_kind
      order by c.n
      limit 1),
    -- A refusal string is needed either way; this one is never reported.
    case when exists (
      select 1 from jsonb_array_elements(
        case when jsonb_typeof(p_capabilities) = 'array' then p_capabilities else '[]'::jsonb end) c
      where c ->> 'kind' = p_kind) then null else 'no-capability' end
  )
$$;

-- Kept from 0.1.1 with its signature; now the same predicate as the claim.
drop function if exists byollm_audience_admits(byollm_jobs, uuid, uuid, jsonb);
create function byollm_audience_admits(
  p_job          byollm_jobs,
  p_runner_id    uuid,
  p_runner_owner uuid,
  p_capabilities jsonb
) returns boolean
language sql stable
as $$
  select byollm_claim_refusal(p_capabilities, p_job.kind, p_job.owner::text, p_job.audience::text,
                              p_job.audience_allow::text[], p_runner_owner::text) is null
$$;

-- ---------------------------------------------------------------------------
-- Sweep: lease reclaim, adopted leases past their deadline, TTL/deadline
-- ---------------------------------------------------------------------------

-- Returns every record written, in the order written: pass 1, 2, 3, each in
-- insertion order. A job can appear twice (requeued, then expired).
--
-- Differs from the 0.1.1 `byollm_expire_due`: adopted (relay-granted) leases
-- are not reclaimed by their lease clock (the relay owns them) but expire at
-- the job's deadline; a reclaim also clears `completed_by_lease_id`.
-- Rows another transaction holds locked are skipped: that transaction is a
-- claim, a completion or another sweep, and the next sweep sees the result.
create or replace function byollm_sweep(p_now bigint) returns jsonb
language plpgsql volatile security definer set search_path = public
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_reclaimed jsonb;
  v_adopted jsonb;
  v_expired jsonb;
begin
  with due as (
    select id from byollm_jobs
     where state in ('claimed', 'running')
       and lease_id is not null and lease_runner is not null
       and lease_expires_at <= v_now
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

  with due as (
    select id from byollm_jobs
     where state = 'queued'
       and ((deadline_at is not null and deadline_at <= v_now)
            or (claimable_at is not null
                and claimable_at + ttl_ms * interval '1 millisecond' <= v_now))
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

  return v_reclaimed || v_adopted || v_expired;
end;
$$;

-- 0.1.1's name and signature: the sweep at the database clock, as a count.
drop function if exists byollm_expire_due();
create function byollm_expire_due() returns integer
language sql volatile security definer set search_path = public
as $$ select jsonb_array_length(byollm_sweep(byollm_ms(now()))) $$;

-- ---------------------------------------------------------------------------
-- Jobs
-- ---------------------------------------------------------------------------

-- byollm_create_job (enqueue) is in the scale file.

create or replace function byollm_get_job(p_job_id text) returns jsonb
language sql stable security definer set search_path = public
as $$ select byollm_job_json(j) from byollm_jobs j where j.id = byollm_job_key(p_job_id) $$;

-- byollm_claim is in the scale file.

-- 0.1.1's claim RPC, same name and arguments (plus an optional clock). It
-- looks the runner up itself and refuses unknown or revoked runners, then
-- claims exactly as byollm_claim does.
drop function if exists byollm_claim_jobs(uuid, jsonb, integer, integer);
create or replace function byollm_claim_jobs(
  p_runner_id    uuid,
  p_capabilities jsonb,
  p_max          integer,
  p_lease_ms     integer,
  p_now          timestamptz default now()
) returns setof byollm_jobs
language plpgsql volatile security definer set search_path = public
as $$
declare
  v_runner byollm_runners;
  v_claimed jsonb;
begin
  select * into v_runner from byollm_runners where id = p_runner_id;
  if not found then
    raise exception 'unknown runner';
  end if;
  if v_runner.revoked_at is not null then
    raise exception 'runner is revoked';
  end if;
  v_claimed := byollm_claim(p_runner_id::text, v_runner.owner::text, p_capabilities, p_max,
                            p_lease_ms, byollm_ms(p_now));
  return query
    select j.* from byollm_jobs j
      join jsonb_array_elements(v_claimed) with ordinality as c(v, n)
        on j.id = byollm_job_key(c.v ->> 'id')
     order by c.n;
end;
$$;

-- {renewed: [{jobId, expiresAt}], lost: [LeaseRef]}, each lease in the order
-- given (a repeated one is processed twice). Sweeps first so a lapsed lease
-- is reported lost rather than renewed.
create or replace function byollm_renew_leases(
  p_runner_id text,
  p_leases    jsonb,
  p_lease_ms  bigint,
  p_now       bigint
) returns jsonb
language plpgsql volatile security definer set search_path = public
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_runner uuid := byollm_runner_key(p_runner_id);
  v_ref jsonb;
  v_hit byollm_jobs.id%type;
  v_renewed jsonb := '[]';
  v_lost jsonb := '[]';
  v_swept jsonb;
begin
  -- Assignments and a counted loop, not PERFORM and a query over the array:
  -- PL/pgSQL evaluates a plain expression without starting an executor.
  v_swept := byollm_sweep(p_now);
  for v_i in 0 .. coalesce(jsonb_array_length(p_leases), 0) - 1 loop
    v_ref := p_leases -> v_i;
    v_hit := null;
    update byollm_jobs
       set state = 'running',
           lease_expires_at = v_now + p_lease_ms * interval '1 millisecond',
           updated_at = v_now
     where id = byollm_job_key(v_ref ->> 'jobId')
       and lease_runner = v_runner
       and lease_id = byollm_try_uuid(v_ref ->> 'leaseId')
       and state in ('claimed', 'running')
       -- Lapsed but not swept (the sweep skips rows another transaction
       -- holds): still lost, as it would be after a sweep.
       and lease_expires_at > v_now
    returning id into v_hit;
    if v_hit is not null then
      v_renewed := v_renewed || jsonb_build_array(jsonb_build_object(
        'jobId', v_ref -> 'jobId', 'expiresAt', p_now + p_lease_ms));
    else
      v_lost := v_lost || jsonb_build_array(jsonb_build_object(
        'jobId', v_ref -> 'jobId', 'leaseId', v_ref -> 'leaseId'));
    end if;
  end loop;
  return jsonb_build_object('renewed', v_renewed, 'lost', v_lost);
end;
$$;

-- A relay-granted lease (cloud lane). Lease ids are uuids in this schema; any
-- other lease id is refused (null), as is a job that is not queued/claimed or
-- that holds a different lease.
create or replace function byollm_adopt(
  p_job_id     text,
  p_lease_id   text,
  p_expires_at bigint,
  p_now        bigint
) returns jsonb
language plpgsql volatile security definer set search_path = public
as $$
declare
  v_row byollm_jobs;
  v_lease uuid := byollm_try_uuid(p_lease_id);
begin
  select * into v_row from byollm_jobs where id = byollm_job_key(p_job_id) for update;
  if not found or v_row.state not in ('queued', 'claimed') then
    return null;
  end if;
  if v_row.lease_id is not null and v_row.lease_id is distinct from v_lease then
    return null;
  end if;
  if v_lease is null then
    return null;
  end if;
  update byollm_jobs
     set state = 'claimed', lease_id = v_lease, lease_runner = null,
         lease_expires_at = byollm_at(p_expires_at), updated_at = byollm_at(p_now)
   where id = v_row.id
  returning * into v_row;
  return byollm_job_json(v_row);
end;
$$;

-- byollm_complete_job is in the scale file.

-- Returns the ids released, in the order given. Only the exact grant
-- (runner and lease id) releases; anything else is skipped silently.
create or replace function byollm_release(
  p_runner_id text,
  p_leases    jsonb,
  p_reason    text,
  p_now       bigint
) returns jsonb
language plpgsql volatile security definer set search_path = public
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_runner uuid := byollm_runner_key(p_runner_id);
  v_ref jsonb;
  v_hit byollm_jobs.id%type;
  v_out jsonb := '[]';
begin
  for v_ref in select value from jsonb_array_elements(coalesce(p_leases, '[]'::jsonb)) loop
    v_hit := null;
    update byollm_jobs
       set state = 'queued', lease_id = null, lease_runner = null, lease_expires_at = null,
           completed_by_lease_id = null,
           claimable_at = v_now,
           refused_by = case when p_reason = 'refused' and not (v_runner = any (refused_by))
                             then refused_by || v_runner else refused_by end,
           updated_at = v_now
     where id = byollm_job_key(v_ref ->> 'jobId')
       and lease_runner = v_runner
       and lease_id = byollm_try_uuid(v_ref ->> 'leaseId')
    returning id into v_hit;
    if v_hit is not null then
      v_out := v_out || jsonb_build_array(v_ref -> 'jobId');
    end if;
  end loop;
  return v_out;
end;
$$;

-- queued → canceled; held → a cancel request for the holder's next
-- heartbeat (job unchanged); terminal → unchanged; missing → null.
create or replace function byollm_cancel_job(p_job_id text, p_now bigint) returns jsonb
language plpgsql volatile security definer set search_path = public
as $$
declare
  v_row byollm_jobs;
begin
  select * into v_row from byollm_jobs where id = byollm_job_key(p_job_id) for update;
  if not found then
    return null;
  end if;
  if v_row.state = 'queued' then
    update byollm_jobs
       set state = 'canceled', lease_id = null, lease_runner = null, lease_expires_at = null,
           completed_by_lease_id = null, updated_at = byollm_at(p_now)
     where id = v_row.id
    returning * into v_row;
  elsif v_row.state in ('claimed', 'running') then
    insert into byollm_job_cancels (job_id, requested_at)
    values (v_row.id, byollm_at(p_now))
    on conflict (job_id) do nothing;
  end if;
  return byollm_job_json(v_row);
end;
$$;

create or replace function byollm_list_claimed_by(p_runner_id text) returns jsonb
language sql stable security definer set search_path = public
as $$
  select coalesce(jsonb_agg(byollm_job_json_as(j, p_runner_id) order by j.byollm_seq), '[]')
    from byollm_jobs j
   where j.lease_runner = byollm_runner_key(p_runner_id) and j.lease_id is not null
$$;

-- A request lingers until a completion removes it, so after a release it is
-- delivered to whichever runner holds the job next.
create or replace function byollm_list_cancel_requests(p_runner_id text) returns jsonb
language sql stable security definer set search_path = public
as $$
  select coalesce(jsonb_agg(jsonb_build_object('jobId', j.id, 'leaseId', j.lease_id)
                            order by c.byollm_seq), '[]')
    from byollm_job_cancels c
    join byollm_jobs j on j.id = c.job_id
   where j.lease_runner = byollm_runner_key(p_runner_id) and j.lease_id is not null
$$;

-- ---------------------------------------------------------------------------
-- Pairings and runners
-- ---------------------------------------------------------------------------

-- byollm_create_pairing and byollm_approve_pairing_as are in the pairings file.

create or replace function byollm_get_pairing_by_device_code_hash(p_hash text) returns jsonb
language sql stable security definer set search_path = public
as $$ select byollm_pairing_json(p) from byollm_pairings p where p.device_code_hash = p_hash $$;

-- The first pairing (insertion order) with that code, whatever its state.
create or replace function byollm_get_pairing_by_user_code(p_user_code text) returns jsonb
language sql stable security definer set search_path = public
as $$
  select byollm_pairing_json(p) from byollm_pairings p
   where p.user_code = p_user_code order by p.byollm_seq limit 1
$$;

-- 0.1.1's browser-facing approval: the owner is the caller's own session
-- (auth.uid()), never an argument, so a daemon can never say whose it is.
drop function if exists byollm_approve_pairing(text);
create function byollm_approve_pairing(p_user_code text) returns byollm_runners
language plpgsql volatile security definer set search_path = public
as $$
declare
  v_owner uuid := (select auth.uid());
  v_runner jsonb;
  v_row byollm_runners;
begin
  if v_owner is null then
    raise exception 'approving a pairing requires an authenticated user';
  end if;
  v_runner := byollm_approve_pairing_as(p_user_code, v_owner::text, null, byollm_ms(now()));
  select * into v_row from byollm_runners where id = byollm_runner_key(v_runner ->> 'id');
  return v_row;
end;
$$;

-- Denies the first pairing with that code whatever its state (an approved
-- runner survives); an unknown code is a no-op.
create or replace function byollm_deny_pairing(p_user_code text, p_now bigint) returns void
language sql volatile security definer set search_path = public
as $$
  update byollm_pairings set state = 'denied'
   where device_code_hash = (select device_code_hash from byollm_pairings
                              where user_code = p_user_code order by byollm_seq limit 1)
$$;

-- Deliver-once. The contract passes no time, so the stamp is the database's;
-- only its presence is read back.
create or replace function byollm_consume_pairing_token(p_hash text) returns void
language sql volatile security definer set search_path = public
as $$
  update byollm_pairings set collected_at = coalesce(collected_at, now())
   where device_code_hash = p_hash
$$;

create or replace function byollm_get_runner(p_runner_id text) returns jsonb
language sql stable security definer set search_path = public
as $$
  select byollm_runner_json_as(r, p_runner_id) from byollm_runners r where r.id = byollm_runner_key(p_runner_id)
$$;

create or replace function byollm_touch_runner(
  p_runner_id      text,
  p_capabilities   jsonb,
  p_daemon_version text,
  p_now            bigint
) returns jsonb
language sql volatile security definer set search_path = public
as $$
  update byollm_runners r
     set capabilities = p_capabilities, daemon_version = p_daemon_version,
         last_heartbeat_at = byollm_at(p_now)
   where r.id = byollm_runner_key(p_runner_id)
  returning byollm_runner_json_as(r, p_runner_id)
$$;

-- One-way: the first revocation time is kept. Leases the runner holds lapse
-- on their own (its heartbeats are refused from now on).
create or replace function byollm_revoke_runner(p_runner_id text, p_now bigint) returns void
language sql volatile security definer set search_path = public
as $$
  update byollm_runners set revoked_at = byollm_at(p_now)
   where id = byollm_runner_key(p_runner_id) and revoked_at is null
$$;

-- All runners, or one owner's; revoked ones included; insertion order.
create or replace function byollm_list_runners(p_owner text default null) returns jsonb
language sql stable security definer set search_path = public
as $$
  select coalesce(jsonb_agg(byollm_runner_json(r) order by r.byollm_seq), '[]')
    from byollm_runners r
   -- As text: owners are uuids on Supabase and any string on a plain
   -- PostgreSQL (see the scale file); a spelling that is not the stored
   -- one matches nothing either way.
   where p_owner is null or r.owner::text = p_owner
$$;

-- ---------------------------------------------------------------------------
-- Which jobs a statement wrote (for postgresStore's subscribe)
-- ---------------------------------------------------------------------------

-- Every insert or update of byollm_jobs appends the ids it wrote to a
-- transaction-local setting, so the store can tell its watchers about writes
-- made inside another operation (the sweep inside a claim, the unblock inside
-- a completion) without each function returning them. Statement-level, over
-- the transition table, so a bulk write costs one append.
create or replace function byollm_note_changes() returns trigger
language plpgsql
as $$
begin
  perform set_config('byollm.changed',
                     coalesce(current_setting('byollm.changed', true), '')
                       || coalesce((select string_agg(id::text, ',') from byollm_written), '') || ',',
                     true);
  return null;
end;
$$;

drop trigger if exists byollm_jobs_note_insert on byollm_jobs;
create trigger byollm_jobs_note_insert after insert on byollm_jobs
  referencing new table as byollm_written
  for each statement execute function byollm_note_changes();
drop trigger if exists byollm_jobs_note_update on byollm_jobs;
create trigger byollm_jobs_note_update after update on byollm_jobs
  referencing new table as byollm_written
  for each statement execute function byollm_note_changes();

-- Reads and clears the list (comma-separated, in write order per statement).
create or replace function byollm_take_changes() returns text
language plpgsql volatile
as $$
declare
  v text := coalesce(current_setting('byollm.changed', true), '');
begin
  perform set_config('byollm.changed', '', true);
  return v;
end;
$$;

-- Who may call a byollm function, as one rule that every file ends with:
--
--   * nobody but the server: PUBLIC, `anon` and `authenticated` lose execute
--     (PostgREST exposes every function it can see at /rpc, and a new
--     function is executable by PUBLIC by default), `service_role` gets it
--     where that role exists. Each migration file commits on its own, so each
--     calls this before it ends, and no function it created is PUBLIC's to
--     call even for the moment before a later file's grants;
--   * every SECURITY DEFINER function gets a fixed search path (pg_catalog
--     first, pg_temp last, so no object a caller creates can stand in for
--     ours) and no JIT (the store's statements are small; from ~100k rows the
--     planner's cost estimates would otherwise JIT-compile them on every
--     call, for more time than they take).
create or replace function byollm_lock_functions() returns void
language plpgsql
as $$
declare
  f regprocedure;
  r text;
begin
  for f in
    select p.oid::regprocedure from pg_proc p
     where p.pronamespace = 'public'::regnamespace and p.proname like 'byollm\_%'
  loop
    if (select prosecdef from pg_proc where oid = f) then
      execute format('alter function %s set search_path = pg_catalog, public, pg_temp', f);
      execute format('alter function %s set jit = off', f);
    end if;
    execute format('revoke all on function %s from public', f);
    foreach r in array array['anon', 'authenticated'] loop
      if exists (select 1 from pg_roles where rolname = r) then
        execute format('revoke all on function %s from %I', f, r);
      end if;
    end loop;
    if exists (select 1 from pg_roles where rolname = 'service_role') then
      execute format('grant execute on function %s to service_role', f);
    end if;
  end loop;
end;
$$;

select byollm_lock_functions();
