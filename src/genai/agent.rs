//! Sends one agent's graph (`dag_jsonl`): the roots at once (after their delays), then each
//! request when [`Release`] frees it, every parent answered. A request's messages are the
//! conversation it continues (that request's messages and the answer the server returned)
//! followed by its own. A request that fails, or that the run's budget refuses, frees none of
//! its children.

use std::future::Future;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};

use super::dag::{Graph, Release};
use super::endpoint::Message;
use super::metrics::Record;

/// Runs `graph` from `origin`; `send(node, messages, intended)` sends one request (`None`: the
/// budget is spent). Returns each sent request's node and record, in the order they ended.
pub async fn run<F, Fut>(graph: &Graph, origin: Instant, intended: Option<Instant>, send: F) -> Vec<(usize, Record)>
where
    F: Fn(usize, Vec<Message>, Option<Instant>) -> Fut,
    Fut: Future<Output = Option<(Record, String)>>,
{
    let mut release = Release::new(graph);
    // Each answered request's conversation, its answer included: what a continuation sends.
    let mut after: Vec<Option<Vec<Message>>> = vec![None; graph.nodes.len()];
    let leave = |node: usize, at: Instant, after: &[Option<Vec<Message>>]| {
        let n = &graph.nodes[node];
        let mut messages = n.history.and_then(|h| after[h].clone()).unwrap_or_default();
        messages.extend(n.messages.iter().map(|(role, text)| Message { role, content: text.clone() }));
        let intended = if n.parents.is_empty() { intended.map(|i| i.max(at)) } else { None };
        let request = send(node, messages.clone(), intended);
        async move {
            tokio::time::sleep_until(at.into()).await;
            (node, messages, request.await)
        }
    };
    let mut pending = FuturesUnordered::new();
    for (node, at) in release.start(origin) {
        pending.push(leave(node, at, &after));
    }
    let mut records = Vec::new();
    while let Some((node, mut messages, sent)) = pending.next().await {
        let Some((record, reply)) = sent else { continue };
        let (ok, end) = (record.ok(), record.end);
        records.push((node, record));
        if !ok {
            continue;
        }
        messages.push(Message { role: "assistant", content: reply });
        after[node] = Some(messages);
        for (child, at) in release.finished(node, end) {
            pending.push(leave(child, at, &after));
        }
    }
    records
}
