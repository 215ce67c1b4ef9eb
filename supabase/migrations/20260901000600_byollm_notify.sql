-- Result delivery without polling on a plain PostgreSQL (postgresDelivery):
-- when a job reaches an end state, its id is sent on the channel
-- `byollm_job_ended` (LISTEN/NOTIFY). PostgreSQL delivers it when the
-- transaction commits, so a listener that reads the job then sees the end.
--
-- A row trigger whose WHEN clause fires only on the transition into an end
-- state: claims, renewals and writes to ended jobs cost nothing here.

create or replace function byollm_notify_job_ended() returns trigger
language plpgsql
set search_path = pg_catalog, public, pg_temp
as $$
begin
  perform pg_notify('byollm_job_ended', new.id::text);
  return null;
end;
$$;

select byollm_lock_functions();

drop trigger if exists byollm_jobs_notify_ended on byollm_jobs;
create trigger byollm_jobs_notify_ended
  after update of state on byollm_jobs
  for each row
  when (new.state in ('ok', 'error', 'canceled', 'expired') and old.state is distinct from new.state)
  execute function byollm_notify_job_ended();
