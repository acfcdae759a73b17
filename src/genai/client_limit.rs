//! Whether a generative run was limited by its own client, and why. A client that is late to
//! read an event stamps it late, so a busy client inflates TTFT and ITL without the server being
//! slower. Three signs, each checked against its own limit:
//! - CPU: the process used most of the cores it may run on;
//! - send lag: open-loop requests left later than scheduled;
//! - event-handling lag: an event waited for the client after its bytes were read (the
//!   handler's own time, per event), or a ready task waited for a worker thread (a probe that
//!   sleeps 1 ms at a time records how late it wakes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Notify;

use crate::results::client_limit::{CPU_LIMIT_PCT, SEND_LAG_P99_LIMIT_US};

/// Event-handling lag p99 above which the client is limited: the unary send-lag limit, since
/// both measure how late the client acted on something that was ready.
pub const EVENT_LAG_P99_LIMIT_US: f64 = SEND_LAG_P99_LIMIT_US;
const PROBE_PERIOD: Duration = Duration::from_millis(1);

/// Records how late the client's runtime wakes a task that is due, until [`LagProbe::finish`].
pub struct LagProbe {
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<Histogram<u64>>,
}

impl LagProbe {
    /// Starts the probe on the current runtime.
    pub fn start() -> LagProbe {
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut lag = Histogram::<u64>::new(3).expect("3 significant digits");
            loop {
                let due = Instant::now() + PROBE_PERIOD;
                tokio::select! {
                    _ = stopped.notified() => return lag,
                    _ = tokio::time::sleep_until(due.into()) => {}
                }
                // tokio's timer ticks in whole milliseconds: up to one tick late is its own.
                let late = Instant::now().saturating_duration_since(due).saturating_sub(PROBE_PERIOD);
                lag.record(late.as_micros() as u64).expect("auto-resizing histogram");
            }
        });
        LagProbe { stop, task }
    }

    /// Stops the probe; returns the lateness it saw, in µs.
    pub async fn finish(self) -> Histogram<u64> {
        self.stop.notify_one();
        self.task.await.unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits"))
    }
}

/// What the client measured of itself during a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClientLoad {
    /// Share of the cores this process may use that it used.
    pub cpu_fraction: f64,
    pub send_lag_p99_us: f64,
    /// Per event, from its bytes being read to the end of its handling, p99 over requests of
    /// each request's worst event.
    pub handling_lag_p99_us: f64,
    /// How late a due task was woken (the probe), p99.
    pub wake_lag_p99_us: f64,
}

impl ClientLoad {
    /// Why the run is client-limited; empty when it is not.
    pub fn reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if self.cpu_fraction * 100.0 >= CPU_LIMIT_PCT {
            reasons.push(format!("client CPU {:.0}% of its cores", self.cpu_fraction * 100.0));
        }
        if self.send_lag_p99_us > SEND_LAG_P99_LIMIT_US {
            reasons.push(format!("send lag p99 {:.0} µs (over {SEND_LAG_P99_LIMIT_US:.0} µs)", self.send_lag_p99_us));
        }
        let event_lag = self.handling_lag_p99_us.max(self.wake_lag_p99_us);
        if event_lag > EVENT_LAG_P99_LIMIT_US {
            reasons.push(format!(
                "event-handling lag p99 {event_lag:.0} µs (handler {:.0} µs, wake-up {:.0} µs; over {EVENT_LAG_P99_LIMIT_US:.0} µs)",
                self.handling_lag_p99_us, self.wake_lag_p99_us
            ));
        }
        reasons
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sign_flags_the_run_and_a_comfortable_client_is_not_flagged() {
        let ok =
            ClientLoad { cpu_fraction: 0.3, send_lag_p99_us: 200.0, handling_lag_p99_us: 40.0, wake_lag_p99_us: 300.0 };
        assert!(ok.reasons().is_empty());
        assert_eq!(ClientLoad { cpu_fraction: 0.95, ..ok }.reasons(), ["client CPU 95% of its cores"]);
        assert!(ClientLoad { send_lag_p99_us: 5000.0, ..ok }.reasons()[0].starts_with("send lag p99 5000 µs"));
        let slow_handler = ClientLoad { handling_lag_p99_us: 20_000.0, ..ok }.reasons();
        assert!(slow_handler[0].starts_with("event-handling lag p99 20000 µs (handler 20000 µs"), "{slow_handler:?}");
        let starved = ClientLoad { wake_lag_p99_us: 9000.0, ..ok }.reasons();
        assert!(starved[0].contains("wake-up 9000 µs"), "{starved:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_probe_sees_a_worker_thread_held_by_a_blocking_handler() {
        let probe = LagProbe::start();
        tokio::time::sleep(Duration::from_millis(5)).await;
        // The only worker is blocked for 30 ms: the probe, due every 1 ms, wakes that late.
        tokio::spawn(async { std::thread::sleep(Duration::from_millis(30)) }).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let lag = probe.finish().await;
        assert!(lag.len() >= 3, "the probe ran: {} samples", lag.len());
        assert!(lag.max() >= 20_000, "max lateness {} µs", lag.max());
    }
}
