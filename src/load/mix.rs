//! Which model a request goes to when one load drives several (`-m a,b`): AIPerf's
//! `--model-selection-strategy` (round-robin, random) and ours, weighted by `--model-weights
//! a:3,b:1`. A pure function of the strategy, the seed and the request's index, so both engines
//! pick the same way and a run picks the same models again.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a request's model is chosen among several.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// The n-th request goes to model n mod N (AIPerf's default).
    #[default]
    #[value(alias = "round_robin")]
    RoundRobin,
    /// Each request to a model drawn uniformly (seeded by --random-seed).
    Random,
    /// Each request to a model drawn in proportion to its --model-weights.
    Weighted,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::RoundRobin => "round-robin",
            Strategy::Random => "random",
            Strategy::Weighted => "weighted",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = MixError;
    fn from_str(text: &str) -> Result<Strategy, MixError> {
        match text.to_ascii_lowercase().replace('_', "-").as_str() {
            "round-robin" => Ok(Strategy::RoundRobin),
            "random" => Ok(Strategy::Random),
            "weighted" => Ok(Strategy::Weighted),
            _ => Err(MixError(format!("unknown model selection strategy '{text}' (round-robin, random, weighted)"))),
        }
    }
}

impl Serialize for Strategy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Strategy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Strategy, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a mix cannot be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct MixError(String);

/// The models of one load and how each request picks one.
#[derive(Clone, Debug, PartialEq)]
pub struct Mix {
    names: Vec<String>,
    strategy: Strategy,
    seed: u64,
    /// Each model's share of the requests (summing to 1): what random and weighted draw from.
    shares: Vec<f64>,
}

impl Mix {
    /// One model: every request goes to it.
    pub fn single(name: &str) -> Mix {
        Mix { names: vec![name.to_string()], strategy: Strategy::RoundRobin, seed: 0, shares: vec![1.0] }
    }

    /// `models` as `-m` gives them (`a,b`), with `weights` as `--model-weights` does (`a:3,b:1`,
    /// a name's last `:` before its weight; the weighted strategy needs them, no other takes them).
    pub fn new(models: &str, strategy: Strategy, weights: Option<&str>, seed: u64) -> Result<Mix, MixError> {
        let names: Vec<String> = models.split(',').map(|m| m.trim().to_string()).collect();
        if names.iter().any(String::is_empty) {
            return Err(MixError(format!("-m '{models}': an empty model name")));
        }
        if let Some(twice) = names.iter().enumerate().find(|(i, n)| names[..*i].contains(n)) {
            return Err(MixError(format!("-m '{models}': model '{}' is named twice", twice.1)));
        }
        let shares = match (strategy, weights) {
            (Strategy::Weighted, None) => {
                return Err(MixError("--model-selection-strategy weighted needs --model-weights a:3,b:1".into()))
            }
            (Strategy::Weighted, Some(text)) => normalized(&parse_weights(text, &names)?),
            (_, Some(_)) => {
                return Err(MixError(format!("--model-weights is for the weighted strategy, not {strategy}")))
            }
            (_, None) => vec![1.0 / names.len() as f64; names.len()],
        };
        Ok(Mix { names, strategy, seed, shares })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Whether the load has more than one model (and so a row per model).
    pub fn is_mixed(&self) -> bool {
        self.names.len() > 1
    }

    /// The share of requests model `i` is meant to get.
    pub fn share(&self, i: usize) -> f64 {
        self.shares[i]
    }

    /// The model (its index in [`Mix::names`]) of request `index` of the load.
    pub fn pick(&self, index: u64) -> usize {
        match self.strategy {
            _ if self.names.len() == 1 => 0,
            Strategy::RoundRobin => (index % self.names.len() as u64) as usize,
            Strategy::Random | Strategy::Weighted => {
                let u = unit(self.seed, index);
                let mut below = 0.0;
                for (i, share) in self.shares.iter().enumerate() {
                    below += share;
                    if u < below {
                        return i;
                    }
                }
                self.names.len() - 1
            }
        }
    }

    /// The name of request `index`'s model.
    pub fn model(&self, index: u64) -> &str {
        &self.names[self.pick(index)]
    }
}

fn parse_weights(text: &str, names: &[String]) -> Result<Vec<f64>, MixError> {
    let mut weights = vec![None; names.len()];
    for part in text.split(',') {
        let bad = || MixError(format!("--model-weights '{part}': expected model:weight, a positive number"));
        let (name, weight) = part.trim().rsplit_once(':').ok_or_else(bad)?;
        let weight: f64 = weight.trim().parse().map_err(|_| bad())?;
        if !(weight.is_finite() && weight > 0.0) {
            return Err(bad());
        }
        let at = names
            .iter()
            .position(|n| n == name.trim())
            .ok_or_else(|| MixError(format!("--model-weights names '{name}', which -m does not list")))?;
        weights[at] = Some(weight);
    }
    names
        .iter()
        .zip(weights)
        .map(|(name, w)| w.ok_or_else(|| MixError(format!("--model-weights gives no weight to '{name}'"))))
        .collect()
}

fn normalized(weights: &[f64]) -> Vec<f64> {
    let sum: f64 = weights.iter().sum();
    weights.iter().map(|w| w / sum).collect()
}

/// A uniform number in [0, 1) from the seed and the index alone (SplitMix64's finalizer), so a
/// request's draw does not depend on which thread asked first.
fn unit(seed: u64, index: u64) -> f64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(mix: &Mix, n: u64) -> Vec<u64> {
        let mut counts = vec![0; mix.names().len()];
        for i in 0..n {
            counts[mix.pick(i)] += 1;
        }
        counts
    }

    #[test]
    fn round_robin_is_exact() {
        let mix = Mix::new("a,b,c", Strategy::RoundRobin, None, 7).unwrap();
        let picked: Vec<&str> = (0..7).map(|i| mix.model(i)).collect();
        assert_eq!(picked, ["a", "b", "c", "a", "b", "c", "a"]);
        assert_eq!(counts(&mix, 3000), [1000, 1000, 1000]);
    }

    #[test]
    fn weighted_shares_stay_within_their_bound_and_repeat_with_the_seed() {
        let mix = Mix::new("big,small", Strategy::Weighted, Some("big:3, small:1"), 42).unwrap();
        assert_eq!((mix.share(0), mix.share(1)), (0.75, 0.25));
        let n = 20_000;
        let got = counts(&mix, n);
        // Four standard deviations of a binomial share: a wrong draw (e.g. uniform) is far outside.
        let bound = 4.0 * (0.75f64 * 0.25 / n as f64).sqrt();
        let share = got[0] as f64 / n as f64;
        assert!((share - 0.75).abs() < bound, "share of big {share}, bound {bound}");
        assert_eq!(got, counts(&Mix::new("big,small", Strategy::Weighted, Some("big:3,small:1"), 42).unwrap(), n));
        let other = Mix::new("big,small", Strategy::Weighted, Some("big:3,small:1"), 43).unwrap();
        assert_ne!(
            (0..64).map(|i| mix.pick(i)).collect::<Vec<_>>(),
            (0..64).map(|i| other.pick(i)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn random_is_uniform() {
        let mix = Mix::new("a,b", Strategy::Random, None, 1).unwrap();
        let n = 20_000;
        let share = counts(&mix, n)[0] as f64 / n as f64;
        assert!((share - 0.5).abs() < 4.0 * (0.25f64 / n as f64).sqrt(), "{share}");
    }

    #[test]
    fn spellings_and_refusals() {
        assert_eq!("round_robin".parse::<Strategy>().unwrap(), Strategy::RoundRobin);
        assert_eq!("Round-Robin".parse::<Strategy>().unwrap(), Strategy::RoundRobin);
        assert!("sticky".parse::<Strategy>().is_err());
        let colon = Mix::new("org/m:8b,x", Strategy::Weighted, Some("org/m:8b:2,x:2"), 0).unwrap();
        assert_eq!(colon.share(0), 0.5);
        for (models, strategy, weights, needle) in [
            ("a,,b", Strategy::RoundRobin, None, "empty"),
            ("a,a", Strategy::RoundRobin, None, "twice"),
            ("a,b", Strategy::Weighted, None, "needs --model-weights"),
            ("a,b", Strategy::Random, Some("a:1,b:1"), "weighted strategy"),
            ("a,b", Strategy::Weighted, Some("a:1"), "no weight to 'b'"),
            ("a,b", Strategy::Weighted, Some("a:1,c:1"), "'c'"),
            ("a,b", Strategy::Weighted, Some("a:0,b:1"), "positive"),
            ("a,b", Strategy::Weighted, Some("a,b"), "model:weight"),
        ] {
            let err = Mix::new(models, strategy, weights, 0).unwrap_err().to_string();
            assert!(err.contains(needle), "{models} {weights:?}: {err}");
        }
        assert!(!Mix::single("a").is_mixed());
        assert_eq!(Mix::single("a").pick(5), 0);
    }
}
