-- Bounded work and bounded data: nothing a request sends, signed or not,
-- makes the database do work that grows faster than the request, or keep
-- rows without a bound.
--
--   * Lease renewal and release are set-based: one UPDATE over the leases a
--     request names, joined by primary key, and one aggregate for the
--     answer, so a heartbeat or release naming n leases costs O(n log n) at
--     worst. (They were a loop of one UPDATE per lease appending to a jsonb
--     value, which is quadratic in n: 10,000 leases took seconds.) The
--     handlers refuse longer lists than the wire bounds allow before any
--     store call (src/wire.rs, docs/security.md), so n is small anyway.
--   * A heartbeat writes the runner's capabilities and daemon version only
--     when they changed: the usual heartbeat stamps `last_heartbeat_at` and
--     leaves the (possibly TOASTed) capabilities value where it is.
--   * Pending pairings are bounded as in the in-memory store
--     (src/store/people.rs MAX_PAIRINGS): past 4,096 the oldest pairing that
--     is not an approval awaiting collection is dropped. Pruning deletes at
--     most 512 rows a call, so the first sweep after a quiet spell is a
--     bounded batch and the next sweeps take the rest.
--   * The four `byollm_seq` identity sequences lose whatever a platform's
--     default privileges gave `anon` and `authenticated`.
--
-- Every statement is idempotent; fresh and upgraded databases end the same.

-- ---------------------------------------------------------------------------
-- Leases
-- ---------------------------------------------------------------------------

-- The leases a request names, each with its place in the list, the JSON it
-- gave (echoed in answers) and the texts that name a lease: a job id or
-- lease id names one only in the spelling its column prints, which is what
-- byollm_job_key and byollm_try_uuid accept, so the runner's leases are
-- matched with these by text in one hash join, with no per-lease index probe
-- or uuid parse. A plain SQL function: inlined where it is used.
create or replace function byollm_named_leases(p_leases jsonb)
returns table (n bigint, job_json jsonb, lease_json jsonb, job_text text, lease_text text)
language sql immutable parallel safe
as $$
  select r.n, r.v -> 'jobId', r.v -> 'leaseId', r.v ->> 'jobId', r.v ->> 'leaseId'
    from jsonb_array_elements(case when jsonb_typeof(p_leases) = 'array' then p_leases
                                   else '[]'::jsonb end) with ordinality as r(v, n)
$$;

-- {renewed: [{jobId, expiresAt}], lost: [LeaseRef]}, each lease in the order
-- given; a lease named twice is reported twice. Sweeps first so a lapsed
-- lease is reported lost rather than renewed.
create or replace function byollm_renew_leases(
  p_runner_id text,
  p_leases    jsonb,
  p_lease_ms  bigint,
  p_now       bigint
) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_runner uuid := byollm_runner_key(p_runner_id);
  v_swept jsonb;
  v_out jsonb;
begin
  v_swept := byollm_sweep(p_now);
  -- The runner's leases (its jobs in flight, through
  -- byollm_jobs_lease_runner_idx) matched with the named ones.
  with refs as materialized (
    select * from byollm_named_leases(p_leases)
  ), renewed as (
    update byollm_jobs j
       set state = 'running',
           lease_expires_at = v_now + p_lease_ms * interval '1 millisecond',
           updated_at = v_now
     where j.lease_runner = v_runner
       and j.state in ('claimed', 'running')
       -- Lapsed but not swept (the sweep skips rows another transaction
       -- holds): still lost, as it would be after a sweep.
       and j.lease_expires_at > v_now
       and (j.id::text, j.lease_id::text) in (select job_text, lease_text from refs)
    returning j.id::text as job_text, j.lease_id::text as lease_text
  )
  select jsonb_build_object(
           'renewed', coalesce(jsonb_agg(jsonb_build_object('jobId', r.job_json, 'expiresAt', p_now + p_lease_ms)
                                         order by r.n) filter (where h.job_text is not null), '[]'::jsonb),
           'lost', coalesce(jsonb_agg(jsonb_build_object('jobId', r.job_json, 'leaseId', r.lease_json)
                                      order by r.n) filter (where h.job_text is null), '[]'::jsonb))
    into v_out
    from refs r
    left join renewed h on h.job_text = r.job_text and h.lease_text = r.lease_text;
  return v_out;
end;
$$;

-- Returns the ids released, in the order given (a lease named twice is
-- released once, at its first place). Only the exact grant (runner and lease
-- id) releases; anything else is skipped silently.
create or replace function byollm_release(
  p_runner_id text,
  p_leases    jsonb,
  p_reason    text,
  p_now       bigint
) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_runner uuid := byollm_runner_key(p_runner_id);
  v_out jsonb;
begin
  -- Matched with the runner's leases by text, as in byollm_renew_leases.
  with refs as materialized (
    select * from byollm_named_leases(p_leases)
  ), released as (
    update byollm_jobs j
       set state = 'queued', lease_id = null, lease_runner = null, lease_expires_at = null,
           completed_by_lease_id = null,
           claimable_at = v_now,
           refused_by = case when p_reason = 'refused' and not (v_runner = any (j.refused_by))
                             then j.refused_by || v_runner else j.refused_by end,
           updated_at = v_now
      from (select distinct job_text, lease_text from refs) d
     where j.lease_runner = v_runner
       and j.lease_id is not null
       and j.id::text = d.job_text
       and j.lease_id::text = d.lease_text
    returning d.job_text, d.lease_text
  ), firsts as (
    select distinct on (r.job_text) r.n, r.job_json
      from refs r
      join released h on h.job_text = r.job_text and h.lease_text = r.lease_text
     order by r.job_text, r.n
  )
  select coalesce(jsonb_agg(f.job_json order by f.n), '[]'::jsonb) into v_out from firsts f;
  return v_out;
end;
$$;

-- ---------------------------------------------------------------------------
-- Runners: capabilities written only when they change
-- ---------------------------------------------------------------------------

create or replace function byollm_touch_runner(
  p_runner_id      text,
  p_capabilities   jsonb,
  p_daemon_version text,
  p_now            bigint
) returns jsonb
language sql volatile security definer
as $$
  update byollm_runners r
     set capabilities = case when r.capabilities is distinct from p_capabilities
                             then p_capabilities else r.capabilities end,
         daemon_version = case when r.daemon_version is distinct from p_daemon_version
                               then p_daemon_version else r.daemon_version end,
         last_heartbeat_at = byollm_at(p_now)
   where r.id = byollm_runner_key(p_runner_id)
  returning byollm_runner_json_as(r, p_runner_id)
$$;

-- touchRunner, renewLeases and listCancelRequests in that order, for a live
-- runner only.
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

-- ---------------------------------------------------------------------------
-- Pairings: at most 4,096, pruned in bounded batches
-- ---------------------------------------------------------------------------

-- Eviction and the count walk pairings in insertion order.
create index if not exists byollm_pairings_seq_idx on byollm_pairings (byollm_seq);

-- Most pairings kept (src/store/people.rs MAX_PAIRINGS) and most rows one
-- prune deletes.
create or replace function byollm_max_pairings() returns integer
language sql immutable parallel safe
as $$ select 4096 $$;

create or replace function byollm_prune_batch() returns integer
language sql immutable parallel safe
as $$ select 512 $$;

-- Pairings expired for longer than the protocol's clock window (120 s),
-- oldest expiry first, at most byollm_prune_batch() of them a call; an
-- approval its daemon has not collected stays until it is (approvals come
-- from a signed-in person, not from unauthenticated traffic). The sweep
-- calls this whenever its probe finds one, so a backlog goes in batches.
create or replace function byollm_prune_pairings(p_now bigint) returns integer
language plpgsql volatile security definer
as $$
declare
  v_before timestamptz := byollm_at(p_now - 120000);
  v_gone integer := 0;
begin
  delete from byollm_pairings
   where device_code_hash in (
     select device_code_hash from byollm_pairings
      where expires_at <= v_before
        and not (state = 'approved' and collected_at is null)
      order by expires_at
      limit byollm_prune_batch()
      for update skip locked);
  get diagnostics v_gone = row_count;
  return v_gone;
end;
$$;

-- Stores a PairingRecord; the same device-code hash overwrites (keeping its
-- place in insertion order). Past byollm_max_pairings(), as the in-memory
-- store does: expired ones are pruned first (the record's `createdAt` is the
-- clock), then the oldest that is neither the one just stored nor an
-- approval awaiting collection are dropped (their daemons hear `unknown
-- device code` and start over). The count is skipped while the pairings'
-- insertion numbers span less than the bound (two index lookups), and is
-- otherwise one walk of the pairings kept: the bound plus the approvals
-- awaiting collection.
create or replace function byollm_create_pairing(p_pairing jsonb) returns void
language plpgsql volatile security definer
as $$
declare
  v_owner byollm_pairings.owner%type := p_pairing ->> 'owner';
  v_runner uuid := byollm_runner_key(p_pairing ->> 'runnerId');
  v_hash text := p_pairing ->> 'deviceCodeHash';
  v_count bigint;
begin
  if v_runner is null and p_pairing ->> 'runnerId' is not null then
    raise exception 'byollm: runner ids are runner_<uuid> in this schema (or the bare uuid)' using errcode = '22023';
  end if;
  insert into byollm_pairings as p (device_code_hash, user_code, state, owner, runner_id,
                                    collected_at, label, platform, daemon_version,
                                    capabilities, device, expires_at, created_at)
  values (v_hash, p_pairing ->> 'userCode', p_pairing ->> 'state',
          v_owner, v_runner,
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

  if (select max(byollm_seq) - min(byollm_seq) from byollm_pairings) < byollm_max_pairings() then
    return;
  end if;
  select count(*) into v_count from byollm_pairings;
  if v_count <= byollm_max_pairings() then
    return;
  end if;
  if jsonb_typeof(p_pairing -> 'createdAt') = 'number' then
    v_count := v_count - byollm_prune_pairings((p_pairing ->> 'createdAt')::numeric::bigint);
  end if;
  if v_count > byollm_max_pairings() then
    delete from byollm_pairings
     where device_code_hash in (
       select device_code_hash from byollm_pairings
        where device_code_hash is distinct from v_hash
          and not (state = 'approved' and collected_at is null)
        order by byollm_seq
        limit v_count - byollm_max_pairings());
  end if;
end;
$$;

-- ---------------------------------------------------------------------------
-- The identity sequences: no grants to browser roles
-- ---------------------------------------------------------------------------

-- Supabase's default privileges give `anon` and `authenticated` every
-- privilege on new sequences in `public`. Nothing a browser does needs them:
-- rows are written only by the server's functions.
do $$
declare
  v_seq text;
  r text;
begin
  foreach v_seq in array array[
    pg_get_serial_sequence('byollm_jobs', 'byollm_seq'),
    pg_get_serial_sequence('byollm_runners', 'byollm_seq'),
    pg_get_serial_sequence('byollm_pairings', 'byollm_seq'),
    pg_get_serial_sequence('byollm_job_cancels', 'byollm_seq')]
  loop
    continue when v_seq is null;
    execute format('revoke all on sequence %s from public', v_seq);
    foreach r in array array['anon', 'authenticated'] loop
      if exists (select 1 from pg_roles where rolname = r) then
        execute format('revoke all on sequence %s from %I', v_seq, r);
      end if;
    end loop;
  end loop;
end
$$;

-- ---------------------------------------------------------------------------
-- Who may call what (the rules file's byollm_lock_functions)
-- ---------------------------------------------------------------------------

select byollm_lock_functions();
