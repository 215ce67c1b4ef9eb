//! Request sources: where a request came from, as the host names it (a
//! socket address, a trusted proxy's first hop), kept only as a keyed hash,
//! and what each source may cost the site.
//!
//! `pair start` is the one endpoint anyone may call unsigned, so what it
//! leaves behind is bounded per source (the store's share, see
//! `SOURCE_SHARE` in `store/people.rs`), and lookups that find nothing
//! (a poll of an unknown device code, an approval of an unknown user code)
//! are bounded per source here: a source past its budget is refused
//! `rate-limited` before any store read.

use std::sync::Mutex;

use blake2::digest::consts::U16;
use blake2::{Blake2b, Digest};
use hashlink::LruCache;

use crate::b64;

/// What a refused source is told to wait, in seconds (`retryAfter`).
pub(crate) const RETRY_AFTER_SECONDS: u32 = 30;

/// Lookups that find nothing one source may make per [`FAILURE_WINDOW_MS`].
pub(crate) const FAILURE_BUDGET: u32 = 32;

/// The window a source's failure budget is counted over.
pub(crate) const FAILURE_WINDOW_MS: f64 = 60_000.0;

/// Sources whose failures are remembered, least recently failing forgotten
/// first (about 100 bytes each).
pub(crate) const REMEMBERED_SOURCES: usize = 4096;

/// What a request is counted as when the host names no source: all such
/// requests are one source.
pub(crate) const UNNAMED: &str = "";

/// The keyed hash of sources, one key per site (derived from its keys, so
/// every process serving the site agrees and the stored hash is no address).
pub(crate) struct Sources {
    key: [u8; 32],
    failures: Mutex<LruCache<String, Window>>,
}

/// One source's failures in its current window.
#[derive(Clone, Copy)]
struct Window {
    started: f64,
    failures: u32,
}

impl Sources {
    pub(crate) fn new(key: [u8; 32]) -> Sources {
        Sources {
            key,
            failures: Mutex::new(LruCache::new(REMEMBERED_SOURCES)),
        }
    }

    /// The source as kept: 32 hex digits of its keyed BLAKE2b-128.
    pub(crate) fn hash(&self, source: &str) -> String {
        let mut hasher = Blake2b::<U16>::new();
        hasher.update(self.key);
        hasher.update(source.as_bytes());
        b64::hex_lower(&hasher.finalize())
    }

    /// Whether `source` (a hash) has spent its failure budget at `now`.
    pub(crate) fn spent(&self, source: &str, now: f64) -> bool {
        let Ok(mut failures) = self.failures.lock() else {
            return false;
        };
        failures
            .get(source)
            .is_some_and(|w| now - w.started < FAILURE_WINDOW_MS && w.failures >= FAILURE_BUDGET)
    }

    /// Count one lookup of `source` (a hash) that found nothing.
    pub(crate) fn failed(&self, source: &str, now: f64) {
        let Ok(mut failures) = self.failures.lock() else {
            return;
        };
        match failures.get_mut(source) {
            Some(w) if now - w.started < FAILURE_WINDOW_MS => {
                w.failures = w.failures.saturating_add(1)
            }
            Some(w) => {
                *w = Window {
                    started: now,
                    failures: 1,
                }
            }
            None => {
                failures.insert(
                    source.to_owned(),
                    Window {
                        started: now,
                        failures: 1,
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_keyed_and_hide_the_source() {
        let a = Sources::new([1; 32]);
        let b = Sources::new([2; 32]);
        let h = a.hash("203.0.113.7");
        assert_eq!(h.len(), 32);
        assert_eq!(h, a.hash("203.0.113.7"));
        assert_ne!(h, b.hash("203.0.113.7"));
        assert_ne!(h, a.hash("203.0.113.8"));
        assert!(!h.contains("203"));
    }

    #[test]
    fn a_source_past_its_failure_budget_is_spent_until_its_window_ends() {
        let sources = Sources::new([0; 32]);
        for _ in 0..FAILURE_BUDGET {
            assert!(!sources.spent("a", 0.0));
            sources.failed("a", 0.0);
        }
        assert!(sources.spent("a", 1.0));
        assert!(!sources.spent("b", 1.0), "another source keeps its budget");
        assert!(!sources.spent("a", FAILURE_WINDOW_MS));
        sources.failed("a", FAILURE_WINDOW_MS);
        assert!(!sources.spent("a", FAILURE_WINDOW_MS + 1.0));
    }

    #[test]
    fn remembered_sources_are_bounded() {
        let sources = Sources::new([0; 32]);
        for i in 0..REMEMBERED_SOURCES * 2 {
            sources.failed(&i.to_string(), 0.0);
        }
        assert_eq!(
            sources.failures.lock().map(|f| f.len()).unwrap_or(0),
            REMEMBERED_SOURCES
        );
    }
}
