//! Job kinds and their payloads (protocol.md §9).

use serde::{Deserialize, Serialize};

/// A job kind. The wire spelling is the dotted name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobKind {
    #[serde(rename = "llm.generate")]
    Generate,
    #[serde(rename = "llm.chat")]
    Chat,
}

impl JobKind {
    /// Every kind, in the reference's order.
    pub const ALL: &'static [JobKind] = &[JobKind::Generate, JobKind::Chat];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Generate => "llm.generate",
            JobKind::Chat => "llm.chat",
        }
    }

    /// Exact parse of the wire spelling.
    pub fn parse(text: &str) -> Option<JobKind> {
        match text {
            "llm.generate" => Some(JobKind::Generate),
            "llm.chat" => Some(JobKind::Chat),
            _ => None,
        }
    }
}
