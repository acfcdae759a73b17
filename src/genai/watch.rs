//! The over-saturation stop of an open-loop level: every [`WINDOW`] it counts the requests in
//! flight and the mean latency of those answered since, feeds `load::saturation`'s detector,
//! and once the level is over-saturated marks it (and, enforcing, stops its sending).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::metrics::Record;
use crate::load::saturation::{Detector, OverSaturation, Verdict, WindowPoint};

/// One point of the slope test per this much time (guidellm counts one per second too).
pub const WINDOW: Duration = Duration::from_secs(1);

/// The verdict on a watched level.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Saturation {
    pub saturated: bool,
    /// Seconds into the level when it was marked.
    pub at_s: Option<f64>,
    /// Windows judged.
    pub windows: usize,
    /// The last verdict's slopes (at the mark, for a marked level).
    pub last: Verdict,
}

/// A runner's watch: its settings (none: it watches nothing) and its verdict on the last level.
#[derive(Default)]
pub struct Watcher {
    pub settings: Option<OverSaturation>,
    verdict: Mutex<Option<Saturation>>,
}

impl Watcher {
    pub fn new(settings: Option<OverSaturation>) -> Watcher {
        Watcher { settings, verdict: Mutex::new(None) }
    }

    /// Starts watching a level, when asked to (see [`start`]).
    pub fn start(
        &self,
        launched: Arc<AtomicUsize>,
        out: Arc<Mutex<Vec<Record>>>,
        stop: Box<dyn Fn() + Send + Sync>,
    ) -> Option<Watch> {
        self.settings.map(|settings| start(settings, launched, out, stop))
    }

    /// Ends the level's watch and keeps its verdict.
    pub async fn finish(&self, watch: Option<Watch>) {
        if let Some(watch) = watch {
            *self.verdict.lock() = Some(watch.finish().await);
        }
    }

    /// The verdict on the last level watched.
    pub fn verdict(&self) -> Option<Saturation> {
        *self.verdict.lock()
    }
}

/// A running watch; [`Watch::finish`] ends it and gives its verdict.
pub struct Watch {
    done: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Saturation>,
}

/// A request's latency as the stop sees it: to its first event (TTFT when streamed), from when
/// it was meant to leave, so a client-side wait counts too.
fn latency_s(record: &Record) -> Option<f64> {
    if !record.ok() {
        return None;
    }
    let from = record.intended.unwrap_or(record.start);
    let to = record.chunks.first().map_or(record.end, |c| c.at);
    Some(to.saturating_duration_since(from).as_secs_f64())
}

/// Watches the level from now: `launched` counts the requests sent (from its value now), `out`
/// receives each answered one; `stop` ends the sending, called once when an enforcing watch marks.
pub fn start(
    settings: OverSaturation,
    launched: Arc<AtomicUsize>,
    out: Arc<Mutex<Vec<Record>>>,
    stop: Box<dyn Fn() + Send + Sync>,
) -> Watch {
    let (done, mut done_rx) = tokio::sync::oneshot::channel();
    let began = Instant::now();
    let launched_before = launched.load(Ordering::Acquire);
    let mut seen = out.lock().len();
    let answered_before = seen;
    let task = tokio::spawn(async move {
        let mut detector = Detector::new(settings);
        let mut verdict = Saturation::default();
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + WINDOW, WINDOW);
        loop {
            tokio::select! {
                _ = &mut done_rx => break,
                _ = ticks.tick() => {}
            }
            let (answered, latencies) = {
                let out = out.lock();
                let latencies: Vec<f64> = out[seen..].iter().filter_map(latency_s).collect();
                seen = out.len();
                (out.len() - answered_before, latencies)
            };
            let sent = launched.load(Ordering::Acquire) - launched_before;
            let point = WindowPoint {
                at_s: began.elapsed().as_secs_f64(),
                in_flight: sent.saturating_sub(answered) as f64,
                latency_s: (!latencies.is_empty()).then(|| latencies.iter().sum::<f64>() / latencies.len() as f64),
            };
            let judged = detector.observe(point);
            verdict.windows += 1;
            verdict.last = judged;
            if judged.saturated {
                verdict.saturated = true;
                verdict.at_s = Some(point.at_s);
                if settings.enforce {
                    stop();
                }
                break;
            }
        }
        verdict
    });
    Watch { done, task }
}

impl Watch {
    pub async fn finish(self) -> Saturation {
        let _ = self.done.send(());
        self.task.await.unwrap_or_default()
    }
}
