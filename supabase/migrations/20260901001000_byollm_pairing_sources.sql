-- Pairing floods: pending pairings bounded per request source, as in the
-- in-memory store (src/store/people.rs SOURCE_SHARE).
--
--   * `pair start` is the one unsigned endpoint. Each pairing it writes
--     carries the request's source as the site keeps it: a keyed hash
--     (BLAKE2b-128 under a key derived from the site's keys), never an
--     address.
--   * A source may hold at most byollm_source_share() (64) pending pairings;
--     past that its `pair start` is refused `rate-limited` and nothing is
--     written. Its own pairings past pruning go first.
--   * When the table holds byollm_max_pairings() (4,096), the pairing
--     dropped is the oldest that no source holds pending and no daemon has
--     yet to collect (an app's own createPairing, a denied one, a collected
--     approval); a pairing a source holds within its share is never
--     dropped, so without one the request is refused `rate-limited`.
--   * Every step is an index probe or bounded by the share; the count of
--     the whole table is taken only when its insertion numbers span the
--     bound (as byollm_create_pairing does), under a lock so that two
--     starts cannot both take the last place.

alter table byollm_pairings add column if not exists source text;

-- A source's pending pairings, oldest first.
create index if not exists byollm_pairings_source_idx
  on byollm_pairings (source, byollm_seq) where state = 'pending' and source is not null;

-- Pairings that may be dropped when the table is full, oldest first.
create index if not exists byollm_pairings_spare_idx
  on byollm_pairings (byollm_seq)
  where (state <> 'pending' or source is null)
    and not (state = 'approved' and collected_at is null);

create or replace function byollm_source_share() returns integer
language sql immutable parallel safe
as $$ select 64 $$;

-- `pair start`'s write: {"started": true} once stored, {"started": false}
-- (nothing written) when the source holds its share or the table is full
-- of pairings held within their shares.
create or replace function byollm_start_pairing(p_pairing jsonb, p_source text, p_now bigint)
returns jsonb
language plpgsql volatile security definer
as $$
declare
  v_held integer;
  v_count bigint;
begin
  -- One source's starts one at a time, so its share is exact.
  perform pg_advisory_xact_lock(hashtextextended('byollm pairing source ' || p_source, 0));
  delete from byollm_pairings
   where device_code_hash in (
     select device_code_hash from byollm_pairings
      where source = p_source and state = 'pending'
        and expires_at <= byollm_at(p_now - 120000)
      order by byollm_seq
      limit byollm_source_share());
  select count(*) into v_held from (
    select 1 from byollm_pairings
     where source = p_source and state = 'pending'
     limit byollm_source_share()) held;
  if v_held >= byollm_source_share() then
    return jsonb_build_object('started', false);
  end if;

  if (select max(byollm_seq) - min(byollm_seq) from byollm_pairings) >= byollm_max_pairings() - 1 then
    perform pg_advisory_xact_lock(hashtextextended('byollm pairings full', 0));
    select count(*) into v_count from byollm_pairings;
    if v_count >= byollm_max_pairings() then
      v_count := v_count - byollm_prune_pairings(p_now);
    end if;
    if v_count >= byollm_max_pairings() then
      delete from byollm_pairings
       where device_code_hash = (
         select device_code_hash from byollm_pairings
          where (state <> 'pending' or source is null)
            and not (state = 'approved' and collected_at is null)
          order by byollm_seq
          limit 1
          for update skip locked);
      if not found then
        return jsonb_build_object('started', false);
      end if;
    end if;
  end if;

  perform byollm_create_pairing(p_pairing);
  update byollm_pairings set source = p_source
   where device_code_hash = p_pairing ->> 'deviceCodeHash';
  return jsonb_build_object('started', true);
end;
$$;

select byollm_lock_functions();
