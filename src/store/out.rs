//! Records leave the store as JSON text that `JSON.parse` turns into plain
//! values in one native call; the JS side then builds the record object with
//! the reference's key order. A record is an array (no key names on the
//! wire between us and ourselves):
//!
//! ```text
//! [id, kind, envelope, sizeClass, audience, purpose, owner, audienceAllow,
//!  dependsOn, state, lease, completedByLeaseId, createdAt, claimableAt, ttlMs,
//!  deadlineAt, refusedBy, attempts, outcome, provenance, updatedAt]
//! ```
//!
//! * `envelope`: `[ciphertext, recipientKeyId, senderKeyId, direction,
//!   deadlineAt]` for a sealed envelope, or the caller's own JSON value
//!   (an array of theirs wrapped as `[array]`);
//!   `[]` for a large sealed envelope, or one not sealed yet, when the
//!   store leaves those out ([`Store::set_omit_envelopes`]);
//! * `purpose`: `0` for `undefined`, else `[value]`;
//! * `audienceAllow`: `0` for `undefined`, else the array;
//! * `lease`: `null` or `[id, runnerId, expiresAt]`;
//! * `outcome`, `provenance`: the JSON the caller gave, or `null`.

use crate::json::{self, write_json_str};

use super::{Ciphertext, Envelope, Job, JobRef, LeaseRef, Store};

/// A job record's keys in the reference's order: the order of a row here
/// and of the record object every store builds (the shell reads it through
/// `protocolConstants().jobKeys`).
pub(crate) const JOB_KEYS: [&str; 21] = [
    "id",
    "kind",
    "envelope",
    "sizeClass",
    "audience",
    "purpose",
    "owner",
    "audienceAllow",
    "dependsOn",
    "state",
    "lease",
    "completedByLeaseId",
    "createdAt",
    "claimableAt",
    "ttlMs",
    "deadlineAt",
    "refusedBy",
    "attempts",
    "outcome",
    "provenance",
    "updatedAt",
];

/// Sealed ciphertexts from this size up stay out of records when the store
/// omits envelopes (a 1 KB prompt's is ≈ 1.5 KB; a 1M-character one 1.8 MB).
pub(crate) const OMIT_ENVELOPE_BYTES: usize = 16 * 1024;

/// A stored ciphertext: bytes (written as base64url) or the text as given.
#[derive(Debug, Clone, Copy)]
pub(super) enum CiphertextRef<'a> {
    Bytes(&'a [u8]),
    Text(&'a str),
}

/// The parts of a sealed envelope besides its ciphertext.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SealedParts<'a> {
    pub recipient_key_id: &'a str,
    pub sender_key_id: &'a str,
    pub direction: &'a str,
    pub deadline_at: f64,
}

/// The four parts after a sealed envelope's ciphertext in a record's row,
/// and the row's closing bracket.
fn push_sealed_rest(out: &mut String, parts: SealedParts<'_>) {
    out.push(',');
    write_json_str(parts.recipient_key_id, out);
    out.push(',');
    write_json_str(parts.sender_key_id, out);
    out.push(',');
    write_json_str(parts.direction, out);
    out.push(',');
    push_num(out, parts.deadline_at);
    out.push(']');
}

/// Append a record's number so that `JSON.parse` reads back the same double:
/// as `JSON.stringify` writes it, except for the values it cannot carry.
/// Infinities (a caller's `ttlMs: Infinity`) go as an out-of-range literal
/// that reads back as ±Infinity, and -0 as `-0`. NaN has no JSON spelling and
/// comes back as `null` (only a NaN clock can put one here).
pub(crate) fn push_num(out: &mut String, value: f64) {
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "1e999" } else { "-1e999" });
    } else if value == 0.0 && value.is_sign_negative() {
        out.push_str("-0");
    } else {
        json::push_json_number(out, value);
    }
}

fn push_opt_num(out: &mut String, value: Option<f64>) {
    match value {
        Some(v) => push_num(out, v),
        None => out.push_str("null"),
    }
}

fn push_str_list<S: AsRef<str>>(out: &mut String, items: &[S]) {
    out.push('[');
    for (at, item) in items.iter().enumerate() {
        if at > 0 {
            out.push(',');
        }
        write_json_str(item.as_ref(), out);
    }
    out.push(']');
}

impl Store {
    /// Append one job record (see the module docs for the layout).
    pub(crate) fn push_job_json(&self, r: JobRef, out: &mut String) {
        let Some(job) = self.live(r) else {
            out.push_str("null");
            return;
        };
        let name = |sym| self.syms.name(sym);
        out.push('[');
        write_json_str(&job.id, out);
        out.push(',');
        write_json_str(name(job.kind), out);
        out.push(',');
        if self.omits_envelope(job) {
            out.push_str("[]");
        } else {
            self.push_envelope(job, out);
        }
        out.push(',');
        write_json_str(name(job.size_class), out);
        out.push(',');
        write_json_str(name(job.audience), out);
        out.push(',');
        match &job.purpose {
            Some(json) => {
                out.push('[');
                out.push_str(json);
                out.push(']');
            }
            None => out.push('0'),
        }
        out.push(',');
        write_json_str(name(job.owner), out);
        out.push(',');
        match &job.audience_allow {
            Some(list) => push_str_list(out, list),
            None => out.push('0'),
        }
        out.push(',');
        push_str_list(out, &job.depends_on);
        out.push_str(",\"");
        out.push_str(job.state.as_str());
        out.push_str("\",");
        match &job.lease {
            Some(lease) => {
                out.push('[');
                write_json_str(&lease.id, out);
                out.push(',');
                write_json_str(name(lease.runner), out);
                out.push(',');
                push_num(out, lease.expires_at);
                out.push(']');
            }
            None => out.push_str("null"),
        }
        out.push(',');
        match &job.completed_by_lease_id {
            Some(id) => write_json_str(id, out),
            None => out.push_str("null"),
        }
        out.push(',');
        push_num(out, job.created_at);
        out.push(',');
        push_opt_num(out, job.claimable_at);
        out.push(',');
        push_num(out, job.ttl_ms);
        out.push(',');
        push_opt_num(out, job.deadline_at);
        out.push_str(",[");
        for (at, runner) in job.refused_by.iter().enumerate() {
            if at > 0 {
                out.push(',');
            }
            write_json_str(name(*runner), out);
        }
        out.push_str("],");
        push_num(out, job.attempts);
        out.push(',');
        out.push_str(job.outcome.as_deref().unwrap_or("null"));
        out.push(',');
        out.push_str(job.provenance.as_deref().unwrap_or("null"));
        out.push(',');
        push_num(out, job.updated_at);
        out.push(']');
    }

    /// What `ByollmApp.result` answers for a job, as JSON for `JSON.parse`:
    /// `{"jobId","state"}`, then `outcome` and `provenance` when the job
    /// holds them (the keys are left out for `null`, as the app does).
    pub(crate) fn push_result_json(&self, r: JobRef, out: &mut String) {
        let Some(job) = self.live(r) else {
            out.push_str("null");
            return;
        };
        out.push_str("{\"jobId\":");
        write_json_str(&job.id, out);
        out.push_str(",\"state\":");
        write_json_str(job.state.as_str(), out);
        for (key, value) in [("outcome", &job.outcome), ("provenance", &job.provenance)] {
            if let Some(json) = value.as_deref().filter(|json| *json != "null") {
                out.push_str(",\"");
                out.push_str(key);
                out.push_str("\":");
                out.push_str(json);
            }
        }
        out.push('}');
    }

    /// A sealed envelope's parts, its ciphertext text appended to
    /// `ciphertext` (bare, no JSON quotes): how a store that leaves large
    /// envelopes out of its records hands one over when it is read. `None`
    /// for an unknown job or a caller's own (unsealed) envelope.
    pub(crate) fn sealed_envelope_parts(
        &self,
        r: JobRef,
        ciphertext: &mut String,
    ) -> Option<SealedParts<'_>> {
        let (text, parts) = self.sealed_view(&self.live(r)?.envelope)?;
        match text {
            CiphertextRef::Bytes(bytes) => crate::b64::encode_url_append(bytes, ciphertext),
            CiphertextRef::Text(text) => ciphertext.push_str(text),
        }
        Some(parts)
    }

    /// A caller's own envelope of another shape, as the JSON text it arrived as.
    pub(crate) fn raw_envelope(&self, r: JobRef) -> Option<&str> {
        match &self.live(r)?.envelope {
            Envelope::Raw(json) => Some(json),
            _ => None,
        }
    }

    /// A sealed envelope as stored, made now or deferred: its ciphertext
    /// and its other parts. `None` for a caller's own envelope, and for a
    /// deferred seal that failed (never for a key `DeferredSeal::new`
    /// accepts).
    pub(super) fn sealed_view<'a>(
        &'a self,
        envelope: &'a Envelope,
    ) -> Option<(CiphertextRef<'a>, SealedParts<'a>)> {
        match envelope {
            Envelope::Sealed {
                ciphertext,
                recipient,
                sender,
                direction,
                deadline_at,
            } => Some((
                match ciphertext {
                    Ciphertext::Bytes(bytes) => CiphertextRef::Bytes(bytes),
                    Ciphertext::Text(text) => CiphertextRef::Text(text),
                },
                SealedParts {
                    recipient_key_id: self.syms.name(*recipient),
                    sender_key_id: self.syms.name(*sender),
                    direction: self.syms.name(*direction),
                    deadline_at: *deadline_at,
                },
            )),
            Envelope::Deferred(deferred) => {
                let sealed = deferred.sealed().ok()?;
                Some((
                    CiphertextRef::Text(&sealed.ciphertext),
                    SealedParts {
                        recipient_key_id: &sealed.recipient_key_id,
                        sender_key_id: &sealed.sender_key_id,
                        direction: &sealed.direction,
                        deadline_at: sealed.deadline_at,
                    },
                ))
            }
            Envelope::Raw(_) => None,
        }
    }

    /// Whether records leave this job's envelope out: large sealed ones,
    /// and seals not made yet (a record rarely has its envelope read, and
    /// the seal is made then, not on the way out). A small sealed envelope
    /// costs less inline than a second call for it.
    fn omits_envelope(&self, job: &Job) -> bool {
        self.omit_envelopes
            && match &job.envelope {
                Envelope::Deferred(deferred) if !deferred.is_sealed() => true,
                // The ciphertext's size in bytes, from its base64url text.
                envelope => envelope
                    .ciphertext_chars()
                    .is_some_and(|chars| chars.saturating_mul(3) / 4 >= OMIT_ENVELOPE_BYTES),
            }
    }

    fn push_envelope(&self, job: &Job, out: &mut String) {
        match (&job.envelope, self.sealed_view(&job.envelope)) {
            (_, Some((ciphertext, parts))) => {
                out.push('[');
                match ciphertext {
                    // base64url needs no escaping.
                    CiphertextRef::Bytes(bytes) => {
                        out.push('"');
                        crate::b64::encode_url_append(bytes, out);
                        out.push('"');
                    }
                    CiphertextRef::Text(text) => write_json_str(text, out),
                }
                push_sealed_rest(out, parts);
            }
            // A caller's own array is wrapped in one more, so that it cannot
            // pass for the five sealed parts.
            (Envelope::Raw(json), None) if json.trim_start().starts_with('[') => {
                out.push('[');
                out.push_str(json);
                out.push(']');
            }
            (Envelope::Raw(json), None) => out.push_str(json),
            // A deferred seal that failed: null, as an envelope that is not
            // there.
            (_, None) => out.push_str("null"),
        }
    }

    /// One record as JSON text.
    pub(crate) fn job_json(&self, r: JobRef) -> String {
        let mut out = String::with_capacity(self.json_size_hint(r));
        self.push_job_json(r, &mut out);
        out
    }

    /// A JSON array of records.
    pub(crate) fn jobs_json(&self, refs: &[JobRef]) -> String {
        let hint: usize = refs.iter().map(|&r| self.json_size_hint(r)).sum();
        let mut out = String::with_capacity(hint + 2);
        self.push_jobs_json(refs, &mut out);
        out
    }

    /// Append a JSON array of records.
    pub(crate) fn push_jobs_json(&self, refs: &[JobRef], out: &mut String) {
        out.push('[');
        for (at, &r) in refs.iter().enumerate() {
            if at > 0 {
                out.push(',');
            }
            self.push_job_json(r, out);
        }
        out.push(']');
    }

    fn json_size_hint(&self, r: JobRef) -> usize {
        let Some(job) = self.live(r) else { return 4 };
        let envelope = match (&job.envelope, self.omits_envelope(job)) {
            (_, true) => 2,
            (Envelope::Raw(json), _) => json.len(),
            (envelope, _) => envelope.ciphertext_chars().unwrap_or(0) + 120,
        };
        let opaque = job.outcome.as_deref().map_or(0, str::len)
            + job.provenance.as_deref().map_or(0, str::len);
        envelope + opaque + 400
    }

    /// `[{jobId, leaseId}]` as JSON.
    pub(crate) fn lease_refs_json(refs: &[LeaseRef]) -> String {
        let items: Vec<String> = refs
            .iter()
            .map(|r| {
                let mut item = json::Obj::new();
                item.str("jobId", &r.job_id).str("leaseId", &r.lease_id);
                item.end()
            })
            .collect();
        format!("[{}]", items.join(","))
    }
}

/// Split a JSON array of records (as the store writes them) into JSON arrays of
/// at most about `max_bytes` each, cut only between top-level items.
///
/// A sweep after an outage, or `allJobs` on a big store, can describe more
/// records than one JavaScript string may hold (V8 caps a string near 512 M
/// characters, and Node-API refuses anything over 2 GiB with `InvalidArg`).
/// The caller hands such an answer over as several strings. An item larger than
/// `max_bytes` on its own gets a chunk to itself.
pub(crate) fn split_json_array(json: &str, max_bytes: usize) -> Vec<String> {
    let bytes = json.as_bytes();
    let inner = match (bytes.first(), bytes.last()) {
        (Some(b'['), Some(b']')) if bytes.len() >= 2 => &json[1..json.len() - 1],
        _ => return vec![json.to_string()],
    };
    let mut chunks = Vec::new();
    let mut chunk = String::from("[");
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut item_start = 0usize;
    let push_item = |item: &str, chunk: &mut String, chunks: &mut Vec<String>| {
        if chunk.len() > 1 && chunk.len() + 1 + item.len() + 1 > max_bytes {
            chunk.push(']');
            chunks.push(std::mem::replace(chunk, String::from("[")));
        }
        if chunk.len() > 1 {
            chunk.push(',');
        }
        chunk.push_str(item);
    };
    for (at, &b) in inner.as_bytes().iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                push_item(&inner[item_start..at], &mut chunk, &mut chunks);
                item_start = at + 1;
            }
            _ => {}
        }
    }
    if item_start < inner.len() {
        push_item(&inner[item_start..], &mut chunk, &mut chunks);
    }
    chunk.push(']');
    chunks.push(chunk);
    chunks
}

#[cfg(test)]
mod split_tests {
    use super::split_json_array;

    fn joined(chunks: &[String]) -> Vec<serde_json::Value> {
        chunks
            .iter()
            .flat_map(|c| match serde_json::from_str::<serde_json::Value>(c) {
                Ok(serde_json::Value::Array(items)) => items,
                other => panic!("chunk is not a JSON array: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn chunks_are_arrays_whose_items_add_up_to_the_original() {
        let items: Vec<String> = (0..200)
            .map(|i| format!(r#"["job-{i}","a,b]\"[{{",{{"k":[1,2,{i}]}},null]"#))
            .collect();
        let json = format!("[{}]", items.join(","));
        let whole: Vec<serde_json::Value> = match serde_json::from_str(&json) {
            Ok(serde_json::Value::Array(items)) => items,
            other => panic!("{other:?}"),
        };
        for max in [1, 50, 100, 1_000, 10_000, json.len(), json.len() * 2] {
            let chunks = split_json_array(&json, max);
            assert_eq!(joined(&chunks), whole, "max {max}");
            if max >= json.len() {
                assert_eq!(chunks, vec![json.clone()]);
            } else if max >= 100 {
                assert!(chunks.len() > 1, "max {max}");
                assert!(chunks.iter().all(|c| c.len() <= max), "max {max}");
            }
        }
    }

    #[test]
    fn empty_and_odd_inputs() {
        assert_eq!(split_json_array("[]", 10), vec!["[]".to_string()]);
        assert_eq!(split_json_array("[1]", 1), vec!["[1]".to_string()]);
        assert_eq!(split_json_array("nope", 1), vec!["nope".to_string()]);
    }
}
