//! Failed requests by kind, per window and per row: what the network did to them (reset,
//! timeout, refused) or anything else (a server error, a bad answer). report.csv carries them in
//! [`crate::results::csv::FAILURE_COLUMNS`], report.md in its results table.

use serde::{Deserialize, Serialize};

/// Why one request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The connection was reset or closed under the request (mid-body or mid-response).
    Reset,
    /// No answer in time (`--request-timeout`, or the stall limit).
    Timeout,
    /// The connection was refused (nothing listening).
    Refused,
    /// Everything else: the server answered with an error, or the answer made no sense.
    Other,
}

/// Failed requests counted by [`FailureKind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureCounts {
    pub reset: u64,
    pub timeout: u64,
    pub refused: u64,
    pub other: u64,
}

impl FailureCounts {
    pub fn add(&mut self, kind: FailureKind) {
        match kind {
            FailureKind::Reset => self.reset += 1,
            FailureKind::Timeout => self.timeout += 1,
            FailureKind::Refused => self.refused += 1,
            FailureKind::Other => self.other += 1,
        }
    }

    pub fn merge(&mut self, other: &FailureCounts) {
        self.reset += other.reset;
        self.timeout += other.timeout;
        self.refused += other.refused;
        self.other += other.other;
    }

    /// In [`crate::results::csv::FAILURE_COLUMNS`]' order.
    pub fn as_array(&self) -> [u64; 4] {
        [self.reset, self.timeout, self.refused, self.other]
    }

    pub fn set(&mut self, index: usize, value: u64) {
        match index {
            0 => self.reset = value,
            1 => self.timeout = value,
            2 => self.refused = value,
            _ => self.other = value,
        }
    }
}
