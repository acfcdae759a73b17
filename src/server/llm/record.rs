//! The generative twin's ground truth (`perfbench serve --record-requests FILE`): one JSON line
//! per finished request with the instants the scheduler saw. Instants are CLOCK_MONOTONIC
//! nanoseconds, the clock Rust's `Instant` and Python's `time.monotonic_ns()` and
//! `time.perf_counter_ns()` read on Linux, so a client on the same machine can subtract its own
//! readings from them.

use serde::Serialize;

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write into; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One request, as the scheduler saw it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RequestRecord {
    /// `x-request-id` when the client sent one, else the response's own id.
    pub id: String,
    /// The model that served it (several may share one file).
    pub model: String,
    pub arrival_ns: u64,
    /// First admitted into the running batch (`None`: it never was).
    pub admitted_ns: Option<u64>,
    pub first_chunk_ns: Option<u64>,
    /// When the front end read the first chunk to write it out (`None`: it had not by the
    /// finish). The client's time to first token is measured against this one: it leaves out
    /// the hand-over from the scheduler's thread to the connection's.
    pub first_read_ns: Option<u64>,
    /// When each generated chunk left the model (one token per chunk).
    pub chunk_ns: Vec<u64>,
    pub finish_ns: u64,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// The first this many of `completion_tokens` were reasoning (a reasoning model's only:
    /// `chunk_ns[reasoning_tokens]` is its first answer token).
    #[serde(skip_serializing_if = "is_zero")]
    pub reasoning_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    pub preemptions: u32,
    /// `stop`, `length`, or `abort` (the client went away).
    pub finish_reason: &'static str,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
