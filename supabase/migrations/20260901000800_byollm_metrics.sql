-- Metrics: the store's counts for app.metrics() and the Prometheus handler,
-- read by every app instance in one call (byollm_metrics), and the job's
-- enqueue time with an accepted result (byollm_result_for_timed), so the
-- handler can time the job without another read.
--
-- Jobs by state are counted without reading the jobs. A plain count(*)
-- over byollm_jobs visits every row (a million rows take hundreds of ms),
-- and a single counter row per state would make every claim and every
-- result wait for the previous one's commit on that row. So each change of
-- a job's state appends its delta (-1 for the old state, +1 for the new)
-- as a new row of byollm_job_state_counts: appends never wait for each
-- other. byollm_metrics folds the rows committed so far into one per state
-- (the rows it deletes and the sums it inserts commit together, so a
-- reader sees either the deltas or their sum, never both) and sums what is
-- left. Folding takes only rows no other fold holds (SKIP LOCKED): two
-- folds never wait for or deadlock with each other, and an unfolded row
-- still counts. With no reader, an appending trigger folds now and then
-- (about one append in 2,000), so the table stays small either way.
--
-- The sums equal count(*) by state in the same snapshot: each delta
-- commits with the change it counts.

do $$
begin
  if to_regclass('public.byollm_job_state_counts') is null then
    -- No write to the jobs between the count below and the triggers'
    -- creation: the lock is held until this file commits.
    lock table byollm_jobs in share row exclusive mode;
    create table byollm_job_state_counts (
      state byollm_job_state not null,
      n     bigint not null
    );
    insert into byollm_job_state_counts (state, n)
      select state, count(*) from byollm_jobs group by state;
  end if;
end
$$;

-- Server-side only: no browser role reads or writes it.
alter table byollm_job_state_counts enable row level security;
revoke all on byollm_job_state_counts from public;
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'anon') then
    revoke all on byollm_job_state_counts from anon;
  end if;
  if exists (select 1 from pg_roles where rolname = 'authenticated') then
    revoke all on byollm_job_state_counts from authenticated;
  end if;
end
$$;

-- Fold the deltas no other fold holds into one row per state.
create or replace function byollm_fold_job_state_counts() returns void
language sql volatile security definer
as $$
  with taken as (
    delete from byollm_job_state_counts
     where ctid = any (array(select ctid from byollm_job_state_counts for update skip locked))
    returning state, n
  )
  insert into byollm_job_state_counts (state, n)
    select state, sum(n)::bigint from taken group by state having sum(n) <> 0;
$$;

-- Inserts and deletes: one append per statement, over its transition table
-- (a bulk insert of a million jobs is one row per state).
create or replace function byollm_count_jobs_written() returns trigger
language plpgsql security definer
as $$
begin
  insert into byollm_job_state_counts (state, n)
    select state, case tg_op when 'DELETE' then -count(*) else count(*) end
      from byollm_jobs_written_rows group by state;
  return null;
end;
$$;

-- A change of state: a row trigger whose WHEN clause fires only on the
-- transition, so renewals, heartbeats and other writes cost nothing here.
create or replace function byollm_count_job_transition() returns trigger
language plpgsql security definer
as $$
begin
  insert into byollm_job_state_counts (state, n) values (old.state, -1), (new.state, 1);
  if random() < 0.0005 then
    perform byollm_fold_job_state_counts();
  end if;
  return null;
end;
$$;

create or replace function byollm_reset_job_state_counts() returns trigger
language plpgsql security definer
as $$
begin
  delete from byollm_job_state_counts;
  return null;
end;
$$;

drop trigger if exists byollm_jobs_count_insert on byollm_jobs;
create trigger byollm_jobs_count_insert after insert on byollm_jobs
  referencing new table as byollm_jobs_written_rows
  for each statement execute function byollm_count_jobs_written();
drop trigger if exists byollm_jobs_count_delete on byollm_jobs;
create trigger byollm_jobs_count_delete after delete on byollm_jobs
  referencing old table as byollm_jobs_written_rows
  for each statement execute function byollm_count_jobs_written();
drop trigger if exists byollm_jobs_count_transition on byollm_jobs;
create trigger byollm_jobs_count_transition after update of state on byollm_jobs
  for each row when (old.state is distinct from new.state)
  execute function byollm_count_job_transition();
drop trigger if exists byollm_jobs_count_truncate on byollm_jobs;
create trigger byollm_jobs_count_truncate after truncate on byollm_jobs
  for each statement execute function byollm_reset_job_state_counts();

-- {jobs: [n per state, in the enum's order: queued, claimed, running, ok,
-- error, canceled, expired], runners: [paired, online, revoked],
-- pairingsPending}. Runners are one row per paired device and pairings are
-- pruned, so both are counted directly; online = not revoked and heard from
-- within p_liveness_ms of p_now (the in-memory store's rule).
create or replace function byollm_metrics(p_now bigint, p_liveness_ms bigint) returns jsonb
language plpgsql volatile security definer
as $$
begin
  perform byollm_fold_job_state_counts();
  return jsonb_build_object(
    'jobs', (select jsonb_agg(coalesce(c.n, 0) order by s.at)
               from unnest(enum_range(null::byollm_job_state)) with ordinality as s (state, at)
               left join (select state, sum(n)::bigint as n from byollm_job_state_counts group by state) c
                 using (state)),
    'runners', (select jsonb_build_array(
                  count(*) filter (where revoked_at is null),
                  count(*) filter (where revoked_at is null and last_heartbeat_at >= byollm_at(p_now - p_liveness_ms)),
                  count(*) filter (where revoked_at is not null))
                  from byollm_runners),
    'pairingsPending', (select count(*) from byollm_pairings
                         where state = 'pending' and expires_at > byollm_at(p_now)));
end;
$$;

-- byollm_result_for, and the job's enqueue time when it accepted the result
-- (a primary-key read in the same call), for the job's latency.
create or replace function byollm_result_for_timed(
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
  v_answer jsonb := byollm_result_for(p_runner_id, p_job_id, p_lease_id, p_outcome, p_provenance, p_now);
begin
  if v_answer ->> 'accepted' = 'true' then
    return v_answer || jsonb_build_object('createdAt',
      (select byollm_ms(created_at) from byollm_jobs where id = byollm_job_key(p_job_id)));
  end if;
  return v_answer;
end;
$$;

select byollm_lock_functions();
