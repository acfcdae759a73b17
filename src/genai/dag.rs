//! An agent's requests as a graph (`--custom-dataset-type dag_jsonl`): each request waits until
//! every one of its parents has answered (its last token), then its own delay. Fan-out is a
//! node with several children (parallel tool calls), fan-in a node with several parents (the
//! agent's next turn after them all). Pure: [`Release`] is told when each request ended and
//! answers when the children it frees may leave; the runner sends them.

use std::ops::Add;
use std::time::Duration;

/// One request of the graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    /// The session it belongs to (a file's `session_id`; `#2` and on when a session is started
    /// more than once), the records' `conversation_id`.
    pub session: String,
    /// Its turn within that session.
    pub turn: usize,
    /// The node whose conversation (its messages and the answer it got) this one continues;
    /// `None`: a fresh conversation.
    pub history: Option<usize>,
    /// Messages added after that history: (role, content).
    pub messages: Vec<(&'static str, String)>,
    pub max_tokens: Option<u32>,
    /// Body fields of its own (`extra`, `tools`, `model`), merged over `--extra-inputs`.
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Requests that must have answered before it leaves; all earlier in the graph.
    pub parents: Vec<usize>,
    /// Wait after the last parent's answer (or after the graph starts, for a root).
    pub delay: Duration,
}

/// Requests in an order where every parent comes before its children.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub nodes: Vec<Node>,
}

impl Graph {
    /// The graph, checked: each parent names an earlier node (so it has no cycle).
    pub fn new(nodes: Vec<Node>) -> Result<Graph, String> {
        for (i, node) in nodes.iter().enumerate() {
            if let Some(&p) = node.parents.iter().find(|&&p| p >= i) {
                return Err(format!("request {i} waits for request {p}, which is not before it"));
            }
            if node.history.is_some_and(|h| h >= i) {
                return Err(format!("request {i} continues a conversation that is not before it"));
            }
        }
        Ok(Graph { nodes })
    }

    /// Every delay divided by `speedup` (`--replay-speedup`), or dropped.
    pub fn retime(&mut self, speedup: f64, ignore: bool) {
        for node in &mut self.nodes {
            node.delay = if ignore { Duration::ZERO } else { node.delay.div_f64(speedup) };
        }
    }
}

/// When each request may leave: `max(parents' ends) + delay`, a root's from the start.
/// `T` is an instant (`Instant`, or a `Duration` from an origin in tests).
pub struct Release<T> {
    /// Parents not yet answered, per node.
    waiting: Vec<usize>,
    /// The latest end among the parents answered so far.
    latest: Vec<Option<T>>,
    children: Vec<Vec<usize>>,
    delays: Vec<Duration>,
}

impl<T: Copy + Ord + Add<Duration, Output = T>> Release<T> {
    pub fn new(graph: &Graph) -> Release<T> {
        let n = graph.nodes.len();
        let mut children = vec![Vec::new(); n];
        for (i, node) in graph.nodes.iter().enumerate() {
            for &p in &node.parents {
                children[p].push(i);
            }
        }
        Release {
            waiting: graph.nodes.iter().map(|n| n.parents.len()).collect(),
            latest: vec![None; n],
            children,
            delays: graph.nodes.iter().map(|n| n.delay).collect(),
        }
    }

    /// The roots and when they leave, the graph starting at `origin`.
    pub fn start(&self, origin: T) -> Vec<(usize, T)> {
        (0..self.waiting.len()).filter(|&i| self.waiting[i] == 0).map(|i| (i, origin + self.delays[i])).collect()
    }

    /// `node` answered at `end`: the children that now have all their parents' answers, each
    /// with when it leaves. A request that failed is never reported, so its children never leave.
    pub fn finished(&mut self, node: usize, end: T) -> Vec<(usize, T)> {
        let mut freed = Vec::new();
        for &child in &self.children[node] {
            let latest = self.latest[child].map_or(end, |t| t.max(end));
            self.latest[child] = Some(latest);
            self.waiting[child] -= 1;
            if self.waiting[child] == 0 {
                freed.push((child, latest + self.delays[child]));
            }
        }
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(parents: &[usize], delay_ms: u64) -> Node {
        Node { parents: parents.to_vec(), delay: Duration::from_millis(delay_ms), ..Node::default() }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_child_leaves_after_its_last_parent_plus_its_delay() {
        // 0 fans out to 1, 2, 3 (tool calls); 4 joins them; 5 follows 4.
        let graph = Graph::new(vec![
            node(&[], 5),
            node(&[0], 0),
            node(&[0], 10),
            node(&[0], 0),
            node(&[1, 2, 3], 7),
            node(&[4], 0),
        ])
        .unwrap();
        let mut release = Release::new(&graph);
        assert_eq!(release.start(ms(100)), vec![(0, ms(105))]);
        assert_eq!(release.finished(0, ms(150)), vec![(1, ms(150)), (2, ms(160)), (3, ms(150))]);
        assert_eq!(release.finished(3, ms(300)), vec![], "4 still waits for 1 and 2");
        assert_eq!(release.finished(1, ms(200)), vec![]);
        // The last to answer is not the latest: the release counts from the latest end.
        assert_eq!(release.finished(2, ms(250)), vec![(4, ms(307))]);
        assert_eq!(release.finished(4, ms(400)), vec![(5, ms(400))]);
    }

    #[test]
    fn a_failed_parent_holds_its_children_back() {
        let graph = Graph::new(vec![node(&[], 0), node(&[], 0), node(&[0, 1], 0)]).unwrap();
        let mut release = Release::new(&graph);
        assert_eq!(release.start(ms(0)).len(), 2);
        assert_eq!(release.finished(0, ms(10)), vec![], "1 never answers: 2 never leaves");
    }

    #[test]
    fn a_parent_after_its_child_is_refused() {
        let err = Graph::new(vec![node(&[1], 0), node(&[], 0)]).unwrap_err();
        assert!(err.contains("request 0 waits for request 1"), "{err}");
        let mut graph = Graph::new(vec![node(&[], 40), node(&[0], 10)]).unwrap();
        graph.retime(2.0, false);
        assert_eq!(graph.nodes.iter().map(|n| n.delay).collect::<Vec<_>>(), [ms(20), ms(5)]);
        graph.retime(2.0, true);
        assert!(graph.nodes.iter().all(|n| n.delay.is_zero()));
    }
}
