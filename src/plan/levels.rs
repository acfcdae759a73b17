//! Whole-number levels of a sweep (batch sizes, concurrencies), written three ways: a list
//! `1,8,16`, a range `8..256` (stepping by its start) or `8..256:8`, and perf_analyzer's
//! `start:end:step`. A plan stores the parsed form and prints it canonically, so a plan read back
//! is the plan written.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The most values a bounded range may hold: each is a measured point of seconds, so more is a
/// typo, and collecting them would only exhaust memory.
pub const MAX_POINTS: u64 = 10_000;

/// The levels of one sweep axis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "LevelsText", into = "String")]
pub enum Levels {
    /// These values, in this order.
    List(Vec<u64>),
    /// `start`, `start + step`, … up to `end`; `end: None` goes on until the latency limit.
    Range { start: u64, end: Option<u64>, step: u64 },
}

/// Why levels cannot be read; the caller names the flag or key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{text}': {why}")]
pub struct LevelsError {
    pub text: String,
    pub why: String,
}

impl Levels {
    pub fn one(value: u64) -> Levels {
        Levels::List(vec![value])
    }

    /// The values in order; an open range yields up to `open_end`.
    pub fn values(&self, open_end: u64) -> Vec<u64> {
        match self {
            Levels::List(values) => values.clone(),
            Levels::Range { start, end, step } => {
                (*start..=end.unwrap_or(open_end)).step_by((*step).max(1) as usize).collect()
            }
        }
    }

    pub fn first(&self) -> u64 {
        match self {
            Levels::List(values) => values.first().copied().unwrap_or(1),
            Levels::Range { start, .. } => *start,
        }
    }

    /// The largest value, if the levels are bounded.
    pub fn max(&self) -> Option<u64> {
        match self {
            Levels::List(values) => values.iter().copied().max(),
            Levels::Range { start, end, step } => {
                end.map(|end| start + (end.saturating_sub(*start) / (*step).max(1)) * (*step).max(1))
            }
        }
    }

    /// perf_analyzer's `start[:end[:step]]`; end 0 means "until the latency limit".
    pub fn parse_colon(text: &str) -> Result<Levels, LevelsError> {
        let err = |why: &str| LevelsError { text: text.to_string(), why: why.to_string() };
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() > 3 {
            return Err(err("expected start:end:step"));
        }
        let num = |s: &str| s.trim().parse::<u64>().map_err(|_| err(&format!("'{}' is not a whole number", s.trim())));
        let start = num(parts[0])?;
        let end = parts.get(1).map(|s| num(s)).transpose()?.unwrap_or(start);
        let step = parts.get(2).map(|s| num(s)).transpose()?.unwrap_or(1);
        // perf_analyzer measures the start, then steps on while at most the end: an end below
        // the start measures the start alone (`..` ranges call that a mistake instead).
        let end = if end != 0 && end < start { start } else { end };
        let levels = Levels::Range { start, end: (end != 0).then_some(end), step };
        levels.check().map_err(|e| err(&e.why))?;
        Ok(levels)
    }

    /// Every value at least 1, a range ascending with a step of at least 1 and at most
    /// [`MAX_POINTS`] values.
    pub fn check(&self) -> Result<(), LevelsError> {
        let err = |why: &str| LevelsError { text: self.to_string(), why: why.to_string() };
        match self {
            Levels::List(values) if values.is_empty() => Err(err("no values")),
            Levels::List(values) if values.contains(&0) => Err(err("values must be at least 1")),
            // perf_analyzer's wording for `--concurrency-range 0`.
            Levels::Range { start: 0, .. } => Err(err("The start of the search range must be > 0")),
            Levels::Range { step: 0, .. } => Err(err("the step must be at least 1")),
            Levels::Range { start, end: Some(end), .. } if end < start => {
                Err(err("the range is descending: the end is below the start"))
            }
            Levels::Range { start, end: Some(end), step } if (end - start) / step >= MAX_POINTS => Err(err(&format!(
                "{} points, more than a sweep can measure (at most {MAX_POINTS}): raise the step",
                (end - start) / step + 1
            ))),
            _ => Ok(()),
        }
    }
}

impl FromStr for Levels {
    type Err = LevelsError;

    /// `A..B` steps by A (`8..256` = 8, 16, …, 256), `A..B:S` steps by S, `A..` is open (until
    /// the latency limit), `A:B:S` is perf_analyzer's range, `8,16,64` a list, `8` one value.
    fn from_str(text: &str) -> Result<Levels, LevelsError> {
        let err = |why: String| LevelsError { text: text.to_string(), why };
        let num = |s: &str| s.trim().parse::<u64>().map_err(|_| err(format!("'{}' is not a whole number", s.trim())));
        let levels = if let Some((start, rest)) = text.split_once("..") {
            let start = num(start)?;
            let (end, step) = match rest.split_once(':') {
                Some((end, step)) => (end, num(step)?),
                None => (rest, start),
            };
            let end = if end.trim().is_empty() { None } else { Some(num(end)?) };
            Levels::Range { start, end, step }
        } else if text.contains(':') {
            return Levels::parse_colon(text);
        } else {
            Levels::List(text.split(',').map(num).collect::<Result<_, _>>()?)
        };
        levels.check().map_err(|e| err(e.why))?;
        Ok(levels)
    }
}

impl fmt::Display for Levels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Levels::List(values) => {
                let text: Vec<String> = values.iter().map(u64::to_string).collect();
                f.write_str(&text.join(","))
            }
            Levels::Range { start, end: Some(end), step } => write!(f, "{start}..{end}:{step}"),
            Levels::Range { start, end: None, step } => write!(f, "{start}..:{step}"),
        }
    }
}

impl From<Levels> for String {
    fn from(levels: Levels) -> String {
        levels.to_string()
    }
}

/// What a plan or scenario file may write for levels: `8`, `[1, 8, 16]` or `"8..256"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum LevelsText {
    One(u64),
    List(Vec<u64>),
    Text(String),
}

impl TryFrom<LevelsText> for Levels {
    type Error = LevelsError;
    fn try_from(text: LevelsText) -> Result<Levels, LevelsError> {
        let levels = match text {
            LevelsText::One(n) => Levels::one(n),
            LevelsText::List(values) => Levels::List(values),
            LevelsText::Text(text) => return text.parse(),
        };
        levels.check()?;
        Ok(levels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(text: &str) -> Vec<u64> {
        text.parse::<Levels>().unwrap().values(4096)
    }

    #[test]
    fn the_three_spellings() {
        assert_eq!(values("8..32"), vec![8, 16, 24, 32]);
        assert_eq!(values("1..4"), vec![1, 2, 3, 4]);
        assert_eq!(values("8..256").len(), 32);
        assert_eq!(values("2..9:3"), vec![2, 5, 8]);
        assert_eq!(values("8,16,64"), vec![8, 16, 64]);
        assert_eq!(values("4"), vec![4]);
        assert_eq!(values("2:8:2"), vec![2, 4, 6, 8]);
        assert_eq!(values("3:3"), vec![3]);
        assert_eq!("4:0".parse::<Levels>().unwrap(), Levels::Range { start: 4, end: None, step: 1 });
    }

    #[test]
    fn bad_levels_say_why() {
        for (bad, why) in [
            ("", "not a whole number"),
            ("0..8", "must be > 0"),
            ("8..2", "descending"),
            ("a..b", "not a whole number"),
            ("1..8:0", "step"),
            ("8,,16", "not a whole number"),
            ("x", "not a whole number"),
            ("1:2:3:4", "start:end:step"),
            ("0", "at least 1"),
        ] {
            let e = bad.parse::<Levels>().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn canonical_text_reads_back() {
        for text in ["8..256", "2..9:3", "8,16", "4", "4..", "1:16:2"] {
            let levels: Levels = text.parse().unwrap();
            assert_eq!(levels.to_string().parse::<Levels>().unwrap(), levels, "{text}");
        }
        assert_eq!("1..9:4".parse::<Levels>().unwrap().max(), Some(9));
        assert_eq!("1..10:4".parse::<Levels>().unwrap().max(), Some(9));
    }
}
