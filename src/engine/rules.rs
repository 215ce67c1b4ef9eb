//! The engine's own rules: the deadline a claim stub carries and what a
//! job's lease allows a fetch or a result.

use super::ops::Lease;

/// A SQL store writes a runner's liveness only when the stored value is
/// older than this: with the daemon's 10 s tick, on every fifth idle tick
/// (supabase/migrations repeat the number).
pub(crate) const LIVENESS_WRITE_MS: f64 = 45_000.0;

/// How far a SQL store's stored liveness may lag a runner's last request,
/// ever: the slack its liveness counts add to the app's window, so a live
/// runner is never counted offline. Wider than `LIVENESS_WRITE_MS` by more
/// than the daemon's longest tick (11.5 s), so the heartbeat that makes a
/// write due always lands before it and is answered without the store.
pub(crate) const LIVENESS_SLACK_MS: f64 = 60_000.0;

/// The deadline a claim stub carries: the job's own, else the end of its
/// TTL window (counted from now for a job that is not claimable yet).
pub(crate) fn deadline_for(
    deadline_at: Option<f64>,
    claimable_at: Option<f64>,
    ttl_ms: f64,
    now: f64,
) -> f64 {
    deadline_at.unwrap_or(claimable_at.unwrap_or(now) + ttl_ms)
}

/// What a job's lease (`None`: it has none) allows a fetch or a result
/// naming `asked_lease_id` from `runner_id` at `now`. A lease clock that is
/// not a number (NaN) has lapsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseCheck {
    /// A fetch may have the payload: the job's lease is the one named, is
    /// held by the runner asking, and has not expired (a lapsed lease that
    /// no sweep has reclaimed yet hands out nothing; the reference checks
    /// the id and holder only). One answer for "no such job", "not yours"
    /// and "a lease you no longer hold", so nothing here says which.
    pub(crate) fetch_held: bool,
    /// A result is refused before its envelope is opened: a live lease
    /// answers only to the runner it was granted to, and only until it
    /// expires (the reference checks the lease id alone, and lets a lapsed
    /// lease complete until a sweep happens to run). Adopted leases (runner
    /// `""`, relay-granted) have no runner and no lease clock; the store's
    /// own holder check decides those, as it does a lease id that is not
    /// the current one.
    pub(crate) result_refused: bool,
}

/// The lease rules of a fetch and a result (see [`LeaseCheck`]).
pub(crate) fn lease_check(
    lease: Option<&Lease>,
    asked_lease_id: &str,
    runner_id: &str,
    now: f64,
) -> LeaseCheck {
    let Some(lease) = lease else {
        return LeaseCheck {
            fetch_held: false,
            result_refused: false,
        };
    };
    let named = lease.id == asked_lease_id;
    let holder = lease.runner_id == runner_id;
    // Not `!live` for a result: a lease clock that is not a number leaves
    // the result to the store's holder check.
    LeaseCheck {
        fetch_held: named && holder && lease.expires_at > now,
        result_refused: named
            && !lease.runner_id.is_empty()
            && (!holder || lease.expires_at <= now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(runner_id: &str, expires_at: f64) -> Lease {
        Lease {
            id: "l1".into(),
            runner_id: runner_id.into(),
            expires_at,
        }
    }

    #[test]
    fn deadline_is_the_jobs_own_else_the_end_of_its_window() {
        assert_eq!(deadline_for(Some(5.0), Some(100.0), 10.0, 1_000.0), 5.0);
        assert_eq!(deadline_for(None, Some(100.0), 10.0, 1_000.0), 110.0);
        assert_eq!(deadline_for(None, None, 10.0, 1_000.0), 1_010.0);
    }

    #[test]
    fn a_fetch_needs_the_named_lease_held_by_the_asking_runner() {
        let held = |runner_id, asked, asking| {
            lease_check(Some(&lease(runner_id, 101.0)), asked, asking, 100.0).fetch_held
        };
        assert!(!lease_check(None, "l1", "r1", 100.0).fetch_held, "no lease");
        assert!(held("r1", "l1", "r1"));
        assert!(!held("r1", "l2", "r1"), "another lease");
        assert!(!held("r2", "l1", "r1"), "another runner's lease");
        assert!(!held("", "l1", "r1"), "an adopted lease");
    }

    #[test]
    fn a_fetch_on_a_lapsed_lease_hands_out_nothing_even_before_a_sweep() {
        let held = |expires_at: f64, now: f64| {
            lease_check(Some(&lease("r1", expires_at)), "l1", "r1", now).fetch_held
        };
        assert!(held(101.0, 100.0), "in time");
        assert!(!held(100.0, 100.0), "at expiry");
        assert!(!held(100.0, 3_600_100.0), "an hour later, unswept");
        assert!(!held(f64::NAN, 100.0), "a lease clock that is not a number");
    }

    #[test]
    fn a_result_on_a_live_lease_answers_only_to_its_runner_until_it_expires() {
        let refused = |runner_id: &str, expires_at: f64, asked: &str| {
            lease_check(Some(&lease(runner_id, expires_at)), asked, "r1", 100.0).result_refused
        };
        assert!(!refused("r1", 101.0, "l1"), "the holder, in time");
        assert!(refused("r1", 100.0, "l1"), "the holder, at expiry");
        assert!(refused("r2", 101.0, "l1"), "someone else's lease");
        assert!(!refused("", 0.0, "l1"), "adopted: the store decides");
        assert!(
            !refused("r1", f64::NAN, "l1"),
            "a lease clock that is not a number: the store decides"
        );
        assert!(
            !refused("r2", 0.0, "l2"),
            "not the current lease: the store decides"
        );
        assert!(
            !lease_check(None, "l1", "r1", 100.0).result_refused,
            "no lease"
        );
    }
}
