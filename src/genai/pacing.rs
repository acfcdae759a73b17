//! An open loop's schedule, shared by its pacer thread and the client's event handlers:
//! whichever first sees the next request due launches it.
//!
//! A thread's sleep keeps time while the runtime is idle (tokio's timer ticks in whole
//! milliseconds). But the client runs on one core: a request the thread hands over while the
//! runtime's worker reads a step's burst of events waits behind that burst, in the runtime's
//! queue and for the core itself. So each event handler also looks at the schedule once per read
//! (an atomic load against the instant the read was stamped with): one that finds a request due
//! launches it from the worker, where tokio puts a task spawned there in its LIFO slot (polled
//! as soon as the current task yields) instead of at the back of a queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// No request left to launch.
const NONE_LEFT: u64 = u64::MAX;

/// Launches one request meant to leave at the given instant; `false`: the load is over.
pub type Launch = Box<dyn Fn(Instant) -> bool + Send + Sync>;

pub struct Pacing {
    origin: Instant,
    /// The next request's offset from `origin` in ns, or [`NONE_LEFT`].
    next_ns: AtomicU64,
    /// The offsets after it; held while launching, so each request is launched once.
    rest: Mutex<Box<dyn Iterator<Item = Duration> + Send>>,
    launch: Launch,
}

impl Pacing {
    /// A schedule of offsets from `origin`, in order.
    pub fn new(
        origin: Instant,
        mut offsets: impl Iterator<Item = Duration> + Send + 'static,
        launch: Launch,
    ) -> Pacing {
        let first = offsets.next().map_or(NONE_LEFT, nanos);
        Pacing { origin, next_ns: AtomicU64::new(first), rest: Mutex::new(Box::new(offsets)), launch }
    }

    /// The next request's intended instant, `None` once none is left.
    pub fn next_due(&self) -> Option<Instant> {
        match self.next_ns.load(Ordering::Acquire) {
            NONE_LEFT => None,
            ns => Some(self.origin + Duration::from_nanos(ns)),
        }
    }

    /// From an event handler: launches whatever is due at `now`, unless someone else is
    /// launching (then that one launches it). Costs one atomic load when nothing is due.
    pub fn launch_due_from_handler(&self, now: Instant) {
        if self.next_due().is_some_and(|due| due <= now) {
            if let Some(mut rest) = self.rest.try_lock() {
                self.launch_due(now, &mut **rest);
            }
        }
    }

    /// From the pacer thread: launches whatever is due at `now` (waiting for a handler that is
    /// launching); the next request's instant, `None` once the schedule or the load is over.
    pub fn launch_due_from_pacer(&self, now: Instant) -> Option<Instant> {
        let mut rest = self.rest.lock();
        self.launch_due(now, &mut **rest);
        self.next_due()
    }

    fn launch_due(&self, now: Instant, rest: &mut (dyn Iterator<Item = Duration> + Send)) {
        while let Some(due) = self.next_due().filter(|due| *due <= now) {
            let next = if (self.launch)(due) { rest.next().map_or(NONE_LEFT, nanos) } else { NONE_LEFT };
            self.next_ns.store(next, Ordering::Release);
        }
    }
}

/// Asks the kernel to end this thread's sleeps on time: by default it may let one run 50 µs
/// long, to batch wake-ups.
pub fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

fn nanos(offset: Duration) -> u64 {
    offset.as_nanos().min(NONE_LEFT as u128 - 1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn pacing(offsets_ms: &[u64], stop_after: usize) -> (Pacing, Arc<Mutex<Vec<Instant>>>, Instant) {
        let origin = Instant::now();
        let launched = Arc::new(Mutex::new(Vec::new()));
        let seen = launched.clone();
        let launch: Launch = Box::new(move |due| {
            let mut seen = seen.lock();
            if seen.len() == stop_after {
                return false;
            }
            seen.push(due);
            true
        });
        let offsets: Vec<Duration> = offsets_ms.iter().map(|&ms| Duration::from_millis(ms)).collect();
        (Pacing::new(origin, offsets.into_iter(), launch), launched, origin)
    }

    #[test]
    fn each_request_is_launched_once_at_its_intended_instant_by_whoever_sees_it_due() {
        let (pacing, launched, origin) = pacing(&[0, 10, 20, 30], usize::MAX);
        let ms = |n| origin + Duration::from_millis(n);
        assert_eq!(pacing.launch_due_from_pacer(ms(0)), Some(ms(10)));
        pacing.launch_due_from_handler(ms(5));
        assert_eq!(launched.lock().len(), 1, "nothing due at 5 ms");
        // A handler stamped at 21 ms finds two due: both leave, each with its own instant.
        pacing.launch_due_from_handler(ms(21));
        assert_eq!(*launched.lock(), vec![ms(0), ms(10), ms(20)]);
        assert_eq!(pacing.launch_due_from_pacer(ms(21)), Some(ms(30)), "the pacer sleeps to the next");
        assert_eq!(pacing.launch_due_from_pacer(ms(30)), None, "the schedule is over");
        assert_eq!(*launched.lock(), vec![ms(0), ms(10), ms(20), ms(30)]);
    }

    #[test]
    fn a_handler_does_not_wait_while_another_launches() {
        let (pacing, launched, origin) = pacing(&[0], usize::MAX);
        let held = pacing.rest.lock();
        pacing.launch_due_from_handler(origin);
        assert!(launched.lock().is_empty(), "the holder launches it");
        drop(held);
        assert_eq!(pacing.launch_due_from_pacer(origin), None);
        assert_eq!(launched.lock().len(), 1);
    }

    #[test]
    fn the_load_ending_ends_the_schedule() {
        let (pacing, launched, origin) = pacing(&[0, 1, 2, 3], 2);
        assert_eq!(pacing.launch_due_from_pacer(origin + Duration::from_secs(1)), None);
        assert_eq!(launched.lock().len(), 2);
        assert_eq!(pacing.next_due(), None);
    }
}
