//! `perfbench llm` synthetic sessions (AIPerf's `--conversation-*` flags): against a stub that
//! checks every later turn, each turn resends the history with the answers the server actually
//! returned, after its think time; the records name their session, conversation and turn; and
//! against the bundled twin, later turns find the shared system prompt and the history in its
//! prefix cache (`usage.prompt_tokens_details.cached_tokens`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::common::{perfbench, stderr};

/// What the stub saw.
#[derive(Default)]
struct Seen {
    /// Each answered conversation (its messages, as JSON) → the answer sent and when.
    answered: HashMap<String, (String, Instant)>,
    /// Requests answered.
    requests: usize,
    /// For each later turn: the gap from the previous turn's answer to its arrival.
    think_gaps: Vec<Duration>,
    /// System prompts seen.
    systems: Vec<String>,
}

/// A chat endpoint that answers each request with a text of its own and refuses (409) a later
/// turn whose history is not a conversation it answered, followed by the answer it sent.
async fn chat(State(seen): State<Arc<Mutex<Seen>>>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let arrived = Instant::now();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let mut seen = seen.lock();
    if let Some(system) = messages.first().filter(|m| m["role"] == "system") {
        seen.systems.push(system["content"].as_str().unwrap_or_default().to_string());
    }
    let assistant_turns = messages.iter().filter(|m| m["role"] == "assistant").count();
    if assistant_turns > 0 {
        // [..., earlier conversation, its answer, this user turn].
        let n = messages.len();
        let earlier = serde_json::to_string(&messages[..n - 2]).unwrap();
        let answer = messages[n - 2]["content"].as_str().unwrap_or_default();
        match seen.answered.get(&earlier) {
            Some((sent, at)) if sent == answer && messages[n - 2]["role"] == "assistant" => {
                let gap = arrived.saturating_duration_since(*at);
                seen.think_gaps.push(gap);
            }
            _ => {
                let error = format!("history does not end with the answer this server sent: {answer:?}");
                return (StatusCode::CONFLICT, Json(json!({"error": {"message": error}})));
            }
        }
    }
    seen.requests += 1;
    let answer = format!(" answer number {}", seen.requests);
    let key = serde_json::to_string(&messages).unwrap();
    let reply = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                  "prompt_tokens_details": {"cached_tokens": 4 * assistant_turns}},
    });
    // The answer leaves as this handler returns: the think time counts from here.
    seen.answered.insert(key, (answer, Instant::now()));
    (StatusCode::OK, Json(reply))
}

async fn stub() -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(chat)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

async fn llm(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || perfbench(&args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap()
}

fn jsonl(dir: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("profile_export.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

const THINK_MS: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_later_turn_carries_the_real_answers_after_its_think_time_and_is_recorded_as_aiperf_does() {
    let (url, seen) = stub().await;
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("a");
    let args = [
        "llm",
        "-m",
        "m",
        "-u",
        &url,
        "--concurrency",
        "2",
        "--conversation-num",
        "4",
        "--conversation-turn-mean",
        "3",
        "--conversation-turn-delay-mean",
        &THINK_MS.to_string(),
        "--shared-system-prompt-length",
        "16",
        "--synthetic-input-tokens-mean",
        "8",
        "--output-tokens-mean",
        "3",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ];
    let out = llm(args.iter().map(|s| s.to_string()).collect()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    {
        let seen = seen.lock();
        assert_eq!(seen.requests, 12, "4 sessions × 3 turns, every one accepted by the history check\n{stdout}");
        assert_eq!(seen.think_gaps.len(), 8, "two later turns per session");
        let think = Duration::from_millis(THINK_MS);
        assert!(seen.think_gaps.iter().all(|gap| *gap >= think), "{:?}", seen.think_gaps);
        assert_eq!(seen.systems.len(), 12, "every turn opens with the system prompt");
        assert!(seen.systems.iter().all(|s| *s == seen.systems[0]), "one system prompt shared by all");
    }
    // The check can fail: a history with an answer the server never sent is refused.
    let canned = json!({"model": "m", "messages": [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": " a canned answer"},
        {"role": "user", "content": "q2"}]});
    perfbench::proto::install_crypto_provider();
    let status = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(canned.to_string())
        .send()
        .await;
    assert_eq!(status.unwrap().status(), 409);

    let lines = jsonl(&artifacts);
    assert_eq!(lines.len(), 12);
    let mut turns: HashMap<u64, Vec<u64>> = HashMap::new();
    for line in &lines {
        let meta = &line["metadata"];
        assert!(meta["conversation_id"].is_string(), "{meta}");
        let session = meta["session_num"].as_u64().expect("session_num");
        turns.entry(session).or_default().push(meta["turn_index"].as_u64().expect("turn_index"));
        let cached = line["metrics"]["usage_prompt_cache_read_tokens"]["value"].as_f64().unwrap();
        assert_eq!(cached, 4.0 * meta["turn_index"].as_f64().unwrap(), "{line}");
    }
    assert_eq!(turns.len(), 4, "{turns:?}");
    for list in turns.values_mut() {
        list.sort();
        assert_eq!(*list, vec![0, 1, 2]);
    }
    for row in
        ["Request Latency, turn 0 (ms)", "Request Latency, turn 2 (ms)", "Session Duration (ms)", "Session Count"]
    {
        assert!(stdout.contains(row), "{row}:\n{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_turns_hit_the_twins_prefix_cache() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("a");
    let args = [
        "llm",
        "-m",
        "llm",
        "--streaming",
        "--concurrency",
        "2",
        "--conversation-num",
        "3",
        "--conversation-turn-mean",
        "2",
        "--shared-system-prompt-length",
        "64",
        "--synthetic-input-tokens-mean",
        "16",
        "--output-tokens-mean",
        "4",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ];
    let out = llm(args.iter().map(|s| s.to_string()).collect()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = jsonl(&artifacts);
    assert_eq!(lines.len(), 6);
    for line in &lines {
        let cached = line["metrics"]["usage_prompt_cache_read_tokens"]["value"].as_f64().expect("cached tokens");
        if line["metadata"]["turn_index"] == 1 {
            // The system prompt and the first turn were computed by this session's first turn.
            assert!(cached >= 64.0, "{line}");
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Time to First Token, turn 1 (ms)"), "{stdout}");
    assert!(stdout.contains("Prefix cache (server usage)"), "{stdout}");
}
