//! Time slices (`--slice-duration`): which requests of a run fall in which slice of its
//! timeline. AIPerf 0.13's rule: the grid starts at the earliest request start and spans to the
//! latest start or end; a request belongs to the slice holding its *start* instant; slices with
//! no request are left out; the last slice ends at the run's end and is flagged incomplete when
//! that cuts it short. Pure: instants in, slices out, any epoch.

/// One slice of the run's timeline and the requests that started in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    pub start_ns: u64,
    pub end_ns: u64,
    /// False for a slice the run's end cut short (AIPerf's `is_complete: false`).
    pub complete: bool,
    /// Indices into the spans given, in their order.
    pub members: Vec<usize>,
}

impl Slice {
    pub fn seconds(&self) -> f64 {
        (self.end_ns - self.start_ns) as f64 / 1e9
    }
}

/// Slices of `duration_ns` over requests given as `(start_ns, end_ns)` spans.
pub fn slice(spans: &[(u64, u64)], duration_ns: u64) -> Vec<Slice> {
    assert!(duration_ns > 0, "a slice lasts some time");
    let Some(first) = spans.iter().map(|s| s.0).min() else { return Vec::new() };
    let last = spans.iter().map(|&(start, end)| start.max(end)).max().unwrap_or(first);
    let count = ((last - first) / duration_ns + 1) as usize;
    let mut members = vec![Vec::new(); count];
    for (i, &(start, _)) in spans.iter().enumerate() {
        members[((start - first) / duration_ns) as usize].push(i);
    }
    members
        .into_iter()
        .enumerate()
        .filter(|(_, m)| !m.is_empty())
        .map(|(k, members)| {
            let start_ns = first + k as u64 * duration_ns;
            let full_end = start_ns + duration_ns;
            Slice { start_ns, end_ns: full_end.min(last), complete: full_end <= last, members }
        })
        .collect()
}

/// The index of the slice of `slices` whose span holds `at_ns` (ends inclusive for the last).
pub fn slice_at(slices: &[Slice], at_ns: u64) -> Option<usize> {
    let last = slices.len().checked_sub(1)?;
    slices.iter().position(|s| {
        s.start_ns <= at_ns && (at_ns < s.end_ns || (at_ns == s.end_ns && s.end_ns == slices[last].end_ns))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_request_belongs_to_the_slice_of_its_start() {
        // Starts at 0, 0.5 s, 1.2 s, 3.1 s; the last one ends at 3.5 s.
        let spans = [(0, S / 2), (S / 2, 2 * S), (S + S / 5, S + S / 2), (3 * S + S / 10, 3 * S + S / 2)];
        let slices = slice(&spans, S);
        assert_eq!(slices.len(), 3, "the empty slice [2 s, 3 s) is left out: {slices:?}");
        assert_eq!(slices[0].members, vec![0, 1], "the second request ends in slice 1 but started in 0");
        assert_eq!((slices[0].start_ns, slices[0].end_ns, slices[0].complete), (0, S, true));
        assert_eq!(slices[1].members, vec![2]);
        assert_eq!(slices[2].members, vec![3]);
        assert_eq!((slices[2].start_ns, slices[2].end_ns), (3 * S, 3 * S + S / 2), "clipped to the run's end");
        assert!(!slices[2].complete);
        let total: usize = slices.iter().map(|s| s.members.len()).sum();
        assert_eq!(total, spans.len(), "every request in exactly one slice");
    }

    #[test]
    fn the_grid_starts_at_the_first_start_whatever_the_epoch() {
        let base = 1_700_000_000 * S;
        let slices = slice(&[(base + 8, base + 9), (base + 3, base + 4)], 5);
        assert_eq!(slices.len(), 2);
        assert_eq!((slices[0].start_ns, slices[0].members.clone()), (base + 3, vec![1]));
        assert_eq!((slices[1].start_ns, slices[1].end_ns, slices[1].members.clone()), (base + 8, base + 9, vec![0]));
        assert_eq!(slice_at(&slices, base + 9), Some(1), "the run's last instant is in its last slice");
        assert_eq!(slice_at(&slices, base + 8), Some(1));
        assert_eq!(slice_at(&slices, base + 2), None);
        assert!(slice(&[], 5).is_empty());
    }
}
