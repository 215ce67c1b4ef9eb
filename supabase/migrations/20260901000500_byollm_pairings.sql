-- Pairings bounded and unambiguous; audiences fail closed; approval only by
-- the server.
--
--   * (The sweep deletes pairings expired for longer than the protocol's
--     clock window: byollm_prune_pairings, in the scale file.)
--   * A user code names its pending pairing first. Approval acts only on a
--     pending, unexpired pairing with the code; without one, the first
--     pairing with the code says why (expired, or already approved/denied).
--     The handlers check at pair start that a fresh code names no live
--     pairing, so a code is unique among live pairings; the store itself,
--     like the in-memory one, keeps any pairing it is given.
--   * An audience other than `team` is the owner's alone (`public` is in the
--     enum only for databases that went through the older vocabulary): a job
--     stored with it is claimed by its owner's runners and completes, and no
--     other owner's runner is offered it.
--   * `byollm_approve_pairing(text)` (0.1.1's browser approval) is no longer
--     executable by `authenticated`: anyone who can sign up could guess codes
--     over PostgREST, past the app's own page and rate limits. Approvals go
--     through the app (ByollmApp.approvePairing), which calls
--     byollm_approve_pairing_as as the server.

-- ---------------------------------------------------------------------------
-- Audience: fail closed
-- ---------------------------------------------------------------------------

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
  -- Anything but `team` (a typo, `public`) is private: owner only.
  if p_audience is distinct from 'team' and not v_same then
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

-- ---------------------------------------------------------------------------
-- Pairings
-- ---------------------------------------------------------------------------

-- The pairing a code names: the first pending one (insertion order), else
-- the first with the code whatever its state.
create or replace function byollm_get_pairing_by_user_code(p_user_code text) returns jsonb
language sql stable security definer
as $$
  select byollm_pairing_json(p) from byollm_pairings p
   where p.user_code = p_user_code
   order by (p.state = 'pending') desc, p.byollm_seq
   limit 1
$$;

-- The runner is created under the suggested id (ByollmApp suggests
-- `runner_<uuid v4>`; a bare uuid is taken as that runner's uuid), or a fresh
-- one when the suggestion is neither; the record and the pairing spell it
-- `runner_<uuid>` (see byollm_runner_key).
create or replace function byollm_approve_pairing_as(
  p_user_code text,
  p_owner     text,
  p_runner_id text,
  p_now       bigint
) returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_now timestamptz := byollm_at(p_now);
  v_owner byollm_runners.owner%type := p_owner;
  v_pairing byollm_pairings;
  v_runner byollm_runners;
begin
  -- Only a pending, unexpired pairing is approved.
  select * into v_pairing from byollm_pairings
   where user_code = p_user_code and state = 'pending' and expires_at > v_now
   order by byollm_seq limit 1 for update;
  if not found then
    select * into v_pairing from byollm_pairings
     where user_code = p_user_code order by byollm_seq limit 1;
    if not found then
      raise exception 'unknown pairing code: %', p_user_code using errcode = 'P0002';
    end if;
    if v_pairing.expires_at <= v_now then
      raise exception 'pairing code has expired' using errcode = '22023';
    end if;
    raise exception 'pairing is already %', v_pairing.state using errcode = '22023';
  end if;

  insert into byollm_runners (id, owner, device, label, platform, daemon_version, capabilities,
                              revoked_at, last_heartbeat_at, created_at)
  values (coalesce(byollm_runner_key(p_runner_id), gen_random_uuid()), v_owner,
          v_pairing.device, v_pairing.label, v_pairing.platform, v_pairing.daemon_version,
          v_pairing.capabilities, null, v_now, v_now)
  returning * into v_runner;

  update byollm_pairings
     set state = 'approved', owner = v_runner.owner, runner_id = v_runner.id, collected_at = null
   where device_code_hash = v_pairing.device_code_hash;

  return byollm_runner_json(v_runner);
end;
$$;

-- Denies the pairing the code names (pending first); an approved runner
-- survives; an unknown code is a no-op.
create or replace function byollm_deny_pairing(p_user_code text, p_now bigint) returns void
language sql volatile security definer
as $$
  update byollm_pairings set state = 'denied'
   where device_code_hash = (select device_code_hash from byollm_pairings
                              where user_code = p_user_code
                              order by (state = 'pending') desc, byollm_seq limit 1)
$$;

-- Stores a PairingRecord; the same device-code hash overwrites (keeping its
-- place in insertion order). PL/pgSQL (it was SQL) to declare the owner with
-- its column's type (see the scale file).
create or replace function byollm_create_pairing(p_pairing jsonb) returns void
language plpgsql volatile security definer
as $$
declare
  v_owner byollm_pairings.owner%type := p_pairing ->> 'owner';
  v_runner uuid := byollm_runner_key(p_pairing ->> 'runnerId');
begin
  if v_runner is null and p_pairing ->> 'runnerId' is not null then
    raise exception 'byollm: runner ids are runner_<uuid> in this schema (or the bare uuid)' using errcode = '22023';
  end if;
  insert into byollm_pairings as p (device_code_hash, user_code, state, owner, runner_id,
                                    collected_at, label, platform, daemon_version,
                                    capabilities, device, expires_at, created_at)
  values (p_pairing ->> 'deviceCodeHash', p_pairing ->> 'userCode', p_pairing ->> 'state',
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
end;
$$;

-- ---------------------------------------------------------------------------
-- Who may call what (the rules file's byollm_lock_functions)
-- ---------------------------------------------------------------------------

select byollm_lock_functions();
