//! The engine's operations performed on our own [`Store`], in place: no
//! JSON in between, nothing crosses to JavaScript.

use crate::json::{json_string, write_json_str};
use crate::payload::{self, AtRestSeal};
use crate::store::{ClaimArgs, ClaimCapability, CompleteArgs, Holder, JobRef, Store};

use super::ops::{Fault, Job, Lease, Op, Output, Ref, Runner, Stub};

/// Perform `op` on `store`. Our store never re-reads the runner with a
/// request's work (the read before it is in process and current), so the
/// outputs carry no fresh runner.
pub(crate) fn run(store: &mut Store, op: &Op) -> Result<Output, Fault> {
    Ok(match op {
        Op::Runner { runner_id } => Output::Runner(runner(store, runner_id)?),
        Op::PairingByCode { user_code } => {
            let text = store
                .people
                .pairing_json_by_code(user_code)
                .unwrap_or("null");
            op.output_from_json(text)?
        }
        Op::PairingByHash { hash } => {
            let text = store.people.pairing_json_by_hash(hash).unwrap_or("null");
            op.output_from_json(text)?
        }
        Op::CreatePairing {
            record,
            source,
            now,
        } => {
            if store
                .people
                .start_pairing_json(record.clone(), source, *now)
            {
                Output::Done
            } else {
                Output::Refused
            }
        }
        Op::ConsumePairing { hash } => {
            store.people.consume(hash);
            Output::Done
        }
        Op::Claim {
            runner_id,
            runner_owner,
            matched,
            max,
            lease_ms,
            now,
            ..
        } => {
            let capabilities: Vec<ClaimCapability<&str>> =
                matched.iter().map(ClaimCapability::borrowed).collect();
            let claimed = store.claim(&ClaimArgs {
                runner_id,
                runner_owner,
                capabilities: &capabilities,
                max: *max,
                lease_ms: *lease_ms,
                now: *now,
            });
            Output::Claimed {
                runner: None,
                jobs: claimed.into_iter().filter_map(|r| stub(store, r)).collect(),
                wake_at: None,
            }
        }
        Op::Job { job_id, .. } => Output::Job {
            runner: None,
            job: job(store, job_id),
        },
        // Read only: the completion follows as its own operation.
        Op::ResultFor { job_id, .. } => Output::ResultFor {
            runner: None,
            accepted: None,
            job: job(store, job_id),
        },
        Op::Heartbeat {
            runner_id,
            capabilities,
            daemon_version,
            leases,
            lease_ms,
            now,
        } => {
            let mut version = String::with_capacity(daemon_version.len() + 2);
            write_json_str(daemon_version, &mut version);
            store.people.touch(runner_id, capabilities, &version, *now);
            let refs: Vec<_> = leases.iter().map(Ref::to_store).collect();
            let renewed = store.renew_leases_each(runner_id, &refs, *lease_ms, *now);
            // The refs as the request spelled them.
            let lost = leases
                .iter()
                .zip(renewed)
                .filter(|(_, expires_at)| expires_at.is_none())
                .map(|(r, _)| r.clone())
                .collect();
            Output::Heartbeat {
                runner: None,
                lost,
                cancel: cancel_requests(store, runner_id),
                seen_at: None,
            }
        }
        Op::Complete {
            job_id,
            runner_id,
            lease_id,
            outcome_tag,
            outcome,
            provenance,
            now,
        } => {
            let done = store.complete(&CompleteArgs {
                job_id,
                runner_id,
                holder: Holder::Lease(lease_id),
                outcome_tag,
                outcome_json: outcome,
                provenance_json: provenance,
                provenance_runner: Some(runner_id),
                now: *now,
            });
            Output::Completed {
                accepted: done.accepted && !done.duplicate,
                duplicate: done.duplicate,
                state: done
                    .job
                    .and_then(|r| store.view(r))
                    .map(|j| json_string(j.state.as_str())),
            }
        }
        Op::CancelRequests { runner_id } => Output::Refs(cancel_requests(store, runner_id)),
        Op::Release {
            runner_id,
            leases,
            reason,
            now,
        } => {
            let refs: Vec<_> = leases.iter().map(Ref::to_store).collect();
            let released = store.release_each(runner_id, &refs, reason == "refused", *now);
            Output::Ids(
                released
                    .into_iter()
                    .filter_map(|at| leases.get(at).map(|r| r.job_id.clone()))
                    .collect(),
            )
        }
        Op::Cancel { job_ids, now } => {
            for id in job_ids {
                store.cancel(id.as_str(), *now);
            }
            Output::Done
        }
    })
}

fn cancel_requests(store: &Store, runner_id: &str) -> Vec<Ref> {
    store
        .list_cancel_requests(runner_id)
        .into_iter()
        .map(Ref::from)
        .collect()
}

fn runner(store: &Store, runner_id: &str) -> Result<Option<Runner>, Fault> {
    let Some((facts, revoked)) = store.people.runner_facts(runner_id) else {
        return Ok(None);
    };
    let facts = facts.ok_or(Fault::RunnerRecord)?;
    Ok(Some(Runner {
        id: facts.id,
        owner: facts.owner,
        device: facts.device,
        revoked,
    }))
}

fn lease(store: &Store, r: JobRef) -> Option<Lease> {
    let view = store.view(r)?;
    view.lease.map(|l| Lease {
        id: l.id.to_owned(),
        runner_id: l.runner_id.to_owned(),
        expires_at: l.expires_at,
    })
}

fn stub(store: &Store, r: JobRef) -> Option<Stub> {
    let job = store.view(r)?;
    Some(Stub {
        id: job.id.to_owned(),
        kind: job.kind.to_owned(),
        audience: job.audience.to_owned(),
        owner: job.owner.to_owned(),
        purpose: job.purpose_json.map(str::to_owned),
        size_class: job.size_class.to_owned(),
        deadline_at: job.deadline_at,
        claimable_at: job.claimable_at,
        ttl_ms: job.ttl_ms,
        lease: lease(store, r),
        created_at: job.created_at,
        attempts: job.attempts,
    })
}

fn job(store: &Store, job_id: &str) -> Option<Job> {
    let r = store.get(job_id)?;
    let view = store.view(r)?;
    // A caller's own envelope of another shape (keys in another order, say)
    // is read as the sealed envelope it may still be.
    let envelope = payload::at_rest_of(store, r).or_else(|| {
        let raw = store.raw_envelope(r)?;
        super::ops::sealed_from_json(raw).map(AtRestSeal::Sealed)
    });
    Some(Job {
        audience: view.audience.to_owned(),
        state: json_string(view.state.as_str()),
        lease: lease(store, r),
        created_at: view.created_at,
        ciphertext_chars: view.sealed_ciphertext_chars.unwrap_or(0),
        envelope,
    })
}
