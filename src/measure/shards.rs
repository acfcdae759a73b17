//! One point's windows from many shards, merged into the windows one process would have seen:
//! histograms added (so percentiles are exact, never averaged), counts and client stage sums
//! added, server counters from shard 0 alone (only it reads them). The row is then derived from
//! these windows by [`super::derive_point`], as for any run.
//!
//! Shards end a point by their own rule, so they may measure different numbers of windows: each
//! shard's windows beyond the fewest any shard has are folded into its last one, so every
//! request counts. A merged window lasts Σok / Σ(ok_k / d_k): its throughput is the sum of the
//! shards' rates, which is the summed count over the common window when the windows line up.

use std::time::Duration;

use super::Window;

/// Why shards' windows do not belong together.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShardMergeError {
    #[error("a shard has no window at this point")]
    NoWindows,
    #[error(
        "the shards' windows do not overlap in time (shard {late} started {gap_ms} ms after shard {early} had ended)"
    )]
    Apart { early: usize, late: usize, gap_ms: u64 },
}

/// Merges one point's windows of every shard (shard 0 first) into common windows.
pub fn merge_shards(shards: Vec<Vec<Window>>) -> Result<Vec<Window>, ShardMergeError> {
    let fewest = shards.iter().map(Vec::len).min().unwrap_or(0);
    if fewest == 0 {
        return Err(ShardMergeError::NoWindows);
    }
    check_overlap(&shards)?;
    let folded: Vec<Vec<Window>> = shards
        .into_iter()
        .map(|mut windows| {
            let tail: Vec<Window> = windows.split_off(fewest);
            let last = windows.last_mut().expect("fewest > 0");
            for w in &tail {
                last.absorb(w);
            }
            windows
        })
        .collect();
    let merged = (0..fewest)
        .map(|i| {
            let mut parts = folded.iter().map(|windows| &windows[i]);
            let first = parts.next().expect("at least one shard");
            let mut window = first.clone();
            let mut rate_sum = rate(first);
            for part in parts {
                window.client.merge(&part.client);
                window.start_ns = window.start_ns.min(part.start_ns);
                window.end_ns = window.end_ns.max(part.end_ns);
                rate_sum += rate(part);
            }
            if rate_sum > 0.0 {
                window.duration = Duration::from_secs_f64(window.client.ok as f64 / rate_sum);
            }
            window
        })
        .collect();
    Ok(merged)
}

/// Successful requests per second of one shard's window.
fn rate(w: &Window) -> f64 {
    let secs = w.duration.as_secs_f64();
    if secs > 0.0 {
        w.client.ok as f64 / secs
    } else {
        0.0
    }
}

/// The shards' spans of the point ([first start, last end]) must overlap.
fn check_overlap(shards: &[Vec<Window>]) -> Result<(), ShardMergeError> {
    let spans: Vec<(u64, u64)> =
        shards.iter().map(|w| (w.first().map_or(0, |w| w.start_ns), w.last().map_or(0, |w| w.end_ns))).collect();
    let (late, &(start, _)) = spans.iter().enumerate().max_by_key(|(_, s)| s.0).expect("shards");
    let (early, &(_, end)) = spans.iter().enumerate().min_by_key(|(_, s)| s.1).expect("shards");
    if start > end {
        return Err(ShardMergeError::Apart { early, late, gap_ms: (start - end) / 1_000_000 });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::RequestTiming;
    use crate::measure::derive_point;
    use crate::measure::recorder::WindowRecorder;
    use crate::results::LoadPoint;

    fn window(latencies_us: impl IntoIterator<Item = u64>, start_ns: u64, secs: f64) -> Window {
        let mut client = WindowRecorder::default();
        let timing = RequestTiming {
            send: Duration::from_micros(10),
            recv: Duration::from_micros(5),
            total: Duration::from_micros(100),
        };
        for us in latencies_us {
            client.record_ok(Duration::from_micros(us), timing);
        }
        let end_ns = start_ns + (secs * 1e9) as u64;
        Window {
            client,
            duration: Duration::from_secs_f64(secs),
            server: None,
            composing: Vec::new(),
            start_ns,
            end_ns,
        }
    }

    /// Three shards with different latencies: a fast one, a middling one, a slow one.
    fn latencies(shard: u64, window: u64) -> Vec<u64> {
        (0..400 + 100 * shard).map(|i| 100 + shard * shard * 900 + (i * 7 + window * 13) % (50 + 500 * shard)).collect()
    }

    #[test]
    fn merged_percentiles_are_those_of_one_histogram_of_all_requests() {
        let shards: Vec<Vec<Window>> =
            (0..3).map(|k| (0..3).map(|w| window(latencies(k, w), w * 1_000_000_000, 1.0)).collect()).collect();
        let all: Vec<Window> = vec![window((0..3).flat_map(|k| (0..3).flat_map(move |w| latencies(k, w))), 0, 3.0)];
        let point = LoadPoint::Concurrency(8);
        let merged = merge_shards(shards.clone()).unwrap();
        let row = derive_point(&merged, 1, point, true, None).row;
        let one = derive_point(&all, 1, point, true, None).row;
        assert_eq!(row.requests, one.requests);
        assert_eq!((row.p50_us, row.p90_us, row.p99_us), (one.p50_us, one.p90_us, one.p99_us));
        assert!((row.avg_us - one.avg_us).abs() < 1e-9);
        // Three shards of 1 s windows at 1,500 requests per second in all.
        assert!((row.throughput - one.throughput).abs() < 1e-6, "{} vs {}", row.throughput, one.throughput);
        // Averaging each shard's percentiles, as a hand merge would, is wrong.
        let per_shard: Vec<f64> = shards.iter().map(|w| derive_point(w, 1, point, true, None).row.p99_us).collect();
        let averaged = per_shard.iter().sum::<f64>() / 3.0;
        assert!((averaged - row.p99_us).abs() > 100.0, "averaged p99 {averaged} vs merged {}", row.p99_us);
        let p50s: Vec<f64> = shards.iter().map(|w| derive_point(w, 1, point, true, None).row.p50_us).collect();
        assert!((p50s.iter().sum::<f64>() / 3.0 - row.p50_us).abs() > 100.0);
    }

    #[test]
    fn a_shard_with_more_windows_folds_them_so_every_request_counts() {
        let a = vec![window(0..100, 0, 1.0), window(0..100, 1_000_000_000, 1.0)];
        let b = vec![window(0..50, 0, 1.0), window(0..50, 1_000_000_000, 1.0), window(0..50, 2_000_000_000, 1.0)];
        let merged = merge_shards(vec![a, b]).unwrap();
        assert_eq!(merged.len(), 2);
        assert_eq!(merged.iter().map(|w| w.client.ok).sum::<u64>(), 350);
        // 100 + 50 requests per second.
        assert!((merged[0].throughput(1) - 150.0).abs() < 1e-6);
        assert!((merged[1].throughput(1) - 150.0).abs() < 1e-6, "{}", merged[1].throughput(1));
    }

    #[test]
    fn shards_that_never_ran_together_are_refused() {
        let a = vec![window(0..10, 0, 1.0)];
        let b = vec![window(0..10, 5_000_000_000, 1.0)];
        let e = merge_shards(vec![a, b]).unwrap_err();
        assert_eq!(e, ShardMergeError::Apart { early: 0, late: 1, gap_ms: 4000 });
        assert_eq!(merge_shards(vec![vec![], vec![window(0..1, 0, 1.0)]]).unwrap_err(), ShardMergeError::NoWindows);
    }
}
