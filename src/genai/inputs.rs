//! What to ask: conversations of one or more user turns, each with the output length to ask for
//! and, for a trace, when to send it. Three sources, as AIPerf has them: synthetic prompts of a
//! token-length distribution cut from a corpus, a JSONL file of prompts (single- or multi-turn,
//! ShareGPT-like), and a mooncake trace, whose shared `hash_ids` become shared prompt prefixes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde_json::Value;

use super::dag::Graph;

/// Counts tokens: the one tokenizer the run counts with.
pub trait Tokenizer: Send + Sync {
    fn count(&self, text: &str) -> usize;
    /// How the report names it.
    fn name(&self) -> String;
}

/// One user turn.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Turn {
    pub text: String,
    /// `max_tokens` to ask for (`None`: the server decides).
    pub max_tokens: Option<u32>,
    /// A rankings request's passages, ranked against `text` (the query); empty otherwise.
    pub passages: Vec<String>,
    /// Think time before it is sent, from the end of the answer before it.
    pub delay: Duration,
    /// A trace's timestamp for it, from the start of the run: under `--fixed-schedule` a later
    /// turn leaves then (or once the answer before it is in, if that is later).
    pub at: Option<Duration>,
    /// Body fields of its own (a dataset line's `extra`), merged over `--extra-inputs`.
    pub extra: serde_json::Map<String, Value>,
}

impl Turn {
    /// A prompt turn (no passages).
    pub fn new(text: impl Into<String>, max_tokens: Option<u32>) -> Turn {
        Turn { text: text.into(), max_tokens, ..Turn::default() }
    }
}

/// A session: its turns go one after another, each with the answers before it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conversation {
    pub turns: Vec<Turn>,
    /// For a trace: when to send the first turn, from the start of the run.
    pub at: Option<Duration>,
    /// A system message before every turn (`--shared-system-prompt-length`).
    pub system: Option<String>,
    /// A user message of this session's own after it (`--user-context-prompt-length`).
    pub context: Option<String>,
    /// An agent's requests that wait for each other (`dag_jsonl`), sent in place of `turns`.
    pub graph: Option<Arc<Graph>>,
}

/// A normal distribution of lengths, clamped to at least 1 (AIPerf's mean/stddev pairs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Length {
    pub mean: f64,
    pub stddev: f64,
}

impl Length {
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        if self.stddev <= 0.0 {
            return self.mean.round().max(1.0) as usize;
        }
        let normal = Normal::new(self.mean, self.stddev).expect("finite stddev");
        normal.sample(rng).round().max(1.0) as usize
    }
}

/// Prompts drawn from a corpus by token count, deterministic under a seed. A prompt is words of
/// the corpus (each with its leading space), whose token counts are known, so it is the number
/// of tokens asked for (exactly, when words do not merge across spaces, as BPE pre-tokenizers
/// split them) without decoding ids back to text. Each word is drawn on its own: the bundled
/// corpus has a few hundred words, so prompts cut from it at random places would often start at
/// the same place and share their leading KV blocks, which a prefix cache counts as hits.
pub struct Synthetic {
    words: Vec<(String, usize)>,
    /// Tokens per `hash_id` block of a trace (mooncake's 512).
    pub block_size: usize,
}

/// The bundled prompt corpus.
pub const CORPUS: &str = include_str!("corpus.txt");

impl Synthetic {
    pub fn new(tokenizer: &dyn Tokenizer, corpus: &str) -> anyhow::Result<Self> {
        let words: Vec<(String, usize)> = corpus
            .split_whitespace()
            .map(|w| {
                let word = format!(" {w}");
                let tokens = tokenizer.count(&word);
                (word, tokens)
            })
            .filter(|(_, tokens)| *tokens > 0)
            .collect();
        if words.len() < 2 {
            bail!("the prompt corpus has fewer than 2 words");
        }
        Ok(Synthetic { words, block_size: 512 })
    }

    /// Random words of the corpus until they make `n` tokens.
    fn draw(&self, n: usize, rng: &mut impl Rng) -> String {
        let mut text = String::new();
        let mut tokens = 0;
        while tokens < n {
            let (word, count) = &self.words[rng.random_range(0..self.words.len())];
            text.push_str(word);
            tokens += count;
        }
        text
    }

    /// A prompt of `tokens` tokens.
    pub fn prompt(&self, tokens: usize, rng: &mut impl Rng) -> String {
        self.draw(tokens.max(1), rng)
    }

    /// `count` single-turn conversations with input and output lengths drawn from the two
    /// distributions (output `None`: no `max_tokens`).
    pub fn conversations(&self, count: usize, input: Length, output: Option<Length>, seed: u64) -> Vec<Conversation> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..count)
            .map(|_| {
                let text = self.prompt(input.sample(&mut rng), &mut rng);
                let max_tokens = output.map(|o| o.sample(&mut rng) as u32);
                Conversation { turns: vec![Turn::new(text, max_tokens)], ..Conversation::default() }
            })
            .collect()
    }

    /// `count` rankings requests (AIPerf's synthetic rankings): a query of `query` tokens and
    /// `passages` passages of `passage` tokens each.
    pub fn rankings(
        &self,
        count: usize,
        query: Length,
        passages: Length,
        passage: Length,
        seed: u64,
    ) -> Vec<Conversation> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..count)
            .map(|_| {
                let n = passages.sample(&mut rng);
                let text = self.prompt(query.sample(&mut rng), &mut rng);
                let passages = (0..n).map(|_| self.prompt(passage.sample(&mut rng), &mut rng)).collect();
                Conversation { turns: vec![Turn { text, passages, ..Turn::default() }], ..Conversation::default() }
            })
            .collect()
    }

    /// The text of one `hash_id` block: the same id always gives the same text (and fewer
    /// tokens a prefix of it), so requests sharing leading ids share a prompt prefix.
    pub fn block(&self, hash_id: u64, tokens: usize) -> String {
        self.draw(tokens, &mut ChaCha8Rng::seed_from_u64(hash_id ^ 0x9e37_79b9_7f4a_7c15))
    }
}

/// One line of a mooncake trace.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct TraceLine {
    /// Milliseconds from the start of the trace.
    #[serde(default)]
    pub timestamp: Option<f64>,
    pub input_length: usize,
    pub output_length: Option<u32>,
    #[serde(default)]
    pub hash_ids: Vec<u64>,
}

/// A mooncake trace as conversations: each line's prompt is its `hash_ids` blocks in order
/// (`block_size` tokens each, the last one what `input_length` leaves), sent at `timestamp`.
pub fn mooncake(text: &str, synthetic: &Synthetic) -> anyhow::Result<Vec<Conversation>> {
    let mut out = Vec::new();
    let mut blocks: HashMap<u64, String> = HashMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let line: TraceLine = serde_json::from_str(line).with_context(|| format!("trace line {}", i + 1))?;
        let size = synthetic.block_size;
        let mut prompt = String::new();
        if line.hash_ids.is_empty() {
            prompt = synthetic.block(i as u64 + (1 << 40), line.input_length.max(1));
        }
        for (k, id) in line.hash_ids.iter().enumerate() {
            let tokens = if k + 1 == line.hash_ids.len() {
                line.input_length.saturating_sub(size * k).clamp(1, size)
            } else {
                size
            };
            let full = blocks.entry(*id).or_insert_with(|| synthetic.block(*id, size));
            if tokens == size {
                prompt.push_str(full);
            } else {
                prompt.push_str(&synthetic.block(*id, tokens));
            }
        }
        out.push(Conversation {
            turns: vec![Turn::new(prompt, line.output_length)],
            at: line.timestamp.map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1000.0)),
            ..Conversation::default()
        });
    }
    if out.is_empty() {
        bail!("the trace has no lines");
    }
    Ok(out)
}

/// A JSONL prompt file. Each line is one conversation:
/// `{"text": ...}` (or `"prompt"`), `{"texts": [...]}` (turns), `{"turns": [{"text": ...}, ...]}`,
/// or ShareGPT's `{"conversations": [{"from": "human", "value": ...}, ...]}` (the human turns);
/// `output_length` (or `max_tokens`) and `timestamp` (ms) are optional, per line or per turn.
pub fn jsonl(text: &str) -> anyhow::Result<Vec<Conversation>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let value: Value = serde_json::from_str(line).with_context(|| format!("line {}", i + 1))?;
        out.push(conversation(&value).map_err(|e| anyhow!("line {}: {e}", i + 1))?);
    }
    if out.is_empty() {
        bail!("the file has no prompts");
    }
    Ok(out)
}

fn max_tokens(value: &Value) -> Option<u32> {
    ["output_length", "max_tokens"].iter().find_map(|k| value.get(*k).and_then(Value::as_u64)).map(|n| n as u32)
}

fn turn(value: &Value, default_max: Option<u32>) -> Option<Turn> {
    let text = match value {
        Value::String(s) => s.clone(),
        _ => ["text", "prompt", "content", "value"].iter().find_map(|k| value.get(*k).and_then(Value::as_str))?.into(),
    };
    Some(Turn::new(text, max_tokens(value).or(default_max)))
}

fn conversation(value: &Value) -> anyhow::Result<Conversation> {
    let default_max = max_tokens(value);
    let at = value.get("timestamp").and_then(Value::as_f64).map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    let turns: Vec<Turn> =
        if let Some(list) = value.get("turns").or_else(|| value.get("texts")).and_then(Value::as_array) {
            list.iter().filter_map(|t| turn(t, default_max)).collect()
        } else if let Some(list) = value.get("conversations").and_then(Value::as_array) {
            list.iter()
                .filter(|t| matches!(t.get("from").and_then(Value::as_str), Some("human" | "user")))
                .filter_map(|t| turn(t, default_max))
                .collect()
        } else {
            turn(value, default_max).into_iter().collect()
        };
    if turns.is_empty() {
        bail!("no prompt (expected text, prompt, texts, turns or conversations)");
    }
    Ok(Conversation { turns, at, ..Conversation::default() })
}

/// Reads `--input-file`: a mooncake trace when its first line has `input_length`, else prompts.
pub fn read_file(path: &Path, synthetic: &Synthetic) -> anyhow::Result<Vec<Conversation>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    read_guessed(&text, synthetic).with_context(|| format!("{}", path.display()))
}

/// A file of no named type: a mooncake trace when its first line has `input_length`, else prompts.
pub fn read_guessed(text: &str, synthetic: &Synthetic) -> anyhow::Result<Vec<Conversation>> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    let is_trace = serde_json::from_str::<Value>(first).ok().is_some_and(|v| v.get("input_length").is_some());
    if is_trace {
        mooncake(text, synthetic)
    } else {
        jsonl(text)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Words as tokens: enough to check lengths and prefixes without a vocabulary.
    pub struct Words;

    impl Tokenizer for Words {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
        fn name(&self) -> String {
            "words".into()
        }
    }

    const TEXT: &str = "the quick brown fox jumps over the lazy dog while a cat sleeps in warm sun and \
        birds sing of rain to come over hills and rivers far away from any town";

    #[test]
    fn rankings_requests_are_a_query_and_its_passages_of_the_asked_lengths() {
        let words = Words;
        let synthetic = Synthetic::new(&words, TEXT).unwrap();
        let fixed = |mean| Length { mean, stddev: 0.0 };
        let requests = synthetic.rankings(3, fixed(8.0), fixed(4.0), fixed(20.0), 5);
        assert_eq!(requests, synthetic.rankings(3, fixed(8.0), fixed(4.0), fixed(20.0), 5), "seeded");
        for c in &requests {
            let turn = &c.turns[0];
            assert_eq!((words.count(&turn.text), turn.max_tokens), (8, None));
            assert_eq!(turn.passages.len(), 4);
            assert!(turn.passages.iter().all(|p| words.count(p) == 20));
        }
        assert_ne!(requests[0].turns[0].passages[0], requests[0].turns[0].passages[1]);
    }

    #[test]
    fn synthetic_prompts_have_the_asked_length_and_are_seeded() {
        let words = Words;
        let synthetic = Synthetic::new(&words, TEXT).unwrap();
        let length = Length { mean: 40.0, stddev: 0.0 };
        let a = synthetic.conversations(5, length, Some(Length { mean: 9.0, stddev: 0.0 }), 7);
        let b = synthetic.conversations(5, length, Some(Length { mean: 9.0, stddev: 0.0 }), 7);
        assert_eq!(a, b);
        for c in &a {
            assert_eq!(words.count(&c.turns[0].text), 40);
            assert_eq!(c.turns[0].max_tokens, Some(9));
        }
        assert_ne!(a[0].turns[0].text, a[1].turns[0].text, "different places in the corpus");
    }

    #[test]
    fn synthetic_prompts_share_no_leading_block() {
        // 30 words: cut at random places, 300 prompts would share their first words many times.
        let synthetic = Synthetic::new(&Words, TEXT).unwrap();
        let length = Length { mean: 20.0, stddev: 0.0 };
        let prompts = synthetic.conversations(300, length, None, 3);
        let mut leading = std::collections::HashSet::new();
        for c in &prompts {
            let first: Vec<&str> = c.turns[0].text.split_whitespace().take(16).collect();
            assert!(leading.insert(first), "two prompts share their first 16 tokens");
        }
    }

    #[test]
    fn shared_hash_ids_share_a_prefix_and_unique_ones_do_not() {
        let words = Words;
        let mut synthetic = Synthetic::new(&words, TEXT).unwrap();
        synthetic.block_size = 8;
        let trace = "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 4, \"hash_ids\": [1, 2, 3]}\n\
                     {\"timestamp\": 250, \"input_length\": 19, \"output_length\": 4, \"hash_ids\": [1, 2, 9]}\n\
                     {\"timestamp\": 500, \"input_length\": 16, \"hash_ids\": [5, 6]}\n";
        let got = mooncake(trace, &synthetic).unwrap();
        let tokens: Vec<Vec<&str>> = got.iter().map(|c| c.turns[0].text.split_whitespace().collect()).collect();
        assert_eq!(tokens.iter().map(Vec::len).collect::<Vec<_>>(), vec![20, 19, 16]);
        assert_eq!(tokens[0][..16], tokens[1][..16], "blocks 1 and 2 are shared");
        assert_ne!(tokens[0][16..19], tokens[1][16..19], "block 3 is not block 9");
        assert_ne!(tokens[0][..8], tokens[2][..8]);
        assert_eq!(got[1].at, Some(Duration::from_millis(250)));
        assert_eq!(got[2].turns[0].max_tokens, None);
    }

    #[test]
    fn jsonl_reads_single_multi_turn_and_sharegpt_lines() {
        let text = r#"{"text": "hello", "output_length": 12}
{"turns": [{"text": "a"}, {"text": "b", "max_tokens": 3}], "timestamp": 100}
{"conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"}, {"from": "human", "value": "q2"}]}
"#;
        let got = jsonl(text).unwrap();
        assert_eq!(got[0].turns, vec![Turn::new("hello", Some(12))]);
        assert_eq!(got[1].turns.len(), 2);
        assert_eq!(got[1].turns[1].max_tokens, Some(3));
        assert_eq!(got[1].at, Some(Duration::from_millis(100)));
        assert_eq!(got[2].turns.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(), vec!["q1", "q2"]);
        let bad = jsonl("{\"text\": \"x\"}\n{\"nothing\": 1}\n").unwrap_err();
        assert!(format!("{bad:#}").contains("line 2"), "{bad:#}");
    }
}
