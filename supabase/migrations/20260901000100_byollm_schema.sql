-- byollm tables: runners, pairings, jobs, cancel requests.
--
-- Written so that it can run on two kinds of database:
--
--   * a fresh one, where it creates everything;
--   * one already migrated by @byollm/server 0.1.1's own migrations, where
--     the tables exist with these exact names, column names and column types,
--     and only the small additions at the end of this file apply. Switching
--     packages needs no data migration: every statement is `if not exists`,
--     and existing rows keep their values.
--
-- Ids, owners and runner ids are created as `uuid` columns, as in the
-- existing schema. On Supabase they stay so: job ids are lowercase uuids
-- (ByollmApp mints them) and owners are Supabase Auth user ids. On a plain
-- PostgreSQL (no `auth.users`) job ids are any string (the end of this file)
-- and owners too (the scale file). Runner ids are `runner_<uuid>` everywhere,
-- stored as the uuid (see byollm_runner_key in the rules file).

-- ---------------------------------------------------------------------------
-- Vocabularies
-- ---------------------------------------------------------------------------

do $$
begin
  if to_regtype('public.byollm_job_state') is null then
    create type byollm_job_state as enum
      ('queued', 'claimed', 'running', 'ok', 'error', 'canceled', 'expired');
  end if;
  -- `public` is kept in both enums only so that a database created here has
  -- the same type as one that went through the older vocabulary; nothing in
  -- this package writes it, and the claim never admits it for another owner.
  if to_regtype('public.byollm_audience') is null then
    create type byollm_audience as enum ('private', 'team', 'public');
  end if;
  if to_regtype('public.byollm_offer_scope') is null then
    create type byollm_offer_scope as enum ('private', 'team', 'public');
  end if;
end
$$;

-- ---------------------------------------------------------------------------
-- Runners: one paired device, bound to exactly one owner.
-- ---------------------------------------------------------------------------

create table if not exists byollm_runners (
  id                uuid primary key default gen_random_uuid(),
  owner             uuid not null,
  label             text not null,
  platform          text not null check (platform in ('darwin', 'linux', 'win32')),
  daemon_version    text not null,
  capabilities      jsonb not null default '[]'::jsonb,
  -- The pinned public identity every later signature is checked against.
  device            jsonb not null,
  -- Unused by the protocol; kept because existing rows carry it.
  paused            boolean not null default false,
  -- Written once; the rules never clear it.
  revoked_at        timestamptz,
  last_heartbeat_at timestamptz not null default now(),
  created_at        timestamptz not null default now()
);

create index if not exists byollm_runners_owner_idx on byollm_runners (owner);

-- ---------------------------------------------------------------------------
-- Pairings: the device-code flow. The device code itself is never stored,
-- only its SHA-256.
-- ---------------------------------------------------------------------------

create table if not exists byollm_pairings (
  device_code_hash text primary key,
  user_code        text not null,
  state            text not null default 'pending'
                     check (state in ('pending', 'approved', 'denied')),
  owner            uuid,
  runner_id        uuid references byollm_runners (id) on delete set null,
  -- When the daemon collected the approval; null until then. A replayed
  -- device code must get nothing, and this is how the poll knows.
  collected_at     timestamptz,
  label            text not null,
  platform         text not null,
  daemon_version   text not null,
  capabilities     jsonb not null default '[]'::jsonb,
  device           jsonb not null,
  expires_at       timestamptz not null,
  created_at       timestamptz not null default now()
);

create index if not exists byollm_pairings_user_code_idx on byollm_pairings (user_code);
create index if not exists byollm_pairings_expiry_idx on byollm_pairings (expires_at);

-- ---------------------------------------------------------------------------
-- Jobs. The payload is stored only as an envelope sealed to the site's own
-- key: whoever reads this table (backups, replicas, operators) sees
-- ciphertext.
-- ---------------------------------------------------------------------------

create table if not exists byollm_jobs (
  id                    uuid primary key default gen_random_uuid(),
  kind                  text not null,
  envelope              jsonb not null,
  size_class            text not null default 'small'
                          check (size_class in ('small', 'medium', 'large', 'unbounded')),
  audience              byollm_audience not null default 'private',
  purpose               text,
  owner                 uuid not null,
  audience_allow        uuid[],
  depends_on            uuid[] not null default '{}',
  state                 byollm_job_state not null default 'queued',
  -- The current grant. A lease with an id but no runner is an adopted one
  -- (granted by a relay, whose device has no runner row here).
  lease_id              uuid,
  lease_runner          uuid,
  lease_expires_at      timestamptz,
  -- The grant that recorded the terminal outcome, kept after the lease is
  -- dropped so a replayed result can be told apart from a stranger's.
  completed_by_lease_id text,
  -- When the job became claimable, and so when its TTL clock started; null
  -- while it waits on dependencies.
  claimable_at          timestamptz,
  ttl_ms                integer not null default 900000,
  deadline_at           timestamptz,
  refused_by            uuid[] not null default '{}',
  attempts              integer not null default 0,
  outcome               jsonb,
  provenance            jsonb,
  created_at            timestamptz not null default now(),
  updated_at            timestamptz not null default now()
);

create index if not exists byollm_jobs_owner_idx on byollm_jobs (owner);
create index if not exists byollm_jobs_lease_idx
  on byollm_jobs (lease_expires_at) where state in ('claimed', 'running');
-- Dependents are found through a partial GIN index over blocked jobs only
-- (see the scale file); 0.1.1's index over every job's `depends_on` is
-- dropped there.

-- ---------------------------------------------------------------------------
-- Cancel requests: asked for, not yet acknowledged by the holder. Separate
-- from the job so "cancel requested" never reads as "canceled".
-- ---------------------------------------------------------------------------

create table if not exists byollm_job_cancels (
  job_id       uuid primary key references byollm_jobs (id) on delete cascade,
  requested_at timestamptz not null default now()
);

-- ---------------------------------------------------------------------------
-- Additions over the 0.1.1 schema (apply to fresh and existing databases)
-- ---------------------------------------------------------------------------

-- Insertion order. The store contract orders claims by `claimableAt` with
-- ties in creation order, lists runners and cancel requests in insertion
-- order, and returns the first pairing with a user code; timestamps cannot
-- say which of two rows written in the same millisecond came first (a test
-- clock writes many). Existing rows get numbers in whatever order the table
-- is scanned, which only matters for ties among them.
alter table byollm_jobs        add column if not exists byollm_seq bigint generated by default as identity;
alter table byollm_runners     add column if not exists byollm_seq bigint generated by default as identity;
alter table byollm_pairings    add column if not exists byollm_seq bigint generated by default as identity;
alter table byollm_job_cancels add column if not exists byollm_seq bigint generated by default as identity;

-- The claim's indexes are in the scale file.

-- The in-memory store keeps `ttlMs: 0` (a job that expires at the first
-- sweep); the 0.1.1 schema refused it with `ttl_ms > 0`. Follow the store.
alter table byollm_jobs drop constraint if exists byollm_jobs_ttl_ms_check;
alter table byollm_jobs add constraint byollm_jobs_ttl_ms_check check (ttl_ms >= 0);

-- The in-memory store does not make user codes unique (it answers with the
-- first pairing holding a code); the 0.1.1 schema did, so a colliding code
-- failed the pair-start request. Lookups keep their plain index.
alter table byollm_pairings drop constraint if exists byollm_pairings_user_code_key;

-- Dependents are unblocked inside byollm_complete_job, at the caller's `now`
-- and under a lock that makes two dependencies finishing together safe; the
-- 0.1.1 trigger did it with the database clock.
drop trigger if exists byollm_jobs_unblock_dependents on byollm_jobs;
drop function if exists byollm_unblock_dependents();

-- `lease_runner` is no longer a foreign key. The store contract lets any
-- runner id hold a lease (the handlers only ever pass paired runners), and
-- the 0.1.1 `on delete set null` was a hazard: deleting a runner turned its
-- leases into what reads as a relay-granted lease, which the lease clock
-- never reclaims.
alter table byollm_jobs drop constraint if exists byollm_jobs_lease_runner_fkey;

-- Owners reference Supabase Auth users where there are any. A plain
-- PostgreSQL has no `auth.users`; there the app's own uuids are stored as is.
do $$
begin
  if to_regclass('auth.users') is not null then
    if not exists (select 1 from pg_constraint where conname = 'byollm_runners_owner_fkey') then
      alter table byollm_runners add constraint byollm_runners_owner_fkey
        foreign key (owner) references auth.users (id) on delete cascade;
    end if;
    if not exists (select 1 from pg_constraint where conname = 'byollm_pairings_owner_fkey') then
      alter table byollm_pairings add constraint byollm_pairings_owner_fkey
        foreign key (owner) references auth.users (id) on delete cascade;
    end if;
    if not exists (select 1 from pg_constraint where conname = 'byollm_jobs_owner_fkey') then
      alter table byollm_jobs add constraint byollm_jobs_owner_fkey
        foreign key (owner) references auth.users (id) on delete cascade;
    end if;
  end if;
end
$$;

-- Job ids as the app has them. On a plain PostgreSQL (no `auth.users`) a job
-- id is any non-empty string, as MemoryStore takes (`job-42`, the app's own
-- request keys, a number): there the id, `depends_on` and the cancel
-- requests' `job_id` are text. On Supabase they stay the uuids 0.1.1
-- created. Settled here, before the rules file writes its functions against
-- these columns (byollm_job_key there is written for the type found).
do $$
declare
  r record;
begin
  if to_regclass('auth.users') is null
     and (select data_type from information_schema.columns
           where table_schema = 'public' and table_name = 'byollm_jobs' and column_name = 'id') = 'uuid' then
    -- A column a policy reads cannot change type: drop them here; the access
    -- file applies them again.
    for r in select polname, polrelid::regclass as rel from pg_policy
              where polrelid in ('byollm_jobs'::regclass, 'byollm_job_cancels'::regclass) loop
      execute format('drop policy %I on %s', r.polname, r.rel);
    end loop;
    for r in select conname from pg_constraint
              where conrelid = 'byollm_job_cancels'::regclass and contype = 'f' loop
      execute format('alter table byollm_job_cancels drop constraint %I', r.conname);
    end loop;
    alter table byollm_jobs alter column id type text using id::text,
                            alter column depends_on type text[] using depends_on::text[];
    alter table byollm_job_cancels alter column job_id type text using job_id::text;
    alter table byollm_job_cancels add constraint byollm_job_cancels_job_id_fkey
      foreign key (job_id) references byollm_jobs (id) on delete cascade;
  end if;
end
$$;
