//! Who may run a job: the audience and offer-scope vocabularies, the backend
//! registry with its cost classes, the server's audience match, result
//! provenance and the runner-availability signal (protocol.md §8, api.md §2).
//!
//! Everything here is pure: no clock, no I/O. The store's claim predicate and
//! `ByollmApp.runnerAvailability` both go through [`server_admits`], so the
//! no-runner signal can never promise a runner that a claim would refuse.

use serde::{Deserialize, Serialize};

use crate::vocabulary::vocabulary;

vocabulary! {
    /// Who may run a job (job side).
    pub Audience {
        /// Only the job owner's own devices.
        Private => "private",
        /// A device whose owner admits the job owner.
        Team => "team",
    }
}

impl Audience {
    /// The audience a stored job's text is matched as. New jobs can only be
    /// `private` or `team` (`enqueue` refuses anything else), but a store
    /// may hold a record written by an older deployment or by hand with
    /// another spelling (`"Private"`, `"public"`, `""`). Such a job is
    /// matched as `private`: only its owner's devices may take it. The
    /// reference treats every unknown spelling as `team` without an
    /// allowlist, so a typo hands the payload to strangers.
    pub fn matched_as(text: &str) -> Audience {
        Audience::parse(text).unwrap_or(Audience::Private)
    }
}

vocabulary! {
    /// Who a service will run work for (device side).
    pub OfferScope {
        Private => "private",
        Team => "team",
    }
}

vocabulary! {
    /// Who pays for a backend's tokens.
    pub BackendCost {
        Free => "free",
        Metered => "metered",
        Subscription => "subscription",
    }
}

vocabulary! {
    /// How a backend reaches its model.
    pub BackendClass {
        Http => "http",
        Process => "process",
    }
}

vocabulary! {
    /// Why generation stopped, as sealed by the device in `ran.stop`.
    pub StopReason {
        End => "end",
        Length => "length",
        StopSequence => "stop-sequence",
        Unknown => "unknown",
    }
}

vocabulary! {
    /// Why an audience match refused. Declaration order follows the reference
    /// enum (`no-capability` first), which is the order the vectors list.
    pub Refusal {
        NoCapability => "no-capability",
        AudienceSelfOtherOwner => "audience-self-other-owner",
        NotLocallyAllowed => "not-locally-allowed",
        NotInServerAllowlist => "not-in-server-allowlist",
        OfferScopeTooNarrow => "offer-scope-too-narrow",
        SubscriptionSelfLock => "subscription-self-lock",
        MeteredNoSpendConsent => "metered-no-spend-consent",
        MeteredCeilingReached => "metered-ceiling-reached",
    }
}

impl Refusal {
    /// Refusals caused by the device owner's own setting (scope or billing),
    /// as opposed to the job's audience. `runnerAvailability` reports these as
    /// `default-unusable` because only the device owner can change them.
    pub fn is_device_owners_setting(self) -> bool {
        matches!(
            self,
            Refusal::OfferScopeTooNarrow
                | Refusal::SubscriptionSelfLock
                | Refusal::MeteredNoSpendConsent
                | Refusal::MeteredCeilingReached
        )
    }
}

// ---------------------------------------------------------------------------
// Backend registry

/// The 19 registered backend ids, in registry order (the order of the
/// `backendId` enum and of the vectors), each with the cost the server
/// assumes for it: the registry's cost, and `metered` for the generic
/// `openai-http` entry. The daemon derives that one's cost from its base URL,
/// which the server never sees, so the server takes the expensive reading.
pub static BACKENDS: [(&str, BackendCost); 19] = [
    ("ollama", BackendCost::Free),
    ("mlx", BackendCost::Free),
    ("llamacpp", BackendCost::Free),
    ("vllm", BackendCost::Free),
    ("lmstudio", BackendCost::Free),
    ("jan", BackendCost::Free),
    ("localai", BackendCost::Free),
    ("anthropic", BackendCost::Metered),
    ("openai", BackendCost::Metered),
    ("gemini", BackendCost::Metered),
    ("grok", BackendCost::Metered),
    ("groq", BackendCost::Metered),
    ("openrouter", BackendCost::Metered),
    ("together", BackendCost::Metered),
    ("deepseek", BackendCost::Metered),
    ("mistral", BackendCost::Metered),
    ("openai-http", BackendCost::Metered),
    ("claude-cli", BackendCost::Subscription),
    ("codex-cli", BackendCost::Subscription),
];

/// The cost the server assumes for a backend (see [`BACKENDS`]).
///
/// An unregistered id also reads as `metered`. The reference would throw a
/// `TypeError` there; on the wire every capability's `backendId` is checked
/// against the registry first, so only a hand-built store record can reach
/// this, and refusing the narrow way beats failing the whole claim.
pub fn server_cost(backend_id: &str) -> BackendCost {
    BACKENDS
        .iter()
        .find(|(id, _)| *id == backend_id)
        .map_or(BackendCost::Metered, |(_, cost)| *cost)
}

// ---------------------------------------------------------------------------
// Matching

/// The audience match as the server runs it (claim predicate and
/// availability), protocol.md §8.4 with the server's parameters: cost from
/// the registry (`metered` when unknown), spend acknowledged, everyone
/// admitted. The server cannot see what a remote device verified, so it only
/// refuses what is certain; the daemon re-checks with its real spend and
/// admission and releases the job as `refused` if it disagrees. The order of
/// the checks only decides *which* refusal is reported, and that order is
/// the reference's.
pub fn server_admits(
    job_owner: &str,
    audience: Audience,
    audience_allow: Option<&[String]>,
    offer_scope: OfferScope,
    backend_id: &str,
    runner_owner: &str,
) -> Result<(), Refusal> {
    // Own work runs at any scope and cost.
    if job_owner == runner_owner {
        return Ok(());
    }
    match (audience, audience_allow) {
        (Audience::Private, _) => return Err(Refusal::AudienceSelfOtherOwner),
        // `Some(&[])` is not `None`: an empty list admits nobody else.
        (Audience::Team, Some(allow)) if !allow.iter().any(|o| o == runner_owner) => {
            return Err(Refusal::NotInServerAllowlist)
        }
        (Audience::Team, _) => {}
    }
    // Subscriptions never leave their owner; metered backends do with the
    // spend the server assumes acknowledged, free ones as configured.
    if server_cost(backend_id) == BackendCost::Subscription {
        return Err(Refusal::SubscriptionSelfLock);
    }
    match offer_scope {
        OfferScope::Private => Err(Refusal::OfferScopeTooNarrow),
        OfferScope::Team => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// Provenance

/// Where a result came from, as delivered to the app. Field order is the
/// reference's output order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResultProvenance {
    /// The job's audience as stored (any spelling a store holds is echoed).
    pub audience: String,
    pub runner_id: String,
    pub runner_owner: String,
    pub backend_class: BackendClass,
    pub model: String,
    pub untrusted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reported: Option<bool>,
}

/// The inputs of [`provenance_for`].
#[derive(Debug, Clone, Copy)]
pub struct ProvenanceInput<'a> {
    /// The job's audience as stored.
    pub audience: &'a str,
    pub runner_id: &'a str,
    pub runner_owner: &'a str,
    pub backend_class: BackendClass,
    pub model: &'a str,
    pub stop: Option<StopReason>,
    pub stop_reported: Option<bool>,
}

/// Build provenance for a completed job. `untrusted` is derived from the
/// audience so no caller can present another person's output as first-party:
/// only exactly `private` is trusted, so a job stored with an unknown
/// spelling completes as untrusted (never a refusal, never a host error).
pub fn provenance_for(input: &ProvenanceInput<'_>) -> ResultProvenance {
    ResultProvenance {
        audience: input.audience.to_owned(),
        runner_id: input.runner_id.to_owned(),
        runner_owner: input.runner_owner.to_owned(),
        backend_class: input.backend_class,
        model: input.model.to_owned(),
        untrusted: input.audience != Audience::Private.as_str(),
        stop: input.stop,
        stop_reported: input.stop_reported,
    }
}

// ---------------------------------------------------------------------------
// Runner availability (api.md §2)

vocabulary! {
    /// Why no runner can take a job right now.
    pub NoRunnerReason {
        NoRunnerPaired => "no-runner-paired",
        NoRunnerOnline => "no-runner-online",
        NoMatchingCapability => "no-matching-capability",
        AudienceAdmitsNobody => "audience-admits-nobody",
        DefaultUnusable => "default-unusable",
    }
}

/// The answer of `runnerAvailability`. `reason` is absent exactly when
/// `available` is true; `candidates` counts admitting capabilities, not
/// runners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RunnerAvailability {
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<NoRunnerReason>,
    pub candidates: u32,
}

/// The parts of a stored capability availability reads. `kind` stays a
/// plain string: a record written by some other store may carry a kind this
/// version does not know, and it still counts when the query names it.
#[derive(Debug, Clone, Copy)]
pub struct CapabilityView<'a> {
    pub kind: &'a str,
    pub offer_scope: OfferScope,
    pub backend_id: &'a str,
}

/// What availability needs to know about one stored runner.
#[derive(Debug, Clone, Copy)]
pub struct RunnerView<'a> {
    pub owner: &'a str,
    pub revoked: bool,
    pub last_heartbeat_at: f64,
    pub capabilities: &'a [CapabilityView<'a>],
}

/// The availability question: a job of this kind, owner and audience.
#[derive(Debug, Clone, Copy)]
pub struct AvailabilityQuery<'a> {
    pub kind: &'a str,
    pub owner: &'a str,
    pub audience: Audience,
    pub audience_allow: Option<&'a [String]>,
}

/// A runner is online (live) when it is not revoked and was heard from
/// within `liveness_ms` of `now`: availability and the metrics count so.
pub fn is_online(revoked: bool, last_heartbeat_at: f64, now: f64, liveness_ms: f64) -> bool {
    !revoked && now - last_heartbeat_at <= liveness_ms
}

/// Is there a live runner with a capability that would admit this job?
/// Runs [`server_admits`] over **every** capability for the kind on every
/// live runner (live = not revoked and heard from within `liveness_ms`).
pub fn runner_availability(
    runners: &[RunnerView<'_>],
    query: &AvailabilityQuery<'_>,
    now: f64,
    liveness_ms: f64,
) -> RunnerAvailability {
    let unavailable = |reason| RunnerAvailability {
        available: false,
        reason: Some(reason),
        candidates: 0,
    };
    if runners.is_empty() {
        return unavailable(NoRunnerReason::NoRunnerPaired);
    }
    let mut live = runners
        .iter()
        .filter(|r| is_online(r.revoked, r.last_heartbeat_at, now, liveness_ms))
        .peekable();
    if live.peek().is_none() {
        return unavailable(NoRunnerReason::NoRunnerOnline);
    }

    let mut capable = 0u32;
    let mut admitted = 0u32;
    let mut last_refusal = None;
    for runner in live {
        for cap in runner.capabilities.iter().filter(|c| c.kind == query.kind) {
            capable = capable.saturating_add(1);
            match server_admits(
                query.owner,
                query.audience,
                query.audience_allow,
                cap.offer_scope,
                cap.backend_id,
                runner.owner,
            ) {
                Ok(()) => admitted = admitted.saturating_add(1),
                Err(refusal) => last_refusal = Some(refusal),
            }
        }
    }

    if capable == 0 {
        return unavailable(NoRunnerReason::NoMatchingCapability);
    }
    if admitted == 0 {
        // Split on whose decision blocked it: the device owner's scope or
        // billing setting, or the caller's own audience choice.
        let owners_setting = last_refusal.is_some_and(Refusal::is_device_owners_setting);
        return unavailable(if owners_setting {
            NoRunnerReason::DefaultUnusable
        } else {
            NoRunnerReason::AudienceAdmitsNobody
        });
    }
    RunnerAvailability {
        available: true,
        reason: None,
        candidates: admitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::JobKind;

    #[test]
    fn registry_has_nineteen_unique_ids_in_order() {
        assert_eq!(BACKENDS.len(), 19);
        assert_eq!(BACKENDS[0].0, "ollama");
        assert_eq!(BACKENDS[16].0, "openai-http");
        assert_eq!(BACKENDS[18].0, "codex-cli");
        for (i, (id, _)) in BACKENDS.iter().enumerate() {
            assert!(BACKENDS[..i].iter().all(|(other, _)| other != id), "{id}");
        }
    }

    #[test]
    fn server_cost_reads_null_and_unknown_as_metered() {
        assert_eq!(server_cost("openai-http"), BackendCost::Metered);
        assert_eq!(server_cost("no-such-backend"), BackendCost::Metered);
        assert_eq!(server_cost("Ollama"), BackendCost::Metered);
        assert_eq!(server_cost("ollama"), BackendCost::Free);
        assert_eq!(server_cost("claude-cli"), BackendCost::Subscription);
    }

    #[test]
    fn own_work_runs_anywhere() {
        let none: &[String] = &[];
        for audience in [Audience::Private, Audience::Team] {
            let r = server_admits(
                "alice",
                audience,
                Some(none),
                OfferScope::Private,
                "claude-cli",
                "alice",
            );
            assert_eq!(r, Ok(()));
        }
    }

    #[test]
    fn empty_allowlist_refuses_other_owners() {
        let admits = |allow: Option<&[String]>| {
            server_admits(
                "alice",
                Audience::Team,
                allow,
                OfferScope::Team,
                "ollama",
                "bob",
            )
        };
        assert_eq!(admits(Some(&[])), Err(Refusal::NotInServerAllowlist));
        assert_eq!(admits(None), Ok(()));
        assert_eq!(admits(Some(&["bob".to_string()])), Ok(()));
    }

    #[test]
    fn refusal_order_for_other_owner() {
        let admits = |audience, scope, id| server_admits("alice", audience, None, scope, id, "bob");
        assert_eq!(
            admits(Audience::Private, OfferScope::Private, "claude-cli"),
            Err(Refusal::AudienceSelfOtherOwner)
        );
        assert_eq!(
            admits(Audience::Team, OfferScope::Private, "claude-cli"),
            Err(Refusal::SubscriptionSelfLock)
        );
        assert_eq!(
            admits(Audience::Team, OfferScope::Private, "openai"),
            Err(Refusal::OfferScopeTooNarrow)
        );
    }

    #[test]
    fn server_form_offers_team_scope_of_free_and_metered_only() {
        for (id, ok) in [
            ("ollama", true),
            ("openai", true),
            ("openai-http", true),
            ("claude-cli", false),
        ] {
            let r = server_admits("alice", Audience::Team, None, OfferScope::Team, id, "bob");
            assert_eq!(r.is_ok(), ok, "{id}");
        }
        assert_eq!(
            server_admits(
                "alice",
                Audience::Team,
                None,
                OfferScope::Private,
                "ollama",
                "bob"
            ),
            Err(Refusal::OfferScopeTooNarrow)
        );
    }

    #[test]
    fn vocabularies_round_trip() {
        for r in Refusal::ALL {
            assert_eq!(Refusal::parse(r.as_str()), Some(*r));
        }
        assert_eq!(Audience::parse("Private"), None);
        assert_eq!(
            StopReason::parse("stop-sequence"),
            Some(StopReason::StopSequence)
        );
    }

    #[test]
    fn provenance_derives_untrusted_and_keeps_key_order() {
        let p = provenance_for(&ProvenanceInput {
            audience: "team",
            runner_id: "runner_1",
            runner_owner: "bob",
            backend_class: BackendClass::Process,
            model: "m",
            stop: None,
            stop_reported: Some(false),
        });
        assert!(p.untrusted);
        assert_eq!(
            serde_json::to_string(&p).ok().as_deref(),
            Some(
                r#"{"audience":"team","runnerId":"runner_1","runnerOwner":"bob","backendClass":"process","model":"m","untrusted":true,"stopReported":false}"#
            )
        );
    }

    fn cap(kind: JobKind, scope: OfferScope, backend_id: &'static str) -> CapabilityView<'static> {
        CapabilityView {
            kind: kind.as_str(),
            offer_scope: scope,
            backend_id,
        }
    }

    #[test]
    fn availability_reasons() {
        let q = AvailabilityQuery {
            kind: "llm.chat",
            owner: "alice",
            audience: Audience::Team,
            audience_allow: None,
        };
        assert_eq!(
            runner_availability(&[], &q, 0.0, 35000.0).reason,
            Some(NoRunnerReason::NoRunnerPaired)
        );
        let caps = [
            cap(JobKind::Chat, OfferScope::Private, "ollama"),
            cap(JobKind::Chat, OfferScope::Team, "ollama"),
            cap(JobKind::Generate, OfferScope::Team, "ollama"),
        ];
        let runner = RunnerView {
            owner: "bob",
            revoked: false,
            last_heartbeat_at: 1000.0,
            capabilities: &caps,
        };
        let stale = runner_availability(&[runner], &q, 1000.0 + 35001.0, 35000.0);
        assert_eq!(stale.reason, Some(NoRunnerReason::NoRunnerOnline));
        let ok = runner_availability(&[runner], &q, 1000.0 + 35000.0, 35000.0);
        assert_eq!((ok.available, ok.reason, ok.candidates), (true, None, 1));
        let narrow = [cap(JobKind::Chat, OfferScope::Private, "ollama")];
        let r = RunnerView {
            capabilities: &narrow,
            ..runner
        };
        assert_eq!(
            runner_availability(&[r], &q, 1000.0, 35000.0).reason,
            Some(NoRunnerReason::DefaultUnusable)
        );
        let pq = AvailabilityQuery {
            audience: Audience::Private,
            ..q
        };
        assert_eq!(
            runner_availability(&[r], &pq, 1000.0, 35000.0).reason,
            Some(NoRunnerReason::AudienceAdmitsNobody)
        );
        let gq = AvailabilityQuery {
            kind: "llm.other",
            ..q
        };
        assert_eq!(
            runner_availability(&[r], &gq, 1000.0, 35000.0).reason,
            Some(NoRunnerReason::NoMatchingCapability)
        );
    }
}
