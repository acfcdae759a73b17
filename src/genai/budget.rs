//! How many requests and sessions a level may still start, and until when: shared by every
//! session of the runner's loops.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

/// How many requests (and sessions) may still start, and until when.
pub struct RequestBudget {
    left: AtomicUsize,
    until: Option<Instant>,
    /// Sessions that may still start (`--conversation-num`); a started one sends all its turns
    /// within the request budget.
    sessions_left: AtomicUsize,
    /// Set by the over-saturation stop: the requests in flight are abandoned too.
    stopped: AtomicBool,
}

impl RequestBudget {
    pub fn new(requests: Option<usize>, until: Option<Instant>) -> RequestBudget {
        let left = AtomicUsize::new(requests.unwrap_or(usize::MAX));
        RequestBudget { left, until, sessions_left: AtomicUsize::new(usize::MAX), stopped: AtomicBool::new(false) }
    }
    pub fn with_sessions(self, sessions: Option<usize>) -> RequestBudget {
        RequestBudget { sessions_left: AtomicUsize::new(sessions.unwrap_or(usize::MAX)), ..self }
    }
    pub fn start_session(&self) -> bool {
        self.sessions_left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
    }
    pub fn take(&self) -> bool {
        if self.until.is_some_and(|u| Instant::now() >= u) {
            return false;
        }
        self.left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
    }
    /// No request may start, those in flight are abandoned (the over-saturation stop's enforce).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.left.store(0, Ordering::Release);
    }
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
    pub fn exhausted(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
            || self.sessions_left.load(Ordering::Acquire) == 0
            || self.until.is_some_and(|u| Instant::now() >= u)
    }
}
