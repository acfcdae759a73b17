//! One point's windows from many shards, merged into the windows one process would have seen:
//! histograms added (so percentiles are exact, never averaged), counts and client stage sums
//! added, server counters from shard 0 alone (only it reads them). The row is then derived from
//! these windows by [`super::derive_point`], as for any run.
//!
//! Only the time every shard was measuring counts: a shard's windows outside the span all
//! shards' windows share (the others had stopped their load, or not yet started it) are left
//! out, and the rest are paired by time, not by index, since shards end a point by their own
//! rule and may measure different numbers of windows. The shard with the fewest windows in
//! the common span sets the merged windows; every other window joins the one its midpoint falls
//! in. A merged window lasts Σok / Σ(ok_k / d_k): its throughput is the sum of the shards'
//! rates, which is the summed count over the common window.

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
    #[error("shard {shard} has no window mostly within the time every shard measured")]
    Outside { shard: usize },
}

/// One point's windows, merged over the time all shards measured.
#[derive(Debug)]
pub struct MergedPoint {
    pub windows: Vec<Window>,
    /// Shards' windows outside the common span, left out.
    pub left_out: usize,
}

/// Merges one point's windows of every shard (shard 0 first, each in time order).
pub fn merge_shards(shards: Vec<Vec<Window>>) -> Result<MergedPoint, ShardMergeError> {
    if shards.iter().any(Vec::is_empty) {
        return Err(ShardMergeError::NoWindows);
    }
    let (from, to) = common_span(&shards)?;
    let total: usize = shards.iter().map(Vec::len).sum();
    let kept: Vec<Vec<Window>> = shards
        .into_iter()
        .map(|windows| windows.into_iter().filter(|w| (from..=to).contains(&midpoint(w))).collect())
        .collect();
    if let Some(shard) = kept.iter().position(Vec::is_empty) {
        return Err(ShardMergeError::Outside { shard });
    }
    let left_out = total - kept.iter().map(Vec::len).sum::<usize>();
    let windows = pair_by_time(kept).into_iter().map(merge_cell).collect();
    Ok(MergedPoint { windows, left_out })
}

fn midpoint(w: &Window) -> u64 {
    w.start_ns + w.end_ns.saturating_sub(w.start_ns) / 2
}

/// The span all shards' windows share; an error when they never overlapped.
fn common_span(shards: &[Vec<Window>]) -> Result<(u64, u64), ShardMergeError> {
    let spans: Vec<(u64, u64)> =
        shards.iter().map(|w| (w.first().map_or(0, |w| w.start_ns), w.last().map_or(0, |w| w.end_ns))).collect();
    let (late, &(start, _)) = spans.iter().enumerate().max_by_key(|(_, s)| s.0).expect("shards");
    let (early, &(_, end)) = spans.iter().enumerate().min_by_key(|(_, s)| s.1).expect("shards");
    if start > end {
        return Err(ShardMergeError::Apart { early, late, gap_ms: (start - end) / 1_000_000 });
    }
    Ok((start, end))
}

/// Groups the shards' windows into cells of time, each with every shard's windows in it
/// (`cells[i][k]`: shard k's part of cell i, its windows absorbed into one).
fn pair_by_time(shards: Vec<Vec<Window>>) -> Vec<Vec<Window>> {
    let coarsest = (0..shards.len()).min_by_key(|&k| shards[k].len()).expect("shards");
    let starts: Vec<u64> = shards[coarsest].iter().map(|w| w.start_ns).collect();
    let mut cells: Vec<Vec<Option<Window>>> = vec![vec![None; shards.len()]; starts.len()];
    for (k, windows) in shards.into_iter().enumerate() {
        for w in windows {
            // The coarsest shard's last window starting at or before the midpoint.
            let cell = starts.partition_point(|&s| s <= midpoint(&w)).saturating_sub(1);
            join(&mut cells[cell][k], w);
        }
    }
    // A cell some shard has no window in joins the one before (the first, the one after).
    let mut whole: Vec<Vec<Option<Window>>> = Vec::new();
    let mut open: Option<Vec<Option<Window>>> = None;
    for cell in cells {
        let mut cell = match open.take() {
            Some(mut earlier) => {
                for (into, part) in earlier.iter_mut().zip(cell) {
                    if let Some(part) = part {
                        join(into, part);
                    }
                }
                earlier
            }
            None => cell,
        };
        if cell.iter().all(Option::is_some) {
            whole.push(cell);
        } else if let Some(last) = whole.last_mut() {
            for (into, part) in last.iter_mut().zip(cell.iter_mut()) {
                if let Some(part) = part.take() {
                    join(into, part);
                }
            }
        } else {
            open = Some(cell);
        }
    }
    // Every shard has a window somewhere, so an open cell ends complete or joins the last.
    if let Some(cell) = open {
        whole.push(cell);
    }
    whole.into_iter().map(|cell| cell.into_iter().map(|w| w.expect("every shard in every cell")).collect()).collect()
}

fn join(into: &mut Option<Window>, w: Window) {
    match into {
        Some(earlier) => {
            earlier.absorb(&w);
            earlier.end_ns = earlier.end_ns.max(w.end_ns);
        }
        None => *into = Some(w),
    }
}

/// One cell's windows of every shard (shard 0 first, with the server's counters) as one.
fn merge_cell(parts: Vec<Window>) -> Window {
    let mut parts = parts.into_iter();
    let first = parts.next().expect("at least one shard");
    let mut rate_sum = rate(&first);
    let mut window = first;
    for part in parts {
        window.client.merge(&part.client);
        window.start_ns = window.start_ns.min(part.start_ns);
        window.end_ns = window.end_ns.max(part.end_ns);
        rate_sum += rate(&part);
    }
    if rate_sum > 0.0 {
        window.duration = Duration::from_secs_f64(window.client.ok as f64 / rate_sum);
    }
    window
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
        assert_eq!((merged.windows.len(), merged.left_out), (3, 0));
        let row = derive_point(&merged.windows, 1, point, true, None).row;
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

    const S: u64 = 1_000_000_000;

    #[test]
    fn windows_outside_the_time_every_shard_measured_are_left_out() {
        // Shard 1 went on for a window after shard 0 had stopped its load.
        let a = vec![window(0..100, 0, 1.0), window(0..100, S, 1.0)];
        let b = vec![window(0..50, 0, 1.0), window(0..50, S, 1.0), window(0..50, 2 * S, 1.0)];
        let merged = merge_shards(vec![a, b]).unwrap();
        assert_eq!((merged.windows.len(), merged.left_out), (2, 1));
        assert_eq!(merged.windows.iter().map(|w| w.client.ok).sum::<u64>(), 300);
        // 100 + 50 requests per second over the common window.
        for w in &merged.windows {
            assert!((w.throughput(1) - 150.0).abs() < 1e-6, "{}", w.throughput(1));
        }
        // Under the stable rule shards end on different windows: only the shared ones count.
        let a: Vec<Window> = (0..3).map(|i| window(0..100, i * S, 1.0)).collect();
        let b: Vec<Window> = (0..5).map(|i| window(0..40, i * S, 1.0)).collect();
        let merged = merge_shards(vec![a, b]).unwrap();
        assert_eq!((merged.windows.len(), merged.left_out), (3, 2));
        assert!(merged.windows.iter().all(|w| w.client.ok == 140 && w.end_ns <= 3 * S));
    }

    #[test]
    fn windows_of_different_lengths_are_paired_by_time_not_by_index() {
        // Count windows: shard 0 measured two 1 s windows, shard 1 four of 0.5 s over the same
        // time. By index, shard 1's first two (its first second) would pair with all of shard 0.
        let a = vec![window(0..100, 0, 1.0), window(1000..1100, S, 1.0)];
        let b: Vec<Window> =
            (0..4).map(|i| window((0..30).map(|v| v + if i < 2 { 0 } else { 1000 }), i * S / 2, 0.5)).collect();
        let merged = merge_shards(vec![a, b]).unwrap();
        assert_eq!((merged.windows.len(), merged.left_out), (2, 0));
        for (w, base) in merged.windows.iter().zip([0, 1000]) {
            assert_eq!(w.client.ok, 160);
            // Each second's latencies are its own: 0..100 then 1000..1100.
            let lowest = w.client.latency_us.min();
            assert!(lowest >= base && lowest < base + 100, "{lowest}");
            // 100 + 60 requests per second.
            assert!((w.throughput(1) - 160.0).abs() < 1e-6, "{}", w.throughput(1));
        }
        // The shard with the fewest windows sets the cells, whichever it is.
        let a = vec![window(0..100, 0, 1.0), window(0..100, S, 1.0)];
        let b = vec![window(0..50, 0, 0.6), window(0..50, 600_000_000, 1.4)];
        let merged = merge_shards(vec![b, a]).unwrap();
        assert_eq!(merged.windows.len(), 2);
        assert_eq!(merged.windows.iter().map(|w| w.client.ok).collect::<Vec<_>>(), [150, 150]);
    }

    #[test]
    fn a_cell_a_shard_has_no_window_in_joins_the_one_before() {
        // Shard 1 has the fewer windows: its second one takes both of shard 0's last two.
        let a = vec![window(0..10, 0, 1.0), window(0..10, S, 1.0), window(0..10, 2 * S, 1.0)];
        let b = vec![window(0..20, 0, 1.2), window(0..20, 1_200_000_000, 1.8)];
        let merged = merge_shards(vec![a, b]).unwrap();
        assert_eq!(merged.windows.len(), 2);
        assert_eq!(merged.windows.iter().map(|w| w.client.ok).sum::<u64>(), 70);
        // Three shards where the middle one's windows leave a gap in the coarsest one's cells.
        let a = vec![window(0..10, 0, 1.0), window(0..10, S, 1.0), window(0..10, 2 * S, 1.0)];
        let b = vec![window(0..10, 0, 1.0), window(0..10, S, 2.0)];
        let c = vec![window(0..10, 0, 2.0), window(0..10, 2 * S, 1.0)];
        let merged = merge_shards(vec![a, b, c]).unwrap();
        assert_eq!(merged.windows.iter().map(|w| w.client.ok).sum::<u64>(), 70);
        assert!(merged.windows.len() <= 2);
    }

    #[test]
    fn shards_that_never_ran_together_are_refused() {
        let a = vec![window(0..10, 0, 1.0)];
        let b = vec![window(0..10, 5_000_000_000, 1.0)];
        let e = merge_shards(vec![a, b]).unwrap_err();
        assert_eq!(e, ShardMergeError::Apart { early: 0, late: 1, gap_ms: 4000 });
        assert_eq!(merge_shards(vec![vec![], vec![window(0..1, 0, 1.0)]]).unwrap_err(), ShardMergeError::NoWindows);
        // Overlapping by a sliver: shard 0's only window lies mostly outside the shared time.
        let a = vec![window(0..10, 0, 10.0)];
        let b = vec![window(0..10, 9 * S, 1.0), window(0..10, 10 * S, 1.0)];
        assert_eq!(merge_shards(vec![a, b]).unwrap_err(), ShardMergeError::Outside { shard: 0 });
    }
}
