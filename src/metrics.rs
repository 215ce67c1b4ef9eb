//! What an operator watches: counters and fixed-bucket histograms of one
//! process, rendered with the store's counts of stored things as a JSON
//! snapshot (`app.metrics()`) or as the Prometheus text exposition (0.0.4).
//!
//! Memory is fixed whatever the traffic: every label comes from an
//! enumeration below ([`Endpoint`] or `other`, [`Status`], [`Refusal`],
//! [`WaitOutcome`], [`PairingEvent`], the job states), every histogram has the
//! buckets of its kind, and nothing is kept per job or per runner. The one
//! exception is [`Metrics::drain_events`], a bounded queue of job events
//! (the job id and a latency) kept only while tracing is switched on, for
//! the OpenTelemetry shell to turn into spans; it never reaches a label.
//!
//! One registry serves one site store: the request boundary records each
//! answer ([`Metrics::record_request`]), the claim and result paths record
//! the job latencies, the app records enqueues, approvals and waits.

use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::json::Obj;
use crate::store::JobState;
use crate::vocabulary::vocabulary;
use crate::wire::Endpoint;

vocabulary! {
    /// The answer's HTTP status, as a label: the statuses the protocol
    /// answers with, and `other`.
    pub(crate) Status {
        Ok => "200",
        BadRequest => "400",
        Unauthorized => "401",
        Revoked => "403",
        NotFound => "404",
        MethodNotAllowed => "405",
        ServerError => "500",
        Unavailable => "503",
        Other => "other",
    }
}

impl Status {
    pub(crate) fn of(code: u16) -> Status {
        Status::ALL
            .iter()
            .copied()
            .find(|s| s.as_str().parse::<u16>() == Ok(code))
            .unwrap_or(Status::Other)
    }
}

vocabulary! {
    /// Why a request was refused.
    pub(crate) Refusal {
        Unauthorized => "unauthorized",
        Revoked => "revoked",
        BadRequest => "bad_request",
        NotFound => "not_found",
        BodyTooLarge => "body_too_large",
        /// A daemon released a job with reason `refused`: its audience
        /// rules would not let it run the job.
        Audience => "audience",
        /// Refused `rate-limited`: a source over its share of pending
        /// pairings or its budget of unknown lookups.
        RateLimited => "rate_limited",
    }
}

impl Refusal {
    /// The refusal an answer's status stands for (`too_large`: the body
    /// was over the protocol's size cap); `None` for a success or a
    /// server-side failure.
    pub(crate) fn of(status: u16, too_large: bool) -> Option<Refusal> {
        match status {
            400 if too_large => Some(Refusal::BodyTooLarge),
            400 | 405 => Some(Refusal::BadRequest),
            401 => Some(Refusal::Unauthorized),
            403 => Some(Refusal::Revoked),
            404 => Some(Refusal::NotFound),
            429 => Some(Refusal::RateLimited),
            _ => None,
        }
    }
}

vocabulary! {
    /// How an app's wait for a job's result (`handle.result()`) ended.
    pub(crate) WaitOutcome {
        /// The job ended `ok` or `error`: a runner answered.
        Answered => "answered",
        Canceled => "canceled",
        Expired => "expired",
        /// No runner could take the job (`NoRunnerAvailableError`).
        NoRunner => "no_runner",
        TimedOut => "timed_out",
        /// The app's `onNoRunner` substitute answered.
        Fallback => "fallback",
        Aborted => "aborted",
        /// The wait failed otherwise (a store error).
        Error => "error",
    }
}

vocabulary! {
    /// What happened to a pairing.
    pub(crate) PairingEvent {
        /// `pair start` answered with a code.
        Started => "started",
        /// The owner approved it (`approvePairing`).
        Approved => "approved",
        Denied => "denied",
        /// A poll heard `expired`.
        Expired => "expired",
        /// The daemon collected its approval.
        Collected => "collected",
    }
}

/// Upper bounds (seconds) of a request's latency: our own store answers
/// in ≈ 0.1 ms, a SQL store in a few ms, a slow database in seconds.
pub(crate) const REQUEST_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Upper bounds (seconds) of a job's latencies and of an app's wait: from a
/// daemon polling every few seconds to a job waiting an hour for its
/// owner's machine.
pub(crate) const JOB_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
];

/// Requests are counted by endpoint and `other` (not a protocol route, or
/// a method other than POST).
const ROUTES: usize = 7;

fn route_label(route: usize) -> &'static str {
    Endpoint::ALL.get(route).map_or("other", |e| e.as_str())
}

fn counters<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}

/// A histogram with fixed upper bounds; values in seconds.
pub(crate) struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, then the `+Inf` bucket; not cumulative.
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Count one value. A negative or non-finite value (a clock that went
    /// back) counts as 0.
    pub(crate) fn observe(&self, seconds: f64) {
        let seconds = if seconds.is_finite() && seconds > 0.0 {
            seconds
        } else {
            0.0
        };
        let at = self.bounds.partition_point(|&bound| bound < seconds);
        if let Some(count) = self.counts.get(at) {
            count.fetch_add(1, Relaxed);
        }
        // `as` saturates: a value beyond 584 years adds u64::MAX.
        self.sum_ns.fetch_add((seconds * 1e9) as u64, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self.counts.iter().map(|c| c.load(Relaxed)).collect(),
            sum: self.sum_ns.load(Relaxed) as f64 / 1e9,
        }
    }
}

/// A histogram as read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistogramSnapshot {
    pub bounds: &'static [f64],
    /// Per bucket (the last is `+Inf`), not cumulative.
    pub counts: Vec<u64>,
    pub sum: f64,
}

impl HistogramSnapshot {
    pub(crate) fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile estimated as Prometheus's `histogram_quantile` does:
    /// linear within the bucket the rank falls in (from 0 for the first);
    /// the highest finite bound when it falls in `+Inf`; `None` when empty.
    pub(crate) fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        for (at, &count) in self.counts.iter().enumerate() {
            let upto = below + count;
            if count > 0 && upto as f64 >= rank {
                let Some(&upper) = self.bounds.get(at) else {
                    return self.bounds.last().copied();
                };
                let lower = if at == 0 {
                    0.0
                } else {
                    self.bounds.get(at - 1).copied().unwrap_or(0.0)
                };
                let within = (rank - below as f64) / count as f64;
                return Some(lower + (upper - lower) * within);
            }
            below = upto;
        }
        self.bounds.last().copied()
    }
}

/// A job event kept for tracing: `first_claim` (enqueue → first claim) or
/// done (enqueue → an accepted result), with the job's id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobEvent {
    pub done: bool,
    pub job_id: String,
    pub seconds: f64,
}

/// Most job events kept between two drains; past it the oldest go.
pub(crate) const MAX_EVENTS: usize = 1024;

/// One site store's counters and histograms.
pub(crate) struct Metrics {
    requests: [[AtomicU64; Status::ALL.len()]; ROUTES],
    request_seconds: [Histogram; ROUTES],
    refusals: [AtomicU64; Refusal::ALL.len()],
    enqueued: AtomicU64,
    queue_wait: Histogram,
    job_total: Histogram,
    waits: [AtomicU64; WaitOutcome::ALL.len()],
    wait_seconds: Histogram,
    pairings: [AtomicU64; PairingEvent::ALL.len()],
    tracing: AtomicBool,
    events: Mutex<VecDeque<JobEvent>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: std::array::from_fn(|_| counters()),
            request_seconds: std::array::from_fn(|_| Histogram::new(REQUEST_BUCKETS)),
            refusals: counters(),
            enqueued: AtomicU64::new(0),
            queue_wait: Histogram::new(JOB_BUCKETS),
            job_total: Histogram::new(JOB_BUCKETS),
            waits: counters(),
            wait_seconds: Histogram::new(JOB_BUCKETS),
            pairings: counters(),
            tracing: AtomicBool::new(false),
            events: Mutex::new(VecDeque::new()),
        }
    }
}

fn index_of<T: PartialEq>(all: &[T], value: &T) -> usize {
    all.iter().position(|v| v == value).unwrap_or(0)
}

impl Metrics {
    /// One answered request: its endpoint (`None`: not a protocol route),
    /// status, whether it was refused for its body's size, and how long it
    /// took. A refusal is counted by its reason too.
    pub(crate) fn record_request(
        &self,
        endpoint: Option<Endpoint>,
        status: u16,
        too_large: bool,
        seconds: f64,
    ) {
        let route = endpoint.map_or(ROUTES - 1, |e| index_of(Endpoint::ALL, &e));
        let status_at = index_of(Status::ALL, &Status::of(status));
        if let Some(count) = self.requests.get(route).and_then(|r| r.get(status_at)) {
            count.fetch_add(1, Relaxed);
        }
        if let Some(histogram) = self.request_seconds.get(route) {
            histogram.observe(seconds);
        }
        if let Some(reason) = Refusal::of(status, too_large) {
            self.record_refusals(reason, 1);
        }
    }

    pub(crate) fn record_refusals(&self, reason: Refusal, n: u64) {
        self.refusals[index_of(Refusal::ALL, &reason)].fetch_add(n, Relaxed);
    }

    pub(crate) fn record_enqueue(&self) {
        self.enqueued.fetch_add(1, Relaxed);
    }

    /// A job claimed for the first time, `ms` after its enqueue.
    pub(crate) fn record_queue_wait(&self, job_id: &str, ms: f64) {
        self.queue_wait.observe(ms / 1000.0);
        self.note(false, job_id, ms);
    }

    /// A job's result accepted, `ms` after its enqueue.
    pub(crate) fn record_job_done(&self, job_id: &str, ms: f64) {
        self.job_total.observe(ms / 1000.0);
        self.note(true, job_id, ms);
    }

    pub(crate) fn record_wait(&self, outcome: WaitOutcome, seconds: f64) {
        self.waits[index_of(WaitOutcome::ALL, &outcome)].fetch_add(1, Relaxed);
        self.wait_seconds.observe(seconds);
    }

    pub(crate) fn record_pairing(&self, event: PairingEvent) {
        self.pairings[index_of(PairingEvent::ALL, &event)].fetch_add(1, Relaxed);
    }

    /// Keep job events for [`Metrics::drain_events`] from now on (`false`:
    /// stop, and drop those kept).
    pub(crate) fn set_tracing(&self, on: bool) {
        self.tracing.store(on, Relaxed);
        if !on {
            self.events_lock().clear();
        }
    }

    fn events_lock(&self) -> std::sync::MutexGuard<'_, VecDeque<JobEvent>> {
        // A panic while holding it left nothing half-written worth refusing.
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, done: bool, job_id: &str, ms: f64) {
        if !self.tracing.load(Relaxed) {
            return;
        }
        let mut events = self.events_lock();
        if events.len() >= MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(JobEvent {
            done,
            job_id: job_id.to_owned(),
            seconds: ms / 1000.0,
        });
    }

    /// The job events kept since the last call, oldest first.
    pub(crate) fn drain_events(&self) -> Vec<JobEvent> {
        if !self.tracing.load(Relaxed) {
            return Vec::new();
        }
        self.events_lock().drain(..).collect()
    }

    /// [`Metrics::drain_events`] as JSON text, `[{"jobId","seconds","done"}, …]`,
    /// or `None` when there are none: one string crosses into JavaScript
    /// instead of three arrays built element by element.
    pub(crate) fn drain_events_json(&self) -> Option<String> {
        let events = self.drain_events();
        if events.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(events.len() * 96);
        for (at, event) in events.iter().enumerate() {
            out.push(if at == 0 { '[' } else { ',' });
            let mut o = Obj::new();
            o.str("jobId", &event.job_id)
                .num("seconds", event.seconds)
                .bool("done", event.done);
            out.push_str(&o.end());
        }
        out.push(']');
        Some(out)
    }

    /// Everything counted, as read now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let load = |counts: &[AtomicU64]| counts.iter().map(|c| c.load(Relaxed)).collect();
        Snapshot {
            requests: self.requests.iter().map(|r| load(r)).collect(),
            request_seconds: self.request_seconds.iter().map(|h| h.snapshot()).collect(),
            refusals: load(&self.refusals),
            enqueued: self.enqueued.load(Relaxed),
            queue_wait: self.queue_wait.snapshot(),
            job_total: self.job_total.snapshot(),
            waits: load(&self.waits),
            wait_seconds: self.wait_seconds.snapshot(),
            pairings: load(&self.pairings),
        }
    }
}

/// The counters and histograms as read at one moment (see [`Metrics`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    /// Per route (the endpoints, then `other`), per [`Status`].
    pub requests: Vec<Vec<u64>>,
    pub request_seconds: Vec<HistogramSnapshot>,
    pub refusals: Vec<u64>,
    pub enqueued: u64,
    pub queue_wait: HistogramSnapshot,
    pub job_total: HistogramSnapshot,
    pub waits: Vec<u64>,
    pub wait_seconds: HistogramSnapshot,
    pub pairings: Vec<u64>,
}

/// Runners by state, as the store counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RunnerCounts {
    /// Not revoked.
    pub paired: u64,
    /// Not revoked, and heard from within the liveness window.
    pub online: u64,
    pub revoked: u64,
}

/// What the store counts, shared by every instance on it; `None` where the
/// store cannot say (a store of the app's own has no counting call).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct StoreCounts {
    /// Whether the store answered; `false` renders the counters alone.
    pub ok: bool,
    /// Per [`JobState`], in [`JobState::ALL`]'s order.
    pub jobs: Option<[u64; 7]>,
    pub runners: Option<RunnerCounts>,
    /// Pairings pending and unexpired.
    pub pairings_pending: Option<u64>,
}

/// `snake_case` → `camelCase`, for the snapshot's keys.
/// `snake_case` as `camelCase`.
fn camel(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    let mut upper = false;
    for c in label.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// `"a":1,"b":2` from labels and counts (keys in camelCase).
fn json_counts(o: &mut Obj, labels: &[&str], counts: &[u64]) {
    for (label, count) in labels.iter().zip(counts) {
        o.num(&camel(label), *count as f64);
    }
}

fn json_optional(o: &mut Obj, key: &str, value: Option<f64>) {
    match value {
        Some(v) => o.num(key, v),
        None => o.raw(key, "null"),
    };
}

fn json_histogram(o: &mut Obj, h: &HistogramSnapshot) {
    o.num("count", h.count() as f64).num("sum", h.sum);
    for (key, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
        json_optional(o, key, h.quantile(q));
    }
    o.with("buckets", |out| {
        let mut cumulative = 0u64;
        for (at, (bound, count)) in h.bounds.iter().zip(&h.counts).enumerate() {
            cumulative += count;
            out.push(if at == 0 { '[' } else { ',' });
            let mut bucket = Obj::new();
            bucket.num("le", *bound).num("count", cumulative as f64);
            out.push_str(&bucket.end());
        }
        out.push(']');
    });
}

/// The snapshot `app.metrics()` answers, as JSON text (its shape is
/// `MetricsSnapshot` in `ts/metrics-snapshot.ts`; docs/operations.md lists it).
pub(crate) fn render_json(snapshot: &Snapshot, store: &StoreCounts, at_ms: f64) -> String {
    let mut out = Obj::with_capacity(8 * 1024);
    out.num("at", at_ms).obj("store", |o| {
        o.bool("ok", store.ok);
    });
    match &store.jobs {
        Some(jobs) => out.obj("jobs", |o| json_counts(o, JobState::NAMES, jobs)),
        None => out.raw("jobs", "null"),
    };
    match &store.runners {
        Some(r) => out.obj("runners", |o| {
            json_counts(
                o,
                &["paired", "online", "revoked"],
                &[r.paired, r.online, r.revoked],
            )
        }),
        None => out.raw("runners", "null"),
    };
    out.obj("pairings", |o| {
        json_optional(o, "pending", store.pairings_pending.map(|n| n as f64));
        json_counts(o, PairingEvent::NAMES, &snapshot.pairings);
    })
    .num("enqueued", snapshot.enqueued as f64)
    .obj("endpoints", |o| {
        for route in 0..ROUTES {
            let counts = snapshot.requests.get(route).cloned().unwrap_or_default();
            o.obj(route_label(route), |o| {
                o.num("requests", counts.iter().sum::<u64>() as f64)
                    .obj("statuses", |o| json_counts(o, Status::NAMES, &counts));
                if let Some(h) = snapshot.request_seconds.get(route) {
                    o.obj("latency", |o| json_histogram(o, h));
                }
            });
        }
    })
    .obj("refusals", |o| {
        json_counts(o, Refusal::NAMES, &snapshot.refusals)
    })
    .obj("jobLatency", |o| {
        o.obj("queueWait", |o| json_histogram(o, &snapshot.queue_wait))
            .obj("total", |o| json_histogram(o, &snapshot.job_total));
    })
    .obj("waits", |o| {
        o.obj("outcomes", |o| {
            json_counts(o, WaitOutcome::NAMES, &snapshot.waits)
        })
        .obj("duration", |o| json_histogram(o, &snapshot.wait_seconds));
    });
    out.end()
}

/// The Prometheus text being written, and the family its samples belong to.
struct Prom {
    out: String,
    name: &'static str,
}

impl Prom {
    /// Start a family: its `# HELP` and `# TYPE` lines.
    fn family(&mut self, name: &'static str, kind: &str, help: &str) -> &mut Self {
        self.name = name;
        let _ = write!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
        self
    }

    /// One sample of the family, its name followed by `suffix`; `labels`
    /// are `(name, value)` pairs whose values come from the enumerations
    /// here (no escaping is ever needed). The value: integers as integers,
    /// others in Rust's shortest round-trip form, which the text format's
    /// float grammar reads.
    fn sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        let out = &mut self.out;
        out.push_str(self.name);
        out.push_str(suffix);
        for (at, (key, val)) in labels.iter().enumerate() {
            let _ = write!(out, "{}{key}=\"{val}\"", if at == 0 { '{' } else { ',' });
        }
        if !labels.is_empty() {
            out.push('}');
        }
        let _ = if value.is_finite() && value.fract() == 0.0 && value.abs() < 9.0e15 {
            writeln!(out, " {}", value as i64)
        } else if value.is_infinite() {
            writeln!(out, " {}", if value > 0.0 { "+Inf" } else { "-Inf" })
        } else {
            writeln!(out, " {value}")
        };
        self
    }

    fn counts(&mut self, label: &str, names: &[&str], counts: &[u64]) -> &mut Self {
        for (value, count) in names.iter().zip(counts) {
            self.sample("", &[(label, value)], *count as f64);
        }
        self
    }

    fn histogram(&mut self, labels: &[(&str, &str)], h: &HistogramSnapshot) -> &mut Self {
        let mut cumulative = 0u64;
        for (at, count) in h.counts.iter().enumerate() {
            cumulative += count;
            let le = h
                .bounds
                .get(at)
                .map_or("+Inf".to_owned(), |b| b.to_string());
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample("_bucket", &with_le, cumulative as f64);
        }
        self.sample("_sum", labels, h.sum)
            .sample("_count", labels, cumulative as f64)
    }
}

/// The Prometheus text exposition (format 0.0.4) of the counters and the
/// store's counts. Counts the store could not give are left out, and
/// `byollm_store_up` says whether it answered.
pub(crate) fn render_prometheus(snapshot: &Snapshot, store: &StoreCounts) -> String {
    let mut p = Prom {
        out: String::with_capacity(16 * 1024),
        name: "",
    };
    if let Some(jobs) = &store.jobs {
        p.family("byollm_jobs", "gauge", "Jobs in the store, by state.")
            .counts("state", JobState::NAMES, jobs);
    }
    if let Some(r) = &store.runners {
        p.family("byollm_runners", "gauge",
            "Runners in the store: paired (not revoked), online (paired, heard from within the liveness window), revoked.")
            .counts("state", &["paired", "online", "revoked"], &[r.paired, r.online, r.revoked]);
    }
    if let Some(pending) = store.pairings_pending {
        p.family(
            "byollm_pairings_pending",
            "gauge",
            "Pairings waiting for approval, not expired.",
        )
        .sample("", &[], pending as f64);
    }
    p.family(
        "byollm_store_up",
        "gauge",
        "1 when the store answered this scrape's counts, else 0.",
    )
    .sample("", &[], if store.ok { 1.0 } else { 0.0 })
    .family(
        "byollm_pairings_total",
        "counter",
        "Pairing events seen by this process.",
    )
    .counts("event", PairingEvent::NAMES, &snapshot.pairings)
    .family(
        "byollm_jobs_enqueued_total",
        "counter",
        "Jobs enqueued by this process.",
    )
    .sample("", &[], snapshot.enqueued as f64)
    .family(
        "byollm_requests_total",
        "counter",
        "Daemon requests answered by this process, by endpoint and status.",
    );
    for (route, counts) in snapshot.requests.iter().enumerate() {
        for (status, count) in Status::NAMES.iter().zip(counts) {
            // Every endpoint's 200, and any other status once seen.
            if *count > 0 || *status == "200" {
                let labels = [("endpoint", route_label(route)), ("status", *status)];
                p.sample("", &labels, *count as f64);
            }
        }
    }
    p.family(
        "byollm_request_duration_seconds",
        "histogram",
        "Time from a daemon request's arrival to its answer, by endpoint.",
    );
    for (route, h) in snapshot.request_seconds.iter().enumerate() {
        p.histogram(&[("endpoint", route_label(route))], h);
    }
    p.family(
        "byollm_refusals_total",
        "counter",
        "Refused daemon requests (audience: jobs a daemon released as refused), by reason.",
    )
    .counts("reason", Refusal::NAMES, &snapshot.refusals)
    .family(
        "byollm_job_queue_wait_seconds",
        "histogram",
        "Time from a job's enqueue to its first claim.",
    )
    .histogram(&[], &snapshot.queue_wait)
    .family(
        "byollm_job_duration_seconds",
        "histogram",
        "Time from a job's enqueue to its accepted result.",
    )
    .histogram(&[], &snapshot.job_total)
    .family(
        "byollm_waits_total",
        "counter",
        "Waits for a job's result (handle.result()) ended, by outcome.",
    )
    .counts("outcome", WaitOutcome::NAMES, &snapshot.waits)
    .family(
        "byollm_wait_duration_seconds",
        "histogram",
        "How long a wait for a job's result (handle.result()) took.",
    )
    .histogram(&[], &snapshot.wait_seconds);
    p.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_lands_in_the_first_bucket_at_or_above_it() {
        let h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 1.0, 7.0, -3.0, f64::NAN] {
            h.observe(v);
        }
        let s = h.snapshot();
        // 0.05, 0.1, -3 (as 0), NaN (as 0) | 0.5, 1.0 | 7.0
        assert_eq!(s.counts, vec![4, 2, 1]);
        assert_eq!(s.count(), 7);
        assert!((s.sum - 8.65).abs() < 1e-9);
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let h = Histogram::new(&[1.0, 2.0]);
        assert_eq!(h.snapshot().quantile(0.5), None);
        for _ in 0..10 {
            h.observe(1.5);
        }
        let s = h.snapshot();
        assert_eq!(s.quantile(0.5), Some(1.5));
        assert_eq!(s.quantile(1.0), Some(2.0));
        h.observe(100.0);
        // In `+Inf`: the highest finite bound.
        assert_eq!(h.snapshot().quantile(1.0), Some(2.0));
    }

    #[test]
    fn refusals_come_from_the_status() {
        assert_eq!(Refusal::of(200, false), None);
        assert_eq!(Refusal::of(400, true), Some(Refusal::BodyTooLarge));
        assert_eq!(Refusal::of(400, false), Some(Refusal::BadRequest));
        assert_eq!(Refusal::of(401, false), Some(Refusal::Unauthorized));
        assert_eq!(Refusal::of(403, false), Some(Refusal::Revoked));
        assert_eq!(Refusal::of(404, false), Some(Refusal::NotFound));
        assert_eq!(Refusal::of(500, false), None);
        assert_eq!(Status::of(418), Status::Other);
        assert_eq!(Status::of(403), Status::Revoked);
    }

    #[test]
    fn requests_count_by_route_status_and_reason() {
        let m = Metrics::default();
        m.record_request(Some(Endpoint::Claim), 200, false, 0.0002);
        m.record_request(Some(Endpoint::Claim), 401, false, 0.0001);
        m.record_request(None, 404, false, 0.0001);
        m.record_request(Some(Endpoint::Result), 400, true, 0.0001);
        let s = m.snapshot();
        assert_eq!(s.requests[1][0], 1);
        assert_eq!(s.requests[1][2], 1);
        assert_eq!(s.requests[6][4], 1);
        assert_eq!(s.refusals, vec![1, 0, 0, 1, 1, 0, 0]);
        assert_eq!(s.request_seconds[1].count(), 2);
    }

    #[test]
    fn job_events_drain_as_json_text() {
        let m = Metrics::default();
        assert_eq!(m.drain_events_json(), None);
        m.set_tracing(true);
        m.record_queue_wait("job_\"1", 1500.0);
        m.record_job_done("job_2", 250.0);
        let text = m.drain_events_json().expect("two events");
        assert_eq!(
            text,
            r#"[{"jobId":"job_\"1","seconds":1.5,"done":false},{"jobId":"job_2","seconds":0.25,"done":true}]"#
        );
        assert_eq!(m.drain_events_json(), None);
    }

    #[test]
    fn job_events_are_kept_only_while_tracing_and_bounded() {
        let m = Metrics::default();
        m.record_queue_wait("a", 10.0);
        assert!(m.drain_events().is_empty());
        m.set_tracing(true);
        for at in 0..(MAX_EVENTS + 5) {
            m.record_job_done(&format!("j{at}"), 2000.0);
        }
        let events = m.drain_events();
        assert_eq!(events.len(), MAX_EVENTS);
        assert_eq!(events[0].job_id, "j5");
        assert!(events[0].done);
        assert_eq!(events[0].seconds, 2.0);
        assert!(m.drain_events().is_empty());
        assert_eq!(m.snapshot().job_total.count(), (MAX_EVENTS + 5) as u64);
    }

    #[test]
    fn the_json_and_the_exposition_carry_the_counts() {
        let m = Metrics::default();
        m.record_request(Some(Endpoint::Fetch), 200, false, 0.003);
        m.record_wait(WaitOutcome::NoRunner, 12.0);
        m.record_pairing(PairingEvent::Started);
        let store = StoreCounts {
            ok: true,
            jobs: Some([3, 1, 0, 5, 0, 0, 2]),
            runners: Some(RunnerCounts {
                paired: 2,
                online: 1,
                revoked: 1,
            }),
            pairings_pending: Some(4),
        };
        let json = render_json(&m.snapshot(), &store, 1000.0);
        let doc = crate::json::parse(&json).expect("the snapshot is JSON");
        let root = doc.root();
        let jobs = doc.get(root, "jobs").expect("jobs");
        assert_eq!(doc.to_json(doc.get(jobs, "ok").expect("ok")), "5");
        let waits = doc.get(root, "waits").expect("waits");
        let outcomes = doc.get(waits, "outcomes").expect("outcomes");
        assert_eq!(
            doc.to_json(doc.get(outcomes, "noRunner").expect("noRunner")),
            "1"
        );
        let pairings = doc.get(root, "pairings").expect("pairings");
        assert_eq!(
            doc.to_json(doc.get(pairings, "pending").expect("pending")),
            "4"
        );
        assert_eq!(
            doc.to_json(doc.get(pairings, "started").expect("started")),
            "1"
        );

        let text = render_prometheus(&m.snapshot(), &store);
        assert!(text.contains("byollm_jobs{state=\"ok\"} 5\n"));
        assert!(text.contains("byollm_runners{state=\"online\"} 1\n"));
        assert!(text.contains(
            "byollm_request_duration_seconds_bucket{endpoint=\"fetch\",le=\"0.005\"} 1\n"
        ));
        assert!(text.contains("byollm_request_duration_seconds_count{endpoint=\"fetch\"} 1\n"));
        assert!(text.contains("byollm_waits_total{outcome=\"no_runner\"} 1\n"));
        assert!(text.contains("byollm_store_up 1\n"));

        let down = render_prometheus(&m.snapshot(), &StoreCounts::default());
        assert!(!down.contains("byollm_jobs{"));
        assert!(down.contains("byollm_store_up 0\n"));
        assert!(down.contains("byollm_requests_total{endpoint=\"fetch\",status=\"200\"} 1\n"));
    }
}
