//! `--start-at`: when each load point of a sharded run starts, from the clock alone, so shards
//! that cannot talk to each other (a Kubernetes Indexed Job has no MPI barrier) start every
//! point together, not only the first. Pure arithmetic; the sweep sleeps until the instants it
//! hands out.
//!
//! The rule, the same on every shard: the points a run visits, in order (points kept by
//! `run --resume` included, all sweeps and batch sizes in turn), take consecutive slots from
//! `--start-at` on. A slot is as long as the plan's bound on one point plus a margin
//! ([`SlotParts::new`]); the slot of each batch size's first point begins with a part as
//! long as its warm-up may take. Point k's load starts at its slot's start (after that part), so
//! point k starts at the same instant on every shard however long each shard's point k-1 took.
//! A shard still busy at that instant (its point overran the bound) starts late and says so;
//! its later points are back on the grid.

use std::time::Duration;

/// Most a shard may start a point after its slot before it says the point is misaligned.
pub const START_TOLERANCE: Duration = Duration::from_millis(100);

/// The margin added to a bound: stopping one load and starting the next, reading the server's
/// counters, and the last window's overrun of the interval rule's `max` (at most a twelfth).
pub fn margin(bound: Duration) -> Duration {
    Duration::from_secs(1) + bound / 10
}

/// The lengths that make up a slot of one sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotParts {
    /// Before the first point of a batch size: its warm-up (zero when the plan has none).
    pub warm_up: Duration,
    /// One point, from its start to the next slot.
    pub point: Duration,
}

/// How long a sweep's warm-up may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarmUpBound {
    /// The plan warms up not at all.
    None,
    /// The interval rule's settling, which gives up after a while.
    AtMost(Duration),
    /// A warm-up of N requests under the stable rule: it gets a part as long as a point's.
    Requests,
}

impl SlotParts {
    /// A sweep's slots: `--point-slot` when given, else the plan's bound on one point plus a
    /// [`margin`]; `None` when neither bounds a point.
    pub fn new(point_bound: Option<Duration>, warm_up: WarmUpBound, point_slot: Option<Duration>) -> Option<SlotParts> {
        let point = point_slot.or_else(|| point_bound.map(|bound| bound + margin(bound)))?;
        let warm_up = match warm_up {
            WarmUpBound::None => Duration::ZERO,
            WarmUpBound::AtMost(bound) => bound + margin(bound),
            WarmUpBound::Requests => point,
        };
        Some(SlotParts { warm_up, point })
    }
}

/// One point's place on the grid (ns since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// 0-based, over the whole run.
    pub index: usize,
    /// When a warm-up before this point starts: the warm-up part right before `start_ns`.
    pub warm_up_ns: u64,
    /// When the point's load starts, on every shard.
    pub start_ns: u64,
}

/// The run's slots, handed out in the order the sweeps visit their points.
#[derive(Debug)]
pub struct PointGrid {
    /// The next slot's beginning (ns since the epoch) and index.
    next: parking_lot::Mutex<(u64, usize)>,
}

impl PointGrid {
    /// The grid that starts at `--start-at` (ms since the epoch).
    pub fn new(start_at_ms: u64) -> PointGrid {
        PointGrid { next: parking_lot::Mutex::new((start_at_ms.saturating_mul(1_000_000), 0)) }
    }

    /// The next point's slot; `first_of_batch`: the point is the first a batch size visits, so
    /// its slot holds the warm-up part too.
    pub fn next(&self, parts: SlotParts, first_of_batch: bool) -> Slot {
        let mut next = self.next.lock();
        let (begin, index) = *next;
        let warm_up_ns = nanos(parts.warm_up);
        let start_ns = if first_of_batch { begin + warm_up_ns } else { begin };
        *next = (start_ns + nanos(parts.point), index + 1);
        Slot { index, warm_up_ns: start_ns.saturating_sub(warm_up_ns), start_ns }
    }
}

/// One sweep's slots on the run's grid.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSlots {
    pub grid: std::sync::Arc<PointGrid>,
    pub parts: SlotParts,
}

impl PartialEq for PointGrid {
    fn eq(&self, other: &Self) -> bool {
        *self.next.lock() == *other.next.lock()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How late a point started against its slot, when by more than [`START_TOLERANCE`].
pub fn late_by(start_ns: u64, started_ns: u64) -> Option<Duration> {
    let late = Duration::from_nanos(started_ns.saturating_sub(start_ns));
    (late > START_TOLERANCE).then_some(late)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn points_start_on_slots_from_the_start_instant_whatever_they_took() {
        let grid = PointGrid::new(1_000);
        let parts = SlotParts { warm_up: Duration::ZERO, point: Duration::from_secs(3) };
        let starts: Vec<u64> = (0..4).map(|k| grid.next(parts, k == 0).start_ns).collect();
        assert_eq!(starts, [S, 4 * S, 7 * S, 10 * S]);
    }

    #[test]
    fn the_first_point_of_each_batch_size_gets_the_warm_up_part() {
        let grid = PointGrid::new(0);
        let parts = SlotParts { warm_up: Duration::from_secs(2), point: Duration::from_secs(5) };
        // Batch 1: two points; batch 8: two points.
        let slots: Vec<Slot> = [true, false, true, false].iter().map(|&first| grid.next(parts, first)).collect();
        let starts: Vec<u64> = slots.iter().map(|s| s.start_ns / S).collect();
        assert_eq!(starts, [2, 7, 14, 19]);
        let warm_ups: Vec<u64> = slots.iter().map(|s| s.warm_up_ns / S).collect();
        assert_eq!(warm_ups, [0, 5, 12, 17], "a warm-up runs in the part right before its point");
        assert_eq!(slots.iter().map(|s| s.index).collect::<Vec<_>>(), [0, 1, 2, 3]);
    }

    #[test]
    fn sweeps_with_different_bounds_continue_one_grid() {
        let grid = PointGrid::new(0);
        let offline = SlotParts { warm_up: Duration::ZERO, point: Duration::from_secs(10) };
        let online = SlotParts { warm_up: Duration::ZERO, point: Duration::from_secs(4) };
        grid.next(offline, true);
        grid.next(offline, false);
        assert_eq!(grid.next(online, true).start_ns, 20 * S);
        assert_eq!(grid.next(online, false).start_ns, 24 * S);
    }

    #[test]
    fn every_shard_computes_the_same_slots() {
        let parts = SlotParts::new(Some(Duration::from_millis(900)), WarmUpBound::Requests, None).unwrap();
        let slots = |_shard: u64| {
            let grid = PointGrid::new(1_700_000_000_000);
            (0..5).map(|k| grid.next(parts, k % 2 == 0)).collect::<Vec<_>>()
        };
        assert_eq!(slots(0), slots(1));
    }

    #[test]
    fn slots_are_the_bounds_plus_a_margin_or_as_given() {
        let secs = |s: u64| Some(Duration::from_secs(s));
        let parts = SlotParts::new(secs(8), WarmUpBound::None, None).unwrap();
        assert_eq!(parts, SlotParts { warm_up: Duration::ZERO, point: Duration::from_millis(9_800) });
        let parts = SlotParts::new(secs(1), WarmUpBound::AtMost(Duration::from_secs(5)), None).unwrap();
        assert_eq!((parts.warm_up, parts.point), (Duration::from_millis(6_500), Duration::from_millis(2_100)));
        let parts = SlotParts::new(secs(1), WarmUpBound::Requests, None).unwrap();
        assert_eq!(parts.warm_up, parts.point, "a warm-up of N requests gets as long as a point");
        // --point-slot is the slot as given; without it an unbounded point has no slot.
        let parts = SlotParts::new(None, WarmUpBound::None, secs(4)).unwrap();
        assert_eq!(parts.point, Duration::from_secs(4));
        assert_eq!(SlotParts::new(None, WarmUpBound::None, None), None);
        // The interval rule's last window may overrun `max` by a twelfth: the margin covers it.
        let max = Duration::from_secs(60);
        assert!(margin(max) > max / 12);
    }

    #[test]
    fn a_point_is_late_only_past_the_tolerance() {
        assert_eq!(late_by(S, S + 50_000_000), None);
        assert_eq!(late_by(S, S - 5), None, "early is on time (the sweep waited)");
        assert_eq!(late_by(S, S + 250_000_000), Some(Duration::from_millis(250)));
    }
}
