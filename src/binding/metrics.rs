//! `NativeMetrics`: one site store's registry (`crate::metrics`) as JS sees
//! it. `ts/metrics.ts` keeps one per store and records through it; the
//! engine records into the same registry when it runs on our own store.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::metrics::{
    self, Metrics, PairingEvent, Refusal, RunnerCounts, StoreCounts, WaitOutcome,
};
use crate::wire::Endpoint;

/// What the store counted, as the shell hands it over (see
/// `crate::metrics::StoreCounts`); absent fields are counts the store
/// cannot give.
#[napi(object, js_name = "StoreCounts")]
pub struct JsStoreCounts {
    /// Whether the store answered.
    pub ok: bool,
    /// Jobs per state: queued, claimed, running, ok, error, canceled, expired.
    pub jobs: Option<Vec<f64>>,
    /// Runners: paired, online, revoked.
    pub runners: Option<Vec<f64>>,
    pub pairings_pending: Option<f64>,
}

fn count(n: f64) -> u64 {
    if n.is_finite() && n > 0.0 {
        n as u64
    } else {
        0
    }
}

impl From<&JsStoreCounts> for StoreCounts {
    fn from(js: &JsStoreCounts) -> StoreCounts {
        let jobs = js
            .jobs
            .as_deref()
            .and_then(|j| <[f64; 7]>::try_from(j).ok());
        let runners = match js.runners.as_deref() {
            Some([paired, online, revoked]) => Some(RunnerCounts {
                paired: count(*paired),
                online: count(*online),
                revoked: count(*revoked),
            }),
            _ => None,
        };
        StoreCounts {
            ok: js.ok,
            jobs: jobs.map(|j| j.map(count)),
            runners,
            pairings_pending: js.pairings_pending.map(count),
        }
    }
}

impl From<StoreCounts> for JsStoreCounts {
    fn from(counts: StoreCounts) -> JsStoreCounts {
        JsStoreCounts {
            ok: counts.ok,
            jobs: counts.jobs.map(|j| j.iter().map(|&n| n as f64).collect()),
            runners: counts
                .runners
                .map(|r| vec![r.paired as f64, r.online as f64, r.revoked as f64]),
            pairings_pending: counts.pairings_pending.map(|n| n as f64),
        }
    }
}

fn parsed<T>(value: Option<T>, what: &str, text: &str) -> Result<T> {
    value.ok_or_else(|| super::crypto::invalid(format!("unknown {what}: {text}")))
}

#[napi]
pub struct NativeMetrics {
    pub(super) inner: Arc<Metrics>,
}

#[napi]
impl NativeMetrics {
    #[napi(constructor, catch_unwind)]
    pub fn new() -> Self {
        NativeMetrics {
            inner: Arc::default(),
        }
    }

    /// One answered request: `endpoint` its index in the protocol's
    /// endpoint list (`-1`: not a protocol route), its status, whether it
    /// was refused for its body's size, and its time in seconds.
    #[napi(catch_unwind)]
    pub fn request(&self, endpoint: i32, status: u32, too_large: bool, seconds: f64) {
        let endpoint = usize::try_from(endpoint)
            .ok()
            .and_then(|at| Endpoint::ALL.get(at).copied());
        let status = u16::try_from(status).unwrap_or(0);
        self.inner
            .record_request(endpoint, status, too_large, seconds);
    }

    #[napi(catch_unwind)]
    pub fn enqueued(&self) {
        self.inner.record_enqueue();
    }

    #[napi(catch_unwind)]
    pub fn wait(&self, outcome: String, seconds: f64) -> Result<()> {
        let outcome = parsed(WaitOutcome::parse(&outcome), "wait outcome", &outcome)?;
        self.inner.record_wait(outcome, seconds);
        Ok(())
    }

    #[napi(catch_unwind)]
    pub fn pairing(&self, event: String) -> Result<()> {
        let event = parsed(PairingEvent::parse(&event), "pairing event", &event)?;
        self.inner.record_pairing(event);
        Ok(())
    }

    /// Keep job events for `drainEvents` (the OpenTelemetry shell's spans).
    #[napi(catch_unwind)]
    pub fn set_tracing(&self, on: bool) {
        self.inner.set_tracing(on);
    }

    /// The job events kept since the last call as JSON text
    /// (`[{jobId, seconds, done}, …]`); `null` when there are none.
    #[napi(catch_unwind)]
    pub fn drain_events(&self) -> Option<String> {
        self.inner.drain_events_json()
    }

    /// The snapshot as JSON text (`MetricsSnapshot` in `ts/metrics.ts`).
    #[napi(catch_unwind)]
    pub fn json(&self, counts: JsStoreCounts, at_ms: f64) -> String {
        metrics::render_json(&self.inner.snapshot(), &(&counts).into(), at_ms)
    }

    /// The Prometheus text exposition (format 0.0.4).
    #[napi(catch_unwind)]
    pub fn prometheus(&self, counts: JsStoreCounts) -> String {
        metrics::render_prometheus(&self.inner.snapshot(), &(&counts).into())
    }
}

/// The refusal reason an answer's status stands for (`tooLarge`: refused
/// for its body's size), as the metrics label it; `null` for none.
#[napi(catch_unwind)]
pub(super) fn refusal_reason(status: u32, too_large: bool) -> Option<String> {
    Refusal::of(u16::try_from(status).unwrap_or(0), too_large).map(|r| r.as_str().to_owned())
}

/// Runners `[paired, online, revoked]` among records read from a store of
/// the app's own (`listRunners()`), by the rule the stores count with.
#[napi(
    catch_unwind,
    ts_args_type = "runners: readonly RunnerRecord[], now: number, livenessMs: number"
)]
pub(super) fn runner_counts(
    runners: Vec<Object<'_>>,
    now: f64,
    liveness_ms: f64,
) -> Result<Vec<f64>> {
    let mut counts = RunnerCounts::default();
    for runner in &runners {
        let (revoked, heard) = super::rules::liveness_of(runner)?;
        if revoked {
            counts.revoked += 1;
            continue;
        }
        counts.paired += 1;
        if crate::audience::is_online(false, heard, now, liveness_ms) {
            counts.online += 1;
        }
    }
    Ok(vec![
        counts.paired as f64,
        counts.online as f64,
        counts.revoked as f64,
    ])
}

impl Default for NativeMetrics {
    fn default() -> Self {
        NativeMetrics::new()
    }
}
