//! `--input-file` read as `--custom-dataset-type` names it, in AIPerf 0.13's formats:
//! `single_turn` and `multi_turn` ([`turns`]), `mooncake_trace` (`inputs::mooncake`) and
//! `dag_jsonl` ([`dag_jsonl`]); without a type, the file is guessed as before. Then the
//! file's timestamps and delays are scaled (`--replay-speedup`) or dropped
//! (`--ignore-trace-delays`), and `--fixed-schedule` checks that every session has a timestamp.

mod dag_jsonl;
mod turns;

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};

use super::inputs::{self, Conversation, Synthetic};
use crate::plan::generative::{DatasetType, TraceTiming};

/// The conversations of `path`, read as `kind` says, timed as `timing` says.
pub fn read(
    path: &Path,
    kind: Option<DatasetType>,
    synthetic: &Synthetic,
    timing: TraceTiming,
) -> anyhow::Result<Vec<Conversation>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let name = kind.map_or("guessed", DatasetType::name);
    let mut conversations = parse(&text, kind, synthetic).with_context(|| format!("{} ({name})", path.display()))?;
    retime(&mut conversations, timing);
    // A schedule replays in time order, as AIPerf sorts it, whatever the file's order.
    if conversations.iter().all(|c| c.at.is_some()) {
        conversations.sort_by_key(|c| c.at);
    }
    if timing.fixed_schedule {
        if let Some(k) = conversations.iter().position(|c| c.at.is_none()) {
            bail!("--fixed-schedule: session {k} of {} has no timestamp on its first turn", path.display());
        }
    }
    Ok(conversations)
}

/// The conversations of one file's text.
pub fn parse(text: &str, kind: Option<DatasetType>, synthetic: &Synthetic) -> anyhow::Result<Vec<Conversation>> {
    let conversations = match kind {
        None => inputs::read_guessed(text, synthetic)?,
        Some(DatasetType::SingleTurn) => turns::single_turn(text)?,
        Some(DatasetType::MultiTurn) => turns::multi_turn(text)?,
        Some(DatasetType::MooncakeTrace) => inputs::mooncake(text, synthetic)?,
        Some(DatasetType::DagJsonl) => dag_jsonl::read(text)?,
    };
    if conversations.is_empty() {
        bail!("the file has no lines");
    }
    Ok(conversations)
}

/// Timestamps and delays divided by the speedup, or dropped.
fn retime(conversations: &mut [Conversation], timing: TraceTiming) {
    let (speedup, ignore) = (timing.speedup, timing.ignore_delays);
    if speedup == 1.0 && !ignore {
        return;
    }
    let scale = |d: std::time::Duration| d.div_f64(speedup);
    for c in conversations {
        c.at = if ignore { None } else { c.at.map(scale) };
        for turn in &mut c.turns {
            turn.at = if ignore { None } else { turn.at.map(scale) };
            turn.delay = if ignore { std::time::Duration::ZERO } else { scale(turn.delay) };
        }
        if let Some(graph) = &mut c.graph {
            Arc::make_mut(graph).retime(speedup, ignore);
        }
    }
}

/// Keeps every `count`-th conversation from `index`: shard `index` of `count` replays these,
/// each whole (all its turns, or its whole graph), so no session is split across shards and
/// together the shards replay the file once.
pub fn shard_part(conversations: Vec<Conversation>, index: u64, count: u64) -> Vec<Conversation> {
    conversations.into_iter().enumerate().filter(|(k, _)| *k as u64 % count == index).map(|(_, c)| c).collect()
}

/// A line's number and its JSON, for the readers' messages.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim().is_empty())
}

/// Milliseconds (a file's timestamps and delays) as a duration; refused when negative.
fn millis(ms: f64, what: &str) -> anyhow::Result<std::time::Duration> {
    if !(ms.is_finite() && ms >= 0.0) {
        bail!("{what} must be 0 or more (ms), not {ms}");
    }
    Ok(std::time::Duration::from_secs_f64(ms / 1000.0))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::inputs::tests::Words;
    use super::super::inputs::Turn;
    use super::*;

    fn session(at: u64, turns: &[(u64, u64)]) -> Conversation {
        let turns = turns
            .iter()
            .map(|&(at, delay)| Turn {
                at: Some(Duration::from_millis(at)),
                delay: Duration::from_millis(delay),
                ..Turn::new("x", None)
            })
            .collect();
        Conversation { turns, at: Some(Duration::from_millis(at)), ..Conversation::default() }
    }

    #[test]
    fn speedup_divides_timestamps_and_delays_and_ignoring_drops_them() {
        let mut c = vec![session(1000, &[(1000, 0), (3000, 400)])];
        retime(&mut c, TraceTiming { speedup: 4.0, ..TraceTiming::default() });
        assert_eq!(c[0].at, Some(Duration::from_millis(250)));
        assert_eq!(c[0].turns[1].at, Some(Duration::from_millis(750)));
        assert_eq!(c[0].turns[1].delay, Duration::from_millis(100));
        retime(&mut c, TraceTiming { ignore_delays: true, ..TraceTiming::default() });
        assert_eq!((c[0].at, c[0].turns[1].at, c[0].turns[1].delay), (None, None, Duration::ZERO));
    }

    #[test]
    fn a_session_split_across_shards_is_kept_whole() {
        // Sessions of 1 to 5 turns, and a graph: each shard gets whole sessions, and the
        // shards together get each session exactly once.
        let mut all: Vec<Conversation> = (1..=5).map(|n| session(n * 10, &vec![(0, 0); n as usize])).collect();
        let synthetic = Synthetic::new(&Words, "a b c d").unwrap();
        let dag = "{\"session_id\": \"root\", \"turns\": [{\"messages\": [{\"role\": \"user\", \"content\": \"go\"}], \
                   \"spawns\": [\"tool\"]}, {\"messages\": [{\"role\": \"user\", \"content\": \"sum up\"}]}]}\n\
                   {\"session_id\": \"tool\", \"turns\": [{\"messages\": [{\"role\": \"user\", \"content\": \"t\"}]}]}\n";
        all.extend(parse(dag, Some(DatasetType::DagJsonl), &synthetic).unwrap());
        for count in 1..=4u64 {
            let parts: Vec<Vec<Conversation>> = (0..count).map(|k| shard_part(all.clone(), k, count)).collect();
            let mut seen: Vec<&Conversation> = parts.iter().flatten().collect();
            assert_eq!(seen.len(), all.len(), "{count} shards: each session once");
            for whole in &all {
                let at = seen.iter().position(|c| *c == whole).expect("a session kept whole in some shard");
                seen.remove(at);
            }
        }
        let graph = all.last().unwrap().graph.as_ref().expect("the dag is one conversation");
        assert_eq!(graph.nodes.len(), 3, "the tool call travels with its agent");
    }

    #[test]
    fn a_fixed_schedule_needs_a_timestamp_on_every_session() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"text\": \"a\", \"timestamp\": 0}\n{\"text\": \"b\"}\n").unwrap();
        let synthetic = Synthetic::new(&Words, "a b c d").unwrap();
        let fixed = TraceTiming { fixed_schedule: true, ..TraceTiming::default() };
        let err = read(&path, Some(DatasetType::SingleTurn), &synthetic, fixed).unwrap_err();
        assert!(format!("{err:#}").contains("session 1") && format!("{err:#}").contains("no timestamp"), "{err:#}");
        assert_eq!(read(&path, Some(DatasetType::SingleTurn), &synthetic, TraceTiming::default()).unwrap().len(), 2);
    }
}
