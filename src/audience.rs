//! Who may run a job: the audience and offer-scope vocabularies, the backend
//! registry with its cost classes, the audience matcher (both sides must
//! agree), the server-side form of that matcher, result provenance and the
//! runner-availability signal (protocol.md §8, api.md §2).
//!
//! Everything here is pure: no clock, no I/O. The store's claim predicate and
//! `ByollmApp.runnerAvailability` both go through [`server_admits`], so the
//! no-runner signal can never promise a runner that a claim would refuse.

use serde::{Deserialize, Serialize};

/// Defines a string-valued vocabulary: parse from the wire spelling, print it
/// back, and (de)serialise as that spelling.
macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in the reference's declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Exact, case-sensitive parse of the wire spelling.
            #[allow(clippy::should_implement_trait)]
            pub fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

vocabulary! {
    /// Who may run a job (job side).
    Audience {
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
    OfferScope {
        Private => "private",
        Team => "team",
    }
}

vocabulary! {
    /// Who pays for a backend's tokens.
    BackendCost {
        Free => "free",
        Metered => "metered",
        Subscription => "subscription",
    }
}

vocabulary! {
    /// How a backend reaches its model.
    BackendClass {
        Http => "http",
        Process => "process",
    }
}

vocabulary! {
    /// Why generation stopped, as sealed by the device in `ran.stop`.
    StopReason {
        End => "end",
        Length => "length",
        StopSequence => "stop-sequence",
        Unknown => "unknown",
    }
}

vocabulary! {
    /// Why an audience match refused. Declaration order follows the reference
    /// enum (`no-capability` first), which is the order the vectors list.
    Refusal {
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
    /// The human sentence shown for this refusal (exact reference text).
    pub fn message(self) -> &'static str {
        match self {
            Refusal::NoCapability => {
                "no backend on this device is configured and healthy for that job kind"
            }
            Refusal::AudienceSelfOtherOwner => {
                "the job is private to its owner and this device is paired to someone else"
            }
            Refusal::NotLocallyAllowed => {
                "nothing this device can verify says the job's owner may use it"
            }
            Refusal::NotInServerAllowlist => {
                "the app restricted this job to named runners and this device is not one of them"
            }
            Refusal::OfferScopeTooNarrow => {
                "this service is offered to its owner only (`byollm offer <service> team` to widen)"
            }
            Refusal::SubscriptionSelfLock => {
                "subscription-backed models run their owner's work only \u{2014} this is a protocol rule, not a setting"
            }
            Refusal::MeteredNoSpendConsent => {
                "this backend bills its owner per token, and they have not agreed to spend it on other people's work"
            }
            Refusal::MeteredCeilingReached => {
                "this backend is shared but has reached the spend ceiling its owner set"
            }
        }
    }

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

/// The immutable facts about one registered backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    pub id: &'static str,
    pub label: &'static str,
    pub class: BackendClass,
    /// `None` only for the generic `openai-http` entry, whose cost the daemon
    /// derives from its base URL (which the server never sees).
    pub cost: Option<BackendCost>,
    /// Which adversarial test corpus the reference runs against it.
    pub adversarial_corpus: BackendClass,
    pub default_base_url: Option<&'static str>,
}

const fn http(
    id: &'static str,
    label: &'static str,
    cost: BackendCost,
    url: &'static str,
) -> Backend {
    Backend {
        id,
        label,
        class: BackendClass::Http,
        cost: Some(cost),
        adversarial_corpus: BackendClass::Http,
        default_base_url: Some(url),
    }
}

const fn process(id: &'static str, label: &'static str) -> Backend {
    Backend {
        id,
        label,
        class: BackendClass::Process,
        cost: Some(BackendCost::Subscription),
        adversarial_corpus: BackendClass::Process,
        default_base_url: None,
    }
}

/// The 19 registered backends, in registry order (the order of the
/// `backendId` enum and of the vectors).
pub static BACKENDS: [Backend; 19] = [
    http(
        "ollama",
        "Ollama (local)",
        BackendCost::Free,
        "http://127.0.0.1:11434/v1",
    ),
    http(
        "mlx",
        "MLX (mlx_lm.server, local)",
        BackendCost::Free,
        "http://127.0.0.1:8080/v1",
    ),
    http(
        "llamacpp",
        "llama.cpp server (local)",
        BackendCost::Free,
        "http://127.0.0.1:8080/v1",
    ),
    http(
        "vllm",
        "vLLM (local)",
        BackendCost::Free,
        "http://127.0.0.1:8000/v1",
    ),
    http(
        "lmstudio",
        "LM Studio (local)",
        BackendCost::Free,
        "http://127.0.0.1:1234/v1",
    ),
    http(
        "jan",
        "Jan (local)",
        BackendCost::Free,
        "http://127.0.0.1:1337/v1",
    ),
    http(
        "localai",
        "LocalAI (local)",
        BackendCost::Free,
        "http://127.0.0.1:8080/v1",
    ),
    http(
        "anthropic",
        "Anthropic (your API key)",
        BackendCost::Metered,
        "https://api.anthropic.com/v1",
    ),
    http(
        "openai",
        "OpenAI (your API key)",
        BackendCost::Metered,
        "https://api.openai.com/v1",
    ),
    http(
        "gemini",
        "Google Gemini (your API key)",
        BackendCost::Metered,
        "https://generativelanguage.googleapis.com/v1beta/openai",
    ),
    http(
        "grok",
        "xAI Grok (your API key)",
        BackendCost::Metered,
        "https://api.x.ai/v1",
    ),
    http(
        "groq",
        "Groq (your API key)",
        BackendCost::Metered,
        "https://api.groq.com/openai/v1",
    ),
    http(
        "openrouter",
        "OpenRouter (your API key)",
        BackendCost::Metered,
        "https://openrouter.ai/api/v1",
    ),
    http(
        "together",
        "Together AI (your API key)",
        BackendCost::Metered,
        "https://api.together.xyz/v1",
    ),
    http(
        "deepseek",
        "DeepSeek (your API key)",
        BackendCost::Metered,
        "https://api.deepseek.com/v1",
    ),
    http(
        "mistral",
        "Mistral (your API key)",
        BackendCost::Metered,
        "https://api.mistral.ai/v1",
    ),
    Backend {
        id: "openai-http",
        label: "Any OpenAI-compatible server",
        class: BackendClass::Http,
        cost: None,
        adversarial_corpus: BackendClass::Http,
        default_base_url: None,
    },
    process("claude-cli", "Claude CLI (your subscription)"),
    process("codex-cli", "Codex CLI (your ChatGPT plan)"),
];

/// Look up a registered backend by its exact id.
pub fn backend(id: &str) -> Option<&'static Backend> {
    BACKENDS.iter().find(|b| b.id == id)
}

/// The cost the server assumes for a backend: the registry's cost, and
/// `metered` where the registry has none. The server cannot see a generic
/// backend's base URL, so it takes the expensive reading.
///
/// An unregistered id also reads as `metered`. The reference would throw a
/// `TypeError` there; on the wire every capability's `backendId` is checked
/// against the registry first, so only a hand-built store record can reach
/// this, and refusing the narrow way beats failing the whole claim.
pub fn server_cost(backend_id: &str) -> BackendCost {
    backend(backend_id)
        .and_then(|b| b.cost)
        .unwrap_or(BackendCost::Metered)
}

// ---------------------------------------------------------------------------
// Offer scope and matching

/// What a device owner agreed to spend on other people's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpendConsent {
    pub acknowledged: bool,
    /// Only `Some(true)` counts as "ceiling reached".
    pub ceiling_reached: Option<bool>,
}

/// The scope a backend actually offers: subscriptions never leave their
/// owner, metered backends only with acknowledged spend, free ones as
/// configured.
pub fn effective_offer_scope(
    configured: OfferScope,
    cost: BackendCost,
    spend_acknowledged: bool,
) -> OfferScope {
    match cost {
        BackendCost::Subscription => OfferScope::Private,
        BackendCost::Metered if !spend_acknowledged => OfferScope::Private,
        _ => configured,
    }
}

/// The job-side facts of a match.
#[derive(Debug, Clone, Copy)]
pub struct JobAudience<'a> {
    pub owner: &'a str,
    pub audience: Audience,
    /// Server-side restriction on who may take a `team` job. `Some(&[])` is
    /// not the same as `None`: an empty list admits nobody else.
    pub audience_allow: Option<&'a [String]>,
}

/// Whether the device's verified admission covers a job owner.
#[derive(Clone, Copy)]
pub enum Admits<'a> {
    /// A fixed answer (the server always passes `true`).
    Always(bool),
    /// Asked per owner, and only when the matcher reaches that step.
    Ask(&'a dyn Fn(&str) -> bool),
}

impl Admits<'_> {
    fn owner(&self, owner: &str) -> bool {
        match self {
            Admits::Always(answer) => *answer,
            Admits::Ask(ask) => ask(owner),
        }
    }
}

impl std::fmt::Debug for Admits<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Admits::Always(answer) => write!(f, "Always({answer})"),
            Admits::Ask(_) => f.write_str("Ask(..)"),
        }
    }
}

/// The device-side facts of a match.
#[derive(Debug, Clone, Copy)]
pub struct DaemonOffer<'a> {
    pub owner: &'a str,
    pub offer_scope: OfferScope,
    pub cost: BackendCost,
    pub spend: Option<SpendConsent>,
    pub admits: Admits<'a>,
}

/// Decide whether `job` may run on `daemon` (protocol.md §8.4). Both sides
/// must agree: the job's audience must admit the daemon's owner, and the
/// backend's offer must admit the job's owner. The order of the checks only
/// decides *which* refusal is reported, and that order is the reference's.
pub fn match_audience(job: &JobAudience<'_>, daemon: &DaemonOffer<'_>) -> Result<(), Refusal> {
    let same_owner = job.owner == daemon.owner;

    if !same_owner {
        match job.audience {
            Audience::Private => return Err(Refusal::AudienceSelfOtherOwner),
            Audience::Team => {
                if let Some(allow) = job.audience_allow {
                    if !allow.iter().any(|o| o == daemon.owner) {
                        return Err(Refusal::NotInServerAllowlist);
                    }
                }
            }
        }
    }

    if same_owner {
        return Ok(());
    }

    let acknowledged = daemon.spend.is_some_and(|s| s.acknowledged);
    match daemon.cost {
        BackendCost::Subscription => return Err(Refusal::SubscriptionSelfLock),
        BackendCost::Metered => {
            if !acknowledged {
                return Err(Refusal::MeteredNoSpendConsent);
            }
            if daemon
                .spend
                .is_some_and(|s| s.ceiling_reached == Some(true))
            {
                return Err(Refusal::MeteredCeilingReached);
            }
        }
        BackendCost::Free => {}
    }

    match effective_offer_scope(daemon.offer_scope, daemon.cost, acknowledged) {
        OfferScope::Private => Err(Refusal::OfferScopeTooNarrow),
        OfferScope::Team if daemon.admits.owner(job.owner) => Ok(()),
        OfferScope::Team => Err(Refusal::NotLocallyAllowed),
    }
}

/// The matcher as the server runs it (claim predicate and availability):
/// cost from the registry (`metered` when unknown), spend acknowledged,
/// everyone admitted. The server cannot see what a remote device verified,
/// so it only refuses what is certain; the daemon re-checks with its real
/// spend and admission and releases the job as `refused` if it disagrees.
pub fn server_admits(
    job_owner: &str,
    audience: Audience,
    audience_allow: Option<&[String]>,
    offer_scope: OfferScope,
    backend_id: &str,
    runner_owner: &str,
) -> Result<(), Refusal> {
    match_audience(
        &JobAudience {
            owner: job_owner,
            audience,
            audience_allow,
        },
        &DaemonOffer {
            owner: runner_owner,
            offer_scope,
            cost: server_cost(backend_id),
            spend: Some(SpendConsent {
                acknowledged: true,
                ceiling_reached: None,
            }),
            admits: Admits::Always(true),
        },
    )
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
    NoRunnerReason {
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
        .filter(|r| !r.revoked && now - r.last_heartbeat_at <= liveness_ms)
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

    fn team_job<'a>(allow: Option<&'a [String]>) -> JobAudience<'a> {
        JobAudience {
            owner: "alice",
            audience: Audience::Team,
            audience_allow: allow,
        }
    }

    fn offer(owner: &str, scope: OfferScope, cost: BackendCost) -> DaemonOffer<'_> {
        DaemonOffer {
            owner,
            offer_scope: scope,
            cost,
            spend: Some(SpendConsent {
                acknowledged: true,
                ceiling_reached: None,
            }),
            admits: Admits::Always(true),
        }
    }

    #[test]
    fn registry_has_nineteen_unique_ids_in_order() {
        assert_eq!(BACKENDS.len(), 19);
        assert_eq!(BACKENDS[0].id, "ollama");
        assert_eq!(BACKENDS[16].id, "openai-http");
        assert_eq!(BACKENDS[18].id, "codex-cli");
        for (i, b) in BACKENDS.iter().enumerate() {
            assert_eq!(backend(b.id).map(|x| x.id), Some(b.id), "lookup {i}");
        }
        assert!(backend("Ollama").is_none());
        assert!(backend("").is_none());
    }

    #[test]
    fn server_cost_reads_null_and_unknown_as_metered() {
        assert_eq!(server_cost("openai-http"), BackendCost::Metered);
        assert_eq!(server_cost("no-such-backend"), BackendCost::Metered);
        assert_eq!(server_cost("ollama"), BackendCost::Free);
        assert_eq!(server_cost("claude-cli"), BackendCost::Subscription);
    }

    #[test]
    fn own_work_runs_anywhere() {
        let job = JobAudience {
            owner: "alice",
            audience: Audience::Private,
            audience_allow: Some(&[]),
        };
        let mut daemon = offer("alice", OfferScope::Private, BackendCost::Subscription);
        daemon.spend = None;
        daemon.admits = Admits::Always(false);
        assert_eq!(match_audience(&job, &daemon), Ok(()));
    }

    #[test]
    fn empty_allowlist_refuses_other_owners() {
        let empty: Vec<String> = Vec::new();
        let d = offer("bob", OfferScope::Team, BackendCost::Free);
        assert_eq!(
            match_audience(&team_job(Some(&empty)), &d),
            Err(Refusal::NotInServerAllowlist)
        );
        assert_eq!(match_audience(&team_job(None), &d), Ok(()));
        let bob = vec!["bob".to_string()];
        assert_eq!(match_audience(&team_job(Some(&bob)), &d), Ok(()));
    }

    #[test]
    fn refusal_order_for_other_owner() {
        let j = team_job(None);
        let d = offer("bob", OfferScope::Team, BackendCost::Subscription);
        assert_eq!(match_audience(&j, &d), Err(Refusal::SubscriptionSelfLock));
        let mut d = offer("bob", OfferScope::Team, BackendCost::Metered);
        d.spend = None;
        assert_eq!(match_audience(&j, &d), Err(Refusal::MeteredNoSpendConsent));
        d.spend = Some(SpendConsent {
            acknowledged: true,
            ceiling_reached: Some(true),
        });
        assert_eq!(match_audience(&j, &d), Err(Refusal::MeteredCeilingReached));
        let d = offer("bob", OfferScope::Private, BackendCost::Free);
        assert_eq!(match_audience(&j, &d), Err(Refusal::OfferScopeTooNarrow));
        let asked = std::cell::Cell::new(None::<String>);
        let ask = |o: &str| {
            asked.set(Some(o.to_owned()));
            false
        };
        let mut d = offer("bob", OfferScope::Team, BackendCost::Free);
        d.admits = Admits::Ask(&ask);
        assert_eq!(match_audience(&j, &d), Err(Refusal::NotLocallyAllowed));
        assert_eq!(asked.take().as_deref(), Some("alice"));
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
            assert!(!r.message().is_empty());
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
