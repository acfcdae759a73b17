//! Sessions, as AIPerf 0.13 makes them: synthetic multi-turn conversations
//! (`--conversation-turn-*`), one system prompt every session shares, a user context of each
//! session's own, and a pool of prompt prefixes (each session's first prompt starts with one).
//! Also what a session opens with on the wire, and what its records add up to: TTFT per turn
//! index (what the prefix cache saves on later turns), session duration, turns and tokens per
//! session, sessions per second.
//!
//! The runner sends the turns (`Runner::converse`): each later turn waits its think time, then
//! carries the opening messages, every earlier user turn and the answers the server returned.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use super::endpoint::Message;
use super::inputs::{Conversation, Length, Synthetic, Turn};
use super::metrics::{display_value, Record, Stats};
use crate::plan::generative::{Sessions, TokenLength};

/// Per-turn rows shown: turns 0 to `TURN_ROWS - 2`, then every later turn in one row.
pub const TURN_ROWS: usize = 8;

/// Seeds of the draws that are not prompts, so a session's turn count or think time does not
/// change the prompts drawn after it (AIPerf derives one stream per purpose too).
const TURNS_STREAM: u64 = 0x7475_726e;
const DELAY_STREAM: u64 = 0x6465_6c61;

/// A positive integer from a normal distribution: AIPerf's `sample_positive_normal_integer`
/// (the mean rounded when there is no spread; otherwise a draw at 0 or more, rounded up, at
/// least 1).
pub fn positive_normal_integer(length: TokenLength, rng: &mut impl Rng) -> usize {
    if length.stddev <= 0.0 {
        return length.mean.round().max(1.0) as usize;
    }
    let normal = Normal::new(length.mean, length.stddev).expect("a finite stddev");
    normal.sample(rng).max(0.0).ceil().max(1.0) as usize
}

/// `count` synthetic sessions of `shape`, each prompt `input` tokens long (plus its prefix),
/// each answer `output` tokens when given; deterministic under `seed`.
pub fn synthesize(
    synthetic: &Synthetic,
    count: usize,
    input: Length,
    output: Option<Length>,
    shape: &Sessions,
    seed: u64,
) -> Vec<Conversation> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut turns_rng = ChaCha8Rng::seed_from_u64(seed ^ TURNS_STREAM);
    let mut delay_rng = ChaCha8Rng::seed_from_u64(seed ^ DELAY_STREAM);
    let system = shape.shared_system_prompt_tokens.map(|n| synthetic.prompt(n, &mut rng));
    let prefixes: Vec<String> =
        (0..shape.prefix_pool_size).map(|_| synthetic.prompt(shape.prefix_tokens, &mut rng)).collect();
    (0..count)
        .map(|_| {
            let context = shape.user_context_prompt_tokens.map(|n| synthetic.prompt(n, &mut rng));
            let n = positive_normal_integer(shape.turns, &mut turns_rng);
            let turns = (0..n)
                .map(|k| {
                    let mut text = synthetic.prompt(input.sample(&mut rng), &mut rng);
                    if k == 0 && !prefixes.is_empty() {
                        text = format!("{}{text}", prefixes[rng.random_range(0..prefixes.len())]);
                    }
                    let max_tokens = output.map(|o| o.sample(&mut rng) as u32);
                    Turn { text, max_tokens, delay: think_time(k, shape, &mut delay_rng), ..Turn::default() }
                })
                .collect();
            Conversation { turns, system: system.clone(), context, ..Conversation::default() }
        })
        .collect()
}

/// The think time before turn `k` (none before the first, or with a mean of 0, as AIPerf):
/// AIPerf's integer draw around the truncated mean, in ms, times the ratio.
fn think_time(k: usize, shape: &Sessions, rng: &mut impl Rng) -> Duration {
    if k == 0 || shape.delay_ms.mean <= 0.0 {
        return Duration::ZERO;
    }
    let delay = TokenLength { mean: shape.delay_ms.mean.trunc(), stddev: shape.delay_ms.stddev };
    let ms = positive_normal_integer(delay, rng) as f64 * shape.delay_ratio;
    Duration::from_secs_f64(ms / 1000.0)
}

/// Waits before a later turn: on a fixed schedule (the first turn sent at `first_intended`)
/// until its timestamp, if it has one and that is still ahead, else its think time. Returns
/// the instant it was meant to leave when a timestamp set it.
pub async fn wait_for_turn(
    conversation: &Conversation,
    step: &Turn,
    first_intended: Option<Instant>,
) -> Option<Instant> {
    let scheduled = match (first_intended, conversation.at, step.at) {
        (Some(first), Some(at0), Some(at)) => Some(first + at.saturating_sub(at0)),
        _ => None,
    };
    match scheduled {
        Some(due) => {
            // Past due once the answer before it came in: it leaves now, and only the wait
            // after that counts as send lag.
            let ready = Instant::now();
            tokio::time::sleep_until(due.into()).await;
            Some(due.max(ready))
        }
        None => {
            if !step.delay.is_zero() {
                tokio::time::sleep(step.delay).await;
            }
            None
        }
    }
}

/// What every request of the session starts with: the shared system prompt, then the user's
/// context (AIPerf's order).
pub fn opening(conversation: &Conversation) -> Vec<Message> {
    let system = conversation.system.iter().map(|text| Message { role: "system", content: text.clone() });
    let context = conversation.context.iter().map(|text| Message { role: "user", content: text.clone() });
    system.chain(context).collect()
}

/// One row of the per-turn table: a turn index (or the later turns pooled) and its latency.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnRow {
    pub label: String,
    pub stats: Stats,
}

/// What the measured sessions add up to; only for a run where some session had later turns.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSummary {
    /// `time_to_first_token` (streamed) or `request_latency`: the latency the turn rows show.
    pub latency_tag: &'static str,
    /// Per turn index, up to [`TURN_ROWS`] rows.
    pub by_turn: Vec<TurnRow>,
    /// The first turns' latency against the later turns' (ms).
    pub first_turn: Option<Stats>,
    pub later_turns: Option<Stats>,
    /// From the first turn's start to the last turn's end, think time included (ms).
    pub duration_ms: Stats,
    pub turns: Stats,
    pub input_tokens: Stats,
    pub output_tokens: Stats,
    pub sessions: usize,
    pub sessions_per_s: f64,
}

/// The sessions of `records` (warm-up left out), `None` when none had a second turn.
/// `benchmark_s` is the run's benchmark duration, which sessions per second divide by.
pub fn summarize(records: &[Record], streaming: bool, benchmark_s: f64) -> Option<SessionSummary> {
    let measured: Vec<&Record> = records.iter().filter(|r| !r.warmup).collect();
    if !measured.iter().any(|r| r.turn > 0) {
        return None;
    }
    let latency_tag = if streaming { "time_to_first_token" } else { "request_latency" };
    let mut by_turn: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let (mut first, mut later) = (Vec::new(), Vec::new());
    for record in measured.iter().filter(|r| r.ok()) {
        let Some(ms) = display_value(record, latency_tag) else { continue };
        by_turn.entry(record.turn.min(TURN_ROWS - 1)).or_default().push(ms);
        if record.turn == 0 { &mut first } else { &mut later }.push(ms);
    }
    let by_turn = by_turn
        .into_iter()
        .filter_map(|(turn, values)| {
            let label = if turn == TURN_ROWS - 1 { format!("turns {turn}+") } else { format!("turn {turn}") };
            Some(TurnRow { label, stats: Stats::of(&values)? })
        })
        .collect();
    let mut sessions: BTreeMap<usize, Vec<&Record>> = BTreeMap::new();
    for record in &measured {
        sessions.entry(record.session).or_default().push(record);
    }
    let per_session = |f: &dyn Fn(&[&Record]) -> f64| -> Stats {
        let values: Vec<f64> = sessions.values().map(|s| f(s)).collect();
        Stats::of(&values).expect("a measured session")
    };
    let sum = |f: fn(&Record) -> Option<u64>| move |s: &[&Record]| s.iter().filter_map(|r| f(r)).sum::<u64>() as f64;
    let duration = |s: &[&Record]| {
        let start = s.iter().map(|r| r.start).min().expect("a record");
        let end = s.iter().map(|r| r.end).max().expect("a record");
        end.saturating_duration_since(start).as_secs_f64() * 1000.0
    };
    Some(SessionSummary {
        latency_tag,
        by_turn,
        first_turn: Stats::of(&first),
        later_turns: Stats::of(&later),
        duration_ms: per_session(&duration),
        turns: per_session(&|s| s.len() as f64),
        input_tokens: per_session(&sum(|r| r.input_tokens)),
        output_tokens: per_session(&sum(|r| r.output_tokens)),
        sessions: sessions.len(),
        sessions_per_s: if benchmark_s > 0.0 { sessions.len() as f64 / benchmark_s } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::inputs::tests::Words;
    use super::super::inputs::Tokenizer;
    use super::super::metrics::tests::record;
    use super::*;

    const TEXT: &str = "the quick brown fox jumps over the lazy dog while a cat sleeps in warm sun and \
        birds sing of rain to come over hills and rivers far away from any town";

    fn shape() -> Sessions {
        Sessions {
            count: Some(4),
            turns: TokenLength { mean: 3.0, stddev: 0.0 },
            delay_ms: TokenLength { mean: 250.0, stddev: 0.0 },
            delay_ratio: 0.5,
            shared_system_prompt_tokens: Some(12),
            user_context_prompt_tokens: Some(5),
            prefix_pool_size: 0,
            prefix_tokens: 0,
        }
    }

    #[test]
    fn sessions_share_one_system_prompt_and_have_a_context_and_think_time_each() {
        let synthetic = Synthetic::new(&Words, TEXT).unwrap();
        let fixed = |mean| Length { mean, stddev: 0.0 };
        let sessions = synthesize(&synthetic, 4, fixed(10.0), Some(fixed(3.0)), &shape(), 9);
        assert_eq!(sessions, synthesize(&synthetic, 4, fixed(10.0), Some(fixed(3.0)), &shape(), 9), "seeded");
        let system = sessions[0].system.clone().expect("a system prompt");
        assert_eq!(Words.count(&system), 12);
        for session in &sessions {
            assert_eq!(session.system.as_ref(), Some(&system), "one system prompt for all");
            assert_eq!(Words.count(session.context.as_ref().unwrap()), 5);
            assert_eq!(session.turns.len(), 3);
            let delays: Vec<Duration> = session.turns.iter().map(|t| t.delay).collect();
            assert_eq!(delays, [0, 125, 125].map(Duration::from_millis), "250 ms × 0.5, none before the first");
            assert!(session.turns.iter().all(|t| Words.count(&t.text) == 10 && t.max_tokens == Some(3)));
        }
        assert_ne!(sessions[0].context, sessions[1].context, "a context of each session's own");
        let roles: Vec<&str> = opening(&sessions[0]).iter().map(|m| m.role).collect();
        assert_eq!(roles, ["system", "user"]);
    }

    #[test]
    fn each_first_prompt_starts_with_a_prefix_of_the_pool() {
        let synthetic = Synthetic::new(&Words, TEXT).unwrap();
        let shape = Sessions {
            shared_system_prompt_tokens: None,
            user_context_prompt_tokens: None,
            prefix_pool_size: 2,
            prefix_tokens: 6,
            turns: TokenLength { mean: 2.0, stddev: 0.0 },
            ..shape()
        };
        let sessions = synthesize(&synthetic, 12, Length { mean: 4.0, stddev: 0.0 }, None, &shape, 1);
        let heads: std::collections::HashSet<Vec<&str>> =
            sessions.iter().map(|s| s.turns[0].text.split_whitespace().take(6).collect()).collect();
        assert_eq!(heads.len(), 2, "12 sessions, 2 prefixes: {heads:?}");
        assert!(sessions.iter().all(|s| Words.count(&s.turns[0].text) == 10 && Words.count(&s.turns[1].text) == 4));
        assert!(sessions.iter().all(|s| s.system.is_none() && s.context.is_none() && opening(s).is_empty()));
    }

    #[test]
    fn turn_counts_are_aiperfs_positive_normal_integers() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        assert_eq!(positive_normal_integer(TokenLength { mean: 2.6, stddev: 0.0 }, &mut rng), 3);
        assert_eq!(positive_normal_integer(TokenLength { mean: 0.2, stddev: 0.0 }, &mut rng), 1);
        let draws: Vec<usize> =
            (0..500).map(|_| positive_normal_integer(TokenLength { mean: 3.0, stddev: 2.0 }, &mut rng)).collect();
        assert!(draws.iter().all(|&n| n >= 1));
        assert!(draws.iter().any(|&n| n >= 5) && draws.contains(&1), "spread both ways");
    }

    #[test]
    fn sessions_add_up_per_turn_and_per_session() {
        let t0 = Instant::now();
        let turn = |session, turn, start, ttft| {
            let mut r = record(t0, start, &[(start + ttft, 1), (start + ttft + 10, 1)], 2);
            (r.session, r.turn) = (session, turn);
            r
        };
        // Two sessions of two turns: turn 0 TTFT 40 and 60 ms, turn 1 TTFT 10 and 20 ms.
        let records = vec![turn(0, 0, 0, 40), turn(0, 1, 100, 10), turn(1, 0, 0, 60), turn(1, 1, 200, 20)];
        let s = summarize(&records, true, 2.0).expect("later turns");
        assert_eq!(s.by_turn.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(), ["turn 0", "turn 1"]);
        assert_eq!((s.first_turn.unwrap().p50, s.later_turns.unwrap().p50), (50.0, 15.0));
        assert_eq!((s.duration_ms.min, s.duration_ms.max), (120.0, 230.0));
        assert_eq!((s.turns.avg, s.input_tokens.avg, s.output_tokens.avg), (2.0, 200.0, 4.0));
        assert_eq!((s.sessions, s.sessions_per_s), (2, 1.0));
        let single: Vec<Record> = records.into_iter().filter(|r| r.turn == 0).collect();
        assert_eq!(summarize(&single, true, 2.0), None, "single-turn runs have no session rows");
    }
}
