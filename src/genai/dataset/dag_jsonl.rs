//! AIPerf 0.13's `dag_jsonl`: one session a line, `{"session_id": ..., "turns": [...]}`, each
//! turn `messages` (appended to the session's conversation, which also carries the answers the
//! server returned), `max_tokens`, `model`, `tools`, `extra`, `delay` (ms), and the branches
//! it starts once answered:
//! - `spawns`: child sessions that start fresh; a bare id joins on the parent's next turn
//!   (which waits for every node of the child's subtree), `{"children": [...], "join_at": K}`
//!   on turn K. Several children are a fan-out (parallel tool calls), the join a fan-in.
//! - `forks`: child sessions that continue the parent's conversation; a bare id ends the
//!   parent (the fork is on its last turn), `{"child": ..., "background": true}` lets it go on.
//!
//! Sessions no other names are roots: each root with everything it starts is one graph, one
//! conversation of the run (a unit of `--concurrency`, kept whole within a shard). AIPerf's
//! orchestrator sessions (`orchestrator`, `rounds`, `think_time_*`, `pre_session_spawns`) and
//! `context_mode` are refused by name.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use anyhow::{anyhow, bail};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::super::dag::{Graph, Node};
use super::super::inputs::Conversation;
use super::{lines, millis};

/// Requests one root may expand to (spawned sessions are templates: each use is a copy).
const MAX_NODES: usize = 1_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Session {
    session_id: String,
    turns: Vec<DagTurn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DagTurn {
    messages: Vec<Value>,
    model: Option<String>,
    max_tokens: Option<u32>,
    tools: Option<Vec<Value>>,
    extra: Option<Map<String, Value>>,
    #[serde(default)]
    forks: Vec<Fork>,
    #[serde(default)]
    spawns: Vec<Spawn>,
    #[serde(default)]
    delay: f64,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Fork {
    Id(String),
    Entry(ForkEntry),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkEntry {
    child: String,
    #[serde(default)]
    background: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Spawn {
    Id(String),
    Entry(SpawnEntry),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnEntry {
    children: Vec<String>,
    join_at: Option<usize>,
}

/// AIPerf's keys that perfbench does not replay.
const REFUSED: [&str; 9] = [
    "orchestrator",
    "spawns",
    "rounds",
    "think_time_ms",
    "think_time_sigma",
    "think_time_min_ms",
    "think_time_max_ms",
    "pre_session_spawns",
    "context_mode",
];

/// A session's line, for messages.
struct Line {
    number: usize,
    session: Session,
}

/// The file as graphs, one per root session.
pub fn read(text: &str) -> anyhow::Result<Vec<Conversation>> {
    let mut sessions: Vec<Line> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for (number, json) in lines(text) {
        let value: Value = serde_json::from_str(json).map_err(|e| anyhow!("line {number}: {e}"))?;
        if let Some(key) = REFUSED.iter().find(|k| value.get(**k).is_some()) {
            bail!("line {number}: \"{key}\" (an orchestrator session of AIPerf's) is not replayed by perfbench");
        }
        let session: Session = serde_json::from_value(value).map_err(|e| anyhow!("line {number}: {e}"))?;
        if session.turns.is_empty() {
            bail!("line {number}: session '{}' has no turns", session.session_id);
        }
        if let Some(&other) = by_id.get(&session.session_id) {
            bail!("line {number}: session '{}' is also line {}", session.session_id, sessions[other].number);
        }
        by_id.insert(session.session_id.clone(), sessions.len());
        sessions.push(Line { number, session });
    }
    let children = check_branches(&sessions, &by_id)?;
    let named: HashSet<usize> = children.iter().flatten().copied().collect();
    let mut out = Vec::new();
    for root in (0..sessions.len()).filter(|k| !named.contains(k)) {
        let mut builder = Builder { sessions: &sessions, by_id: &by_id, nodes: Vec::new(), uses: HashMap::new() };
        builder.session(root, None, None)?;
        let graph = Graph::new(builder.nodes).map_err(|e| anyhow!("line {}: {e}", sessions[root].number))?;
        out.push(Conversation { graph: Some(Arc::new(graph)), ..Conversation::default() });
    }
    if out.is_empty() && !sessions.is_empty() {
        bail!("every session is started by another: the branches make a cycle");
    }
    Ok(out)
}

/// Each session's children (by index), after checking every branch names a known session,
/// each join lands on a later turn, a foreground fork is on the last turn, and no session
/// leads back to itself.
fn check_branches(sessions: &[Line], by_id: &HashMap<String, usize>) -> anyhow::Result<Vec<Vec<usize>>> {
    let mut children = vec![Vec::new(); sessions.len()];
    for (k, line) in sessions.iter().enumerate() {
        let (n, id) = (line.number, &line.session.session_id);
        let last = line.session.turns.len() - 1;
        for (t, turn) in line.session.turns.iter().enumerate() {
            let mut named = Vec::new();
            for fork in &turn.forks {
                let (child, background) = match fork {
                    Fork::Id(child) => (child, false),
                    Fork::Entry(ForkEntry { child, background }) => (child, *background),
                };
                if !background && t != last {
                    bail!(
                        "line {n}: session '{id}' turn {t} forks '{child}' but is not its last turn \
                         (fork on the last turn, or give the fork \"background\": true)"
                    );
                }
                named.push(child);
            }
            for spawn in &turn.spawns {
                match spawn {
                    Spawn::Id(child) => named.push(child),
                    Spawn::Entry(SpawnEntry { children, join_at }) => {
                        if let Some(j) = join_at.filter(|j| *j <= t || *j > last) {
                            bail!("line {n}: session '{id}' turn {t} joins its spawns at turn {j}, not a later turn of its {} turns", last + 1);
                        }
                        named.extend(children);
                    }
                }
            }
            for child in named {
                let Some(&c) = by_id.get(child.as_str()) else {
                    bail!("line {n}: session '{id}' turn {t} starts unknown session '{child}'");
                };
                children[k].push(c);
            }
        }
    }
    // Depth first from every session: a session met again on its own path is a cycle.
    fn visit(
        k: usize,
        children: &[Vec<usize>],
        path: &mut Vec<usize>,
        done: &mut HashSet<usize>,
        sessions: &[Line],
    ) -> anyhow::Result<()> {
        if let Some(from) = path.iter().position(|p| *p == k) {
            let ids: Vec<&str> =
                path[from..].iter().chain([&k]).map(|&p| sessions[p].session.session_id.as_str()).collect();
            bail!("line {}: the branches make a cycle: {}", sessions[k].number, ids.join(" -> "));
        }
        if done.contains(&k) {
            return Ok(());
        }
        path.push(k);
        for &c in &children[k] {
            visit(c, children, path, done, sessions)?;
        }
        path.pop();
        done.insert(k);
        Ok(())
    }
    let mut done = HashSet::new();
    for k in 0..sessions.len() {
        visit(k, &children, &mut Vec::new(), &mut done, sessions)?;
    }
    Ok(children)
}

/// Expands sessions into one graph's nodes, parents before children.
struct Builder<'a> {
    sessions: &'a [Line],
    by_id: &'a HashMap<String, usize>,
    nodes: Vec<Node>,
    /// Copies made of each session, to name the later ones `id#2`, `id#3`...
    uses: HashMap<usize, usize>,
}

impl Builder<'_> {
    /// Adds session `k`'s turns (its first after `parent`, continuing `history`) and all it
    /// starts; returns its subtree's last nodes, those no node of it waits for: what a join waits for.
    fn session(&mut self, k: usize, parent: Option<usize>, history: Option<usize>) -> anyhow::Result<Vec<usize>> {
        let line = &self.sessions[k];
        let uses = self.uses.entry(k).or_insert(0);
        *uses += 1;
        let name = match *uses {
            1 => line.session.session_id.clone(),
            n => format!("{}#{n}", line.session.session_id),
        };
        let start = self.nodes.len();
        let (mut previous, mut history) = (parent, history);
        let mut joins: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (t, turn) in line.session.turns.iter().enumerate() {
            if self.nodes.len() >= MAX_NODES {
                bail!("line {}: the sessions it starts make more than {MAX_NODES} requests", line.number);
            }
            let at = |e: String| anyhow!("line {}: session '{}' turn {t}: {e}", line.number, line.session.session_id);
            let mut parents: Vec<usize> = previous.into_iter().collect();
            parents.extend(joins.remove(&t).unwrap_or_default());
            let mut extra = turn.extra.clone().unwrap_or_default();
            if let Some(model) = &turn.model {
                extra.insert("model".into(), Value::String(model.clone()));
            }
            if let Some(tools) = &turn.tools {
                extra.insert("tools".into(), Value::Array(tools.clone()));
            }
            let me = self.nodes.len();
            self.nodes.push(Node {
                session: name.clone(),
                turn: t,
                history,
                messages: turn.messages.iter().map(message).collect::<Result<_, _>>().map_err(at)?,
                max_tokens: turn.max_tokens,
                extra,
                parents,
                delay: millis(turn.delay, "delay").map_err(|e| at(e.to_string()))?,
            });
            (previous, history) = (Some(me), Some(me));
            for spawn in &turn.spawns {
                let (children, join) = match spawn {
                    Spawn::Id(child) => (std::slice::from_ref(child), t + 1),
                    Spawn::Entry(SpawnEntry { children, join_at }) => (children.as_slice(), join_at.unwrap_or(t + 1)),
                };
                for child in children {
                    let leaves = self.session(self.by_id[child.as_str()], Some(me), None)?;
                    // A spawn on the last turn has no turn to join: it runs on its own.
                    joins.entry(join).or_default().extend(leaves);
                }
            }
            for fork in &turn.forks {
                let child = match fork {
                    Fork::Id(child) | Fork::Entry(ForkEntry { child, .. }) => child,
                };
                self.session(self.by_id[child.as_str()], Some(me), Some(me))?;
            }
        }
        let waited: HashSet<usize> = self.nodes[start..].iter().flat_map(|n| n.parents.iter().copied()).collect();
        Ok((start..self.nodes.len()).filter(|i| !waited.contains(i)).collect())
    }
}

/// One OpenAI message: its role and its text (a string, or the text parts of a list).
fn message(value: &Value) -> Result<(&'static str, String), String> {
    let role = match value.get("role").and_then(Value::as_str) {
        Some("system") => "system",
        Some("developer") => "developer",
        Some("user") => "user",
        Some("assistant") => "assistant",
        Some("tool") => "tool",
        Some(other) => return Err(format!("message role {other:?} (system, developer, user, assistant or tool)")),
        None => return Err("a message without a \"role\"".into()),
    };
    let text = match value.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        None | Some(Value::Null) => String::new(),
        Some(_) => return Err("a message's \"content\" is a string or a list of parts".into()),
    };
    Ok((role, text))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn user(text: &str) -> String {
        format!("[{{\"role\": \"user\", \"content\": \"{text}\"}}]")
    }

    /// An agent: plan, then three tool calls at once, then a summary after all three; one
    /// tool's session forks a follow-up in the background.
    fn agent() -> String {
        [
            format!(
                "{{\"session_id\": \"agent\", \"turns\": [{{\"messages\": [{{\"role\": \"system\", \"content\": \"be an agent\"}}, \
                 {{\"role\": \"user\", \"content\": \"plan\"}}], \"max_tokens\": 8, \"spawns\": [\"search\", \"read\", \"calc\"]}}, \
                 {{\"messages\": {}, \"delay\": 20}}]}}",
                user("sum up")
            ),
            format!("{{\"session_id\": \"search\", \"turns\": [{{\"messages\": {}, \"delay\": 5}}]}}", user("search")),
            format!("{{\"session_id\": \"read\", \"turns\": [{{\"messages\": {}, \"forks\": [{{\"child\": \"more\", \"background\": true}}]}}, {{\"messages\": {}}}]}}", user("read"), user("read on")),
            format!("{{\"session_id\": \"calc\", \"turns\": [{{\"messages\": {}, \"extra\": {{\"temperature\": 0}}}}]}}", user("calc")),
            format!("{{\"session_id\": \"more\", \"turns\": [{{\"messages\": {}}}]}}", user("more")),
        ]
        .join("\n")
    }

    #[test]
    fn spawns_fan_out_and_the_next_turn_joins_them_all() {
        let got = read(&agent()).unwrap();
        assert_eq!(got.len(), 1, "one root: the agent");
        let g = &got[0].graph.as_ref().unwrap().nodes;
        let names: Vec<(&str, usize)> = g.iter().map(|n| (n.session.as_str(), n.turn)).collect();
        assert_eq!(
            names,
            [("agent", 0), ("search", 0), ("read", 0), ("more", 0), ("read", 1), ("calc", 0), ("agent", 1)]
        );
        assert_eq!(g[0].messages, [("system", "be an agent".to_string()), ("user", "plan".to_string())]);
        assert_eq!((g[0].max_tokens, g[1].delay), (Some(8), Duration::from_millis(5)));
        assert_eq!(g[1].parents, [0], "a tool call waits for the plan");
        assert_eq!((g[1].history, g[4].history), (None, Some(2)), "a spawn starts fresh; its next turn continues it");
        assert_eq!((g[3].parents.as_slice(), g[3].history), (&[2][..], Some(2)), "a fork continues its parent");
        assert_eq!(g[5].extra["temperature"], serde_json::json!(0));
        // The summary waits for the plan's turn and every last node of each tool's subtree.
        assert_eq!(g[6].parents, [0, 1, 3, 4, 5]);
        assert_eq!((g[6].history, g[6].delay), (Some(0), Duration::from_millis(20)));
    }

    #[test]
    fn bad_graphs_are_refused_naming_the_line() {
        let one = |id: &str, extra: &str| {
            format!("{{\"session_id\": \"{id}\", \"turns\": [{{\"messages\": {}{extra}}}]}}", user("x"))
        };
        for (text, needle) in [
            (format!("{}\n{}", one("a", ", \"spawns\": [\"b\"]"), one("b", ", \"spawns\": [\"a\"]")), "cycle"),
            (
                format!("{}\n{}\n{}", one("r", ""), one("a", ", \"spawns\": [\"b\"]"), one("b", ", \"forks\": [\"a\"]")),
                "line 2: the branches make a cycle: a -> b -> a",
            ),
            (one("a", ", \"spawns\": [\"ghost\"]"), "line 1: session 'a' turn 0 starts unknown session 'ghost'"),
            (format!("{}\n{}", one("a", ""), one("a", "")), "line 2: session 'a' is also line 1"),
            (one("a", ", \"spawns\": [{\"children\": [\"a\"], \"join_at\": 0}]"), "line 1: session 'a' turn 0 joins"),
            (one("a", ", \"temperature\": 1"), "line 1: unknown field `temperature`"),
            (one("a", ", \"delay\": -1"), "0 or more"),
            ("{\"session_id\": \"o\", \"orchestrator\": true, \"spawns\": [\"a\"]}".into(), "line 1: \"orchestrator\""),
            ("{\"session_id\": \"a\", \"turns\": []}".into(), "line 1: session 'a' has no turns"),
            (
                format!(
                    "{{\"session_id\": \"a\", \"turns\": [{{\"messages\": {}, \"forks\": [\"b\"]}}, {{\"messages\": {}}}]}}\n{}",
                    user("x"),
                    user("y"),
                    one("b", "")
                ),
                "line 1: session 'a' turn 0 forks 'b' but is not its last turn",
            ),
            ("{\"session_id\": \"a\", \"turns\": [{\"messages\": [{\"content\": \"x\"}]}]}".into(), "line 1: session 'a' turn 0: a message without a \"role\""),
        ] {
            let err = read(&text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}\n=> {err}");
        }
    }
}
