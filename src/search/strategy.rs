//! Which configuration to try next (pure): `brute` walks the whole grid, `quick` climbs one
//! dimension at a time. Both see a configuration's outcome only as a score (higher is better;
//! `None` when no concurrency met the budget), so they are tested on synthetic functions.

use std::collections::HashSet;

use crate::plan::search::{Candidate, Mode, Space};

/// A point of the space: an index into each dimension, in climbing order: batching pays
/// first, then its delay, then instances, then the model parameters in the order given.
type At = Vec<usize>;

/// Fixed dimensions before the parameters.
const SCHEDULER_DIMS: usize = 3;

fn candidate(space: &Space, at: &[usize]) -> Candidate {
    Candidate {
        max_batch_size: space.max_batch_sizes[at[0]],
        batching: space.batching[at[1]].clone(),
        instances: space.instances[at[2]],
        parameters: space
            .parameters
            .iter()
            .zip(&at[SCHEDULER_DIMS..])
            .map(|(p, &i)| (p.name.clone(), p.values[i].clone()))
            .collect(),
    }
}

fn lens(space: &Space) -> Vec<usize> {
    let mut lens = vec![space.max_batch_sizes.len(), space.batching.len(), space.instances.len()];
    lens.extend(space.parameters.iter().map(|p| p.values.len()));
    lens
}

fn valid(space: &Space, at: &[usize]) -> bool {
    space.batching[at[1]].fits(space.max_batch_sizes[at[0]])
}

/// Every valid configuration of the space (none when a dimension is empty).
pub fn grid(space: &Space) -> Vec<Candidate> {
    let lens = lens(space);
    if lens.contains(&0) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut at = vec![0; lens.len()];
    loop {
        if valid(space, &at) {
            out.push(candidate(space, &at));
        }
        // The next index, the last dimension fastest.
        let Some(d) = (0..lens.len()).rev().find(|&d| at[d] + 1 < lens[d]) else { return out };
        at[d] += 1;
        at[d + 1..].iter_mut().for_each(|i| *i = 0);
    }
}

/// The climb: from the smallest configuration, step one dimension to its next value while the
/// score improves by more than `threshold_pct`; then keep the best and go on with the next
/// dimension. It tries at most one configuration per value of each dimension.
#[derive(Debug)]
pub struct Climb {
    space: Space,
    threshold_pct: f64,
    best: Option<(At, f64)>,
    /// Where the climb stands: the configuration it steps from.
    base: At,
    dim: usize,
    /// The configuration handed out and not yet scored.
    pending: Option<At>,
    tried: HashSet<At>,
    started: bool,
}

impl Climb {
    pub fn new(space: Space, threshold_pct: f64) -> Climb {
        let dims = lens(&space).len();
        Climb {
            space,
            threshold_pct,
            best: None,
            base: vec![0; dims],
            dim: 0,
            pending: None,
            tried: HashSet::new(),
            started: false,
        }
    }

    /// The first valid configuration at or after `at` along `dim` (the smallest max batch size
    /// that takes the batcher, for a start that asks for one).
    fn valid_along(&self, mut at: At, dim: usize) -> Option<At> {
        let len = lens(&self.space)[dim];
        while at[dim] < len {
            if valid(&self.space, &at) {
                return Some(at);
            }
            at[dim] += 1;
        }
        None
    }

    /// The next configuration to try, or `None` when the climb is over.
    pub fn propose(&mut self) -> Option<Candidate> {
        assert!(self.pending.is_none(), "score the last configuration first");
        let dims = self.base.len();
        let at = if !self.started {
            self.started = true;
            if lens(&self.space).contains(&0) {
                return None;
            }
            // The start: the smallest value of each dimension that makes a valid configuration.
            (0..dims).find_map(|d| self.valid_along(vec![0; dims], d))?
        } else {
            loop {
                if self.dim >= dims {
                    return None;
                }
                let mut step = self.base.clone();
                step[self.dim] += 1;
                match self.valid_along(step, self.dim).filter(|s| !self.tried.contains(s)) {
                    Some(s) => break s,
                    None => self.dim += 1,
                }
            }
        };
        self.tried.insert(at.clone());
        let next = candidate(&self.space, &at);
        self.pending = Some(at);
        Some(next)
    }

    /// The score of the configuration [`propose`](Self::propose) handed out.
    pub fn score(&mut self, score: Option<f64>) {
        let at = self.pending.take().expect("a configuration was handed out");
        let improves = match (score, self.best.as_ref().map(|(_, b)| *b)) {
            (Some(s), Some(b)) => s > b + b.abs() * self.threshold_pct / 100.0,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if improves {
            self.best = Some((at.clone(), score.expect("improves only with a score")));
            self.base = at;
        } else if self.best.is_none() {
            // Nothing has met the budget yet: step on from here, a larger one may.
            self.base = at;
        } else {
            // No better: this dimension is done; the next one steps from the best so far.
            self.dim += 1;
        }
    }
}

/// The most configurations a climb over `space` tries: its start, then at most one step to
/// each further value of each dimension.
pub fn climb_bound(space: &Space) -> usize {
    1 + lens(space).iter().map(|len| len.saturating_sub(1)).sum::<usize>()
}

/// The walk of one mode: every configuration of the grid in turn (brute), or the climb
/// (quick), which goes where the scores lead.
#[derive(Debug)]
pub enum Strategy {
    Grid(std::vec::IntoIter<Candidate>),
    Climb(Box<Climb>),
}

impl Strategy {
    pub fn new(mode: Mode, space: &Space, threshold_pct: f64) -> Strategy {
        match mode {
            Mode::Brute => Strategy::Grid(grid(space).into_iter()),
            Mode::Quick => Strategy::Climb(Box::new(Climb::new(space.clone(), threshold_pct))),
        }
    }

    /// The most configurations this walk may try.
    pub fn bound(mode: Mode, space: &Space) -> usize {
        match mode {
            Mode::Brute => grid(space).len(),
            Mode::Quick => climb_bound(space),
        }
    }

    /// The next configuration, or `None` when the walk is over.
    pub fn propose(&mut self) -> Option<Candidate> {
        match self {
            Strategy::Grid(rest) => rest.next(),
            Strategy::Climb(climb) => climb.propose(),
        }
    }

    /// The score of the configuration last proposed (the grid does not need it).
    pub fn score(&mut self, score: Option<f64>) {
        if let Strategy::Climb(climb) = self {
            climb.score(score);
        }
    }
}

/// Configurations of `mode` in the order tried, for a climb driven by `score`: the whole
/// search when the scores are known in advance (tests, and the planned count of brute).
pub fn simulate(space: &Space, threshold_pct: f64, mut score: impl FnMut(&Candidate) -> Option<f64>) -> Vec<Candidate> {
    let mut climb = Climb::new(space.clone(), threshold_pct);
    let mut tried = Vec::new();
    while let Some(c) = climb.propose() {
        climb.score(score(&c));
        tried.push(c);
    }
    tried
}

/// Whether a concurrency ramp goes on after a point: not once the budget broke; in quick
/// mode, not once throughput stopped improving by more than `threshold_pct` on the best so far.
pub fn ramp_goes_on(quick: bool, met: bool, throughput: f64, best_before: Option<f64>, threshold_pct: f64) -> bool {
    if !met {
        return false;
    }
    match (quick, best_before) {
        (true, Some(best)) => throughput > best * (1.0 + threshold_pct / 100.0),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::search::{Batching, SearchSettings};

    fn space() -> Space {
        SearchSettings {
            latency_budget: Some("p99=20ms".into()),
            instances: Some("1,2,4,8".into()),
            max_batch_size: Some("1,2,4,8,16,32,64,128".into()),
            dynamic_batching: Some("off,on".into()),
            queue_delay_us: Some("0,100,500".into()),
            ..SearchSettings::default()
        }
        .resolve()
        .unwrap()
        .space
    }

    /// A delay-like model: a fixed cost per execution, a cost per item, a bounded pool of
    /// instances (two cores), and a latency budget that large batches break.
    fn throughput(c: &Candidate) -> Option<f64> {
        let batch = if c.batches() { c.max_batch_size as f64 } else { 1.0 };
        let delay_us = match c.batching {
            Batching::Dynamic { queue_delay_us, .. } => queue_delay_us as f64,
            Batching::Off => 0.0,
        };
        let exec_us = 2000.0 + 50.0 * batch;
        let latency_us = exec_us * 2.0 + delay_us;
        (latency_us <= 20_000.0).then(|| batch / exec_us * 1e6 * f64::from(c.instances.min(2)))
    }

    fn best(tried: &[Candidate]) -> f64 {
        tried.iter().filter_map(throughput).fold(0.0, f64::max)
    }

    #[test]
    fn quick_tries_at_most_half_the_grid_and_finds_the_brute_winner_within_noise() {
        let space = space();
        let all = grid(&space);
        let quick = simulate(&space, 5.0, throughput);
        assert!(quick.len() * 2 <= all.len(), "quick {} of {}", quick.len(), all.len());
        let (q, b) = (best(&quick), best(&all));
        assert!(q >= b * 0.95, "quick {q} brute {b}");
        // The winner batches.
        let winner = quick.iter().max_by(|x, y| throughput(x).partial_cmp(&throughput(y)).unwrap()).unwrap();
        assert!(winner.batches(), "{winner}");
        // No configuration is tried twice, and every one is valid.
        let set: HashSet<_> = quick.iter().collect();
        assert_eq!(set.len(), quick.len());
        assert!(quick.iter().all(|c| c.batching.fits(c.max_batch_size)));
    }

    #[test]
    fn a_climb_never_tries_more_than_its_bound() {
        let space = space();
        let bound = climb_bound(&space);
        assert_eq!(bound, 1 + 7 + 3 + 3);
        type Score<'a> = &'a dyn Fn(&Candidate) -> Option<f64>;
        let products = |c: &Candidate| Some(f64::from(c.instances) * c.max_batch_size as f64);
        let large_only = |c: &Candidate| (c.max_batch_size >= 64).then_some(1.0);
        let scores: [Score; 4] = [&throughput, &products, &|_| None, &large_only];
        for score in scores {
            let tried = simulate(&space, 5.0, score);
            assert!(tried.len() <= bound, "{} > {bound}", tried.len());
        }
        // Everything pays: the climb walks every dimension to its end, exactly the bound.
        let all_pay = simulate(&space, 5.0, |c| {
            let delay = match c.batching {
                Batching::Dynamic { queue_delay_us, .. } => queue_delay_us as f64,
                Batching::Off => 1000.0,
            };
            Some(f64::from(c.instances) * c.max_batch_size as f64 * (1.0 + delay))
        });
        assert_eq!(all_pay.len(), bound);
    }

    #[test]
    fn the_climb_stops_a_dimension_when_it_stops_paying() {
        let space = space();
        // Only instances matter, up to 2.
        let tried = simulate(&space, 5.0, |c| Some(f64::from(c.instances.min(2))));
        let instances: Vec<u32> = tried.iter().map(|c| c.instances).collect();
        assert!(instances.contains(&2) && instances.contains(&4) && !instances.contains(&8), "{instances:?}");
    }

    #[test]
    fn a_start_that_breaks_the_budget_still_climbs() {
        let space = space();
        let tried = simulate(&space, 5.0, |c| (c.max_batch_size >= 8).then_some(c.max_batch_size as f64));
        assert!(tried.iter().any(|c| c.max_batch_size >= 8), "{tried:?}");
    }

    #[test]
    fn grid_skips_batchers_that_do_not_fit() {
        let space = SearchSettings {
            latency_budget: Some("p99=20ms".into()),
            max_batch_size: Some("0,4".into()),
            instances: Some("1".into()),
            dynamic_batching: Some("off,on".into()),
            preferred_batch_sizes: Some(vec!["8".into(), "none".into()]),
            ..SearchSettings::default()
        }
        .resolve()
        .unwrap()
        .space;
        // 0: off only; 4: off and on without preferred sizes (8 does not fit).
        assert_eq!(grid(&space).len(), 3);
    }

    #[test]
    fn parameters_are_dimensions_of_the_grid_and_of_the_climb() {
        let mut space = space();
        space.instances = vec![1];
        space.max_batch_sizes = vec![0];
        space.batching = vec![Batching::Off];
        space.parameters = vec!["max_num_seqs=8..64".parse().unwrap(), "mode=a,b".parse().unwrap()];
        let all = grid(&space);
        assert_eq!(all.len(), 4 * 2);
        assert_eq!(all[1].parameters, [("max_num_seqs".to_string(), "8".to_string()), ("mode".into(), "b".into())]);
        assert_eq!(climb_bound(&space), 1 + 3 + 1);
        // Throughput grows with the batcher up to 32, and mode b pays: the climb finds both.
        let score = |c: &Candidate| {
            let seqs: f64 = c.parameters[0].1.parse().unwrap();
            Some(seqs.min(32.0) * if c.parameters[1].1 == "b" { 2.0 } else { 1.0 })
        };
        let tried = simulate(&space, 5.0, score);
        let best = tried.iter().max_by(|a, b| score(a).partial_cmp(&score(b)).unwrap()).unwrap();
        assert_eq!(best.parameters[0].1, "32", "{tried:?}");
        assert_eq!(best.parameters[1].1, "b", "{tried:?}");
        // An empty dimension (the model's own, before it is filled) has nothing to try.
        space.instances.clear();
        assert!(grid(&space).is_empty() && simulate(&space, 5.0, score).is_empty());
    }

    #[test]
    fn a_ramp_stops_when_the_budget_breaks_or_throughput_saturates() {
        assert!(!ramp_goes_on(false, false, 10.0, None, 5.0));
        assert!(ramp_goes_on(false, true, 10.0, Some(100.0), 5.0));
        assert!(!ramp_goes_on(true, true, 102.0, Some(100.0), 5.0));
        assert!(ramp_goes_on(true, true, 110.0, Some(100.0), 5.0));
    }
}
