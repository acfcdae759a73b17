//! When an open-loop level is over-saturated: guidellm 0.8.1's `over_saturation` test, fed one
//! point per window (the requests in flight, the latency of the requests answered in it). A
//! level is over-saturated when, over the windows kept, both keep rising: each series' linear
//! regression slope is positive with a margin of error (at 95% confidence, relative to the slope)
//! under 2, after a minimum time, with most latencies over a floor. Pure: no clock, no I/O.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// guidellm's thresholds that are not settings here.
pub const MOE_THRESHOLD: f64 = 2.0;
pub const CONFIDENCE: f64 = 0.95;
/// Windows needed before a slope is estimated.
pub const MIN_WINDOWS: usize = 5;
/// Windows older than this leave the regression.
pub const MAX_WINDOW_S: f64 = 120.0;
/// The regression keeps at most this share of the windows seen (the latest ones).
pub const MAX_WINDOW_RATIO: f64 = 0.75;

/// `--over-saturation [min_seconds=S,min_latency=S,mode=enforce|monitor]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverSaturation {
    /// No verdict before this many seconds of the level (guidellm's `min_seconds`, 30).
    pub min_seconds: f64,
    /// Latencies at or under this many seconds are not a violation; when more than half the
    /// windows' latencies are under it, the level is not saturated (guidellm's `minimum_ttft`, 2.5).
    pub min_latency_s: f64,
    /// `true`: the level stops once marked (guidellm's `enforce`); `false`: only marked (`monitor`).
    pub enforce: bool,
}

impl Default for OverSaturation {
    fn default() -> Self {
        OverSaturation { min_seconds: 30.0, min_latency_s: 2.5, enforce: true }
    }
}

impl FromStr for OverSaturation {
    type Err = String;
    fn from_str(text: &str) -> Result<OverSaturation, String> {
        let mut out = OverSaturation::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad =
                || format!("--over-saturation '{part}': expected min_seconds=S, min_latency=S or mode=enforce|monitor");
            let (key, value) = part.split_once('=').ok_or_else(bad)?;
            let seconds = || value.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(bad);
            match key.trim() {
                "min_seconds" => out.min_seconds = seconds()?,
                "min_latency" | "minimum_ttft" => out.min_latency_s = seconds()?,
                "mode" => {
                    out.enforce = match value.trim() {
                        "enforce" => true,
                        "monitor" => false,
                        _ => return Err(bad()),
                    }
                }
                _ => return Err(bad()),
            }
        }
        Ok(out)
    }
}

impl fmt::Display for OverSaturation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.enforce { "enforce" } else { "monitor" };
        write!(f, "min_seconds={},min_latency={},mode={mode}", self.min_seconds, self.min_latency_s)
    }
}

impl Serialize for OverSaturation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for OverSaturation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OverSaturation, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// One window of a level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowPoint {
    /// The window's end, seconds since the level began.
    pub at_s: f64,
    /// Requests in flight (sent, not yet answered) at the window's end.
    pub in_flight: f64,
    /// Mean latency (TTFT when streamed) of the requests answered in the window, in seconds;
    /// `None` when none was.
    pub latency_s: Option<f64>,
}

/// A slope and how sure it is: the 95% margin of error relative to the slope.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slope {
    pub slope: f64,
    pub relative_moe: f64,
}

impl Slope {
    /// Whether the series rises for sure: a positive slope, its margin of error under the threshold.
    pub fn rising(&self) -> bool {
        self.slope > 0.0 && self.relative_moe < MOE_THRESHOLD
    }
}

/// The least-squares slope of `points` and its margin of error (guidellm's `check_slope`, with
/// `n` the number of windows). `None` under three points.
pub fn slope(points: &[(f64, f64)]) -> Option<Slope> {
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let eps = 1e-12;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum::<f64>().max(eps);
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let syy: f64 = points.iter().map(|(_, y)| (y - my).powi(2)).sum();
    let slope = sxy / sxx;
    let residual = (syy - sxy * sxy / sxx).max(0.0);
    let dof = n - 2.0;
    let standard_error = (residual / dof / sxx).sqrt();
    let t = t_quantile(1.0 - (1.0 - CONFIDENCE) / 2.0, dof);
    Some(Slope { slope, relative_moe: t * standard_error / slope.max(eps) })
}

/// Student's t quantile, approximately (Abramowitz & Stegun 26.2.23 for the normal quantile,
/// then two Cornish-Fisher terms), as guidellm computes it.
pub fn t_quantile(p: f64, dof: f64) -> f64 {
    let (c, d) = ([2.515517, 0.802853, 0.010328], [1.432788, 0.189269, 0.001308]);
    let tail = if p < 0.5 { p } else { 1.0 - p };
    let t = (-2.0 * tail.ln()).sqrt();
    let z = t - ((c[2] * t + c[1]) * t + c[0]) / (((d[2] * t + d[1]) * t + d[0]) * t + 1.0);
    let z = if p < 0.5 { -z } else { z };
    let g1 = (z.powi(3) + z) / 4.0;
    let g2 = (5.0 * z.powi(4) + 16.0 * z.powi(3) + 3.0 * z.powi(2)) / 96.0;
    z + g1 / dof + g2 / (dof * dof)
}

/// The verdict on a level so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Verdict {
    pub saturated: bool,
    pub in_flight: Option<Slope>,
    pub latency: Option<Slope>,
}

/// Windows of one level, fed in order; says after each whether the level is over-saturated.
#[derive(Clone, Debug)]
pub struct Detector {
    settings: OverSaturation,
    kept: VecDeque<WindowPoint>,
    seen: usize,
}

impl Detector {
    pub fn new(settings: OverSaturation) -> Detector {
        Detector { settings, kept: VecDeque::new(), seen: 0 }
    }

    /// Takes the next window and judges the windows kept.
    pub fn observe(&mut self, window: WindowPoint) -> Verdict {
        self.seen += 1;
        self.kept.push_back(window);
        let most = ((self.seen as f64 * MAX_WINDOW_RATIO) as usize).max(1);
        while self.kept.len() > most || self.kept.front().is_some_and(|w| window.at_s - w.at_s > MAX_WINDOW_S) {
            self.kept.pop_front();
        }
        self.judge(window.at_s)
    }

    fn judge(&self, now_s: f64) -> Verdict {
        let in_flight: Vec<(f64, f64)> = self.kept.iter().map(|w| (w.at_s, w.in_flight)).collect();
        let latency: Vec<(f64, f64)> = self.kept.iter().filter_map(|w| Some((w.at_s, w.latency_s?))).collect();
        let mut verdict = Verdict { saturated: false, in_flight: slope(&in_flight), latency: slope(&latency) };
        let violations = latency.iter().filter(|(_, l)| *l > self.settings.min_latency_s).count();
        if now_s < self.settings.min_seconds || latency.len() > 2 * violations || in_flight.len() < MIN_WINDOWS {
            return verdict;
        }
        let rising = verdict.in_flight.is_some_and(|s| s.rising());
        verdict.saturated =
            if latency.len() < MIN_WINDOWS { rising } else { rising && verdict.latency.is_some_and(|s| s.rising()) };
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> OverSaturation {
        OverSaturation { min_seconds: 3.0, min_latency_s: 0.2, enforce: true }
    }

    fn run(windows: impl Iterator<Item = WindowPoint>, settings: OverSaturation) -> Option<f64> {
        let mut detector = Detector::new(settings);
        windows.map(|w| (w.at_s, detector.observe(w))).find(|(_, v)| v.saturated).map(|(at, _)| at)
    }

    #[test]
    fn a_queue_that_keeps_growing_is_marked_after_the_minimum_time() {
        // 10 requests/s arrive, 4/s are served: the queue and the wait grow, with some noise.
        let growing = (1..=20).map(|s| {
            let noise = if s % 2 == 0 { 0.3 } else { -0.3 };
            WindowPoint {
                at_s: s as f64,
                in_flight: 6.0 * s as f64 + noise,
                latency_s: Some(0.25 * s as f64 + noise / 10.0),
            }
        });
        let at = run(growing, quick()).expect("marked");
        assert!((3.0..=8.0).contains(&at), "marked at {at}");
    }

    #[test]
    fn a_steady_level_is_not_marked() {
        // Under capacity: the queue and the latency wobble around a level.
        let steady = (1..=60).map(|s| {
            let wobble = [0.0, 1.0, -1.0, 2.0, -2.0][s % 5];
            WindowPoint { at_s: s as f64, in_flight: 4.0 + wobble, latency_s: Some(0.5 + wobble / 20.0) }
        });
        assert_eq!(run(steady, quick()), None);
        // A queue that grows but whose latency stays under the floor is not saturated either.
        let fast = (1..=30).map(|s| WindowPoint {
            at_s: s as f64,
            in_flight: s as f64,
            latency_s: Some(0.01 * s as f64 / 30.0),
        });
        assert_eq!(run(fast, quick()), None);
        // Nor before the minimum time.
        let early =
            (1..=10).map(|s| WindowPoint { at_s: s as f64, in_flight: 6.0 * s as f64, latency_s: Some(s as f64) });
        assert_eq!(run(early, OverSaturation { min_seconds: 30.0, ..quick() }), None);
    }

    #[test]
    fn slope_and_quantile_match_the_textbook() {
        let line: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 2.0 * x as f64 + 1.0)).collect();
        let s = slope(&line).unwrap();
        assert!((s.slope - 2.0).abs() < 1e-9 && s.relative_moe < 1e-6 && s.rising());
        let falling: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, -(x as f64))).collect();
        assert!(!slope(&falling).unwrap().rising());
        assert!(slope(&line[..2]).is_none());
        // t(0.975, 10) = 2.228; t(0.975, 30) = 2.042 (tables).
        assert!((t_quantile(0.975, 10.0) - 2.228).abs() < 0.01, "{}", t_quantile(0.975, 10.0));
        assert!((t_quantile(0.975, 30.0) - 2.042).abs() < 0.01);
    }

    #[test]
    fn the_setting_reads_and_prints_guidellms_keys() {
        assert_eq!("".parse::<OverSaturation>().unwrap(), OverSaturation::default());
        let s: OverSaturation = "min_seconds=5, min_latency=0.5, mode=monitor".parse().unwrap();
        assert_eq!(s, OverSaturation { min_seconds: 5.0, min_latency_s: 0.5, enforce: false });
        assert_eq!(s.to_string().parse::<OverSaturation>().unwrap(), s);
        for bad in ["min_seconds", "min_seconds=-1", "mode=stop", "window=3"] {
            assert!(bad.parse::<OverSaturation>().unwrap_err().contains("--over-saturation"), "{bad}");
        }
    }
}
