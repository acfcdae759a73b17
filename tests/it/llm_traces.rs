//! `perfbench llm --input-file` in AIPerf 0.13's dataset formats, against `perfbench serve
//! --record-requests`, whose lines say when each request arrived and finished (CLOCK_MONOTONIC):
//! - `dag_jsonl`: every request arrives after each of its parents' last token plus its own
//!   delay, and the checker that says so catches a child sent early;
//! - `--fixed-schedule` with `--replay-speedup`: requests arrive in the timestamps' order, each
//!   no earlier than its timestamp divided by the speedup after the first, a delay after the
//!   answer before it (lower bounds only; the division itself is `dataset`'s unit test);
//! - a bad line is one clear error naming it.

use std::collections::HashMap;

use serde_json::Value;

use crate::common::{perfbench, stderr, ServeProcess};
use perfbench::genai::dag::Graph;
use perfbench::genai::dataset;
use perfbench::genai::inputs::{Synthetic, Tokenizer};
use perfbench::plan::generative::DatasetType;

struct Words;
impl Tokenizer for Words {
    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
    fn name(&self) -> String {
        "words".into()
    }
}

/// An agent: it plans, calls three tools at once (one of them two turns long, its second
/// after a pause), sums up 25 ms after the last answer, starts one more tool that it joins two
/// turns later, and ends.
const AGENT: &str = r#"{"session_id": "agent", "turns": [{"messages": [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Plan the work."}], "max_tokens": 6, "spawns": ["search", "read", "calc"]}, {"messages": [{"role": "user", "content": "Sum the results up."}], "max_tokens": 4, "delay": 25, "spawns": [{"children": ["check"], "join_at": 3}]}, {"messages": [{"role": "user", "content": "Go on."}], "max_tokens": 4}, {"messages": [{"role": "user", "content": "Finish."}], "max_tokens": 4}]}
{"session_id": "search", "turns": [{"messages": [{"role": "user", "content": "Search the web."}], "max_tokens": 8}]}
{"session_id": "read", "turns": [{"messages": [{"role": "user", "content": "Read the page."}], "max_tokens": 3}, {"messages": [{"role": "user", "content": "Read on."}], "max_tokens": 3, "delay": 15}]}
{"session_id": "calc", "turns": [{"messages": [{"role": "user", "content": "Add it up."}], "max_tokens": 12, "delay": 10}]}
{"session_id": "check", "turns": [{"messages": [{"role": "user", "content": "Check it."}], "max_tokens": 10}]}
"#;

/// When the server saw a request: its arrival and its finish (ns), and its token counts.
#[derive(Clone, Copy, Debug)]
struct Seen {
    arrival_ns: u64,
    finish_ns: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
}

/// Each request that left before all its parents had finished plus its delay: a line per
/// child and parent. `seen[i]` is request `i` of the graph as the server saw it.
fn early_children(graph: &Graph, seen: &[Seen]) -> Vec<String> {
    let mut early = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        for &p in &node.parents {
            let due = seen[p].finish_ns + node.delay.as_nanos() as u64;
            if seen[i].arrival_ns < due {
                early.push(format!(
                    "{} turn {} arrived {} µs before {} turn {} finished + {:?}",
                    node.session,
                    node.turn,
                    (due - seen[i].arrival_ns) / 1000,
                    graph.nodes[p].session,
                    graph.nodes[p].turn,
                    node.delay
                ));
            }
        }
    }
    early
}

fn server_lines(path: &std::path::Path) -> HashMap<String, Seen> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {l}"));
            let seen = Seen {
                arrival_ns: n("arrival_ns"),
                finish_ns: n("finish_ns"),
                prompt_tokens: n("prompt_tokens"),
                completion_tokens: n("completion_tokens"),
            };
            (v["id"].as_str().unwrap().to_string(), seen)
        })
        .collect()
}

fn exported(dir: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("profile_export.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn run(args: &[&str]) -> std::process::Output {
    let out = perfbench(args);
    assert!(out.status.success(), "perfbench {args:?}: {}", stderr(&out));
    out
}

#[test]
fn every_child_arrives_after_all_its_parents_answered_plus_its_delay() {
    let dir = tempfile::tempdir().unwrap();
    let (file, record, artifacts) =
        (dir.path().join("agent.jsonl"), dir.path().join("seen.jsonl"), dir.path().join("a"));
    std::fs::write(&file, AGENT).unwrap();
    let server = ServeProcess::start(&["--models", "llm", "--record-requests", record.to_str().unwrap()]);
    // Two copies of the agent at once: their requests interleave at the server.
    run(&[
        "llm",
        "-m",
        "llm",
        "-u",
        &server.http,
        "--streaming",
        "--input-file",
        file.to_str().unwrap(),
        "--custom-dataset-type",
        "dag_jsonl",
        "--concurrency",
        "2",
        "--conversation-num",
        "2",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ]);
    let synthetic = Synthetic::new(&Words, "a b c").unwrap();
    let conversations = dataset::parse(AGENT, Some(DatasetType::DagJsonl), &synthetic).unwrap();
    let graph = conversations[0].graph.clone().expect("one agent's graph");
    assert_eq!(graph.nodes.len(), 9);
    let server = server_lines(&record);
    let records = exported(&artifacts);
    assert_eq!(records.len(), 18, "two agents of 9 requests each");
    for session in 0..2u64 {
        let mut seen = vec![None; graph.nodes.len()];
        for r in records.iter().filter(|r| r["metadata"]["session_num"] == session) {
            let m = &r["metadata"];
            assert!(r["error"].is_null(), "{r}");
            let (name, turn) = (m["conversation_id"].as_str().unwrap(), m["turn_index"].as_u64().unwrap() as usize);
            let node =
                graph.nodes.iter().position(|n| n.session == name && n.turn == turn).expect("a node of the graph");
            let id = m["x_request_id"].as_str().unwrap();
            seen[node] = Some(*server.get(id).unwrap_or_else(|| panic!("the server saw {id}")));
        }
        let seen: Vec<Seen> = seen.into_iter().map(|s| s.expect("every node was sent")).collect();
        assert_eq!(early_children(&graph, &seen), Vec::<String>::new(), "agent {session}");
        // Each later turn of the agent resends its conversation with the answers it got.
        for turn in 1..4 {
            let (before, now) =
                (seen[graph_index(&graph, "agent", turn - 1)], seen[graph_index(&graph, "agent", turn)]);
            assert!(now.prompt_tokens > before.prompt_tokens + before.completion_tokens, "{before:?} then {now:?}");
        }
    }
}

fn graph_index(graph: &Graph, session: &str, turn: usize) -> usize {
    graph.nodes.iter().position(|n| n.session == session && n.turn == turn).unwrap()
}

#[test]
fn the_checker_catches_a_child_sent_before_its_parents_finished() {
    let synthetic = Synthetic::new(&Words, "a b c").unwrap();
    let graph = dataset::parse(AGENT, Some(DatasetType::DagJsonl), &synthetic).unwrap()[0].graph.clone().unwrap();
    let at = |arrival_ms: u64, finish_ms: u64| Seen {
        arrival_ns: arrival_ms * 1_000_000,
        finish_ns: finish_ms * 1_000_000,
        prompt_tokens: 0,
        completion_tokens: 0,
    };
    // A schedule that waits for every parent and its delay passes.
    let mut seen: Vec<Seen> = Vec::new();
    for node in &graph.nodes {
        let ready = node.parents.iter().map(|&p| seen[p].finish_ns / 1_000_000).max().unwrap_or(0);
        let arrival = ready + node.delay.as_millis() as u64;
        seen.push(at(arrival, arrival + 40));
    }
    assert_eq!(early_children(&graph, &seen), Vec::<String>::new());
    // A scheduler that ignored the parents sends everything at once: caught.
    let at_once: Vec<Seen> = graph.nodes.iter().map(|_| at(0, 40)).collect();
    let early = early_children(&graph, &at_once);
    assert!(early.iter().any(|e| e.starts_with("search turn 0 arrived 40000 µs before agent turn 0")), "{early:?}");
    // One that waited for only the first tool to answer before the summary: caught too.
    let join = graph_index(&graph, "agent", 1);
    let mut hasty = seen.clone();
    let first_tool = graph_index(&graph, "search", 0);
    hasty[join] = at(seen[first_tool].finish_ns / 1_000_000 + 25, 10_000);
    let early = early_children(&graph, &hasty);
    assert!(early.iter().any(|e| e.starts_with("agent turn 1") && e.contains("calc turn 0")), "{early:?}");
}

#[test]
fn a_fixed_schedule_sends_at_the_timestamps_divided_by_the_speedup() {
    let dir = tempfile::tempdir().unwrap();
    let (file, record, artifacts) = (dir.path().join("t.jsonl"), dir.path().join("seen.jsonl"), dir.path().join("a"));
    // Session a at 0 ms and again at 600 ms; b at 200 ms, then 100 ms after its answer; c at 400 ms.
    std::fs::write(
        &file,
        r#"{"session_id": "a", "turns": [{"text": "first", "timestamp": 0, "output_length": 4}, {"text": "again", "timestamp": 600, "output_length": 4}]}
{"session_id": "b", "turns": [{"text": "second", "timestamp": 200, "output_length": 4}, {"text": "then", "delay": 100, "output_length": 4}]}
{"session_id": "c", "turns": [{"text": "third", "timestamp": 400, "output_length": 4}]}
"#,
    )
    .unwrap();
    let server = ServeProcess::start(&["--models", "llm", "--record-requests", record.to_str().unwrap()]);
    run(&[
        "llm",
        "-m",
        "llm",
        "-u",
        &server.http,
        "--streaming",
        "--input-file",
        file.to_str().unwrap(),
        "--custom-dataset-type",
        "multi_turn",
        "--fixed-schedule",
        "--replay-speedup",
        "2",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ]);
    let server = server_lines(&record);
    let records = exported(&artifacts);
    assert_eq!(records.len(), 5);
    // (conversation, turn) → how the server saw it.
    let mut by_key = HashMap::new();
    for r in &records {
        let m = &r["metadata"];
        let seen = server[m["x_request_id"].as_str().unwrap()];
        by_key.insert((m["conversation_id"].as_str().unwrap().to_string(), m["turn_index"].as_u64().unwrap()), seen);
    }
    let key = |c: &str, t: u64| by_key[&(c.to_string(), t)];
    let (a0, b0, c0, a1, b1) = (key("0", 0), key("1", 0), key("2", 0), key("0", 1), key("1", 1));
    let ms = 1_000_000;
    // At the server: the order of the timestamps, and each first turn no earlier than its
    // instant after the first one's (less that one's own send lag, and 20 ms for its bytes to
    // reach the server: a lower bound only).
    let arrivals = [a0.arrival_ns, b0.arrival_ns, c0.arrival_ns, a1.arrival_ns];
    assert!(arrivals.windows(2).all(|w| w[0] < w[1]), "{arrivals:?}");
    let first_lag = records
        .iter()
        .find(|r| r["metadata"]["conversation_id"] == "0" && r["metadata"]["turn_index"] == 0)
        .and_then(|r| r["metadata"]["send_lag_ns"].as_u64())
        .unwrap();
    for (seen, offset) in [(b0, 100), (c0, 200), (a1, 300)] {
        let gap = seen.arrival_ns - a0.arrival_ns;
        assert!(gap + first_lag + 20 * ms >= offset * ms, "arrived {gap} ns after the first, meant {offset} ms");
    }
    assert!(b1.arrival_ns >= b0.finish_ns + 50 * ms, "b's delay, halved, after its answer");
}

#[test]
fn a_bad_line_is_one_clear_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.jsonl");
    std::fs::write(
        &file,
        "{\"session_id\": \"a\", \"turns\": [{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"spawns\": [\"b\"]}]}\n\
         {\"session_id\": \"b\", \"turns\": [{\"messages\": [{\"role\": \"user\", \"content\": \"y\"}], \"forks\": [\"a\"]}]}\n",
    )
    .unwrap();
    let out =
        perfbench(&["llm", "-m", "llm", "--input-file", file.to_str().unwrap(), "--custom-dataset-type", "dag-jsonl"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("line 1: the branches make a cycle: a -> b -> a"), "{err}");
    let out = perfbench(&[
        "llm",
        "-m",
        "llm",
        "--fixed-schedule",
        "--concurrency",
        "2",
        "--input-file",
        file.to_str().unwrap(),
    ]);
    assert!(stderr(&out).contains("no --concurrency or --request-rate"), "{}", stderr(&out));
}
