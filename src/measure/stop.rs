//! When a point ends, as one state machine fed each window as it closes
//! ([`StopRule::observe`]): one window of `--request-count`; perf_analyzer's rule (the last
//! [`STABLE_WINDOWS`] windows agree within `-s`, at most `-r` windows); or the interval rule
//! (`ci=`: a settling window dropped, then windows until the 95% intervals of throughput, p50
//! and p99 are tight enough, p99 rests on enough requests and the queue is not growing, or the
//! time is up). It keeps the windows the row is derived from, and hands back the recorders of
//! those it no longer needs, so a long point allocates none as it goes.

use std::time::Duration;

use super::recorder::WindowRecorder;
use super::stability::{is_stable, WindowFigures, STABLE_WINDOWS};
use super::window::{overloaded, Batches, Intervals, Window};
use super::{MeasureSettings, Stop};
use crate::results::min_requests_for;

/// The interval rule looks at a point only after this many windows (after the settling one):
/// batch means need about ten batches for Student's t to stand on, and checking earlier would
/// stop on a lucky streak.
pub const MIN_INTERVAL_WINDOWS: usize = 10;

/// What the rule says after a window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Verdict {
    /// The point's rule is met.
    pub stable: bool,
    /// Interval rule: the widest interval so far, ± percent (None until checked).
    pub widest_pct: Option<f64>,
    /// The window only settled the load and is not part of the row.
    pub settling: bool,
    /// The point ends here: its rule is met, its windows or its time are used up.
    pub done: bool,
}

enum State {
    /// `--request-count` or perf_analyzer's rule: the windows the row may merge, and the
    /// figures the stability check compares.
    Windows { windows: Vec<Window>, figures: Vec<WindowFigures>, one_window: bool },
    /// The interval rule: every window after the settling one, in batches.
    /// (Boxed: a point holds one rule, and the batches are large.)
    Intervals { half_width_pct: f64, max: Duration, batches: Box<Batches> },
}

/// One point's stop rule and the windows it has kept.
pub struct StopRule {
    state: State,
    /// Windows observed so far.
    trials: usize,
    /// Most windows before the point ends anyway.
    max_trials: usize,
    stability_pct: f64,
    batch: u64,
    /// A shard keeps every window, so the merge can take the ones every shard measured together.
    keep_windows: bool,
    stable: bool,
}

impl StopRule {
    pub fn new(settings: &MeasureSettings) -> StopRule {
        let (state, max_trials) = match (settings.request_count, settings.stop) {
            (None, Stop::Intervals { half_width_pct, max }) => {
                (State::Intervals { half_width_pct, max, batches: Box::default() }, usize::MAX)
            }
            (count, _) => (
                State::Windows { windows: Vec::new(), figures: Vec::new(), one_window: count.is_some() },
                if count.is_some() { 1 } else { settings.max_trials.max(1) },
            ),
        };
        StopRule {
            state,
            trials: 0,
            max_trials,
            stability_pct: settings.stability_pct,
            batch: settings.batch,
            keep_windows: settings.keep_windows,
            stable: false,
        }
    }

    /// The longest the point may take (the interval rule's `max`).
    pub fn max_time(&self) -> Option<Duration> {
        match self.state {
            State::Intervals { max, .. } => Some(max),
            State::Windows { .. } => None,
        }
    }

    /// Under the interval rule no window outlasts a share of the time allowed, so even a slow
    /// model gets the windows its intervals need before the deadline.
    pub fn window_cap(&self) -> Option<Duration> {
        self.max_time().map(|max| max / (MIN_INTERVAL_WINDOWS as u32 + 2))
    }

    /// Recorders the point needs at most at once, to make before its first window: perf_analyzer's
    /// rule holds [`STABLE_WINDOWS`] windows plus the one being taken, so its memory is flat from
    /// its first window on. (The interval rule reuses what [`StopRule::observe`] hands back.)
    pub fn recorders_needed(&self) -> usize {
        match self.state {
            State::Windows { .. } => self.max_trials.min(STABLE_WINDOWS + 1),
            State::Intervals { .. } => 0,
        }
    }

    /// Takes the window that just closed (with its figures) at `elapsed` since the point began;
    /// recorders no longer needed go to `spares`.
    pub fn observe(
        &mut self,
        window: Window,
        figures: WindowFigures,
        elapsed: Duration,
        spares: &mut Vec<WindowRecorder>,
    ) -> Verdict {
        let mut verdict = Verdict::default();
        let first = self.trials == 0;
        self.trials += 1;
        match &mut self.state {
            State::Windows { windows, figures: seen, one_window } => {
                windows.push(window);
                // The row merges the last STABLE_WINDOWS: a long point holds no more than those
                // (each keeps a latency histogram of about 188 KB), and the next window reuses
                // the one it lets go.
                if windows.len() > STABLE_WINDOWS && !self.keep_windows {
                    spares.push(windows.remove(0).client);
                }
                seen.push(figures);
                self.stable = *one_window || is_stable(seen, self.stability_pct);
            }
            State::Intervals { .. } if first => {
                verdict.settling = true;
                spares.push(window.client);
            }
            State::Intervals { half_width_pct, batches, .. } => {
                let ok: u64 = batches.iter().map(|w| w.client.ok).sum::<u64>() + window.client.ok;
                spares.extend(batches.push(window));
                if batches.windows() >= MIN_INTERVAL_WINDOWS && ok >= min_requests_for(99.0) {
                    let widest = Intervals::of(batches.iter(), self.batch).widest_pct();
                    verdict.widest_pct = Some(widest);
                    self.stable = widest <= *half_width_pct && !overloaded(batches.iter());
                }
            }
        }
        let out_of_time = match &self.state {
            State::Intervals { max, batches, .. } => elapsed >= *max && batches.windows() > 0,
            State::Windows { .. } => false,
        };
        verdict.stable = self.stable;
        verdict.done = self.stable || out_of_time || self.trials >= self.max_trials;
        verdict
    }

    /// Windows observed.
    pub fn trials(&self) -> usize {
        self.trials
    }

    /// Whether the rule was met.
    pub fn stable(&self) -> bool {
        self.stable
    }

    /// Every window kept, and how many of the last ones the row merges.
    pub fn into_windows(self) -> (Vec<Window>, usize) {
        match self.state {
            State::Windows { windows, .. } => {
                let merged = windows.len().min(STABLE_WINDOWS);
                (windows, merged)
            }
            State::Intervals { batches, .. } => {
                let all = (*batches).into_windows();
                let merged = all.len();
                (all, merged)
            }
        }
    }
}
