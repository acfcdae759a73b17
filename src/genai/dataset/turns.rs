//! AIPerf's `single_turn` and `multi_turn` files. A single_turn line is one turn (`text` or
//! `texts`, `timestamp` or `delay` in ms, `role`, `output_length`, `extra`, `session_id`); lines
//! of one `session_id` are one session's turns in file order, a line without one is a session
//! of its own. A multi_turn line is `{"session_id": ..., "turns": [single_turn lines]}`, lines
//! of one `session_id` again joined. A leading `role: "system"` turn becomes the session's
//! system prompt, sent before every turn, as AIPerf hoists it.

use std::collections::HashMap;

use anyhow::{anyhow, bail};
use serde::Deserialize;

use super::super::inputs::{Conversation, Turn};
use super::{lines, millis};

/// One turn as a file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnLine {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    texts: Option<Vec<String>>,
    timestamp: Option<f64>,
    delay: Option<f64>,
    role: Option<String>,
    session_id: Option<String>,
    #[serde(alias = "max_tokens")]
    output_length: Option<u32>,
    extra: Option<serde_json::Map<String, serde_json::Value>>,
}

/// One session as a multi_turn line writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionLine {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    session_id: Option<String>,
    turns: Vec<TurnLine>,
}

/// A turn read, with its role: a leading system turn is the system prompt.
struct Read {
    turn: Turn,
    system: bool,
}

fn turn(line: TurnLine, expected: &str) -> anyhow::Result<Read> {
    if line.kind.as_deref().is_some_and(|k| k != expected) {
        bail!("\"type\": {:?} in a {expected} file", line.kind.unwrap_or_default());
    }
    let text = match (line.text, line.texts) {
        (Some(_), Some(_)) => bail!("text and texts cannot be set together"),
        (Some(text), None) => text,
        (None, Some(texts)) if !texts.is_empty() => texts.join(" "),
        _ => bail!("no text (expected \"text\" or \"texts\")"),
    };
    if line.timestamp.is_some() && line.delay.is_some() {
        bail!("timestamp and delay cannot be set together");
    }
    let system = match line.role.as_deref() {
        None | Some("user") => false,
        Some("system") => true,
        Some(other) => bail!("role {other:?}: a turn is a user turn, or a leading system prompt"),
    };
    Ok(Read {
        turn: Turn {
            max_tokens: line.output_length,
            delay: line.delay.map(|ms| millis(ms, "delay")).transpose()?.unwrap_or_default(),
            at: line.timestamp.map(|ms| millis(ms, "timestamp")).transpose()?,
            extra: line.extra.unwrap_or_default(),
            ..Turn::new(text, None)
        },
        system,
    })
}

/// Sessions in order of their first line; lines of one id join the same session.
#[derive(Default)]
struct Sessions {
    sessions: Vec<Vec<Read>>,
    by_id: HashMap<String, usize>,
}

impl Sessions {
    fn add(&mut self, id: Option<String>, reads: Vec<Read>) {
        let index = match id {
            Some(id) => *self.by_id.entry(id).or_insert_with(|| {
                self.sessions.push(Vec::new());
                self.sessions.len() - 1
            }),
            None => {
                self.sessions.push(Vec::new());
                self.sessions.len() - 1
            }
        };
        self.sessions[index].extend(reads);
    }

    fn finish(self) -> anyhow::Result<Vec<Conversation>> {
        self.sessions.into_iter().map(conversation).collect()
    }
}

/// A session's turns as a conversation: a leading system turn hoisted, the first turn's
/// timestamp the session's.
fn conversation(reads: Vec<Read>) -> anyhow::Result<Conversation> {
    let mut reads = reads.into_iter().peekable();
    let system = reads.next_if(|r| r.system).map(|r| r.turn.text);
    let turns: Vec<Turn> = reads
        .map(|r| match r.system {
            true => Err(anyhow!("a system turn after the first turn of a session")),
            false => Ok(r.turn),
        })
        .collect::<anyhow::Result<_>>()?;
    let Some(first) = turns.first() else { bail!("a session with only a system turn") };
    Ok(Conversation { at: first.at, system, turns, ..Conversation::default() })
}

/// An AIPerf `single_turn` file.
pub fn single_turn(text: &str) -> anyhow::Result<Vec<Conversation>> {
    let mut sessions = Sessions::default();
    for (n, json) in lines(text) {
        let line: TurnLine = serde_json::from_str(json).map_err(|e| anyhow!("line {n}: {e}"))?;
        let id = line.session_id.clone();
        let read = turn(line, "single_turn").map_err(|e| anyhow!("line {n}: {e}"))?;
        sessions.add(id, vec![read]);
    }
    sessions.finish()
}

/// An AIPerf `multi_turn` file.
pub fn multi_turn(text: &str) -> anyhow::Result<Vec<Conversation>> {
    let mut sessions = Sessions::default();
    for (n, json) in lines(text) {
        let line: SessionLine = serde_json::from_str(json).map_err(|e| anyhow!("line {n}: {e}"))?;
        if line.kind.as_deref().is_some_and(|k| k != "multi_turn") {
            bail!("line {n}: \"type\": {:?} in a multi_turn file", line.kind.unwrap_or_default());
        }
        if line.turns.is_empty() {
            bail!("line {n}: at least one turn must be provided");
        }
        let reads = line
            .turns
            .into_iter()
            .enumerate()
            .map(|(k, t)| turn(t, "single_turn").map_err(|e| anyhow!("line {n}, turn {k}: {e}")))
            .collect::<anyhow::Result<Vec<Read>>>()?;
        sessions.add(line.session_id, reads);
    }
    sessions.finish()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn single_turn_lines_are_sessions_of_their_own_unless_they_share_an_id() {
        let text = r#"{"text": "a", "timestamp": 0, "output_length": 5}
{"texts": ["b", "c"], "delay": 250, "session_id": "s"}

{"text": "d", "session_id": "s", "extra": {"temperature": 0.5}}
"#;
        let got = single_turn(text).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].at, got[0].turns[0].max_tokens), (Some(Duration::ZERO), Some(5)));
        let s = &got[1];
        assert_eq!(s.turns.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(), ["b c", "d"]);
        assert_eq!(s.turns[0].delay, Duration::from_millis(250));
        assert_eq!(s.turns[1].extra["temperature"], serde_json::json!(0.5));
        for (bad, needle) in [
            ("{\"text\": \"a\"}\n{\"prompt\": \"b\"}\n", "line 2: unknown field `prompt`"),
            ("{\"text\": \"a\", \"texts\": [\"b\"]}\n", "line 1: text and texts"),
            ("{\"text\": \"a\", \"timestamp\": 1, \"delay\": 2}\n", "timestamp and delay"),
            ("{\"delay\": 2}\n", "line 1: no text"),
            ("{\"text\": \"a\", \"delay\": -2}\n", "0 or more"),
            ("{\"text\": \"a\", \"role\": \"tool\"}\n", "role \"tool\""),
            ("{\"text\": \"a\"\n", "line 1:"),
        ] {
            let err = single_turn(bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn multi_turn_sessions_keep_their_delays_timestamps_and_system_prompt() {
        let text = r#"{"session_id": "a", "turns": [{"role": "system", "text": "be brief"}, {"text": "q1", "timestamp": 100}, {"text": "q2", "timestamp": 900}]}
{"session_id": "b", "turns": [{"text": "r1"}, {"text": "r2", "delay": 1000, "output_length": 3}]}
{"session_id": "a", "turns": [{"text": "q3", "delay": 5}]}
"#;
        let got = multi_turn(text).unwrap();
        assert_eq!(got.len(), 2);
        let a = &got[0];
        assert_eq!(a.system.as_deref(), Some("be brief"));
        assert_eq!(a.turns.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(), ["q1", "q2", "q3"]);
        assert_eq!(a.at, Some(Duration::from_millis(100)));
        assert_eq!(a.turns[1].at, Some(Duration::from_millis(900)));
        assert_eq!(a.turns[2].delay, Duration::from_millis(5));
        assert_eq!((got[1].turns[1].delay, got[1].turns[1].max_tokens), (Duration::from_secs(1), Some(3)));
        assert_eq!(got[1].at, None);
        for (bad, needle) in [
            ("{\"session_id\": \"a\", \"turns\": []}\n", "line 1: at least one turn"),
            (
                "{\"session_id\": \"a\", \"turns\": [{\"text\": \"x\"}, {\"txt\": \"y\"}]}\n",
                "line 1: unknown field `txt`",
            ),
            ("{\"turns\": [{\"text\": \"x\"}, {\"text\": \"y\", \"role\": \"system\"}]}\n", "after the first turn"),
            ("{\"type\": \"single_turn\", \"turns\": [{\"text\": \"x\"}]}\n", "in a multi_turn file"),
        ] {
            let err = multi_turn(bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }
}
